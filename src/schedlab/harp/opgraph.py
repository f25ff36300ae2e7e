"""The operator graph every HARP workload is: ops costed per token row, and the workload.

Why a module of its own: the built-in models (``workloads``), the Hugging Face importer
(``transformers``) and the ``torch.export`` importer (``torch_export``) all build these, and
``workloads.load_model`` dispatches to the importers; the types sit below all three.
Each op records its dataflow per token row: ``inputs`` pairs a producer with a pattern —
``rows`` (row t needs the producer's row t), ``all`` (needs every row) or ``prefix`` (rows 0..t:
causal attention).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from schedlab.core.errors import UnknownNameError

OpKind = Literal["static", "dynamic", "nonlinear"]
Pattern = Literal["rows", "all", "prefix"]
NONLINEAR_FUNCS = ("softmax", "layernorm", "gelu")


@dataclass(frozen=True)
class Op:
    """One operator, costed per token row.

    static: a K x N weight (``k``, ``n``); per row K*N MACs.
    dynamic: ``macs`` per row, plus ``macs_growth`` * (t+1) for causal row t.
    nonlinear: ``elems`` per row (``elems_growth`` * (t+1) extra when causal), of ``func``.
    ``rows``: token rows the op really processes when that differs from the workload's
    (0 = all of them): a ViT patch embedding sees patches = tokens - 1, a pooler one row.
    Schedules still give the op every row; its per-row cost is scaled by rows / tokens so its
    total work is exact.
    """

    name: str
    layer: int
    kind: OpKind
    inputs: tuple[tuple[str, Pattern], ...] = ()
    k: int = 0
    n: int = 0
    macs: float = 0.0
    macs_growth: float = 0.0
    elems: float = 0.0
    elems_growth: float = 0.0
    func: str = ""
    rows: int = 0


@dataclass(frozen=True)
class Workload:
    """A model's ops in topological order, with the sequence length (token rows) they run on."""

    name: str
    tokens: int
    ops: tuple[Op, ...]
    causal: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    def op(self, name: str) -> Op:
        for op in self.ops:
            if op.name == name:
                return op
        raise UnknownNameError("op", name, [o.name for o in self.ops])

    @property
    def static_ops(self) -> tuple[Op, ...]:
        return tuple(o for o in self.ops if o.kind == "static")

    def weights(self) -> int:
        """Static weight count: what must be programmed into crossbars."""
        return sum(o.k * o.n for o in self.static_ops)

    def rows_of(self, op: Op) -> int:
        """Token rows ``op`` processes (its own ``rows`` or the workload's ``tokens``)."""
        return op.rows or self.tokens

    def op_macs(self, op: Op) -> float:
        """MACs of one op over one inference (0 for non-linear ops).

        Causal growth counts the unmasked keys only: row t of a causal QK^T / AV needs t+1.
        """
        rows = self.rows_of(op)
        if op.kind == "static":
            return float(op.k * op.n * rows)
        if op.kind == "dynamic":
            return op.macs * rows + op.macs_growth * rows * (rows + 1) / 2
        return 0.0

    def macs(self, kind: str | None = None) -> float:
        """Total MACs of one inference, optionally of one op kind (static | dynamic)."""
        return sum(self.op_macs(o) for o in self.ops if kind is None or o.kind == kind)

    def op_counts(self) -> dict[str, int]:
        """Ops by kind, non-linear ops by function: ``{"static": 6, "softmax": 1, ...}``."""
        counts: dict[str, int] = {}
        for op in self.ops:
            key = op.func if op.kind == "nonlinear" else op.kind
            counts[key] = counts.get(key, 0) + 1
        return counts
