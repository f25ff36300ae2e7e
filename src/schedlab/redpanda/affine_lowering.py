"""Lower the simple ``affine`` forms (for/load/store/apply/yield) to scf/memref/arith.

RedPanda (../shared/papers/08-redpanda.md) starts from structured MLIR; PolyBench-style
kernels often arrive as ``affine`` (e.g. from Polygeist). xDSL 0.75's own ``lower-affine``
ignores map symbols and loop-bound operands, so we lower with the correct dims/symbols split
(reusing xDSL's expression builder). Loop bounds with several results (max/min) and
``affine.if``/``affine.parallel`` are not lowered here: the caller reports them (or uses
``mlir-opt --lower-affine`` when it is on PATH).
"""

from __future__ import annotations

from xdsl.dialects import affine, arith, builtin, memref, scf
from xdsl.ir import Operation
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.transforms.lower_affine import LowerAffineApply, LowerAffineYield, affine_expr_ops


class AffineUnsupported(Exception):
    """An affine form this lowering does not handle (message names the op)."""


def _map_ops(amap, operands) -> tuple[list[Operation], list]:
    data = amap.data
    dims, symbols = list(operands[: data.num_dims]), list(operands[data.num_dims :])
    ops, values = [], []
    for expr in data.results:
        new, value = affine_expr_ops(expr, dims, symbols)
        ops.extend(new)
        values.append(value)
    return ops, values


class _Load(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: affine.LoadOp, rewriter: PatternRewriter):
        ops, idx = _map_ops(op.map, op.indices) if op.map is not None else ([], op.indices)
        rewriter.insert(ops)
        rewriter.replace(op, memref.LoadOp.get(op.memref, idx))


class _Store(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: affine.StoreOp, rewriter: PatternRewriter):
        ops, idx = _map_ops(op.map, op.indices) if op.map is not None else ([], op.indices)
        rewriter.insert(ops)
        rewriter.replace(op, memref.StoreOp.get(op.value, op.memref, idx))


class _For(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: affine.ForOp, rewriter: PatternRewriter):
        bounds = []
        for amap, operands, what in (
            (op.lowerBoundMap, op.lowerBoundOperands, "max"),
            (op.upperBoundMap, op.upperBoundOperands, "min"),
        ):
            if len(amap.data.results) != 1:
                raise AffineUnsupported(f"affine.for with a {what}() bound")
            ops, (value,) = _map_ops(amap, operands)
            rewriter.insert(ops)
            bounds.append(value)
        step = arith.ConstantOp(builtin.IntegerAttr.from_index_int_value(op.step.value.data))
        rewriter.insert(step)
        rewriter.replace(
            op,
            scf.ForOp(
                bounds[0],
                bounds[1],
                step.result,
                op.inits,
                rewriter.move_region_contents_to_new_regions(op.body),
            ),
        )


def lower_affine(module: builtin.ModuleOp) -> None:
    """Rewrite ``module`` in place; raises :class:`AffineUnsupported` on other affine ops."""
    for op in module.walk():
        if op.name.startswith("affine.") and op.name not in (
            "affine.for",
            "affine.load",
            "affine.store",
            "affine.apply",
            "affine.yield",
        ):
            raise AffineUnsupported(f"'{op.name}'")
    PatternRewriteWalker(
        GreedyRewritePatternApplier(
            [_Store(), _Load(), _For(), LowerAffineYield(), LowerAffineApply()]
        )
    ).rewrite_module(module)
