"""The time-extended (modulo) routing-resource graph of a CGRA, and route search on it.

RedPanda (../shared/papers/08-redpanda.md) maps onto dataflow CGRAs whose interconnect is
configured per cycle of the initiation interval II (the MRRG of Mei et al.'s DRESC, which
CGRA-Mapper also uses). A value produced on PE ``p`` becomes ready at cycle ``r``; from there it
may, each cycle, cross up to ``hops_per_cycle`` directed links (each link carries
``link_capacity`` words per cycle) or wait one cycle in a routing register of the PE it is on
(``registers`` per PE). Resource ``(kind, where, slot)`` is used at cycle ``r + offset``, i.e.
at slot ``(r + offset) mod II``, because an instruction only fires in its own context slot: the
same reservation repeats every II cycles whatever the data does.

Search states are ``(pe, offset, hops)``: the value is at ``pe`` during cycle ``offset``
(relative to ``r``), having crossed ``hops`` links in that cycle. A sink on PE ``q`` is reached
at arrival offset ``offset``: the links crossed in a cycle feed the consumer's operand input in
that cycle, and a value that must go on is latched in the router it reached (so a neighbour costs
no extra cycle and each further ``hops_per_cycle`` links cost one, the ``hops - 1`` of the
mesh model with one hop per cycle).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from schedlab.redpanda.backends.arch import PE, Architecture

State = tuple[PE, int, int]
Resource = tuple  # ("L", a, b, slot) | ("R", pe, slot)


def capacity(arch: Architecture, res: Resource) -> int:
    return arch.link_capacity if res[0] == "L" else arch.registers


def arrival(state: State) -> int:
    return state[1]


def moves(arch: Architecture, ii: int, base: int, state: State):
    """(next state, resource used or None) from ``state``."""
    pe, o, h = state
    slot = (base + o) % ii
    if h < arch.hops_per_cycle:
        for nb in arch.neighbours[pe]:
            yield (nb, o, h + 1), ("L", pe, nb, slot)
    if h > 0:
        yield (pe, o + 1, 0), None  # latched in the receiving router
    elif arch.registers > 0:
        yield (pe, o + 1, 0), ("R", pe, slot)  # wait one cycle in a routing register


def search(
    arch: Architecture,
    ii: int,
    base: int,
    starts: Iterable[State],
    target: PE,
    deadline: int,
    cost: Callable[[Resource, int], float],
    delay_weight: float = 0.05,
) -> tuple[list[tuple[State, Resource | None]], State] | None:
    """Cheapest path from any of ``starts`` to ``target`` arriving by ``deadline``.

    Returns the steps (state entered, resource used) and the start state it grew from, or
    None if the target cannot be reached in time. ``cost(resource, offset)`` prices one use.
    """
    dist_to = arch.distance
    best: dict[State, float] = {}
    parent: dict[State, tuple[State, Resource | None] | None] = {}
    heap: list[tuple[float, int, State]] = []
    tick = 0
    for s in starts:
        if arrival(s) > deadline:
            continue
        best[s] = 0.0
        parent[s] = None
        heap.append((0.0, tick, s))
        tick += 1
    heapq.heapify(heap)
    k = arch.hops_per_cycle
    while heap:
        d, _, state = heapq.heappop(heap)
        if d > best.get(state, float("inf")):
            continue
        pe, o, h = state
        if pe == target:
            path = []
            cur = state
            while parent[cur] is not None:
                prev, res = parent[cur]
                path.append((cur, res))
                cur = prev
            path.reverse()
            return path, cur
        for nxt, res in moves(arch, ii, base, state):
            npe, no, nh = nxt
            # prune states from which the target cannot be reached by the deadline
            remaining = dist_to[npe].get(target)
            if remaining is None:
                continue
            earliest = no + -(-max(0, remaining - (k - nh)) // k)
            if earliest > deadline:
                continue
            step = (cost(res, o) if res is not None else 0.0) + (delay_weight if no > o else 0)
            nd = d + step
            if nd < best.get(nxt, float("inf")):
                best[nxt] = nd
                parent[nxt] = (state, res)
                heapq.heappush(heap, (nd, tick, nxt))
                tick += 1
    return None


@dataclass
class NetRoute:
    """One value's route tree: per sink, the steps from the producer and the arrival offset."""

    src: int
    port: int
    pe: PE
    ready: int  # scheduled cycle the value leaves the unit
    sinks: list[tuple[int, int]] = field(default_factory=list)  # (node, operand)
    deadline: dict[tuple[int, int], int] = field(default_factory=dict)
    sink_pe: dict[tuple[int, int], PE] = field(default_factory=dict)
    steps: dict[tuple[int, int], list[tuple[State, Resource | None]]] = field(default_factory=dict)
    arrive: dict[tuple[int, int], int] = field(default_factory=dict)
    usage: set[tuple[Resource, int]] = field(default_factory=set)  # (resource, offset)


class Unroutable(Exception):
    """Routing did not converge (or a deadline cannot be met at all)."""

    def __init__(self, reason: str, overuse: int = 0) -> None:
        super().__init__(reason)
        self.reason, self.overuse = reason, overuse
