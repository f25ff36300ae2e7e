"""The kernel suites (MLIR and C shipped with the package) and seeded inputs for each kernel.

RedPanda (../shared/papers/08-redpanda.md) is evaluated on control-rich and memory-irregular
kernels as well as PolyBench-style loop nests. Kernel files use size placeholders (``@N@`` =
problem size, ``@NN@`` = 4N, ``@N1@`` = N+1, ``@N4@`` = N+4) so one file serves the quick and
the full scale; :func:`kernel_text` substitutes them. The C suite (``kernels/c/*.c``,
:data:`C_KERNELS`) holds the same 15 kernels written in C plus three from Dynamatic's benchmark
set (``matpower``, ``gsum``, ``gsumif``); its size is the ``#define N`` that :func:`c_kernel`
overrides, and every C kernel keeps the argument names of its MLIR twin so both get the same
seeded inputs.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np

from schedlab.core.errors import UnknownNameError
from schedlab.redpanda.frontend import Kernel, float_args, parse_kernel

KERNELS = (
    "gemm",
    "atax",
    "bicg",
    "gesummv",
    "mm2",
    "jacobi1d",
    "fir",
    "histogram",
    "matvec",
    "spmv",
    "ifloop",
    "condstore",
    "bsearch",
    "gcd",
    "isort",
)
#: the C suite: the MLIR suite's kernels plus Dynamatic's matrix_power, gsum and gsumif
C_KERNELS = (*KERNELS, "matpower", "gsum", "gsumif")
#: float (IEEE binary32) C kernels, shipped alongside the integer suite: Dynamatic's gsum and
#: gsumif in their original float form, a float FIR and PolyBench's float gemm. Not part of
#: C_KERNELS (the claims' suite): the DHLS back end has integer datapaths only.
FLOAT_C_KERNELS = ("gsum_float", "gsumif_float", "fir_float", "gemm_float")
#: kernels whose control or memory behaviour depends on the data
IRREGULAR = frozenset(
    {
        "histogram",
        "spmv",
        "ifloop",
        "condstore",
        "bsearch",
        "gcd",
        "isort",
        "matpower",
        "gsum",
        "gsumif",
    }
)


def kernel_text(name: str, size: int) -> str:
    """The MLIR text of a shipped kernel at problem size ``size``."""
    if name not in KERNELS:
        raise UnknownNameError("kernel", name, KERNELS)
    text = resources.files("schedlab.redpanda").joinpath(f"kernels/{name}.mlir").read_text()
    for key, value in (("@NN@", 4 * size), ("@N1@", size + 1), ("@N4@", size + 4), ("@N@", size)):
        text = text.replace(key, str(value))
    return text


def load_suite_kernel(name: str, size: int, language: str = "mlir") -> Kernel:
    """A shipped kernel at problem size ``size``, from the MLIR (default) or the C suite."""
    if language == "c":
        return c_kernel(name, size)
    if language != "mlir":
        raise UnknownNameError("language", language, ["mlir", "c"])
    return parse_kernel(kernel_text(name, size), Path(f"{name}.mlir"), name=name)


def c_kernel_source(name: str) -> str:
    """The C text of a shipped C kernel (``#define N 4``; :func:`c_kernel` sets the size)."""
    if name not in C_KERNELS and name not in FLOAT_C_KERNELS:
        raise UnknownNameError("C kernel", name, (*C_KERNELS, *FLOAT_C_KERNELS))
    return resources.files("schedlab.redpanda").joinpath(f"kernels/c/{name}.c").read_text()


def c_kernel_text(name: str, size: int) -> str:
    """The C text of a shipped C kernel with its size fixed (``#define N <size>``)."""
    import re

    return re.sub(
        r"^#define N \d+$", f"#define N {int(size)}", c_kernel_source(name), count=1, flags=re.M
    )


def c_kernel(name: str, size: int) -> Kernel:
    """A shipped C kernel, through the C front end, at problem size ``size``."""
    from schedlab.redpanda.cfront import c_kernel_from_text

    if size < 2:
        from schedlab.core.errors import BadInputError

        raise BadInputError(f"size must be >= 2, got {size}", field="size")
    return c_kernel_from_text(c_kernel_text(name, size), Path(f"{name}.c"), name=name)


def random_inputs(kernel: Kernel, seed: int) -> dict[str, object]:
    """Seeded inputs that keep every kernel in bounds (indices, CSR structure, sortedness)."""
    if seed < 0:
        from schedlab.core.errors import BadInputError

        raise BadInputError(f"seed must be >= 0, got {seed}", field="seed")
    rng = np.random.default_rng(seed)
    shapes = kernel.memrefs()
    inputs: dict[str, object] = {n: rng.integers(-8, 8, size=s) for n, s in shapes.items()}
    inputs.update({n: int(rng.integers(-4, 5)) for n in kernel.scalars()})
    floats = float_args(kernel)
    if floats:  # f32 arguments: values in [-4, 4) as IEEE bit patterns (see semantics.py)
        frng = np.random.default_rng([seed, 1])
        for n in sorted(floats):
            values = frng.uniform(-4, 4, size=shapes.get(n, ())).astype(np.float32)
            bits = values.view(np.int32).astype(np.int64)
            inputs[n] = bits if n in shapes else int(bits)
    special = _SPECIAL.get(kernel.name)
    if special is not None:
        inputs.update(special(shapes, rng))
    return inputs


def _histogram(shapes, rng):
    return {"x": rng.integers(0, 8, size=shapes["x"]), "h": np.zeros(8, dtype=np.int64)}


def _spmv(shapes, rng):
    n, nnz = shapes["y"][0], shapes["col"][0]
    counts = rng.integers(0, 5, size=n)
    while counts.sum() > nnz:
        counts[int(np.argmax(counts))] -= 1
    rowptr = np.concatenate([[0], np.cumsum(counts)])
    return {"rowptr": rowptr, "col": rng.integers(0, n, size=nnz)}


def _bsearch(shapes, rng):
    size = shapes["a"][0]
    a = np.sort(rng.choice(np.arange(8 * size), size=size, replace=False))
    q = np.where(
        rng.random(shapes["q"][0]) < 0.5,
        rng.choice(a, size=shapes["q"][0]),
        rng.integers(0, 8 * size, size=shapes["q"][0]),
    )
    return {"a": a, "q": q}


def _gcd(shapes, rng):
    return {"a": rng.integers(1, 64, size=shapes["a"]), "b": rng.integers(1, 64, size=shapes["b"])}


def _jacobi(shapes, rng):
    return {"a": rng.integers(0, 64, size=shapes["a"]), "b": np.zeros(shapes["b"], dtype=np.int64)}


def _matpower(shapes, rng):
    n = shapes["x"][1]
    return {
        "row": rng.integers(0, n, size=shapes["row"]),
        "col": rng.integers(0, n, size=shapes["col"]),
    }


_SPECIAL = {
    "histogram": _histogram,
    "spmv": _spmv,
    "bsearch": _bsearch,
    "gcd": _gcd,
    "jacobi1d": _jacobi,
    "matpower": _matpower,
}
