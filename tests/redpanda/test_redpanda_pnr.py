"""CGRA place and route: architecture files, PathFinder, emitted configuration, its execution."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError
from schedlab.redpanda.backends.arch import Architecture, load_arch, mesh, op_class
from schedlab.redpanda.backends.cgra import CGRA, compile_config, map_graph
from schedlab.redpanda.backends.config import (
    check_config,
    emit_config,
    link_loads,
    read_config,
    register_loads,
    write_config,
)
from schedlab.redpanda.backends.config_sim import run_config
from schedlab.redpanda.backends.router import Unroutable, place_and_route, route_placement
from schedlab.redpanda.compiler import middle_end, outputs_match
from schedlab.redpanda.policies import get_flow
from schedlab.redpanda.reference import run_reference
from schedlab.redpanda.simulator import SimulationError
from schedlab.redpanda.workloads import c_kernel, load_suite_kernel, random_inputs


def _graph(name: str, mode: str, size: int = 3, flow: str = "redpanda"):
    kernel = load_suite_kernel(name, size)
    return kernel, middle_end(kernel, get_flow(flow), mode)


def _executes_correctly(kernel, config, seed: int = 0):
    inputs = random_inputs(kernel, seed)
    run = run_config(config, inputs)
    assert outputs_match(run, run_reference(kernel, inputs))
    return run


# ---- architecture files --------------------------------------------------------------------
def test_shipped_architectures():
    m, t, h = load_arch("mesh4x4"), load_arch("torus4x4"), load_arch("hycube4x4")
    assert len(m.links) == 48 and len(t.links) == 64  # torus adds the wrap-around links
    assert [pe for pe in m.pes if m.memory_capable(pe)] == [(r, 0) for r in range(4)]
    assert "div" in m.ops_of((1, 2)) and "div" not in m.ops_of((1, 1))
    assert m.route_cycles((0, 0), (3, 3)) == 5 and h.route_cycles((0, 0), (3, 3)) == 1
    assert t.route_cycles((0, 0), (3, 3)) == 1  # two wrap-around hops


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (dict(rows=0), "rows"),
        (dict(link_capacity=0), "link_capacity"),
        (dict(topology="ring"), "topology"),
        (dict(colour="red"), "colour"),
        (dict(pe_ops=[{"pes": [[9, 9]], "ops": ["alu"]}]), "pe_ops.0.pes"),
        (dict(pe_ops=[{"pes": "all", "ops": ["fpu"]}]), "pe_ops.0.ops.0"),
        (dict(latency={"sqrt": 3}), "latency"),
    ],
)
def test_bad_architecture_file_names_its_field(tmp_path, change, field):
    data = json.loads(
        (tmp_path / "x").with_suffix(".json").read_text()
        if False
        else json.dumps(load_arch("mesh4x4").describe())
    )
    data.update(change)
    path = tmp_path / "arch.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BadInputError) as info:
        load_arch(path)
    message = str(info.value)
    assert "arch.json" in message and field.split(".")[0] in message
    assert "\n" not in message


def test_invalid_json_and_unknown_name(tmp_path):
    path = tmp_path / "arch.json"
    path.write_text('{"rows": 4,\n "cols": }')
    with pytest.raises(BadInputError, match="arch.json:2"):
        load_arch(path)
    with pytest.raises(BadInputError, match="mesh4x4"):
        load_arch("no_such_arch")


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    data=st.dictionaries(
        st.sampled_from(
            [
                "rows",
                "cols",
                "contexts",
                "registers",
                "topology",
                "link_capacity",
                "hops_per_cycle",
                "extra_links",
                "pe_ops",
                "memory",
                "latency",
            ]
        ),
        st.one_of(
            st.integers(-2, 70),
            st.text(max_size=4),
            st.none(),
            st.lists(st.integers(-1, 5), max_size=3),
            st.fixed_dictionaries(
                {"pes": st.just("all"), "ops": st.lists(st.sampled_from(["alu", "mul", "x"]))}
            ),
        ),
        max_size=5,
    )
)
def test_architecture_parser_never_crashes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("a") / "arch.json"
    path.write_text(json.dumps(data))
    try:
        arch = load_arch(path)
    except BadInputError as exc:
        assert "arch.json" in str(exc)
    else:
        assert arch.links is not None and len(arch.pes) == arch.rows * arch.cols


# ---- routing legality and execution --------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "mode", "arch"),
    [
        ("gemm", "temporal", "mesh4x4"),
        ("histogram", "temporal", "torus4x4"),
        ("spmv", "temporal", "hycube4x4"),
        ("bsearch", "temporal", "mesh4x4"),
        ("gcd", "spatial", None),
        ("isort", "spatial", None),
    ],
)
def test_emitted_configuration_respects_capacities_and_executes(name, mode, arch):
    kernel, graph = _graph(name, mode)
    arch = load_arch(arch) if arch else mesh(6, 6, link_capacity=2)
    pnr, config = compile_config(graph, arch, mode)
    # loads recounted from the per-sink hops, independently of the router's bookkeeping
    assert max(link_loads(config).values()) <= arch.link_capacity
    assert max(register_loads(config).values(), default=0) <= arch.registers
    for ins in config["instructions"]:
        pe = tuple(int(x) for x in ins["pe"].split(","))
        node = graph.nodes[ins["node"]]
        assert op_class(node) in arch.ops_of(pe)
    if mode == "temporal":
        contexts = [(i["pe"], i["context"]) for i in config["instructions"]]
        assert len(set(contexts)) == len(contexts) and config["ii"] <= arch.contexts
    else:
        assert len({i["pe"] for i in config["instructions"]}) == len(config["instructions"])
    run = _executes_correctly(kernel, config)
    assert 0 < run.max_link_load <= arch.link_capacity and run.link_words > 0
    assert pnr.achieved_ii >= pnr.min_ii


@pytest.mark.parametrize("name", ["gemm", "histogram", "gcd"])
def test_old_mapper_overloads_links_and_is_rerouted(name):
    """The schedule-only mapper charged hops-1 cycles and assumed unlimited links: routed XY at
    one word per link-cycle its mappings overload a link (rejected); PathFinder routes the same
    placement within capacity, and that configuration computes the right answer."""
    kernel, graph = _graph(name, "temporal", size=4)
    old = map_graph(graph, CGRA(4, 4, contexts=16), "temporal")
    arch = mesh(4, 4, contexts=16, link_capacity=1)
    xy = emit_config(
        route_placement(graph, arch, "temporal", old.slot_ii, old.place, old.start, router="xy")
    )
    assert max(link_loads(xy).values()) > 1
    with pytest.raises(BadInputError, match="capacity is 1"):
        check_config(xy)
    try:
        rerouted = route_placement(graph, arch, "temporal", old.slot_ii, old.place, old.start)
    except Unroutable:  # this placement cannot be routed at its II: the II search moves on
        rerouted = place_and_route(graph, arch, "temporal")
    config = emit_config(rerouted)
    assert check_config(config)["max_link_load"] <= 1
    _executes_correctly(kernel, config)


def test_the_simulator_catches_a_tampered_route(tmp_path):
    kernel, graph = _graph("histogram", "temporal")
    _, config = compile_config(graph, load_arch("mesh4x4"), "temporal")
    path = write_config(config, tmp_path / "cfg.json")
    again = read_config(path)
    assert (
        run_config(again, random_inputs(kernel, 1)).cycles
        == run_config(config, random_inputs(kernel, 1)).cycles
    )
    # copy one net's hops onto another net so two values share a link slot
    nets = [n for n in again["nets"] if any(s["hops"] for s in n["sinks"])]
    donor = next(s for s in nets[0]["sinks"] if s["hops"])
    target = (
        next(n for n in nets[1:] if n["ready_slot"] == nets[0]["ready_slot"])
        if any(n["ready_slot"] == nets[0]["ready_slot"] for n in nets[1:])
        else None
    )
    if target is not None:
        target["sinks"][0]["hops"] = list(target["sinks"][0]["hops"]) + [donor["hops"][0]]
        with pytest.raises(BadInputError, match="capacity"):
            check_config(again)
    # a hop on a link slot the configuration never reserved is refused while executing
    again = read_config(path)
    sink = next(s for n in again["nets"] for s in n["sinks"] if s["hops"])
    kind, a, b, offset = sink["hops"][0]
    sink["hops"][0] = [kind, a, b, offset + 1]
    with pytest.raises(SimulationError, match="does not reserve|carries"):
        run_config(again, random_inputs(kernel, 0))


def test_memory_port_budget_temporal_and_spatial():
    # three loads of one array per iteration
    kernel, graph = _graph("jacobi1d", "temporal", size=4)
    one_port = {**load_arch("mesh4x4").describe(), "memory": {"ports_per_array": 1}}
    pnr, config = compile_config(graph, Architecture.model_validate(one_port), "temporal")
    assert all(len(e["nodes"]) <= 1 for e in config["memory"]["port_slots"])
    assert pnr.min_ii >= 3  # ResMII: 3 accesses to `a` over one port
    _executes_correctly(kernel, config)
    kernel, graph = _graph("jacobi1d", "spatial", size=4)
    fabric = mesh(7, 7, link_capacity=2, memory={"ports_per_array": 1})
    _, config = compile_config(graph, fabric, "spatial")
    run = _executes_correctly(kernel, config)
    two = mesh(7, 7, link_capacity=2)
    _, config2 = compile_config(graph, two, "spatial")
    assert run.port_stalls > 0  # the arbiter serialised accesses the second port would serve
    assert run_config(config2, random_inputs(kernel, 0)).port_stalls <= run.port_stalls


def test_too_few_contexts_or_pes_is_a_clear_error():
    _, graph = _graph("mm2", "spatial")
    with pytest.raises(BadInputError, match="--temporal"):
        place_and_route(graph, mesh(3, 3), "spatial")
    _, graph = _graph("mm2", "temporal")
    with pytest.raises(BadInputError, match="contexts"):
        place_and_route(graph, mesh(2, 2, contexts=4), "temporal")


def test_c_kernel_of_our_own_through_the_cli_from_another_directory(tmp_path, monkeypatch):
    """A kernel the suite does not have, a custom architecture, relative paths, JSON out."""
    from typer.testing import CliRunner

    from schedlab.redpanda.cli import app

    work = tmp_path / "elsewhere"
    (work / "k").mkdir(parents=True)
    (work / "k" / "dot_clip.c").write_text(
        "#define N 6\n"
        "int dot_clip(int a[N], int b[N], int lim) {\n"
        "  int s = 0;\n"
        "  for (int i = 0; i < N; i++) {\n"
        "    int p = a[i] * b[i];\n"
        "    if (p > lim) p = lim;\n"
        "    s += p;\n"
        "  }\n"
        "  return s;\n"
        "}\n"
    )
    arch = load_arch("mesh4x4").describe()
    arch.update(name="mine", link_capacity=1, registers=2)
    (work / "arch.json").write_text(json.dumps(arch))
    monkeypatch.chdir(work)
    args = [
        "compile",
        "k/dot_clip.c",
        "--target",
        "cgra",
        "--arch",
        "arch.json",
        "--temporal",
        "--config-out",
        "out/cfg.json",
        "--json",
    ]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    assert doc["metrics"]["matches_interpreter"] is True and doc["metrics"]["arch"] == "mine"
    config = read_config(work / "out" / "cfg.json")
    assert max(link_loads(config).values()) <= 1
    # the user's own data, and compile-only
    (work / "in.json").write_text('{"a": [1, 2, 3, 4, 5, 6], "b": [6, 5, 4, 3, 2, 1], "lim": 9}')
    own = CliRunner().invoke(app, [*args, "--inputs", "in.json"])
    assert own.exit_code == 0, own.output
    assert json.loads(own.stdout)["metrics"]["matches_interpreter"] is True
    quiet = json.loads(CliRunner().invoke(app, [*args, "--no-simulate"]).stdout)
    assert "cycles" not in quiet["metrics"] and "--no-simulate" in quiet["simulation_note"]
    (work / "bad.json").write_text('{"rows": 4, "cols": 4, "link_capacity": -1}')
    bad = CliRunner().invoke(app, [*args[:5], "../elsewhere/bad.json"])
    assert bad.exit_code != 0 and "link_capacity" in bad.output
    assert "Traceback" not in bad.output and len(bad.output.strip().splitlines()) == 1
    into_dir = CliRunner().invoke(app, [*args[:7], "--no-simulate", "--config-out", "out"])
    assert into_dir.exit_code == 2 and "is a directory" in into_dir.output
    assert "Traceback" not in into_dir.output and (work / "out" / "cfg.json").is_file()


def test_c_suite_kernel_on_the_new_back_end():
    kernel = c_kernel("gsumif", 4)
    graph = middle_end(kernel, get_flow("redpanda"), "temporal")
    _, config = compile_config(graph, "hycube4x4", "temporal")
    _executes_correctly(kernel, config, seed=2)


# ---- the exact router (HiGHS) against PathFinder ---------------------------------------------
@pytest.mark.parametrize("name", ["histogram", "gemm"])
def test_exact_router_agrees_with_pathfinder_and_proves_unroutable(name):
    """On the old mapper's placement: PathFinder and the exact program agree on routability;
    where both route, the program moves no more words than PathFinder, and its routes execute
    correctly. With no slack (every consumer at its earliest cycle) gemm's placement has no
    routing at all, which the program proves."""
    from schedlab.redpanda.backends.exact_route import exact_route
    from schedlab.redpanda.backends.router import PnR, build_nets, min_ii, pathfinder

    kernel, graph = _graph(name, "temporal", size=4)
    old = map_graph(graph, CGRA(4, 4, contexts=16), "temporal")
    arch = mesh(4, 4, contexts=16, link_capacity=1)
    ii = old.slot_ii
    heuristic = build_nets(graph, arch, "temporal", ii, old.place, old.start, 1)
    pathfinder(arch, ii, heuristic)
    exact = build_nets(graph, arch, "temporal", ii, old.place, old.start, 1)
    words = exact_route(arch, ii, exact)
    assert words <= sum(len(n.usage) for n in heuristic)
    mii, res, rec = min_ii(graph, arch, "temporal")
    pnr = PnR(
        graph, arch, "temporal", ii, ii, mii, res, rec, old.place, old.start, exact, 0.0, 0, []
    )
    config = emit_config(pnr)
    assert check_config(config)["max_link_load"] <= 1
    _executes_correctly(kernel, config)
    if name == "gemm":
        tight = build_nets(graph, arch, "temporal", ii, old.place, old.start, 0)
        with pytest.raises(Unroutable, match="no routing exists"):
            exact_route(arch, ii, tight)
        with pytest.raises(Unroutable):
            pathfinder(arch, ii, build_nets(graph, arch, "temporal", ii, old.place, old.start, 0))


def test_exact_router_in_the_ii_search():
    kernel, graph = _graph("gcd", "temporal")
    pnr = place_and_route(graph, load_arch("mesh4x4"), "temporal", router="exact")
    _executes_correctly(kernel, emit_config(pnr))
    with pytest.raises(BadInputError, match="router"):
        place_and_route(graph, load_arch("mesh4x4"), "temporal", router="maze")


# ---- robustness of the default router (PathFinder gave up on routable spatial placements) ----
DOT_SHIFT_XOR = """
int dot(int a[16], int b[16], int c) {
  int s = 0; int t = 0;
  for (int i = 0; i < 16; i++) { s += (a[i] * b[i]) >> 1; t ^= b[i]; }
  return s + t * 2;
}
"""


@pytest.mark.parametrize("size", [8, 5])
def test_default_router_maps_the_dot_product_that_pathfinder_gave_up_on(tmp_path, size):
    """20 instructions, spatial, 1 word per link: the old default (3 placements, PathFinder
    giving up after 12 stalled iterations) found no mapping on 8x8 or 5x5; a routing exists
    (``--router exact`` finds one). The default must map it, within every capacity."""
    from schedlab.redpanda import load_kernel

    path = tmp_path / "dot.c"
    path.write_text(DOT_SHIFT_XOR)
    kernel = load_kernel(path)
    graph = middle_end(kernel, get_flow("redpanda"), "spatial")
    arch = mesh(size, size, contexts=16, link_capacity=1)
    pnr = place_and_route(graph, arch, "spatial")
    config = emit_config(pnr)
    assert check_config(config)["max_link_load"] <= 1
    assert max(link_loads(config).values()) <= 1
    _executes_correctly(kernel, config)


def test_exact_fallback_when_pathfinder_routes_no_placement(monkeypatch):
    """PathFinder failing on every placement hands a small problem to HiGHS; the result says
    so and is within capacity. With the fallback off the error stays."""
    from schedlab.redpanda.backends import router

    def gives_up(*args, **kwargs):
        raise Unroutable("congestion left (forced)")

    kernel, graph = _graph("gcd", "spatial")
    arch = mesh(6, 6, contexts=16, link_capacity=1)
    monkeypatch.setattr(router, "pathfinder", gives_up)
    pnr = place_and_route(graph, arch, "spatial")
    assert pnr.router == "exact (fallback)" and pnr.metrics()["exact_fallback"] == 1
    config = emit_config(pnr)
    assert check_config(config)["max_link_load"] <= 1
    _executes_correctly(kernel, config)
    with pytest.raises(BadInputError, match="forced"):
        place_and_route(graph, arch, "spatial", exact_fallback=False)


# ---- placement quality (issue 57): several placements per II, the lowest effective II kept ----
def test_placement_search_keeps_the_lowest_effective_ii():
    """gemm (C, N=4) temporal on mesh4x4: keeping the first routed placement gave effective
    II 8 at MII 4 (each routed recurrence a cycle too long closes on two periods); searching
    several placements per II with schedule-tight deadlines reaches 5. One placement per II
    (the old search) cannot beat the search, and no result is below its lower bound."""
    from schedlab.redpanda.backends.router import _lower_bound

    kernel = c_kernel("gemm", 4)
    graph = middle_end(kernel, get_flow("redpanda"), "temporal")
    arch = load_arch("mesh4x4")
    best = place_and_route(graph, arch, "temporal")
    assert best.min_ii == 4 and best.achieved_ii <= 5
    assert best.achieved_ii >= _lower_bound(graph, arch, "temporal", best.ii, best.place)
    one = place_and_route(graph, arch, "temporal", placements_per_ii=1, attempts_per_ii=1)
    assert best.achieved_ii <= one.achieved_ii
    _executes_correctly(kernel, emit_config(best))
