"""Arcus's inline pipelined flush (issue 44, ``arcus-inline``): writes sent from the function's
own thread without waiting, replies read later by the same thread, order kept by Redis itself.

Each test drives one execution directly (the protocol object, a real redis-server) and checks
what reached Redis: a batch whose predecessor was lost is refused by Redis, a result is never
logged without every write before it, a script unknown to a restarted Redis is loaded and the
refused batches sent again in order, and a broken connection fails the execution without
acknowledging anything (its re-run in replay mode applies each write once).
"""

import uuid

import pytest
import redis

from schedlab.arcus.arcus_io import ArcusInline
from schedlab.arcus.iobase import Env, loads
from schedlab.arcus.runtime import WorkerResources
from schedlab.arcus.store import IOStats, Store


@pytest.fixture()
def rig(server):
    client = redis.Redis.from_url(server.url)
    resources = WorkerResources(client, 0)
    yield client, resources
    resources.close()
    client.close()


def _execution(client, resources, *, rtt_ms=0.0, replay=False, instance=None, ns="inl"):
    instance = instance or uuid.uuid4().hex[:10]
    client.set(f"{ns}:gen:{instance}", "g", nx=True)  # admitted, as a gateway does
    stats = IOStats()
    io = ArcusInline(Store(client, stats, rtt_ms), Env(instance, ns, replay=replay,
                                                        resources=resources, gen="g"))
    io.begin()
    return io, instance, stats


def _value(client, key, ns="inl"):
    return loads(client.hget(f"{ns}:s:{key}", "v"))


def test_writes_are_sent_without_waiting_and_durable_only_after_their_round_trip(rig):
    client, resources = rig
    io, instance, stats = _execution(client, resources, rtt_ms=40.0)
    for step, key in enumerate(("a", "b", "c"), 1):
        io.write(step, key, step * 10)
    # three batches sent, none known durable yet: the injected 40 ms round trip is charged to
    # every reply, so nothing can be released before it has passed
    assert io.flights == 3 and stats.rtts == 3 and stats.durable == []
    assert io.finish("done") == "done"
    io.close()
    assert len(stats.durable) == 3 and min(stats.durable) >= 0.040
    assert [_value(client, k) for k in "abc"] == [10, 20, 30]
    log = {k.decode(): v.decode() for k, v in client.hgetall(f"inl:log:{instance}").items()}
    assert sorted(k for k in log if k.isdigit()) == ["1", "2", "3"]
    assert log["res"] == '"done"'


def test_a_batch_whose_predecessor_was_lost_is_refused_by_redis(rig):
    """Batch 0 'lost in flight' (never arrived): batch 1 and the result must not apply."""
    client, resources = rig
    io, instance, _ = _execution(client, resources)
    io.flights = 1  # as if batch 0 had been sent and lost with its connection
    io.write(1, "lost", 1)
    with pytest.raises(redis.RedisError):
        io.finish("ok")
    io.close()
    assert client.hget("inl:s:lost", "v") is None
    assert client.hget(f"inl:log:{instance}", "res") is None
    assert client.hget(f"inl:log:{instance}", "1") is None


def test_a_conflicting_batch_stops_the_batches_sent_after_it(rig, monkeypatch):
    """Another execution logged step 1 as a different read: the batch carrying our read record
    conflicts, and the write pipelined behind it (sent before the conflict was read) must not
    be applied."""
    client, resources = rig
    io, instance, _ = _execution(client, resources)
    monkeypatch.setattr(io, "_poll", lambda: None)  # both batches in flight at once
    client.hset(f"inl:log:{instance}", "1", 'r0|"other"')  # the other execution's record
    io.pending.append(("r", "1", "inl:s:x", 'r0|"mine"'))  # a cached read, deferred
    io.write(2, "behind", 7)  # sent with the read record, conflicts
    io.write(3, "later", 8)  # pipelined behind the conflicting batch
    with pytest.raises(Exception, match="logged differently"):
        io.finish("ok")
    io.close()
    assert client.hget("inl:s:behind", "v") is None  # conflict returns before the write
    assert client.hget("inl:s:later", "v") is None  # refused: its predecessor did not apply
    assert client.hget(f"inl:log:{instance}", "res") is None


def test_an_unknown_script_is_loaded_and_the_refused_batches_resent_in_order(rig):
    client, resources = rig
    io, instance, _ = _execution(client, resources)
    client.script_flush()  # what a Redis restart does to loaded scripts
    io.write(1, "k", 1)
    io.write(2, "k", 2)  # same key: order matters
    io.write(3, "j", 3)
    assert io.finish("ok") == "ok"
    io.close()
    assert io.link.reloaded
    assert _value(client, "k") == 2 and _value(client, "j") == 3
    assert client.hget(f"inl:log:{instance}", "res") == b'"ok"'


def test_a_broken_connection_fails_the_execution_and_the_replay_applies_once(rig):
    client, resources = rig
    io, instance, _ = _execution(client, resources)
    io.write(1, "n", 5)  # sent, and applied by Redis
    link = io.link
    killed = 0
    for entry in client.client_list():  # the link's connection is the one that ran EVALSHA
        if entry.get("cmd") == "evalsha":
            killed += client.client_kill_filter(_id=entry["id"])
    assert killed == 1
    with pytest.raises(redis.RedisError):
        io.finish("ok")  # its batch never reached Redis, or its reply never came back
    assert link.failed is not None
    with pytest.raises(redis.RedisError):  # nothing more is ever sent on a failed link
        link.send([], [], [])
    io.close()
    assert client.hget(f"inl:log:{instance}", "res") is None
    # the runtime re-runs the execution in replay mode: the logged write is skipped
    again, _, _ = _execution(client, resources, replay=True, instance=instance)
    again.write(1, "n", 5)
    again.write(2, "m", 6)
    assert again.finish("ok") == "ok"
    again.close()
    assert _value(client, "n") == 5 and _value(client, "m") == 6
    assert client.hget(f"inl:log:{instance}", "1").startswith(b"w")
