"""Experiments as data: Claim and Result types, the registry, and the seed-sweep runner.

A headline experiment is a plain function ``(**scale_kwargs, seed) -> Result`` registered with
:func:`register`. The harness, not the experiment, decides the seeds, the executor and where the
report goes, so every system is reproduced the same way.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import operator
import re
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import polars as pl

from schedlab.core.errors import MissingDependencyError, MissingServiceError, SchedlabError
from schedlab.core.registry import lookup
from schedlab.core.systems import CORE, SYSTEM_NAMES, normalise_system

Comparison = Literal[">=", "<=", ">", "<", "=="]
Scale = Literal["quick", "full"]
#: ``claim``: a statement about the paper, compared with the paper's figure; ``sanity``: a
#: correctness check or a quantity that holds by construction (a bound the search starts from, a
#: clamped value, the optimiser's own objective). Counted apart, so a by-construction row can
#: never pad the number of reproduced claims.
ClaimKind = Literal["claim", "sanity"]
#: where an experiment's input came from: ``real`` (public data or a real program),
#: ``stand-in`` (a seeded stand-in because the real data was absent), ``generated`` (a seeded
#: workload by design: the paper's own setting is synthetic); "" when not said
DataKind = Literal["real", "stand-in", "generated", ""]
DATA_KINDS = ("real", "stand-in", "generated", "")
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt,
}


@dataclass(frozen=True)
class Claim:
    """One statement from a paper, the figure we measured for it, and whether it holds.

    ``target`` is the paper's figure where it gives one (same direction and magnitude); where our
    setting differs, ``statement`` says how. Never a number picked so that the claim passes.
    """

    statement: str
    metric: str
    measured: float
    target: float
    comparison: Comparison = ">="
    paper_figure: str = ""
    required: bool = False
    tolerance: float = 0.0  # only for "==": |measured - target| <= tolerance
    #: ``claim`` or ``sanity`` (see :data:`ClaimKind`); ``required`` rows must be sanity rows
    kind: ClaimKind = "claim"
    #: the peer this row compares the method with ("" for sanity rows and absolute figures)
    baseline: str = ""
    #: for a head-to-head row: our figure and the baseline's on the same metric and run, so the
    #: report can say win / tie / lose against the peer (tie: the difference's 95% CI spans 0)
    our_figure: float = float("nan")
    peer_figure: float = float("nan")
    lower_is_better: bool = False
    #: what our_figure and peer_figure measure, with units (``metric`` is the claim's own
    #: figure, often their ratio)
    figure_metric: str = ""

    def __post_init__(self) -> None:
        if self.comparison not in (*_COMPARE, "=="):
            raise SchedlabError(f"unknown comparison {self.comparison!r}", field="comparison")
        if self.kind not in ("claim", "sanity"):
            raise SchedlabError(f"unknown claim kind {self.kind!r}; valid: claim, sanity",
                                field="kind")
        if self.required and self.kind != "sanity":
            raise SchedlabError(f"required row {self.statement!r} must be kind='sanity' "
                                "(required rows are correctness checks)", field="kind")
        if self.kind == "sanity" and self.baseline:
            raise SchedlabError(f"sanity row {self.statement!r} names baseline "
                                f"{self.baseline!r}; a peer comparison is a claim",
                                field="baseline")

    @property
    def head_to_head(self) -> bool:
        """A claim row that carries both our figure and its named peer's."""
        return (self.kind == "claim" and bool(self.baseline)
                and self.our_figure == self.our_figure and self.peer_figure == self.peer_figure)

    @property
    def holds(self) -> bool:
        return claim_holds(self.measured, self.target, self.comparison, self.tolerance)


def claim_holds(measured: float, target: float, comparison: str, tolerance: float = 0.0) -> bool:
    if measured != measured:  # NaN never satisfies a claim
        return False
    if comparison == "==":
        return abs(measured - target) <= tolerance
    return bool(_COMPARE[comparison](measured, target))


@dataclass(frozen=True)
class Figure:
    """A rendered figure: PNG bytes travel across processes where Matplotlib objects would not."""

    name: str
    png: bytes
    caption: str = ""

    @classmethod
    def from_matplotlib(cls, fig: Any, name: str, caption: str = "", dpi: int = 110) -> Figure:
        import matplotlib.pyplot as plt

        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
        plt.close(fig)
        return cls(name=name, png=buffer.getvalue(), caption=caption)


@dataclass
class Result:
    """What one (experiment, seed) run produced. The harness fills system/experiment/scale/seed."""

    frame: pl.DataFrame
    claims: list[Claim] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: str = ""
    #: which implementation of an outside tool the run used, e.g. ``"fio 3.33"`` or
    #: ``"the embedded I/O generator (os.pwrite)"``; the report lists it per experiment
    ran_with: str = ""
    #: where the input came from (:data:`DataKind`); an experiment that falls back to a seeded
    #: stand-in when real data is absent says ``"stand-in"``, and the report marks it apart
    data: DataKind = ""
    system: str = ""
    experiment: str = ""
    scale: str = ""
    seed: int = 0
    seconds: float = 0.0


@dataclass
class Failure:
    """An experiment that raised; kept so one broken system does not hide the others' results."""

    system: str
    experiment: str
    seed: int
    error: str
    details: str
    #: a tool, service or extra was missing (MissingServiceError / MissingDependencyError): the
    #: report says *not run*, not *failed*
    missing: bool = False
    #: the exception's own message, without its type name
    message: str = ""


@dataclass(frozen=True)
class Experiment:
    system: str
    name: str
    fn: Callable[..., Result]
    quick: dict[str, Any]
    full: dict[str, Any]
    description: str = ""

    @property
    def key(self) -> str:
        return f"{self.system}.{self.name}"

    def kwargs(self, scale: Scale) -> dict[str, Any]:
        return dict(self.quick if scale == "quick" else self.full)


_REGISTRY: dict[str, Experiment] = {}


def register(
    system: str,
    *,
    quick: dict[str, Any] | None = None,
    full: dict[str, Any] | None = None,
    name: str | None = None,
) -> Callable[[Callable[..., Result]], Callable[..., Result]]:
    """Register a headline experiment; the decorated function is returned unchanged."""
    system = normalise_system(system)

    def decorate(fn: Callable[..., Result]) -> Callable[..., Result]:
        doc = (fn.__doc__ or "").strip().splitlines()
        experiment = Experiment(
            system=system,
            name=name or fn.__name__,
            fn=fn,
            quick=dict(quick or {}),
            full=dict(full if full is not None else quick or {}),
            description=doc[0] if doc else "",
        )
        _REGISTRY[experiment.key] = experiment
        return fn

    return decorate


def module_exists(dotted: str) -> bool:
    """True when ``dotted`` can be imported; unlike find_spec, never raises for a missing parent."""
    parts = dotted.split(".")
    for depth in range(1, len(parts) + 1):
        if importlib.util.find_spec(".".join(parts[:depth])) is None:
            return False
    return True


def _import_experiments(system: str) -> None:
    module = "schedlab.core.selfcheck" if system == CORE else f"schedlab.{system}.experiment"
    if not module_exists(module):
        return
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and not exc.name.startswith("schedlab"):
            raise MissingDependencyError(
                f"system '{system}' needs the package '{exc.name}'",
                hint="pip install -e '.[all]'",
            ) from exc
        raise


def experiments(systems: Iterable[str] | None = None) -> list[Experiment]:
    """The registered experiments of ``systems`` (all when None), importing them on demand."""
    wanted = [normalise_system(s) for s in systems] if systems else [CORE, *SYSTEM_NAMES]
    for system in wanted:
        _import_experiments(system)
    return [e for e in _REGISTRY.values() if e.system in wanted]


def implemented_systems() -> set[str]:
    """Systems that have at least one registered experiment (import failures count as not)."""
    found = set()
    for system in SYSTEM_NAMES:
        try:
            if experiments([system]):
                found.add(system)
        except MissingDependencyError:
            continue
    return found


def get_experiment(key: str) -> Experiment:
    system = key.split(".", 1)[0]
    experiments([system])
    return lookup(_REGISTRY, "experiment", key)


@dataclass(frozen=True)
class Job:
    """One unit of a sweep; plain data so it pickles to any executor."""

    key: str
    scale: Scale
    seed: int


def run_job(job: Job) -> Result | Failure:
    """Run one (experiment, seed); module-level so process pools and Ray can pickle it."""
    import time

    experiment = get_experiment(job.key)
    start = time.perf_counter()
    try:
        result = experiment.fn(**experiment.kwargs(job.scale), seed=job.seed)
    except Exception as exc:  # an experiment's bug must not take the whole sweep down
        return Failure(experiment.system, experiment.name, job.seed,
                       f"{type(exc).__name__}: {exc}", traceback.format_exc(),
                       missing=isinstance(exc, MissingServiceError | MissingDependencyError),
                       message=str(exc))
    if not isinstance(result, Result):
        return Failure(experiment.system, experiment.name, job.seed,
                       f"returned {type(result).__name__}, not Result", "")
    return replace(result, system=experiment.system, experiment=experiment.name,
                   scale=job.scale, seed=job.seed, seconds=time.perf_counter() - start)


@dataclass
class Sweep:
    """Everything a reproduce run produced, ordered by (experiment, seed)."""

    results: list[Result]
    failures: list[Failure]
    scale: str
    seeds: list[int]


def run_sweep(
    selected: Sequence[Experiment],
    seeds: Sequence[int],
    scale: Scale,
    executor: Any,
    on_done: Callable[[Job, Result | Failure], None] | None = None,
) -> Sweep:
    """Fan every (experiment, seed) out to ``executor`` and collect results in a stable order."""
    jobs = [Job(e.key, scale, seed) for e in selected for seed in seeds]
    outcomes: dict[int, Result | Failure] = {}
    for index, outcome in executor.map_unordered(run_job, jobs):
        outcomes[index] = outcome
        if on_done is not None:
            on_done(jobs[index], outcome)
    ordered = [outcomes[i] for i in range(len(jobs))]
    return Sweep(
        results=[o for o in ordered if isinstance(o, Result)],
        failures=[o for o in ordered if isinstance(o, Failure)],
        scale=scale,
        seeds=list(seeds),
    )


CLAIM_COLUMNS = ("system", "claim", "kind", "baseline", "paper_figure", "target", "measured",
                 "holds")

_CLAIM_SCHEMA = {
    "system": pl.String, "claim": pl.String, "kind": pl.String, "baseline": pl.String,
    "paper_figure": pl.String, "target": pl.Float64, "measured": pl.Float64, "holds": pl.Boolean,
    "experiment": pl.String, "metric": pl.String, "comparison": pl.String,
    "measured_ci95": pl.Float64, "seeds": pl.Int64, "seeds_holding": pl.Int64,
    "required": pl.Boolean, "our_figure": pl.Float64, "our_ci95": pl.Float64,
    "peer_figure": pl.Float64, "peer_ci95": pl.Float64, "difference_ci95": pl.Float64,
    "lower_is_better": pl.Boolean, "verdict": pl.String, "figure_metric": pl.String,
}


def _mean_ci(values: Sequence[float]) -> tuple[float, float]:
    from schedlab.core.metrics import mean_ci95

    finite = [v for v in values if v == v]
    return mean_ci95(finite) if finite else (float("nan"), float("nan"))


def verdict(our: Sequence[float], peer: Sequence[float], lower_is_better: bool) -> str:
    """``win``, ``tie`` or ``lose`` of our figure against the peer's, paired by seed.

    A tie is a mean difference within its 95% CI (Student's t over the per-seed differences; with
    one seed only an exact tie). "" when either side has no finite figure.
    """
    diffs = [o - p for o, p in zip(our, peer, strict=True) if o == o and p == p]
    if not diffs:
        return ""
    mean, ci = _mean_ci(diffs)
    if abs(mean) <= ci or mean == 0:
        return "tie"
    return "win" if (mean < 0) == lower_is_better else "lose"


def claims_frame(sweep: Sweep) -> pl.DataFrame:
    """One row per claim: mean and 95% CI of the measured figure over seeds.

    A claim *holds* when its mean meets the target and so do at least two thirds of its seeds
    (:func:`enough_seeds`): a mean carried by one lucky seed in three is not a reproduction.
    Head-to-head rows (:attr:`Claim.head_to_head`) also get our and the peer's figure (mean ± 95%
    CI) and a :func:`verdict`.

    Columns start with :data:`CLAIM_COLUMNS` (the claims.csv contract), then experiment, metric,
    comparison, measured_ci95, seeds, seeds_holding, required and the head-to-head columns.
    """
    groups: dict[tuple[str, str, str], list[tuple[Result, Claim]]] = {}
    for result in sweep.results:
        for claim in result.claims:
            groups.setdefault((result.system, result.experiment, claim.statement), []).append(
                (result, claim)
            )
    rows = []
    for (system, experiment, statement), members in groups.items():
        first = members[0][1]
        claims = [claim for _, claim in members]
        mean, ci = _mean_ci([c.measured for c in claims])
        holding = sum(c.holds for c in claims)
        pair = [c for c in claims if c.head_to_head]
        ours, peers = [c.our_figure for c in pair], [c.peer_figure for c in pair]
        our_mean, our_ci = _mean_ci(ours)
        peer_mean, peer_ci = _mean_ci(peers)
        rows.append(dict(
            system=system, claim=statement, kind=first.kind,
            # the strongest peer may differ by seed ("here <name>"): name each one once
            baseline=" / ".join(dict.fromkeys(c.baseline for c in claims if c.baseline)),
            paper_figure=first.paper_figure, target=float(first.target), measured=mean,
            holds=claim_holds(mean, first.target, first.comparison, first.tolerance)
            and enough_seeds(holding, len(members)),
            experiment=experiment, metric=first.metric, comparison=first.comparison,
            measured_ci95=ci, seeds=len(members), seeds_holding=holding,
            required=first.required, our_figure=our_mean, our_ci95=our_ci,
            peer_figure=peer_mean, peer_ci95=peer_ci,
            difference_ci95=_mean_ci([o - p for o, p in zip(ours, peers, strict=True)])[1],
            lower_is_better=first.lower_is_better,
            verdict=verdict(ours, peers, first.lower_is_better),
            figure_metric=first.figure_metric or first.metric,
        ))
    return pl.DataFrame(rows, schema=_CLAIM_SCHEMA)


@dataclass(frozen=True)
class Counts:
    """How many claims about the papers hold, apart from how many sanity checks pass."""

    claims_holding: int
    claims: int
    sanity_passing: int
    sanity: int

    @property
    def sentence(self) -> str:
        return (f"{self.claims_holding} of {self.claims} claims hold "
                f"({self.sanity_passing} of {self.sanity} sanity checks pass)")


def count_claims(claims: pl.DataFrame) -> Counts:
    """Claims and sanity checks of a :func:`claims_frame`, counted apart."""
    def count(kind: str) -> tuple[int, int]:
        rows = claims.filter(pl.col("kind") == kind)
        return int(rows["holds"].sum()) if rows.height else 0, rows.height

    held, total = count("claim")
    passed, checks = count("sanity")
    return Counts(held, total, passed, checks)


def enough_seeds(holding: int, seeds: int) -> bool:
    """At least two thirds of the seeds meet the target (all of them for one or two seeds)."""
    return seeds > 0 and 3 * holding >= 2 * seeds


@dataclass(frozen=True)
class Run:
    """What the report's first section says of one experiment: how it ran, or why it did not."""

    system: str
    experiment: str
    status: Literal["ran", "not run", "failed"]
    detail: str
    seeds: int
    #: :data:`DataKind` of the seeds that ran (``stand-in`` when any seed fell back to one)
    data: DataKind = ""

    @property
    def sentence(self) -> str:
        if self.status == "ran":
            return f"ran with {self.detail}" if self.detail else "ran in-process (no outside tool)"
        return f"{self.status}: {self.detail}"

    @property
    def data_label(self) -> str:
        """The words the report shows for :attr:`data` (never colour alone)."""
        return {"real": "real data", "stand-in": "seeded stand-in",
                "generated": "generated workload"}.get(self.data, "")


_SEED_WORDS = re.compile(r"\s*\(seed \d+\)|,? seed \d+\b")


def ran_with_text(texts: Iterable[str]) -> str:
    """The ``ran_with`` texts of an experiment's seeds as one line, each part said once.

    Seeds' texts differ only by their seed number and repeat per scale (``a | a | b``); a reader
    needs each distinct part once, not once per seed (``a; x | a; y`` reads ``a; x | y``).
    """
    parts: list[str] = []
    seen: set[str] = set()
    for text in texts:
        for part in text.split(" | "):
            # a part's "; "-separated pieces already said (the same trace under two models)
            # are not said again
            pieces = [p.strip() for p in _SEED_WORDS.sub("", part).split("; ")]
            kept = [p for p in dict.fromkeys(pieces) if p and p not in seen]
            seen.update(kept)
            if kept:
                parts.append("; ".join(kept))
    return " | ".join(parts)


def data_kind(kinds: Iterable[str]) -> DataKind:
    """One :data:`DataKind` for several seeds: a stand-in anywhere makes it a stand-in."""
    found = set(kinds)
    for kind in ("stand-in", "real", "generated"):
        if kind in found:
            return kind  # type: ignore[return-value]
    return ""


def runs_of(sweep: Sweep, selected: Sequence[Experiment] | None = None) -> list[Run]:
    """One :class:`Run` per experiment, in order; an experiment with any failed seed is reported
    as failed (or *not run* when a tool or service was missing), never left out."""
    keys = [e.key for e in selected] if selected else []
    keys += [f"{r.system}.{r.experiment}" for r in sweep.results]
    keys += [f"{f.system}.{f.experiment}" for f in sweep.failures]
    runs = []
    for key in dict.fromkeys(keys):
        system, name = key.split(".", 1)
        ok = [r for r in sweep.results if (r.system, r.experiment) == (system, name)]
        bad = [f for f in sweep.failures if (f.system, f.experiment) == (system, name)]
        if bad:
            missing = all(f.missing for f in bad)
            detail = bad[0].message if missing else bad[0].error
            runs.append(Run(system, name, "not run" if missing else "failed", detail,
                            len(ok) + len(bad)))
        elif ok:
            runs.append(Run(system, name, "ran", ran_with_text(r.ran_with for r in ok), len(ok),
                            data_kind(r.data for r in ok)))
        else:
            runs.append(Run(system, name, "not run", "no seed was run", 0))
    return runs


def measurements_frame(sweep: Sweep) -> pl.DataFrame:
    """All results' frames stacked, tagged with system/experiment/scale/seed.

    Frames of different systems have different columns (filled with nulls); where two frames
    disagree on a column's type the column is kept as text rather than dropping data.
    """
    frames = []
    for r in sweep.results:
        if r.frame.width == 0:
            continue
        tags = pl.DataFrame({"system": [r.system], "experiment": [r.experiment],
                             "scale": [r.scale], "seed": [r.seed]})
        # an experiment's own column named like a tag keeps its values under result_<name>
        own = r.frame.rename({c: f"result_{c}" for c in r.frame.columns if c in tags.columns})
        frames.append(tags.join(own, how="cross"))
    if not frames:
        return pl.DataFrame(schema={"system": pl.String, "experiment": pl.String,
                                    "scale": pl.String, "seed": pl.Int64})
    try:
        return pl.concat(frames, how="diagonal_relaxed")
    except (pl.exceptions.SchemaError, pl.exceptions.ComputeError,
            pl.exceptions.InvalidOperationError):
        types: dict[str, set] = {}
        for f in frames:
            for name, dtype in f.schema.items():
                types.setdefault(name, set()).add(dtype)
        clash = [n for n, kinds in types.items() if len(kinds) > 1]
        frames = [f.with_columns([pl.col(c).cast(pl.String) for c in clash if c in f.columns])
                  for f in frames]
        return pl.concat(frames, how="diagonal_relaxed")
