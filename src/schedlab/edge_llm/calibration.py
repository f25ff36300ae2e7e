"""Step-time calibration of the edge/cloud GPUs against Vidur's profiled operators.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md). ``delay.GpuTiming`` builds every prefill chunk and decode
iteration from schedlab.llm's calibrated cost model (per GEMM max(compute, weight traffic),
fitted jointly over GPUs/models/TP degrees; ``python -m schedlab.llm.calibrate``). At tp=1 that
shared fit misses single (GPU, model) sets by up to 15% per step. This module fits, per profiled
(GPU, model) at tp=1, a *step correction*: a multiplier on schedlab.llm's dense step time,
piecewise linear in log2(tokens) (knots every half octave), least squares on the profiled
token counts. It is fitted on every other profiled token count and its error is reported on
the others (held out), so the ≤ 10 % figure is not the fit's own residual.

A step here is what Vidur profiles: ``layers x (QKV, output, gate/up, down projections, two
RMSNorms, SiLU·mul, RoPE, two residual adds) + embedding`` for T tokens. Attention kernels and
the LM head are not in Vidur's ``mlp.csv``; they stay schedlab.llm's analytic terms.

Which profile a deployment uses: the GPU borrows schedlab.llm's profiled GPU of the same
architecture (A800 -> A100-80GB, H200 -> H100, A6000/A10G -> A40) and the model its own
profile where one exists, else Llama-3-8B's (GQA, the closest shape) where that GPU has it,
else Llama-2-7B's; the choice is recorded as ``source``.

``python -m schedlab.edge_llm.calibration ../shared/data/vidur_profiles`` refits and writes
``step_calibration.toml`` with its provenance and the per-shape error table.
"""

from __future__ import annotations

import math
import sys
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError, ConfigError

KNOT_STEP = 0.5  # octaves
KNOTS = np.arange(0.0, 12.0 + 1e-9, KNOT_STEP)
#: schedlab.llm's borrowed GPUs (same architecture), see llm/calibration.toml [borrow]
PROFILED_GPU = {
    "a100-80g": "a100-80g",
    "a800": "a100-80g",
    "h100": "h100",
    "h200": "h100",
    "a40": "a40",
    "a6000": "a40",
    "a10g": "a40",
}
TOML = "step_calibration.toml"


def _hat(tokens: np.ndarray) -> np.ndarray:
    x = np.log2(np.maximum(tokens, 1.0))
    basis = np.zeros((x.size, KNOTS.size))
    for j in range(KNOTS.size):
        basis[:, j] = np.maximum(0.0, 1.0 - np.abs(x - KNOTS[j]) / KNOT_STEP)
    # beyond the last knot the curve is flat
    basis[x > KNOTS[-1], :] = 0.0
    basis[x > KNOTS[-1], -1] = 1.0
    return basis


@dataclass(frozen=True)
class StepCorrection:
    """Multiplier on schedlab.llm's dense step time, by tokens in the step."""

    source: str
    log_knots: tuple[float, ...]

    def factor(self, tokens: float) -> float:
        return float(
            math.exp(
                np.interp(math.log2(max(tokens, 1.0)), KNOTS[: len(self.log_knots)], self.log_knots)
            )
        )


def _step_table(root: str | Path):
    """(gpu, model, tokens, measured step ms, schedlab.llm step ms) at tp=1, from Vidur."""
    from schedlab.llm.calibrate import error_table

    table = error_table(root)
    table = table[(table.tp == 1) & (table.term == "layer")].copy()
    return table


def fit(root: str | Path) -> tuple[dict[str, dict], list[dict]]:
    """Fit a correction per profiled (GPU, model); return (coefficients, per-shape rows)."""
    coeffs, rows = _fit(str(Path(root).resolve()))
    return {k: dict(v) for k, v in coeffs.items()}, [dict(r) for r in rows]


@lru_cache(maxsize=2)
def _fit(root: str) -> tuple[dict[str, dict], list[dict]]:
    table = _step_table(root)
    if table.empty:
        raise BadInputError("no tp=1 Vidur compute profiles found", path=root)
    coeffs, rows = {}, []
    for (gpu, model), part in table.groupby(["gpu", "model"]):
        part = part.sort_values("tokens")
        tokens = part.tokens.to_numpy(dtype=float)
        ratio = np.log(part.measured_ms.to_numpy() / part.model_ms.to_numpy())
        train = np.arange(tokens.size) % 2 == 0
        basis = _hat(tokens)
        used = basis[train].sum(axis=0) > 0
        sol = np.zeros(KNOTS.size)
        sol[used] = np.linalg.lstsq(basis[train][:, used], ratio[train], rcond=None)[0]
        # knots without training points take the nearest fitted one
        idx = np.flatnonzero(used)
        for j in np.flatnonzero(~used):
            sol[j] = sol[idx[np.argmin(np.abs(idx - j))]]
        corrected = part.model_ms.to_numpy() * np.exp(basis @ sol)
        measured = part.measured_ms.to_numpy()
        for t, m, base, corr, is_train in zip(
            tokens, measured, part.model_ms.to_numpy(), corrected, train, strict=True
        ):
            rows.append(
                dict(
                    gpu=gpu,
                    model=model,
                    tokens=int(t),
                    measured_ms=float(m),
                    llm_ms=float(base),
                    corrected_ms=float(corr),
                    llm_error=float(base / m - 1),
                    error=float(corr / m - 1),
                    held_out=not bool(is_train),
                )
            )
        coeffs[f"{gpu}/{model}"] = dict(log_knots=[round(float(v), 6) for v in sol])
    return coeffs, rows


def summary(rows: list[dict]) -> list[dict]:
    """Per (GPU, model): max/mean |error| of schedlab.llm's step and of the corrected one."""
    out = {}
    for r in rows:
        out.setdefault((r["gpu"], r["model"]), []).append(r)
    table = []
    for (gpu, model), part in out.items():
        held = [r for r in part if r["held_out"]]
        table.append(
            dict(
                gpu=gpu,
                model=model,
                shapes=len(part),
                llm_max=100 * max(abs(r["llm_error"]) for r in part),
                llm_mean=100 * float(np.mean([abs(r["llm_error"]) for r in part])),
                held_out_max=100 * max(abs(r["error"]) for r in held),
                held_out_mean=100 * float(np.mean([abs(r["error"]) for r in held])),
                all_max=100 * max(abs(r["error"]) for r in part),
            )
        )
    return table


def write_toml(coeffs: dict, rows: list[dict], path: Path) -> None:
    from schedlab.llm.calibrate import VIDUR_COMMIT

    lines = [
        "# Step corrections on schedlab.llm's dense step time (schedlab.edge_llm."
        "calibration); do not edit by hand.",
        f"# Source: Microsoft Vidur data/profiling (MIT), commit {VIDUR_COMMIT}, "
        "compute/<gpu>/<model>/mlp.csv, tp=1.",
        "# log_knots: ln(multiplier) at log2(tokens) = 0, 0.5, ..., 12; fitted on every "
        "other profiled token count.",
        "# Refit: python -m schedlab.edge_llm.calibration ../shared/data/vidur_profiles",
        "",
    ]
    for s in summary(rows):
        lines.append(
            f"# {s['gpu']}/{s['model']}: schedlab.llm step error max "
            f"{s['llm_max']:.1f}% -> corrected held-out max {s['held_out_max']:.1f}% "
            f"(mean {s['held_out_mean']:.1f}%) over {s['shapes']} shapes"
        )
    lines.append("")
    for key, value in coeffs.items():
        lines.append(f'["{key}"]')
        lines.append("log_knots = [" + ", ".join(f"{v:g}" for v in value["log_knots"]) + "]")
        lines.append("")
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines))
    tmp.replace(path)


@lru_cache(maxsize=1)
def _stored() -> dict[str, StepCorrection]:
    path = resources.files("schedlab.edge_llm").joinpath(TOML)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{TOML}: {exc}", field="step_calibration") from exc
    out = {}
    for key, row in data.items():
        knots = row.get("log_knots")
        if not isinstance(knots, list) or len(knots) != KNOTS.size:
            raise ConfigError(
                f"{TOML} [{key}]: log_knots needs {KNOTS.size} numbers", field="log_knots"
            )
        out[key] = StepCorrection(f"vidur:{key}", tuple(float(v) for v in knots))
    return out


def correction_for(gpu: str, model: str) -> StepCorrection | None:
    """The stored correction for a deployment's (GPU, model), by the borrowing rule above."""
    stored = _stored()
    base = PROFILED_GPU.get(gpu.lower())
    if base is None:
        return None
    for candidate in (model.lower(), "llama-3-8b", "llama-2-7b"):
        found = stored.get(f"{base}/{candidate}")
        if found is not None:
            return found
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m schedlab.edge_llm.calibration VIDUR_PROFILES_DIR", file=sys.stderr)
        return 2
    try:
        coeffs, rows = fit(argv[0])
    except BadInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(str(resources.files("schedlab.edge_llm").joinpath(TOML)))
    write_toml(coeffs, rows, out)
    for s in summary(rows):
        print(
            f"{s['gpu']:9s} {s['model']:11s} llm max {s['llm_max']:5.1f}%  corrected "
            f"held-out max {s['held_out_max']:5.1f}% mean {s['held_out_mean']:4.1f}%"
        )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
