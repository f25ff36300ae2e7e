"""``schedlab gpooling k8s ...``: run gPooling where Kubernetes users run it.

gPooling (../shared/papers/14-gpooling.md). Two long-running commands, each one library call:

- ``device-plugin``: the kubelet device plugin of :mod:`schedlab.gpooling.kubernetes` (run it
  as a DaemonSet with the kubelet's device-plugin directory mounted); registers, serves, and
  re-registers when the kubelet restarts; SIGTERM or Ctrl-C stops it cleanly.
- ``extender``: the kube-scheduler extender of :mod:`schedlab.gpooling.extender`.

Mount with ``app.add_typer(kubernetes_cli.app, name="k8s")`` in ``gpooling/cli.py``; the
functions :func:`device_plugin` and :func:`extender` can also be registered as commands of
another app directly. Heavy imports (grpc, uvicorn, NumPy) happen inside the commands.
"""

from __future__ import annotations

from pathlib import Path

import typer

from schedlab.core.clitools import err_console, handle_errors

app = typer.Typer(help="gPooling on Kubernetes: kubelet device plugin and scheduler extender.",
                  no_args_is_help=True, add_completion=False)


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

    from schedlab.core.errors import BadInputError

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
    from schedlab.core.errors import BadInputError
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
