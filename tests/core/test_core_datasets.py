"""``schedlab data list | fetch | verify`` against a real HTTP server on 127.0.0.1.

The server serves a folder laid out like a data directory (``<folder>/<file>``), the way a
mirror would; the catalogue under test is a small TOML written here, so the tests need no
network and no ../shared/data. One test checks the real catalogue against the real files
where they are present.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedlab import cli
from schedlab.core import datasets
from schedlab.core.errors import BadInputError, ConfigError, UnknownNameError

GOOD = b"timestamp,tokens\n" + b"".join(b"%d,%d\n" % (i, i * 7 % 13) for i in range(5000))
PLAIN = b"id;cpu\n" + b"".join(b"%d;%d\n" % (i, i % 5) for i in range(3000))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(autouse=True)
def _keep_the_data_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--data`` sets $SCHEDLAB_DATA in-process (as for worker processes); undo it after each
    test, or every later test in this session would look for its data in a deleted tmp dir."""
    from schedlab.core.data import ENV

    monkeypatch.setenv(ENV, "")  # recorded, so restored even where it was unset before
    monkeypatch.delenv(ENV)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """A server on 127.0.0.1: tiny/trace.csv, tiny/vm.csv (plain, as upstream serves it) and
    tiny/vm.csv.gz (as a mirror of a data directory serves it), nothing else."""
    root = tmp_path / "served"
    (root / "tiny").mkdir(parents=True)
    (root / "tiny" / "trace.csv").write_bytes(GOOD)
    (root / "tiny" / "vm.csv").write_bytes(PLAIN)
    (root / "tiny" / "vm.csv.gz").write_bytes(gzip.compress(PLAIN))  # a data dir's layout
    handler = functools.partial(_Quiet, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep pytest's output clean
        pass


def _dataset(name: str, folder: str, base: str, file: dict[str, object]) -> str:
    """One ``[[dataset]]`` entry with one file, in the catalogue's TOML layout."""
    fields = "\n".join(f"{k} = {json.dumps(v)}" for k, v in file.items())
    return (f'[[dataset]]\nname = "{name}"\nfolder = "{folder}"\ntitle = "test set {name}"\n'
            f'upstream = "{base}/"\nlicence = "MIT"\nused_by = ["core"]\nnote = ""\n'
            f"[[dataset.files]]\n{fields}\n")


def _catalogue(tmp_path: Path, base: str, trace_sha: str = "", vm_sha: str = "") -> Path:
    """tiny: one plain file; vms: plain upstream stored gzip-compressed; nosum: no checksum."""
    path = tmp_path / "catalogue.toml"
    path.write_text("\n".join([
        _dataset("tiny", "tiny", base, dict(name="trace.csv", url=f"{base}/tiny/trace.csv",
                                            size=len(GOOD), sha256=trace_sha or _sha(GOOD))),
        _dataset("vms", "tiny", base, dict(name="vm.csv.gz", url=f"{base}/tiny/vm.csv",
                                           size=len(PLAIN), sha256=vm_sha or _sha(PLAIN),
                                           gzip=True)),
        _dataset("nosum", "other", base, dict(name="trace.csv", url=f"{base}/tiny/trace.csv",
                                              sha256="unknown")),
    ]))
    return path


@pytest.fixture
def catalogue(tmp_path: Path, server: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = _catalogue(tmp_path, server)
    monkeypatch.setattr(datasets, "CATALOGUE", path)
    return path


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_fetch_downloads_verifies_and_writes_in_place(catalogue, tmp_path):
    dest = tmp_path / "data"
    seen: list[tuple[str, int | None, int]] = []
    done = datasets.fetch(datasets.get_dataset("tiny"), dest,
                          progress=lambda *a: seen.append(a))
    assert (dest / "tiny" / "trace.csv").read_bytes() == GOOD
    assert [how for _, _, how in done] == ["fetched"]
    assert seen[-1] == ("trace.csv", len(GOOD), len(GOOD))
    again = datasets.fetch(datasets.get_dataset("tiny"), dest)  # already right: not fetched
    assert [how for _, _, how in again] == ["present"]
    assert [c.status for c in datasets.verify(datasets.get_dataset("tiny"), dest)] == ["ok"]


def test_a_gzip_entry_is_checked_on_the_plain_bytes_and_stored_compressed(catalogue, tmp_path):
    dest = tmp_path / "data"
    datasets.fetch(datasets.get_dataset("vms"), dest)
    stored = dest / "tiny" / "vm.csv.gz"
    assert gzip.decompress(stored.read_bytes()) == PLAIN
    assert [c.status for c in datasets.verify(datasets.get_dataset("vms"), dest)] == ["ok"]


def test_a_mirror_of_a_data_dir_serves_the_stored_gzip_file(catalogue, tmp_path, server):
    dest = tmp_path / "data"
    datasets.fetch(datasets.get_dataset("vms"), dest, mirror=server)
    assert gzip.decompress((dest / "tiny" / "vm.csv.gz").read_bytes()) == PLAIN
    assert [c.status for c in datasets.verify(datasets.get_dataset("vms"), dest)] == ["ok"]


def test_a_checksum_mismatch_is_refused_and_leaves_nothing(tmp_path, server, monkeypatch):
    monkeypatch.setattr(datasets, "CATALOGUE", _catalogue(tmp_path, server, trace_sha="ab" * 32))
    dest = tmp_path / "data"
    with pytest.raises(BadInputError, match="sha256 mismatch") as caught:
        datasets.fetch(datasets.get_dataset("tiny"), dest)
    assert "\n" not in str(caught.value) and "nothing written" in str(caught.value)
    assert _leftovers(dest) == []  # no half file, no temporary


def test_a_404_is_one_line_and_leaves_nothing(catalogue, tmp_path, server):
    dest = tmp_path / "data"
    with pytest.raises(BadInputError, match="HTTP 404") as caught:
        datasets.fetch(datasets.get_dataset("tiny"), dest, url=f"{server}/tiny/absent.csv")
    assert "absent.csv" in str(caught.value)
    assert _leftovers(dest) == [] and not (dest / "tiny").exists()


def test_an_unknown_checksum_needs_a_sha256_or_an_explicit_opt_out(catalogue, tmp_path):
    dest = tmp_path / "data"
    ds = datasets.get_dataset("nosum")
    with pytest.raises(ConfigError, match="no known sha256"):
        datasets.fetch(ds, dest)
    datasets.fetch(ds, dest, sha256=_sha(GOOD))
    assert (dest / "other" / "trace.csv").read_bytes() == GOOD
    assert [c.status for c in datasets.verify(ds, dest)] == ["unverified"]
    (dest / "other" / "trace.csv").unlink()
    datasets.fetch(ds, dest, unverified=True)
    assert (dest / "other" / "trace.csv").is_file()


def test_mirror_url_and_scheme_checks(catalogue, tmp_path, server):
    dest = tmp_path / "data"
    datasets.fetch(datasets.get_dataset("tiny"), dest, mirror=server + "/")
    assert (dest / "tiny" / "trace.csv").read_bytes() == GOOD
    with pytest.raises(ConfigError, match="only http"):
        datasets.fetch(datasets.get_dataset("vms"), tmp_path / "d2", url="file:///etc/passwd")
    with pytest.raises(UnknownNameError, match="tiny"):
        datasets.get_dataset("nope")


def test_verify_finds_a_corrupted_file(catalogue, tmp_path):
    dest = tmp_path / "data"
    datasets.fetch(datasets.get_dataset("tiny"), dest)
    (dest / "tiny" / "trace.csv").write_bytes(GOOD[:-1] + b"9")
    (status,) = datasets.verify(datasets.get_dataset("tiny"), dest)
    assert status.status == "mismatch" and "expected sha256" in status.detail


def test_cli_list_fetch_verify(catalogue, tmp_path, server):
    runner = CliRunner()
    dest = tmp_path / "data"
    listed = runner.invoke(cli.app, ["data", "list", "--data", str(tmp_path), "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {r["name"]: r["status"] for r in json.loads(listed.stdout)["datasets"]}
    assert rows == {"tiny": "missing", "vms": "missing", "nosum": "missing"}

    fetched = runner.invoke(cli.app, ["data", "fetch", "tiny", "--data", str(dest)])
    assert fetched.exit_code == 0, fetched.output
    assert (dest / "tiny" / "trace.csv").read_bytes() == GOOD
    listed = runner.invoke(cli.app, ["data", "list", "--data", str(dest), "--json"])
    rows = {r["name"]: r["status"] for r in json.loads(listed.stdout)["datasets"]}
    assert rows["tiny"] == "present" and rows["vms"] == "missing"

    assert runner.invoke(cli.app, ["data", "verify", "--data", str(dest)]).exit_code == 0
    (dest / "tiny" / "trace.csv").write_bytes(b"tampered")
    bad = runner.invoke(cli.app, ["data", "verify", "--data", str(dest), "--json"])
    assert bad.exit_code == 1
    assert [f["status"] for f in json.loads(bad.stdout)["files"]] == ["mismatch"]

    missing = runner.invoke(cli.app, ["data", "fetch", "tiny", "--data", str(tmp_path / "d3"),
                                      "--url", f"{server}/tiny/absent.csv"])
    assert missing.exit_code == 2 and "HTTP 404" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1 and "Traceback" not in missing.output


def test_cli_refuses_a_checksum_mismatch_in_one_line(tmp_path, server, monkeypatch):
    monkeypatch.setattr(datasets, "CATALOGUE", _catalogue(tmp_path, server, trace_sha="cd" * 32))
    result = CliRunner().invoke(cli.app, ["data", "fetch", "tiny", "--data", str(tmp_path / "d")])
    assert result.exit_code == 2
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "sha256 mismatch" in lines[0]
    assert not (tmp_path / "d" / "tiny" / "trace.csv").exists()


def test_a_malformed_catalogue_names_file_and_entry(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[[dataset]]\nname="x"\nfolder="x"\ntitle="t"\nupstream="u"\nlicence="l"\n'
                    'files=[{name="f", sha256="xyz"}]\n')
    with pytest.raises(BadInputError, match=r"dataset\[0\]\.files\[0\].*64 hex") as caught:
        datasets.load_catalogue(path)
    assert str(path) in str(caught.value)


def test_the_real_catalogue_is_complete_and_honest():
    sets = datasets.load_catalogue()
    for name in ("alibaba-gpu2023", "alibaba-genai", "bitbrains", "eua", "lucid-colocation",
                 "vidur-profiles", "darshan-samples", "mcs-graphs", "xbucket-reports",
                 "mooncake-traces", "azure-llm-2023", "burstgpt"):
        ds = sets[name]
        assert ds.licence and ds.upstream.startswith("http") and ds.files
    for ds in sets.values():
        for f in ds.files:
            assert f.sha256 == datasets.UNKNOWN or len(f.sha256) == 64
            assert not f.url or f.url.startswith("https://")


def test_list_without_data_finds_each_set_where_the_resolver_does(catalogue, tmp_path,
                                                                   monkeypatch):
    from schedlab.core import data

    cache, repo = tmp_path / "cache", tmp_path / "repo"
    (cache / "other").mkdir(parents=True)
    (cache / "other" / "trace.csv").write_bytes(GOOD)
    (repo / "tiny").mkdir(parents=True)
    (repo / "tiny" / "trace.csv").write_bytes(GOOD)
    monkeypatch.setattr(data, "cache_dir", lambda: cache)
    monkeypatch.setattr(data, "REPO_FALLBACK", repo)
    listed = CliRunner().invoke(cli.app, ["data", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {r["name"]: r for r in json.loads(listed.stdout)["datasets"]}
    assert rows["tiny"]["status"] == "present" and rows["tiny"]["where"] == [str(repo / "tiny")]
    assert rows["nosum"]["where"] == [str(cache / "other")] and rows["vms"]["status"] == "missing"
    verified = CliRunner().invoke(cli.app, ["data", "verify", "tiny", "--json"])
    assert verified.exit_code == 0
    assert [f["status"] for f in json.loads(verified.stdout)["files"]] == ["ok"]


def test_the_real_catalogue_matches_the_files_present(shared_data):
    """Every catalogued file that is present in the data dir has the catalogue's sha256."""
    checks = [c for ds in datasets.load_catalogue().values()
              for c in datasets.verify(ds, shared_data) if c.status != "missing"]
    if not checks:
        pytest.skip("no catalogued data set is present")
    assert {c.status for c in checks} <= {"ok", "unverified"}, [
        (c.dataset, c.file, c.detail) for c in checks if c.status not in ("ok", "unverified")]
