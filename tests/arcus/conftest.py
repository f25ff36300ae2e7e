"""Fixtures shared by the Arcus tests: the project's real Redis (a private redis-server)."""

import pytest

from schedlab.arcus.store import RedisServer, find_redis_binary


@pytest.fixture(scope="module")
def server():
    """A persistent (AOF always) redis-server on 127.0.0.1, one per test module, so Redis
    SIGKILL + restart loses nothing that was acknowledged."""
    if find_redis_binary() is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    with RedisServer(aof="always") as running:
        yield running
