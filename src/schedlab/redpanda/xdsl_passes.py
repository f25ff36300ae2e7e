"""The RedPanda middle end as xDSL passes, so it composes with xDSL's own pipelines.

RedPanda (../shared/papers/08-redpanda.md). ``convert-scf-to-redpanda`` replaces the kernel's
``func.func`` with a ``redpanda.graph``; the other passes rewrite a ``redpanda.graph`` in place.
Each pass lifts the region to the plain graph, transforms it and writes it back, because the
analyses walk the graph many times and the plain form is an order of magnitude faster to walk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from schedlab.redpanda.dialect import RedPandaDialect, from_xdsl, to_xdsl
from schedlab.redpanda.graph import Graph
from schedlab.redpanda.passes import cse, dce, fuse_steers, materialize_forks


def _replace_body(module: ModuleOp, graph: Graph) -> None:
    fresh = to_xdsl(graph)
    for op in list(module.ops):
        Rewriter.erase_op(op, safe_erase=False)
    for op in list(fresh.ops):
        op.detach()
        module.body.block.add_op(op)


def _graph_pass(pass_name: str, transform: Callable[[Graph], int]) -> type[ModulePass]:
    @dataclass(frozen=True)
    class _Pass(ModulePass):
        name = pass_name

        def apply(self, ctx: Context, op: ModuleOp) -> None:
            graph = from_xdsl(op)
            transform(graph)
            _replace_body(op, graph)

    _Pass.__name__ = "".join(part.capitalize() for part in pass_name.split("-")) + "Pass"
    return _Pass


RedPandaDCEPass = _graph_pass("redpanda-dce", dce)
RedPandaCSEPass = _graph_pass("redpanda-cse", cse)
FuseSteersPass = _graph_pass("redpanda-fuse-steers", fuse_steers)
MaterializeForksPass = _graph_pass("redpanda-materialize-forks", materialize_forks)


@dataclass(frozen=True)
class ConvertScfToRedPandaPass(ModulePass):
    """CFG-to-dataflow conversion (with memory ordering and branch handling) as a pass."""

    name = "convert-scf-to-redpanda"
    flow: str = "redpanda"
    mode: str = "spatial"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from schedlab.redpanda.frontend import Kernel
        from schedlab.redpanda.lowering import lower
        from schedlab.redpanda.policies import get_flow

        fn = next(o for o in op.ops if o.name == "func.func")
        kernel = Kernel(fn.sym_name.data, op, fn, "")
        _replace_body(op, lower(kernel, get_flow(self.flow), self.mode))  # type: ignore[arg-type]


PASSES: dict[str, type[ModulePass]] = {p.name: p for p in (
    ConvertScfToRedPandaPass, RedPandaDCEPass, RedPandaCSEPass, FuseSteersPass,
    MaterializeForksPass)}


def redpanda_context() -> Context:
    """The front-end context plus the RedPanda dialect."""
    from schedlab.redpanda.frontend import context

    ctx = context().clone()
    ctx.load_dialect(RedPandaDialect)
    return ctx
