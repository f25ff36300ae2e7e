"""A parent waits for its child; it never gives up half-way through a saga (issue 44).

The soak at load ~300 found 15 no-key sagas left half done: the root's call to its second leg
timed out after 60 s and the root failed with an error, the debit applied and the credit never
sent, although the child's message was alive and would have run. Now a parent waits without a
deadline while its child's message exists, stops (fenced) when its own instance is superseded,
and sends the child again when the message was lost.
"""

import textwrap
import threading
import time

import pytest
import redis

from schedlab.arcus.iobase import Fenced
from schedlab.arcus.platform import Platform, load_modules
from schedlab.arcus.policies import final_state
from schedlab.arcus.runtime import (
    Invocation,
    InvocationError,
    WorkerResources,
    call_child,
    queue_key,
    reply_key,
)
from schedlab.core.errors import ConfigError

APP = '''
import time
from schedlab.arcus import function

@function("cw_post", keys="k")
def cw_post(ctx, arg):
    value = (ctx.read(arg["k"]) or 0) + arg["d"]
    time.sleep(arg["pause"])
    ctx.write(arg["k"], value)
    return value

@function("cw_saga")
def cw_saga(ctx, arg):
    debit = ctx.invoke("cw_post", {"k": "src", "d": -arg["n"], "pause": arg["pause"]})
    credit = ctx.invoke("cw_post", {"k": "dst", "d": arg["n"], "pause": 0})
    return [debit, credit]
'''


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    path = tmp_path_factory.mktemp("childwait") / "cw_app.py"
    path.write_text(textwrap.dedent(APP))
    return load_modules((str(path),))


def test_a_child_slower_than_the_check_interval_leaves_no_half_done_saga(server, app):
    """The debit leg takes 0.6 s, six check intervals. With the old code's deadline in place of
    the check (a parent failing when its wait runs out; tried) the root failed, the debit
    applied once its child finished and the credit was never sent: {'src': -3, 'dst': None}.
    Now the saga finishes both legs."""
    names, paths = app
    with Platform(server.url, workers=2, lease_s=2.0, retention_s=None, modules=names,
                  paths=paths, child_check_s=0.1) as platform:
        try:
            value = platform.invoke("cw_saga", {"n": 3, "pause": 0.6}, ns="cw-saga",
                                    timeout=30)["value"]
        except InvocationError as exc:
            time.sleep(1.0)  # the abandoned debit finishes
            value = str(exc)
        state = final_state("arcus", platform.client, "cw-saga", ["src", "dst"])
        assert (value, state) == ([-3, 3], {"src": -3, "dst": 3})


def test_child_check_interval_must_be_positive(server):
    with pytest.raises(ConfigError, match="child_check_s"):
        Platform(server.url, workers=2, child_check_s=0)


def _waiting_parent(server, tag: str):
    """A parent (an admitted root, generation g1) waiting in call_child, in a thread, for a
    child on slot 1; no worker runs: the test plays Redis's other clients."""
    client = redis.Redis.from_url(server.url)
    resources = WorkerResources(client, 0)
    inv = Invocation(call_id=f"{tag}-call", instance=f"{tag}root.1", fn="read",
                     arg={"key": "x"}, protocol="arcus", ns="cw", plat=f"cw{tag}", slots=2,
                     gen="g1")
    client.set(f"cw:gen:{tag}root", "g1")
    out: dict = {}

    def run():
        try:
            out["reply"] = call_child(resources, inv, exclude=0, check_s=0.05)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return client, resources, inv, thread, out


def _take(client, inv, timeout=5.0):
    """The child's message from its queue (slot 1: the parent is on slot 0)."""
    got = client.blpop([queue_key(inv.plat, 1)], timeout=timeout)
    assert got is not None, "the child was not (re)sent"
    return got[1]


def test_the_wait_has_no_deadline_and_a_lost_child_is_sent_again(server):
    client, resources, inv, thread, out = _waiting_parent(server, "lost")
    first = _take(client, inv)  # taken off the queue and not put anywhere: the message is lost
    assert b'"replay":false' in first
    deadline = time.monotonic() + 5
    while not client.llen(queue_key(inv.plat, 1)):  # found nowhere: sent again
        assert time.monotonic() < deadline, "the lost child was not sent again"
        time.sleep(0.01)
    assert b'"replay":true' in client.lindex(queue_key(inv.plat, 1), 0)  # replays its log
    assert resources.resent == 1
    time.sleep(0.4)  # eight check intervals with the message queued: alive, waited on
    assert thread.is_alive() and client.llen(queue_key(inv.plat, 1)) == 1  # not sent again
    assert resources.resent == 1
    client.rpush(reply_key(inv.plat, inv.call_id), '{"value": 7, "seq": 0, "stats": {}}')
    thread.join(5)
    assert out.get("reply", {}).get("value") == 7, out
    client.close()


def test_a_superseded_parent_stops_waiting(server):
    """GC (or a re-admission) replaced the root's generation: the waiting parent is fenced."""
    client, _, _, thread, out = _waiting_parent(server, "fenced")
    time.sleep(0.2)
    assert thread.is_alive()
    client.delete("cw:gen:fencedroot")
    thread.join(5)
    assert isinstance(out.get("error"), Fenced), out
    client.close()
