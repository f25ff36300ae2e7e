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
def _redis(url: str | None) -> Iterator[str]:
    from schedlab.arcus.store import RedisServer, connect

    if url:
        connect(url).close()  # unreachable -> MissingServiceError with a hint
        yield url
        return
    with RedisServer() as server:
        yield server.url


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
    from schedlab.arcus.policies import PROTOCOLS

    rows = [dict(name=n, exactly_once=c.exactly_once, description=c.description)
            for n, c in PROTOCOLS.items()]
    if json_out:
        emit_json(rows)
        return
    for row in rows:
        out_console.print(f"[bold]{row['name']:9s}[/bold] {row['description']}")


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
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Run a workload under one protocol: latency, log volume, hit rate, exactly-once counts."""
    from schedlab.arcus.bench import checked_reference, run_bench
    from schedlab.arcus.platform import Platform
    from schedlab.arcus.policies import protocol_class
    from schedlab.arcus.workloads import make_workload, read_requests

    protocol_class(protocol)
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
    with _redis(redis_url) as url, Platform(url, workers=workers) as running:
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


@app.command()
@handle_errors
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Bind address (loopback by default)."),
    port: int = typer.Option(8080, "--port", min=1, max=65535),
    workers: int = typer.Option(4, "--workers", min=2, help="Worker processes."),
    redis_url: str = typer.Option(None, "--redis-url", help="Use this Redis (default: private)."),
    duration: float = typer.Option(0.0, "--duration", min=0.0,
                                   help="Stop after this many seconds (0: until Ctrl-C)."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON summary at exit."),
) -> None:
    """Run the gateway (HTTP: POST /invoke/{fn}) with its workers until Ctrl-C or --duration."""
    import threading

    import uvicorn

    from schedlab.arcus.gateway import make_app
    from schedlab.arcus.platform import Platform

    _check_bind(host, port)
    with _redis(redis_url) as url, Platform(url, workers=workers) as running:
        server = uvicorn.Server(uvicorn.Config(make_app(running), host=host, port=port,
                                               log_level="warning"))
        if duration > 0:
            threading.Timer(duration, lambda: setattr(server, "should_exit", True)).start()
        err_console.print(f"arcus gateway on http://{host}:{port} (redis {url})")
        server.run()
        summary = dict(crashes=running.crashes, workers=workers, redis=url)
    if json_out:
        emit_json(summary)
