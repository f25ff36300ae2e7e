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
def finish(nb0, nb1, any0, any1, al, ar, cnt, lev, task_meta, task_map, gbest, res_size,
           res_map, nodes_out, connected, heur):
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
                    ln = max(cnt[t, i, 0], cnt[t, i, 1]) if heur == 0 else (
                        cnt[t, i, 0] * cnt[t, i, 1])
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

