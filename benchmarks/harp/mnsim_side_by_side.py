"""HARP's analog cost model next to MNSIM 2.0 itself (issue 58, item 2), layer by layer.

    R=/tmp/mnsim; mkdir -p $R && cd $R        # MNSIM 2.0 (thu-nics/MNSIM-2.0, no release)
    git clone https://github.com/thu-nics/MNSIM-2.0 . && python -m venv --system-site-packages env
    python benchmarks/harp/mnsim_side_by_side.py --mnsim $R --mnsim-python $R/env/bin/python

MNSIM is never a dependency of this project: it runs in a child process (``--mnsim-python``,
default ``$MNSIM_PYTHON`` or this interpreter) with ``--mnsim`` (default ``$MNSIM_HOME``) on
its path, and the script prints why and exits 0 when that interpreter cannot import it.

**The same layers.** BERT-base's three static GEMM shapes (Q/K/V/O 768x768, FFN1 768x3072,
FFN2 3072x768) on ``--tokens`` token rows, each as a network of one 1x1 convolution over a
``tokens`` x 1 input: MNSIM computes a conv output position by position, one input vector
(one token) at a time, which is what a transformer linear layer is (MNSIM's ``fc`` type would
wait for one flattened input). The network is built with MNSIM's own ``NetworkGraph`` and run
through its ``TrainTestInterface.get_structure``, ``TCG`` mapping, ``Model_latency``
(``calculate_model_latency(mode=1)``, its pipelined rule) and ``Model_energy``.

**The same configuration.** The headline's (``experiment.headline_arch``: ISAAC's parameters,
``calibration/isaac.toml``) written into a copy of MNSIM's own ``SimConfig.ini``: 128x128
crossbars, 2-bit cells (``Device_Level = 4``), 1-bit DACs (``DAC_Choice = 1``), ISAAC's 8-bit
1.28 GS/s ADC (``ADC_Choice = 2``), one ADC per crossbar (``ADC_Num = 1``), one crossbar
for both signs (``Xbar_Polarity = 1``: 16-bit weights in 8 two-bit slices, as ours), 16-bit
weights and inputs (``quantize_config``), 1 GHz digital clock.

**What is compared** (the analog part, one copy of each weight, no replicas):

* per-vector MVM time: MNSIM's computing latency (crossbar read + DAC + ADC per input bit,
  summed over the layer's vectors) / vectors, against ours, ``(input_bits/dac_bits + 1) x
  max(read, cols/adcs x ADC sample)`` (``costs.analog_row_ns`` without its shift-add and
  transfer terms, which MNSIM counts in its digital and buffer parts);
* analog energy of the layer: MNSIM's crossbar + DAC + ADC energy against
  ``costs.dynamic_energy_pj``'s ``crossbar`` (array + DACs) + ``adc`` terms;
* MNSIM's whole layer latency (its finish time, incl. buffers, adder trees and inter-tile
  transfers) is printed beside ours for reference; it is not our model's scope.

Calibration: where the two differ, one multiplicative factor per quantity is fitted on the
768x768 layer and the error is then reported on the other two shapes (held out).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
SRC = HERE.parents[2] / "src"
SHAPES = (("qkvo", 768, 768), ("ffn1", 768, 3072), ("ffn2", 3072, 768))


# --- the MNSIM side (runs in the child interpreter) -----------------------------------------
def mnsim_worker(args: argparse.Namespace) -> int:
    """Run each shape through MNSIM 2.0; print one JSON document."""
    import configparser

    sys.path.insert(0, args.mnsim)
    import MNSIM.Interface.network as network
    from MNSIM.Energy_Model.Model_energy import Model_energy
    from MNSIM.Interface.interface import TrainTestInterface
    from MNSIM.Latency_Model.Model_latency import Model_latency
    from MNSIM.Mapping_Model.Tile_connection_graph import TCG
    from MNSIM.Power_Model.Model_inference_power import Model_inference_power

    ini = configparser.ConfigParser()
    ini.optionxform = str  # keep MNSIM's capitalised keys
    ini.read(Path(args.mnsim) / "SimConfig.ini", encoding="UTF-8")
    out = []
    for cfg in json.loads(args.config):
        out += _mnsim_layers(args, ini, cfg, network, TrainTestInterface, TCG, Model_latency,
                             Model_inference_power, Model_energy)
    print(json.dumps(out))
    return 0


def _mnsim_layers(args, ini, cfg, network, TrainTestInterface, TCG, Model_latency,  # noqa: N803
                  Model_inference_power, Model_energy) -> list[dict]:  # noqa: N803
    """Every shape at one configuration ``cfg`` through MNSIM."""
    import contextlib
    import io

    for (section, key), value in (
            (("Crossbar level", "Xbar_Size"), f"{cfg['rows']},{cfg['cols']}"),
            (("Crossbar level", "Subarray_Size"), str(cfg["rows"])),
            (("Device level", "Device_Level"), str(2 ** cfg["cell_bits"])),
            (("Device level", "Device_Resistance"),
             ",".join(str(int(1e6 / (1 + 99 * i / (2 ** cfg["cell_bits"] - 1))))
                      for i in range(2 ** cfg["cell_bits"]))),
            (("Interface level", "DAC_Choice"), "1"), (("Interface level", "ADC_Choice"), "2"),
            (("Process element level", "Xbar_Polarity"), "1"),
            (("Process element level", "ADC_Num"), str(cfg["adcs"])),
            (("Process element level", "DAC_Num"), str(cfg["rows"])),
            (("Digital module", "Digital_Frequency"), "1000")):
        ini.set(section, key, value)
    path = Path(tempfile.mkdtemp(prefix="mnsim-cfg-")) / "SimConfig.ini"
    with path.open("w") as fh:
        ini.write(fh)
    bits = cfg["weight_bits"]
    out = []
    for name, k, n in SHAPES:
        layers = [{"type": "conv", "in_channels": k, "out_channels": n, "kernel_size": 1,
                   "stride": 1, "padding": 0}]
        quant = [{"weight_bit": bits, "activation_bit": cfg["input_bits"], "point_shift": -2}]
        params = {"activation_scale": 1.0 / 255, "activation_bit": cfg["input_bits"],
                  "input_shape": (1, k, args.tokens, 1)}

        def build(hardware_config=None, cate=None, num_classes=10, _l=layers, _q=quant,
                  _p=params):
            return network.NetworkGraph(hardware_config, _l, _q, [[-1]], _p)

        network.get_net = build  # MNSIM's interface builds its net through get_net
        with contextlib.redirect_stdout(io.StringIO()):  # MNSIM prints as it goes
            iface = TrainTestInterface("harp-layer", "MNSIM.Interface.cifar10", str(path),
                                       None, None)
            structure = iface.get_structure()
            tcg = TCG(structure, str(path))
            lat = Model_latency(NetStruct=structure, SimConfig_path=str(path), TCG_mapping=tcg)
            lat.calculate_model_latency(mode=1)
            power = Model_inference_power(NetStruct=structure, SimConfig_path=str(path),
                                          TCG_mapping=tcg)
            energy = Model_energy(NetStruct=structure, SimConfig_path=str(path),
                                  TCG_mapping=tcg, model_latency=lat, model_power=power)
        info = structure[0][0][0]
        out.append({"layer": name, "k": k, "n": n, "tokens": args.tokens, "adcs": cfg["adcs"],
                    "weight_slices": info["weight_bit_split_part"],
                    "row_split": info["row_split_num"],
                    "computing_ns": float(lat.total_computing_latency[0]),
                    "xbar_ns": float(lat.total_xbar_latency[0]),
                    "adc_ns": float(lat.total_ADC_latency[0]),
                    "dac_ns": float(lat.total_DAC_latency[0]),
                    "layer_ns": float(max(lat.finish_time[0])),
                    "xbar_nj": float(energy.arch_xbar_energy[0]),
                    "adc_nj": float(energy.arch_ADC_energy[0]),
                    "dac_nj": float(energy.arch_DAC_energy[0]),
                    "total_nj": float(energy.arch_energy[0])})
    return out


# --- our side and the comparison -----------------------------------------------------------
def ours(tokens: int, arch, sample_ns: float | None = None,
         adc_pj: float | None = None) -> list[dict]:
    """Our per-vector time and analog energy of each shape (one copy, ``tokens`` rows).

    ``sample_ns``/``adc_pj``: the calibrated time and energy of one column conversion step
    (None: the architecture's ADC sample time and ADC power x sample time).
    """
    sys.path.insert(0, str(SRC))
    from schedlab.harp.costs import dynamic_energy_pj, tiling
    from schedlab.harp.opgraph import Op, Workload

    xbar = arch.crossbar
    if sample_ns is not None:
        xbar = xbar.model_copy(update={"adc_sample_ns": sample_ns})
    if adc_pj is not None:
        xbar = xbar.model_copy(update={"adc_power_mw": adc_pj / xbar.adc_sample_ns})
    arch = arch.model_copy(update={"crossbar": xbar})
    rows = []
    for name, k, n in SHAPES:
        op = Op(name, 0, "static", (), k=k, n=n)
        energy = dynamic_energy_pj(Workload(name, tokens, (op,)), arch)
        rows.append({"layer": name, "adcs": xbar.adcs, "crossbars": tiling(op, arch).crossbars,
                     "vector_ns": (xbar.input_cycles + 1) * xbar.cycle_ns,
                     "analog_nj": (energy["crossbar"] + energy["adc"]) / 1e3})
    return rows


def compare(theirs: list[dict], arch, tokens: int) -> tuple[list[dict], dict]:
    """Side by side at every ADC count; one step time and energy fitted on the first row.

    The fit: MNSIM converts ``cols/adcs`` column groups per input bit, each a full crossbar
    read + DAC + ADC step, so its per-vector time is ``input_bits x cols/adcs x step``; ours is
    ``(input_bits + 1) x max(read, cols/adcs x sample)``. Setting our ``sample`` to MNSIM's
    step (and the conversion energy to its energy per step) is the calibration; it is fitted
    on the first shape at the first ADC count and checked on every other shape and ADC count.
    """
    first = theirs[0]
    xbar = arch.crossbar
    steps = xbar.input_cycles * xbar.cols / first["adcs"]
    step_ns = first["computing_ns"] / tokens / ((xbar.input_cycles + 1) * xbar.cols
                                                / first["adcs"])
    crossbars = ours(tokens, arch)[0]["crossbars"]
    adc_pj = 1e3 * first["adc_nj"] / (crossbars * tokens * steps)
    fit = {"step_ns": step_ns, "adc_pj_per_step": adc_pj,
           "sample_ns": xbar.adc_sample_ns, "adc_pj": xbar.adc_power_mw * xbar.adc_sample_ns}
    table = []
    for t in theirs:
        one = arch.model_copy(update={"crossbar": xbar.model_copy(update={"adcs": t["adcs"]})})
        raw = next(o for o in ours(tokens, one) if o["layer"] == t["layer"])
        cal = next(o for o in ours(tokens, one, step_ns, adc_pj) if o["layer"] == t["layer"])
        m_vec = t["computing_ns"] / tokens
        m_nj = t["xbar_nj"] + t["adc_nj"] + t["dac_nj"]
        table.append({"layer": t["layer"], "adcs": t["adcs"], "crossbars": raw["crossbars"],
                      "mnsim_vector_ns": m_vec, "ours_vector_ns": raw["vector_ns"],
                      "calibrated_vector_ns": cal["vector_ns"],
                      "vector_error": raw["vector_ns"] / m_vec - 1,
                      "vector_error_calibrated": cal["vector_ns"] / m_vec - 1,
                      "mnsim_analog_nj": m_nj, "ours_analog_nj": raw["analog_nj"],
                      "calibrated_analog_nj": cal["analog_nj"],
                      "energy_error": raw["analog_nj"] / m_nj - 1,
                      "energy_error_calibrated": cal["analog_nj"] / m_nj - 1,
                      "mnsim_layer_us": t["layer_ns"] / 1e3,
                      "ours_layer_analog_us": raw["vector_ns"] * tokens / 1e3})
    return table, fit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--adcs", type=lambda v: [int(x) for x in v.split(",")],
                        default=[1, 4, 8], help="ADCs per crossbar, comma-separated")
    parser.add_argument("--mnsim", default=os.environ.get("MNSIM_HOME", "/tmp/mnsim"))
    parser.add_argument("--mnsim-python", default=os.environ.get("MNSIM_PYTHON", sys.executable))
    parser.add_argument("--json", default=None, help="write the table here")
    args = parser.parse_args(argv)
    if args.worker:
        return mnsim_worker(args)
    probe = subprocess.run([args.mnsim_python, "-c", "import sys; sys.path.insert(0, sys.argv[1]);"
                            " import MNSIM.Latency_Model.Model_latency", args.mnsim],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"skipped: {args.mnsim_python} cannot import MNSIM from {args.mnsim} ({last}); "
              "see the module docstring", file=sys.stderr)
        return 0
    sys.path.insert(0, str(SRC))
    from schedlab.harp.experiment import headline_arch

    arch, _ = headline_arch()
    cfg = [{**{k: getattr(arch.crossbar, k) for k in ("rows", "cols", "cell_bits",
                                                       "weight_bits", "input_bits")},
            "adcs": adcs} for adcs in args.adcs]
    run = subprocess.run([args.mnsim_python, str(HERE), "--worker", "--mnsim", args.mnsim,
                          "--tokens", str(args.tokens), "--config", json.dumps(cfg)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stderr[-3000:], file=sys.stderr)
        return run.returncode
    table, fit = compare(json.loads(run.stdout.strip().splitlines()[-1]), arch, args.tokens)
    print(f"fitted on {table[0]['layer']} at {table[0]['adcs']} ADC(s): one conversion step "
          f"{fit['step_ns']:.3f} ns (ours: sample {fit['sample_ns']:.3f} ns), "
          f"{fit['adc_pj_per_step']:.3f} pJ (ours: {fit['adc_pj']:.3f} pJ)")
    cols = list(table[0])
    print(" | ".join(cols))
    for row in table:
        print(" | ".join(f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c])
                         for c in cols))
    if args.json:
        Path(args.json).write_text(json.dumps({"fit": fit, "rows": table}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
