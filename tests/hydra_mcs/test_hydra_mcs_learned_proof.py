"""Learned branching (McSplit+RL, McSplitDAL) and ``--prove`` certificates with their checker.

* The learned kernel (``learned.py``) run in McSplit's order must give McSplit's node counts
  (the reference's, in ``test_hydra_mcs_mcsplit_order.py``), since ``--prove`` logs that tree.
* ``rl`` and ``dal`` change the tree (other node counts) but never the size: compared with
  brute force and with the exact-order kernel on seeded pairs, every mapping verified.
* A certificate passes the independent checker (``proof.check``); tampered ones fail, each
  naming what is wrong.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from schedlab.core.errors import BadInputError, ConfigError
from schedlab.hydra_mcs import proof
from schedlab.hydra_mcs.api import solve, solve_files
from schedlab.hydra_mcs.readers import read_graph
from schedlab.hydra_mcs.verify import brute_force, check_mapping
from schedlab.hydra_mcs.workloads import gnp, gnp_pairs, vertex_labelled

FLAGS = [
    dict(),
    dict(labels="all"),
    dict(directed=True),
    dict(labels="vertex"),
    dict(directed=True, labels="all"),
]


def _s20(shared_data, k="00"):
    folder = shared_data / "mcs"
    return folder / f"s20.A{k}", folder / f"s20.B{k}"


@pytest.mark.parametrize(
    "flags", FLAGS, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()) or "plain"
)
def test_logged_search_is_mcsplits_tree_and_its_proof_checks(shared_data, tmp_path, flags):
    a, b = _s20(shared_data)
    plain = solve_files(a, b, **flags)
    cert = tmp_path / "p.bin"
    logged = solve_files(a, b, prove=cert, **flags)
    assert (logged.size, logged.nodes) == (plain.size, plain.nodes)
    labels = flags.get("labels", "none")
    read = dict(
        directed=flags.get("directed", False),
        vertex_labels=labels != "none",
        edge_labels=labels == "all",
    )
    row = proof.check(cert, read_graph(a, **read), read_graph(b, **read))
    assert row["size"] == plain.size and row["nodes"] == plain.nodes


@pytest.mark.parametrize("flags", [dict(connected=True), dict(heuristic="min_product")])
def test_logged_search_is_the_exact_orders_tree_on_seeded_pairs(tmp_path, flags):
    for inst in gnp_pairs(3, 18, 0.4, seed=8):
        plain = solve(inst.g0, inst.g1, **flags)
        logged = solve(inst.g0, inst.g1, prove=tmp_path / "p.bin", **flags)
        assert (logged.size, logged.nodes) == (plain.size, plain.nodes)
        assert proof.check(tmp_path / "p.bin", inst.g0, inst.g1)["nodes"] == plain.nodes


@pytest.mark.parametrize("branching", ["rl", "dal"])
@pytest.mark.parametrize("connected", [False, True])
def test_learned_branching_is_exact_on_small_pairs(branching, connected):
    for inst in gnp_pairs(6, 6, 0.45, seed=3):
        r = solve(inst.g0, inst.g1, branching=branching, connected=connected)
        pairs = sorted(r.mapping.items())
        assert check_mapping(inst.g0, inst.g1, pairs, connected) is None
        assert r.size == brute_force(inst.g0, inst.g1, connected) and r.optimal


@pytest.mark.parametrize("labels", [0, 3])
def test_learned_branching_changes_the_tree_not_the_size(tmp_path, labels):
    rng = np.random.default_rng(11)
    trees = {}
    for i in range(3):
        g0, g1 = gnp(16, 0.35, rng), gnp(16, 0.35, rng)
        if labels:
            g0, g1 = vertex_labelled(g0, labels, rng), vertex_labelled(g1, labels, rng)
        base = solve(g0, g1)
        for branching in ("rl", "dal"):
            cert = tmp_path / f"{branching}{i}.bin"
            r = solve(g0, g1, branching=branching, prove=cert)
            assert r.size == base.size
            assert proof.check(cert, g0, g1)["nodes"] == r.nodes
            trees.setdefault(branching, []).append(r.nodes != base.nodes)
    # the learned orders explore other trees (else the option would do nothing)
    assert any(trees["rl"]) and any(trees["dal"])


def test_learned_branching_on_s20_differs_from_mcsplit(shared_data):
    a, b = _s20(shared_data)
    rl, dal = (solve_files(a, b, branching=x) for x in ("rl", "dal"))
    assert rl.size == dal.size == 12
    assert rl.nodes != 261018 and dal.nodes != 261018


def _tampered(src, dst, header=None, records=None):
    head, rec = proof.read(src)
    head = {**head, **(header or {})}
    rec = rec if records is None else records(rec.copy())
    dst.write_bytes(json.dumps(head).encode() + b"\n" + rec.astype("<i4").tobytes())
    return dst


@pytest.fixture
def certified(tmp_path):
    rng = np.random.default_rng(5)
    g0, g1 = gnp(14, 0.4, rng), gnp(14, 0.4, rng)
    cert = tmp_path / "ok.bin"
    r = solve(g0, g1, prove=cert)
    assert proof.check(cert, g0, g1)["size"] == r.size
    return g0, g1, cert, r


def test_a_smaller_claim_is_refused(certified, tmp_path):
    g0, g1, cert, r = certified
    pairs = sorted(r.mapping.items())[:-1]  # a valid mapping of size k-1, claimed maximum
    bad = _tampered(cert, tmp_path / "b.bin", dict(size=r.size - 1, mapping=pairs))
    with pytest.raises(proof.ProofError, match="bound"):
        proof.check(bad, g0, g1)


def test_a_missing_branch_is_refused(certified, tmp_path):
    g0, g1, cert, _ = certified

    def drop_first_child(rec):  # the root's first child w and its whole subtree: gone
        return np.concatenate([rec[:1], rec[1 + _subtree_len(rec, 2) + 1 :]])

    bad = _tampered(cert, tmp_path / "b.bin", records=drop_first_child)
    with pytest.raises(proof.ProofError, match="record"):
        proof.check(bad, g0, g1)


def _subtree_len(rec, start):
    """Records of the node starting at ``start`` (a node: -1, or v children... -2 node)."""
    i = start
    r = rec[i]
    i += 1
    if r == proof.CLOSED:
        return i - start
    while rec[i] != proof.END:
        i += 1  # the child's w
        i += _subtree_len(rec, i)
    i += 1
    return i - start + _subtree_len(rec, i)


@pytest.mark.parametrize("how", ["flip", "truncate", "extra", "nodes", "graph", "mapping"])
def test_damaged_certificates_fail_naming_the_problem(certified, tmp_path, how):
    g0, g1, cert, r = certified
    bad = tmp_path / "b.bin"
    if how == "flip":  # the root's second child repeats the first one's target
        _tampered(cert, bad, records=lambda rec: _set(rec, 2 + _subtree_len(rec, 2), rec[1]))
    elif how == "truncate":
        _tampered(cert, bad, records=lambda rec: rec[:-3])
    elif how == "extra":
        _tampered(cert, bad, records=lambda rec: np.append(rec, proof.CLOSED))
    elif how == "nodes":
        _tampered(cert, bad, dict(nodes=r.nodes + 1))
    elif how == "mapping":  # a pair whose adjacency does not match
        pairs = sorted(r.mapping.items())
        pairs[0] = (pairs[0][0], next(w for w in range(g1.n) if w not in r.mapping.values()))
        _tampered(cert, bad, dict(mapping=pairs))
    else:
        cert, bad = cert, cert
        g1 = gnp(14, 0.4, np.random.default_rng(99))
    with pytest.raises(proof.ProofError):
        proof.check(bad, g0, g1)


def _set(rec, i, value):
    rec[i] = value
    return rec


def test_not_a_certificate_is_one_error(tmp_path):
    g = gnp(5, 0.5, np.random.default_rng(1))
    path = tmp_path / "x.bin"
    path.write_text("hello\n")
    with pytest.raises(proof.ProofError, match="JSON"):
        proof.check(path, g, g)
    with pytest.raises(BadInputError, match="cannot read"):
        proof.check(tmp_path / "missing.bin", g, g)


def test_prove_and_branching_refuse_parallel_and_bad_names(tmp_path):
    inst = gnp_pairs(1, 8, 0.4, seed=2)[0]
    with pytest.raises(ConfigError, match="branching"):
        solve(inst.g0, inst.g1, branching="rl", threads=2, policy="hydra-cpu")
    with pytest.raises(BadInputError, match="unknown branching 'xx'"):
        solve(inst.g0, inst.g1, branching="xx")
    with pytest.raises(ConfigError, match="prove"):
        solve(inst.g0, inst.g1, prove=tmp_path / "p.bin", big_first=True)
    with pytest.raises(BadInputError, match="prove"):
        solve(inst.g0, inst.g1, prove=tmp_path / "no" / "p.bin")
    assert list(tmp_path.iterdir()) == []  # nothing half-written left behind
    folder = tmp_path / "taken"
    folder.mkdir()
    with pytest.raises(BadInputError, match="is a directory"):  # before the search, no traceback
        solve(inst.g0, inst.g1, prove=folder)
    assert [p.name for p in tmp_path.iterdir()] == ["taken"] and not any(folder.iterdir())


def test_stopped_search_writes_no_certificate(shared_data, tmp_path):
    folder = shared_data / "mcs"
    cert = tmp_path / "p.bin"
    with pytest.raises(ConfigError, match="no certificate"):
        solve_files(folder / "s30.A00", folder / "s30.B00", prove=cert, timeout=0.2)
    assert list(tmp_path.iterdir()) == []


def test_check_proof_says_which_problem_a_certificate_proves(shared_data, tmp_path):
    """A --connected certificate bounds connected common subgraphs only: check-proof says so."""
    import json

    from typer.testing import CliRunner

    from schedlab.hydra_mcs.cli import app

    a, b = (str(shared_data / "mcs" / n) for n in ("s20.A01", "s20.B01"))
    runner = CliRunner()
    for flags, what in (([], "common induced subgraph"), (["--connected"], "connected common")):
        cert = str(tmp_path / f"p{len(flags)}.bin")
        done = runner.invoke(app, ["solve", a, b, "--prove", cert, "--no-mapping", *flags])
        assert done.exit_code == 0, done.output
        checked = runner.invoke(app, ["check-proof", a, b, cert])
        assert checked.exit_code == 0 and f"is the maximum {what}" in checked.stdout
        doc = json.loads(runner.invoke(app, ["check-proof", a, b, cert, "--json"]).stdout)
        assert doc["valid"] and doc["connected"] == bool(flags)
