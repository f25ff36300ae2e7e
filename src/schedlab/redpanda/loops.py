"""Loop lowering: carry/invariant/steer networks, loop-carried ordering tokens, pipelining.

RedPanda (../shared/papers/08-redpanda.md). A loop becomes a self-timed pipeline: the next
iteration starts as soon as its loop-carried values are ready, so iterations overlap up to
the recurrence bound. Memory ordering travels between iterations only for keys whose accesses
may conflict across iterations (``Flow.carried``); otherwise iterations only wait for the
accesses before the loop and a *completion* carry tells later code when all are done. A
non-pipelined flow gates each iteration on the previous iteration's completion instead.
"""

from __future__ import annotations

from xdsl.dialects import memref, scf
from xdsl.ir import Operation

from schedlab.core.errors import BadInputError
from schedlab.redpanda.graph import Port
from schedlab.redpanda.scopes import Scope, join


def lower_loop(low, op: Operation, scope: Scope, token: Port | None) -> dict[str, Port]:
    """Lower an scf.for or scf.while in ``scope``; returns the loop's exit token per key."""
    g = low.graph
    cond = Scope(g, scope, "loop_cond", consts=scope.constants)
    body = Scope(g, scope, "loop_body", consts=scope.constants)
    if isinstance(op, scf.ForOp):
        carries, iv_carry, c = _for_header(low, op, scope, cond, body)
    else:
        carries, c = _while_header(low, op, scope, cond, body)
        iv_carry = carries[0]
    keys = sorted(low.footprint(op))
    accesses = [low.access(o) for o in op.walk() if isinstance(o, memref.LoadOp | memref.StoreOp)]
    token_carries: dict[str, object] = {}

    def entry(key: str) -> Port:
        mine = [a for a in accesses if low.flow.memory_key(a.memref) == key]
        if low.flow.carried(op, mine):
            node = g.add("carry", "", [token, c, None])
            token_carries[key] = node
            return body.steer(True, Port(node.id))
        return Port(g.add("invariant", "body", [c, token]).id)

    body.entry_factory = entry
    block = op.body.block if isinstance(op, scf.ForOp) else op.after_region.block
    exits = low.lower_block(block, body)
    yields = block.last_op
    yielded = [body.use(v, immediate=False) for v in yields.operands]
    for node, port in zip(carries, yielded, strict=True):
        node.inputs[2] = port
    if isinstance(op, scf.ForOp):
        step = body.use(op.step, immediate=True)
        iv_carry.inputs[2] = Port(g.add("alu", "add", [body.env[op.body.block.args[0]], step],
                                        bits=64, out_bits=64).id)
    if not low.flow.pipelined:
        barrier = join(g, [exits[k] for k in keys if k in exits] + yielded)
        if barrier is not None:
            g.add_order(iv_carry, [barrier])
    out: dict[str, Port] = {}
    for key, node in token_carries.items():
        node.inputs[2] = exits.get(key) or body.entry(key)
        out[key] = Port(g.add("steer", "false", [c, Port(node.id)]).id)
    # keys whose order does not travel between iterations share one completion carry
    rest = [k for k in keys if k not in token_carries]
    if rest:
        done = join(g, [exits.get(k) or body.entry(k) for k in rest])
        node = g.add("carry", "", [token, c, done])
        exit_port = Port(g.add("steer", "false", [c, Port(node.id)]).id)
        out.update(dict.fromkeys(rest, exit_port))
    return out


def _for_header(low, op: scf.ForOp, scope: Scope, cond: Scope, body: Scope):
    g = low.graph
    iv = g.add("carry", "", [scope.use(op.lb, immediate=False), None, None])
    cond.trigger = Port(iv.id)
    ub = cond.use(op.ub, immediate=True)
    c = Port(g.add("alu", "slt", [Port(iv.id), ub], bits=64, out_bits=1).id)
    cond.set_decider(c)
    body.set_decider(c)
    iv.inputs[1] = c
    iv_body = body.steer(True, Port(iv.id))
    body.env[op.body.block.args[0]] = iv_body
    body.trigger = iv_body
    carries = []
    for arg, init, result in zip(op.body.block.args[1:], op.iter_args, op.results, strict=True):
        node = g.add("carry", "", [scope.use(init, immediate=False), c, None])
        carries.append(node)
        body.env[arg] = body.steer(True, Port(node.id))
        scope.env[result] = Port(g.add("steer", "false", [c, Port(node.id)]).id)
    return carries, iv, c


def _while_header(low, op: scf.WhileOp, scope: Scope, cond: Scope, body: Scope):
    g = low.graph
    if not op.arguments:
        raise BadInputError("scf.while needs at least one loop-carried value",
                            field="scf.while")
    for inner in op.before_region.walk():
        if isinstance(inner, memref.LoadOp | memref.StoreOp) and low.footprint(inner):
            raise BadInputError("a while condition may only read memrefs the kernel never "
                                "writes; move the access into the loop body",
                                field="scf.while")
    carries = []
    for arg, init in zip(op.before_region.block.args, op.arguments, strict=True):
        node = g.add("carry", "", [scope.use(init, immediate=False), None, None])
        carries.append(node)
        cond.env[arg] = Port(node.id)
    cond.trigger = Port(carries[0].id)
    low.lower_block(op.before_region.block, cond)
    condition = op.before_region.block.last_op
    c = cond.use(condition.condition, immediate=False)
    cond.set_decider(c)
    body.set_decider(c)
    for node in carries:
        node.inputs[1] = c
    forwarded = [cond.use(v, immediate=False) for v in condition.args]
    for arg, port in zip(op.after_region.block.args, forwarded, strict=True):
        body.env[arg] = body.steer(True, port)
    for result, port in zip(op.results, forwarded, strict=True):
        scope.env[result] = Port(g.add("steer", "false", [c, port]).id)
    body.trigger = body.env[op.after_region.block.args[0]] if op.after_region.block.args else \
        body.steer(True, Port(carries[0].id))
    return carries, c
