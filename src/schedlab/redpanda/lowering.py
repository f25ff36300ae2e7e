"""CFG-to-dataflow conversion: structured MLIR (scf/arith/memref) to the RedPanda graph.

RedPanda (../shared/papers/08-redpanda.md). Loops become ``carry`` (loop-carried values),
``invariant`` (loop-invariant inputs) and ``steer`` (loop exit / body entry) operators; each
``scf.if`` becomes either steer/merge control flow or predication with ``select``, as the flow
decides; memory operations get explicit ordering tokens from the reduced ordering graph of
:mod:`schedlab.redpanda.analysis`. The engine asks the flow and never branches on its name.
"""

from __future__ import annotations

from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import Float32Type, FloatAttr, MemRefType
from xdsl.ir import Block, Operation

from schedlab.core.errors import BadInputError
from schedlab.redpanda.analysis import Access, affine_form, ordering_graph
from schedlab.redpanda.frontend import ALU_OPS, CMP_PREDICATES, Kernel, bit_width
from schedlab.redpanda.graph import Graph, Port
from schedlab.redpanda.policies import BranchShape, Flow, Mode
from schedlab.redpanda.scopes import Scope, join
from schedlab.redpanda.semantics import CMPF_PREDICATES, evaluate, f32_bits


class Lowering:
    """Lower one kernel under one flow."""

    def __init__(self, kernel: Kernel, flow: Flow, mode: Mode = "spatial") -> None:
        self.kernel, self.flow, self.mode = kernel, flow, mode
        self.graph = Graph(kernel.name, memrefs=kernel.memrefs(), args=kernel.scalars())
        names = kernel.arg_names()
        self.memref_of = {arg: names[i] for i, arg in enumerate(kernel.func.body.block.args)}
        written = {self.memref_of[op.memref] for op in kernel.func.walk()
                   if isinstance(op, memref.StoreOp)}
        self.ordered_keys = {flow.memory_key(m) for m in written}
        self.branch_modes: list[str] = []

    # ---- entry point --------------------------------------------------------------------
    def run(self) -> Graph:
        g, fn = self.graph, self.kernel.func
        top = Scope(g, None, "func")
        start = Port(g.add("source").id)
        top.trigger = start
        top.entry_factory = lambda key: start
        for name, arg in zip(self.kernel.arg_names(), fn.body.block.args, strict=True):
            if arg not in self.memref_of or name in self.graph.args:
                if name in self.graph.args:
                    top.env[arg] = Port(g.add("arg", name, bits=bit_width(arg.type)).id)
        self.lower_block(fn.body.block, top)
        ret = fn.body.block.last_op
        for i, value in enumerate(ret.operands):
            g.add("output", str(i), [top.use(value, immediate=False)], index=i)
        g.results = len(ret.operands)
        g.attrs = {"branch_modes": self.branch_modes}
        return g

    # ---- memory footprints --------------------------------------------------------------
    def access(self, op: Operation) -> Access:
        name = self.memref_of[op.memref]
        return Access(op, name, isinstance(op, memref.StoreOp),
                      [affine_form(i) for i in op.indices])

    def footprint(self, op: Operation) -> dict[str, bool]:
        """Ordered memory keys touched by ``op`` (recursively) -> whether it writes them."""
        out: dict[str, bool] = {}
        for inner in op.walk():
            if isinstance(inner, memref.LoadOp | memref.StoreOp):
                key = self.flow.memory_key(self.memref_of[inner.memref])
                if key in self.ordered_keys:
                    out[key] = out.get(key, False) or isinstance(inner, memref.StoreOp)
        return out

    # ---- blocks ---------------------------------------------------------------------------
    def lower_block(self, block: Block, scope: Scope) -> dict[str, Port]:
        """Lower every op of ``block``; returns the block's exit token per memory key."""
        ops = [op for op in block.ops if not isinstance(op, scf.YieldOp | scf.ConditionOp
                                                        | func.ReturnOp)]
        items = [op for op in ops if self.footprint(op)]
        index = {id(op): i for i, op in enumerate(items)}
        prints = [self.footprint(op) for op in items]
        data = self.data_edges(ops, index)
        preds, entry, sinks = ordering_graph(prints, self.conflicts(items, prints), data)
        exits: list[dict[str, Port]] = []
        for op in ops:
            if id(op) not in index:
                self.lower_op(op, scope, None)
                continue
            j = index[id(op)]
            tokens = [exits[i][k] for i, keys in preds[j] for k in sorted(keys)]
            tokens += [scope.entry(k) for k in sorted(entry[j])]
            exits.append(self.lower_op(op, scope, join(self.graph, tokens)))
        keys = {k for p in prints for k in p}
        return {k: join(self.graph, [self._covered(i, k, exits, data) for i in sorted(sinks[k])])
                for k in keys}

    def _covered(self, i: int, key: str, exits: list[dict[str, Port]],
                 data: set[tuple[int, int]]) -> Port:
        """A token implying item i is done: a later access fed by its value fires after it.

        Using that access's own completion instead of a join of both is the token-level half
        of the transitive reduction (instruction-count reduction; only precise flows use it).
        """
        if self.flow.orders_reads():
            return exits[i][key]
        for src, dst in sorted(data):
            if src == i and exits[dst]:
                return next(iter(exits[dst].values()))
        return exits[i][key]

    def conflicts(self, items: list[Operation], prints: list[dict[str, bool]]
                  ) -> dict[tuple[int, int], set[str]]:
        simple = [self.access(op) if isinstance(op, memref.LoadOp | memref.StoreOp) else None
                  for op in items]
        out: dict[tuple[int, int], set[str]] = {}
        for j in range(len(items)):
            for i in range(j):
                for key in prints[i].keys() & prints[j].keys():
                    if not (prints[i][key] or prints[j][key] or self.flow.orders_reads()):
                        continue
                    a, b = simple[i], simple[j]
                    if a is None or b is None or self.flow.may_alias(a, b):
                        out.setdefault((i, j), set()).add(key)
        return out

    @staticmethod
    def data_edges(ops: list[Operation], index: dict[int, int]) -> set[tuple[int, int]]:
        """load -> access pairs where the access's operands depend on the load's value."""
        depends: dict[object, set[int]] = {}
        edges: set[tuple[int, int]] = set()
        for op in ops:
            deps: set[int] = set()
            for operand in op.operands:
                deps |= depends.get(operand, set())
            simple = isinstance(op, memref.LoadOp | memref.StoreOp)
            if simple and id(op) in index:
                edges |= {(i, index[id(op)]) for i in deps}
            own = {index[id(op)]} if isinstance(op, memref.LoadOp) and id(op) in index else set()
            if isinstance(op, arith.ConstantOp | memref.LoadOp) or op.name in ALU_OPS or \
                    isinstance(op, arith.CmpiOp | arith.CmpfOp | arith.SelectOp):
                for result in op.results:
                    depends[result] = deps | own
        return edges

    # ---- operations -----------------------------------------------------------------------
    def lower_op(self, op: Operation, scope: Scope, token: Port | None) -> dict[str, Port]:
        if isinstance(op, arith.ConstantOp):
            bits = bit_width(op.result.type)
            if isinstance(op.value, FloatAttr):  # f32: its IEEE bit pattern (semantics.py)
                if not isinstance(op.result.type, Float32Type):
                    raise BadInputError(f"only f32 floats are supported, not {op.result.type}",
                                        field=op.name)
                value = f32_bits(op.value.value.data)
            else:
                value = int(op.value.value.data)
            scope.constants[op.result] = (value & 1 if bits == 1 else value, bits)
        elif op.name in ALU_OPS or isinstance(op, arith.CmpiOp | arith.CmpfOp | arith.SelectOp):
            self.lower_alu(op, scope)
        elif isinstance(op, memref.LoadOp | memref.StoreOp):
            return self.lower_memory(op, scope, token)
        elif isinstance(op, scf.ForOp | scf.WhileOp):
            from schedlab.redpanda.loops import lower_loop
            return lower_loop(self, op, scope, token)
        elif isinstance(op, scf.IfOp):
            return self.lower_if(op, scope, token)
        else:  # the front end rejects everything else; this guards the engine itself
            raise BadInputError(f"cannot lower '{op.name}'", field=op.name)
        return {}

    def lower_alu(self, op: Operation, scope: Scope) -> None:
        if isinstance(op, arith.CmpiOp):
            fn = CMP_PREDICATES[op.predicate.value.data]
            bits = bit_width(op.lhs.type)
        elif isinstance(op, arith.CmpfOp):
            fn = "f" + CMPF_PREDICATES[op.predicate.value.data]
            bits = bit_width(op.lhs.type)
        elif op.name in ("arith.sitofp", "arith.fptosi"):  # bits: the operand's width
            fn, bits = ALU_OPS[op.name], bit_width(op.operands[0].type)
        elif isinstance(op, arith.SelectOp):
            fn, bits = "select", bit_width(op.result.type)
        else:
            fn, bits = ALU_OPS[op.name], bit_width(op.result.type)
        operands = list(op.operands)
        if all(scope.is_const(v) for v in operands):  # constant folding
            values = [scope.constants[v][0] for v in operands]
            out_bits = bit_width(op.result.type)
            scope.constants[op.result] = (evaluate(fn, values, bits, out_bits), out_bits)
            return
        if fn == "select" and scope.is_const(operands[0]):
            chosen = operands[1] if scope.constants[operands[0]][0] else operands[2]
            if scope.is_const(chosen):
                scope.constants[op.result] = scope.constants[chosen]
            else:
                scope.env[op.result] = scope.get(chosen)
            return
        ports = [scope.use(v, immediate=True) for v in operands]
        kind = "select" if fn == "select" else "alu"
        node = self.graph.add(kind, fn, ports, bits=bits, out_bits=bit_width(op.result.type))
        scope.env[op.result] = Port(node.id)

    def lower_memory(self, op: Operation, scope: Scope, token: Port | None) -> dict[str, Port]:
        name = self.memref_of[op.memref]
        ports = [scope.use(i, immediate=True) for i in op.indices]
        if isinstance(op, memref.StoreOp):
            ports.insert(0, scope.use(op.value, immediate=True))
        if scope.pred is not None:
            ports.append(scope.pred)
        kind = "store" if isinstance(op, memref.StoreOp) else "load"
        node = self.graph.add(kind, name, ports, n_out=1 if kind == "store" else 2,
                              memref=name, predicated=scope.pred is not None,
                              bits=bit_width(op.memref.type.element_type))
        order = [token] if token is not None else []
        if all(self.graph.nodes[p.node].is_immediate for p in ports) and not order:
            order = [scope.trigger_port()]  # nothing dynamic would ever fire it
        if order:
            self.graph.add_order(node, order)
        if kind == "load":
            scope.env[op.res] = Port(node.id, 0)
        key = self.flow.memory_key(name)
        done = Port(node.id, 0 if kind == "store" else 1)
        return {key: done} if key in self.ordered_keys else {}

    # ---- branches -------------------------------------------------------------------------
    def branch_shape(self, op: scf.IfOp, scope: Scope) -> BranchShape:
        def count(region) -> int:
            skip = scf.YieldOp | arith.ConstantOp
            return sum(1 for o in region.walk() if not isinstance(o, skip))

        live: set = set()
        for region in (op.true_region, op.false_region):
            for inner in region.walk():
                for v in inner.operands:
                    if not scope.is_const(v) and not _inside(v, op) and \
                            not isinstance(v.type, MemRefType):
                        live.add(v)
        return BranchShape(count(op.true_region), count(op.false_region), len(live),
                           len(op.results), bool(self.footprint(op)),
                           any(isinstance(o, scf.ForOp | scf.WhileOp) for o in op.walk()))

    def lower_if(self, op: scf.IfOp, scope: Scope, token: Port | None) -> dict[str, Port]:
        shape = self.branch_shape(op, scope)
        mode = self.flow.branch_mode(shape, self.mode)
        if scope.pred is not None and not shape.has_loops:
            mode = "predicate"  # under a predicate nothing may execute unconditionally
        self.branch_modes.append(mode)
        cond = scope.use(op.cond, immediate=False)
        if mode == "predicate":
            return self._lower_predicated(op, scope, token, cond)
        return self._lower_steered(op, scope, token, cond)

    def _branches(self, op: scf.IfOp) -> list[Block]:
        return [op.true_region.block] + ([op.false_region.block] if op.false_region.blocks
                                         else [])

    def _lower_steered(self, op, scope: Scope, token, cond: Port) -> dict[str, Port]:
        sides, exits = [], []
        for polarity, block in zip((True, False), self._branches(op), strict=False):
            side = Scope(self.graph, scope, "branch", decider=cond, polarity=polarity,
                         consts=scope.constants)
            side.entry_factory = lambda key, s=side: s.steer(s.polarity, token)
            exits.append(self.lower_block(block, side))
            sides.append(side)
        if len(sides) == 1:  # no else: the untaken side forwards the token unchanged
            side = Scope(self.graph, scope, "branch", decider=cond, polarity=False,
                         consts=scope.constants)
            side.entry_factory = lambda key, s=side: s.steer(False, token)
            sides.append(side)
            exits.append({})
        for i, result in enumerate(op.results):
            t, f = (s.use(b.last_op.operands[i], immediate=False)
                    for s, b in zip(sides, self._branches(op), strict=True))
            scope.env[result] = Port(self.graph.add("merge", "", [cond, t, f]).id)
        keys = set(self.footprint(op))
        return {k: Port(self.graph.add("merge", "", [
            cond, exits[0].get(k) or sides[0].entry(k), exits[1].get(k) or sides[1].entry(k),
        ]).id) for k in sorted(keys)}

    def _lower_predicated(self, op, scope: Scope, token, cond: Port) -> dict[str, Port]:
        has_memory = bool(self.footprint(op)) or any(
            isinstance(o, memref.LoadOp | memref.StoreOp) for o in op.walk())
        exits, sides = [], []
        for polarity, block in zip((True, False), self._branches(op), strict=False):
            side = Scope(self.graph, scope, "predicated", consts=scope.constants)
            side.entry_factory = lambda key: token
            if has_memory:
                side.pred = self._predicate(scope, cond, polarity)
            side.env = dict(scope.env)
            exits.append(self.lower_block(block, side))
            sides.append(side)
        for i, result in enumerate(op.results):
            values = [b.last_op.operands[i] for b in self._branches(op)]
            if all(scope.is_const(v) for v in values) and \
                    scope.constants[values[0]] == scope.constants[values[1]]:
                scope.constants[result] = scope.constants[values[0]]
                continue
            t, f = (s.use(v, immediate=True) for s, v in zip(sides, values, strict=True))
            scope.env[result] = t if t == f else Port(self.graph.add(
                "select", "select", [cond, t, f], bits=bit_width(result.type),
                out_bits=bit_width(result.type)).id)
        keys = set(self.footprint(op))
        return {k: join(self.graph, [e[k] for e in exits if k in e] or [token])
                for k in sorted(keys)}

    def _predicate(self, scope: Scope, cond: Port, polarity: bool) -> Port:
        g = self.graph
        own = cond if polarity else Port(g.add("alu", "xor", [cond, scope.immediate(1, 1)],
                                               bits=1, out_bits=1).id)
        if scope.pred is None:
            return own
        return Port(g.add("alu", "and", [scope.pred, own], bits=1, out_bits=1).id)


def _inside(value, op: Operation) -> bool:
    owner = value.owner
    node = owner.parent_op() if isinstance(owner, Block) else owner
    while node is not None:
        if node is op:
            return True
        node = node.parent_op()
    return False


def lower(kernel: Kernel, flow: Flow, mode: Mode = "spatial") -> Graph:
    """Convert ``kernel`` to a RedPanda dataflow graph under ``flow``."""
    graph = Lowering(kernel, flow, mode).run()
    graph.validate()
    return graph
