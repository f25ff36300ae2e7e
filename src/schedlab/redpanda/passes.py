"""Middle-end passes over the RedPanda graph: cleanup, instruction-count reduction, forks.

RedPanda (../shared/papers/08-redpanda.md) reduces instruction count after CFG-to-dataflow
conversion. ``dce`` and ``cse`` are standard cleanups every flow gets; ``fuse_steers`` is the
RedPanda-specific reduction: a steer whose value comes from an ALU instruction used nowhere else
is folded into that instruction as an output guard (the PE emits only when the decider matches),
saving an instruction and a routing hop. ``materialize_forks`` makes fan-out explicit, which the
dynamic-HLS back end (issue 15) needs and the CGRA back end does not.
"""

from __future__ import annotations

from schedlab.redpanda.graph import Graph, Port

SIDE_EFFECTS = frozenset({"store", "output"})
PURE = frozenset({"alu", "select", "const", "steer", "invariant", "join", "merge", "carry"})


def dce(graph: Graph) -> int:
    """Remove nodes nothing observable depends on; returns how many were removed."""
    live = {n.id for n in graph.nodes.values() if n.kind in SIDE_EFFECTS}
    stack = list(live)
    while stack:
        for port in graph.nodes[stack.pop()].inputs:
            if port is not None and port.node not in live:
                live.add(port.node)
                stack.append(port.node)
    dead = [nid for nid in graph.nodes if nid not in live]
    for nid in dead:
        del graph.nodes[nid]
    return len(dead)


def _replace_uses(graph: Graph, old: Port, new: Port) -> None:
    for node in graph.nodes.values():
        node.inputs = [new if p == old else p for p in node.inputs]


def cse(graph: Graph) -> int:
    """Merge identical pure nodes (same kind, function, operands and attributes)."""
    removed, changed = 0, True
    while changed:
        changed = False
        seen: dict[tuple, int] = {}
        for node in list(graph.nodes.values()):
            if node.kind not in PURE or node.kind == "carry":
                continue  # carries are cyclic; their operands are only final after lowering
            key = (node.kind, node.fn, tuple(node.inputs), tuple(sorted(node.attrs.items())))
            if key in seen:
                for index in range(node.n_out):
                    _replace_uses(graph, Port(node.id, index), Port(seen[key], index))
                del graph.nodes[node.id]
                removed += 1
                changed = True
            else:
                seen[key] = node.id
    return removed


def fuse_steers(graph: Graph) -> int:
    """Fold ``steer(d, alu(...))`` into the ALU instruction when the ALU has no other use."""
    users = graph.consumers()
    fused = 0
    for steer in [n for n in graph.nodes.values() if n.kind == "steer"]:
        source = graph.nodes.get(steer.inputs[1].node)
        if source is None or source.kind not in ("alu", "select") or "guard" in source.attrs:
            continue
        if len(users.get(Port(source.id, 0), [])) != 1 or source.attrs.get("n_order"):
            continue
        source.inputs.append(steer.inputs[0])
        source.attrs["guard"] = steer.fn == "true"
        _replace_uses(graph, Port(steer.id, 0), Port(source.id, 0))
        del graph.nodes[steer.id]
        users = graph.consumers()
        fused += 1
    return fused


def materialize_forks(graph: Graph) -> int:
    """Give every multi-consumer output an explicit ``fork`` node (DHLS elastic circuits)."""
    added = 0
    for port, readers in list(graph.consumers().items()):
        if len(readers) < 2 or graph.nodes[port.node].is_immediate:
            continue
        fork = graph.add("fork", "", [port], n_out=len(readers))
        for index, (nid, operand) in enumerate(readers):
            graph.nodes[nid].inputs[operand] = Port(fork.id, index)
        added += 1
    return added
