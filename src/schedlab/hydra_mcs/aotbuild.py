"""The child process that compiles the search kernels ahead of time (``aot.build`` runs it).

Why a module of its own: after compiling, it checks the compiled kernels against the JIT ones
by running real searches (``state.Searcher``), while ``state`` asks ``aot`` which kernel to
load; the build step sits above both, so neither imports the other back.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from schedlab.hydra_mcs.aot import KIND_ENV, LEARNED_ARGS, jit_search, load_module, signature


def smoke_test(
    search: Callable[..., int],
    learned: Callable[..., int] | None = None,
    search_w1: Callable[..., int] | None = None,
) -> None:
    """Run the compiled kernel beside the JIT one on a few seeded pairs; exit 1 on mismatch."""
    import numpy as np

    from schedlab.hydra_mcs.graph import induced, mcsplit_order, to_bitsets
    from schedlab.hydra_mcs.state import Searcher
    from schedlab.hydra_mcs.workloads import gnp_pairs

    for inst in gnp_pairs(3, 12, 0.4, seed=7):
        o0, o1 = mcsplit_order(inst.g0, inst.g1)
        s0 = induced(inst.g0, o0)
        bits = to_bitsets(s0, induced(inst.g1, o1))
        seen = []
        kernels = [("jit", jit_search()), ("aot", search)]
        if search_w1 is not None:  # one word per bitset: these pairs have 12 vertices
            kernels.append(("aot-w1", search_w1))
        for kind, fn in kernels:
            s = Searcher(bits, s0.n, connected=True)
            s.kernel, s._search = kind, fn
            s.load_root()
            s.run(np.zeros(4, np.int64), 1 << 62)
            seen.append((len(s.best), s.nodes))
        if len(set(seen)) != 1:
            raise SystemExit(f"compiled kernel disagrees with the JIT one: {seen}")
    if learned is None:
        return
    from schedlab.hydra_mcs.learned import search_learned

    for inst in gnp_pairs(2, 12, 0.4, seed=9):  # McSplit+RL and McSplitDAL's kernel
        o0, o1 = mcsplit_order(inst.g0, inst.g1)
        s0 = induced(inst.g0, o0)
        bits = to_bitsets(s0, induced(inst.g1, o1))
        for branching in (1, 2):
            seen = []
            for kind, fn in (("jit", search_learned), ("aot", learned)):
                s = Searcher(bits, s0.n, branching=branching)
                s.kernel, s._search = kind, fn
                s.load_root()
                s.run(np.zeros(4, np.int64), 1 << 62)
                seen.append((len(s.best), s.nodes))
            if seen[0] != seen[1]:
                raise SystemExit(f"compiled learned kernel disagrees with the JIT one: {seen}")


def compile_kernels(out_dir: str, name: str) -> None:
    """Child process: compile ``kernel.search`` with numba.pycc into ``out_dir/name*.so``."""
    import numba.pycc.compiler as pycc_compiler
    from numba.core.codegen import AOTCPUCodegen
    from numba.pycc import CC

    from schedlab.hydra_mcs import kernel, learned

    os.environ[KIND_ENV] = "jit"  # the smoke test's searchers must not look for this module

    class _Flags(pycc_compiler.Flags):  # the exported wrapper releases the GIL (nogil=True)
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.release_gil = True

    pycc_compiler.Flags = _Flags
    # pycc's "host" picks the CPU model only; add the host's feature flags as the JIT does
    AOTCPUCodegen._customize_tm_features = lambda self: self._get_host_cpu_features()
    cc = CC(name)
    cc.output_dir = out_dir
    cc.target_cpu = "host"
    cc.verbose = False
    # as the JIT kernel's _nrt=False: the kernel allocates nothing, so no reference counting
    # of its (caller-owned) arrays, which was ~25% of the search's time (perf)
    cc.use_nrt = False
    cc.export("search", signature())(kernel.search.py_func)
    cc.export("search_w1", signature())(kernel.search_w1.py_func)
    cc.export("search_learned", signature(LEARNED_ARGS))(learned.search_learned.py_func)
    cc.compile()
    built = sorted(Path(out_dir).glob(name + ".*"))
    if len(built) != 1:
        raise SystemExit(f"numba.pycc produced {[p.name for p in built]}")
    module = load_module(name, built[0])
    smoke_test(module.search, module.search_learned, module.search_w1)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m schedlab.hydra_mcs.aotbuild OUT_DIR MODULE_NAME")
    try:
        compile_kernels(sys.argv[1], sys.argv[2])
    except Exception as exc:  # the parent reports our last stderr line: make it the cause
        first = (str(exc).strip().splitlines() or [""])[0]
        print(f"{type(exc).__name__}: {first}", file=sys.stderr)
        raise SystemExit(1) from None
