"""FCCache (Arcus, paper 12): versioned entries never go backwards, tokens gate local hits."""

import threading

from hypothesis import given
from hypothesis import strategies as st

from schedlab.arcus.fccache import FCCache, decode_publication


def healthy_cache(capacity: int = 100) -> FCCache:
    cache = FCCache(capacity)
    cache.reset(0, healthy=True)
    return cache


def test_unhealthy_cache_serves_nothing():
    cache = FCCache()
    cache.install("k", 1, "1")
    assert cache.get("k", 0, 0.0) is None


def test_token_ahead_of_watermark_is_a_miss_until_applied():
    cache = healthy_cache()
    cache.publish_applied("k", 1, '"a"')
    assert cache.get("k", 1, 0.0) == (1, '"a"')
    assert cache.get("k", 2, 0.01) is None  # commit 2 not applied yet: cannot prove freshness
    timer = threading.Timer(0.01, lambda: cache.publish_applied("other", 2, "0"))
    timer.start()
    assert cache.get("k", 2, 2.0) == (1, '"a"')  # waited for the watermark, then served
    timer.join()


def test_fetch_racing_an_eviction_is_not_cached():
    cache = healthy_cache(capacity=1)
    seen = cache.evictions
    cache.publish_applied("k", 5, "5")
    cache.publish_applied("j", 6, "6")  # evicts k (seq 5)
    cache.install("k", 3, "3", seen)  # a fetch that started before: must not resurrect seq 3
    assert cache.get("k", 0, 0.0) is None


def test_publication_codec_keeps_pipes_in_values():
    assert decode_publication(b'7|ns:s:k|"a|b"') == (7, "ns:s:k", '"a|b"')


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 50), st.booleans()),
                max_size=60))
def test_entries_only_move_forward(events):
    """Any interleaving of publications and fetch installs keeps each key at its newest seq."""
    cache = healthy_cache(capacity=1000)
    newest: dict[str, int] = {}
    applied = 0
    for key, seq, published in events:
        if published:
            if seq > applied:
                applied = seq
                cache.publish_applied(key, seq, str(seq))
                newest[key] = max(newest.get(key, 0), seq)
        else:
            cache.install(key, seq, str(seq), cache.evictions)
            newest[key] = max(newest.get(key, 0), seq)
    for key, seq in newest.items():
        assert cache.get(key, 0, 0.0) == (seq, str(seq))


def test_a_commit_is_pushed_only_to_workers_that_cache_its_key(server):
    """Issue 44, ``arcus-keys``: a write publishes on the channels registered for its key (a
    worker registers when it reads the key from Redis), not to every worker; a barrier on a
    worker's channel advances its watermark, so a token it has never seen a publication for is
    served locally."""
    import time

    import redis

    from schedlab.arcus.arcus_io import ArcusKeys as Arcus
    from schedlab.arcus.iobase import Env
    from schedlab.arcus.runtime import WorkerResources
    from schedlab.arcus.store import IOStats, Store, no_retry

    client = redis.Redis.from_url(server.url)
    workers = [WorkerResources(client, slot, subscriber_client=redis.Redis.from_url(
        server.url, retry=no_retry()), plat="sel").start() for slot in range(3)]

    def wait(predicate) -> None:
        deadline = time.monotonic() + 10
        while not predicate():
            assert time.monotonic() < deadline
            time.sleep(0.005)

    hits = IOStats()

    def run(worker, instance, body, token=0):
        client.set(f"sel:gen:{instance}", "g")
        io = Arcus(Store(client, hits), Env(instance, "sel", resources=worker, gen="g",
                                            token=token))
        try:
            result = body(io)
            io.finish(None)
            return result, io.seq
        finally:
            io.close()

    try:
        wait(lambda: all(w.cache.healthy for w in workers))
        run(workers[2], "i0", lambda io: io.write(1, "k", "v0"))
        run(workers[0], "i1", lambda io: io.read(1, "k"))  # worker 0 now caches k
        assert {m.decode() for m in client.smembers("sel:s:k|c")} == {"sel:c:0"}
        before = [w.subscriber.received for w in workers]
        _, seq = run(workers[2], "i2", lambda io: io.write(1, "k", "v1"))
        wait(lambda: workers[0].cache.applied >= seq)
        assert workers[0].cache.get("sel:s:k", seq, 0.0) == (seq, '"v1"')  # pushed
        got = [w.subscriber.received - b for w, b in zip(workers, before, strict=True)]
        assert got == [1, 0, 0]
        # a later commit to another key is not pushed to worker 0: only a barrier proves that
        # its cached k is still the newest at that token
        _, later = run(workers[2], "i3", lambda io: io.write(1, "other", 1))
        assert later > seq and workers[0].cache.get("sel:s:k", later, 0.0) is None
        client.publish("sel:c:0", f"b|{later}")
        wait(lambda: workers[0].cache.applied >= later)
        served = hits.hits
        value, _ = run(workers[0], "i4", lambda io: io.read(1, "k"), token=later)
        assert value == "v1" and hits.hits == served + 1  # from the cache, no round trip
        assert workers[0].cache.get("sel:s:k", later, 0.0) == (seq, '"v1"')
    finally:
        for w in workers:
            w.close()
        client.close()


def test_barriers_only_for_cache_protocols_and_late_publications_still_install():
    """A barrier stamped with another protocol's token (Halfmoon's own log sequence) moved the
    watermark past Arcus commits not yet applied, and the publications behind it were dropped:
    a stale read in the side-by-side benchmark (issue 44). Now only ``arcus-keys`` (whose
    watermark moves only with barriers) stamps them, and a publication at or below the
    watermark still installs."""
    from schedlab.arcus.runtime import Invocation, enqueue, needs_barrier

    assert needs_barrier("arcus-keys")
    assert not any(needs_barrier(p) for p in ("arcus", "arcus-sync", "arcus-inline", "cflog",
                                              "halfmoon", "boki", "beldi", "unsafe"))

    class Pipe:
        def __init__(self):
            self.calls = []

        def publish(self, *args):
            self.calls.append(("publish", *args))

        def rpush(self, *args):
            self.calls.append(("rpush", *args))

    for protocol, published in (("halfmoon", False), ("arcus", False), ("arcus-keys", True)):
        pipe = Pipe()
        enqueue(pipe, Invocation(call_id="c", instance="i", fn="f", arg=None,
                                 protocol=protocol, ns="n", token=7, plat="p"), 2)
        kinds = [call[0] for call in pipe.calls]
        assert kinds == (["publish", "rpush"] if published else ["rpush"])
        if published:
            assert pipe.calls[0][1:] == ("p:c:2", "b|7")
    cache = healthy_cache()
    cache.advance(100)
    cache.publish_applied("k", 5, "5")
    assert cache.get("k", 100, 0.0) == (5, "5")
