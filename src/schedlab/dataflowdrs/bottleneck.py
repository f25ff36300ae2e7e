"""A ranked bottleneck and the protocol every diagnoser implements.

Why a module of its own: DataFlowDrs and its baselines (``policies``) and the Drishti baseline
(``drishti``) all return ``Bottleneck`` lists, and the registry in ``policies`` lists Drishti;
with the shared types below both there is no import cycle between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from schedlab.dataflowdrs.diagnosis import Analysis


@dataclass(frozen=True)
class Bottleneck:
    """A ranked finding: its kind, the group it concerns, and the time it costs."""

    kind: str  # "slow-tier" | "small-io" | "serial-task" | "parallelism"
    target: str  # file group (slow-tier), task group (small-io, serial-task), or "workflow"
    saving: float  # estimated seconds of makespan it costs
    evidence: str = ""

    def as_dict(self) -> dict:
        return dict(kind=self.kind, target=self.target, saving_s=self.saving,
                    evidence=self.evidence)


class Diagnoser(Protocol):
    """Ranks the bottlenecks of an analysed run, worst first."""

    name: str

    def rank(self, analysis: Analysis) -> list[Bottleneck]: ...
