"""Kernels for bbcluster's --backend flag_gems: FlagGems (the flag-gems package, Triton
kernels) as the implementation of every aten operator it registers.

    python bbcluster_flag_gems.py OUT_DIR OPS_FILE

OPS_FILE holds one aten operator a line (aten.relu.default). For each operator FlagGems
registers, OUT_DIR/<folder>/<folder>_implementation_v1.py is written in BackendBench's
directory layout; its <folder>_kernel_impl calls the function FlagGems registers for that
aten overload (FlagGems' _FULL_CONFIG: "relu" for aten.relu.default, "add.Tensor" for
aten.add.Tensor, with the condition an entry may carry). OUT_DIR/coverage.json lists the
operators covered and those FlagGems lacks, with FlagGems' version.
"""

import json
import os
import shutil
import sys

KERNEL = '''# {op} through FlagGems: the function FlagGems {version} registers for aten::{key}.
# Written by bbcluster --backend flag_gems; the node's FlagGems is looked up when it loads.
import flag_gems


def _registered(name):
    for entry in flag_gems._FULL_CONFIG:
        if entry[0] == name:
            return entry[1]
    raise ImportError("FlagGems " + flag_gems.__version__ + " registers no aten::" + name)


_impl = _registered({key!r})


def {folder}_kernel_impl(*args, **kwargs):
    return _impl(*args, **kwargs)
'''


def flag_gems_key(op):
    """aten.relu.default -> relu, aten.add.Tensor -> add.Tensor (FlagGems' names)."""
    name = op[len("aten."):] if op.startswith("aten.") else op
    base, _, overload = name.partition(".")
    return base if overload in ("", "default") else base + "." + overload


def folder_name(op):
    """BackendBench's folder: the name without aten., every '.' as '__'."""
    name = op[len("aten."):] if op.startswith("aten.") else op
    if "." not in name:
        name += ".default"
    return name.replace(".", "__")


def registered_keys(flag_gems):
    config = getattr(flag_gems, "_FULL_CONFIG", None)
    if config is None:
        raise SystemExit(f"FlagGems {getattr(flag_gems, '__version__', '?')} has no _FULL_CONFIG "
                         "(the table of the aten operators it registers); bbcluster reads "
                         "FlagGems 3 and later")
    keys = {}
    for entry in config:
        condition = entry[2] if len(entry) > 2 else None
        if callable(condition) and not condition():
            continue
        keys.setdefault(entry[0], entry[1])
    return keys


def write_atomically(path, text):
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as out:
        out.write(text)
    os.replace(temporary, path)


def main(argv):
    if len(argv) != 3:
        print("usage: bbcluster_flag_gems.py OUT_DIR OPS_FILE", file=sys.stderr)
        return 2
    out_dir, ops_file = argv[1], argv[2]
    try:
        import flag_gems
    except ImportError as e:
        print(f"FlagGems is not importable by {sys.executable} ({e}); install it with: "
              f"{sys.executable} -m pip install flag-gems", file=sys.stderr)
        return 1
    keys = registered_keys(flag_gems)
    with open(ops_file) as f:
        ops = [line.strip() for line in f if line.strip()]
    version = getattr(flag_gems, "__version__", "?")
    os.makedirs(out_dir, exist_ok=True)
    covered, lacking = [], []
    for op in ops:
        key = flag_gems_key(op)
        if key not in keys:
            lacking.append(op)
            continue
        folder = folder_name(op)
        os.makedirs(os.path.join(out_dir, folder), exist_ok=True)
        write_atomically(os.path.join(out_dir, folder, f"{folder}_implementation_v1.py"),
                         KERNEL.format(op=op, version=version, key=key, folder=folder))
        covered.append(op)
    # A folder left by an earlier FlagGems that covered more: not this run's kernel.
    folders = {folder_name(op) for op in covered}
    for name in os.listdir(out_dir):
        if os.path.isdir(os.path.join(out_dir, name)) and name not in folders:
            shutil.rmtree(os.path.join(out_dir, name), ignore_errors=True)
    write_atomically(os.path.join(out_dir, "coverage.json"),
                     json.dumps({"version": version, "covered": covered, "lacking": lacking},
                                indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
