"""Front end: valid MLIR parses; anything malformed is a BadInputError naming file and line."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError
from schedlab.redpanda.frontend import parse_kernel
from schedlab.redpanda.kernelfile import load_kernel
from schedlab.redpanda.workloads import KERNELS, kernel_text

GOOD = kernel_text("ifloop", 3)


@pytest.mark.parametrize("name", KERNELS)
def test_every_suite_kernel_parses(name):
    kernel = parse_kernel(kernel_text(name, 3), f"{name}.mlir")
    assert kernel.memrefs()


def test_undefined_value_reports_line_and_column():
    text = "func.func @k() {\n  %x = arith.addi %y, %y : i32\n  func.return\n}\n"
    with pytest.raises(BadInputError) as info:
        parse_kernel(text, "bad.mlir")
    assert info.value.path.name == "bad.mlir"
    assert info.value.line is not None
    assert "column" in str(info.value)


def test_unsupported_operation_is_named():
    text = ("func.func @k(%a: memref<4xi32>) {\n  %c = arith.constant 1.0 : f64\n"
            "  func.return\n}\n")
    with pytest.raises(BadInputError) as info:
        parse_kernel(text, "f.mlir")
    assert info.value.field == "arith.constant"
    assert info.value.line == 2


def test_two_functions_rejected():
    text = "func.func @a() {\n  func.return\n}\nfunc.func @b() {\n  func.return\n}\n"
    with pytest.raises(BadInputError, match="exactly one"):
        parse_kernel(text, "two.mlir")


def test_unreadable_file(tmp_path):
    path = tmp_path / "k.mlir"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(BadInputError) as info:
        load_kernel(path)
    assert info.value.path == path
    with pytest.raises(BadInputError):
        load_kernel(tmp_path / "missing.mlir")


@settings(max_examples=60)
@given(cut=st.integers(0, len(GOOD)), junk=st.text(max_size=6), drop=st.integers(0, 30))
def test_fuzzed_mlir_never_crashes(cut, junk, drop):
    """Random edits either still parse or raise BadInputError: never a raw traceback."""
    text = GOOD[:cut] + junk + GOOD[cut + drop:]
    try:
        parse_kernel(text, "fuzz.mlir")
    except BadInputError as exc:
        assert exc.path is not None and exc.path.name == "fuzz.mlir"
