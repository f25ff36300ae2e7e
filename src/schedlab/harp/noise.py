"""Analog fidelity: ADC quantisation and PCM conductance noise on a model's static GEMMs.

``aihwkit`` (IBM's analog toolkit) does not fit this project: its only release for Python 3.11
on the package index (1.2.0) is a source build whose resolver, left alone, replaces torch
2.13.0 with 2.14.1 (``pip install --dry-run aihwkit``), and with torch pinned it must compile
its C++ simulator. So this module re-implements the parts of its inference model HARP needs,
with AIHWKit 1.2.0's own constants (``src/aihwkit/inference/noise/pcm.py``, class
``PCMLikeNoiseModel``, fitted on measured PCM devices, Nandakumar et al., ICECS 2019):

* weights map to conductances as in ``SinglePairConductanceConverter`` (``g_max`` = 25 uS:
  ``|W|max`` -> ``g_max``, positive and negative parts on two devices);
* programming noise ``g + sigma(g) N(0,1)`` with
  ``sigma = (0.26348 + 1.9650 (g/g_max) - 1.1731 (g/g_max)^2) * g_max / 25`` uS, clamped at 0;
* drift ``g(t) = g ((t + t0)/t0)^-nu``, ``t0 = 20 s``,
  ``nu ~ |N(mu, sigma)|``, ``mu = clamp(-0.0155 ln(g/g_max) + 0.0244, 0.049, 0.1)``,
  ``sigma = clamp(-0.0125 ln(g/g_max) - 0.0059, 0.008, 0.045)``;
* accumulated 1/f read noise ``g + |g| q sqrt(ln((t + t_read)/(2 t_read))) N(0,1)``,
  ``q = min(0.0088 / max(g_prog/g_max, 1e-3)^0.65, 0.2)`` (programmed, pre-drift
  conductance, as AIHWKit), ``t_read = 250 ns``;
* global drift compensation as AIHWKit's ``GlobalDriftCompensation``: one output scale per layer,
  the mean ``|y|`` of an all-ones input read right after programming over the same read after
  drift (the read here is of the conductances, without ADC quantisation).

What AIHWKit does not model and we add, because it is HARP's hardware: the ISAAC/PUMA
datapath of :mod:`schedlab.harp.arch` — integer weights of ``weight_bits`` bit-sliced over
cells of ``cell_bits`` (each slice a conductance level), signed inputs quantised per token row
to ``input_bits`` (abs-max scaling) and fed bit-serially through 1-bit DACs, and every column
sum of a ``rows``-row crossbar tile converted by an ``adc_bits`` ADC whose full scale is the
largest possible column sum (``rows * (2^cell_bits - 1)``, rounded up to a power of two:
an ADC with enough bits is lossless, each bit fewer drops one LSB, see :func:`adc_lsb`), then
shift-and-added digitally. ISAAC's flipped-weight encoding, which lets it use
one bit fewer, is not modelled; IR drop and ADC non-linearity are not modelled.

Only static GEMMs (``nn.Linear``) become analog, as in HARP's mapping; attention's dynamic
GEMMs, softmax and norms stay digital and exact.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schedlab.core.errors import MissingDependencyError

#: AIHWKit 1.2.0 PCMLikeNoiseModel defaults (pcm.py), fitted at g_max = 25 uS
PROG_COEFF = (0.26348, 1.9650, -1.1731)
PROG_G_MAX_REF = 25.0
T0_S = 20.0
T_READ_S = 250e-9


class NoiseConfig(BaseModel):
    """One analog operating point; every default is AIHWKit's or HARP's architecture default."""

    model_config = ConfigDict(extra="forbid")

    rows: int = Field(128, ge=1)  # crossbar rows per tile (arch.crossbar.rows)
    cell_bits: int = Field(2, ge=1, le=8)  # arch.crossbar.cell_bits
    weight_bits: int = Field(8, ge=1, le=16)  # arch.crossbar.weight_bits
    input_bits: int = Field(8, ge=1, le=16)  # arch.crossbar.input_bits
    adc_bits: int | None = Field(8, ge=1, le=24)  # None: ideal (no conversion error)
    g_max_us: float = Field(25.0, gt=0)  # AIHWKit SinglePairConductanceConverter g_max
    prog_noise_scale: float = Field(1.0, ge=0)  # AIHWKit prog_noise_scale
    read_noise_scale: float = Field(1.0, ge=0)  # AIHWKit read_noise_scale
    drift_scale: float = Field(1.0, ge=0)  # AIHWKit drift_scale
    t_inference_s: float = Field(0.0, ge=0)  # seconds after programming; 0 = no drift/1/f
    drift_compensation: bool = True  # AIHWKit GlobalDriftCompensation
    seed: int = 0


def _torch():
    try:
        import torch
    except ImportError:
        raise MissingDependencyError(
            "the analog noise model needs torch", hint="pip install 'schedlab[torch]'"
        ) from None
    return torch


def program_conductances(g_target: Any, cfg: NoiseConfig, gen: Any) -> Any:
    """AIHWKit's programming noise, drift and 1/f read noise on target conductances (uS)."""
    return _program_and_drift(g_target, cfg, gen)[1]


def _program_and_drift(g_target: Any, cfg: NoiseConfig, gen: Any) -> tuple[Any, Any]:
    """(conductances right after programming, the same at ``t_inference_s``)."""
    torch = _torch()
    rel = g_target / cfg.g_max_us
    sig = PROG_COEFF[0] + PROG_COEFF[1] * rel + PROG_COEFF[2] * rel * rel
    sig = sig * cfg.g_max_us / PROG_G_MAX_REF
    g = (
        g_target
        + cfg.prog_noise_scale
        * sig
        * torch.randn(g_target.shape, generator=gen, dtype=g_target.dtype)
    ).clamp(min=0)
    if cfg.t_inference_s <= 0:
        return g, g
    g_prog = g
    t = cfg.t_inference_s + T0_S
    grel = (g_target / cfg.g_max_us).abs().clamp(min=1e-7)
    mu = (-0.0155 * torch.log(grel) + 0.0244).clamp(0.049, 0.1)
    sd = (-0.0125 * torch.log(grel) - 0.0059).clamp(0.008, 0.045)
    nu = (mu + sd * torch.randn(grel.shape, generator=gen, dtype=grel.dtype)).abs()
    # 1/f amplitude from the programmed conductance, before drift (AIHWKit: ``abs(g_prog)``)
    q = (0.0088 / ((g.abs() / cfg.g_max_us) ** 0.65).clamp(min=1e-3)).clamp(max=0.2)
    g = g * (t / T0_S) ** (-cfg.drift_scale * nu)
    sig_read = q * math.sqrt(math.log((t + T_READ_S) / (2 * T_READ_S)))
    noise = torch.randn(g.shape, generator=gen, dtype=g.dtype)
    return g_prog, (g + g.abs() * cfg.read_noise_scale * sig_read * noise).clamp(min=0)


def adc_lsb(cfg: NoiseConfig) -> float:
    """The ADC step in units of one cell level: it spans the power-of-two range holding the
    largest column sum (``rows * (2^cell_bits - 1)``, 9 bits for 128 rows of 2-bit cells), so an
    ADC with that many bits reads every integer sum exactly and each bit fewer drops one LSB."""
    full = cfg.rows * (2**cfg.cell_bits - 1)
    need = math.ceil(math.log2(full + 1))
    return 2.0 ** (need - (cfg.adc_bits or need))


class AnalogLinear:
    """``y = x W^T + b`` computed the way HARP's crossbars would, with ``cfg``'s non-idealities.

    Built once per weight (programming is one-off, so the noise sample is fixed); call it on a
    ``(..., in_features)`` tensor.
    """

    def __init__(self, weight: Any, bias: Any, cfg: NoiseConfig, gen: Any) -> None:
        torch = _torch()
        self.cfg, self.bias = cfg, bias
        w = weight.detach().to(torch.float64)
        n, k = w.shape
        self.in_features = k
        self.tiles = -(-k // cfg.rows)
        pad = self.tiles * cfg.rows - k
        self.w_scale = float(w.abs().max()) or 1.0
        wmax = 2**cfg.weight_bits - 1
        q = torch.round(w.abs() / self.w_scale * wmax)
        q = torch.nn.functional.pad(q, (0, pad))
        sign = torch.stack([(w > 0), (w < 0)]).to(torch.float64)  # W+ and W- devices
        sign = torch.nn.functional.pad(sign, (0, pad))
        cells = 2**cfg.cell_bits
        self.slices = -(-cfg.weight_bits // cfg.cell_bits)
        levels = []
        rest = q
        for _ in range(self.slices):  # least significant slice first
            levels.append(torch.remainder(rest, cells))
            rest = torch.div(rest, cells, rounding_mode="floor")
        lv = torch.stack(levels)[:, None] * sign[None]  # (slices, 2, n, k_pad) target levels
        target = lv / (cells - 1) * cfg.g_max_us
        g_prog, g = _program_and_drift(target, cfg, gen)
        noisy = lv + (g - target) / cfg.g_max_us * (cells - 1)  # exact levels when noise-free
        if cfg.drift_compensation and cfg.t_inference_s > 0:
            # GlobalDriftCompensation: the mean |output| of an all-ones input read right after
            # programming (the baseline) over the same read now, one scale for the layer
            programmed = lv + (g_prog - target) / cfg.g_max_us * (cells - 1)
            slice_w = 2.0 ** (cfg.cell_bits * torch.arange(self.slices, dtype=torch.float64))

            def ones_read(levels: Any) -> float:
                signed = levels[:, 0] - levels[:, 1]
                return float(torch.einsum("s,snk->n", slice_w, signed).abs().mean())

            now = ones_read(noisy)
            if now > 0:
                noisy = noisy * (ones_read(programmed) / now)
        # (slices, 2, n, tiles, rows); per tile a (rows, slices*2*n) matrix of cell levels
        self.levels = noisy.reshape(self.slices, 2, n, self.tiles, cfg.rows)
        self.columns = [
            self.levels[:, :, :, j, :].reshape(-1, cfg.rows).T.contiguous().to(torch.float32)
            for j in range(self.tiles)
        ]
        pm = torch.tensor([1.0, -1.0], dtype=torch.float64)
        bit_w = 2.0 ** torch.arange(cfg.input_bits, dtype=torch.float64)
        slice_w = 2.0 ** (cfg.cell_bits * torch.arange(self.slices, dtype=torch.float64))
        # shift-and-add weights of (input bit, input sign, weight slice, weight sign)
        self.coeff = torch.einsum("b,x,s,w->bxsw", bit_w, pm, slice_w, pm)

    def __call__(self, x: Any) -> Any:
        torch = _torch()
        cfg = self.cfg
        shape = x.shape
        xs = x.detach().to(torch.float64).reshape(-1, shape[-1])
        pad = self.tiles * cfg.rows - self.in_features
        xs = torch.nn.functional.pad(xs, (0, pad))
        x_scale = xs.abs().amax(dim=1, keepdim=True).clamp(min=1e-30)
        imax = 2**cfg.input_bits - 1
        xq = torch.round(xs.abs() / x_scale * imax)
        parts = torch.stack([xq * (xs > 0), xq * (xs < 0)])  # (2, T, k_pad) signed inputs
        bits = torch.stack(
            [
                torch.remainder(torch.div(parts, 2**b, rounding_mode="floor"), 2)
                for b in range(cfg.input_bits)
            ]
        )  # (ib, 2, T, k_pad)
        ib, tokens = cfg.input_bits, xs.shape[0]
        bits = bits.reshape(ib * 2 * tokens, self.tiles, cfg.rows).to(torch.float32)
        lsb = adc_lsb(cfg) if cfg.adc_bits is not None else 0.0
        acc = torch.zeros(tokens, self.levels.shape[2], dtype=torch.float64)
        for j in range(self.tiles):  # one GEMM per crossbar tile: every bit plane x every column
            sums = bits[:, j] @ self.columns[j]  # (ib*2*T, slices*2*n) column sums
            if lsb:
                sums = (torch.round(sums / lsb) * lsb).clamp(0, (2**cfg.adc_bits - 1) * lsb)
            sums = sums.to(torch.float64).reshape(ib, 2, tokens, self.slices, 2, -1)
            acc += torch.tensordot(sums, self.coeff, dims=([0, 1, 3, 4], [0, 1, 2, 3]))
        y = acc * x_scale / imax * self.w_scale / (2**cfg.weight_bits - 1)
        y = y.to(x.dtype).reshape(*shape[:-1], -1)
        return y if self.bias is None else y + self.bias


def analog_model(model: Any, cfg: NoiseConfig) -> Any:
    """A copy of ``model`` whose every ``nn.Linear`` (and HF ``Conv1D``) runs as AnalogLinear."""
    import copy

    torch = _torch()
    gen = torch.Generator().manual_seed(cfg.seed)
    clone = copy.deepcopy(model)

    class _Wrapped(torch.nn.Module):
        def __init__(self, analog: AnalogLinear) -> None:
            super().__init__()
            self.analog = analog

        def forward(self, x):
            return self.analog(x)

    count = 0
    for name, module in list(clone.named_modules()):
        if isinstance(module, torch.nn.Linear):
            weight = module.weight
        elif type(module).__name__ == "Conv1D" and hasattr(module, "nf"):  # GPT-2: x W + b
            weight = module.weight.t()
        else:
            continue
        bias = None if module.bias is None else module.bias.detach()
        wrapped = _Wrapped(AnalogLinear(weight, bias, cfg, gen))
        parent_name, _, leaf = name.rpartition(".")
        parent = clone.get_submodule(parent_name) if parent_name else clone
        setattr(parent, leaf, wrapped)
        count += 1
    clone.analog_layers = count
    return clone


def relative_error(reference: Any, noisy: Any) -> float:
    """``||noisy - reference|| / ||reference||`` over the whole output."""
    torch = _torch()
    ref = reference.detach().to(torch.float64)
    return float(
        torch.linalg.vector_norm(noisy.detach().to(torch.float64) - ref)
        / torch.linalg.vector_norm(ref)
    )
