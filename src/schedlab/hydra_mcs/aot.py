"""The search kernel compiled ahead of time, so that ``solve`` never imports Numba.

Why: on a 20-vertex pair the search takes ~17 ms, but a process that calls a cached
``@njit(cache=True)`` kernel first pays ~0.3 s to import Numba and ~0.4 s the first time the
dispatcher runs (Numba's CPU target imports all its lowering modules, SciPy's BLAS check
included). ``numba.pycc`` compiles the *same* Python source (``kernel.search``, with the
signature below) into a plain CPython extension module that needs only NumPy at load time.

* The module is built on first use (or by ``schedlab hydra-mcs build``) into a per-user cache,
  ``$SCHEDLAB_HYDRA_MCS_CACHE``, else ``$XDG_CACHE_HOME/schedlab/hydra_mcs`` (``~/.cache/...``),
  under a name keyed by the kernel's source, this file, Python, NumPy, Numba and the host CPU;
  so an edited kernel or an upgraded Numba gets a fresh build, and nothing is ever stale.
* The build runs in a child process (its Numba import stays out of the caller), into a private
  temporary folder, smoke-tested against the JIT kernel there, then renamed into place
  (atomic); an ``flock`` makes concurrent builders wait for the first instead of racing.
* Code is generated for the host CPU and its features (as Numba's JIT does), and the wrapper
  releases the GIL (as ``nogil=True`` does), so threads run it in parallel.
* A failed build leaves a ``.failed`` note (not retried until the key changes or ``build`` is
  run again); ``solve`` then uses the JIT kernel and says so in one line on stderr.

``$SCHEDLAB_HYDRA_MCS_KERNEL``: ``auto`` (default: AOT, else JIT), ``aot`` (fail if it cannot
be built) or ``jit`` (never build, always Numba's dispatcher).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from schedlab.core.errors import ConfigError, MissingDependencyError

KIND_ENV = "SCHEDLAB_HYDRA_MCS_KERNEL"
CACHE_ENV = "SCHEDLAB_HYDRA_MCS_CACHE"
KINDS = ("auto", "aot", "jit")
BUILD_TIMEOUT_S = 900
_HERE = Path(__file__).resolve().parent
_SOURCES = ("kernel.py", "learned.py", "layout.py", "aot.py", "aotbuild.py")
# (name, dtype, ndim) of every argument of kernel.search, in order; all C-contiguous
ARGS = (
    ("nb0", "uint64", 3),
    ("nb1", "uint64", 3),
    ("any0", "uint64", 2),
    ("any1", "uint64", 2),
    ("al", "uint64", 2),
    ("ar", "uint64", 2),
    ("alc", "int32", 1),
    ("arc", "int32", 1),
    ("aadj", "uint8", 1),
    ("alin", "int64", 1),
    ("lev", "int64", 2),
    ("cur_v", "int64", 1),
    ("cur_w", "int64", 1),
    ("best_v", "int64", 1),
    ("best_w", "int64", 1),
    ("ctl", "int64", 1),
    ("params", "int64", 1),
    ("shared", "int64", 1),
    ("band", "float64", 1),
    ("trace", "float64", 2),
    ("obuf_l", "uint64", 2),
    ("obuf_r", "uint64", 2),
    ("obuf_cnt", "int32", 2),
    ("obuf_meta", "int64", 2),
    ("obuf_map", "int64", 3),
)
# the same for learned.search_learned (McSplit+RL / McSplitDAL branching)
LEARNED_ARGS = (
    *(a for a in ARGS[:9]),
    *(a for a in ARGS[10:18]),
    ("vscore", "float64", 1),
    ("wscore", "float64", 2),
    ("todo", "uint64", 2),
    ("learn", "float64", 1),
    ("log", "int32", 1),
)


_RETRY = "needs a C compiler and setuptools; `schedlab hydra-mcs build` retries"


class AotUnavailable(MissingDependencyError):
    """The ahead-of-time kernel could not be built or loaded here."""


def signature(args: tuple = ARGS) -> str:
    """The Numba signature a kernel is exported with (C-contiguous arrays, int64 status)."""
    arrays = (f"{dt}[{', '.join([':'] * (nd - 1) + ['::1'])}]" for _, dt, nd in args)
    return f"int64({', '.join(arrays)})"


def cache_dir() -> Path:
    """$SCHEDLAB_HYDRA_MCS_CACHE, else $XDG_CACHE_HOME/schedlab/hydra_mcs (~/.cache/...)."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "schedlab" / "hydra_mcs"


def _host_cpu() -> bytes:
    """What the generated code depends on: the CPU model and its feature flags."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        import platform

        return f"{platform.machine()} {platform.processor()}".encode()
    first = text.split("\n\n", 1)[0]
    keep = ("vendor_id", "cpu family", "model", "flags", "Features", "CPU part")
    return "\n".join(ln for ln in first.splitlines() if ln.startswith(keep)).encode()


def _numba_version() -> bytes:
    """Numba's version file, read without importing Numba (b'' when it is not installed)."""
    import importlib.util

    spec = importlib.util.find_spec("numba")
    if spec is None or spec.origin is None:
        return b""
    try:
        return (Path(spec.origin).parent / "_version.py").read_bytes()
    except OSError:
        return spec.origin.encode()


@functools.cache
def cache_key() -> str:
    """16 hex digits naming the build: sources, interpreter, NumPy, Numba, host CPU."""
    import numpy as np

    h = _hasher()
    for name in _SOURCES:
        h.update((_HERE / name).read_bytes())
    for part in (
        sys.version.encode(),
        sys.prefix.encode(),
        _suffix().encode(),
        np.__version__.encode(),
        _numba_version(),
        _host_cpu(),
        os.environ.get("NUMBA_CPU_NAME", "").encode(),
        os.environ.get("NUMBA_CPU_FEATURES", "").encode(),
    ):
        h.update(b"\0" + part)
    return h.hexdigest()[:16]


def _hasher():
    """BLAKE2b from its own small module: ``hashlib`` loads OpenSSL (~0.01-0.03 s a call)."""
    try:
        from _blake2 import blake2b
    except ImportError:  # an interpreter built without it
        from hashlib import blake2b
    return blake2b(digest_size=32)


def _suffix() -> str:
    import importlib.machinery

    return importlib.machinery.EXTENSION_SUFFIXES[0]


def module_path(key: str | None = None) -> Path:
    """Where the compiled module for this environment lives (whether or not it is built)."""
    key = key or cache_key()
    return cache_dir() / f"hmk_{key}{_suffix()}"


def _failed_path(target: Path) -> Path:
    return target.with_name(target.name.split(".", 1)[0] + ".failed")


@contextmanager
def _locked(path: Path):
    try:
        import fcntl
    except ImportError:  # no flock: concurrent builders each build, the renames stay atomic
        yield
        return
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        os.utime(path)  # "in use": _prune leaves recently used lock files alone
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _build_command(out_dir: Path, name: str) -> list[str]:
    return [sys.executable, "-m", "schedlab.hydra_mcs.aotbuild", str(out_dir), name]


def build(force: bool = False) -> Path:
    """Compile the kernel into the cache (no-op when already there); returns the module path.

    Raises :class:`AotUnavailable` (and leaves a ``.failed`` note) when it cannot be built.
    """
    import shutil
    import subprocess
    import tempfile

    target = module_path()
    failed = _failed_path(target)
    if target.is_file() and not force:
        return target
    name = target.name.split(".", 1)[0]
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AotUnavailable(
            f"cannot create the kernel cache {target.parent}: {exc}", field=CACHE_ENV
        ) from exc
    with _locked(target.with_name(name + ".lock")):
        if target.is_file() and not force:  # another process built it while we waited
            return target
        tmp = Path(tempfile.mkdtemp(prefix=name + ".", dir=target.parent))
        try:
            try:
                # the child must never try to build (or wait on this lock) itself: JIT there
                env = {**os.environ, KIND_ENV: "jit"}
                done = subprocess.run(
                    _build_command(tmp, name),
                    capture_output=True,
                    text=True,
                    timeout=BUILD_TIMEOUT_S,
                    check=False,
                    env=env,
                )
                built = sorted(tmp.glob(name + ".*"))
                ok = done.returncode == 0 and len(built) == 1
                lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
                why = lines[-1] if lines else f"exit status {done.returncode}"
            except (OSError, subprocess.TimeoutExpired) as exc:
                ok, why, built = False, f"{type(exc).__name__}: {exc}", []
            if not ok:
                note = f"building the ahead-of-time kernel failed: {why}"
                failed.write_text(note + "\n")
                raise AotUnavailable(note, hint=_RETRY)
            os.replace(built[0], target)
            failed.unlink(missing_ok=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    _prune(target.parent, keep=name)
    return target


def _prune(folder: Path, keep: str, stale_s: float = 3600.0) -> None:
    """Remove what killed builds left behind: temporary folders, and other keys' lock files,
    untouched for an hour (built modules of other keys stay: another venv may use them)."""
    import shutil
    import time

    now = time.time()
    for p in folder.glob("hmk_*"):
        try:
            old = now - p.stat().st_mtime > stale_s
            if old and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif old and p.suffix == ".lock" and p.stem != keep:
                p.unlink(missing_ok=True)
        except OSError:
            pass


def load_module(name: str, path: Path):
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def load(build_if_missing: bool = True, name_in_module: str = "search") -> Callable[..., int]:
    """The compiled ``search`` (or ``search_learned``), building the module first if allowed
    and not known to fail."""
    target = module_path()
    if not target.is_file():
        failed = _failed_path(target)
        if failed.is_file():
            raise AotUnavailable(failed.read_text().strip(), hint=_RETRY)
        if not build_if_missing:
            raise AotUnavailable(
                f"not built yet ({target})", hint="`schedlab hydra-mcs build` builds it"
            )
        build()
    name = target.name.split(".", 1)[0]
    try:
        return getattr(load_module(name, target), name_in_module)
    except (ImportError, OSError, AttributeError) as exc:
        if not build_if_missing:
            raise AotUnavailable(
                f"cannot load {target}: {exc}",
                hint="`schedlab hydra-mcs build --force` rebuilds it",
            ) from exc
        first = exc
    # a damaged cache file (truncated copy, full disk, foreign file): rebuild it once
    print(f"hydra-mcs: cannot load {target} ({first}); rebuilding it", file=sys.stderr)
    build(force=True)
    try:
        return getattr(load_module(name, target), name_in_module)
    except (ImportError, OSError, AttributeError) as exc:
        raise AotUnavailable(
            f"cannot load {target}: {exc}", hint="`schedlab hydra-mcs build --force` rebuilds it"
        ) from exc


def args_ok(args: tuple, specs: tuple = ARGS) -> bool:
    """Whether ``args`` match the exported signature (the compiled wrapper only checks item
    sizes, so a wrong dtype or a non-contiguous view must never reach it)."""
    if len(args) != len(specs):
        return False
    for a, (_, dt, nd) in zip(args, specs, strict=True):
        flags = getattr(a, "flags", None)
        if (
            flags is None
            or a.ndim != nd
            or a.dtype.name != dt
            or not flags.c_contiguous
            or not flags.writeable
        ):
            return False
    return True


_CHOSEN: dict[str, tuple[str, Callable[..., int]]] = {}


def _jit() -> Callable[..., int]:
    from schedlab.hydra_mcs.kernel import search

    return search


def search_function() -> tuple[str, Callable[..., int]]:
    """``(kind, search)`` per ``$SCHEDLAB_HYDRA_MCS_KERNEL``; decided once per process."""
    kind = os.environ.get(KIND_ENV, "auto").strip().lower() or "auto"
    if kind not in KINDS:
        raise ConfigError(f"must be one of {', '.join(KINDS)}, got {kind!r}", field=KIND_ENV)
    if kind in _CHOSEN:
        return _CHOSEN[kind]
    if kind == "jit":
        chosen = ("jit", _jit())
    else:
        try:
            chosen = ("aot", load())
        except AotUnavailable as exc:
            if kind == "aot":
                raise
            print(f"hydra-mcs: {exc}; using the Numba JIT kernel", file=sys.stderr)
            chosen = ("jit", _jit())
    _CHOSEN[kind] = chosen
    return chosen


def search_function_w1() -> tuple[str, Callable[..., int]]:
    """``(kind, search_w1)``: ``search`` compiled for one 64-bit word per bitset (pairs of at
    most 64 vertices), from the same module as ``search_function``'s, or the JIT one."""
    kind, _ = search_function()
    key = ("w1", kind)
    if key not in _CHOSEN:
        if kind == "aot":
            _CHOSEN[key] = ("aot", load(name_in_module="search_w1"))
        else:
            from schedlab.hydra_mcs.kernel import search_w1

            _CHOSEN[key] = ("jit", search_w1)
    return _CHOSEN[key]


def learned_function() -> tuple[str, Callable[..., int]]:
    """``(kind, search_learned)``: the compiled one when ``search_function`` chose the AOT
    module, else the JIT one (same rules, same module)."""
    kind, _ = search_function()
    if kind == "aot":
        try:
            return "aot", load(name_in_module="search_learned")
        except AotUnavailable:
            pass
    from schedlab.hydra_mcs.learned import search_learned

    return "jit", search_learned


def jit_search() -> Callable[..., int]:
    """The Numba JIT kernel (for arguments the compiled signature does not take)."""
    return _jit()
