"""Request and trace types shared by every LLM-serving system in schedlab.

A prompt is described by its *block hashes* (Mooncake's ``hash_ids``): block i of a prompt has an
id that is equal across two prompts exactly when their first i+1 blocks are equal, so a prefix
cache can match prompts without storing text. Traces without hashes (Azure, BurstGPT) get fresh
ids per request, i.e. no reuse, which is what those traces can tell us.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from schedlab.core.errors import BadInputError


@dataclass(slots=True)
class Request:
    """One inference request; ``blocks`` are prefix-chained hashes of its prompt's token blocks."""

    rid: int
    tenant: int
    arrival: float  # seconds since the trace start
    input_len: int
    output_len: int
    blocks: tuple[int, ...] = ()
    session: int = -1  # session/user/conversation id from the trace (-1: none)

    def validate(self, block_tokens: int) -> None:
        if self.input_len < 0 or self.output_len < 1:
            raise BadInputError("input_len must be >= 0 and output_len >= 1", field="length")
        if self.arrival < 0 or not math.isfinite(self.arrival):
            raise BadInputError("arrival must be a finite non-negative time", field="arrival")
        if self.tenant < 0:
            raise BadInputError("tenant must be >= 0", field="tenant")
        need = math.ceil(self.input_len / block_tokens)
        if len(self.blocks) != need:
            raise BadInputError(
                f"has {len(self.blocks)} block hashes; input of "
                f"{self.input_len} tokens needs {need}",
                field="hash_ids",
            )


@dataclass
class Trace:
    """Requests sorted by arrival, the block size their hashes use, and the tenant count."""

    requests: list[Request]
    block_tokens: int = 16
    name: str = "trace"
    tenant_names: list[str] = field(default_factory=list)
    source: str = ""  # the file it was read from, for error messages

    def __post_init__(self) -> None:
        if self.block_tokens < 1:
            raise BadInputError("block_tokens must be >= 1", field="block_tokens")
        self.requests.sort(key=lambda r: (r.arrival, r.rid))
        if not self.tenant_names:
            count = 1 + max((r.tenant for r in self.requests), default=0)
            self.tenant_names = [f"t{i}" for i in range(count)]

    @property
    def n_tenants(self) -> int:
        return len(self.tenant_names)

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[Request]:
        return iter(self.requests)

    def validate(self) -> None:
        for req in self.requests:
            req.validate(self.block_tokens)
            if req.tenant >= self.n_tenants:
                raise BadInputError(
                    f"tenant {req.tenant} >= n_tenants {self.n_tenants}", field="tenant"
                )


class BlockIds:
    """Hands out fresh block hashes (never equal to one a trace already uses)."""

    def __init__(self, start: int = 1 << 40) -> None:
        self._counter = itertools.count(start)

    def fresh(self, n: int) -> tuple[int, ...]:
        return tuple(next(self._counter) for _ in range(n))


ASSIGNMENTS = ("prefix", "session", "round-robin")


def assign_tenants(requests: Iterable[Request], n_tenants: int, how: str = "prefix") -> int:
    """Map requests onto ``n_tenants`` tenants in place for traces that do not name tenants;
    returns how many tenants received requests (warns when all collapse onto one).

    * ``session``: by the trace's session/user id (Mooncake ``session_id``/``user_id``/
      ``conversation_id``/``chat_id``): sessions are dealt out to tenants in order of first
      appearance; requests without an id fall back to ``prefix``.
    * ``prefix``: requests with the same *distinguishing* prefix go together (a tenant owns its
      prompts). Leading blocks that more than 1/n of the requests share (a global system
      prompt: in Mooncake almost every prompt starts with the same blocks) are skipped; the key
      is the first block shared by at most 1/n of the requests, or the last block; keys are
      dealt out to tenants in order of first appearance (balanced, deterministic).
    * ``round-robin``: dealt out in arrival order.
    """
    requests = list(requests)
    if n_tenants < 1:
        raise BadInputError("must be >= 1", field="tenants")
    if how not in ASSIGNMENTS:
        raise BadInputError(f"unknown mapping '{how}' ({', '.join(ASSIGNMENTS)})", field="how")
    if how == "session" and not any(r.session >= 0 for r in requests):
        raise BadInputError(
            "the trace has no session or user ids (Mooncake keys session_id, "
            "user_id, conversation_id, chat_id); use --assign prefix",
            field="assign",
        )
    if how == "round-robin":
        for i, req in enumerate(requests):
            req.tenant = i % n_tenants
    else:
        counts: Counter[int] = Counter()
        for req in requests:
            counts.update(set(req.blocks))
        limit = max(1.0, len(requests) / n_tenants)
        sessions: dict[int, int] = {}
        keys: dict[int, int] = {}
        for i, req in enumerate(requests):
            if how == "session" and req.session >= 0:
                req.tenant = sessions.setdefault(req.session, len(sessions)) % n_tenants
                continue
            if not req.blocks:
                req.tenant = i % n_tenants
                continue
            key = next((b for b in req.blocks if counts[b] <= limit), req.blocks[-1])
            req.tenant = keys.setdefault(key, len(keys)) % n_tenants
    used = len({r.tenant for r in requests})
    if n_tenants > 1 and used <= 1 and len(requests) > 1:
        warnings.warn(
            f"all {len(requests)} requests were assigned to one tenant by '{how}' "
            f"(asked for {n_tenants}); fairness between tenants is meaningless here",
            UserWarning,
            stacklevel=2,
        )
    return used


CONTEXT_POLICIES = ("refuse", "truncate")


def fitted_lengths(output_len: int, max_context: int) -> tuple[int, int]:
    """(input, output) lengths of a request cut to fit ``max_context``: the output is capped to
    half the window and the prompt keeps what remains (its last tokens, for the caller)."""
    output = max(1, min(output_len, max_context // 2))
    return max_context - output, output


def fit_context(trace: Trace, max_context: int, model: str, policy: str = "refuse") -> int:
    """Check every request's prompt + output against the model's context window.

    ``refuse`` raises a one-line error naming the trace file, line and field of the first
    request that does not fit; ``truncate`` keeps the last tokens that fit: the output is
    capped to half the window, the prompt to what remains, its block hashes cut to match (a
    truncated prompt keeps its prefix blocks). Returns how many requests were truncated.
    """
    if policy not in CONTEXT_POLICIES:
        raise BadInputError(
            f"unknown policy '{policy}' ({', '.join(CONTEXT_POLICIES)})", field="context"
        )
    if max_context < 2:
        raise BadInputError("must be >= 2", field="max_context")
    changed = 0
    for req in trace.requests:
        if req.input_len + req.output_len <= max_context:
            continue
        if policy == "refuse":
            raise BadInputError(
                f"input_length {req.input_len} + output_length {req.output_len} exceeds "
                f"{model}'s {max_context}-token context (use --context truncate or a "
                "longer-context model)",
                path=trace.source or None,
                line=req.rid,
                field="input_length",
            )
        req.input_len, req.output_len = fitted_lengths(req.output_len, max_context)
        req.blocks = req.blocks[: math.ceil(req.input_len / trace.block_tokens)]
        changed += 1
    return changed
