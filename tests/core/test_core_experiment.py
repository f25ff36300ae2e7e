"""Claims, the registry, seed sweeps and the report they produce."""

import base64
from pathlib import Path

import polars as pl
import pytest

from schedlab.core.errors import SchedlabError, UnknownNameError
from schedlab.core.executors import LocalExecutor, make_executor
from schedlab.core.experiment import (
    CLAIM_COLUMNS,
    Claim,
    Result,
    Sweep,
    claims_frame,
    experiments,
    get_experiment,
    measurements_frame,
    run_sweep,
)
from schedlab.core.report import write_report
from schedlab.core.systems import normalise_system


@pytest.mark.parametrize(
    "measured,target,comparison,holds",
    [(1, 1, ">=", True), (0.9, 1, ">=", False), (3.9, 3.9, "<=", True), (4, 3.9, "<", False),
     (2, 1, ">", True), (1.05, 1, "==", False), (float("nan"), 0, ">=", False)],
)
def test_claim_comparisons(measured, target, comparison, holds):
    assert Claim("s", "m", measured, target, comparison).holds is holds


def test_claim_equality_tolerance_and_bad_comparison():
    assert Claim("s", "m", 1.05, 1.0, "==", tolerance=0.1).holds
    with pytest.raises(SchedlabError):
        Claim("s", "m", 1, 1, "~")


def test_system_names_accept_hyphens_and_reject_unknown():
    assert normalise_system("Hydra-MCS") == "hydra_mcs"
    with pytest.raises(UnknownNameError) as info:
        normalise_system("nosuchsystem")
    assert "xbucket" in str(info.value) and "hydra_mcs" in str(info.value)


def test_core_selfcheck_is_registered():
    keys = [e.key for e in experiments(["core"])]
    assert "core.jain_known_allocations" in keys
    with pytest.raises(UnknownNameError):
        get_experiment("core.nothing")


def _fake_sweep() -> Sweep:
    def result(seed: int, measured: float, frame: pl.DataFrame) -> Result:
        return Result(frame, claims=[Claim("x beats y", "ratio", measured, 1.0, ">=")],
                      system="core", experiment="demo", scale="quick", seed=seed)

    return Sweep(
        results=[result(0, 1.0, pl.DataFrame({"v": [1, 2]})),
                 result(1, 2.0, pl.DataFrame({"v": ["a"], "w": [0.5]})),
                 result(2, 3.0, pl.DataFrame({"v": [3]}))],
        failures=[], scale="quick", seeds=[0, 1, 2],
    )


def test_claims_aggregate_mean_and_ci_over_seeds():
    claims = claims_frame(_fake_sweep())
    assert claims.columns[:8] == list(CLAIM_COLUMNS)
    row = claims.row(0, named=True)
    assert row["measured"] == pytest.approx(2.0)
    assert row["measured_ci95"] == pytest.approx(4.302652729911275 / 3**0.5)
    assert row["seeds"] == 3 and row["seeds_holding"] == 3 and row["holds"]


def test_measurements_keep_rows_when_types_clash():
    frame = measurements_frame(_fake_sweep())
    assert frame.height == 4
    assert set(frame["seed"].to_list()) == {0, 1, 2}
    assert frame.filter(pl.col("seed") == 1)["w"].to_list() == [0.5]


def test_measurements_keep_an_experiments_own_tag_named_columns():
    sweep = _fake_sweep()
    sweep.results[0].frame = pl.DataFrame({"scale": [8, 16]})
    frame = measurements_frame(sweep)
    assert set(frame["scale"].to_list()) == {"quick"}
    assert frame.filter(pl.col("seed") == 0)["result_scale"].to_list() == [8, 16]


def test_sweep_runs_selfcheck_and_report_is_complete(tmp_path: Path):
    selected = experiments(["core"])
    done = []
    sweep = run_sweep(selected, [0, 1], "quick", LocalExecutor(jobs=1),
                      on_done=lambda job, _: done.append(job.seed))
    assert sorted(done) == [0, 1] and not sweep.failures
    assert [r.seed for r in sweep.results] == [0, 1]
    claims = write_report(sweep, tmp_path, command="schedlab reproduce core --quick")
    assert claims["holds"].all()
    names = {p.name for p in tmp_path.iterdir()}
    assert {"report.md", "index.html", "results.parquet", "claims.csv", "figures"} <= names
    markdown = (tmp_path / "report.md").read_text()
    assert markdown.index("## Systems") < markdown.index("## What ran") < markdown.index(
        "| kind | paper's claim") < markdown.index("### core.")
    html = (tmp_path / "index.html").read_text()
    assert html.index("<table class='claims'>") < html.index("<img")
    png = base64.b64decode(html.split("base64,")[1].split("'")[0])
    assert png.startswith(b"\x89PNG")
    csv = pl.read_csv(tmp_path / "claims.csv")
    assert csv.columns[:8] == list(CLAIM_COLUMNS) and csv.height == 2
    assert csv["kind"].to_list() == ["sanity", "sanity"]
    results = pl.read_parquet(tmp_path / "results.parquet")
    assert results.filter(pl.col("seed") == 1).height == 200


def test_failing_experiment_is_reported_not_fatal(monkeypatch):
    from schedlab.core import experiment as exp

    def boom(seed: int) -> Result:
        raise ValueError(f"broken on seed {seed}")

    monkeypatch.setitem(exp._REGISTRY, "core.boom", exp.Experiment("core", "boom", boom, {}, {}))
    selected = [exp.get_experiment("core.boom"), exp.get_experiment("core.jain_known_allocations")]
    sweep = run_sweep(selected, [0], "quick", LocalExecutor(jobs=1))
    assert [f.error for f in sweep.failures] == ["ValueError: broken on seed 0"]
    assert len(sweep.results) == 1
    with pytest.raises(UnknownNameError):
        exp.run_job(exp.Job("core.missing", "quick", 0))


def test_make_executor_validates():
    with pytest.raises(SchedlabError, match="executor"):
        make_executor("slurm")
    with pytest.raises(SchedlabError, match="ray-address"):
        make_executor("local", address="127.0.0.1:6379")
    with pytest.raises(SchedlabError, match="jobs"):
        LocalExecutor(jobs=0)


def _sweep_of(values: list[float], target: float = 1.0) -> Sweep:
    results = [Result(pl.DataFrame(), claims=[Claim("c", "m", v, target, ">=")], system="core",
                      experiment="demo", scale="quick", seed=i) for i, v in enumerate(values)]
    return Sweep(results=results, failures=[], scale="quick", seeds=list(range(len(values))))


@pytest.mark.parametrize("values,holds", [
    ([0.5, 0.5, 3.0], False),   # mean 1.33 meets the target, but one seed in three does
    ([0.9, 1.1, 1.2], True),    # two of three seeds and the mean
    ([1.0], True), ([0.99], False),
    ([1.5, 0.9], False),        # with two seeds both must hold
    ([1.0, 1.0, 1.0, 0.0, 5.0, 1.0], True),  # 5 of 6
    ([1.0, 1.0, 0.0, 0.0, 9.0, 1.0], True),   # 4 of 6 is two thirds
    ([1.0, 0.0, 0.0, 0.0, 9.0, 1.0], False),  # 3 of 6 is not, whatever the mean
])
def test_a_claim_holds_on_the_mean_and_two_thirds_of_seeds(values, holds):
    from schedlab.core.experiment import enough_seeds

    row = claims_frame(_sweep_of(values)).row(0, named=True)
    holding = sum(v >= 1.0 for v in values)
    assert row["seeds_holding"] == holding
    mean_ok = sum(values) / len(values) >= 1.0
    assert row["holds"] is (mean_ok and enough_seeds(holding, len(values))) is holds


def test_enough_seeds_is_two_thirds_rounded_up():
    from schedlab.core.experiment import enough_seeds

    assert [enough_seeds(h, 3) for h in range(4)] == [False, False, True, True]
    assert [enough_seeds(h, 2) for h in range(3)] == [False, False, True]
    assert not enough_seeds(0, 0)
    assert enough_seeds(4, 6) and not enough_seeds(3, 6)


def test_report_first_section_says_what_ran_and_a_missing_tool_is_not_silent(monkeypatch,
                                                                             tmp_path: Path):
    from schedlab.core import experiment as exp
    from schedlab.core.errors import MissingServiceError

    def needs_tool(seed: int) -> Result:
        raise MissingServiceError("'frobnicate' is not installed")

    def with_tool(seed: int) -> Result:
        return Result(pl.DataFrame({"v": [seed]}), claims=[Claim("c", "m", 1.0, 1.0, ">=")],
                      ran_with="frob 1.2 (pip)")

    monkeypatch.setitem(exp._REGISTRY, "core.needs", exp.Experiment("core", "needs",
                                                                     needs_tool, {}, {}))
    monkeypatch.setitem(exp._REGISTRY, "core.tooled", exp.Experiment("core", "tooled",
                                                                      with_tool, {}, {}))
    selected = [exp.get_experiment("core.needs"), exp.get_experiment("core.tooled")]
    sweep = run_sweep(selected, [0, 1], "quick", LocalExecutor(jobs=1))
    runs = exp.runs_of(sweep, selected)
    assert [(r.experiment, r.status) for r in runs] == [("needs", "not run"), ("tooled", "ran")]
    assert runs[0].sentence == "not run: 'frobnicate' is not installed"
    assert runs[1].sentence == "ran with frob 1.2 (pip)"
    write_report(sweep, tmp_path, runs=runs)
    markdown = (tmp_path / "report.md").read_text()
    assert markdown.index("## What ran") < markdown.index("### Claims")
    assert "**not run: 'frobnicate' is not installed**" in markdown
    table = pl.read_csv(tmp_path / "runs.csv")
    assert table["status"].to_list() == ["not run", "ran"]
    assert "seeds holding" in (tmp_path / "index.html").read_text()


def test_a_failure_is_not_run_only_when_a_tool_was_really_missing(monkeypatch):
    """Classified by the exception's type, not by what its message happens to say."""
    from schedlab.core import experiment as exp
    from schedlab.core.errors import MissingDependencyError

    def lookalike(seed: int) -> Result:
        raise ValueError("MissingServiceError: not really")

    def no_extra(seed: int) -> Result:
        raise MissingDependencyError("needs the package 'frob'")

    for name, fn in (("lookalike", lookalike), ("noextra", no_extra)):
        monkeypatch.setitem(exp._REGISTRY, f"core.{name}", exp.Experiment("core", name, fn,
                                                                          {}, {}))
    selected = [exp.get_experiment("core.lookalike"), exp.get_experiment("core.noextra")]
    runs = exp.runs_of(run_sweep(selected, [0], "quick", LocalExecutor(jobs=1)), selected)
    assert [(r.status, r.detail) for r in runs] == [
        ("failed", "ValueError: MissingServiceError: not really"),
        ("not run", "needs the package 'frob'")]
