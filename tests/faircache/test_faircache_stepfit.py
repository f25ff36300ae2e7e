"""The stored step-time fit (``llm.stepfit``) and FairCache's memory price inside vLLM
(``vllm.MemoryPrice``, ``vllm.kv_pool``): neither needs vLLM."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError, ConfigError
from schedlab.faircache.vllm import HBM_SHARE, MemoryPrice, kv_pool
from schedlab.llm.stepfit import StepFit


def test_fit_recovers_the_coefficients_of_measured_steps_and_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 512, 200)
    seqs = rng.integers(1, 5, 200)
    secs = 0.006 + 4e-5 * tokens + 2e-4 * seqs
    fit = StepFit.fit(tokens, seqs, secs * rng.uniform(0.97, 1.03, 200), source="synthetic")
    assert fit.c0 == pytest.approx(0.006, rel=0.05)
    assert fit.c_tok == pytest.approx(4e-5, rel=0.05)
    assert fit.c_seq == pytest.approx(2e-4, rel=0.3)
    assert fit.steps == 200 and fit.rel_rms < 0.03
    back = StepFit.load(fit.save(tmp_path / "fit.json"))
    assert back == fit  # reused exactly, never refitted
    assert back.seconds(100, 2) == pytest.approx(fit.c0 + 100 * fit.c_tok + 2 * fit.c_seq)


def test_bad_fit_files_are_one_line_errors_naming_the_field(tmp_path):
    bad = tmp_path / "fit.json"
    bad.write_text('{"c0": 0.1, "c_tok": -1, "c_seq": 0}')
    with pytest.raises(BadInputError, match="c_tok") as err:
        StepFit.load(bad)
    assert "\n" not in str(err.value) and str(bad) in str(err.value)
    bad.write_text('{"c0": 0.1,\n "c_tok": }')
    with pytest.raises(BadInputError, match=r"fit.json:2: not JSON"):
        StepFit.load(bad)
    with pytest.raises(BadInputError, match="no such step-time fit"):
        StepFit.load(tmp_path / "missing.json")
    with pytest.raises(BadInputError, match="steps"):
        StepFit.fit([1, 2], [1, 1], [0.1, 0.2])


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["c0", "c_tok", "c_seq", "source", "x"]),
        st.one_of(st.none(), st.booleans(), st.floats(), st.text(max_size=4), st.integers(-5, 5)),
        max_size=5,
    )
)
def test_loading_any_json_object_is_a_fit_or_a_one_line_bad_input(tmp_path_factory, data):
    path = tmp_path_factory.getbasetemp() / "any-fit.json"  # one file, rewritten per example
    path.write_text(json.dumps(data))
    try:
        fit = StepFit.load(path)
    except BadInputError as exc:
        assert "\n" not in str(exc)
    else:
        assert min(fit.coefficients) >= 0 and sum(fit.coefficients) > 0


def _kv_config(blocks=100, block=32, page=8192, layers=2):
    spec = SimpleNamespace(page_size_bytes=page, block_size=block)
    group = SimpleNamespace(kv_cache_spec=spec, layer_names=[f"l{i}" for i in range(layers)])
    return SimpleNamespace(kv_cache_groups=[group], num_blocks=blocks)


def test_memory_price_follows_the_stored_fit_and_the_pool():
    pool = kv_pool(_kv_config())
    assert pool == (100 * 2 * 8192, 2 * 8192 / 32)  # bytes, bytes per token
    fit = StepFit(0.005, 5e-5, 1e-4)
    price = MemoryPrice(fit, HBM_SHARE, pool)
    assert price.priced
    # the simulator's rule: hbm_share of an engine-second's prefill tokens per pool byte
    assert price.weights().p_kv == pytest.approx(0.109 / 5e-5 / pool[0])
    reqs = {
        "a": SimpleNamespace(num_computed_tokens=300),
        "b": SimpleNamespace(num_computed_tokens=10),
    }
    kv = price.kv_byte_s({"a": 1, "b": 10}, reqs)
    dt = fit.seconds(11, 2)  # the modelled step, not a stopwatch
    assert kv == pytest.approx({"a": 300 * pool[1] * dt, "b": 10 * pool[1] * dt})
    # no fit, or no memory share: memory unpriced (FairCache = VTC + prefix splitting)
    assert not MemoryPrice(None, HBM_SHARE, pool).priced
    assert MemoryPrice(fit, 0.0, pool).weights().p_kv == 0
    with pytest.raises(ConfigError, match="hbm_share"):
        MemoryPrice(fit, -1.0, pool)
    with pytest.raises(ConfigError, match="no attention pages"):  # a fit, nothing to price
        MemoryPrice(fit, HBM_SHARE, (0.0, 0.0)).weights()
    with pytest.raises(ConfigError, match="kv_cache_config"):
        kv_pool(SimpleNamespace(kv_cache_groups=[], num_blocks=5))


def test_memory_price_from_the_environment(tmp_path, monkeypatch):
    pool = kv_pool(_kv_config())
    monkeypatch.delenv("SCHEDLAB_FAIRCACHE_STEP_FIT", raising=False)
    assert not MemoryPrice.from_env(pool).priced
    path = StepFit(0.005, 5e-5, 1e-4).save(tmp_path / "fit.json")
    monkeypatch.setenv("SCHEDLAB_FAIRCACHE_STEP_FIT", str(path))
    price = MemoryPrice.from_env(pool)
    assert price.priced and price.hbm_share == HBM_SHARE
    monkeypatch.setenv("SCHEDLAB_FAIRCACHE_HBM_SHARE", "half")
    with pytest.raises(ConfigError, match="SCHEDLAB_FAIRCACHE_HBM_SHARE"):
        MemoryPrice.from_env(pool)


def test_faircache_priced_by_engine_time_charges_each_requests_share_of_the_modelled_step():
    from schedlab.faircache.vllm import FairQueue

    fit = StepFit(0.008, 4e-5, 0.0)  # the shape of the stored vLLM CPU fit: c0 dominates
    price = MemoryPrice(fit, 0.0, (1e6, 100.0), compute="time")
    assert price.by_time and price.weights().w_out == 0.0
    assert not MemoryPrice(None, 0.0, (1e6, 100.0), compute="time").by_time  # needs the fit
    with pytest.raises(ConfigError, match="compute_price"):
        MemoryPrice(fit, 0.0, (1e6, 100.0), compute="wall")
    q = FairQueue("faircache", max_tenants=2, tenant_of=lambda r: r.t, weights=price.weights())

    def req(rid, t, prompt, cached):
        return SimpleNamespace(
            request_id=rid, t=t, num_prompt_tokens=prompt, num_computed_tokens=0,
            prefill_stats=SimpleNamespace(num_cached_tokens=cached),
            sampling_params=SimpleNamespace(max_tokens=8, extra_args=None),
        )

    a, b = req("a", "x", 288, 256), req("b", "y", 288, 0)  # a hits a cached prefix
    q.add_request(a)
    q.add_request(b)  # both arrive before either is admitted (no VTC lift)
    q.pop_request()
    q.pop_request()
    a.num_computed_tokens, b.num_computed_tokens = 288, 288  # one step: 32 + 288 tokens
    step = {"a": 32, "b": 288}
    units = price.step_units(step)
    q.on_step(step, {"a": a, "b": b}, time_units=units)
    per_token = fit.seconds(320, 2) / fit.c_tok / 320
    assert q.counters() == pytest.approx({"x": 32 * per_token, "y": 288 * per_token})
    a.num_tokens = b.num_tokens = 289  # each sampled a token; a decode step for both
    a.num_computed_tokens = b.num_computed_tokens = 289
    before = q.counters()
    q.on_step({"a": 1, "b": 1}, {"a": a, "b": b}, time_units=price.step_units({"a": 1, "b": 1}))
    decode = fit.seconds(2, 2) / fit.c_tok / 2  # ~100 units: a CPU decode step is mostly c0
    after = q.counters()
    assert after["x"] - before["x"] == pytest.approx(decode)
    assert after["y"] - before["y"] == pytest.approx(decode)
    assert decode > 50 * 2  # VTC's w_out = 2 would price it 50x lower than the engine spends
