"""Every HiGHS result says whether it is the proven optimum; big models are refused early."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from schedlab.core.errors import BadInputError
from schedlab.mec_coalition import heuristics, solve, synthetic
from schedlab.mec_coalition.cli import app
from schedlab.mec_coalition.ilp import check_size, estimate

runner = CliRunner()


def test_small_ilp_is_proven_optimal_with_zero_gap():
    inst = synthetic(4, 8, 20, 0, tasks=3)
    idx = np.arange(inst.cand.size)
    place = solve(inst, idx)[0]
    info = place.solver
    assert info.proven_optimal and place.optimal and info.status == "optimal"
    assert info.mip_gap == pytest.approx(0.0, abs=1e-9)
    assert info.dual_bound == pytest.approx(place.value, rel=1e-6, abs=1e-6)
    assert info.time_limit_s == 60.0 and not info.relaxed
    lp = solve(inst, idx, relax=True)[0].solver
    assert lp.relaxed and lp.proven_optimal and np.isnan(lp.mip_gap)
    assert heuristics.randomized_rounding(inst, idx, 0).solver.relaxed


def test_time_limited_ilp_is_flagged_not_optimal():
    inst = synthetic(30, 20, 200, 0)  # ~6 s of CPU to prove optimal
    # HiGHS's limit is wall time: on a loaded machine 1 s may not reach an incumbent, which
    # must then be refused in one line; a longer limit then gives the flagged plan
    for limit in (1.0, 2.0, 4.0):
        try:
            place = solve(inst, np.arange(inst.cand.size), time_limit=limit)[0]
            break
        except BadInputError as exc:
            assert exc.field == "ilp" and f"no solution within {limit:g} s" in str(exc)
    else:
        pytest.skip("no incumbent within 4 s of wall time (machine too loaded)")
    info = place.solver
    assert not info.proven_optimal and not place.optimal
    assert info.status_code == 1 and info.status == "time or iteration limit"
    assert info.mip_gap > 0 and info.dual_bound > place.value
    # the gap is stated against the objective the JSON now carries (not the payoff metric)
    assert info.objective == place.value
    if info.objective == 0:  # the incumbent is the empty plan: HiGHS's relative gap is inf
        assert info.mip_gap == float("inf")
    else:
        assert info.mip_gap == pytest.approx((info.dual_bound - info.objective)
                                             / abs(info.objective), rel=1e-3)


def test_model_beyond_the_size_bound_is_refused_before_building():
    inst = synthetic(6, 8, 40, 0)
    idx = np.arange(inst.cand.size)
    variables, nnz = estimate(inst, idx)
    assert variables > idx.size and nnz > 4 * idx.size
    assert check_size(inst, idx) == nnz
    with pytest.raises(BadInputError) as info:
        solve(inst, idx, max_nonzeros=nnz - 1)
    assert info.value.field == "ilp" and "non-zeros" in str(info.value)
    with pytest.raises(BadInputError):
        solve(inst, idx, time_limit=0)


def test_cli_ilp_json_and_text_show_the_solver_status():
    args = ["solve", "--method", "ilp", "--cloudlets", "3", "--models", "6", "--n-users", "12"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    solver = json.loads(result.stdout)["info"]["solver"]
    assert solver["proven_optimal"] and solver["status"] == "optimal"
    assert {"mip_gap", "time_limit_s", "dual_bound", "status_code"} <= solver.keys()
    text = runner.invoke(app, [*args, "--require-optimal"])
    assert text.exit_code == 0 and "proven optimal True" in text.stdout


def _stopped_at_time_limit(monkeypatch):
    """HiGHS really solves, then reports what it reports when its time limit stops it
    (scipy status 1): the not-proven path, independent of how fast this machine is."""
    from scipy.optimize import OptimizeResult

    from schedlab.mec_coalition import ilp

    real = ilp.milp

    def stopped(*args, **kwargs):
        res = real(*args, **kwargs)
        return OptimizeResult(dict(res, status=1, success=False,
                                   message="Time limit reached. (HiGHS Status 13)"))

    monkeypatch.setattr(ilp, "milp", stopped)


def test_cli_warns_or_fails_when_not_proven(tmp_path, monkeypatch):
    _stopped_at_time_limit(monkeypatch)
    args = ["solve", "--method", "ilp", "--cloudlets", "6", "--models", "8", "--n-users",
            "40", "--time-limit", "1"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert "warning: HiGHS did not prove optimality" in result.stderr
    assert not json.loads(result.stdout)["info"]["solver"]["proven_optimal"]
    out = tmp_path / "plan.json"
    failed = runner.invoke(app, [*args, "--require-optimal", "--out", str(out)])
    assert failed.exit_code == 2
    assert "did not prove optimality" in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1
    assert not out.exists()


def _highs_returns(monkeypatch, x_of):
    """HiGHS stopped by its time limit with the incumbent ``x_of(n_vars)`` (None: none)."""
    from scipy.optimize import OptimizeResult

    from schedlab.mec_coalition import ilp

    real = ilp.milp

    def stopped(c, *args, **kwargs):
        if not np.any(kwargs["integrality"]):  # the LP relaxation solves as usual
            return real(c, *args, **kwargs)
        x = x_of(len(c))
        return OptimizeResult(x=x, fun=None if x is None else float(c @ x), status=1,
                              success=False, mip_gap=float("inf"), mip_dual_bound=None,
                              message="Time limit reached. (HiGHS Status 13)")

    monkeypatch.setattr(ilp, "milp", stopped)


@pytest.mark.parametrize("incumbent", ["all-cloud", "none"])
def test_time_limited_ilp_keeps_the_rounding_plan_over_a_poor_incumbent(monkeypatch,
                                                                         incumbent):
    from schedlab.mec_coalition import engine, get_policy

    inst = synthetic(6, 8, 40, 0)
    all_cloud = float(inst.cloud.payoff.sum())
    _highs_returns(monkeypatch, (lambda n: np.zeros(n)) if incumbent == "all-cloud"
                   else (lambda n: None))
    plan = get_policy("ilp").plan(inst, 0)
    info = plan.info
    assert info["plan_source"] == "rounding" and not info["proven_optimal"]
    assert not plan.placement.optimal
    metrics = engine.evaluate(inst, plan)
    assert metrics["hit_ratio"] > 0.3
    assert engine.expected_payoff(inst, plan) > all_cloud + 1.0
    assert info["rounding_objective"] == pytest.approx(plan.placement.value)
    assert 0 <= info["gap_to_bound"] < 0.2  # against the LP bound (HiGHS gave none)
    args = ["solve", "--method", "ilp", "--cloudlets", "6", "--models", "8", "--n-users",
            "40", "--time-limit", "1"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert "kept the randomized algorithm's plan" in result.stderr
    assert json.loads(result.stdout)["info"]["plan_source"] == "rounding"
    assert runner.invoke(app, [*args, "--require-optimal"]).exit_code == 2


def test_proven_ilp_is_kept_and_at_least_the_rounding():
    from schedlab.mec_coalition import get_policy

    inst = synthetic(4, 8, 20, 0, tasks=3)
    info = get_policy("ilp").plan(inst, 0).info
    assert info["plan_source"] == "highs" and info["proven_optimal"]
    assert info["highs_objective"] >= info["rounding_objective"] - 1e-9
    assert info["gap_to_bound"] == pytest.approx(0.0, abs=1e-6)
