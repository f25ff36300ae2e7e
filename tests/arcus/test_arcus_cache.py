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
