"""The embedded I/O generator: fio's jobs, fields and throttle; io_speedup without fio."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import polars as pl
import pytest

from schedlab.core.io import write_text
from schedlab.iflux import deploy, experiment, iojob, ioload
from schedlab.iflux.experiment import ran_with_from, run_case
from schedlab.iflux.storage import DEFAULT_MODELS, SITE_ENV, Site, StorageModel
from schedlab.iflux.workloads import cases

FIO_FIELDS = {"kind", "tier", "seconds", "bytes", "iops", "bw", "engine", "direct"}
TINY = dict(ior_bytes=1 << 20, random_bytes=1 << 20, random_ops=40, md_files=20,
            ckpt_bytes=1 << 20, dlio_samples=8, dlio_sample_bytes=4096, dlio_epochs=1,
            genome_chunks=2, chromosomes=3, compute=0.0)


@pytest.fixture()
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    made = Site.under(tmp_path / "site", ram_base=tmp_path / "ram")
    made.models["pfs"] = StorageModel(bandwidth=64 << 20, iops=400, meta_latency=0.0)
    path = write_text(tmp_path / "site.json", made.to_json())
    monkeypatch.setenv(SITE_ENV, str(path))
    return made


@pytest.mark.parametrize("kind", list(iojob.FIO_PATTERNS))
def test_embedded_job_has_fios_fields_and_respects_the_throttle(site: Site, kind: str) -> None:
    directory = Path(site.roots["pfs"]) / kind
    directory.mkdir()
    workers = 1 if kind == "checkpoint" else 2
    size = 2 * workers * iojob._bytes(iojob.FIO_PATTERNS[kind][1])  # two blocks per worker
    out = iojob.run_embedded(kind, directory, size, workers, io_ops=64 if "rand" in
                             iojob.FIO_PATTERNS[kind][0] else 0)
    assert set(out) == FIO_FIELDS and out["engine"] == "embedded" and out["tier"] == "pfs"
    rw, bs, files, _ = iojob.FIO_PATTERNS[kind]
    rate = ioload.rate_from_fio_options(site.model("pfs").fio_options(workers, iojob._bytes(bs)))
    assert rate > 0
    ops = out["iops"] * out["bytes"] / out["bw"]  # = ops done, from fio's own figures
    assert ops / (rate * workers) <= out["seconds"] + 1e-6
    assert out["bytes"] / (site.model("pfs").bandwidth) <= out["seconds"] + 1e-6
    names = sorted(p.name for p in directory.iterdir())
    expected = [f"{kind}.dat"] if files == "shared" else [f"{kind}.{k}.0" for k in range(workers)]
    assert names == expected  # the files fio would write
    if "write" in rw:
        assert out["bytes"] == size == sum((directory / n).stat().st_size for n in names)


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed (apt-get install fio)")
def test_fio_and_embedded_report_the_same_fields_and_similar_times(site: Site) -> None:
    a, b = Path(site.roots["pfs"]) / "a", Path(site.roots["pfs"]) / "b"
    a.mkdir()
    b.mkdir()
    fio = iojob.run_pattern("ior-nn", a, 8 << 20, 2, engine="fio")
    mine = iojob.run_pattern("ior-nn", b, 8 << 20, 2, engine="embedded")
    assert set(fio) == set(mine) == FIO_FIELDS
    assert fio["engine"].startswith("fio ") and fio["bytes"] == mine["bytes"]
    # both are held to the same modelled rate: neither may beat it (fio's first op is free, so
    # allow one op); slowness of this machine can only make both longer, never fail this
    rate_bytes = site.model("pfs").bandwidth
    one_op = 1 << 20  # ior-nn writes 1 MiB blocks
    for run in (fio, mine):
        assert run["seconds"] + 1e-6 >= (run["bytes"] - 2 * one_op) / rate_bytes, run


def test_random_reads_touch_each_block_once_and_lay_out_a_missing_file(tmp_path: Path) -> None:
    out = ioload.run_job("r", tmp_path, "randread", 4096, True, False, 64 * 4096, workers=2)
    assert out["ops"] == 64 and out["bytes"] == 64 * 4096
    assert (tmp_path / "r.dat").stat().st_size == 64 * 4096
    capped = ioload.run_job("r", tmp_path, "randread", 4096, True, False, 64 * 4096, 2,
                            io_ops=10)
    assert capped["ops"] == 10  # number_ios, split over the workers


def test_processes_and_threads_do_the_same_job(tmp_path: Path) -> None:
    got = [ioload.run_job("w", tmp_path / c, "write", 65536, False, True, 1 << 20, 2,
                          rate=400, concurrency=c) for c in ("threads", "processes")]
    assert got[0]["bytes"] == got[1]["bytes"] == 1 << 20 and got[0]["ops"] == got[1]["ops"]
    for g in got:  # 8 ops per worker at 400 ops/s each
        assert 8 / 400 <= g["seconds"] + 1e-6


def test_o_direct_refused_falls_back_to_buffered(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def no_direct(path, flags, mode=0o777):
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "O_DIRECT not supported")
        return real_open(path, flags, mode)

    monkeypatch.setattr(ioload.os, "open", no_direct)
    out = ioload.run_job("w", tmp_path, "write", 4096, True, True, 16 * 4096, 1)
    assert out["direct"] is False and out["bytes"] == 16 * 4096
    assert "buffered" in ioload.describe(False) and "O_DIRECT" in ioload.describe(True)


def test_unaligned_regions_run_buffered(tmp_path: Path) -> None:
    out = ioload.run_job("u", tmp_path, "write", 4096, True, False, 3 * 4096 + 100, 1)
    assert out["direct"] is False and out["bytes"] == 3 * 4096 + 100


def test_engine_choice_follows_path_and_env(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch, hide_tools) -> None:
    monkeypatch.delenv(ioload.ENGINE_ENV, raising=False)
    hide_tools({"fio"})
    assert ioload.choose_engine() == "embedded"
    monkeypatch.setenv(ioload.ENGINE_ENV, "fio")
    assert ioload.choose_engine() == "fio"
    with pytest.raises(Exception, match="fio is not installed"):
        experiment._check_prerequisites()
    monkeypatch.setenv(ioload.ENGINE_ENV, "bogus")
    with pytest.raises(ValueError, match="valid values"):
        ioload.choose_engine()
    assert ioload.rate_from_fio_options(["--rate_iops=125"]) == 125
    assert ioload.rate_from_fio_options([]) == 0


def test_ran_with_names_what_ran() -> None:
    frame = pl.DataFrame(dict(io_engine=["embedded", "embedded", "python"],
                              direct=[True, True, False]))
    assert ran_with_from(frame) == ioload.describe(True)
    mixed = pl.DataFrame(dict(io_engine=["embedded", "embedded"], direct=[True, False]))
    assert "where taken" in ran_with_from(mixed)
    assert ran_with_from(pl.DataFrame(dict(io_engine=["fio 3.33"], direct=[False]))) \
        == "fio 3.33"


@pytest.mark.skipif(not deploy.namespaces_available(), reason="needs mount namespaces")
def test_io_speedup_runs_without_fio_and_records_it(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    hide_tools) -> None:
    monkeypatch.delenv(ioload.ENGINE_ENV, raising=False)
    hide_tools({"fio"})
    monkeypatch.setattr(experiment, "QUICK_IO", TINY)
    result = experiment.io_speedup(scale="quick", mappers=("pfs", "iflux"), seed=0)
    assert result.ran_with.startswith("the embedded I/O generator")
    assert set(result.frame.filter(pl.col("case").str.starts_with("ior"))["io_engine"]) \
        == {"embedded"}
    lost = next(c for c in result.claims if c.required)
    assert lost.holds, result.frame


@pytest.mark.skipif(not deploy.namespaces_available(), reason="needs mount namespaces")
def test_an_ior_case_runs_embedded_under_iflux(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ioload.ENGINE_ENV, "embedded")
    made = Site.under(tmp_path / "site", ram_base=tmp_path / "ram")
    write_text(tmp_path / "site.json", made.to_json())
    case = next(c for c in cases(TINY, Path(made.roots["pfs"]) / "inputs") if c.name == "ior-nn")
    rows = [run_case(case, m, tmp_path, tmp_path / "site.json") for m in ("pfs", "iflux")]
    assert [r["io_engine"] for r in rows] == ["embedded", "embedded"]
    assert rows[0]["pfs_bytes"] == rows[1]["pfs_bytes"] == 1 << 20
    # the PFS row went through the modelled PFS: its time is at least the throttle's floor
    # (1 MiB at the model's 128 MiB/s); no timing comparison (the machine is shared)
    assert rows[0]["io_s"] >= (1 << 20) / DEFAULT_MODELS["pfs"].bandwidth


@pytest.mark.parametrize("args", [["--workers", "0"], ["--size", "0"], ["--ops", "-1"],
                                  ["--size", "abc"]])
def test_iojob_bad_numbers_are_usage_errors(tmp_path: Path, args: list[str],
                                            capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as stop:
        iojob.main(["ior-n1", "--dir", str(tmp_path), *args])
    assert stop.value.code == 2 and "Traceback" not in capsys.readouterr().err


def test_iojob_bogus_engine_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv(ioload.ENGINE_ENV, "bogus")
    with pytest.raises(SystemExit) as stop:
        iojob.main(["ior-n1", "--dir", str(tmp_path), "--size", "4096"])
    assert stop.value.code == 2 and "IFLUX_IOLOAD='bogus'" in capsys.readouterr().err


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise")
def test_buffered_jobs_drop_the_page_cache_first_like_fio(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    dropped = []
    real = os.posix_fadvise
    monkeypatch.setattr(ioload.os, "posix_fadvise",
                        lambda fd, off, n, advice: (dropped.append(advice), real(fd, off, n,
                                                                                 advice)))
    ioload.run_job("b", tmp_path, "randread", 4096, True, False, 8 * 4096, 2, direct=False)
    assert dropped == [os.POSIX_FADV_DONTNEED] * 2  # once per worker, before its first op
    dropped.clear()
    out = ioload.run_job("d", tmp_path, "read", 4096, True, False, 8 * 4096, 1, direct=True)
    assert dropped == ([] if out["direct"] else [os.POSIX_FADV_DONTNEED])
