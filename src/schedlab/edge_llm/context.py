"""Requests a model cannot hold: refused (not served, counted) or truncated to its context.

A real trace (Mooncake, BurstGPT) holds prompts longer than many models' windows (50 of
Mooncake's first 600 exceed Qwen3-8B's 32k). Replaying them as if served would credit a router
with work no engine could do, so every replay passes through :func:`fit_to_context` and its
summary says how many requests were refused or truncated.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from schedlab.core.errors import BadInputError
from schedlab.edge_llm.workloads import EdgeRequest
from schedlab.llm.requests import CONTEXT_POLICIES, fitted_lengths


@dataclass(frozen=True)
class ContextFit:
    """What fits: the requests to serve, and how many were refused or truncated."""

    requests: list[EdgeRequest]
    refused: int
    truncated: int
    longest: int  # longest prompt + output seen, tokens

    def message(self, model: str, max_context: int, total: int) -> str:
        """One line for stderr ("" when every request fits)."""
        if self.refused:
            return (f"warning: {self.refused} of {total} requests refused: prompt + output "
                    f"exceed {model}'s {max_context}-token context (longest {self.longest}); "
                    "--context truncate serves them cut to fit")
        if self.truncated:
            return (f"warning: {self.truncated} of {total} requests truncated to {model}'s "
                    f"{max_context}-token context (longest {self.longest})")
        return ""


def fit_to_context(requests: list[EdgeRequest], max_context: int,
                   policy: str = "refuse") -> ContextFit:
    """Refuse (drop and count) or truncate every request whose prompt + output exceeds
    ``max_context`` tokens; ``max_context`` 0 means the window is unknown (nothing checked)."""
    if policy not in CONTEXT_POLICIES:
        raise BadInputError(
            f"unknown policy '{policy}' ({', '.join(CONTEXT_POLICIES)})", field="context")
    longest = max((r.input_len + r.output_len for r in requests), default=0)
    if max_context <= 0 or longest <= max_context:
        return ContextFit(list(requests), 0, 0, longest)
    kept: list[EdgeRequest] = []
    over = 0
    for r in requests:
        if r.input_len + r.output_len <= max_context:
            kept.append(r)
            continue
        over += 1
        if policy == "truncate":
            prompt, output = fitted_lengths(r.output_len, max_context)
            kept.append(replace(r, input_len=prompt, output_len=output))
    refused = over if policy == "refuse" else 0
    return ContextFit(kept, refused, over - refused, longest)
