"""Kernels as a request carries them, from source text, a file, or BackendBench's directory
layout (artefacts/kernel_dir.hpp): <dir>/<folder>/<folder>_implementation*.{py,cpp,cu}, where
folder is the operator's name without "aten." and with every "." written "__"."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

KINDS = ("py", "cu", "cpp", "aten")
_KIND_OF_EXTENSION = {".py": "py", ".cu": "cu", ".cpp": "cpp"}

Source = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Kernel:
    """One kernel: `kind` py, cu, cpp or aten (the operator itself, no source); `name` is the
    file it came from, for the server's reports; `entry` the function to call ("": BackendBench's
    <folder>_kernel_impl for the operator, as the server names it)."""

    kind: str
    source: str = ""
    name: str = ""
    entry: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kernel kind {self.kind!r}: expected one of {', '.join(KINDS)}")
        if self.kind == "aten" and self.source:
            raise ValueError("an aten kernel has no source")
        if self.kind != "aten" and not self.source:
            raise ValueError(f"a {self.kind} kernel needs its source")

    def message(self) -> dict:
        """The kernel's map on the wire (docs/serving.md)."""
        out = {"kind": self.kind}
        if self.kind != "aten":
            out["source"] = self.source
        if self.name:
            out["name"] = self.name
        if self.entry:
            out["entry"] = self.entry
        return out


def kind_of_file(path: Source) -> Optional[str]:
    """py, cu or cpp by the file's extension; None for another file."""
    return _KIND_OF_EXTENSION.get(os.path.splitext(os.fspath(path))[1])


def read_kernel_file(path: Source, kind: Optional[str] = None, name: Optional[str] = None) -> Kernel:
    """The kernel in a file; its kind from the extension unless `kind` is given."""
    path = os.fspath(path)
    kind = kind or kind_of_file(path)
    if kind is None:
        raise ValueError(f"{path}: cannot tell the kernel's kind from the extension "
                         f"(.py, .cu or .cpp); pass kind=")
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text: {e}") from None
    if not source:
        raise ValueError(f"{path}: empty file")
    return Kernel(kind, source, name if name is not None else os.path.basename(path))


def kernel_of(source: Union[Source, Kernel, None] = None, kind: Optional[str] = None) -> Kernel:
    """The kernel that `evaluate(op, source, kind)` sends:

    - no source: the operator itself (kind aten);
    - a Kernel: itself;
    - a path (os.PathLike), or a one-line string naming an existing file: that file, its kind
      from the extension unless `kind` is given;
    - any other string: the source text itself, of `kind` (default py).
    """
    if isinstance(source, Kernel):
        return source
    if source is None:
        return Kernel(kind or "aten")
    if not isinstance(source, str):
        return read_kernel_file(source, kind)
    if "\n" not in source and os.path.isfile(source):
        return read_kernel_file(source, kind)
    return Kernel(kind or "py", source)


def folder_name_to_op_name(folder: str) -> str:
    """BackendBench's folder name back to the operator's, decoding "__" right to left:
    "add___Tensor" -> "add_.Tensor", "_native_batch_norm" unchanged (suite/ops.cpp)."""
    rest, out = folder, ""
    pos = rest.rfind("__")
    while pos > 0:
        out = "." + rest[pos + 2:] + out
        rest = rest[:pos]
        pos = rest.rfind("__")
    return rest + out


def folder_name_to_aten_name(folder: str) -> str:
    """The full name of a kernel folder: "add__Tensor" -> "aten.add.Tensor", "relu" ->
    "aten.relu.default"."""
    name = folder_name_to_op_name(folder)
    if "." not in name:
        name += ".default"
    return "aten." + name


def scan_kernel_dir(directory: Source) -> Tuple[Dict[str, Kernel], List[str]]:
    """Every operator folder's kernel, by full operator name, and "path: reason" for each
    folder that has none. The rules are the server's (artefacts/kernel_dir.cpp): the first
    <folder>_implementation*.{py,cpp,cu} file in sorted order; hidden folders, __pycache__,
    agent_logs and *_session_* folders are not operators. Whether the file defines its entry
    point (<folder>_kernel_impl) is the server's to check."""
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"{directory}: no such folder")
    kernels: Dict[str, Kernel] = {}
    problems: List[str] = []
    for folder in sorted(os.listdir(directory)):
        folder_path = os.path.join(directory, folder)
        if not os.path.isdir(folder_path) or folder.startswith(".") or folder == "__pycache__":
            continue
        # A generative campaign's run folder holds its agents' logs and sessions beside the
        # operator folders.
        if folder == "agent_logs" or "_session_" in folder:
            continue
        files = sorted(name for name in os.listdir(folder_path)
                       if name.startswith(folder + "_implementation") and kind_of_file(name)
                       and os.path.isfile(os.path.join(folder_path, name)))
        if not files:
            problems.append(f"{folder_path}: no implementation file (expected "
                            f"{folder}_implementation_v<N>.{{py,cpp,cu}})")
            continue
        path = os.path.join(folder_path, files[0])
        try:
            kernels[folder_name_to_aten_name(folder)] = read_kernel_file(
                path, name=os.path.join(folder, files[0]))
        except OSError as e:
            problems.append(f"{path}: {e.strerror or e}")
        except ValueError as e:
            problems.append(str(e))
    return kernels, problems
