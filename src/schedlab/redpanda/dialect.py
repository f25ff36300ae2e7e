"""The RedPanda IR as an xDSL (IRDL) dialect, and its lossless conversion to/from the graph.

RedPanda (../shared/papers/08-redpanda.md) shares one IR between its CGRA and dynamic-HLS back
ends. Here that IR is a real MLIR dialect defined with xDSL's IRDL: a ``redpanda.graph`` op holds
a graph region (operands may refer to values defined later, as loops need) of dataflow
instructions; ordering tokens have their own type, ``!redpanda.token``. The middle-end passes
are xDSL ``ModulePass``es (:mod:`schedlab.redpanda.xdsl_passes`) that work through this form.
"""

from __future__ import annotations

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IntAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
)
from xdsl.ir import Block, Dialect, ParametrizedAttribute, Region, SSAValue, TypeAttribute
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    prop_def,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import NoTerminator

from schedlab.redpanda.graph import ARITY, Graph, Node, Port


@irdl_attr_definition
class TokenType(ParametrizedAttribute, TypeAttribute):
    """A value-less token: memory ordering, triggers, loop completion."""

    name = "redpanda.token"


def _node_op(kind: str) -> type[IRDLOperation]:
    """One IRDL op per RedPanda node kind; operands/results are variadic by design."""

    class _Op(IRDLOperation):
        name = f"redpanda.{kind}"
        ins = var_operand_def()
        outs = var_result_def()
        fn = prop_def(StringAttr)
        extra = prop_def(DictionaryAttr)

    _Op.__name__ = f"{kind.capitalize()}Op"
    return irdl_op_definition(_Op)


NODE_OPS: dict[str, type[IRDLOperation]] = {kind: _node_op(kind) for kind in ARITY}


@irdl_op_definition
class GraphOp(IRDLOperation):
    """A whole kernel: the dataflow instructions plus the memory it addresses."""

    name = "redpanda.graph"
    body = region_def("single_block")
    sym_name = prop_def(StringAttr)
    memrefs = prop_def(DictionaryAttr)
    args = prop_def(ArrayAttr)
    traits = traits_def(NoTerminator())


RedPandaDialect = Dialect("redpanda", [GraphOp, *NODE_OPS.values()], [TokenType])

_TOKEN_OUTPUTS = {("load", 1), ("store", 0), ("join", 0), ("source", 0)}


def _encode(value: object):
    if isinstance(value, bool):
        return StringAttr("true" if value else "false")
    if isinstance(value, int):
        return IntAttr(value)
    return StringAttr(str(value))


def _decode(attr) -> object:
    if isinstance(attr, IntAttr):
        return attr.data
    text = attr.data
    return {"true": True, "false": False}.get(text, text)


def to_xdsl(graph: Graph) -> ModuleOp:
    """Graph -> ``builtin.module { redpanda.graph { ... } }`` (node ids become op order)."""
    block = Block()
    ops: dict[int, IRDLOperation] = {}
    for node in sorted(graph.nodes.values(), key=lambda n: n.id):
        types = [TokenType() if (node.kind, i) in _TOKEN_OUTPUTS else IntegerType(64)
                 for i in range(node.n_out)]
        extra = DictionaryAttr({k: _encode(v) for k, v in node.attrs.items()})
        op = NODE_OPS[node.kind].create(result_types=types, properties={
            "fn": StringAttr(node.fn), "extra": extra})
        ops[node.id] = op
        block.add_op(op)
    for node in graph.nodes.values():  # second pass: operands may point forward (loops)
        ops[node.id].operands = [ops[p.node].results[p.index] for p in node.inputs]
    shapes = DictionaryAttr({n: ArrayAttr([IntAttr(d) for d in s])
                             for n, s in graph.memrefs.items()})
    top = GraphOp.create(regions=[Region(block)], properties={
        "sym_name": StringAttr(graph.name), "memrefs": shapes,
        "args": ArrayAttr([StringAttr(a) for a in graph.args])})
    return ModuleOp([top])


def from_xdsl(module: ModuleOp) -> Graph:
    """The inverse of :func:`to_xdsl`."""
    top = next(op for op in module.ops if isinstance(op, GraphOp))
    graph = Graph(top.sym_name.data,
                  memrefs={n: tuple(d.data for d in v.data) for n, v in top.memrefs.data.items()},
                  args=[a.data for a in top.args.data])
    ids: dict[SSAValue, Port] = {}
    ops = list(top.body.block.ops)
    for number, op in enumerate(ops):
        for index, result in enumerate(op.results):
            ids[result] = Port(number, index)
    for number, op in enumerate(ops):
        kind = op.name.split(".", 1)[1]
        attrs = {k: _decode(v) for k, v in op.properties["extra"].data.items()}
        graph.nodes[number] = Node(number, kind, op.properties["fn"].data,
                                   [ids[v] for v in op.operands], len(op.results), attrs)
    graph._next = len(ops)
    graph.results = sum(n.kind == "output" for n in graph.nodes.values())
    return graph


def print_ir(graph: Graph) -> str:
    """The graph as MLIR text in the RedPanda dialect."""
    from io import StringIO

    from xdsl.printer import Printer

    stream = StringIO()
    Printer(stream=stream).print_op(to_xdsl(graph))
    return stream.getvalue()
