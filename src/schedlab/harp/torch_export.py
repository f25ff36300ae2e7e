"""Workloads from any PyTorch model through ``torch.export``: the ATen graph, op by op.

HARP (../shared/papers/16-harp.md) evaluates arbitrary transformers. This reads the graph
``torch.export.export`` produces (shapes from its traced tensors, ``node.meta["val"]``) and
turns it into the :class:`~schedlab.harp.workloads.Workload` the built-in shapes use:

* static GEMMs: ``linear``, ``addmm``/``mm``/``matmul`` with a parameter operand (GPT-2's
  ``Conv1D``), ``conv1d``/``conv2d`` as the GEMM of its unfolded patches (ViT's patch
  embedding: K = C*kh*kw, N = out channels, one row per output position);
* dynamic GEMMs: ``matmul``/``bmm`` of two activations, and ``scaled_dot_product_attention``
  decomposed into QK^T, softmax and AV (per row ``heads * head_dim * keys`` MACs each, query
  heads counted, so grouped-query attention is exact);
* non-linear ops: softmax, LayerNorm, RMSNorm, GELU, SiLU, and element-wise ops. A module
  whose class is a norm or an activation (``LlamaRMSNorm``, GPT-2's ``NewGELUActivation``) is
  folded into one op of that function instead of its pow/mean/rsqrt/tanh pieces.

Only ops on the activation path are counted: tensors derived from float inputs or from an
embedding lookup of the inputs. Mask construction, rotary tables and position ids are not
compute on the chip. Whether attention is causal is read from the traced values: the model is
run once on the example and each attention's mask (SDPA's ``attn_mask``/``is_causal``, or the
zeros of an eager softmax) is classified as full (``all``) or lower-triangular (``prefix``).
The token count is the query length of the attention ops; trace with batch size 1.

Anything else on the activation path is refused with one line naming the op and the module.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from schedlab.core.errors import BadInputError, MissingDependencyError
from schedlab.harp.opgraph import Op, Pattern, Workload

#: ops that only move or re-view data: they pass their producers through
_PASS = {
    "view", "reshape", "_unsafe_view", "permute", "transpose", "t", "contiguous", "clone",
    "expand", "expand_as", "slice", "select", "unsqueeze", "squeeze", "flatten", "unflatten",
    "split", "split_with_sizes", "chunk", "getitem", "cat", "stack", "dropout", "alias",
    "_to_copy", "to", "type_as", "detach", "lift_fresh_copy", "index", "gather",
    "repeat_interleave", "repeat", "narrow", "movedim", "_assert_tensor_metadata",
    "feature_dropout", "native_dropout", "unbind", "as_strided", "identity", "copy",
    "unsafe_split", "pad", "constant_pad_nd",
}
_ELEMENTWISE = {
    "add", "sub", "rsub", "mul", "div", "true_divide", "pow", "neg", "exp", "log", "sqrt",
    "rsqrt", "mean", "sum", "where", "masked_fill", "cos", "sin", "abs", "reciprocal",
    "maximum", "minimum", "clamp", "clamp_min", "clamp_max", "square", "erf", "amax", "max",
    "var", "std", "baddbmm_scale", "sigmoid", "tanh", "relu", "leaky_relu", "hardtanh",
    "elu", "mish", "softplus", "hardswish", "hardsigmoid", "fill", "zeros_like", "ones_like",
    "scalar_tensor", "full_like", "add_", "mul_", "div_",
}
_NAMED = {"softmax": "softmax", "_softmax": "softmax", "log_softmax": "softmax",
          "layer_norm": "layernorm", "native_layer_norm": "layernorm", "rms_norm": "rmsnorm",
          "group_norm": "layernorm", "gelu": "gelu", "silu": "silu", "relu": "relu",
          "tanh": "tanh", "sigmoid": "sigmoid"}
_STATIC_GEMM = {"linear", "addmm", "mm", "matmul", "conv1d", "conv2d", "convolution"}
_DYNAMIC_GEMM = {"matmul", "bmm", "mm", "baddbmm"}
_SDPA = {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
         "_scaled_dot_product_efficient_attention"}
#: module classes folded into one op of a function (the first pattern that matches wins)
_FOLD = ((re.compile(r"RMSNorm|RmsNorm"), "rmsnorm"), (re.compile(r"LayerNorm|Norm$"), "layernorm"),
         (re.compile(r"GELU|Gelu"), "gelu"), (re.compile(r"SiLU|Swish|Silu"), "silu"))


def _short(target: Any) -> str:
    """``aten.linear.default`` -> ``linear``; ``operator.getitem`` -> ``getitem``."""
    name = getattr(target, "__name__", None) or str(target)
    parts = str(target).split(".")
    if len(parts) >= 3 and parts[0] == "aten":
        return parts[1]
    return name.split(".")[0]


def _shape(node: Any) -> tuple[int, ...] | None:
    val = node.meta.get("val") if hasattr(node, "meta") else None
    shape = getattr(val, "shape", None)
    if shape is None:
        return None
    try:
        return tuple(int(d) for d in shape)
    except (TypeError, ValueError):  # symbolic sizes: the example fixes them, so this is rare
        return None


def _module_of(node: Any) -> tuple[str, str]:
    """(module path, class name) of the innermost module a node was traced in."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", ""
    path, cls = list(stack.values())[-1]
    cls_name = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
    return str(path), cls_name.split(".")[-1]


def _fold_func(node: Any) -> tuple[str, str] | None:
    """(module key, function) if the node lies inside a norm/activation module."""
    stack = node.meta.get("nn_module_stack") or {}
    for key, (_path, cls) in reversed(list(stack.items())):
        cls_name = (cls if isinstance(cls, str) else getattr(cls, "__name__", "")).split(".")[-1]
        for pattern, func in _FOLD:
            if pattern.search(cls_name):
                return str(key), func
    return None


def _nodes(args: Iterable[Any]) -> list[Any]:
    import torch.fx

    found: list[Any] = []
    for arg in args:
        if isinstance(arg, torch.fx.Node):
            found.append(arg)
        elif isinstance(arg, (list, tuple)):
            found.extend(_nodes(arg))
    return found


def _classify_mask(allowed: Any, where: str) -> Pattern:
    """``all`` for a full mask, ``prefix`` for a causal one; anything else is refused."""
    import torch

    allowed = allowed.reshape(-1, *allowed.shape[-2:])
    first = allowed[0]
    if not bool((allowed == first).all()):
        raise BadInputError(f"{where}: the attention mask differs between heads or batches; "
                            "only full or causal attention is supported", field="module")
    tq, tk = first.shape
    if bool(first.all()):
        return "all"
    if tq == tk and bool((first == torch.ones(tq, tk, dtype=torch.bool).tril()).all()):
        return "prefix"
    raise BadInputError(f"{where}: the attention mask is neither full nor causal (padding or "
                        "a sliding window); only full or causal attention is supported",
                        field="module")


def _is_attention(node: Any) -> bool:
    return node.op == "call_function" and _short(node.target) in _SDPA | {"softmax", "_softmax"}


def _sdpa_masks(ep: Any, args: tuple, kwargs: dict) -> dict[str, Pattern] | None:
    """Patterns of SDPA-only programs from the masks alone, without running the model.

    Only the nodes the masks depend on (position ids, ``cumsum``/``le`` of aranges) are
    evaluated; None when there is an eager softmax (its zeros need the real activations) or
    the exported program's flat-input helper is unavailable.
    """
    import torch

    graph = ep.graph
    attention = [n for n in graph.nodes if _is_attention(n)]
    if any(_short(n.target) not in _SDPA for n in attention):
        return None
    flatten = getattr(ep, "_graph_module_flat_inputs", None)
    if flatten is None:  # pragma: no cover - private helper of torch.export
        return None
    masks = {n.name: (n.args[3] if len(n.args) > 3 else n.kwargs.get("attn_mask"),
                      n.args[5] if len(n.args) > 5 else n.kwargs.get("is_causal", False))
             for n in attention}
    needed: set[Any] = set()
    stack = [m for m, _ in masks.values() if isinstance(m, torch.fx.Node)]
    while stack:
        node = stack.pop()
        if node not in needed:
            needed.add(node)
            stack.extend(node.all_input_nodes)
    env: dict[Any, Any] = {}
    inputs = iter(flatten(args, kwargs))
    for node in graph.nodes:
        if node.op == "placeholder":
            env[node] = next(inputs)
        elif node in needed and node.op == "call_function":
            call_args = torch.fx.node.map_arg(node.args, lambda a: env[a])
            call_kwargs = torch.fx.node.map_arg(node.kwargs, lambda a: env[a])
            env[node] = node.target(*call_args, **call_kwargs)
        elif node in needed and node.op == "get_attr":
            env[node] = getattr(ep.graph_module, str(node.target))
    found: dict[str, Pattern] = {}
    for node in attention:
        mask, causal = masks[node.name]
        tq, tk = _shape(node.args[0])[-2], _shape(node.args[1])[-2]
        where = f"{_module_of(node)[0] or 'the model'} ({node.name})"
        if causal:
            found[node.name] = "prefix" if tq == tk else "all"
        elif mask is None:
            found[node.name] = "all"
        else:
            value = env[mask] if isinstance(mask, torch.fx.Node) else mask
            if value.dtype != torch.bool:
                value = value > torch.finfo(value.dtype).min / 2
            found[node.name] = _classify_mask(
                torch.broadcast_to(value, (*value.shape[:-2], tq, tk)), where)
    return found


def _attention_patterns(ep: Any, args: tuple, kwargs: dict) -> dict[str, Pattern]:
    """Read each attention's mask from the real values: the mask subgraph of an SDPA model,
    otherwise one run of the exported program.

    A recorder is spliced in after every attention node of ``ep.module()``; the k-th
    attention node there is the k-th of ``ep.graph`` (both keep the traced order).
    """
    import torch

    try:
        quick = _sdpa_masks(ep, args, kwargs)
    except BadInputError:
        raise
    except Exception:  # the slice could not be evaluated alone; run the whole program
        quick = None
    if quick is not None:
        return quick
    gm = ep.module()
    seen: dict[int, Pattern] = {}
    where: dict[int, str] = {}

    def record_sdpa(index: int, q: Any, k: Any, mask: Any, causal: Any) -> None:
        tq, tk = q.shape[-2], k.shape[-2]
        if causal:
            seen[index] = "prefix" if tq == tk else "all"
        elif mask is None:
            seen[index] = "all"
        else:
            if mask.dtype != torch.bool:
                mask = mask > torch.finfo(mask.dtype).min / 2
            full = torch.broadcast_to(mask, (*mask.shape[:-2], tq, tk))
            seen[index] = _classify_mask(full, where[index])

    def record_softmax(index: int, out: Any) -> None:
        if out.dim() >= 2:
            seen[index] = _classify_mask(out.detach() != 0, where[index])

    attention = [n for n in gm.graph.nodes if _is_attention(n)]
    for index, node in enumerate(attention):
        where[index] = f"{_module_of(node)[0] or 'the model'} ({node.name})"
        with gm.graph.inserting_after(node):
            if _short(node.target) in _SDPA:
                mask = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
                causal = node.args[5] if len(node.args) > 5 else node.kwargs.get("is_causal",
                                                                                 False)
                gm.graph.call_function(record_sdpa, (index, node.args[0], node.args[1], mask,
                                                     causal))
            else:
                gm.graph.call_function(record_softmax, (index, node))
    gm.recompile()
    try:
        with torch.no_grad():
            gm(*args, **kwargs)
    except BadInputError:
        raise
    except Exception as exc:  # the traced program should run; if not, say so in one line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise BadInputError(f"the exported {type(ep).__name__} failed on the example: "
                            f"{first[:300]}", field="module") from None
    names = [n.name for n in ep.graph.nodes if _is_attention(n)]
    return {names[i]: p for i, p in seen.items() if i < len(names)}


@contextmanager
def _cache_off(module: Any) -> Iterator[None]:
    """Hugging Face models with ``config.use_cache`` off while exporting, then as they were.

    A user-built ``GPT2Model``/``T5Model`` returns a ``DynamicCache`` (``EncoderDecoderCache``)
    by default, which ``torch.export`` cannot put in its outputs. Every distinct config of the
    module tree is switched (T5's encoder and decoder stacks hold copies of the top config) and
    restored afterwards, also when the export fails; the training/eval flag is restored too.
    """
    saved: dict[int, tuple[Any, Any]] = {}
    for sub in module.modules():
        for holder in (getattr(sub, "config", None), getattr(sub, "generation_config", None)):
            if holder is not None and id(holder) not in saved and hasattr(holder, "use_cache"):
                saved[id(holder)] = (holder, holder.use_cache)
    training = module.training
    try:
        for holder, _ in saved.values():
            holder.use_cache = False
        yield
    finally:
        for holder, value in saved.values():
            holder.use_cache = value
        module.train(training)


def _export(module: Any, args: tuple, kwargs: dict) -> Any:
    import torch

    label = type(module).__name__
    try:
        with _cache_off(module), torch.no_grad():
            module.eval()
            return torch.export.export(module, args, kwargs or None, strict=False)
    except Exception as exc:  # tracing failures come in many types; one line naming the model
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInputError(f"torch.export could not trace {label}: {first[:300]}",
                            field="module") from None


def from_export(module: Any, args: Any, kwargs: dict[str, Any] | None = None,
                name: str | None = None, causal: bool | None = None) -> Workload:
    """Export ``module`` on example ``args`` (batch 1) and read its ops into a Workload.

    ``causal``: None reads each attention's mask from the traced values; True/False forces
    every attention to be causal or full.
    """
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch ships with schedlab[torch]
        raise MissingDependencyError("from_export needs PyTorch",
                                     hint="pip install 'schedlab[torch]'") from exc
    if not isinstance(module, torch.nn.Module):
        raise BadInputError(f"expected a torch.nn.Module, got {type(module).__name__}",
                            field="module")
    args = args if isinstance(args, tuple) else (args,)
    kwargs = dict(kwargs or {})
    ep = _export(module, args, kwargs)
    patterns = _attention_patterns(ep, args, kwargs) if causal is None else {}
    return _read(ep, patterns, causal, name or type(module).__name__)


def _tokens(graph: Any) -> int:
    """The sequence length: query rows of the attention ops (else the most common GEMM rows)."""
    seen: list[int] = []
    for node in graph.nodes:
        name = _short(node.target) if node.op == "call_function" else ""
        shape = _shape(node.args[0]) if name in _SDPA else _shape(node) if name in (
            "softmax", "_softmax") else None
        if shape and len(shape) >= 2:
            seen.append(shape[-2])
    if seen:
        return max(seen)
    rows = [math.prod(s[:-1]) for n in graph.nodes if n.op == "call_function"
            and _short(n.target) in ("linear", "addmm") and (s := _shape(n))]
    return max(set(rows), key=rows.count) if rows else 1


class _Reader:
    """One pass over the exported graph: lineage, producers, and the ops in order."""

    def __init__(self, ep: Any, patterns: dict[str, Pattern], causal: bool | None) -> None:
        from torch.export.graph_signature import InputKind

        self.graph = ep.graph
        self.patterns = patterns
        self.causal = causal
        self.tokens = _tokens(ep.graph)
        kinds = {spec.arg.name: spec.kind for spec in ep.graph_signature.input_specs
                 if hasattr(spec.arg, "name")}
        self.weight: set[str] = set()  # parameter/buffer/constant-only lineage
        self.user: set[str] = set()  # derived from integer inputs (ids, masks), not compute
        self.act: set[str] = set()  # the activation path
        self.producers: dict[str, tuple[str, ...]] = {}
        self.score: dict[str, Pattern] = {}  # attention-score tensors and their pattern
        self.ops: list[Op] = []
        self.names: set[str] = set()
        self.group: dict[str, str] = {}  # fold key -> op name of the open group
        self.open_key: str | None = None
        for node in ep.graph.nodes:
            if node.op == "placeholder":
                if kinds.get(node.name) == InputKind.USER_INPUT:
                    val = node.meta.get("val")
                    dtype = getattr(val, "dtype", None)
                    floating = dtype is not None and dtype.is_floating_point
                    (self.act if floating else self.user).add(node.name)
                else:
                    self.weight.add(node.name)
            elif node.op == "get_attr":
                self.weight.add(node.name)

    # -- helpers ---------------------------------------------------------------------------
    def _src(self, nodes: Iterable[Any]) -> tuple[str, ...]:
        out: dict[str, None] = {}
        for n in nodes:
            for p in self.producers.get(n.name, ()):
                out[p] = None
        return tuple(out)

    def _rows(self, shape: tuple[int, ...] | None) -> int:
        if not shape:
            return 1
        if self.tokens in shape[:-1]:
            return self.tokens
        return max(1, math.prod(shape[:-1]))

    def _unique(self, base: str) -> str:
        base = base or "op"
        name, i = base, 1
        while name in self.names:
            i += 1
            name = f"{base}#{i}"
        self.names.add(name)
        return name

    def _label(self, node: Any, suffix: str = "") -> str:
        path = _module_of(node)[0]
        return self._unique(f"{path}.{suffix}" if path and suffix else path or node.name)

    def _add(self, op: Op, node: Any) -> None:
        op = _with_layer(op)
        self.ops.append(op)
        self.producers[node.name] = (op.name,)
        self.act.add(node.name)

    def _pattern_for(self, node: Any) -> Pattern:
        """The key/value pattern of an eager attention GEMM: from its softmax, up or down."""
        if self.causal is not None:
            return "prefix" if self.causal else "all"
        for a in _nodes(node.args):
            if a.name in self.score:
                return self.score[a.name]
        frontier, seen = [node], 0
        while frontier and seen < 64:
            cur = frontier.pop(0)
            seen += 1
            for user in cur.users:
                if user.name in self.patterns:
                    return self.patterns[user.name]
                if user.op == "call_function" and _short(user.target) not in _DYNAMIC_GEMM:
                    frontier.append(user)
        return "all"

    def _op_row(self, per_row: float, rows: int, pattern: Pattern, keys: int) -> dict:
        """Per-row cost; causal (``prefix``) rows cost (t+1)/keys of a full row."""
        if pattern == "prefix" and keys:
            return {"growth": per_row / keys, "base": 0.0}
        return {"growth": 0.0, "base": per_row}

    def _fail(self, node: Any, what: str) -> BadInputError:
        path, cls = _module_of(node)
        where = f"{path} ({cls})" if path else (cls or "the model")
        return BadInputError(f"unsupported op {what} in {where}: HARP imports GEMMs, "
                             "attention, softmax, norms, activations and element-wise ops",
                             field="module")

    # -- the pass --------------------------------------------------------------------------
    def run(self) -> list[Op]:
        for node in self.graph.nodes:
            if node.op != "call_function":
                continue
            ins = _nodes(node.args) + _nodes(list(node.kwargs.values()))
            name = _short(node.target)
            acts = [a for a in ins if a.name in self.act]
            if not acts:
                if name == "embedding" and len(ins) >= 2 and ins[1].name in self.user | self.act:
                    self.act.add(node.name)  # an embedding lookup of the inputs starts the path
                    self.producers[node.name] = ()
                elif ins and all(a.name in self.weight for a in ins):
                    self.weight.add(node.name)
                else:
                    self.user.add(node.name)
                continue
            self._visit(node, name, ins, acts)
        return self.ops

    def _visit(self, node: Any, name: str, ins: list[Any], acts: list[Any]) -> None:
        fold = _fold_func(node)
        if name in _PASS or name == "embedding":
            self.act.add(node.name)
            self.producers[node.name] = self._src(acts)
            scores = [self.score[a.name] for a in acts if a.name in self.score]
            if scores:
                self.score[node.name] = scores[0]
            return
        if fold is not None and name not in _STATIC_GEMM | _SDPA:
            self._fold(node, fold, acts)
            return
        self.open_key = None
        weights = [a for a in ins if a.name in self.weight]
        if name in _SDPA:
            self._sdpa(node, ins)
        elif name in _STATIC_GEMM and weights:
            self._static(node, name, acts, weights)
        elif name in _DYNAMIC_GEMM and len(acts) >= 2 and (
                name != "baddbmm" or all(a.name in self.act for a in node.args[1:3])):
            self._dynamic(node, acts)
        elif name in _NAMED or name in _ELEMENTWISE:
            self._nonlinear(node, _NAMED.get(name, "elementwise"), acts)
        else:
            raise self._fail(node, f"aten.{name}" if "aten" in str(node.target) else name)

    def _static(self, node: Any, name: str, acts: list[Any], weights: list[Any]) -> None:
        w, out = _shape(weights[0]), _shape(node)
        if name in ("linear",):
            k, n = w[-1], w[0] if len(w) > 1 else 1
        elif name.startswith("conv"):
            k, n = math.prod(w[1:]), w[0]
        elif name == "addmm":
            w = _shape(node.args[2])
            if node.args[2].name not in self.weight:
                raise self._fail(node, "aten.addmm with a weight as the left operand")
            k, n = w[-2], w[-1]
        else:  # mm/matmul with a weight operand
            if node.args[1].name not in self.weight:
                raise self._fail(node, f"aten.{name} with a weight as the left operand")
            k, n = w[-2], w[-1]
        if out is None or w is None:
            raise self._fail(node, f"aten.{name} without traced shapes")
        if name.startswith("conv"):
            rows = math.prod(out) // n
        else:
            rows = math.prod(out[:-1])
        self._add(Op(self._label(node), 0, "static", tuple((s, "rows") for s in self._src(acts)),
                     k=int(k), n=int(n), rows=rows if rows != self.tokens else 0), node)

    def _dynamic(self, node: Any, acts: list[Any]) -> None:
        # baddbmm(bias, a, b) = bias + a @ b (BLOOM's ALiBi scores): the GEMM is a @ b
        left, right = node.args[1:3] if _short(node.target) == "baddbmm" else node.args[:2]
        a, b, out = _shape(left), _shape(right), _shape(node)
        rows, inner, keys = a[-2], a[-1], b[-1]
        per_row = math.prod(out[:-2]) * inner * keys
        pattern = self._pattern_for(node)
        # QK^T is causal over its output columns, AV over its inner (key) dimension
        span = inner if left.name in self.score else keys
        cost = self._op_row(per_row, rows, pattern, span)
        inputs = tuple((s, "rows") for s in self._src([left])) + tuple(
            (s, pattern) for s in self._src([right]))
        self._add(Op(self._label(node, node.name), 0, "dynamic", inputs, macs=cost["base"],
                     macs_growth=cost["growth"], rows=rows if rows != self.tokens else 0),
                  node)
        if out[-1] == keys and out[-2] == rows and keys == self.tokens:
            self.score[node.name] = pattern  # scores, until the AV GEMM consumes them

    def _sdpa(self, node: Any, ins: list[Any]) -> None:
        q, k, v = (_shape(a) for a in node.args[:3])
        pattern: Pattern = self.patterns.get(node.name, "all")
        if self.causal is not None:
            pattern = "prefix" if self.causal else "all"
        rows, keys = q[-2], k[-2]
        heads = math.prod(q[:-2])
        base = self._label(node)
        share = rows if rows != self.tokens else 0
        qk = self._op_row(heads * q[-1] * keys, rows, pattern, keys)
        sm = self._op_row(heads * keys, rows, pattern, keys)
        av = self._op_row(heads * v[-1] * keys, rows, pattern, keys)
        qk_op = Op(self._unique(base + ".qk"), 0, "dynamic",
                   tuple((s, "rows") for s in self._src([node.args[0]]))
                   + tuple((s, pattern) for s in self._src([node.args[1]])),
                   macs=qk["base"], macs_growth=qk["growth"], rows=share)
        sm_op = Op(self._unique(base + ".softmax"), 0, "nonlinear", ((qk_op.name, "rows"),),
                   elems=sm["base"], elems_growth=sm["growth"], func="softmax", rows=share)
        av_op = Op(self._unique(base + ".av"), 0, "dynamic",
                   ((sm_op.name, "rows"),) + tuple((s, pattern)
                                                    for s in self._src([node.args[2]])),
                   macs=av["base"], macs_growth=av["growth"], rows=share)
        self.ops.extend([_with_layer(qk_op), _with_layer(sm_op)])
        self._add(av_op, node)

    def _nonlinear(self, node: Any, func: str, acts: list[Any]) -> None:
        out = _shape(node) or ()
        numel = math.prod(out) if out else 1
        rows = self._rows(out)
        scores = [self.score[a.name] for a in acts if a.name in self.score]
        pattern = scores[0] if scores else "rows"
        cost = self._op_row(numel / rows, rows, pattern, out[-1] if out else 0)
        self._add(Op(self._label(node, node.name) if func == "elementwise" else self._label(
            node, func), 0, "nonlinear", tuple((s, "rows") for s in self._src(acts)),
            elems=cost["base"], elems_growth=cost["growth"], func=func,
            rows=rows if rows != self.tokens else 0), node)
        if scores:
            self.score[node.name] = pattern

    def _fold(self, node: Any, fold: tuple[str, str], acts: list[Any]) -> None:
        """Every compute op inside one norm/activation module becomes one op of its function."""
        key, func = fold
        if self.open_key == key and key in self.group:
            name = self.group[key]
            index = next(i for i, o in enumerate(self.ops) if o.name == name)
            op = self.ops[index]
            extra = tuple((s, "rows") for s in self._src(acts) if s != name
                          and (s, "rows") not in op.inputs)
            out = _shape(node) or (1,)
            rows = self._rows(out)
            elems = max(op.elems, math.prod(out) / rows)
            self.ops[index] = Op(op.name, 0, "nonlinear", op.inputs + extra, elems=elems,
                                 func=func, rows=op.rows)
            self.producers[node.name] = (name,)
            self.act.add(node.name)
            return
        out = _shape(node) or (1,)
        rows = self._rows(out)
        path = _module_of(node)[0]
        for k, (p, _cls) in (node.meta.get("nn_module_stack") or {}).items():
            if str(k) == key:
                path = str(p)
        op = Op(self._unique(path or node.name), 0, "nonlinear",
                tuple((s, "rows") for s in self._src(acts)), elems=math.prod(out) / rows,
                func=func, rows=rows if rows != self.tokens else 0)
        self.group[key], self.open_key = op.name, key
        self._add(op, node)


def _with_layer(op: Op) -> Op:
    """The block index: the first integer in the op's module path (``layers.3.mlp`` -> 3)."""
    found = re.search(r"(?:^|\.)(\d+)(?:\.|$)", op.name)
    return replace(op, layer=int(found.group(1))) if found else op


def _read(ep: Any, patterns: dict[str, Pattern], causal: bool | None, name: str) -> Workload:
    reader = _Reader(ep, patterns, causal)
    ops = reader.run()
    if not any(o.kind != "nonlinear" for o in ops):
        raise BadInputError(f"no GEMM found on the activation path of {name}",
                            field="module")
    is_causal = any(p == "prefix" for o in ops for _, p in o.inputs)
    return Workload(name, reader.tokens, tuple(ops), is_causal,
                    meta={"source": "torch.export", "tokens": reader.tokens})
