"""Learned branching beside McSplit's fixed order: McSplit+RL and McSplitDAL-style scores.

McSplit's order (``kernel.search``) branches on the smallest left vertex of the chosen
bidomain and tries its right partners in index order. Two published variants *learn* the order
while they search, with the same bound and the same bidomains (so every size stays exact; only
the tree, and the node count, change):

* **McSplit+RL** (Liu, Li, Jiang & He, AAAI 2020): an action is a pair (v, w); its reward is
  how much it reduces the upper bound (the parent's sum of min(|L|,|R|), v and w removed,
  minus the child's). Every vertex keeps a score, the sum of the rewards of the actions it took
  part in: ``S(v) += r`` and ``S(w) += r`` when r > 0 (all scores divided by 1e9 once one passes
  1e9). The bidomain is still McSplit's smallest max(|L|,|R|), ties to the domain whose
  best-scored left vertex has the smallest index; v is the best-scored vertex of its left set
  (ties: smallest index), and the right partners are tried best score first, the score read
  afresh before each one (rewards earned in a child's subtree reorder its later siblings).
* **McSplitDAL** (Liu, Zhao, Li, Jiang & He, AAAI 2023, "hybrid learning with a new value
  function"): the value of an action adds a *domain action* term to the bound reduction, here
  the number of bidomains the action leaves (the default "num" reward of the public
  reimplementation). Scores are kept as in McSplit+LL, which DAL builds on: a left-vertex score
  S(v) (short memory: all halved once one passes 1e5) and a score per pair S(v, w) (long
  memory: the row of v halved once one passes 1e9); w is chosen by S(v, w). Built: that value
  function and the two memories. Not built: the paper's switching between value functions when
  the search stalls.

The kernel is sequential (one searcher, no work sharing, no GPU offload) and resumable like
``kernel.search``: all state is in the caller's arrays. Every call is one node, as in McSplit.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from schedlab.hydra_mcs.kernel import _record, filter_domains, trailing_zeros
from schedlab.hydra_mcs.layout import (
    BEST,
    BUDGET_SPENT,
    COUNT,
    DEPTH,
    ENTER,
    FINISHED,
    LOG_FULL,
    LOGPOS,
    NODES,
    P_BASE,
    P_BIGFIRST,
    P_BUDGET,
    P_CONNECTED,
    P_GOAL,
    P_HEUR,
    S_BEST,
    S_STOP,
    SEL,
    START,
    STOPPED,
    SUMMIN,
    VERT,
)

#: ``learn[0]``: which value function (ORDER: none, McSplit's own order, for ``--prove``)
ORDER, RL, DAL = 0, 1, 2
#: proof-log records (``proof.py``): a node is NODE_CLOSED or v, a child is w, END ends v's w's
NODE_CLOSED, END = -1, -2
_ONE = np.uint64(1)
_ZERO = np.uint64(0)


@njit(cache=True, nogil=True, inline="always", _nrt=False)
def _best_left(al, i, words, vscore):
    """The best-scored vertex of left set i (ties: smallest index)."""
    best = -1
    best_s = -1.0
    for j in range(words):
        x = al[i, j]
        while x != _ZERO:
            v = j * 64 + trailing_zeros(x)
            x &= x - _ONE
            if vscore[v] > best_s:
                best, best_s = v, vscore[v]
    return best


@njit(cache=True, nogil=True, _nrt=False)
def search_learned(
    nb0,
    nb1,
    any0,
    any1,
    al,
    ar,
    alc,
    arc,
    aadj,
    lev,
    cur_v,
    cur_w,
    best_v,
    best_w,
    ctl,
    params,
    shared,
    vscore,
    wscore,
    todo,
    learn,
    log,
):
    """Depth-first search with learned branching for at most ``params[P_BUDGET]`` nodes.

    ``vscore`` (n0,) and ``wscore`` (rows, n1) are the learned scores (rows = 1 for RL, n0 for
    DAL's pair scores); ``todo`` (levels, words) holds, per level, the right partners of the
    branching vertex not yet tried; ``learn = (value function, v threshold, w threshold)``.
    Returns FINISHED, BUDGET_SPENT or STOPPED as ``kernel.search`` does.
    """
    words = al.shape[1]
    base = params[P_BASE]
    budget = params[P_BUDGET]
    goal = params[P_GOAL]
    big_first = params[P_BIGFIRST] != 0
    connected = params[P_CONNECTED] != 0
    heur = params[P_HEUR]
    mode = int(learn[0])
    v_limit = learn[1]
    w_limit = learn[2]
    pair = mode == DAL
    logging = log.shape[0] > 1
    pos = ctl[LOGPOS]
    nodes = ctl[NODES]
    d = ctl[DEPTH]
    enter = ctl[ENTER] != 0
    steps = 0
    while True:
        if logging and pos + 4 > log.shape[0]:
            ctl[NODES], ctl[DEPTH], ctl[ENTER], ctl[LOGPOS] = nodes, d, 1 if enter else 0, pos
            return LOG_FULL
        if enter:
            if steps >= budget or shared[S_STOP] != 0:
                ctl[NODES], ctl[DEPTH], ctl[ENTER], ctl[LOGPOS] = nodes, d, 1, pos
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
            b = -1
            v = -1
            if not (bound <= best or bound < goal or (big_first and best >= goal)):
                best_len = np.int64(1) << 62
                for i in range(s, s + c):
                    if connected and d > 0 and aadj[i] == 0:
                        continue
                    lc = np.int64(alc[i])
                    rc = np.int64(arc[i])
                    ln = max(lc, rc) if heur == 0 else lc * rc
                    if ln <= best_len:
                        tb = _best_left(al, i, words, vscore)
                        if ln < best_len or tb < v:
                            b, best_len, v = i, ln, tb
            if logging:
                log[pos] = NODE_CLOSED if b < 0 else v
                pos += 1
            if b < 0:
                d -= 1
                enter = False
                if d < base:
                    ctl[NODES], ctl[DEPTH], ctl[ENTER], ctl[LOGPOS] = nodes, d, 0, pos
                    return FINISHED
                continue
            al[b, v >> 6] &= ~(_ONE << np.uint64(v & 63))
            lev[d, SUMMIN] = sum_min - min(alc[b], arc[b]) + min(alc[b] - 1, arc[b])
            alc[b] -= 1
            for j in range(words):
                todo[d, j] = ar[b, j]
            lev[d, SEL] = b
            lev[d, VERT] = v
            enter = False
        # the next right partner of v: the best-scored one not yet tried
        b = lev[d, SEL]
        v = lev[d, VERT]
        s = lev[d, START]
        c = lev[d, COUNT]
        row = v if pair else 0
        w = -1
        w_s = -1.0
        for j in range(words):
            x = todo[d, j]
            while x != _ZERO:
                u = j * 64 + trailing_zeros(x)
                x &= x - _ONE
                if wscore[row, u] > w_s:
                    w, w_s = u, wscore[row, u]
        if w < 0:
            # "v unmatched": McSplit's tail call, on this level's domains in place
            if logging:
                log[pos] = END
                pos += 1
            if alc[b] == 0:
                last = s + c - 1
                for j in range(words):
                    al[b, j] = al[last, j]
                    ar[b, j] = ar[last, j]
                alc[b], arc[b], aadj[b] = alc[last], arc[last], aadj[last]
                lev[d, COUNT] = c - 1
            enter = True
            continue
        if logging:
            log[pos] = w
            pos += 1
        mask = _ONE << np.uint64(w & 63)
        todo[d, w >> 6] &= ~mask
        ar[b, w >> 6] &= ~mask
        arc[b] -= 1
        parent_min = lev[d, SUMMIN] - min(alc[b], arc[b] + 1) + min(alc[b], arc[b])
        cnt, child_min = filter_domains(
            al, ar, alc, arc, aadj, s, c, s + c, v, w, nb0, nb1, any0, any1, words, -1, parent_min
        )
        ar[b, w >> 6] |= mask
        arc[b] += 1
        reward = parent_min - child_min
        if reward > 0 and mode != ORDER:
            gain = float(reward) + (float(cnt) if mode == DAL else 0.0)
            vscore[v] += gain
            wscore[row, w] += gain
            if vscore[v] > v_limit:
                for i in range(vscore.shape[0]):
                    vscore[i] = np.floor(vscore[i] / v_limit) if mode == RL else vscore[i] / 2
            if wscore[row, w] > w_limit:
                for i in range(wscore.shape[1]):
                    wscore[row, i] = (
                        np.floor(wscore[row, i] / w_limit) if mode == RL else wscore[row, i] / 2
                    )
        cur_v[d] = v
        cur_w[d] = w
        lev[d + 1, START] = s + c
        lev[d + 1, COUNT] = cnt
        lev[d + 1, SUMMIN] = child_min
        d += 1
        enter = True
