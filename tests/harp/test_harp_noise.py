"""The analog noise model: exact when ideal, AIHWKit PCM statistics, effects of the right sign."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from schedlab.harp.noise import (  # noqa: E402
    PROG_COEFF,
    AnalogLinear,
    NoiseConfig,
    adc_lsb,
    analog_model,
    program_conductances,
    relative_error,
)

IDEAL = dict(prog_noise_scale=0.0, read_noise_scale=0.0)


def _layer(cfg: NoiseConfig, seed: int = 0, n: int = 24, k: int = 200):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g)
    x = torch.randn(6, k, generator=g)
    return w, x, AnalogLinear(w, None, cfg, torch.Generator().manual_seed(seed))


def test_lossless_adc_is_the_quantised_product() -> None:
    """9 bits resolve every column sum of 128 rows x 3 levels: the result is the integer GEMM."""
    cfg = NoiseConfig(adc_bits=9, **IDEAL)
    w, x, layer = _layer(cfg)
    xs, ws = x.double(), w.double()
    xsc, wsc = xs.abs().amax(1, keepdim=True), ws.abs().max()
    xq = torch.round(xs.abs() / xsc * 255) * xs.sign()
    wq = torch.round(ws.abs() / wsc * 255) * ws.sign()
    expected = (xq @ wq.T) * xsc / 255 * wsc / 255
    assert torch.allclose(layer(x).double(), expected, rtol=1e-5, atol=1e-5)
    assert adc_lsb(cfg) == 1.0 and adc_lsb(NoiseConfig(adc_bits=7)) == 4.0


def test_fewer_adc_bits_more_error() -> None:
    errs = []
    for bits in (10, 8, 6, 4):
        w, x, layer = _layer(NoiseConfig(adc_bits=bits, **IDEAL))
        errs.append(relative_error(x @ w.T, layer(x)))
    assert errs[0] < 0.01 and errs == sorted(errs) and errs[-1] > 3 * errs[1]


def test_programming_noise_follows_aihwkit_polynomial() -> None:
    cfg = NoiseConfig(g_max_us=25.0)
    for frac in (0.1, 0.5, 1.0):
        target = torch.full((200_000,), 25.0 * frac, dtype=torch.float64)
        g = program_conductances(target, cfg, torch.Generator().manual_seed(1))
        sigma = PROG_COEFF[0] + PROG_COEFF[1] * frac + PROG_COEFF[2] * frac**2
        assert float(g.std()) == pytest.approx(sigma, rel=0.03)
        assert float(g.mean()) == pytest.approx(25.0 * frac, rel=0.02)


def test_drift_shrinks_and_compensation_restores() -> None:
    day = dict(prog_noise_scale=0.0, read_noise_scale=0.0, t_inference_s=86400.0, adc_bits=None)
    w, x, raw = _layer(NoiseConfig(drift_compensation=False, **day))
    _, _, comp = _layer(NoiseConfig(drift_compensation=True, **day))
    ideal = x @ w.T
    shrink = float(raw(x).norm() / ideal.norm())
    assert 0.3 < shrink < 0.9  # nu ~ 0.05-0.1 over (86400+20)/20: g falls by 35-55 %
    assert relative_error(ideal, comp(x)) < relative_error(ideal, raw(x)) / 2


def test_more_noise_more_error_and_seeded() -> None:
    errs = []
    for scale in (0.5, 1.0, 2.0):
        w, x, layer = _layer(NoiseConfig(adc_bits=None, prog_noise_scale=scale))
        errs.append(relative_error(x @ w.T, layer(x)))
    assert errs == sorted(errs)
    w, x, again = _layer(NoiseConfig(adc_bits=None, prog_noise_scale=2.0))
    assert relative_error(x @ w.T, again(x)) == pytest.approx(errs[-1])


def test_whole_hf_bert_becomes_analog() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=128,
        vocab_size=100,
    )
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 100, (1, 8))
    with torch.no_grad():
        ref = model(input_ids=ids).last_hidden_state
        exact = analog_model(model, NoiseConfig(adc_bits=9, **IDEAL))
        noisy = analog_model(model, NoiseConfig(adc_bits=6, prog_noise_scale=2.0))
        e_exact = relative_error(ref, exact(input_ids=ids).last_hidden_state)
        e_noisy = relative_error(ref, noisy(input_ids=ids).last_hidden_state)
    assert exact.analog_layers == 7  # Q, K, V, attention output, FFN in/out, pooler
    assert e_exact < 0.02 < e_noisy  # 8-bit weights/inputs only vs ADC + device noise
    assert isinstance(model.encoder.layer[0].attention.self.query, torch.nn.Linear)  # untouched
