"""The headline experiment as the paper states it: real traces when present, synthetic otherwise."""

import pytest

from schedlab.xbucket.experiment import family_table, family_vs_alternatives


def _check(result, workflows):
    table = result.frame.filter(result.frame["kind"] == "family-table")
    assert set(table["mode"]) == {"per-resource", "joint"}
    assert table.height == 2 * 3 * workflows
    metrics = [c.metric for c in result.claims]
    assert any("(per-resource)" in m for m in metrics) and any("(joint)" in m for m in metrics)
    assert all(c.holds for c in result.claims if c.required)
    for claim in result.claims:
        if not claim.required:
            assert claim.target == 1.0 and 0.0 <= claim.measured <= 1.0


def test_synthetic_fallback_when_no_traces(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDLAB_DATA", str(tmp_path))  # a data dir without xbucket/
    result = family_vs_alternatives(real_tasks=50, synthetic_tasks=60, seed=0)
    assert result.ran_with == "seeded synthetic traces"
    _check(result, 10)


def test_real_traces_when_present(shared_data, monkeypatch):
    folder = shared_data / "xbucket"
    if not any(folder.glob("*.txt")):
        pytest.skip("no xbucket traces in ../shared/data")
    monkeypatch.setenv("SCHEDLAB_DATA", str(shared_data))
    result = family_vs_alternatives(real_tasks=80, synthetic_tasks=10, seed=0)
    assert result.ran_with == f"real traces ({folder})"
    _check(result, len(list(folder.glob("*.txt"))))


def test_family_table_counts_a_tie_as_not_beaten():
    import polars as pl

    rows = [dict(mode="joint", workflow="w", algorithm=a, efficiency_cores=e,
                 efficiency_memory=e, efficiency_disk=e)
            for a, e in (("pg-bucket", 0.9), ("de-bucket", 0.8), ("max-seen", 0.9),
                         ("min-waste", 0.5))]
    table = family_table(pl.DataFrame(rows))
    assert not table["family_wins"].any() and table["tie"].all()
