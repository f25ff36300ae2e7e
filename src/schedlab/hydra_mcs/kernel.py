"""The McSplit branch and bound as a resumable Numba kernel over bitset bidomains.

Why this shape: Hydra-MCS (../shared/papers/02-hydra_mcs.md) shares work between threads and
the GPU by handing over *subproblems*; that is only cheap when the whole search state lives in
preallocated arrays rather than on a call stack. So the search is an explicit depth-first loop:

* level ``d`` of the stack is the node whose current mapping has ``d`` pairs (McSplit's "v left
  unmatched" child is a tail call, so it reuses its parent's level and domains in place);
* the bidomains of every level sit in one arena, level ``d+1`` right after level ``d``;
* a bidomain is a pair of bitsets (left set, right set) plus their sizes;
* the kernel runs for a node budget and returns; everything it needs to resume is in the arrays,
  which is also what lets the engine split off untried branches to idle threads.

Order and counting follow McSplit exactly (bidomain with the smallest max(|L|,|R|) or |L|*|R|,
ties to the smallest left vertex; v = smallest vertex of that left set; w ascending; "v
unmatched" last; every call is one node), so the node count equals the reference's.

Speed notes (``perf`` on s30.A02): every function here is compiled with ``_nrt=False`` (and the
AOT module with ``use_nrt = False``). The kernel allocates nothing and only reads and writes
arrays its caller owns, so Numba's reference counting of them buys nothing; it cost 22-38% of
the search's time as atomic increments/decrements around every inlined helper call. Children
pruned by their bound are found in one tight loop over w that never leaves the level.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from schedlab.hydra_mcs.layout import (  # noqa: F401  (re-exported: K.NODES, K.FINISHED, ...)
    BEST,
    BUDGET_SPENT,
    COUNT,
    DEPTH,
    DONE,
    ENTER,
    FINISHED,
    FRESH,
    LASTW,
    LEV_COLS,
    N_PARAMS,
    NODES,
    OFFLOADED,
    P_BASE,
    P_BIGFIRST,
    P_BUDGET,
    P_CONNECTED,
    P_GOAL,
    P_HEUR,
    P_TRACE_DEPTH,
    S_BEST,
    S_STOP,
    SEL,
    START,
    STATUS,
    STOPPED,
    SUMMIN,
    T_DEPTH,
    T_ENTRY,
    T_EXIT,
    T_GAP,
    T_LOGB,
    T_NDOM,
    T_SUMMIN,
    T_SUMPROD,
    TRACE,
    TRACE_COLS,
    VERT,
)

_ONE = np.uint64(1)
_ZERO = np.uint64(0)


@intrinsic
def popcount(typingctx, x):
    """Hardware popcount (llvm.ctpop) on a uint64, typed int64 so sums stay integers."""
    sig = types.int64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return sig, codegen


@intrinsic
def trailing_zeros(typingctx, x):
    """Hardware count-trailing-zeros (llvm.cttz) on a non-zero uint64, typed int64."""
    sig = types.int64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 1))

    return sig, codegen


@njit(cache=True, nogil=True, inline="always", _nrt=False)
def first_bit_from(rows, i, start, words):
    """Index of the smallest set bit >= start in bitset row ``rows[i]``, or -1.

    Takes the 2-D array and a row index rather than a row view (no view object per call).
    """
    if start >= words * 64:
        return -1
    j = start >> 6
    x = rows[i, j] & ~((_ONE << np.uint64(start & 63)) - _ONE)
    while True:
        if x != _ZERO:
            return j * 64 + trailing_zeros(x)
        j += 1
        if j >= words:
            return -1
        x = rows[i, j]


@njit(cache=True, nogil=True, inline="always", _nrt=False)
def select_domain(al, alc, arc, aadj, s, c, words, connected, size, heur):
    """McSplit's choice: smallest max(|L|,|R|) (or product), ties to the smallest left vertex."""
    best = -1
    best_len = np.int64(1) << 62
    best_tb = np.int64(1) << 62
    for i in range(s, s + c):
        if connected and size > 0 and aadj[i] == 0:
            continue
        lc = np.int64(alc[i])
        rc = np.int64(arc[i])
        ln = max(lc, rc) if heur == 0 else lc * rc
        if ln <= best_len:
            tb = first_bit_from(al, i, 0, words)
            if ln < best_len or tb < best_tb:
                best, best_len, best_tb = i, ln, tb
    return best


@njit(cache=True, nogil=True, inline="always", _nrt=False)
def filter_domains(
    al, ar, alc, arc, aadj, s, c, dst, v, w, nb0, nb1, any0, any1, words, cut, remaining
):
    """Split every bidomain of [s, s+c) by adjacency to v and w into [dst, ...).

    Returns (number of new bidomains, sum of min(|L|,|R|)). Slots are written tentatively and
    kept only when both sides are non-empty, so nothing is ever allocated. When the sum can no
    longer exceed ``cut`` (the child would be pruned on entry) it stops early and returns -1:
    a bidomain's pieces never hold more than min(|L|,|R|) of the bound between them.
    """
    if remaining <= cut:
        return -1, remaining
    if nb0.shape[1] == 1:
        return _filter_two_way(
            al, ar, alc, arc, aadj, s, c, dst, v, w, nb0, nb1, any0, any1, words, cut, remaining
        )
    k_classes = nb0.shape[1]
    t = dst
    bound = 0
    for i in range(s, s + c):
        remaining -= min(alc[i], arc[i])
        lcnt = 0
        rcnt = 0
        for j in range(words):
            x = al[i, j] & ~any0[v, j]
            y = ar[i, j] & ~any1[w, j]
            al[t, j] = x
            ar[t, j] = y
            lcnt += popcount(x)
            rcnt += popcount(y)
        if lcnt > 0 and rcnt > 0:
            alc[t], arc[t], aadj[t] = lcnt, rcnt, aadj[i]
            bound += min(lcnt, rcnt)
            t += 1
        for k in range(k_classes):
            lcnt = 0
            rcnt = 0
            for j in range(words):
                x = al[i, j] & nb0[v, k, j]
                y = ar[i, j] & nb1[w, k, j]
                al[t, j] = x
                ar[t, j] = y
                lcnt += popcount(x)
                rcnt += popcount(y)
            if lcnt > 0 and rcnt > 0:
                alc[t], arc[t], aadj[t] = lcnt, rcnt, 1
                bound += min(lcnt, rcnt)
                t += 1
        if bound + remaining <= cut:
            return -1, bound + remaining
    return t - dst, bound


@njit(cache=True, nogil=True, inline="always", _nrt=False)
def filter_domains_cached(
    al, ar, alc, arc, aadj, s, c, dst, v, w, nb0, nb1, any0, any1, words, cut, remaining, lin
):
    """filter_domains for the search kernel: the same split, skipping the pieces whose left
    side the node's cached counts (``lin``, see left_in_counts / left_class_counts) say are
    empty, so a labelled or directed graph with many edge classes costs only the classes v
    has."""
    if remaining <= cut:
        return -1, remaining
    if nb0.shape[1] == 1:
        return _filter_two_way(
            al, ar, alc, arc, aadj, s, c, dst, v, w, nb0, nb1, any0, any1, words, cut, remaining
        )
    stride = 2 * nb0.shape[1] + 2
    t = dst
    bound = 0
    for i in range(s, s + c):
        remaining -= min(alc[i], arc[i])
        base = i * stride
        if lin[base] > 0:
            lcnt = 0
            rcnt = 0
            for j in range(words):
                x = al[i, j] & ~any0[v, j]
                y = ar[i, j] & ~any1[w, j]
                al[t, j] = x
                ar[t, j] = y
                lcnt += popcount(x)
                rcnt += popcount(y)
            if lcnt > 0 and rcnt > 0:
                alc[t], arc[t], aadj[t] = lcnt, rcnt, aadj[i]
                bound += min(lcnt, rcnt)
                t += 1
        for q in range(lin[base + 1]):  # only the edge classes that keep a left vertex
            k = lin[base + 2 + 2 * q]
            lcnt = lin[base + 3 + 2 * q]
            rcnt = 0
            for j in range(words):
                x = al[i, j] & nb0[v, k, j]
                y = ar[i, j] & nb1[w, k, j]
                al[t, j] = x
                ar[t, j] = y
                rcnt += popcount(y)
            if rcnt > 0:
                alc[t], arc[t], aadj[t] = lcnt, rcnt, 1
                bound += min(lcnt, rcnt)
                t += 1
        if bound + remaining <= cut:
            return -1, bound + remaining
    return t - dst, bound


@njit(cache=True, nogil=True, inline="always", _nrt=False)
def left_in_counts(al, s, c, v, nb0, words, lin):
    """|L_i & N(v)| for every bidomain of the level: fixed for all w of one node."""
    for i in range(s, s + c):
        cnt = 0
        for j in range(words):
            cnt += popcount(al[i, j] & nb0[v, 0, j])
        lin[i] = cnt


@njit(cache=True, nogil=True, inline="always", _nrt=False)
def left_class_counts(al, s, c, v, nb0, any0, words, lin):
    """Labelled/directed case: for every bidomain i of the level, with ``b = i*(2K+2)``:
    ``lin[b]`` = |L_i minus N(v)|, ``lin[b+1]`` = m, the number of edge classes k with
    L_i & N_k(v) non-empty, then m pairs (k, |L_i & N_k(v)|) in ascending k. Fixed for all w
    of one node, so a child's bound needs right-hand popcounts only, for those m classes."""
    k_classes = nb0.shape[1]
    stride = 2 * k_classes + 2
    for i in range(s, s + c):
        base = i * stride
        cnt = 0
        for j in range(words):
            cnt += popcount(al[i, j] & ~any0[v, j])
        lin[base] = cnt
        m = 0
        for k in range(k_classes):
            cnt = 0
            for j in range(words):
                cnt += popcount(al[i, j] & nb0[v, k, j])
            if cnt > 0:
                lin[base + 2 + 2 * m] = k
                lin[base + 3 + 2 * m] = cnt
                m += 1
        lin[base + 1] = m


@njit(cache=True, nogil=True, inline="always", _nrt=False)
def _filter_two_way(
    al, ar, alc, arc, aadj, s, c, dst, v, w, nb0, nb1, any0, any1, words, cut, remaining
):
    """The unlabelled, undirected case: one pass, four bitsets per bidomain."""
    t = dst
    bound = 0
    for i in range(s, s + c):
        remaining -= min(alc[i], arc[i])
        l_in = 0
        r_in = 0
        l_out = 0
        r_out = 0
        for j in range(words):
            lx = al[i, j]
            rx = ar[i, j]
            a = lx & nb0[v, 0, j]
            b = rx & nb1[w, 0, j]
            e = lx & ~any0[v, j]
            f = rx & ~any1[w, j]
            al[t, j] = e
            ar[t, j] = f
            al[t + 1, j] = a
            ar[t + 1, j] = b
            l_in += popcount(a)
            r_in += popcount(b)
            l_out += popcount(e)
            r_out += popcount(f)
        if l_out > 0 and r_out > 0:
            alc[t], arc[t], aadj[t] = l_out, r_out, aadj[i]
            bound += min(l_out, r_out)
            t += 1
            if l_in > 0 and r_in > 0:
                alc[t], arc[t], aadj[t] = l_in, r_in, 1
                bound += min(l_in, r_in)
                t += 1
        elif l_in > 0 and r_in > 0:
            for j in range(words):
                al[t, j] = al[t + 1, j]
                ar[t, j] = ar[t + 1, j]
            alc[t], arc[t], aadj[t] = l_in, r_in, 1
            bound += min(l_in, r_in)
            t += 1
        if bound + remaining <= cut:
            return -1, bound + remaining
    return t - dst, bound


@njit(cache=True, nogil=True, inline="always", _nrt=False)
def domain_features(alc, arc, s, c):
    """Sum of min sizes (the bound), of |L|*|R|, and of min*log2(1+max): inputs to RC."""
    sum_min = 0
    sum_prod = 0.0
    sum_logb = 0.0
    for i in range(s, s + c):
        lo = min(alc[i], arc[i])
        hi = max(alc[i], arc[i])
        sum_min += lo
        sum_prod += float(alc[i]) * float(arc[i])
        sum_logb += lo * np.log2(1.0 + hi)
    return sum_min, sum_prod, sum_logb


@njit(cache=True, nogil=True, _nrt=False)
def node_rc(gap, alc, arc, s, c):
    """RC of the node whose bidomains are [s, s+c), with ``gap`` = bound - incumbent."""
    sum_min, _, sum_logb = domain_features(alc, arc, s, c)
    return rc_log2(gap, sum_logb, sum_min)


@njit(cache=True, nogil=True, _nrt=False)
def rc_log2(gap, sum_logb, sum_min):
    """RC: log2 of the estimated nodes below a node (formula and rationale: ``rc.py``)."""
    if gap <= 0 or sum_min <= 0:
        return 0.0
    return gap * (sum_logb / sum_min) + np.log2(1.0 + sum_min)


@njit(cache=True, nogil=True, inline="always", _nrt=False)
def _record(d, cur_v, cur_w, best_v, best_w, ctl, shared):
    for i in range(d):
        best_v[i] = cur_v[i]
        best_w[i] = cur_w[i]
    ctl[BEST] = d
    if shared[S_BEST] < d:  # racy max: a lost update only weakens pruning, never correctness
        shared[S_BEST] = d


@njit(cache=True, nogil=True, _nrt=False)
def _try_offload(
    d,
    s,
    c,
    al,
    ar,
    alc,
    arc,
    aadj,
    cur_v,
    cur_w,
    ctl,
    obuf_l,
    obuf_r,
    obuf_cnt,
    obuf_meta,
    obuf_map,
):
    """Copy node d into the offload buffer; False when the buffer is full."""
    k = ctl[OFFLOADED]
    if k >= obuf_meta.shape[0]:
        return False
    dst = obuf_meta[k - 1, 0] + obuf_meta[k - 1, 1] if k > 0 else 0
    if dst + c > obuf_l.shape[0]:
        return False
    for i in range(c):
        for j in range(al.shape[1]):
            obuf_l[dst + i, j] = al[s + i, j]
            obuf_r[dst + i, j] = ar[s + i, j]
        obuf_cnt[dst + i, 0] = alc[s + i]
        obuf_cnt[dst + i, 1] = arc[s + i]
        obuf_cnt[dst + i, 2] = aadj[s + i]
    obuf_meta[k, 0] = dst
    obuf_meta[k, 1] = c
    obuf_meta[k, 2] = d
    for i in range(d):
        obuf_map[k, i, 0] = cur_v[i]
        obuf_map[k, i, 1] = cur_w[i]
    ctl[OFFLOADED] = k + 1
    return True


@njit(cache=True, nogil=True, inline="always", _nrt=False)
def _search(
    nb0,
    nb1,
    any0,
    any1,
    al,
    ar,
    alc,
    arc,
    aadj,
    alin,
    lev,
    cur_v,
    cur_w,
    best_v,
    best_w,
    ctl,
    params,
    shared,
    band,
    trace,
    obuf_l,
    obuf_r,
    obuf_cnt,
    obuf_meta,
    obuf_map,
    words,
):
    """Run the depth-first search for at most ``params[P_BUDGET]`` nodes; resumable.

    Returns FINISHED when the subtree rooted at level ``params[P_BASE]`` is exhausted,
    BUDGET_SPENT when it stopped to let the engine look at it (share work, check the clock),
    STOPPED when ``shared[S_STOP]`` was set. ``band = (lo, hi)`` is the RC offload band (empty
    when lo > hi); ``trace`` collects RC calibration rows for levels < base + trace depth.
    """
    base = params[P_BASE]
    budget = params[P_BUDGET]
    goal = params[P_GOAL]
    big_first = params[P_BIGFIRST] != 0
    connected = params[P_CONNECTED] != 0
    heur = params[P_HEUR]
    trace_depth = params[P_TRACE_DEPTH]
    use_band = band[0] <= band[1]
    two_way = nb0.shape[1] == 1
    stride = 2 * nb0.shape[1] + 2  # left_class_counts' layout
    nodes = ctl[NODES]
    d = ctl[DEPTH]
    enter = ctl[ENTER] != 0
    steps = 0
    while True:
        if enter:
            if steps >= budget or shared[S_STOP] != 0:
                ctl[NODES], ctl[DEPTH], ctl[ENTER] = nodes, d, 1
                return STOPPED if shared[S_STOP] != 0 else BUDGET_SPENT
            steps += 1
            nodes += 1
            s = lev[d, START]
            c = lev[d, COUNT]
            best = max(ctl[BEST], shared[S_BEST])
            if d > best:
                _record(d, cur_v, cur_w, best_v, best_w, ctl, shared)
                best = d
            sum_min = lev[d, SUMMIN]
            bound = d + sum_min
            prune = bound <= best or bound < goal or (big_first and best >= goal)
            fresh = lev[d, FRESH] != 0
            lev[d, FRESH] = 0
            if fresh and trace_depth > 0 and d - base < trace_depth:
                sum_min, sum_prod, sum_logb = domain_features(alc, arc, s, c)
                row = int(trace[0, 0])
                if row + 1 < trace.shape[0]:
                    trace[0, 0] = row + 1
                    trace[row + 1, T_ENTRY] = nodes - 1
                    trace[row + 1, T_EXIT] = -1.0
                    trace[row + 1, T_DEPTH] = d
                    trace[row + 1, T_GAP] = bound - best
                    trace[row + 1, T_SUMMIN] = sum_min
                    trace[row + 1, T_SUMPROD] = sum_prod
                    trace[row + 1, T_NDOM] = c
                    trace[row + 1, T_LOGB] = sum_logb
                    lev[d, TRACE] = row + 1
                else:
                    lev[d, TRACE] = 0
            elif fresh:
                lev[d, TRACE] = 0
            b = -1
            if not prune:
                if (
                    fresh
                    and use_band
                    and d > base
                    and band[0] <= node_rc(bound - best, alc, arc, s, c) <= band[1]
                    and _try_offload(
                        d,
                        s,
                        c,
                        al,
                        ar,
                        alc,
                        arc,
                        aadj,
                        cur_v,
                        cur_w,
                        ctl,
                        obuf_l,
                        obuf_r,
                        obuf_cnt,
                        obuf_meta,
                        obuf_map,
                    )
                ):
                    prune = True
                else:
                    b = select_domain(al, alc, arc, aadj, s, c, words, connected, d, heur)
            if b < 0:
                # leave level d for good: close its trace row and return to the parent
                if lev[d, TRACE] > 0:
                    trace[lev[d, TRACE], T_EXIT] = nodes
                d -= 1
                enter = False
                if d < base:
                    ctl[NODES], ctl[DEPTH], ctl[ENTER] = nodes, d, 0
                    return FINISHED
                continue
            v = first_bit_from(al, b, 0, words)
            al[b, v >> 6] &= ~(_ONE << np.uint64(v & 63))
            # sum of mins once v is gone, and (below) once w is gone from the right side too
            lev[d, SUMMIN] = sum_min - min(alc[b], arc[b]) + min(alc[b] - 1, arc[b])
            alc[b] -= 1
            if two_way:
                left_in_counts(al, s, c, v, nb0, words, alin)
            else:
                left_class_counts(al, s, c, v, nb0, any0, words, alin)
            lev[d, SEL] = b
            lev[d, VERT] = v
            lev[d, LASTW] = -1
            lev[d, DONE] = 0
            enter = False
        # iterate the branches of the node at level d
        if lev[d, DONE] != 0:
            if lev[d, TRACE] > 0:
                trace[lev[d, TRACE], T_EXIT] = nodes
            d -= 1
            if d < base:
                ctl[NODES], ctl[DEPTH], ctl[ENTER] = nodes, d, 0
                return FINISHED
            continue
        b = lev[d, SEL]
        v = lev[d, VERT]
        s = lev[d, START]
        c = lev[d, COUNT]
        # the next w whose child is not pruned by its bound: a tight loop over the pruned ones
        # (each still counts as a node, as in McSplit), everything in registers
        w = lev[d, LASTW]
        parent_min = 0
        cut = -1
        while True:
            # first_bit_from(ar, b, w + 1, words), written out: the AOT build (numba.pycc)
            # does not inline it as well as the JIT (2.4 s vs 2.2 s on s30.A02)
            start = w + 1
            w = -1
            if start < words * 64:
                j = start >> 6
                x = ar[b, j] & ~((_ONE << np.uint64(start & 63)) - _ONE)
                while True:
                    if x != _ZERO:
                        w = j * 64 + trailing_zeros(x)
                        break
                    j += 1
                    if j >= words:
                        break
                    x = ar[b, j]
            if w < 0:
                break
            mask = _ONE << np.uint64(w & 63)
            ar[b, w >> 6] &= ~mask
            arc[b] -= 1
            best = max(ctl[BEST], shared[S_BEST])
            # the child prunes itself on entry when its bound is <= best or < goal (and it
            # would not improve the incumbent); then its domains need not be built in full
            cut = max(best, goal - 1) - d - 1 if d + 1 <= best else -1
            parent_min = lev[d, SUMMIN] - min(alc[b], arc[b] + 1) + min(alc[b], arc[b])
            if cut < 0:
                break
            # the child's sum of mins without building it (unlabelled undirected case): only
            # the right-hand popcounts depend on w; stop once the child is certain to be pruned
            bound = 0
            remaining = parent_min
            if two_way:
                for i in range(s, s + c):
                    li = alin[i]
                    lc = np.int64(alc[i])
                    rc = np.int64(arc[i])
                    remaining -= min(lc, rc)
                    ri = 0
                    for j in range(words):
                        ri += popcount(ar[i, j] & nb1[w, 0, j])
                    bound += min(li, ri) + min(lc - li, rc - ri)
                    if bound + remaining <= cut:
                        break
            else:
                # labelled / directed: the same from the cached left counts per edge class,
                # popcounts on the right only for classes that keep a left vertex
                for i in range(s, s + c):
                    remaining -= min(np.int64(alc[i]), np.int64(arc[i]))
                    base_i = i * stride
                    lo = alin[base_i]
                    if lo > 0:
                        ri = 0
                        for j in range(words):
                            ri += popcount(ar[i, j] & ~any1[w, j])
                        bound += min(lo, ri)
                    for q in range(alin[base_i + 1]):
                        k = alin[base_i + 2 + 2 * q]
                        ri = 0
                        for j in range(words):
                            ri += popcount(ar[i, j] & nb1[w, k, j])
                        bound += min(alin[base_i + 3 + 2 * q], ri)
                    if bound + remaining <= cut:
                        break
            ar[b, w >> 6] |= mask
            arc[b] += 1
            if bound + remaining > cut:
                ar[b, w >> 6] &= ~mask
                arc[b] -= 1
                break
            nodes += 1
            steps += 1
        if w < 0:
            # "v unmatched": McSplit's tail call, done in place on this level's domains
            if alc[b] == 0:
                last = s + c - 1
                for j in range(words):
                    al[b, j] = al[last, j]
                    ar[b, j] = ar[last, j]
                alc[b], arc[b], aadj[b] = alc[last], arc[last], aadj[last]
                lev[d, COUNT] = c - 1
            enter = True
            continue
        lev[d, LASTW] = w
        mask = _ONE << np.uint64(w & 63)
        cnt, sum_min = filter_domains_cached(
            al,
            ar,
            alc,
            arc,
            aadj,
            s,
            c,
            s + c,
            v,
            w,
            nb0,
            nb1,
            any0,
            any1,
            words,
            cut,
            parent_min,
            alin,
        )
        ar[b, w >> 6] |= mask
        arc[b] += 1
        cur_v[d] = v
        cur_w[d] = w
        if cnt < 0:
            # the child would prune itself on entry: count it without pushing a level
            nodes += 1
            steps += 1
            continue
        lev[d + 1, START] = s + c
        lev[d + 1, COUNT] = cnt
        lev[d + 1, FRESH] = 1
        lev[d + 1, SUMMIN] = sum_min
        lev[d + 1, DONE] = 0
        d += 1
        enter = True


@njit(cache=True, nogil=True, _nrt=False)
def search(
    nb0,
    nb1,
    any0,
    any1,
    al,
    ar,
    alc,
    arc,
    aadj,
    alin,
    lev,
    cur_v,
    cur_w,
    best_v,
    best_w,
    ctl,
    params,
    shared,
    band,
    trace,
    obuf_l,
    obuf_r,
    obuf_cnt,
    obuf_meta,
    obuf_map,
):
    """Run the depth-first search for at most ``params[P_BUDGET]`` nodes; resumable.

    Returns FINISHED when the subtree rooted at level ``params[P_BASE]`` is exhausted,
    BUDGET_SPENT when it stopped to let the engine look at it (share work, check the clock),
    STOPPED when ``shared[S_STOP]`` was set. ``band = (lo, hi)`` is the RC offload band (empty
    when lo > hi); ``trace`` collects RC calibration rows for levels < base + trace depth.
    """
    return _search(
        nb0,
        nb1,
        any0,
        any1,
        al,
        ar,
        alc,
        arc,
        aadj,
        alin,
        lev,
        cur_v,
        cur_w,
        best_v,
        best_w,
        ctl,
        params,
        shared,
        band,
        trace,
        obuf_l,
        obuf_r,
        obuf_cnt,
        obuf_meta,
        obuf_map,
        al.shape[1],
    )


@njit(cache=True, nogil=True, _nrt=False)
def search_w1(
    nb0,
    nb1,
    any0,
    any1,
    al,
    ar,
    alc,
    arc,
    aadj,
    alin,
    lev,
    cur_v,
    cur_w,
    best_v,
    best_w,
    ctl,
    params,
    shared,
    band,
    trace,
    obuf_l,
    obuf_r,
    obuf_cnt,
    obuf_meta,
    obuf_map,
):
    """``search`` for pairs of at most 64 vertices: one 64-bit word per bitset, known when
    compiling, so every loop over words folds away (~10% of the search on s30 pairs)."""
    return _search(
        nb0,
        nb1,
        any0,
        any1,
        al,
        ar,
        alc,
        arc,
        aadj,
        alin,
        lev,
        cur_v,
        cur_w,
        best_v,
        best_w,
        ctl,
        params,
        shared,
        band,
        trace,
        obuf_l,
        obuf_r,
        obuf_cnt,
        obuf_meta,
        obuf_map,
        1,
    )
