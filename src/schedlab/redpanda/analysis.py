"""Memory-ordering analysis: affine subscripts, dependence tests and the ordering graph.

RedPanda (../shared/papers/08-redpanda.md) orders only the memory operations that can really
conflict. We summarise each access's subscripts as affine forms over SSA values (loop induction
variables, kernel arguments, and opaque values treated as symbols), prove independence with a
per-dimension constant-difference test (intra-iteration) and a distance test (across the
iterations of one loop), and drop orderings already implied by others with a transitive
reduction (NetworkX) over the union of ordering and data edges.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
from xdsl.dialects import arith, scf
from xdsl.ir import Block, Operation, SSAValue

Form = dict[object, int]  # SSA value -> coefficient; the key 1 holds the constant term


@dataclass
class Access:
    """One memref.load / memref.store with its subscripts as affine forms."""

    op: Operation
    memref: str
    write: bool
    forms: list[Form]


def affine_form(value: SSAValue, depth: int = 0) -> Form:
    """The affine form of an index value; non-affine values become opaque symbols."""
    owner = value.owner
    if depth > 32 or isinstance(owner, Block):
        return {value: 1}
    if isinstance(owner, arith.ConstantOp):
        return {1: int(owner.value.value.data)}
    if isinstance(owner, arith.IndexCastOp):
        return affine_form(owner.input, depth + 1)
    if isinstance(owner, arith.AddiOp | arith.SubiOp):
        left, right = affine_form(owner.lhs, depth + 1), affine_form(owner.rhs, depth + 1)
        sign = 1 if isinstance(owner, arith.AddiOp) else -1
        out = dict(left)
        for key, coef in right.items():
            out[key] = out.get(key, 0) + sign * coef
        return {k: c for k, c in out.items() if c != 0 or k == 1}
    if isinstance(owner, arith.MuliOp):
        left, right = affine_form(owner.lhs, depth + 1), affine_form(owner.rhs, depth + 1)
        for a, b in ((left, right), (right, left)):
            if set(a) <= {1}:
                scale = a.get(1, 0)
                return {k: c * scale for k, c in b.items() if c * scale != 0 or k == 1}
    return {value: 1}


def _const(form: Form) -> int:
    return form.get(1, 0)


def _vars(form: Form) -> dict[object, int]:
    return {k: c for k, c in form.items() if k != 1 and c != 0}


def may_alias_same_iteration(a: Access, b: Access) -> bool:
    """False only when some dimension differs by a non-zero constant in the same iteration."""
    if a.memref != b.memref:
        return False
    for fa, fb in zip(a.forms, b.forms, strict=False):
        if _vars(fa) == _vars(fb) and _const(fa) != _const(fb):
            return False
    return True


def _defined_inside(value: object, loop: Operation) -> bool:
    if not isinstance(value, SSAValue):
        return False
    owner = value.owner
    op = owner.parent_op() if isinstance(owner, Block) else owner
    while op is not None:
        if op is loop:
            return True
        op = op.parent_op()
    return False


def _dimension_separates(fa: Form, fb: Form, loop: Operation, iv: SSAValue | None) -> bool:
    """True when this subscript pair proves no alias between *different* iterations of loop."""
    va, vb = _vars(fa), _vars(fb)
    for key in set(va) | set(vb):
        if key is iv:
            continue
        if _defined_inside(key, loop) or va.get(key, 0) != vb.get(key, 0):
            return False  # varies inside the loop, or differs: no information
    ca, cb = (va.get(iv, 0), vb.get(iv, 0)) if iv is not None else (0, 0)
    if ca != cb:
        return False
    delta = _const(fb) - _const(fa)
    if ca == 0:
        return delta != 0  # loop-invariant addresses: never equal iff constants differ
    return delta == 0 or delta % ca != 0  # a*(i - i') = delta has no solution with i != i'


def loop_carries_dependence(loop: Operation, accesses: list[Access]) -> bool:
    """May two accesses (one a write) in different iterations of ``loop`` touch one address?"""
    iv = loop.body.block.args[0] if isinstance(loop, scf.ForOp) else None
    for i, a in enumerate(accesses):
        for b in accesses[i:]:
            if a.memref != b.memref or not (a.write or b.write):
                continue
            if not any(_dimension_separates(fa, fb, loop, iv)
                       for fa, fb in zip(a.forms, b.forms, strict=False)):
                return True
    return False


def ordering_graph(
    footprints: list[dict[str, bool]],
    conflicts: dict[tuple[int, int], set[str]],
    data_edges: set[tuple[int, int]],
) -> tuple[dict[int, list[tuple[int, set[str]]]], dict[int, set[str]], dict[str, set[int]]]:
    """Reduce the ordering edges of one block.

    Returns (kept predecessors with their keys, keys for which an item needs the block's entry
    token, sink items per key whose completion ends the block's use of that key).
    """
    n = len(footprints)
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(conflicts)
    graph.add_edges_from(data_edges)
    reduced = nx.transitive_reduction(graph) if n else graph
    preds: dict[int, list[tuple[int, set[str]]]] = {j: [] for j in range(n)}
    for i, j in reduced.edges:
        if (i, j) in conflicts and (i, j) not in data_edges:
            preds[j].append((i, conflicts[(i, j)]))
    entry = {j: {k for k in footprints[j]
                 if not any(k in conflicts.get((i, j), ()) for i in range(j))}
             for j in range(n)}
    sinks: dict[str, set[int]] = {}
    for i in range(n):
        for k in footprints[i]:
            if not any(k in conflicts.get((i, j), ()) for j in range(i + 1, n)):
                sinks.setdefault(k, set()).add(i)
    return preds, entry, sinks
