"""The DataFlowDrs pipeline as library calls: run and trace, diagnose, report, predict.

DataFlowDrs (paper 09) chains measurement (a), compression (b), scaling models (c), bottleneck
ranking (d) and recommendations (e). Each step is one function here; the CLI and experiments
call these and nothing else. No function here knows which diagnoser it was given.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from schedlab.core.errors import BadInputError
from schedlab.core.io import ensure_directory, write_frame, write_text
from schedlab.dataflowdrs.diagnosis import Analysis, analyse
from schedlab.dataflowdrs.policies import Bottleneck, Diagnoser, make_diagnoser
from schedlab.dataflowdrs.recommend import Recommendation, recommend_all
from schedlab.dataflowdrs.runner import RunRecord, run_workflow
from schedlab.dataflowdrs.scaling import fit_all, predict_frame
from schedlab.dataflowdrs.tiers import TierLayout, make_layout
from schedlab.dataflowdrs.tracer import make_tracer
from schedlab.dataflowdrs.traces import read_trace
from schedlab.dataflowdrs.workloads import WorkflowConfig, build


@dataclass
class Workspace:
    """A scratch area with the three tiers; one per experiment or CLI session."""

    root: Path
    layout: TierLayout
    owned: bool = False  # created by us (a temporary directory): close() removes it all

    @classmethod
    def create(cls, root: str | Path | None = None) -> Workspace:
        owned = root is None
        base = Path(root) if root else Path(tempfile.mkdtemp(prefix="schedlab-dfd-"))
        base = ensure_directory(base).resolve()
        return cls(base, make_layout(base / "tiers"), owned)

    def close(self) -> None:
        """Remove the tier directories (tmpfs lives in /dev/shm, so this matters) and, for
        a temporary workspace, the workspace itself; never a directory the user named."""
        import shutil

        from schedlab.dataflowdrs.tiers import remove_layout

        remove_layout(self.layout)
        shutil.rmtree(self.root / "tiers", ignore_errors=True)
        if self.owned:
            shutil.rmtree(self.root, ignore_errors=True)


def run_config(cfg: WorkflowConfig, space: Workspace, tracer: str = "dftracer",
               out_dir: str | Path | None = None, engine: str = "builtin") -> RunRecord:
    """Run one workflow configuration as real processes, traced by ``tracer``, ordered by
    the workflow ``engine`` (``builtin`` or ``parsl``)."""
    out = Path(out_dir) if out_dir else space.root / "runs" / f"{cfg.workflow}-{time.time_ns()}"
    return run_workflow(build(cfg, space.layout), space.layout, make_tracer(tracer), out,
                        cfg.parallelism, engine=engine)


@dataclass
class Diagnosis:
    """An analysed run with its ranked bottlenecks and recommendations."""

    analysis: Analysis
    ranked: list[Bottleneck]
    recommendations: list[Recommendation]
    diagnoser: str
    seconds: float
    issues: list = field(default_factory=list)
    below_floor: list[Bottleneck] = field(default_factory=list)  # I/O causes too small to rank

    def summary(self, top: int = 5) -> dict:
        a = self.analysis
        share = {}
        if a.trace is not None and a.profile is not None:
            from schedlab.dataflowdrs.insights import io_share

            critical = set(a.dfl.tasks.filter(pl.col("critical"))["task"].to_list())
            share = io_share(a.trace, a.profile, critical, a.dfl.makespan)
            share.update(verdict(share, self.ranked, self.below_floor))
            if a.trace.meta.get("runtime_files"):
                share["runtime_files"] = a.trace.meta["runtime_files"]
        return dict(
            source=(a.trace.meta.get("source", "trace") if a.trace else "trace"), io=share,
            input=_input(a.trace),
            diagnoser=self.diagnoser, makespan_s=a.dfl.makespan, tasks=a.dfl.tasks.height,
            critical_path=a.dfl.tasks.filter(pl.col("critical"))["task"].to_list(),
            compression=a.compressed.summary(),
            tiers={t: dict(latency_s=m.latency, bandwidth_Bps=m.bandwidth, observed=m.observed)
                   for t, m in a.tier_models.items()},
            contention=a.contention.to_dicts(),
            bottlenecks=[b.as_dict() for b in self.ranked[:top]],
            below_floor=[b.as_dict() for b in self.below_floor[:top]],
            recommendations=[r.as_dict() for r in self.recommendations],
            issues=[str(i) for i in self.issues], analysis_s=self.seconds)


def _input(trace) -> str:
    """What the trace came from, in words: which tracer ran, or the log / bare trace kind."""
    if trace is None:
        return "trace"
    meta = trace.meta
    if meta.get("source") == "darshan":
        return "Darshan log" + ("s" if meta.get("logs") else "")
    if meta.get("tracer"):
        return f"traced with {meta['tracer']}"
    directory = trace.directory
    if directory is not None and [*directory.glob("strace-*")]:
        return "strace files"
    return "dftracer .pfw files" if directory is not None else "trace"


def diagnose_analysis(analysis: Analysis, diagnoser: Diagnoser | str = "dataflowdrs",
                      seconds: float = 0.0) -> Diagnosis:
    d = make_diagnoser(diagnoser) if isinstance(diagnoser, str) else diagnoser
    ranked = d.rank(analysis)
    return Diagnosis(analysis, ranked, recommend_all(ranked, analysis), d.name, seconds,
                     list(analysis.issues), list(getattr(d, "below_floor", [])))


def verdict(share: dict, ranked: list[Bottleneck], below: list[Bottleneck]) -> dict:
    """Whether the run is I/O-bound, in words and by how much (the report's first line)."""
    from schedlab.dataflowdrs.policies import FINDING_FLOOR, MIN_SAVING, NOT_IO

    frac, run = share.get("io_share", 0.0), share.get("run_seconds", 0.0)
    bound = frac >= FINDING_FLOOR
    if bound:
        text = f"I/O-bound: I/O calls are {frac:.1%} of the run"
        if below and not [b for b in ranked if b.kind not in NOT_IO]:
            text += f", but no single I/O cause would save {MIN_SAVING:.0%} of it"
    else:
        text = (f"not I/O-bound: I/O calls are {frac:.2%} of the run, "
                f"{(FINDING_FLOOR - frac) * 100:.1f} points under the {FINDING_FLOOR:.0%} "
                f"floor" + (f" ({FINDING_FLOOR / frac:.1f}x less)" if frac > 0 else ""))
    if below and run > 0:
        text += (f"; the largest I/O cause held back ({below[0].kind}) would save "
                 f"{below[0].saving:.3g} s = {below[0].saving / run:.1%} of the run")
    return dict(io_bound=bound, floor=FINDING_FLOOR, verdict=text)


def diagnose(trace_dir: str | Path, diagnoser: Diagnoser | str = "dataflowdrs") -> Diagnosis:
    """Read a trace directory, build and compress its DFL, rank bottlenecks, recommend."""
    start = time.perf_counter()
    analysis = analyse(read_trace(trace_dir))
    return diagnose_analysis(analysis, diagnoser, time.perf_counter() - start)


def write_report(diagnosis: Diagnosis, out_dir: str | Path, sankey: bool = True,
                 png: bool = True) -> dict:
    """report.json, report.md, bottlenecks.csv, producer_consumer.csv, timeline and Sankey."""
    from schedlab.dataflowdrs.viz import write_sankey, write_timeline

    out = ensure_directory(out_dir)
    summary = diagnosis.summary(top=10)
    trace = diagnosis.analysis.trace
    if trace is not None and trace.meta.get("source") == "darshan":
        # a log has no per-rank task events: every rank's bar would span the whole job
        files = {"timeline": None}
    else:
        files = {"timeline": write_timeline(diagnosis.analysis.dfl, out)}
    if sankey:
        files.update({f"sankey_{k}": v for k, v in write_sankey(
            diagnosis.analysis.compressed, out, png=png).items()})
    ranked = pl.DataFrame([b.as_dict() for b in diagnosis.ranked],
                          schema={"kind": pl.String, "target": pl.String,
                                  "saving_s": pl.Float64, "evidence": pl.String})
    write_frame(ranked, out / "bottlenecks.csv")
    pc = diagnosis.analysis.producer_consumer.with_columns(
        pl.col("consumers").list.join(" "))
    write_frame(pc, out / "producer_consumer.csv")
    summary["files"] = files
    summary["report_dir"] = str(out)
    write_text(out / "report.json", json.dumps(summary, indent=1, default=str))
    write_text(out / "report.md", _markdown(summary))
    return summary


def _markdown(summary: dict) -> str:
    unit = "order score" if summary["diagnoser"] == "drishti" else "saving (s)"  # drishti.py
    lines = [f"# DataFlowDrs report ({summary['diagnoser']})", "",
             f"makespan {summary['makespan_s']:.3f} s, {summary['tasks']} tasks; DFL compressed "
             f"{summary['compression']['reduction']:.1f}x; input: {summary.get('input', '')}", "",
             *([summary["io"]["verdict"], ""] if (summary.get("io") or {}).get("verdict")
               else []), "## Ranked bottlenecks", "",
             f"| # | kind | target | {unit} | evidence |",
             "|---|---|---|---|---|"]
    for i, b in enumerate(summary["bottlenecks"], 1):
        lines.append(f"| {i} | {b['kind']} | {b['target']} | {b['saving_s']:.3f} | "
                     f"{b['evidence']} |")
    if summary.get("below_floor"):
        lines += ["", "Under the floor (not ranked): " + "; ".join(
            f"{b['kind']} {b['target']} {b['saving_s']:.3g} s" for b in summary["below_floor"])]
    lines += ["", "## Recommendations", ""]
    lines += [f"- **{r['action']}** {r['target']} -> {r['value']}: {r['rationale']}"
              for r in summary["recommendations"]]
    if summary["issues"]:
        lines += ["", "## Skipped trace files", ""] + [f"- {i}" for i in summary["issues"]]
    return "\n".join(lines) + "\n"


def scale_of(trace_dir: Path, meta: dict) -> float:
    scale = (meta.get("config") or {}).get("scale")
    if not isinstance(scale, int | float) or scale <= 0:
        raise BadInputError("run metadata has no positive config.scale; pass --scales",
                            path=trace_dir / "meta.json", field="config.scale")
    return float(scale)


def predict(trace_dirs: Sequence[str | Path], scale: float,
            scales: Sequence[float] | None = None) -> pl.DataFrame:
    """Fit scaling models to runs at known scales and predict every quantity at ``scale``."""
    if not scale > 0:
        raise BadInputError(f"the scale to predict must be > 0, got {scale:g}", field="scale")
    if scales is not None and len(scales) != len(trace_dirs):
        raise BadInputError(f"{len(scales)} scales for {len(trace_dirs)} trace directories",
                            field="scales")
    runs = []
    for i, d in enumerate(trace_dirs):
        trace = read_trace(d)
        s = float(scales[i]) if scales is not None else scale_of(Path(d), trace.meta)
        runs.append((s, analyse(trace)))
    if len({s for s, _ in runs}) < 2:
        raise BadInputError("need runs at two or more different scales", field="scales")
    return predict_frame(fit_all(runs), scale)
