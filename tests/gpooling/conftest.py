"""Fixtures shared by the gPooling tests."""

from __future__ import annotations

import socket
import threading
import time

import pytest


@pytest.fixture
def serve_app():
    """A callable that serves an ASGI app on a free local port (uvicorn, in a thread) and
    returns its base URL; every server it started is stopped at teardown."""
    import uvicorn

    started: list[tuple[uvicorn.Server, threading.Thread]] = []

    def serve(app) -> str:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                               log_level="error"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        started.append((server, thread))
        deadline = time.time() + 20
        while not server.started and time.time() < deadline:
            time.sleep(0.05)
        assert server.started, "uvicorn did not start within 20 s"
        return f"http://127.0.0.1:{port}"

    yield serve
    for server, thread in started:
        server.should_exit = True
        thread.join(timeout=10)
