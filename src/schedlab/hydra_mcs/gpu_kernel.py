"""The CUDA kernel of the GPU path (imported only when a batch is offloaded).

Each CUDA thread finishes one offloaded subproblem with McSplit's branch and bound on bitset
bidomains kept in its own slice of global memory, pruning against one device incumbent
(``atomic.max``). ``cuda`` must be a module global so Numba's simulator can stand in for it.
"""

import numpy as np
from numba import cuda

LV_START, LV_COUNT, LV_SEL, LV_V, LV_LASTW = range(5)
one = np.uint64(1)


@cuda.jit(device=True)
def lowbit(x):
    return cuda.popc((x & (~x + one)) - one)


@cuda.jit
def finish(
    nb0,
    nb1,
    any0,
    any1,
    al,
    ar,
    cnt,
    lev,
    task_meta,
    task_map,
    gbest,
    res_size,
    res_map,
    nodes_out,
    connected,
    heur,
):
    t = cuda.grid(1)
    if t >= task_meta.shape[0]:
        return
    words = al.shape[2]
    kcls = nb0.shape[1]
    size0 = task_meta[t, 2]
    nodes = 0
    d = 0
    lev[t, 0, LV_START] = 0
    lev[t, 0, LV_COUNT] = task_meta[t, 1]
    enter = True
    while d >= 0:
        s = lev[t, d, LV_START]
        c = lev[t, d, LV_COUNT]
        if enter:
            nodes += 1
            size = size0 + d
            best = gbest[0]
            if size > best:
                cuda.atomic.max(gbest, 0, size)
                res_size[t] = size
                for i in range(size):
                    res_map[t, i, 0] = task_map[t, i, 0]
                    res_map[t, i, 1] = task_map[t, i, 1]
                best = size
            bound = size
            for i in range(s, s + c):
                bound += min(cnt[t, i, 0], cnt[t, i, 1])
            b = -1
            if bound > best:
                best_len = 1 << 40
                best_tb = 1 << 40
                for i in range(s, s + c):
                    if connected and size > 0 and cnt[t, i, 2] == 0:
                        continue
                    ln = (
                        max(cnt[t, i, 0], cnt[t, i, 1])
                        if heur == 0
                        else (cnt[t, i, 0] * cnt[t, i, 1])
                    )
                    j = 0
                    while al[t, i, j] == 0:
                        j += 1
                    tb = j * 64 + lowbit(al[t, i, j])
                    if ln < best_len or (ln == best_len and tb < best_tb):
                        b, best_len, best_tb = i, ln, tb
            if b < 0:
                d -= 1
                enter = False
                continue
            v = best_tb
            al[t, b, v // 64] &= ~(one << np.uint64(v % 64))
            cnt[t, b, 0] -= 1
            lev[t, d, LV_SEL] = b
            lev[t, d, LV_V] = v
            lev[t, d, LV_LASTW] = -1
            enter = False
        b = lev[t, d, LV_SEL]
        v = lev[t, d, LV_V]
        w = -1
        start = lev[t, d, LV_LASTW] + 1
        for j in range(start // 64, words):
            x = ar[t, b, j]
            if j == start // 64:
                x &= ~((one << np.uint64(start % 64)) - one)
            if x != 0:
                w = j * 64 + lowbit(x)
                break
        if w < 0:
            if cnt[t, b, 0] == 0:
                last = s + c - 1
                for j in range(words):
                    al[t, b, j] = al[t, last, j]
                    ar[t, b, j] = ar[t, last, j]
                for q in range(3):
                    cnt[t, b, q] = cnt[t, last, q]
                lev[t, d, LV_COUNT] = c - 1
            enter = True
            continue
        lev[t, d, LV_LASTW] = w
        ar[t, b, w // 64] &= ~(one << np.uint64(w % 64))
        cnt[t, b, 1] -= 1
        dst = s + c
        for i in range(s, s + c):
            for k in range(-1, kcls):
                lc = 0
                rc = 0
                for j in range(words):
                    if k < 0:
                        x = al[t, i, j] & ~any0[v, j]
                        y = ar[t, i, j] & ~any1[w, j]
                    else:
                        x = al[t, i, j] & nb0[v, k, j]
                        y = ar[t, i, j] & nb1[w, k, j]
                    al[t, dst, j] = x
                    ar[t, dst, j] = y
                    lc += cuda.popc(x)
                    rc += cuda.popc(y)
                if lc > 0 and rc > 0:
                    cnt[t, dst, 0] = lc
                    cnt[t, dst, 1] = rc
                    cnt[t, dst, 2] = cnt[t, i, 2] if k < 0 else 1
                    dst += 1
        ar[t, b, w // 64] |= one << np.uint64(w % 64)
        cnt[t, b, 1] += 1
        task_map[t, size0 + d, 0] = v
        task_map[t, size0 + d, 1] = w
        lev[t, d + 1, LV_START] = s + c
        lev[t, d + 1, LV_COUNT] = dst - s - c
        d += 1
        enter = True
    nodes_out[t] = nodes


FULL_BLOCK = 32  # one warp per subproblem: a block of 32 threads
SHARED_LIMIT = 48 * 1024  # static shared memory a block may use without opting in


def block_shared_bytes(cap: int, words: int, depth: int) -> int:
    """Shared memory one block of :func:`make_block_kernel` uses: the arena (two uint64
    bitsets and three int32 counts per bidomain), the level stack and current mapping
    (``depth`` x (5 + 2) int32), the reduction scratch (three int64 and one int32 per lane)
    and the broadcast pair."""
    return cap * words * 8 * 2 + cap * 3 * 4 + depth * 7 * 4 + FULL_BLOCK * (3 * 8 + 4) + 2 * 8


_BLOCK_KERNELS: dict = {}


def make_block_kernel(cap: int, words: int, depth: int, kcls: int):
    """A kernel with one 32-thread block (a warp) per subproblem, its bitset bidomains in
    shared memory; shapes are compile-time constants, so one kernel per (cap, words, ...).

    Every thread runs the same control flow on the same scalars (read from shared memory
    after a barrier, so they agree); the work over bidomains is split across the 32 lanes:
    the bound (sum of mins) and McSplit's selection are block reductions, and the filtering
    of each child writes the kept bidomains at offsets from a prefix count over the lanes.
    Only block-wide barriers (``syncthreads``) are used, no warp intrinsics, so Numba's CUDA
    simulator runs it too. The search tree is the thread kernel's: selection is by (size,
    smallest left vertex), which does not depend on where a bidomain sits in the arena.
    """
    key = (cap, words, depth, kcls)
    if key in _BLOCK_KERNELS:
        return _BLOCK_KERNELS[key]
    CAP, WORDS, DEPTH, KCLS, LANES = cap, words, depth, kcls, FULL_BLOCK

    @cuda.jit
    def finish_block(
        nb0,
        nb1,
        any0,
        any1,
        al,
        ar,
        cnt,
        meta,
        task_map,
        gbest,
        res_size,
        res_map,
        nodes_out,
        connected,
        heur,
    ):
        t = cuda.blockIdx.x
        lane = cuda.threadIdx.x
        sl = cuda.shared.array((CAP, WORDS), np.uint64)
        sr = cuda.shared.array((CAP, WORDS), np.uint64)
        sc = cuda.shared.array((CAP, 3), np.int32)
        lev = cuda.shared.array((DEPTH, 5), np.int32)
        cur = cuda.shared.array((DEPTH, 2), np.int32)
        red_a = cuda.shared.array(LANES, np.int64)
        red_b = cuda.shared.array(LANES, np.int64)
        red_c = cuda.shared.array(LANES, np.int64)
        flag = cuda.shared.array(LANES, np.int32)
        bcast = cuda.shared.array(2, np.int64)
        xs = cuda.local.array(WORDS, np.uint64)
        ys = cuda.local.array(WORDS, np.uint64)
        if t >= meta.shape[0]:
            return
        size0 = meta[t, 2]
        c0 = meta[t, 1]
        for i in range(lane, c0, LANES):
            for j in range(WORDS):
                sl[i, j] = al[t, i, j]
                sr[i, j] = ar[t, i, j]
            for q in range(3):
                sc[i, q] = cnt[t, i, q]
        if lane == 0:
            lev[0, LV_START] = 0
            lev[0, LV_COUNT] = c0
        cuda.syncthreads()
        nodes = 0
        d = 0
        enter = True
        while d >= 0:
            s = lev[d, LV_START]
            c = lev[d, LV_COUNT]
            if enter:
                nodes += 1
                size = size0 + d
                if lane == 0:
                    bcast[0] = gbest[0]
                cuda.syncthreads()
                best = bcast[0]
                cuda.syncthreads()
                if size > best:
                    if lane == 0:
                        cuda.atomic.max(gbest, 0, size)
                        res_size[t] = size
                        for i in range(size0):
                            res_map[t, i, 0] = task_map[t, i, 0]
                            res_map[t, i, 1] = task_map[t, i, 1]
                        for i in range(d):
                            res_map[t, size0 + i, 0] = cur[i, 0]
                            res_map[t, size0 + i, 1] = cur[i, 1]
                    best = size
                # bound and selection: each lane over its share, then a block reduction
                part = 0
                my_len = 1 << 40
                my_tb = 1 << 40
                my_i = -1
                for i in range(s + lane, s + c, LANES):
                    lc = sc[i, 0]
                    rc = sc[i, 1]
                    part += min(lc, rc)
                    if connected and size > 0 and sc[i, 2] == 0:
                        continue
                    ln = max(lc, rc) if heur == 0 else lc * rc
                    j = 0
                    while sl[i, j] == 0:
                        j += 1
                    tb = j * 64 + lowbit(sl[i, j])
                    if ln < my_len or (ln == my_len and tb < my_tb):
                        my_len, my_tb, my_i = ln, tb, i
                red_a[lane] = part
                red_b[lane] = my_len * 65536 + my_tb
                red_c[lane] = my_i
                cuda.syncthreads()
                bound = size
                key_best = 1 << 62
                b = -1
                for q in range(LANES):
                    bound += red_a[q]
                    if red_c[q] >= 0 and red_b[q] < key_best:
                        key_best = red_b[q]
                        b = red_c[q]
                cuda.syncthreads()
                if bound <= best:
                    b = -1
                if b < 0:
                    d -= 1
                    enter = False
                    continue
                v = key_best % 65536
                if lane == 0:
                    sl[b, v // 64] &= ~(one << np.uint64(v % 64))
                    sc[b, 0] -= 1
                    lev[d, LV_SEL] = b
                    lev[d, LV_V] = v
                    lev[d, LV_LASTW] = -1
                cuda.syncthreads()
                enter = False
            b = lev[d, LV_SEL]
            v = lev[d, LV_V]
            w = -1
            start = lev[d, LV_LASTW] + 1
            for j in range(start // 64, WORDS):
                x = sr[b, j]
                if j == start // 64:
                    x &= ~((one << np.uint64(start % 64)) - one)
                if x != 0:
                    w = j * 64 + lowbit(x)
                    break
            cuda.syncthreads()
            if w < 0:
                if lane == 0 and sc[b, 0] == 0:
                    last = s + c - 1
                    for j in range(WORDS):
                        sl[b, j] = sl[last, j]
                        sr[b, j] = sr[last, j]
                    for q in range(3):
                        sc[b, q] = sc[last, q]
                    lev[d, LV_COUNT] = c - 1
                cuda.syncthreads()
                enter = True
                continue
            if lane == 0:
                lev[d, LV_LASTW] = w
                sr[b, w // 64] &= ~(one << np.uint64(w % 64))
                sc[b, 1] -= 1
            cuda.syncthreads()
            dst = s + c
            for base in range(s, s + c, LANES):
                i = base + lane
                for k in range(-1, KCLS):
                    lc = 0
                    rc = 0
                    if i < s + c:
                        for j in range(WORDS):
                            if k < 0:
                                x = sl[i, j] & ~any0[v, j]
                                y = sr[i, j] & ~any1[w, j]
                            else:
                                x = sl[i, j] & nb0[v, k, j]
                                y = sr[i, j] & nb1[w, k, j]
                            xs[j] = x
                            ys[j] = y
                            lc += cuda.popc(x)
                            rc += cuda.popc(y)
                    keep = 1 if (lc > 0 and rc > 0) else 0
                    flag[lane] = keep
                    cuda.syncthreads()
                    offset = 0
                    total = 0
                    for q in range(LANES):
                        if q < lane:
                            offset += flag[q]
                        total += flag[q]
                    if keep == 1:
                        row = dst + offset
                        for j in range(WORDS):
                            sl[row, j] = xs[j]
                            sr[row, j] = ys[j]
                        sc[row, 0] = lc
                        sc[row, 1] = rc
                        sc[row, 2] = sc[i, 2] if k < 0 else 1
                    dst += total
                    cuda.syncthreads()
            if lane == 0:
                sr[b, w // 64] |= one << np.uint64(w % 64)
                sc[b, 1] += 1
                cur[d, 0] = v
                cur[d, 1] = w
                lev[d + 1, LV_START] = s + c
                lev[d + 1, LV_COUNT] = dst - s - c
            cuda.syncthreads()
            d += 1
            enter = True
        if lane == 0:
            nodes_out[t] = nodes

    _BLOCK_KERNELS[key] = finish_block
    return finish_block
