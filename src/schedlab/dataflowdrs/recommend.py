"""From ranked bottlenecks to concrete new schedules and resource assignments (paper 09, (e)).

Each kind of bottleneck has one remedy, expressed as a change to the workflow's configuration
so the workflow can be re-run and the improvement measured:

* slow-tier   -> stage the file group to the fastest tier with room for it (co-locating its
                 producer and consumers on node-local storage);
* small-io    -> coalesce the task group's I/O into 1 MiB calls (buffering);
* serial-task -> split the fan-in (merge) stage into parallel parts plus a light join;
* parallelism -> double the number of concurrent tasks.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace

from schedlab.dataflowdrs.bottleneck import Bottleneck
from schedlab.dataflowdrs.diagnosis import IDEAL_BLOCK, Analysis
from schedlab.dataflowdrs.tiers import TIER_ORDER
from schedlab.dataflowdrs.workloads import CANDIDATES, WorkflowConfig


@dataclass(frozen=True)
class Recommendation:
    """One actionable change, with the bottleneck it answers and the expected saving."""

    action: str  # "stage-to-tier" | "coalesce-io" | "split-merge" | "raise-parallelism"
    target: str
    value: str
    expected_saving: float
    rationale: str

    def apply(self, cfg: WorkflowConfig) -> WorkflowConfig:
        """The configuration with this change made (unchanged if it does not apply)."""
        if self.action == "stage-to-tier":
            return cfg.with_tier(self.target, self.value)
        if self.action == "coalesce-io":
            return cfg.with_block(self.target, int(self.value))
        if self.action == "split-merge":
            if self.target in CANDIDATES.get(cfg.workflow, {}).get("serial-task", []):
                return replace(cfg, merge_width=int(self.value))
            return cfg
        if self.action == "raise-parallelism":
            return replace(cfg, parallelism=int(self.value))
        return cfg

    def as_dict(self) -> dict:
        return dict(action=self.action, target=self.target, value=self.value,
                    expected_saving_s=self.expected_saving, rationale=self.rationale)


def _room(tier: str, analysis: Analysis) -> float:
    """Free bytes on a tier's directory (inf when unknown)."""
    root = analysis.dfl.tiers.get(tier, {}).get("root")
    try:
        return float(shutil.disk_usage(root).free) if root else float("inf")
    except OSError:
        return float("inf")


def recommend(bottleneck: Bottleneck, analysis: Analysis) -> Recommendation:
    """The remedy for one bottleneck, sized from the analysed run."""
    dfl = analysis.dfl
    if bottleneck.kind == "slow-tier":
        moved = dfl.access.filter(dfl.access["file_group"] == bottleneck.target)
        size = float(moved.filter(moved["op"] == "write")["bytes"].sum() or moved["bytes"].max()
                     or 0)
        known = [t for t in TIER_ORDER if t in analysis.tier_models] or list(
            analysis.tier_models)
        ranked = sorted(known, key=lambda t: analysis.tier_models[t].cost(1, IDEAL_BLOCK))
        tier = next((t for t in ranked if _room(t, analysis) > 2 * size), ranked[-1])
        return Recommendation("stage-to-tier", bottleneck.target, tier, bottleneck.saving,
                              f"{bottleneck.target}: {bottleneck.evidence}; co-locate its "
                              f"producers and consumers on {tier}")
    if bottleneck.kind == "small-io":
        return Recommendation("coalesce-io", bottleneck.target, str(IDEAL_BLOCK),
                              bottleneck.saving, f"{bottleneck.evidence}: buffer to 1 MiB calls")
    if bottleneck.kind == "serial-task":
        # the ranking assumed the workflow owns its cores; the gain of splitting depends on
        # the cores its tasks were really given (less on a machine shared with others)
        nominal = max(2.0, min(dfl.parallelism, analysis.cores))
        got = max(1.0, min(nominal, analysis.available_cores))
        width = max(2, round(got) * 2)
        expected = bottleneck.saving * (1 - 1 / got) / (1 - 1 / nominal)
        return Recommendation("split-merge", bottleneck.target, str(width), expected,
                              f"{bottleneck.evidence}: merge in {width} parallel parts "
                              f"(tasks got {analysis.available_cores:.2f} of "
                              f"{analysis.cores} cores)")
    if bottleneck.kind in ADVICE:  # remedies in the program or its I/O library, not config
        action, what = ADVICE[bottleneck.kind]
        return Recommendation(action, bottleneck.target, what, bottleneck.saving,
                              bottleneck.evidence)
    return Recommendation("raise-parallelism", "workflow", str(max(2, dfl.parallelism * 2)),
                          bottleneck.saving, bottleneck.evidence)


# field kinds (insights.py, drishti.py): the remedy is a change to the program or its I/O
# library; apply() leaves a workflow configuration unchanged for them
ADVICE = {
    "metadata": ("pack-files", "pack the many small files into one container (tar, HDF5, "
                 "a database) or keep them on node-local storage; cache stat results"),
    "misaligned-io": ("align-io", "align requests to the file-system block/stripe (e.g. "
                      "H5Pset_alignment, MPI-IO striping hints)"),
    "shared-file": ("split-or-collective", "one file per process, or collective MPI-IO with "
                    "aggregators, so ranks do not contend on one file"),
    "read-after-write": ("pass-in-memory", "hand the intermediate to its consumer in memory "
                         "or on node-local storage (co-locate producer and consumer)"),
    "slow-storage-target": ("avoid-target", "restripe the files away from the slow OSTs "
                            "(lfs setstripe / lfs migrate) and report them to the admins"),
    "stdio": ("use-mpiio", "move bulk transfers from STDIO to POSIX/MPI-IO with large requests"),
    "random-io": ("sequentialise", "sort or batch the accesses into sequential order"),
    "no-collective": ("use-collective", "use collective MPI-IO calls (MPI_File_*_all)"),
}


def recommend_all(ranked: list[Bottleneck], analysis: Analysis,
                  limit: int = 3) -> list[Recommendation]:
    """Remedies for the top ``limit`` bottlenecks, best expected saving first."""
    out: list[Recommendation] = []
    seen = set()
    for bottleneck in ranked[: limit + 2]:
        rec = recommend(bottleneck, analysis)
        key = (rec.action, rec.target)
        if key not in seen:
            seen.add(key)
            out.append(rec)
    out.sort(key=lambda r: -r.expected_saving)
    return out[:limit]
