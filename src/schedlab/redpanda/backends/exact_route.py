"""Exact routing of a placed CGRA mapping: an integer program over the routing-resource graph.

RedPanda (../shared/papers/08-redpanda.md) maps onto CGRAs whose interconnect is configured per
cycle. PathFinder (:mod:`.router`) is a heuristic: when it gives up, a routing may still exist.
For small arrays this module decides routability exactly with HiGHS (``scipy.optimize.milp``):
for a fixed placement and schedule, every (net, consumer) is a unit flow on the time-extended
graph of :mod:`.rrg` (states (PE, offset, hops this cycle), arcs = a link crossing, a latch, a
routing-register wait, or delivery at the consumer's PE by its deadline); a binary ``u`` per
(net, resource, offset) is 1 when any of the net's flows uses it (one word serves every consumer
of a net at that offset); per (resource, slot) the ``u`` sum is at most the capacity. The
objective is the number of words moved. Infeasible means *no* routing exists at this II.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from schedlab.redpanda.backends.arch import Architecture
from schedlab.redpanda.backends.rrg import NetRoute, Unroutable, capacity


def _states(arch: Architecture, ii: int, net: NetRoute, horizon: int):
    """Arcs of one net's time-extended graph up to ``horizon``: (from, to, resource, offset)."""
    k = arch.hops_per_cycle
    arcs = []
    seen = {(net.pe, 0, 0)}
    frontier = [(net.pe, 0, 0)]
    targets = set(net.sink_pe.values())
    dist = arch.distance
    while frontier:
        nxt = []
        for state in frontier:
            pe, o, h = state
            slot = (net.ready + o) % ii
            moves = []
            if h < k:
                moves += [((nb, o, h + 1), ("L", pe, nb, slot)) for nb in arch.neighbours[pe]]
            if h > 0:
                moves.append(((pe, o + 1, 0), None))
            elif arch.registers > 0:
                moves.append(((pe, o + 1, 0), ("R", pe, slot)))
            for to, res in moves:
                npe, no, nh = to
                if no > horizon:
                    continue
                # some consumer must stay reachable by the horizon
                best = min(dist[npe].get(t, 10**6) for t in targets)
                if no + -(-max(0, best - (k - nh)) // k) > horizon:
                    continue
                arcs.append((state, to, res, o))
                if to not in seen:
                    seen.add(to)
                    nxt.append(to)
        frontier = nxt
    return seen, arcs


def exact_route(arch: Architecture, ii: int, nets: list[NetRoute], time_limit: float = 20.0) -> int:
    """Route ``nets`` optimally in place (fewest words moved); raises Unroutable if none exists.

    Returns the number of link/register words used. Meant for small arrays: the program has one
    binary per (consumer, arc of the time-extended graph).
    """
    columns: list[tuple] = []  # ("f", net, sink, arc) or ("u", net, res, offset)
    index: dict[tuple, int] = {}

    def col(key) -> int:
        if key not in index:
            index[key] = len(columns)
            columns.append(key)
        return index[key]

    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0
    per_net_arcs = {}
    for n, net in enumerate(nets):
        horizon = max(net.deadline.values(), default=0)
        states, arcs = _states(arch, ii, net, horizon)
        per_net_arcs[n] = arcs
        for sink in net.sinks:
            target, due = net.sink_pe[sink], net.deadline[sink]
            flow_out: dict = defaultdict(list)
            flow_in: dict = defaultdict(list)
            for a, (src, dst, res, o) in enumerate(arcs):
                c = col(("f", n, sink, a))
                flow_out[src].append(c)
                flow_in[dst].append(c)
                if res is not None:  # f <= u: the word is on that resource at that offset
                    rows += [r, r]
                    cols += [c, col(("u", n, res, o))]
                    vals += [1, -1]
                    lo.append(-np.inf)
                    hi.append(0)
                    r += 1
            deliver = {}
            for s in states:
                if s[0] == target and s[1] <= due:
                    deliver[s] = col(("d", n, sink, s))
                    flow_out[s].append(deliver[s])
            if not deliver:
                raise Unroutable(
                    f"value of node {net.src} cannot reach node {sink[0]} within {due} cycles"
                )
            for s in states:
                out, inn = flow_out.get(s, []), flow_in.get(s, [])
                if not out and not inn:
                    continue
                rows += [r] * (len(out) + len(inn))
                cols += out + inn
                vals += [1] * len(out) + [-1] * len(inn)
                b = 1 if s == (net.pe, 0, 0) else 0
                lo.append(b)
                hi.append(b)
                r += 1
    usage: dict[tuple, list[int]] = defaultdict(list)
    for key, c in index.items():
        if key[0] == "u":
            usage[key[2]].append(c)
    for res, cs in usage.items():
        rows += [r] * len(cs)
        cols += cs
        vals += [1] * len(cs)
        lo.append(0)
        hi.append(capacity(arch, res))
        r += 1
    size = len(columns)
    cost = np.array([1.0 if key[0] == "u" else 1e-3 if key[0] == "f" else 0.0 for key in columns])
    matrix = coo_matrix((vals, (rows, cols)), shape=(r, size)).tocsr()
    result = milp(
        cost,
        constraints=LinearConstraint(matrix, lo, hi),
        integrality=np.ones(size),
        bounds=Bounds(np.zeros(size), np.ones(size)),
        options=dict(time_limit=time_limit, disp=False),
    )
    if result.x is None:
        reason = "no routing exists" if result.status == 2 else f"HiGHS: {result.message}"
        raise Unroutable(f"exact routing at II {ii}: {reason}")
    x = np.round(result.x).astype(int)
    for n, net in enumerate(nets):
        arcs = per_net_arcs[n]
        net.usage, net.steps, net.arrive = set(), {}, {}
        for sink in net.sinks:
            chosen = {
                arcs[key[3]][0]: arcs[key[3]]
                for key, c in index.items()
                if key[0] == "f" and key[1] == n and key[2] == sink and x[c]
            }
            state, steps = (net.pe, 0, 0), []
            ends = {
                key[3]
                for key, c in index.items()
                if key[0] == "d" and key[1] == n and key[2] == sink and x[c]
            }
            while state not in ends:
                src, dst, res, o = chosen[state]
                steps.append((dst, res))
                if res is not None:
                    net.usage.add((res, o))
                state = dst
            net.steps[sink] = steps
            net.arrive[sink] = state[1]
    return int(sum(x[c] for key, c in index.items() if key[0] == "u"))
