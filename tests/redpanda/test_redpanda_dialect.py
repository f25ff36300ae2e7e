"""The RedPanda xDSL dialect: round trips, text form, passes as xDSL ModulePasses."""

from __future__ import annotations

import pytest
from xdsl.parser import Parser

from schedlab.redpanda.compiler import middle_end, outputs_match
from schedlab.redpanda.dialect import from_xdsl, print_ir, to_xdsl
from schedlab.redpanda.passes import materialize_forks
from schedlab.redpanda.policies import get_flow
from schedlab.redpanda.reference import run_reference
from schedlab.redpanda.simulator import simulate
from schedlab.redpanda.workloads import load_suite_kernel, random_inputs
from schedlab.redpanda.xdsl_passes import PASSES, redpanda_context


@pytest.mark.parametrize("name", ["isort", "spmv", "condstore"])
def test_text_round_trip_preserves_behaviour(name):
    kernel = load_suite_kernel(name, 3)
    graph = middle_end(kernel, get_flow("redpanda"))
    module = Parser(redpanda_context(), print_ir(graph)).parse_module()
    module.verify()
    back = from_xdsl(module)
    assert back.instruction_count() == graph.instruction_count()
    inputs = random_inputs(kernel, 3)
    assert outputs_match(simulate(back, inputs), run_reference(kernel, inputs))


def test_xdsl_pass_pipeline_matches_library_pipeline():
    kernel = load_suite_kernel("ifloop", 3)
    ctx = redpanda_context()
    module = kernel.module.clone()
    for name in ("convert-scf-to-redpanda", "redpanda-dce", "redpanda-cse",
                 "redpanda-fuse-steers", "redpanda-dce"):
        PASSES[name]().apply(ctx, module)
        module.verify()
    direct = middle_end(kernel, get_flow("redpanda"))
    assert from_xdsl(module).instruction_count() == direct.instruction_count()


def test_explicit_forks_keep_semantics():
    """The DHLS back end (issue 15) needs explicit forks; they must not change results."""
    kernel = load_suite_kernel("gcd", 3)
    graph = middle_end(kernel, get_flow("redpanda"))
    added = materialize_forks(graph)
    assert added > 0
    consumers = graph.consumers()
    assert all(len(users) == 1 for port, users in consumers.items()
               if not graph.nodes[port.node].is_immediate)
    inputs = random_inputs(kernel, 0)
    assert outputs_match(simulate(graph, inputs), run_reference(kernel, inputs))
    module = to_xdsl(graph)
    module.verify()
