"""Reading a kernel file: MLIR (``frontend``) or C (``cfront``, which lowers C to MLIR first).

Why a module of its own: the C front end hands its MLIR to ``frontend.parse_kernel``, so the
loader that picks one by file suffix sits above both and ``frontend`` imports neither back.
"""

from __future__ import annotations

from pathlib import Path

from schedlab.core.errors import BadInputError
from schedlab.redpanda.cfront import load_c_kernel
from schedlab.redpanda.frontend import Kernel, parse_kernel


def load_kernel(
    path: str | Path, function: str | None = None, defines: dict[str, int] | None = None
) -> Kernel:
    """Read and parse a kernel file: MLIR (``.mlir``), or C (``.c``, via :mod:`.cfront`)."""
    path = Path(path)
    if path.suffix.lower() in (".c", ".h"):
        return load_c_kernel(path, function=function, defines=defines)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"cannot read kernel: {exc}", path=path) from None
    return parse_kernel(text, path, name=path.stem)
