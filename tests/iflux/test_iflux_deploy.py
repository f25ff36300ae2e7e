"""Deployment: transparency through a mount namespace, staging, flush safety, daemons."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from schedlab.core.io import write_text
from schedlab.iflux import deploy
from schedlab.iflux.engine import decide, run
from schedlab.iflux.intents import Intent
from schedlab.iflux.storage import Client, Site
from schedlab.iflux.transfer import copy_file, flush_tree, list_files

needs_ns = pytest.mark.skipif(not deploy.namespaces_available(),
                              reason="mount namespaces need CAP_SYS_ADMIN (run as root)")

PROBE = ("import json,sys;from schedlab.iflux.storage import Client;"
         "print(json.dumps(Client().classifier.tier(sys.argv[1])))")


@pytest.fixture
def site(tmp_path: Path):
    s = Site.under(tmp_path / "site", ram_base=tmp_path / "ram")
    path = tmp_path / "site.json"
    write_text(path, s.to_json())
    return s, path


def pfs(site_tuple, *parts: str) -> Path:
    return Path(site_tuple[0].roots["pfs"]).joinpath(*parts)


@needs_ns
def test_job_sees_its_tier_on_the_declared_path(site, tmp_path: Path) -> None:
    out = pfs(site, "job", "out")
    intents = [Intent(path=str(out), usage="output", pattern="metadata-heavy", size="1MiB")]
    log = tmp_path / "stdout"
    with open(log, "w") as handle:
        report = run(intents, [sys.executable, "-c", PROBE, str(out)], site[1], stdout=handle)
    assert report.returncode == 0 and report.transparent
    assert json.loads(log.read_text()) == "ramdisk"
    with open(log, "w") as handle:
        run(intents, [sys.executable, "-c", PROBE, str(out)], site[1], mapper="pfs",
            stdout=handle)
    assert json.loads(log.read_text()) == "pfs"


@needs_ns
def test_stage_in_and_outputs_survive_a_failing_job(site) -> None:
    src = pfs(site, "dataset")
    src.mkdir(parents=True)
    (src / "a.bin").write_bytes(b"x" * 5000)
    data, out = pfs(site, "job", "data"), pfs(site, "job", "out")
    intents = [Intent(path=str(data), source=str(src), usage="input", mode="read-only",
                      pattern="small-random", size="1MiB"),
               Intent(path=str(out), usage="output", pattern="checkpoint", size="1MiB")]
    script = f"cp {data}/a.bin {out}/copy.bin && echo partial > {out}/log.txt && exit 3"
    report = run(intents, ["sh", "-c", script], site[1])
    assert report.returncode == 3 and report.kept == []
    assert (out / "copy.bin").read_bytes() == b"x" * 5000
    assert (out / "log.txt").read_text() == "partial\n"
    assert not list(data.iterdir()), "the read-only input is not written back"
    assert report.stage_in["files"] == 1
    tiers = [Path(r) for k, r in site[0].roots.items() if k != "pfs"]
    assert all(not any(t.iterdir()) for t in tiers), "tier directories are torn down"


def test_env_fallback_without_namespaces(site, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deploy, "namespaces_available", lambda: True)
    out = pfs(site, "job2", "out")
    intents = [Intent(path=str(out), usage="output", pattern="metadata-heavy", size="1MiB")]
    monkeypatch.setattr(deploy, "namespaces_available", lambda: False)
    report = run(intents, ["sh", "-c", 'test -n "$IFLUX_MOUNTS"'], site[1])
    assert report.returncode == 0 and report.transparent is False


@needs_ns
def test_flush_retries_a_failing_copy(site) -> None:
    out = pfs(site, "job3", "out")
    intents = [Intent(path=str(out), usage="output", pattern="checkpoint", size="1MiB")]
    calls = {"n": 0}

    def flaky(client, src, dst, compress):
        calls["n"] += 1
        if calls["n"] <= 2:
            raise OSError("PFS hiccup")
        return copy_file(client, src, dst, compress)

    report = run(intents, ["sh", "-c", f"echo data > {out}/r.txt"], site[1], copier=flaky)
    assert report.flush["retries"] == 2 and (out / "r.txt").read_text() == "data\n"
    assert report.kept == []


def test_failed_flush_keeps_the_tier_copy(site) -> None:
    def broken(client, src, dst, compress):
        raise OSError("PFS down")

    out4 = pfs(site, "job4", "out")
    intents4 = [Intent(path=str(out4), usage="output", pattern="checkpoint", size="1MiB")]
    plan = deploy.build_plan(decide(intents4).allocation, site[1], "job4")
    client = Client(site[0])
    deploy.prepare(plan, client)
    (Path(plan.mounts[0].tier_dir) / "precious.bin").write_bytes(b"keep me")
    stats, kept = deploy.finish(plan, client, copier=broken)
    assert kept == [plan.mounts[0].tier_dir] and stats.failed
    assert (Path(kept[0]) / "precious.bin").read_bytes() == b"keep me"
    assert not (out4 / "precious.bin").exists()


def test_flush_is_incremental_and_aggregates_small_files(site, tmp_path: Path) -> None:
    src, dst = tmp_path / "tier", pfs(site, "agg")
    src.mkdir()
    for i in range(20):
        (src / f"f{i}.txt").write_text(f"{i}\n")
    (src / "big.bin").write_bytes(bytes(2 << 20))
    client = Client(site[0])
    stats, done = flush_tree(client, src, dst, aggregate=True, compress=True)
    assert stats.files == 21 and not stats.failed
    assert stats.wire_bytes < stats.bytes  # zeros compress on the wire
    assert sorted(p.name for p in list_files(dst)) == sorted(p.name for p in list_files(src))
    again, _ = flush_tree(client, src, dst, done=done)
    assert again.files == 0, "nothing changed, nothing is copied"
    assert not [p for p in dst.iterdir() if p.name.endswith(".iflux-tmp")]


@needs_ns
def test_write_back_daemon_flushes_while_the_job_runs(site) -> None:
    out = pfs(site, "job5", "out")
    intents = [Intent(path=str(out), usage="output", pattern="checkpoint", size="1MiB")]
    # mid-run, the job reads the daemon's record of what is already durable on the PFS
    check = ("import json,os,sys,time;time.sleep(1.5);"
             "tier=json.loads(os.environ['IFLUX_MOUNTS'])[sys.argv[1]];"
             "done=json.load(open(tier+'.flushed.json'));"
             "open(sys.argv[1]+'/flag.txt','w').write(str('early.txt' in done))")
    script = f"echo early > {out}/early.txt; {sys.executable} -c \"{check}\" {out}"
    report = run(intents, ["sh", "-c", script], site[1])
    assert report.returncode == 0
    assert (out / "early.txt").read_text() == "early\n"
    assert (out / "flag.txt").read_text() == "True", "write-back flushed early.txt mid-run"


def test_missing_input_is_reported_before_anything_is_deployed(site) -> None:
    from schedlab.core.errors import BadInputError

    data = pfs(site, "job6", "data")
    intents = [Intent(path=str(data), source=str(pfs(site, "nowhere")), usage="input",
                      mode="read-only", pattern="small-random", size="1MiB")]
    with pytest.raises(BadInputError, match="does not exist"):
        run(intents, ["true"], site[1])
    assert not data.exists()
    assert all(not any(Path(r).iterdir()) for k, r in site[0].roots.items() if k != "pfs")


def test_compression_only_when_it_pays() -> None:
    import os

    from schedlab.iflux.transfer import wire_size

    noise, zeros = os.urandom(1 << 20), bytes(1 << 20)
    assert wire_size(noise, True) == len(noise)
    assert wire_size(zeros, True) < len(zeros) // 100
    assert wire_size(zeros, False) == len(zeros) and wire_size(b"", True) == 0


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="running the namespace as another user needs root and setpriv")
def test_user_namespace_maps_an_ordinary_user_back_to_itself() -> None:
    import subprocess
    import tempfile

    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    if subprocess.run([*as_nobody, "unshare", "--map-root-user", "--mount", "true"],
                      capture_output=True).returncode != 0:
        pytest.skip("unprivileged user namespaces are off here")
    base = Path(tempfile.mkdtemp(prefix="iflux-userns-"))
    try:
        base.chmod(0o755)
        tier, path = base / "tier", base / "path"
        for d in (tier, path):
            d.mkdir()
            os.chown(d, 65534, 65534)
        plan = deploy.Plan("j", "", [deploy.Mount(str(path), "ramdisk", str(tier), 0, "", True)])
        argv, transparent = deploy.wrap_command(
            plan, ["/bin/sh", "-c", f"id -u; touch {path}/f"],
            prefix=deploy.NAMESPACE_PREFIXES[1], uid=65534, gid=65534)
        out = subprocess.run([*as_nobody, *argv], capture_output=True, text=True)
        assert transparent and out.returncode == 0, out.stderr
        assert out.stdout.strip() == "65534", "the job sees its own uid, not root"
        assert (tier / "f").stat().st_uid == 65534 and not (path / "f").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)
