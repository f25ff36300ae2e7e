"""The bookkeeping of ``vllm_bench`` (fairness inside the real vLLM engine) that needs no vLLM:
VTC's service difference over backlogged steps, the workloads' sources, the capacity."""

from __future__ import annotations

import pytest

from schedlab.faircache.vllm_bench import MAX_SEQS, Source, capacity, summarise
from schedlab.llm.stepfit import StepFit


def _series(incs, backlogged):
    out, a, b = [], 0.0, 0.0
    for (da, db), (ba, bb) in zip(incs, backlogged, strict=True):
        a, b = a + da, b + db
        row = {
            f"{k}_{t}": v for k in ("compute", "cpu", "unified") for t, v in (("A", a), ("B", b))
        }
        out.append(row | {"backlogged_A": ba, "backlogged_B": bb})
    return out


def test_service_difference_counts_only_steps_where_both_tenants_wait():
    # A gets 10 a step, B 4, both backlogged for 5 steps; then B idles while A gets 100
    incs = [(10, 4)] * 5 + [(100, 0)] * 3
    back = [(1, 1)] * 5 + [(1, 0)] * 3
    res = summarise(_series(incs, back), ["A", "B"])
    assert res["compute"]["max_diff"] == pytest.approx(30.0)  # 5 x (10 - 4), not 330
    assert res["compute"]["share_a"] == pytest.approx(50 / 70)
    assert res["both_backlogged_steps"] == 5
    even = summarise(_series([(3, 3)] * 4, [(1, 1)] * 4), ["A", "B"])
    assert even["cpu"]["max_diff"] == 0 and even["cpu"]["jain"] == pytest.approx(1.0)


def test_sources_are_seeded_and_shaped_like_their_workloads():
    fit = StepFit(0.008, 4e-5, 0.0)
    src = Source("hit-bias", 3, fit, 100)
    first = list(src.due(0.0, {"A": 0, "B": 0}, 2))
    again = list(Source("hit-bias", 3, fit, 100).due(0.0, {"A": 0, "B": 0}, 2))
    assert first == again  # seeded
    a = [p for t, p, _ in first if t == "A"]
    b = [p for t, p, _ in first if t == "B"]
    assert len(a) == len(b) == 2 and a[0][:256] == a[1][:256] and b[0][:256] != b[1][:256]
    assert list(src.due(0.0, {"A": 2, "B": 1}, 2))[0][0] == "B"  # tops up what is missing
    over = Source("overload", 0, fit, 400)
    n = {"A": 0, "B": 0}
    for _, t in over.arrivals:
        n[t] += 1
    assert 1.6 < n["B"] / n["A"] < 2.5  # rates 0.75 C and 1.5 C
    cap = capacity(fit, 64, 32)
    assert cap == pytest.approx(1 / (32 * fit.seconds(MAX_SEQS, MAX_SEQS) / MAX_SEQS + 64 * 4e-5))
    with pytest.raises(ValueError, match="fit"):
        Source("on-off", 0, None, 10)
