"""The PFS as a real network file system (sshfs served by a private sshd on 127.0.0.1), and
the parallel flush that a network file system needs."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import polars as pl
import pytest

from schedlab.core.errors import ConfigError, MissingServiceError
from schedlab.core.io import write_text
from schedlab.iflux import deploy, netfs
from schedlab.iflux.experiment import _io_claims, choose_pfs, run_case
from schedlab.iflux.storage import Client, Site, StorageModel
from schedlab.iflux.transfer import flush_tree, list_files
from schedlab.iflux.workloads import cases

needs_netfs = pytest.mark.skipif(
    netfs.missing() is not None or os.geteuid() != 0,
    reason=f"needs sshfs + sshd + /dev/fuse as root: {netfs.missing() or 'not root'}")


def _listening(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((address, port)) == 0


@needs_netfs
def test_served_pfs_is_a_real_mount_with_symlinks_and_goes_away(tmp_path: Path,
                                                                 monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a relative base, as a user types it
    with netfs.serve(Path("net")) as pfs:
        mounts = Path("/proc/self/mountinfo").read_text()
        assert f" {pfs.mountpoint} " in mounts and "fuse.sshfs" in mounts
        assert pfs.address == "127.0.0.1" and _listening(pfs.address, pfs.port)
        (pfs.mountpoint / "data").mkdir()
        (pfs.mountpoint / "data" / "a").write_bytes(b"x" * 5000)
        assert (pfs.export / "data" / "a").read_bytes() == b"x" * 5000  # through the server
        (pfs.mountpoint / "job").mkdir()
        os.symlink("../data", pfs.mountpoint / "job" / "rel")  # a user's symlinks stay usable
        os.symlink(pfs.mountpoint / "data", pfs.mountpoint / "abs")
        assert (pfs.mountpoint / "job" / "rel" / "a").stat().st_size == 5000
        assert (pfs.mountpoint / "abs" / "a").stat().st_size == 5000
        port = pfs.port
    assert f" {tmp_path / 'net' / 'pfs'} " not in Path("/proc/self/mountinfo").read_text()
    assert not _listening("127.0.0.1", port)


@needs_netfs
@pytest.mark.skipif(not deploy.namespaces_available(), reason="needs mount namespaces")
def test_a_workflow_runs_on_the_network_pfs_with_and_without_iflux(tmp_path: Path) -> None:
    scale = dict(ior_bytes=1 << 20, random_bytes=1 << 20, random_ops=50, md_files=30,
                 ckpt_bytes=1 << 20, dlio_samples=8, dlio_sample_bytes=4096, dlio_epochs=1,
                 genome_chunks=2, chromosomes=3, compute=0.0)
    with netfs.serve(tmp_path) as pfs:
        site = Site.under(tmp_path / "site", ram_base=tmp_path / "ram", pfs=pfs.mountpoint)
        assert site.model("pfs") == StorageModel()  # measured, nothing modelled
        assert Client(site).classifier.tier(pfs.mountpoint / "x") == "pfs"
        write_text(tmp_path / "site.json", site.to_json())
        inputs = Path(site.roots["pfs"]) / "inputs"
        import numpy as np

        case = next(c for c in cases(scale, inputs) if c.name == "genomes")
        case.setup(tmp_path, np.random.default_rng(0))  # inputs on the network PFS
        rows = [run_case(case, m, tmp_path, tmp_path / "site.json") for m in ("pfs", "iflux")]
    assert [r["returncode"] for r in rows] == [0, 0], rows
    assert rows[0]["pfs_files"] == rows[1]["pfs_files"] > 0
    assert rows[0]["pfs_bytes"] == rows[1]["pfs_bytes"]
    assert rows[0]["tier"] == "pfs,pfs,pfs" and "ramdisk" in rows[1]["tier"]
    assert rows[1]["kept"] == 0


def test_pfs_choice(monkeypatch) -> None:
    assert choose_pfs("model") == "model"
    with pytest.raises(ConfigError, match="pfs must be"):
        choose_pfs("lustre")
    monkeypatch.setattr(netfs, "missing", lambda: "sshfs is not installed")
    assert choose_pfs("auto") == "model"  # the pip-only path keeps the model, labelled
    with pytest.raises(MissingServiceError, match="sshfs is not installed"):
        choose_pfs("sshfs")


def test_io_time_speedup_is_a_claim_only_against_a_real_file_system() -> None:
    rows = [dict(case=c, mapper=m, io_s=2.0 if m == "pfs" else 0.1, end_to_end_s=3.0,
                 job_wall_s=3.0, pfs_files=1, pfs_bytes=1, returncode=0, kept=0,
                 submit_check_s=1e-4, decide_s=1e-4)
            for c in ("a", "genomes") for m in ("pfs", "iflux")]
    frame = pl.DataFrame(rows)
    pick = {real: next(c for c in _io_claims(frame, 0.0, "sshfs", real=real)
                       if "own I/O time" in c.statement) for real in (True, False)}
    assert pick[True].kind == "claim" and "sshfs" in pick[True].baseline
    assert pick[False].kind == "sanity"
    assert pick[True].measured == pick[False].measured == pytest.approx(20)


def test_parallel_flush_publishes_every_file_once_and_records_failures(tmp_path: Path) -> None:
    src, dst = tmp_path / "tier", tmp_path / "pfs"
    for i in range(40):
        (src / f"d{i % 4}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i % 4}" / f"f{i}").write_bytes(os.urandom(100 + i))
    client = Client(Site.under(tmp_path / "site", ram_base=tmp_path / "ram"))
    from schedlab.iflux.transfer import copy_file

    def flaky(c, a: Path, b: Path, compress: bool) -> int:
        if a.name == "f7":
            raise OSError("the PFS said no")
        return copy_file(c, a, b, compress)

    stats, done = flush_tree(client, src, dst, copier=flaky, retries=1, streams=8)
    assert stats.files == 39 and stats.failed == [str(src / "d3" / "f7")]
    assert len(done) == 39 and "d3/f7" not in done
    for path in list_files(src):
        rel = path.relative_to(src)
        if rel.name != "f7":
            assert (dst / rel).read_bytes() == path.read_bytes()
    again, done2 = flush_tree(client, src, dst, done=done, streams=8)  # only what is left
    assert again.files == 1 and len(done2) == 40
    bundled, _ = flush_tree(client, src, tmp_path / "pfs2", aggregate=True, streams=8)
    assert bundled.files == 40 and not bundled.failed
    assert len(list_files(tmp_path / "pfs2")) == 40


def test_parallel_copiers_share_one_bucket_per_tier(tmp_path: Path, monkeypatch) -> None:
    """Eight threads asking for the PFS bucket at once get the same one (a second bucket would
    double the modelled bandwidth without any error). A slow bucket constructor widens the race
    window so an unlocked check-then-create fails this every time."""
    import threading
    import time

    from schedlab.iflux import storage

    class SlowThrottle(storage.Throttle):
        def __init__(self, model: StorageModel) -> None:
            time.sleep(0.02)
            super().__init__(model)

    monkeypatch.setattr(storage, "Throttle", SlowThrottle)
    client = Client(Site.under(tmp_path / "site", ram_base=tmp_path / "ram"))
    pfs = Path(client.site.roots["pfs"]) / "f"
    got, start = [], threading.Barrier(8)

    def ask() -> None:
        start.wait()
        got.append(client.throttle(pfs))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(t) for t in got}) == 1 and got[0].model.iops == 1_000
