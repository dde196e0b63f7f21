"""bbcluster's opinfo suite: PyTorch's OpInfo sample inputs, selected as BackendBench's
suite/opinfo.py selects them, and regenerated where they run.

A sample never travels: a job names it as (OpInfo name, variant, dtype, sample index, seed),
written as the input text

    opinfo(<name>, <variant>, <dtype>, <index>, seed=<seed>)

and the runner calls sample_call() on its own device, which seeds torch and random with the
seed before listing the OpInfo's samples, so every runner builds the same ones.

    python bbcluster_opinfo.py plan DEVICE DTYPE SEED OUT.json [TOKEN...]
        The suite: for every OpInfo of op_db (those TOKENs match, or all) as BackendBench
        keeps them (a dotted name only under nn.functional, DTYPE supported on DEVICE, not
        nonzero_static, samples that list without error), the samples whose call traces to
        exactly one aten operator and whose result matches that operator's called directly.
        A TOKEN matches an OpInfo by its name (BackendBench's rule), its name under
        nn.functional, or its aten name; aten.X.Y and X.Y match as X. OUT.json: {"torch",
        "device", "dtype", "ops": [{"op": "aten.X.Y", "inputs": [text, ...]}, ...],
        "unusable": ["NAME: why none of its samples is kept", ...]}.
    python bbcluster_opinfo.py hash TEXT DEVICE
        A SHA-256 of the sample TEXT names, built on DEVICE (its tensors' bytes and its
        other values), to check that two processes build the same sample.
"""

import hashlib
import json
import os
import random
import re
import sys
from collections import OrderedDict, defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode

DTYPES = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
    "float64": torch.float64,
}
TEXT = re.compile(r"^opinfo\(([^,]+), ([^,]*), ([a-z0-9]+), (\d+), seed=(\d+)\)$")

_op_db = None
_samples = {}


def op_db():
    global _op_db
    if _op_db is None:
        try:
            from torch.testing._internal.common_methods_invocations import op_db as db
        except ImportError as e:
            raise ImportError(
                f"torch {torch.__version__} has no usable OpInfo database "
                f"(torch.testing._internal.common_methods_invocations: {e}); it needs the "
                "expecttest package, which scripts/setup.sh installs") from e
        _op_db = db
    return _op_db


def sample_text(name, variant, dtype, index, seed):
    return f"opinfo({name}, {variant}, {dtype}, {index}, seed={seed})"


def parse_text(text):
    m = TEXT.match(text)
    if not m:
        raise ValueError(f"not an opinfo sample: {text!r} (expected "
                         "'opinfo(NAME, VARIANT, DTYPE, INDEX, seed=SEED)')")
    name, variant, dtype, index, seed = m.groups()
    if dtype not in DTYPES:
        raise ValueError(f"{text}: dtype {dtype} is not one of {', '.join(DTYPES)}")
    return name, variant, dtype, int(index), int(seed)


def find_opinfo(name, variant):
    for op in op_db():
        if op.name == name and op.variant_test_name == variant:
            return op
    raise LookupError(f"torch {torch.__version__} has no OpInfo {name!r}"
                      + (f" (variant {variant!r})" if variant else ""))


def samples(op, device, dtype, seed):
    """The OpInfo's samples, listed after seeding every generator with `seed`."""
    key = (op.name, op.variant_test_name, str(device), dtype, seed)
    if key not in _samples:
        torch.manual_seed(seed)
        random.seed(seed)
        _samples.clear()  # one OpInfo's samples at a time: a job uses one
        _samples[key] = list(op.sample_inputs(device, dtype))
    return _samples[key]


def sample_call(text, device):
    """(args, kwargs) of the sample `text` names, on `device`: the OpInfo's input first."""
    name, variant, dtype, index, seed = parse_text(text)
    op = find_opinfo(name, variant)
    listed = samples(op, device, DTYPES[dtype], seed)
    if index >= len(listed):
        raise IndexError(f"{text}: OpInfo {name} has {len(listed)} samples here, not {index + 1}")
    s = listed[index]
    return (s.input, *s.args), dict(s.kwargs)


class _Tracer(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, fn, types, args=(), kwargs=None):
        self.ops.append(fn)
        return fn(*args, **(kwargs or {}))


def allclose(a, b):
    """As BackendBench's allclose: tensors within 1e-2, sequences element by element."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor):
            return False
        try:
            torch.testing.assert_close(a, b, equal_nan=True, atol=1e-2, rtol=1e-2)
            return True
        except Exception:
            return False
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(
            allclose(x, y) for x, y in zip(a, b))
    return a == b


def _base(token):
    token = token[len("aten."):] if token.startswith("aten.") else token
    return token.split(".")[0]


def _opinfo_matches(op, tokens):
    """BackendBench's rule (the OpInfo's name), also under nn.functional and by aten name."""
    names = {op.name, op.name.split(".")[-1], getattr(op, "aten_name", None) or op.name}
    return any(t in names or _base(t) in names or _base(t).lstrip("_") in names for t in tokens)


def plan(device, dtype_name, seed, tokens):
    """(ops, unusable): the suite, and "NAME: why" per OpInfo kept none of its samples."""
    dtype = DTYPES[dtype_name]
    by_op = OrderedDict()
    unusable = []
    for op in op_db():
        if tokens and not _opinfo_matches(op, tokens):
            continue
        if "." in op.name and "nn.functional" not in op.name:
            continue
        if dtype not in op.supported_dtypes(device):
            continue
        if op.name in ["nonzero_static"]:
            continue
        label = op.name + (f" ({op.variant_test_name})" if op.variant_test_name else "")
        try:
            listed = samples(op, device, dtype, seed)
        except Exception as e:
            unusable.append(f"{label}: its samples do not build here ({type(e).__name__})")
            continue
        indices = defaultdict(list)
        why = defaultdict(int)
        for idx, s in enumerate(listed):
            try:
                with _Tracer() as tracer:
                    ref = op.op(s.input, *s.args, **s.kwargs)
                if len(tracer.ops) != 1:
                    why[f"{len(tracer.ops)} aten calls"] += 1
                    continue
            except Exception:
                why["the OpInfo's call fails"] += 1
                continue
            try:
                res = tracer.ops[0](s.input, *s.args, **s.kwargs)
            except Exception:
                why[f"{tracer.ops[0]} rejects the sample's arguments"] += 1
                continue
            if allclose(ref, res):
                indices[tracer.ops[0]].append(idx)
            else:
                why[f"{tracer.ops[0]} differs"] += 1
        if not indices:
            reasons = ", ".join(f"{n} {w}" for w, n in sorted(why.items(), key=lambda x: -x[1]))
            unusable.append(f"{label}: none of its {len(listed)} samples traces to one aten "
                            f"operator that reproduces it ({reasons})")
        for overload, found in indices.items():
            inputs = by_op.setdefault(str(overload), [])
            inputs.extend(sample_text(op.name, op.variant_test_name, dtype_name, i, seed)
                          for i in found)
    return [{"op": name, "inputs": inputs} for name, inputs in by_op.items()], unusable


def sample_hash(text, device):
    args, kwargs = sample_call(text, device)
    h = hashlib.sha256()

    def feed(v):
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu().contiguous()
            h.update(f"T{list(t.shape)}{t.dtype}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(v, (list, tuple)):
            h.update(b"[")
            for x in v:
                feed(x)
            h.update(b"]")
        elif isinstance(v, dict):
            for k in sorted(v):
                h.update(k.encode())
                feed(v[k])
        else:
            h.update(repr(v).encode())

    feed(args)
    feed(kwargs)
    return h.hexdigest()


def main(argv):
    if len(argv) >= 6 and argv[1] == "plan":
        device, dtype_name, seed, out = argv[2], argv[3], int(argv[4]), argv[5]
        if dtype_name not in DTYPES:
            print(f"dtype {dtype_name} is not one of {', '.join(DTYPES)}", file=sys.stderr)
            return 2
        try:
            ops, unusable = plan(device, dtype_name, seed, argv[6:])
        except ImportError as e:
            print(str(e), file=sys.stderr)
            return 1
        temporary = f"{out}.{os.getpid()}.tmp"
        with open(temporary, "w") as f:
            json.dump({"torch": torch.__version__, "device": device, "dtype": dtype_name,
                       "ops": ops, "unusable": unusable}, f)
        os.replace(temporary, out)
        return 0
    if len(argv) == 4 and argv[1] == "hash":
        print(sample_hash(argv[2], argv[3]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
