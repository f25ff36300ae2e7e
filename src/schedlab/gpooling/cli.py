"""``schedlab gpooling ...``: serve the control plane, manage virtual devices, run jobs in them,
replay traces, and run on Kubernetes (``device-plugin``, ``extender``).

gPooling (../shared/papers/14-gpooling.md). Every command is one library call; ``--json`` prints
exactly one JSON document on stdout. Heavy imports (uvicorn, httpx) happen inside commands.
"""

from __future__ import annotations

from pathlib import Path

import typer

from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console
from schedlab.core.errors import BadInputError

app = typer.Typer(help="gPooling: elastic virtual accelerators by driver-level interception.",
                  no_args_is_help=True, add_completion=False)

SERVER = typer.Option("http://127.0.0.1:8470", "--server", help="Control plane URL.")
TOKEN = typer.Option(None, "--token", envvar="GPOOLING_TOKEN",
                     help="Bearer token of your tenant (or $GPOOLING_TOKEN).")
JSON = typer.Option(False, "--json", help="Print JSON.")


def _plane(server: str, token: str | None):
    from schedlab.gpooling.agent import ControlPlane

    return ControlPlane(server, token=token)


def _show(document: dict | list, json_out: bool, columns: list[str] | None = None) -> None:
    if json_out:
        emit_json(document)
        return
    rows = document if isinstance(document, list) else [document]
    if not rows:
        out_console.print("(none)")
        return
    from rich.table import Table

    columns = columns or [k for k in rows[0] if not isinstance(rows[0][k], dict | list)]
    table = Table(*columns)
    for row in rows:
        table.add_row(*(f"{row.get(c):.4g}" if isinstance(row.get(c), float) else str(row.get(c))
                        for c in columns))
    out_console.print(table)


@app.command()
@handle_errors
def serve(
    inventory: str = typer.Option(None, "--inventory",
                                  help="'T4:2,V100M32:4' or a node-list CSV (default: discover)."),
    policy: str = typer.Option("frag-aware", "--policy", help="Placement policy."),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8470, "--port"),
    runtime_dir: Path = typer.Option(None, "--runtime-dir", help="Where usage regions live."),
    tokens: Path = typer.Option(None, "--tokens",
                                help="Tenants' tokens: JSON {tenant: token} or lines 'tenant "
                                     "token'. Default: one new token for tenant 'default', "
                                     "written to RUNTIME_DIR/token (mode 0600)."),
) -> None:
    """Run the control plane's HTTP API until interrupted (every request needs a token)."""
    import uvicorn

    from schedlab.gpooling.api import create_app, new_token, read_tokens
    from schedlab.gpooling.devices import discover
    from schedlab.gpooling.pool import Pool

    known = read_tokens(tokens) if tokens is not None else None
    devices = discover(inventory)
    if not devices:
        raise BadInputError("no accelerators found; pass --inventory, e.g. 'T4:2,A10:1'",
                            field="inventory")
    pool = Pool(devices, policy, runtime_dir)
    if known is None:
        import os

        token = new_token()
        path = pool.runtime_dir / "token"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(token + "\n")
        known = {token: "default"}
        err_console.print(f"tenant 'default': token in {path} "
                          f"(export GPOOLING_TOKEN=$(cat {path}))")
    err_console.print(f"gPooling control plane: {len(devices)} devices, policy {policy}, "
                      f"{len(set(known.values()))} tenant(s), regions in {pool.runtime_dir}, "
                      f"http://{host}:{port}")
    uvicorn.run(create_app(pool, known), host=host, port=port, log_level="warning")


# --- Kubernetes: the kubelet device plugin (kubernetes.py) and the scheduler extender (extender.py)
def _config(config: Path | None, **overrides):
    from schedlab.gpooling.kubernetes import PluginConfig, load_config

    settings = load_config(config) if config is not None else PluginConfig()
    for key, value in overrides.items():
        if value is not None:
            setattr(settings, key, value)
    return settings.validate(config)


@app.command("device-plugin")
@handle_errors
def device_plugin(
    socket_dir: Path = typer.Option(Path("/var/lib/kubelet/device-plugins"), "--socket-dir",
                                    help="The kubelet's device-plugin directory."),
    config: Path = typer.Option(None, "--config",
                                help="TOML or JSON settings (see kubernetes.PluginConfig)."),
    inventory: str = typer.Option(None, "--inventory",
                                  help="'T4:2' or a node-list CSV (default: discover)."),
    node: str = typer.Option(None, "--node", help="Only this node's devices of the inventory."),
    split: int = typer.Option(None, "--split", help="Slots per GPU (default 10)."),
    resource: str = typer.Option(None, "--resource", help="Extended resource (gpooling.io/vgpu)."),
    runtime_dir: str = typer.Option(None, "--runtime-dir",
                                    help="Host directory for usage regions and limits files."),
    kubelet_socket: Path = typer.Option(None, "--kubelet-socket",
                                        help="Default: <socket-dir>/kubelet.sock."),
    extender_port: int = typer.Option(None, "--extender-port",
                                      help="Also serve the scheduler extender on 127.0.0.1 "
                                           "over this node's live pool."),
) -> None:
    """Kubernetes device plugin (kubelet API v1beta1): register, then serve until stopped."""
    import signal
    import threading

    from schedlab.gpooling.kubernetes import PluginServer, check_socket_dir, plugin_from_config

    settings = _config(config, inventory=inventory, node=node, split=split, resource=resource,
                       runtime_dir=runtime_dir)
    check_socket_dir(socket_dir, settings.socket_name)  # before building anything
    plugin = plugin_from_config(settings)
    server = PluginServer(plugin, socket_dir, kubelet_socket).start()
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        if extender_port is not None:
            _serve_in_thread(plugin.pool, settings, "127.0.0.1", extender_port)
        server.serve_forever(stop, on_register=_announce)
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.stop()
    err_console.print("gPooling device plugin stopped")


def _announce(server) -> None:
    plugin = server.plugin
    err_console.print(f"gPooling device plugin: {len(plugin.devices)} GPU(s) x "
                      f"{plugin.config.split} slots of {plugin.config.resource}, served on "
                      f"{server.path}, registered with the kubelet ({server.registrations})")


def _listen(host: str, port: int):
    """A bound TCP socket for uvicorn, or a one-line error (port taken, bad host)."""
    import socket

    if not 0 < port < 65536:
        raise BadInputError(f"must be in 1..65535, got {port}", field="port")
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
    except OSError as exc:
        raise BadInputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                            field="port") from None
    return sock


def _extender_server(pool, settings, host: str, port: int):
    import uvicorn

    from schedlab.gpooling.extender import create_extender_app

    sock = _listen(host, port)
    app_ = create_extender_app(pool, settings.split, settings.resource)
    return uvicorn.Server(uvicorn.Config(app_, log_level="warning")), sock


def _serve_in_thread(pool, settings, host: str, port: int) -> None:
    import threading

    server, sock = _extender_server(pool, settings, host, port)
    threading.Thread(target=server.run, kwargs=dict(sockets=[sock]), daemon=True,
                     name="gpooling-extender").start()


@app.command()
@handle_errors
def extender(
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8471, "--port"),
    config: Path = typer.Option(None, "--config",
                                help="The device plugin's TOML/JSON (inventory, split, resource)."),
    inventory: str = typer.Option(None, "--inventory",
                                  help="'node-a=T4:2;node-b=A100:8' or a node-list CSV "
                                       "(default: discover)."),
    split: int = typer.Option(None, "--split", help="Slots per GPU (default 10)."),
    resource: str = typer.Option(None, "--resource", help="Extended resource (gpooling.io/vgpu)."),
) -> None:
    """kube-scheduler extender (POST /filter, /prioritize) scoring with the frag-aware policy."""
    from schedlab.gpooling.devices import discover
    from schedlab.gpooling.pool import Pool

    settings = _config(config, inventory=inventory, split=split, resource=resource)
    devices = discover(settings.inventory)
    if not devices:
        raise BadInputError("no accelerators found; pass --inventory", field="inventory")
    pool = Pool(devices, "frag-aware", settings.runtime_dir)
    server, sock = _extender_server(pool, settings, host, port)
    err_console.print(f"gPooling scheduler extender on http://{host}:{port} "
                      f"({len(devices)} GPU(s), {settings.resource})")
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


@app.command()
@handle_errors
def create(
    memory: str = typer.Option(..., "--memory", help="Memory quota, e.g. 10GiB."),
    compute: float = typer.Option(..., "--compute", help="Compute share in (0, 1]."),
    model: str = typer.Option(None, "--model", help="Only devices of this model."),
    server: str = SERVER,
    token: str = TOKEN,
    json_out: bool = JSON,
) -> None:
    """Create a virtual device; prints its id."""
    from schedlab.gpooling.devices import parse_size

    vdev = _plane(server, token).create(parse_size(memory), compute, model)
    _show(vdev, json_out, ["id", "device", "model", "memory", "compute"])


@app.command("list")
@handle_errors
def list_vdevs(server: str = SERVER, token: str = TOKEN, json_out: bool = JSON) -> None:
    """List your virtual devices."""
    _show(_plane(server, token).list(), json_out,
          ["id", "device", "model", "memory", "compute", "state"])


@app.command()
@handle_errors
def resize(
    vdev: str = typer.Argument(..., help="Virtual device id."),
    memory: str = typer.Option(None, "--memory"),
    compute: float = typer.Option(None, "--compute"),
    force: bool = typer.Option(False, "--force",
                               help="Shrink even with processes attached (not below use)."),
    server: str = SERVER,
    token: str = TOKEN,
    json_out: bool = JSON,
) -> None:
    """Grow or shrink a virtual device in place (running jobs see the new quota at once)."""
    from schedlab.gpooling.devices import parse_size

    size = None if memory is None else parse_size(memory)
    _show(_plane(server, token).resize(vdev, size, compute, force), json_out,
          ["id", "device", "memory", "compute"])


@app.command()
@handle_errors
def release(vdev: str = typer.Argument(...),
            force: bool = typer.Option(False, "--force",
                                       help="Release with processes attached: they are told "
                                            "and stopped; capacity returns once they are gone."),
            server: str = SERVER, token: str = TOKEN, json_out: bool = JSON) -> None:
    """Release a virtual device."""
    _show(_plane(server, token).release(vdev, force), json_out, ["id", "device", "state"])


@app.command()
@handle_errors
def stats(server: str = SERVER, token: str = TOKEN, json_out: bool = JSON) -> None:
    """Pool-wide allocation and fragmentation."""
    document = _plane(server, token).stats()
    _show(document, json_out)


@app.command()
@handle_errors
def run(
    command: list[str] = typer.Argument(None, help="The command, after --."),
    vdev: str = typer.Option(..., "--vdev", help="Virtual device id."),
    server: str = SERVER,
    token: str = TOKEN,
    stand_in: bool = typer.Option(False, "--stand-in",
                                  help="Use the stand-in driver (no GPU; for testing)."),
    json_out: bool = JSON,
) -> None:
    """Run COMMAND inside a virtual device; exits with the command's exit code."""
    from schedlab.gpooling.agent import run_in_vdev
    from schedlab.gpooling.native import build

    plane = _plane(server, token)
    description = plane.get(vdev)
    if description.get("state", "active") != "active":
        raise BadInputError(f"{vdev} was released", field="vdev")
    outcome = run_in_vdev(description, command or [], build(), stand_in=stand_in,
                          report=lambda usage: plane.report(vdev, usage),
                          refresh=lambda: plane.get(vdev),
                          stdout=2 if json_out else None)  # keep our stdout one JSON document
    summary = dict(vdev=vdev, returncode=outcome.returncode, seconds=outcome.seconds,
                   revoked=outcome.revoked,
                   memory_peak=outcome.usage["memory_peak"],
                   oom_rejections=outcome.usage["oom_rejections"],
                   launches=outcome.usage["launch_calls"], busy_ns=outcome.usage["busy_ns"],
                   throttle_ns=outcome.usage["throttle_ns"])
    if json_out:
        emit_json(summary)
    else:
        err_console.print(f"{vdev}: exit {outcome.returncode}, peak memory "
                          f"{summary['memory_peak']} B, {summary['oom_rejections']} refused "
                          f"allocation(s), {summary['launches']} launches")
    if outcome.returncode:
        raise typer.Exit(outcome.returncode if outcome.returncode > 0 else 1)


@app.command()
@handle_errors
def simulate(
    trace: Path = typer.Option(None, "--trace", help="Alibaba pod-list CSV/Parquet."),
    jobs: int = typer.Option(1500, "--jobs", min=1, help="Generated jobs (without --trace)."),
    seed: int = typer.Option(0, "--seed"),
    load: float = typer.Option(0.9, "--load", help="Offered load of generated jobs."),
    inventory: str = typer.Option(None, "--inventory",
                                  help="'T4:8,A10:4' or a node-list CSV (default: mixed pool)."),
    devices: int = typer.Option(40, "--devices", min=1, help="Size of the default mixed pool."),
    policy: str = typer.Option("all", "--policy", help="A policy name or 'all'."),
    time_scale: float = typer.Option(1.0, "--time-scale", help="Compress trace arrivals."),
    limit: int = typer.Option(None, "--limit", help="First N GPU pods of the trace."),
    memory_per_gpu: str = typer.Option("16GiB", "--memory-per-gpu",
                                       help="Memory of a 1000-milli pod (trace has none)."),
    out: Path = typer.Option(None, "--out", help="Also write the table (.csv/.parquet)."),
    json_out: bool = JSON,
) -> None:
    """Replay a trace (or a generated one) under placement policies; compare the metrics."""
    from schedlab.gpooling.simulation import compare

    frame = compare(trace=trace, jobs=jobs, seed=seed, load=load, inventory=inventory,
                    devices=devices, policy=policy, time_scale=time_scale, limit=limit,
                    memory_per_gpu=memory_per_gpu, out=out)
    _show(frame.to_dicts(), json_out)


@app.command()
@handle_errors
def inflate(
    trace: Path = typer.Option(..., "--trace", help="Alibaba gpu2023 pod list (CSV/Parquet)."),
    nodes: Path = typer.Option(..., "--nodes", help="Alibaba gpu2023 node list (CSV)."),
    policy: str = typer.Option("all", "--policy", help="A policy name or 'all'."),
    seeds: int = typer.Option(1, "--seeds", help="Independent draws per policy."),
    levels: str = typer.Option("0.5,0.7,0.8,0.9,1.0,1.1,1.2,1.3", "--levels",
                               help="Arrived GPU demand, as fractions of capacity."),
    limit: int = typer.Option(None, "--limit", help="First N nodes of the node list."),
    out: Path = typer.Option(None, "--out", help="Also write the table (.csv/.parquet)."),
    json_out: bool = JSON,
) -> None:
    """FGD's workload inflation on a real node list: utilisation and unscheduled demand per load."""
    from schedlab.core.io import write_frame
    from schedlab.gpooling.inflation import compare_inflation

    frame = compare_inflation(trace, nodes, policy=policy, seeds=seeds, levels=levels,
                              limit=limit)
    if out is not None:
        write_frame(frame, out)
    _show(frame.to_dicts(), json_out)


@app.command("versus-fgd")
@handle_errors
def versus_fgd_cmd(
    trace: Path = typer.Option(..., "--trace", help="Alibaba gpu2023 pod list (CSV/Parquet)."),
    nodes: Path = typer.Option(..., "--nodes", help="Alibaba gpu2023 node list (CSV)."),
    policy: str = typer.Option("pooled-fgd", "--policy", help="The policy to set against FGD."),
    seeds: int = typer.Option(3, "--seeds", help="Independent draws (the same for both)."),
    limit: int = typer.Option(None, "--limit", help="First N nodes of the node list."),
    json_out: bool = JSON,
) -> None:
    """A policy against FGD under FGD's inflation, every level and to full: win/tie/lose."""
    from schedlab.core.registry import lookup
    from schedlab.gpooling.cluster_policies import CLUSTER_POLICIES
    from schedlab.gpooling.versus import versus_fgd

    lookup(CLUSTER_POLICIES, "cluster placement policy", policy)
    _show(versus_fgd(trace, nodes, policy=policy, seeds=seeds, limit=limit).to_dicts(), json_out)


@app.command()
@handle_errors
def generate(
    out: Path = typer.Option(..., "--out", help="Where to write the pod list (.csv/.parquet)."),
    jobs: int = typer.Option(1500, "--jobs", min=1),
    devices: int = typer.Option(40, "--devices", min=1, help="Pool the load is sized for."),
    load: float = typer.Option(0.9, "--load"),
    seed: int = typer.Option(0, "--seed"),
    json_out: bool = JSON,
) -> None:
    """Write a seeded Alibaba-shaped trace."""
    from schedlab.gpooling.workloads import heterogeneous_cluster, synthetic_trace, write_pod_trace

    trace = synthetic_trace(jobs, heterogeneous_cluster(devices), seed, load=load)
    write_pod_trace(trace, out)
    _show(dict(out=str(out), jobs=len(trace)), json_out)


@app.command()
@handle_errors
def build(force: bool = typer.Option(False, "--force", help="Rebuild even if cached."),
          json_out: bool = JSON) -> None:
    """Compile the LD_PRELOAD shim (and the stand-in driver and probe); print their paths."""
    from schedlab.gpooling.native import build as build_native

    native = build_native(force=force)
    _show(dict(shim=str(native.shim), stand_in_driver=str(native.stub),
               probe=str(native.probe)), json_out)


@app.command()
@handle_errors
def overhead(calls: int = typer.Option(200_000, "--calls", min=1),
             json_out: bool = JSON) -> None:
    """Measure the shim's per-call overhead against the stand-in driver (ns)."""
    from schedlab.gpooling.dataplane import interception_overhead
    from schedlab.gpooling.native import build as build_native

    _show(interception_overhead(build_native(), calls=calls), json_out)
