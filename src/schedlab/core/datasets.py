"""The catalogue of public data sets (``datasets.toml``): what is present, verify, fetch.

Why a catalogue: each experiment falls back to a seeded stand-in when its trace is missing, so a
user needs one place that says which real data sets exist, where they come from, under which
licence, and whether the bytes here are the ones the figures were measured on (sha256). Files
land at ``<data dir>/<folder>/<name>`` (:mod:`schedlab.core.data`). A download streams into a
temporary sibling, is hashed on the way, and is renamed into place only when its sha256 matches:
a mismatch, a 404 or Ctrl-C leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import tempfile
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from schedlab.core.errors import BadInputError, ConfigError
from schedlab.core.registry import lookup

CATALOGUE = Path(__file__).with_name("datasets.toml")
UNKNOWN = "unknown"
_CHUNK = 1 << 16


@dataclass(frozen=True)
class DataFile:
    """One file of a data set. ``gzip``: stored compressed, ``sha256``/``size`` of the plain
    bytes (what upstream serves)."""

    name: str
    url: str
    size: int | None
    sha256: str
    gzip: bool = False

    @property
    def known(self) -> bool:
        return self.sha256 != UNKNOWN


@dataclass(frozen=True)
class DataSet:
    """A public data set: where it comes from, its licence, who uses it, its files."""

    name: str
    folder: str
    title: str
    upstream: str
    licence: str
    used_by: tuple[str, ...]
    note: str
    files: tuple[DataFile, ...] = field(default_factory=tuple)

    def path(self, f: DataFile, root: Path | None) -> Path:
        """``root/<folder>/<name>``; with no root, wherever the resolver finds it."""
        if root is None:
            from schedlab.core.data import data_path

            return data_path(self.folder, f.name)
        return root / self.folder / f.name

    @property
    def size(self) -> int | None:
        sizes = [f.size for f in self.files]
        return None if None in sizes else sum(sizes)  # type: ignore[arg-type]


def _file(raw: dict, where: str, path: Path) -> DataFile:
    try:
        size = raw.get("size", UNKNOWN)
        digest = str(raw["sha256"]).lower()
        if digest != UNKNOWN and (len(digest) != 64 or set(digest) - set("0123456789abcdef")):
            raise ValueError(f"sha256 '{digest}' is not 64 hex digits")
        return DataFile(name=str(raw["name"]), url=str(raw.get("url", "")),
                        size=None if size == UNKNOWN else int(size), sha256=digest,
                        gzip=bool(raw.get("gzip", False)))
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInputError(f"bad file entry: {exc}", path=path, field=where) from exc


def load_catalogue(path: Path | None = None) -> dict[str, DataSet]:
    """Every data set of the catalogue by name."""
    path = path or CATALOGUE
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInputError(f"cannot read the data catalogue: {exc}", path=path) from exc
    sets: dict[str, DataSet] = {}
    for i, entry in enumerate(raw.get("dataset", [])):
        try:
            name = entry["name"]
            sets[name] = DataSet(
                name=name, folder=entry["folder"], title=entry["title"],
                upstream=entry["upstream"], licence=entry["licence"],
                used_by=tuple(entry.get("used_by", ())), note=entry.get("note", ""),
                files=tuple(_file(f, f"dataset[{i}].files[{j}]", path)
                            for j, f in enumerate(entry["files"])))
        except KeyError as exc:
            raise BadInputError(f"missing key {exc}", path=path, field=f"dataset[{i}]") from exc
    return sets


def get_dataset(name: str) -> DataSet:
    return lookup(load_catalogue(), "data set", name)


# --- what is here ---------------------------------------------------------------------------


def present(ds: DataSet, root: Path | None) -> list[Path]:
    """The data set's files that exist under ``root`` (None: wherever the resolver finds them);
    no hashing, so ``list`` stays quick."""
    return [path for f in ds.files if (path := ds.path(f, root)).is_file()]


def _digest(path: Path, gz: bool) -> tuple[str, int]:
    """sha256 and length of the file's bytes (decompressed when ``gz``)."""
    h, n = hashlib.sha256(), 0
    opener = gzip.open if gz else open
    try:
        with opener(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                h.update(chunk)
                n += len(chunk)
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise BadInputError(f"cannot read: {exc}", path=path) from exc
    return h.hexdigest(), n


@dataclass(frozen=True)
class Check:
    """The verdict on one file: ok, missing, mismatch, unreadable or unverified (no checksum)."""

    dataset: str
    file: str
    path: Path
    status: str
    detail: str = ""


def verify(ds: DataSet, root: Path | None) -> list[Check]:
    """Check every file of ``ds`` under ``root`` (None: wherever the resolver finds it)
    against the catalogue's sha256."""
    checks = []
    for f in ds.files:
        path = ds.path(f, root)
        if not path.is_file():
            checks.append(Check(ds.name, f.name, path, "missing"))
            continue
        try:
            digest, _ = _digest(path, f.gzip)
        except BadInputError as exc:
            checks.append(Check(ds.name, f.name, path, "unreadable", str(exc)))
            continue
        if not f.known:
            checks.append(Check(ds.name, f.name, path, "unverified", f"sha256 {digest}"))
        elif digest == f.sha256:
            checks.append(Check(ds.name, f.name, path, "ok"))
        else:
            checks.append(Check(ds.name, f.name, path, "mismatch",
                                f"expected sha256 {f.sha256[:12]}..., got {digest[:12]}..."))
    return checks


# --- fetch ----------------------------------------------------------------------------------

Progress = Callable[[str, int | None, int], None]  # (file, total bytes or None, bytes so far)


def _source(ds: DataSet, f: DataFile, url: str | None, mirror: str | None) -> str:
    if url:
        return url
    if mirror:
        return f"{mirror.rstrip('/')}/{ds.folder}/{f.name}"
    if not f.url:
        raise ConfigError(f"{ds.name}/{f.name} has no known download URL; get it from "
                          f"{ds.upstream} ({ds.note}) or pass --mirror/--url", field="url")
    return f.url


def _open(url: str):
    import urllib.error
    import urllib.request

    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"only http(s) URLs are fetched, not '{url}'", field="url")
    request = urllib.request.Request(url, headers={"User-Agent": "schedlab-data-fetch"})
    try:
        return urllib.request.urlopen(request, timeout=60)  # noqa: S310 - scheme checked above
    except urllib.error.HTTPError as exc:
        raise BadInputError(f"{url}: download failed: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BadInputError(f"{url}: download failed: {reason}") from exc


@contextlib.contextmanager
def _temporary(target: Path) -> Iterator[Path]:
    """A temporary sibling of ``target``, removed unless it was renamed over ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _download(url: str, dest: Path, label: str, expected: int | None,
              progress: Progress | None) -> tuple[str, int]:
    """Stream ``url`` into ``dest``; return the sha256 and length of what arrived."""
    h, n = hashlib.sha256(), 0
    with _open(url) as response, open(dest, "wb") as out:
        total = expected or (int(response.headers["Content-Length"])
                             if response.headers.get("Content-Length", "").isdigit() else None)
        try:
            while chunk := response.read(_CHUNK):
                h.update(chunk)
                out.write(chunk)
                n += len(chunk)
                if progress:
                    progress(label, total, n)
        except OSError as exc:
            raise BadInputError(f"{url}: download cut off after {n} bytes: {exc}") from exc
        out.flush()
        os.fsync(out.fileno())
    return h.hexdigest(), n


def _compress(src: Path, dest: Path) -> None:
    with open(src, "rb") as plain, open(dest, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
            while chunk := plain.read(_CHUNK):
                gz.write(chunk)
        raw.flush()
        os.fsync(raw.fileno())


def fetch_file(ds: DataSet, f: DataFile, root: Path, *, url: str | None = None,
               mirror: str | None = None, sha256: str | None = None, unverified: bool = False,
               progress: Progress | None = None) -> Path:
    """Download one file, check its sha256, then rename it into place (atomic)."""
    expected = (sha256 or f.sha256).lower()
    if expected == UNKNOWN and not unverified:
        raise ConfigError(f"{ds.name}/{f.name}: no known sha256; pass --sha256 HEX from a source "
                          "you trust, or --unverified", field="sha256")
    source = _source(ds, f, url, mirror)
    target = ds.path(f, root)
    fresh = not target.parent.exists()
    try:
        return _fetch_into(target, f, source, expected, progress)
    except BaseException:
        if fresh:  # a failed fetch leaves no empty folder behind either
            with contextlib.suppress(OSError):
                target.parent.rmdir()
        raise


def _fetch_into(target: Path, f: DataFile, source: str, expected: str,
                progress: Progress | None) -> Path:
    with _temporary(target) as tmp:
        digest, length = _download(source, tmp, f.name, None if f.gzip else f.size, progress)
        packed = f.gzip and _is_gzip(tmp)  # a mirror of a data dir serves the stored .gz
        if packed:
            digest, length = _digest(tmp, gz=True)
        if expected != UNKNOWN and digest != expected:
            raise BadInputError(f"{source}: sha256 mismatch: expected {expected[:12]}..., "
                                f"got {digest[:12]}... ({length} bytes); nothing written")
        if f.gzip and not packed:
            with _temporary(target) as compressed:
                _compress(tmp, compressed)
                os.replace(compressed, target)
        else:
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
    return target


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == b"\x1f\x8b"


def fetch(ds: DataSet, root: Path, *, url: str | None = None, mirror: str | None = None,
          sha256: str | None = None, unverified: bool = False,
          progress: Progress | None = None) -> list[tuple[DataFile, Path, str]]:
    """Fetch every file of ``ds`` that is not already here and correct.

    ``url`` and ``sha256`` override a one-file data set's; ``mirror`` is a base URL serving
    ``<folder>/<name>`` (a copy of a data directory). Returns ``(file, path, 'fetched' |
    'present')`` per file.
    """
    if (url or sha256) and len(ds.files) != 1:
        raise ConfigError(f"--url/--sha256 name one file, and {ds.name} has {len(ds.files)}; "
                          "use --mirror BASE_URL", field="url" if url else "sha256")
    done = []
    by_name = {c.file: c for c in verify(ds, root)}
    for f in ds.files:
        if by_name[f.name].status == "ok":
            done.append((f, ds.path(f, root), "present"))
            continue
        path = fetch_file(ds, f, root, url=url, mirror=mirror, sha256=sha256,
                          unverified=unverified, progress=progress)
        done.append((f, path, "fetched"))
    return done
