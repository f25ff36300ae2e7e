"""Workloads from a PyTorch module via torch.fx: trace, propagate shapes, classify every op.

HARP (../shared/papers/16-harp.md) evaluates arbitrary transformers; this turns a user's
``nn.Module`` into the same :class:`~schedlab.harp.workloads.Workload` the built-in shapes use:
``nn.Linear`` -> static GEMM, ``matmul``/``bmm``/``@`` between activations -> dynamic GEMM,
softmax/LayerNorm/GELU (and other element-wise ops) -> non-linear. Token rows are dimension 1
of the example input ``[batch, tokens, ...]``. A dynamic GEMM's second operand (keys/values)
is needed whole (``all``), or up to the row (``prefix``) when ``causal``.
"""

from __future__ import annotations

from typing import Any

from schedlab.core.errors import BadInputError, MissingDependencyError
from schedlab.harp.workloads import Op, Pattern, Workload

_NONLINEAR = {"softmax": "softmax", "layer_norm": "layernorm", "layernorm": "layernorm",
              "gelu": "gelu"}
_SKIP = {"view", "reshape", "permute", "transpose", "contiguous", "size", "getattr",
         "getitem", "split", "chunk", "flatten", "unsqueeze", "squeeze", "dropout", "expand",
         "t", "to", "type_as", "float", "clone"}


def _name_of(node: Any) -> str:
    target = node.target
    return (getattr(target, "__name__", None) or str(target)).lower().split(".")[-1]


def from_torch(module: Any, example: Any, name: str = "torch-model",
               causal: bool = False) -> Workload:
    """Trace ``module`` on ``example`` (shape [batch, tokens, ...]) into a Workload."""
    try:
        import torch
        from torch.fx import symbolic_trace
        from torch.fx.passes.shape_prop import ShapeProp
    except ImportError as exc:  # pragma: no cover - torch ships with schedlab[torch]
        raise MissingDependencyError("from_torch needs PyTorch",
                                     hint="pip install 'schedlab[torch]'") from exc
    if example.dim() < 2:
        raise BadInputError("example input must be [batch, tokens, ...]", field="example")
    batch, tokens = int(example.shape[0]), int(example.shape[1])
    try:
        graph = symbolic_trace(module)
        ShapeProp(graph).propagate(example)
    except Exception as exc:  # tracing failures come in many types; name the module
        raise BadInputError(f"torch.fx could not trace the module: {exc}",
                            field="module") from exc
    modules = dict(graph.named_modules())
    produced: dict[str, str] = {}  # fx node -> op that produced it (through reshapes)
    ops: list[Op] = []
    kv: Pattern = "prefix" if causal else "all"
    for node in graph.graph.nodes:
        sources = [produced[a.name] for a in node.all_input_nodes if a.name in produced]
        meta = node.meta.get("tensor_meta")
        numel = int(torch.Size(meta.shape).numel()) if hasattr(meta, "shape") else 0
        per_row = numel / (batch * tokens) if numel else 0.0
        kind = node.op
        label = _name_of(node) if kind != "call_module" else type(
            modules[node.target]).__name__.lower()
        op: Op | None = None
        rows = tuple((s, "rows") for s in dict.fromkeys(sources))
        if kind == "call_module" and isinstance(modules[node.target], torch.nn.Linear):
            lin = modules[node.target]
            op = Op(node.name, 0, "static", rows, k=lin.in_features, n=lin.out_features)
        elif label in ("matmul", "bmm", "matmul_") and len(sources) == 2:
            inner = int(node.all_input_nodes[0].meta["tensor_meta"].shape[-1])
            op = Op(node.name, 0, "dynamic", ((sources[0], "rows"), (sources[1], kv)),
                    macs=per_row * inner)
        elif label in _NONLINEAR or label in ("add", "mul", "sub", "truediv", "relu"):
            op = Op(node.name, 0, "nonlinear", rows, elems=per_row,
                    func=_NONLINEAR.get(label, "elementwise"))
        if op is not None and (op.kind == "static" or sources or op.kind == "nonlinear"):
            ops.append(op)
            produced[node.name] = node.name
        elif sources and (label in _SKIP or kind in ("call_method", "call_function")):
            produced[node.name] = sources[0]  # shape-only ops pass their producer through
    if not ops:
        raise BadInputError("no GEMM or non-linear op found in the traced module",
                            field="module")
    return Workload(name, tokens, tuple(ops), causal, meta={"source": "torch.fx"})
