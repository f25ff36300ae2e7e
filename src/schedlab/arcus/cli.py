"""``schedlab arcus ...``: serve the platform over HTTP, benchmark a protocol, list protocols.

Arcus (paper 12): exactly-once, low-latency function state I/O. Without ``--redis-url`` every
command starts a private redis-server on a free loopback port and stops it afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import typer

from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console

app = typer.Typer(help="Arcus: exactly-once, low-latency state I/O for stateful serverless.",
                  no_args_is_help=True)


@contextlib.contextmanager
def _redis(url: str | None, aof: str = "off", data_dir: Path | None = None,
           watch: bool = False) -> Iterator[str]:
    """The given Redis, or a private one (``watch``: restarted on the same port if it dies)."""
    import threading

    from schedlab.arcus.store import RedisServer, connect

    if url:
        connect(url).close()  # unreachable -> MissingServiceError with a hint
        yield url
        return
    server = RedisServer(aof=aof, data_dir=data_dir, die_with_parent=watch).start()
    stop = threading.Event()

    def watchdog() -> None:
        while not stop.wait(0.2):
            if not server.alive() and not stop.is_set():
                err_console.print("redis-server died; restarting it"
                                  + (" (reloading the AOF)" if aof != "off" else ""))
                with contextlib.suppress(Exception):
                    server.restart()

    thread = threading.Thread(target=watchdog, daemon=True, name="redis-watchdog")
    if watch:
        thread.start()
    try:
        yield server.url
    finally:
        stop.set()
        if watch:
            thread.join(timeout=2)
        server.stop()


def _check_bind(host: str, port: int) -> None:
    """A bad --host or a port in use is a one-line error, not uvicorn's exit code 3."""
    import socket

    from schedlab.core.errors import ConfigError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(f"cannot resolve '{host}': {exc}", field="host") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                              field="port") from None


@app.command()
@handle_errors
def protocols(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the state-I/O protocols (Arcus and the baselines)."""
    from schedlab.arcus.policies import PROTOCOLS, VARIANTS

    rows = [dict(name=n, exactly_once=c.exactly_once, description=c.description)
            for n, c in {**PROTOCOLS, **VARIANTS}.items()]
    if json_out:
        emit_json(rows)
        return
    for row in rows:
        out_console.print(f"[bold]{row['name']:12s}[/bold] {row['description']}")


@app.command()
@handle_errors
def bench(
    workload: str = typer.Option("rw", "--workload", help="single-read, single-write, rw, "
                                 "hotel, movie, retwis, ledger"),
    protocol: str = typer.Option("arcus", "--protocol", help="see `schedlab arcus protocols`"),
    crash_rate: float = typer.Option(0.0, "--crash-rate", help="P(SIGKILL) per crash point."),
    requests: int = typer.Option(50, "--requests", min=1, help="Requests to issue."),
    requests_file: Path = typer.Option(None, "--requests-file",
                                       help="JSON lines {fn, arg} instead of --workload."),
    read_ratio: float = typer.Option(0.5, "--read-ratio", help="rw workload: share of reads."),
    rtt_ms: float = typer.Option(0.0, "--rtt-ms", min=0.0, help="Injected storage RTT (ms)."),
    workers: int = typer.Option(4, "--workers", min=2, help="Worker processes."),
    seed: int = typer.Option(0, "--seed", help="Workload and crash seed."),
    redis_url: str = typer.Option(None, "--redis-url", help="Use this Redis (default: private)."),
    module: list[str] = typer.Option([], "--module", "-m",
                                     help="Module (dotted name or file.py) with your @function "
                                          "definitions (for --requests-file); repeatable."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Run a workload under one protocol: latency, log volume, hit rate, exactly-once counts."""
    from schedlab.arcus.bench import checked_reference, run_bench
    from schedlab.arcus.platform import Platform, load_modules
    from schedlab.arcus.policies import protocol_class
    from schedlab.arcus.workloads import make_workload, read_requests

    protocol_class(protocol)
    modules, paths = load_modules(module)
    if not 0.0 <= crash_rate < 1.0:
        from schedlab.core.errors import ConfigError

        raise ConfigError("must be in [0, 1)", field="crash-rate")
    chosen = (read_requests(requests_file) if requests_file is not None
              else make_workload(workload, requests, seed, read_ratio=read_ratio))
    if requests_file is not None:  # reject ill-fitting arguments before starting any process
        from schedlab.core.errors import BadInputError

        try:
            checked_reference(chosen)
        except BadInputError as exc:
            raise BadInputError(exc.message, path=requests_file, field=exc.field) from None
    with _redis(redis_url) as url, Platform(url, workers=workers, modules=modules,
                                            paths=paths) as running:
        err_console.print(f"running {len(chosen.requests)} '{chosen.name}' requests "
                          f"under {protocol} ...")
        result = run_bench(running, chosen, protocol, rtt_ms=rtt_ms, crash_rate=crash_rate,
                           seed=seed)
    if json_out:
        emit_json(result)
        return
    for key, value in result.items():
        shown = f"{value:.2f}" if isinstance(value, float) else str(value)
        out_console.print(f"{key:24s} {shown}")


def _serve_signals(server: object) -> list[int]:
    """Ctrl-C and SIGTERM stop the HTTP server gracefully, then ``serve`` tears everything down.

    uvicorn re-raises a captured signal after its own shutdown, which would kill this process
    before the platform's workers and the private redis-server are stopped (orphans); here the
    signal only ends the server loop and is remembered, so every child is reaped first.
    """
    import signal
    import threading

    received: list[int] = []

    @contextlib.contextmanager
    def capture() -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(sig: int, frame: object) -> None:
            received.append(sig)
            server.should_exit = True  # type: ignore[attr-defined]
            if len(received) > 1:
                server.force_exit = True  # type: ignore[attr-defined]

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    server.capture_signals = capture  # type: ignore[attr-defined]
    return received


def _loopback(host: str) -> bool:
    import ipaddress
    import socket

    try:
        return all(ipaddress.ip_address(info[4][0]).is_loopback
                   for info in socket.getaddrinfo(host, None))
    except (OSError, ValueError, UnicodeError):
        return False


def _generate_token() -> tuple[tuple[str, ...], Path]:
    """A random bearer token, written (mode 0600, atomically) to a file only this user reads."""
    import os
    import secrets
    import tempfile

    token = secrets.token_urlsafe(32)
    folder = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
    fd, tmp = tempfile.mkstemp(prefix=".arcus-token-", dir=folder)
    with os.fdopen(fd, "w") as handle:  # mkstemp creates it 0600
        handle.write(token + "\n")
    path = folder / f"arcus-token-{os.getpid()}"
    os.replace(tmp, path)
    return (token,), path


@app.command()
@handle_errors
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Bind address (loopback by default)."),
    port: int = typer.Option(8080, "--port", min=1, max=65535),
    workers: int = typer.Option(4, "--workers", min=2, help="Worker processes."),
    module: list[str] = typer.Option([], "--module", "-m",
                                     help="Module (dotted name or file.py) with your @function "
                                          "definitions; repeatable."),
    redis_url: str = typer.Option(None, "--redis-url", help="Use this Redis (default: private)."),
    aof: str = typer.Option("always", "--aof", help="Private Redis persistence: always, "
                            "everysec or off (append-only file fsync policy)."),
    data_dir: Path = typer.Option(None, "--data-dir", help="Keep the private Redis's files "
                                  "here (default: a temporary directory, removed at exit)."),
    name: str = typer.Option("arcus", "--name", help="Platform name (Redis key prefix); a "
                             "restarted gateway with the same name redelivers what was left."),
    retention: float = typer.Option(3600.0, "--retention", min=0.0,
                                    help="Seconds to keep finished instances' logs "
                                         "(>= --lease); a keyed request's answer is kept "
                                         "max(this, 1 day) longer."),
    lease: float = typer.Option(5.0, "--lease", min=0.1, help="Worker lease (s): in-flight "
                                "messages of a worker silent this long are redelivered."),
    duration: float = typer.Option(0.0, "--duration", min=0.0,
                                   help="Stop after this many seconds (0: until Ctrl-C)."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON summary at exit."),
    demo: bool = typer.Option(False, "--demo", help="Also expose the built-in demo functions "
                              "(read, write, bank_*, hotel_*...): for trying Arcus out only."),
    token_file: Path = typer.Option(None, "--token-file", help="Bearer tokens, one per line "
                                    "(per-client tokens); default: one is generated and its "
                                    "file printed."),
    no_auth: bool = typer.Option(False, "--no-auth", help="No bearer token (loopback only)."),
) -> None:
    """Run the HTTP gateway (POST /invoke/{fn}, /submit/{fn}; GET /status/{id}) and workers.

    Runs until Ctrl-C, SIGTERM or --duration; every child (workers, private redis-server) is
    stopped at exit."""
    import threading

    import uvicorn

    from schedlab.arcus.gateway import make_app, read_tokens
    from schedlab.arcus.platform import (
        Platform,
        check_retention,
        functions_of,
        load_modules,
    )
    from schedlab.arcus.store import AOF_MODES
    from schedlab.core.errors import ConfigError

    if aof not in AOF_MODES:
        raise ConfigError(f"unknown AOF mode '{aof}'; valid: {', '.join(AOF_MODES)}",
                          field="aof")
    if not name or any(c in name for c in ":| "):
        raise ConfigError("a platform name has no ':', '|' or spaces", field="name")
    check_retention(retention, lease)
    if no_auth and token_file is not None:
        raise ConfigError("give --token-file or --no-auth, not both", field="no-auth")
    if no_auth and not _loopback(host):
        raise ConfigError(f"--no-auth on {host}: anyone who reaches the port could run your "
                          "functions; bind 127.0.0.1 or give --token-file", field="host")
    if not module and not demo:
        raise ConfigError("nothing to serve: give --module my_app (your functions) or --demo "
                          "(the built-in demos)", field="module")
    tokens = read_tokens(token_file) if token_file is not None else ()
    _check_bind(host, port)
    modules, paths = load_modules(module)
    exposed = None if demo else functions_of(modules)
    if exposed == ():
        raise ConfigError(f"module(s) {', '.join(modules)} define no @function", field="module")
    generated = None
    if not tokens and not no_auth:
        tokens, generated = _generate_token()
    with _redis(redis_url, aof, data_dir, watch=True) as url, \
            Platform(url, workers=workers, modules=modules, paths=paths, name=name,
                     retention_s=retention, lease_s=lease, functions=exposed) as running:
        server = uvicorn.Server(uvicorn.Config(make_app(running, tokens), host=host, port=port,
                                               log_level="warning"))
        received = _serve_signals(server)
        if duration > 0:
            timer = threading.Timer(duration, lambda: setattr(server, "should_exit", True))
            timer.daemon = True
            timer.start()
        persistence = f"AOF {aof}" if not redis_url else "external"
        shown = ", ".join(running.functions) if running.functions is not None else "all, demos"
        auth = ("no authentication" if not tokens else
                f"bearer token in {generated}" if generated else
                f"{len(tokens)} bearer token(s) from {token_file}")
        err_console.print(f"arcus gateway on http://{host}:{port} (redis {url}, {persistence}; "
                          f"functions: {shown}; {auth})")
        server.run()
        summary = dict(crashes=running.crashes, redelivered=running.redelivered,
                       workers=workers, redis=url, signal=received[0] if received else None)
    if json_out:
        emit_json(summary)
