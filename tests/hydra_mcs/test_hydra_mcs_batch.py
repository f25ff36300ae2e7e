"""Batch mode (``solve --pairs FILE|DIR``): list parsing, directory pairing, bad input refused,
one result line per pair from a real ``schedlab`` process, sizes checked against brute force."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from schedlab.core.errors import BadInputError
from schedlab.hydra_mcs.batch import pairs_of_directory, read_pairs
from schedlab.hydra_mcs.readers import read_arg
from schedlab.hydra_mcs.verify import brute_force
from schedlab.hydra_mcs.workloads import gnp, vertex_labelled, write_arg


def _write_pairs(folder, count=3, n=7, labels=0, seed=5):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        g0, g1 = gnp(n, 0.4, rng), gnp(n + 1, 0.4, rng)
        if labels:
            g0, g1 = vertex_labelled(g0, labels, rng), vertex_labelled(g1, labels, rng)
        write = _write_dimacs if labels else write_arg  # ARG keeps no labels for n < 12
        out.append((write(g0, folder / f"g{i}.A00"), write(g1, folder / f"g{i}.B00"), g0, g1))
    return out


def _write_dimacs(g, path):
    rows, cols = np.nonzero(np.triu(g.adj, 1))
    lines = [f"p edge {g.n} {rows.size}"]
    lines += [f"n {v + 1} {int(g.labels[v])}" for v in range(g.n)]
    lines += [f"e {v + 1} {u + 1}" for v, u in zip(rows.tolist(), cols.tolist(), strict=True)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "schedlab.cli", "hydra-mcs", "solve", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def test_write_arg_round_trips_through_the_reader(tmp_path):
    rng = np.random.default_rng(1)
    g = vertex_labelled(gnp(20, 0.3, rng), 4, rng)
    back = read_arg(write_arg(g, tmp_path / "g.A00"), vertex_labels=True)
    assert np.array_equal(back.adj, g.adj) and np.array_equal(back.labels, g.labels)


def test_write_arg_refuses_what_it_cannot_write(tmp_path):
    from schedlab.hydra_mcs.graph import GraphBuilder

    looped = GraphBuilder(3)
    looped.add_edge(0, 1)
    looped.add_edge(2, 2)
    with pytest.raises(BadInputError, match="self-loops"):
        write_arg(looped.build(), tmp_path / "l.A00")
    labelled = GraphBuilder(3)
    labelled.add_edge(0, 1, 3)
    with pytest.raises(BadInputError, match="edge labels"):
        write_arg(labelled.build(), tmp_path / "e.A00")


def test_list_file_relative_paths_comments_header_and_csv(tmp_path):
    sub = tmp_path / "graphs"
    sub.mkdir()
    (sub / "a").write_bytes(b"x")
    (sub / "b c").write_bytes(b"x")
    listing = tmp_path / "list.csv"
    listing.write_text(
        'pattern,target\n# a comment\n\ngraphs/a graphs/a  # trailing\n"graphs/b c", graphs/a\n'
    )
    specs = read_pairs(listing)
    assert [s.line for s in specs] == [4, 5]
    assert specs[0].pattern == sub / "a" and specs[1].pattern == sub / "b c"


@pytest.mark.parametrize(
    "text, message",
    [
        ("a\n", "pairs.txt:1: expected 2 paths"),
        ("a a a\n", "pairs.txt:1: expected 2 paths"),
        ("a a\na missing\n", "pairs.txt:2: field 'target': no such file: missing"),
        ("a sub\n", "pairs.txt:1: field 'target': is a directory"),
        ("# only comments\n\n", "holds no pairs"),
        ('"a,a\n', "pairs.txt:1"),
    ],
)
def test_bad_list_lines_name_file_and_line(tmp_path, text, message):
    (tmp_path / "a").write_bytes(b"x")
    (tmp_path / "sub").mkdir()
    listing = tmp_path / "pairs.txt"
    listing.write_text(text)
    with pytest.raises(BadInputError) as info:
        read_pairs(listing)
    assert message in str(info.value) and "pairs.txt" in str(info.value)
    assert "\n" not in str(info.value)


def test_binary_list_and_missing_list_are_refused(tmp_path):
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(BadInputError, match="UTF-8"):
        read_pairs(tmp_path / "bin.txt")
    with pytest.raises(BadInputError, match="no such pair list"):
        read_pairs(tmp_path / "nope.txt")


def test_directory_pairing(tmp_path):
    _write_pairs(tmp_path, count=2)
    lad = tmp_path / "case1"
    lad.mkdir()
    (lad / "pattern").write_text("1\n0\n")
    (lad / "target").write_text("1\n0\n")
    specs = pairs_of_directory(tmp_path)
    assert [(s.pattern.name, s.target.name) for s in specs] == [
        ("pattern", "target"),
        ("g0.A00", "g0.B00"),
        ("g1.A00", "g1.B00"),
    ]
    (tmp_path / "lonely.A01").write_bytes(b"\x00\x00")
    with pytest.raises(BadInputError, match="no .B partner for lonely.A01"):
        read_pairs(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BadInputError, match="no pairs found"):
        read_pairs(empty)


@pytest.mark.parametrize("labels", [0, 3])
def test_cli_batch_json_lines_match_brute_force(tmp_path, labels):
    made = _write_pairs(tmp_path, count=3, labels=labels)
    (tmp_path / "list.txt").write_text("".join(f"{a.name} {b.name}\n" for a, b, _, _ in made))
    flags = ["--labels", "all"] if labels else []
    done = _cli("--pairs", "list.txt", "--json", *flags, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["line"] for r in rows] == [1, 2, 3]
    for row, (_, _, g0, g1) in zip(rows, made, strict=True):
        assert row["size"] == brute_force(g0, g1) and row["optimal"]
        assert len(row["mapping"]) == row["size"] and row["cpu_s"] >= 0


def test_cli_batch_connected_matches_brute_force(tmp_path):
    made = _write_pairs(tmp_path, count=2, seed=9)
    done = _cli("--pairs", str(tmp_path), "--json", "--connected", "--no-mapping")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    for row, (_, _, g0, g1) in zip(rows, made, strict=True):
        assert "mapping" not in row
        assert row["size"] == brute_force(g0, g1, connected=True)


def test_cli_batch_unreadable_graph_is_an_error_row_and_the_rest_still_run(tmp_path):
    made = _write_pairs(tmp_path, count=2)
    (tmp_path / "broken.A00").write_bytes(b"\x05")  # odd byte count: not ARG
    (tmp_path / "list.txt").write_text(
        f"{made[0][0].name} {made[0][1].name}\nbroken.A00 {made[1][1].name}\n"
        f"{made[1][0].name} {made[1][1].name}\n"
    )
    done = _cli("--pairs", str(tmp_path / "list.txt"), "--json", "--format", "arg")
    assert done.returncode == 1
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert "size" in rows[0] and "size" in rows[2]
    assert rows[1]["line"] == 2 and "broken.A00" in rows[1]["error"]
    assert "broken.A00" in done.stderr and "1 of 3 pairs failed" in done.stderr


def test_cli_batch_table_and_bad_flags(tmp_path):
    _write_pairs(tmp_path, count=1)
    done = _cli("--pairs", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["pattern", "target", "size"] and "optimal" in lines[1]
    bad = _cli("--pairs", str(tmp_path), "--heuristic", "bogus")
    assert bad.returncode == 2 and "heuristic" in bad.stderr and bad.stdout == ""
    both = _cli("a", "b", "--pairs", str(tmp_path))
    assert both.returncode == 2 and "--pairs" in both.stderr
    one = _cli("a")
    assert one.returncode == 2 and "two graph files" in one.stderr
    (tmp_path / "bad.txt").write_text("x\n")
    listed = _cli("--pairs", str(tmp_path / "bad.txt"))
    assert listed.returncode == 2 and "bad.txt:1" in listed.stderr
    assert len(listed.stderr.strip().splitlines()) == 1


def test_cli_batch_timeout_is_per_pair(tmp_path):
    _write_pairs(tmp_path, count=2)
    done = _cli("--pairs", str(tmp_path), "--json", "--timeout", "30")
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0 and all(r["optimal"] for r in rows)
    assert _cli("--pairs", str(tmp_path), "--timeout", "0").returncode == 2


def test_ctrl_c_stops_the_batch_and_keeps_the_rows_written(tmp_path):
    import signal
    import time

    rng = np.random.default_rng(3)
    small = _write_pairs(tmp_path, count=1)[0]
    big = [write_arg(gnp(48, 0.3, rng), tmp_path / f"big.{s}00") for s in "AB"]
    (tmp_path / "list.txt").write_text(
        f"{small[0].name} {small[1].name}\n{big[0].name} {big[1].name}\n"
        f"{small[0].name} {small[1].name}\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "schedlab.cli",
            "hydra-mcs",
            "solve",
            "--pairs",
            str(tmp_path / "list.txt"),
            "--json",
            "--no-mapping",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = proc.stdout.readline()  # the small pair is done; the big one is being searched
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=120)
    rows = [json.loads(line) for line in [first, *rest.splitlines()] if line.strip()]
    assert proc.returncode == 130, err
    assert len(rows) == 2 and rows[0]["optimal"] and not rows[1]["optimal"]
    assert rows[1]["line"] == 2 and rows[1]["size"] > 0
    assert "interrupted: 2 of 3 pairs written" in err
