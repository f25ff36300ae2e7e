"""Readers: round trips, and fuzzing (malformed input -> BadInputError naming file/line/field)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.hydra_mcs.readers import read_arg, read_dimacs, read_edges, read_graph, read_lad


def _arg_bytes(n: int, edges: list[tuple[int, int]]) -> bytes:
    words = [n] + [0] * n
    for v in range(n):
        out = [w for a, w in edges if a == v]
        words.append(len(out))
        for w in out:
            words += [w, 0]
    return struct.pack(f"<{len(words)}H", *words)


def test_formats_agree(tmp_path):
    edges = [(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)]
    (tmp_path / "g.arg").write_bytes(_arg_bytes(4, edges))
    (tmp_path / "g.dimacs").write_text(
        "c x\np edge 4 5\n" + "".join(f"e {a + 1} {b + 1}\n" for a, b in edges)
    )
    lad = {v: [b for a, b in edges if a == v] for v in range(4)}
    (tmp_path / "g.lad").write_text(
        "4\n" + "".join(f"{len(lad[v])} {' '.join(map(str, lad[v]))}\n" for v in range(4))
    )
    (tmp_path / "g.edges").write_text("".join(f"{a} {b}\n" for a, b in edges))
    mats = [read_graph(tmp_path / f"g.{x}").adj for x in ("arg", "dimacs", "lad", "edges")]
    for m in mats[1:]:
        assert np.array_equal(m, mats[0])


def test_real_arg_files_read(shared_data):
    g = read_arg(shared_data / "mcs" / "s20.A00")
    assert g.n == 20 and (g.adj == g.adj.T).all()


def test_dimacs_vertex_labels_and_loops(tmp_path):
    p = tmp_path / "l.dimacs"
    p.write_text("p edge 3 2\ne 1 2\ne 3 3\nn 1 5\n")
    g = read_dimacs(p, vertex_labels=True)
    assert g.labels[0] == 5 and g.labels[2] >> 31 == 1 and g.adj[0, 1] == 1


@pytest.mark.parametrize(
    "text,line,field",
    [
        ("p edge 3 1\ne 1 9\n", 2, "vertex"),
        ("p edge x 1\n", 1, "N"),
        ("e 1 2\n", 1, "e"),
        ("p edge 3 2\ne 1 2\n", None, "M"),
        ("p edge 3 1\nq 1 2\n", 2, "type"),
        ("p edge 3 1\ne 1\n", 2, "e"),
    ],
)
def test_dimacs_errors_name_line_and_field(tmp_path, text, line, field):
    p = tmp_path / "bad.dimacs"
    p.write_text(text)
    with pytest.raises(BadInputError) as info:
        read_dimacs(p)
    assert info.value.path == p and info.value.line == line and info.value.field == field


@pytest.mark.parametrize(
    "text,field",
    [
        ("", "n"),
        ("2\n1 5\n0\n", "neighbour"),
        ("2\n1\n", "neighbour"),
        ("2\nx\n", "degree"),
        ("1\n0 7\n", None),
    ],
)
def test_lad_errors(tmp_path, text, field):
    p = tmp_path / "bad.lad"
    p.write_text(text)
    with pytest.raises(BadInputError) as info:
        read_lad(p)
    assert info.value.path == p and info.value.field == field


def test_arg_errors_give_byte_offsets(tmp_path):
    p = tmp_path / "bad.arg"
    p.write_bytes(struct.pack("<4H", 2, 0, 0, 1))  # vertex 0 has 1 edge, then the file ends
    with pytest.raises(BadInputError) as info:
        read_arg(p)
    assert info.value.field == "byte 8"
    p.write_bytes(struct.pack("<7H", 2, 0, 0, 1, 5, 0, 0))  # target 5 of a 2-vertex graph
    with pytest.raises(BadInputError, match="not a vertex"):
        read_arg(p)
    p.write_bytes(b"\x01")
    with pytest.raises(BadInputError, match="odd number"):
        read_arg(p)


def test_unknown_format_and_missing_file(tmp_path):
    with pytest.raises(UnknownNameError):
        read_graph(tmp_path / "x", "graphml")
    with pytest.raises(BadInputError, match="no such file"):
        read_graph(tmp_path / "missing", "edges")


def test_non_utf8_text(tmp_path):
    p = tmp_path / "bin.edges"
    p.write_bytes(b"0 1\n\xff\xfe 2\n")
    with pytest.raises(BadInputError) as info:
        read_edges(p)
    assert info.value.line == 2


@settings(max_examples=60)
@given(st.binary(max_size=200))
def test_fuzz_arg(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("fz") / "f.arg"
    p.write_bytes(data)
    try:
        g = read_arg(p)
    except BadInputError as exc:
        assert exc.path == p
    else:
        assert g.adj.shape == (g.n, g.n)


@settings(max_examples=60)
@given(
    st.text(alphabet="pecn edg0123456789-x\n", max_size=120),
    st.sampled_from(["dimacs", "lad", "edges", "auto"]),
)
def test_fuzz_text_readers(tmp_path_factory, text, fmt):
    p = tmp_path_factory.mktemp("fz") / "f.txt"
    p.write_text(text)
    try:
        g = read_graph(p, fmt)
    except BadInputError as exc:
        assert exc.path == p
    else:
        assert g.adj.shape == (g.n, g.n)


def test_empty_edge_list_is_an_error_not_an_empty_graph(tmp_path):
    for name, text in [("empty.edges", ""), ("comments.txt", "# only a comment\n\n")]:
        p = tmp_path / name
        p.write_text(text)
        with pytest.raises(BadInputError, match="holds no edges"):
            read_graph(p)  # auto-detects an edge list
