"""The GPU path: a Numba CUDA kernel that finishes a batch of offloaded subproblems.

Hydra-MCS (../shared/papers/02-hydra_mcs.md) offloads subproblems whose RC falls in a band:
big enough to be worth a launch, small enough that one GPU thread finishes them quickly. Each
CUDA thread here runs the same McSplit branch and bound (bitset bidomains, sum-of-min bound)
on one subproblem from a per-thread slice of global memory; all threads prune against one
device incumbent updated with ``atomic.max``, seeded from (and folded back into) the CPU's.
Under ``NUMBA_ENABLE_CUDASIM=1`` the same kernel runs on the CPU simulator, which is how the
tests check it against the CPU search.
"""

from __future__ import annotations

import functools

import numpy as np

from schedlab.core.errors import MissingDependencyError
from schedlab.hydra_mcs.graph import BitsetPair
from schedlab.hydra_mcs.state import Task


def cuda_available() -> bool:
    """True on a machine with a usable CUDA device, or when the simulator is enabled."""
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # a broken driver is the same as no GPU for us
        return False


@functools.cache
def _kernel():
    """Import (and so compile) the CUDA kernel only when a batch is really offloaded."""
    from schedlab.hydra_mcs.gpu_kernel import finish

    return finish


class CudaDevice:
    """Finishes batches of subproblems on the GPU (or on Numba's CUDA simulator)."""

    name = "cuda"

    KERNELS = ("auto", "block", "thread")

    def __init__(self, threads_per_block: int = 32, kernel: str = "auto") -> None:
        """``kernel``: ``block`` = one 32-thread block (a warp) per subproblem, bidomains in
        shared memory; ``thread`` = one thread per subproblem, arena in global memory;
        ``auto`` = block when its arena fits in 48 KiB of shared memory, else thread."""
        if kernel not in self.KERNELS:
            from schedlab.core.errors import UnknownNameError

            raise UnknownNameError("GPU kernel", kernel, self.KERNELS)
        if not cuda_available():
            raise MissingDependencyError(
                "no CUDA device (set NUMBA_ENABLE_CUDASIM=1 to simulate one)",
                hint="run without --gpu",
            )
        self.threads_per_block = threads_per_block
        self.kernel = kernel
        self.last_kernel = ""

    def solve(
        self, bits: BitsetPair, tasks: list[Task], options, incumbent: int
    ) -> tuple[int, list[tuple[int, int]], int]:
        """Finish every task; returns (best size found above ``incumbent``, its pairs, nodes)."""
        from numba import cuda

        n0, words = bits.nb0.shape[0], bits.words
        count = len(tasks)
        cap = (n0 + 2) * (n0 + 3) // 2 + n0 + 8 + (bits.nb0.shape[1] + 1)
        al = np.zeros((count, cap, words), np.uint64)
        ar = np.zeros_like(al)
        cnt = np.zeros((count, cap, 3), np.int64)
        meta = np.zeros((count, 3), np.int64)
        mapping = np.zeros((count, n0 + 1, 2), np.int64)
        for i, task in enumerate(tasks):
            c = task.left.shape[0]
            al[i, :c], ar[i, :c] = task.left, task.right
            cnt[i, :c, 0], cnt[i, :c, 1], cnt[i, :c, 2] = task.lcount, task.rcount, task.adjacent
            meta[i] = (0, c, task.size)
            mapping[i, : task.size, 0], mapping[i, : task.size, 1] = task.map_v, task.map_w
        lev = np.zeros((count, n0 + 2, 5), np.int64)
        gbest = np.array([incumbent], np.int64)
        res_size = np.zeros(count, np.int64)
        res_map = np.zeros((count, n0 + 1, 2), np.int64)
        nodes = np.zeros(count, np.int64)
        dev = [
            cuda.to_device(a)
            for a in (
                bits.nb0,
                bits.nb1,
                bits.any0,
                bits.any1,
                al,
                ar,
                cnt,
                lev,
                meta,
                mapping,
                gbest,
                res_size,
                res_map,
                nodes,
            )
        ]
        from schedlab.hydra_mcs.gpu_kernel import (
            FULL_BLOCK,
            SHARED_LIMIT,
            block_shared_bytes,
            make_block_kernel,
        )

        need = block_shared_bytes(cap, words, n0 + 2)
        fits = need <= SHARED_LIMIT
        use_block = self.kernel == "block" or (self.kernel == "auto" and fits)
        if use_block and not fits:
            raise MissingDependencyError(
                f"the block kernel needs {need} bytes of shared "
                f"memory for n={n0} (limit {SHARED_LIMIT})",
                hint="use kernel='thread'",
            )
        if use_block:
            kern = make_block_kernel(cap, words, n0 + 2, bits.nb0.shape[1])
            kern[count, FULL_BLOCK](
                dev[0],
                dev[1],
                dev[2],
                dev[3],
                dev[4],
                dev[5],
                dev[6],
                dev[8],
                dev[9],
                dev[10],
                dev[11],
                dev[12],
                dev[13],
                int(options.connected),
                int(options.heuristic),
            )
            self.last_kernel = "block"
        else:
            blocks = -(-count // self.threads_per_block)
            _kernel()[blocks, self.threads_per_block](
                *dev, int(options.connected), int(options.heuristic)
            )
            self.last_kernel = "thread"
        res_size, res_map, nodes = (
            dev[11].copy_to_host(),
            dev[12].copy_to_host(),
            dev[13].copy_to_host(),
        )
        k = int(np.argmax(res_size)) if count else 0
        size = int(res_size[k]) if count else 0
        pairs = [(int(a), int(b)) for a, b in res_map[k, :size]] if size > incumbent else []
        return (size if size > incumbent else 0), pairs, int(nodes.sum())
