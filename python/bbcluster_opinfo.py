"""bbcluster's opinfo suite: PyTorch's OpInfo sample inputs, selected as BackendBench's
suite/opinfo.py selects them, and regenerated where they run.

A sample never travels: a job names it as (OpInfo name, variant, dtype, sample index, seed),
written as the input text

    opinfo(<name>, <variant>, <dtype>, <index>, seed=<seed>)

and the runner calls sample_call() on its own device, which seeds torch and random with the
seed before listing the OpInfo's samples, so every runner builds the same ones.

    python bbcluster_opinfo.py plan DEVICE DTYPE SEED OUT.json [--cache DIR] [TOKEN...]
        The suite: for every OpInfo of op_db (those TOKENs match, or all) as BackendBench
        keeps them (a dotted name only under nn.functional, DTYPE supported on DEVICE, not
        nonzero_static, samples that list without error), the samples whose call traces to
        exactly one aten operator and whose result matches that operator's called directly.
        Operators whose result is uninitialised memory or random (empty_like, new_empty,
        new_empty_strided, bernoulli, as BackendBench's dataset filter, and empty,
        empty_strided, empty_permuted) are left out with that reason: whether their result
        "matches" is chance, and the suite would differ from run to run. A TOKEN matches an OpInfo by its name (BackendBench's rule), its
        name under nn.functional, or its aten name; aten.X.Y and X.Y match as X. OUT.json:
        {"torch", "device", "dtype", "ops": [{"op": "aten.X.Y", "inputs": [text, ...]}, ...],
        "unusable": ["NAME: why none of its samples is kept", ...], "cached": bool,
        "seconds": selection time}.
        The OpInfos are selected in parallel processes (BBCLUSTER_OPINFO_WORKERS, default
        half the cores, at most 8). With --cache, a selection is kept in DIR under a key of
        everything it depends on (torch's build, the installed files of torch, numpy and
        expecttest, Python's version, the device's model, the OpInfo database's source, this
        file, DTYPE, SEED and the TOKENs) and reused, without importing torch. A selection
        that met an out-of-memory or CUDA error is used but not kept.
    python bbcluster_opinfo.py hash TEXT DEVICE
        A SHA-256 of the sample TEXT names, built on DEVICE (its tensors' bytes and its
        other values), to check that two processes build the same sample.
"""

import glob
import hashlib
import importlib.util
import json
import os
import random
import re
import sys
import time
from collections import OrderedDict, defaultdict


# --- the selection cache: consulted before torch is imported (a few seconds) ---------------

def _torch_dir():
    spec = importlib.util.find_spec("torch")
    return os.path.dirname(spec.origin) if spec and spec.origin else None


def _device_model(device):
    """The device's kind: "cpu", or the GPUs' models as the driver names them."""
    if device != "cuda":
        return device
    models = []
    for info in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
        with open(info, errors="replace") as f:
            models += [line.split(":", 1)[1].strip() for line in f if line.startswith("Model:")]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if models:
        return "cuda " + ",".join(sorted(set(models))) + (f" visible {visible}" if visible else "")
    import torch  # no /proc entry (a container without it): ask CUDA
    return "cuda " + torch.cuda.get_device_name(0)


def cache_key(device, dtype_name, seed, tokens):
    """A SHA-256 of everything a selection depends on, or None when torch is not found."""
    torch_dir = _torch_dir()
    if torch_dir is None:
        return None
    h = hashlib.sha256()
    site = os.path.dirname(torch_dir)
    files = [os.path.join(torch_dir, "version.py"), os.path.abspath(__file__)]
    # Every file of torch and of the packages samples are made with, as installed (a
    # dist-info's RECORD lists each file's hash), and the OpInfo database's sources.
    for package in ("torch", "numpy", "expecttest"):
        files += sorted(glob.glob(os.path.join(site, f"{package}-*.dist-info", "RECORD")))
    files += sorted(glob.glob(os.path.join(torch_dir, "testing", "_internal", "**", "*.py"), recursive=True))
    h.update(sys.version.encode())
    for path in files:
        h.update(path.encode() + b"\0")
        try:
            with open(path, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
        except OSError:
            h.update(b"missing")
    h.update(json.dumps([_device_model(device), dtype_name, seed, sorted(tokens)]).encode())
    return h.hexdigest()


def write_json(value, out):
    temporary = f"{out}.{os.getpid()}.tmp"
    with open(temporary, "w") as f:
        json.dump(value, f)
    os.replace(temporary, out)


def from_cache(cache_dir, key, out):
    """Whether the selection `key` was in `cache_dir` (then it is written to `out`)."""
    try:
        with open(os.path.join(cache_dir, key + ".json")) as f:
            kept = json.load(f)
    except (OSError, ValueError):
        return False
    kept["cached"] = True
    write_json(kept, out)
    return True


def plan_arguments(argv):
    """`plan`'s arguments: (device, dtype name, seed text, out, cache folder or None, tokens).
    Raises ValueError for --cache without a folder."""
    rest = argv[6:]
    cache_dir = None
    if "--cache" in rest:
        at = rest.index("--cache")
        if at + 1 >= len(rest):
            raise ValueError("--cache needs a folder")
        cache_dir = rest[at + 1]
        del rest[at:at + 2]
    return argv[2], argv[3], argv[4], argv[5], cache_dir, rest


# The cache's key, made once before torch is imported: a hit ends here; a miss stores the
# selection under it.
_cache_key = None
if __name__ == "__main__" and len(sys.argv) >= 6 and sys.argv[1] == "plan":
    try:
        _device, _dtype, _seed, _out, _cache_dir, _tokens = plan_arguments(sys.argv)
    except ValueError:
        _cache_dir = None  # main() says what is wrong
    if _cache_dir:
        _cache_key = cache_key(_device, _dtype, _seed, _tokens)
        if _cache_key and from_cache(_cache_dir, _cache_key, _out):
            sys.exit(0)


import torch  # noqa: E402 (the cache above needs none of it)
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

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


# Operators whose result is uninitialised memory or random: whether it "reproduces" is
# chance. BackendBench's dataset filter leaves out the first four; the empty_* ones are
# uninitialised too.
RANDOM_OUTPUT = {"empty_like", "new_empty", "new_empty_strided", "bernoulli", "empty", "empty_strided",
                 "empty_permuted"}


def _random_output(overload):
    """aten.X.Y (or aten.X_.Y, in place) with X one of RANDOM_OUTPUT."""
    parts = str(overload).split(".")
    return len(parts) >= 2 and parts[1].rstrip("_") in RANDOM_OUTPUT


def _candidates(device, dtype, tokens):
    """The OpInfos BackendBench's rules keep, by their index in op_db."""
    out = []
    for i, op in enumerate(op_db()):
        if tokens and not _opinfo_matches(op, tokens):
            continue
        if "." in op.name and "nn.functional" not in op.name:
            continue
        if dtype not in op.supported_dtypes(device):
            continue
        if op.name in ["nonzero_static"]:
            continue
        out.append(i)
    return out


def select_one(device, dtype_name, seed, index):
    """One OpInfo's selection: (label, [(overload, [sample index, ...]), ...], why unusable or None)."""
    op = op_db()[index]
    dtype = DTYPES[dtype_name]
    label = op.name + (f" ({op.variant_test_name})" if op.variant_test_name else "")
    try:
        listed = samples(op, device, dtype, seed)
    except Exception as e:
        _note_transient(e)
        return label, [], f"{label}: its samples do not build here ({type(e).__name__})"
    indices = OrderedDict()
    why = defaultdict(int)
    for idx, s in enumerate(listed):
        try:
            with _Tracer() as tracer:
                ref = op.op(s.input, *s.args, **s.kwargs)
            if len(tracer.ops) != 1:
                why[f"{len(tracer.ops)} aten calls"] += 1
                continue
        except Exception as e:
            _note_transient(e)
            why["the OpInfo's call fails"] += 1
            continue
        if _random_output(tracer.ops[0]):
            why[f"{tracer.ops[0]} has an uninitialised or random result (left out, as BackendBench does)"] += 1
            continue
        try:
            res = tracer.ops[0](s.input, *s.args, **s.kwargs)
        except Exception as e:
            _note_transient(e)
            why[f"{tracer.ops[0]} rejects the sample's arguments"] += 1
            continue
        if allclose(ref, res):
            indices.setdefault(str(tracer.ops[0]), []).append(idx)
        else:
            why[f"{tracer.ops[0]} differs"] += 1
    if not indices:
        reasons = ", ".join(f"{n} {w}" for w, n in sorted(why.items(), key=lambda x: -x[1]))
        return label, [], (f"{label}: none of its {len(listed)} samples traces to one aten "
                           f"operator that reproduces it ({reasons})")
    return label, list(indices.items()), None


# Whether an error this process met says more of the machine's state than of the sample (out
# of memory, a CUDA error): such a selection is used but not kept in the cache.
_transient = False


def _note_transient(e):
    global _transient
    text = f"{type(e).__name__}: {e}"
    if isinstance(e, MemoryError) or "out of memory" in text.lower() or "CUDA error" in text:
        _transient = True


def _worker_start():
    # Each worker one intra-op thread: the workers are the parallelism.
    torch.set_num_threads(1)
    op_db()


def _worker_select(task):
    return select_one(*task), _transient


def workers_for(n):
    configured = os.environ.get("BBCLUSTER_OPINFO_WORKERS")
    if configured:
        return max(1, int(configured))
    # Each worker pays its own start (torch and op_db, a few seconds): worth it with cores to
    # spare, not on two. The cores this process may use (affinity, a Slurm allocation).
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(8, cores // 2, n // 8))


def plan(device, dtype_name, seed, tokens):
    """(ops, unusable): the suite, and "NAME: why" per OpInfo kept none of its samples. The
    same whatever the workers: each OpInfo's samples are listed after seeding, and the
    results are taken in op_db's order."""
    candidates = _candidates(device, DTYPES[dtype_name], tokens)
    tasks = [(device, dtype_name, seed, i) for i in candidates]
    n = workers_for(len(tasks))
    global _transient
    if n > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        # spawn: a forked child of a process that ran torch's threads or CUDA can hang. A
        # worker that dies (a crash, the OOM killer) fails the selection (BrokenProcessPool)
        # instead of hanging it.
        with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_worker_start) as pool:
            answers = list(pool.map(_worker_select, tasks))
        selected = [a for a, _ in answers]
        _transient = _transient or any(t for _, t in answers)
    else:
        selected = [select_one(*t) for t in tasks]
    by_op = OrderedDict()
    unusable = []
    for task, (_, found, why) in zip(tasks, selected):
        op = op_db()[task[-1]]
        if why:
            unusable.append(why)
        for overload, kept in found:
            by_op.setdefault(overload, []).extend(
                sample_text(op.name, op.variant_test_name, dtype_name, k, seed) for k in kept)
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
        try:
            device, dtype_name, seed_text, out, cache_dir, rest = plan_arguments(argv)
        except ValueError as e:
            print(str(e), file=sys.stderr)
            return 2
        seed = int(seed_text)
        if dtype_name not in DTYPES:
            print(f"dtype {dtype_name} is not one of {', '.join(DTYPES)}", file=sys.stderr)
            return 2
        start = time.monotonic()
        try:
            ops, unusable = plan(device, dtype_name, seed, rest)
        except ImportError as e:
            print(str(e), file=sys.stderr)
            return 1
        selection = {"torch": torch.__version__, "device": device, "dtype": dtype_name,
                     "ops": ops, "unusable": unusable, "cached": False,
                     "seconds": round(time.monotonic() - start, 3)}
        write_json(selection, out)
        if _transient:
            print("an OpInfo's samples failed for a passing cause (out of memory, a CUDA error): "
                  "this selection is not kept for the next run", file=sys.stderr)
        key = _cache_key if cache_dir and not _transient else None
        if key:
            os.makedirs(cache_dir, exist_ok=True)
            write_json(selection, os.path.join(cache_dir, key + ".json"))
        return 0
    if len(argv) == 4 and argv[1] == "hash":
        print(sample_hash(argv[2], argv[3]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
