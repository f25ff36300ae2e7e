"""The columnar batch path (parse + validate + map) agrees with the per-intent path and says
which row and field is wrong."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from schedlab.core.errors import BadInputError
from schedlab.iflux import batch
from schedlab.iflux.intents import encode, intent_from_dict
from schedlab.iflux.policies import shared_mapper
from schedlab.iflux.workloads import intent_stream


def test_batch_maps_like_the_per_intent_path() -> None:
    raws = intent_stream(3000, 7)
    raws[5]["size"] = "64MiB"  # strings and integers mixed in one column become strings
    frame = pl.DataFrame([{**r, "size": str(r["size"])} for r in raws])
    result = batch.map_batch(frame)
    reference = shared_mapper("iflux").map(encode([intent_from_dict(r, {}) for r in raws]))
    assert [result.chains[i] for i in result.chain_id] == \
        [reference.chains[i] for i in reference.chain_ids]
    assert result.soft.tolist() == reference.soft.tolist()
    ints = batch.map_batch(pl.DataFrame([r for i, r in enumerate(raws) if i != 5]))
    assert len(ints) == 2999


def test_missing_optional_columns_take_the_model_defaults() -> None:
    result = batch.map_batch({"path": ["/p/a", "/p/b"], "usage": ["output", "temporary"]})
    one = [intent_from_dict(dict(path="/p/a", usage="output"), {}),
           intent_from_dict(dict(path="/p/b", usage="temporary"), {})]
    reference = shared_mapper("iflux").map(encode(one))
    assert result.tiers() == [str(reference.chains[i][0]) for i in reference.chain_ids]


def test_no_gpu_direct_tier_without_a_gpu(tmp_path: Path) -> None:
    from schedlab.iflux.storage import has_gpu

    rows = {"path": ["/p/samples"], "usage": ["input"], "data": ["sample"],
            "level": ["operation"], "size": ["1GiB"]}
    result = batch.map_batch(rows)
    assert str(result.chains[result.chain_id[0]][0]) == "gpu-direct", "the rule prefers it"
    assert (result.tiers() == ["gpu-direct"]) == has_gpu()
    assert result.tiers({"nvme", "pfs"}) == ["nvme"]
    pl.DataFrame(rows).write_csv(tmp_path / "s.csv")
    batch.map_file(tmp_path / "s.csv", tmp_path / "s.parquet")
    assert pl.read_parquet(tmp_path / "s.parquet")["tier"].to_list() == result.tiers()


def test_a_missing_path_is_named_as_missing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("path,usage\n/p/a,input\n,output\n")
    with pytest.raises(BadInputError, match="missing value") as err:
        batch.map_file(bad, tmp_path / "o.parquet")
    assert err.value.line == 3 and err.value.field == "path"


@pytest.mark.parametrize(("column", "value", "field", "message"), [
    ("usage", "sideways", "usage", "Input should be"),
    ("mode", "write-only", "mode", "an input cannot be write-only"),
    ("path", "relative/x", "path", "absolute"),
    ("size", -4, "size", ">= 0"),
    ("size", "12parsecs", "size", "cannot read"),
    ("files", 0, "files", ">= 1"),
    ("pattern", "checkpoint", "pattern", "checkpoint is written"),
])
def test_the_first_bad_row_and_field_are_named(column, value, field, message) -> None:
    rows = [dict(path=f"/p/{i}", usage="input", mode="read-only", size=1, files=1,
                 pattern="small-random") for i in range(5)]
    if column == "size" and isinstance(value, str):
        for r in rows:
            r["size"] = "1KiB"
    if column == "mode":
        rows[3]["mode"] = "read-write"
    rows[3][column] = value
    with pytest.raises(BadInputError) as err:
        batch.map_batch(pl.DataFrame(rows))
    assert err.value.field == field and message in str(err.value)
    assert "row 3" in str(err.value)


def test_unknown_and_missing_columns() -> None:
    with pytest.raises(BadInputError, match="unknown intent column") as err:
        batch.map_batch({"path": ["/a"], "usage": ["input"], "colour": ["blue"]})
    assert err.value.field == "colour"
    with pytest.raises(BadInputError, match="required column") as err:
        batch.map_batch({"path": ["/a"]})
    assert err.value.field == "usage"
    with pytest.raises(BadInputError, match="a batch is"):
        batch.map_batch([1, 2, 3])


def test_paths_declared_twice_differently_are_caught_when_asked() -> None:
    frame = pl.DataFrame(dict(job=["a", "a", "b"], path=["/p/x", "/p/x", "/p/x"],
                              usage=["input", "output", "input"]))
    batch.map_batch(frame.drop("job"))  # per row, each intent is valid
    with pytest.raises(BadInputError, match="declared twice"):
        batch.check_paths(frame, job="job")
    batch.check_paths(frame.filter(pl.col("usage") == "input"), job="job")
    with pytest.raises(BadInputError, match="no such column") as err:
        batch.check_paths(frame.drop("job"), job="job")
    assert err.value.field == "job"


def test_map_batch_one_job_names_the_line_of_the_second_declaration(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from schedlab.iflux.cli import app

    dup = tmp_path / "dup.csv"
    dup.write_text("path,usage\n/p/a,input\n/p/b,input\n/p/a,output\n")
    out = tmp_path / "o.parquet"
    assert batch.map_file(dup, out) == 3, "rows of many jobs: no cross-row check"
    with pytest.raises(BadInputError, match="declared twice") as err:
        batch.map_file(dup, tmp_path / "o2.parquet", paths=True)
    assert err.value.line == 4 and err.value.field == "path"
    assert not (tmp_path / "o2.parquet").exists()
    result = CliRunner().invoke(app, ["map-batch", str(dup), "--out", str(out), "--one-job"])
    assert result.exit_code == 2 and f"{dup}:4: field 'path'" in result.output


def test_files_errors_name_the_csv_line_and_keep_old_output(tmp_path: Path) -> None:
    good = tmp_path / "good.csv"
    good.write_text("path,usage,size\n/p/a,input,64MiB\n/p/b,output,1GiB\n")
    out = tmp_path / "mapped.parquet"
    assert batch.map_file(good, out) == 2
    mapped = pl.read_parquet(out)
    assert mapped["tier"].to_list()[1] in ("nvme", "shared-bb")
    assert set(mapped.columns) >= {"tier", "chain", "software"}
    bad = tmp_path / "bad.csv"
    bad.write_text("path,usage,size\n/p/a,input,64MiB\n/p/b,outptu,1GiB\n")
    with pytest.raises(BadInputError) as err:
        batch.map_file(bad, out)
    assert err.value.line == 3 and err.value.field == "usage"
    assert str(err.value).startswith(f"{bad}:3: field 'usage'")
    assert pl.read_parquet(out).equals(mapped), "the earlier output is untouched"
    with pytest.raises(BadInputError, match="no such file"):
        batch.map_file(tmp_path / "none.csv", out)
    (tmp_path / "x.txt").write_text("x")
    with pytest.raises(BadInputError, match=".csv, .parquet or .arrow"):
        batch.map_file(tmp_path / "x.txt", out)
    with pytest.raises(BadInputError, match="no such directory") as err:
        batch.map_file(good, tmp_path / "nodir" / "o.parquet")
    assert err.value.path == tmp_path / "nodir" / "o.parquet"
    with pytest.raises(BadInputError, match="is a directory"):
        batch.map_file(good, tmp_path)


def test_map_batch_cli_one_line_errors(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from schedlab.iflux.cli import app

    bad = tmp_path / "bad.csv"
    bad.write_text("path,usage\n/p/a,input\nrelative,output\n")
    result = CliRunner().invoke(app, ["map-batch", str(bad), "--out", str(tmp_path / "o.parquet")])
    assert result.exit_code == 2 and f"{bad}:3: field 'path'" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "o.parquet").exists()
    good = tmp_path / "good.csv"
    good.write_text("path,usage\n/p/a,input\n")
    ok = CliRunner().invoke(app, ["map-batch", str(good), "--out", str(tmp_path / "o.parquet"),
                                  "--json"])
    assert ok.exit_code == 0 and '"rows": 1' in ok.stdout


def test_map_file_writes_csv_when_asked_for_csv(tmp_path):
    """--out mapped.csv used to get Parquet bytes under a .csv name."""
    from schedlab.iflux.batch import map_file

    src = tmp_path / "intents.csv"
    src.write_text("path,usage,mode,pattern,size\n/scratch/in,input,read-only,"
                   "large-sequential,1GiB\n")
    out = tmp_path / "mapped.csv"
    assert map_file(src, out) == 1
    lines = out.read_text().splitlines()
    assert lines[0].startswith("path,usage") and "tier" in lines[0] and len(lines) == 2
    with pytest.raises(BadInputError, match="parquet or .csv"):
        map_file(src, tmp_path / "mapped.txt")
