"""Numba hot loops: one metapath hop over a frontier, and the DRAM row-buffer replay.

ESR-HGNN (../shared/papers/05-esr_hgnn.md) is about the random reads of metapath sampling. The
one kernel both samplers share, :func:`expand`, performs a hop ``X -> Y`` for every live frontier
node: one read of the CSR row pointer (``indptr[v]``/``indptr[v + 1]`` sit in one word pair) and
``fanout`` uniform reads of ``indices`` (sampling with replacement, like DGL's
``sample_neighbors(replace=True)`` and metapath random walks). Every read is counted and, when a
trace buffer is given, its byte address is recorded so the hardware model can replay it.

Random numbers come in as a NumPy array drawn from an explicit ``numpy.random.Generator``: the
kernel holds no RNG state, so runs are reproducible from the seed alone.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def expand(indptr, indices, frontier, fanout, uniforms, ptr_base, idx_base, word, trace):
    """Sample ``fanout`` neighbours (with replacement) of every frontier node.

    ``frontier`` holds node ids, -1 for a dead walk (a node without neighbours earlier on).
    Child ``i * fanout + j`` descends from frontier entry ``i``: the dense layout keeps every
    path's ancestry implicit, so no parent array is needed. Returns (children, reads, trace_len).
    """
    n = frontier.size
    out = np.empty(n * fanout, dtype=np.int64)
    reads = 0
    record = trace.size > 0
    for i in range(n):
        v = frontier[i]
        base = i * fanout
        if v < 0:
            for j in range(fanout):
                out[base + j] = -1
            continue
        lo = indptr[v]
        deg = indptr[v + 1] - lo
        if record:
            trace[reads] = ptr_base + v * word
        reads += 1
        if deg == 0:
            for j in range(fanout):
                out[base + j] = -1
            continue
        for j in range(fanout):
            k = lo + np.int64(uniforms[base + j] * deg)
            if k >= lo + deg:  # uniforms are in [0, 1) but guard the float edge anyway
                k = lo + deg - 1
            out[base + j] = indices[k]
            if record:
                trace[reads] = idx_base + k * word
            reads += 1
    return out, reads, reads if record else 0


@njit(cache=True, nogil=True)
def expand_untraced(indptr, indices, frontier, fanout, uniforms):
    """:func:`expand` without a trace, in two passes: first every frontier node's row (``indptr``
    reads), then every neighbour (``indices`` reads).

    Same children and read count as :func:`expand` from the same uniforms (tested); splitting
    the dependent pair ``indptr[v] -> indices[k]`` into two loops of independent loads lets the
    CPU keep many more cache misses in flight (1.5x on a 7.5M-edge graph). The trace keeps the
    one-pass order, which is the order the hardware unit issues reads in.
    """
    n = frontier.size
    lo = np.empty(n, dtype=np.int64)
    deg = np.empty(n, dtype=np.int64)
    reads = 0
    for i in range(n):
        v = frontier[i]
        if v < 0:
            deg[i] = -1
        else:
            a = indptr[v]
            lo[i] = a
            deg[i] = indptr[v + 1] - a
            reads += 1
    out = np.empty(n * fanout, dtype=np.int64)
    for i in range(n):
        d = deg[i]
        base = i * fanout
        if d <= 0:
            for j in range(fanout):
                out[base + j] = -1
            continue
        first = lo[i]
        for j in range(fanout):
            k = np.int64(uniforms[base + j] * d)
            if k >= d:  # uniforms are in [0, 1) but guard the float edge anyway
                k = d - 1
            out[base + j] = indices[first + k]
        reads += fanout
    return out, reads


@njit(cache=True, nogil=True)
def replay_dram(addresses, row_bytes, n_banks, t_cl, t_rcd, t_rp, t_burst, t_ccd, mlp):
    """Cycle-approximate replay of one channel's reads on an open-page DRAM channel.

    Each read issues one per cycle while fewer than ``mlp`` are in flight; it waits for its bank,
    pays ``t_cl`` on a row-buffer hit, ``t_rcd + t_cl`` on an idle bank and ``t_rp + t_rcd +
    t_cl`` on a conflict, then holds the shared data bus for ``t_burst``. Returns (cycles, hits,
    misses). Addresses map row-interleaved: bank = (addr // row_bytes) % n_banks.
    """
    n = addresses.size
    open_row = np.full(n_banks, -1, dtype=np.int64)
    bank_ready = np.zeros(n_banks, dtype=np.int64)
    window = np.zeros(max(mlp, 1), dtype=np.int64)  # completion times of the last mlp reads
    issue = np.int64(0)
    bus_free = np.int64(0)
    finish = np.int64(0)
    hits = 0
    for i in range(n):
        slot = i % mlp
        issue = max(issue + 1, window[slot]) if i > 0 else np.int64(0)
        page = addresses[i] // row_bytes
        bank = page % n_banks
        row = page // n_banks
        start = max(issue, bank_ready[bank])
        if open_row[bank] == row:
            latency = t_cl
            hits += 1
            bank_ready[bank] = start + t_ccd
        elif open_row[bank] < 0:
            latency = t_rcd + t_cl
            bank_ready[bank] = start + t_rcd + t_ccd
        else:
            latency = t_rp + t_rcd + t_cl
            bank_ready[bank] = start + t_rp + t_rcd + t_ccd
        open_row[bank] = row
        done = max(start + latency, bus_free) + t_burst
        bus_free = done
        window[slot] = done
        if done > finish:
            finish = done
    return finish, hits, n - hits


@njit(cache=True, nogil=True)
def relabel(first, values, mapping):
    """Global -> local node ids for one node type of a sampled batch, in first-seen order.

    ``first`` (the seeds, or empty) take local ids ``0 .. len(first) - 1`` in order, duplicates
    included (as ``NeighborLoader`` keeps them); every other id of ``values`` (-1 = dead walk)
    gets the next free id when first seen. ``mapping`` is a scratch array of the type's node
    count filled with -1; it is restored before returning, so one array serves every batch.
    Returns (global ids in local order, local id per entry of ``values``, -1 where dead).
    """
    ids = np.empty(first.size + values.size, dtype=np.int64)
    n_ids = first.size
    for i in range(first.size):
        v = first[i]
        ids[i] = v
        if mapping[v] < 0:
            mapping[v] = i
    local = np.empty(values.size, dtype=np.int64)
    for i in range(values.size):
        v = values[i]
        if v < 0:
            local[i] = -1
            continue
        m = mapping[v]
        if m < 0:
            m = n_ids
            mapping[v] = m
            ids[n_ids] = v
            n_ids += 1
        local[i] = m
    for i in range(n_ids):
        mapping[ids[i]] = -1
    return ids[:n_ids].copy(), local


@njit(cache=True, nogil=True)
def edge_pairs(values, walks, targets):
    """``[2, E]`` edges: row 0 ``values[i]``, row 1 ``targets[i // walks]``; dead (-1) dropped."""
    alive = 0
    for i in range(values.size):
        if values[i] >= 0:
            alive += 1
    out = np.empty((2, alive), dtype=np.int64)
    k = 0
    for i in range(values.size):
        if values[i] >= 0:
            out[0, k] = values[i]
            out[1, k] = targets[i // walks]
            k += 1
    return out


@njit(cache=True, nogil=True)
def _lru_touch(tags, stamps, base, ways, tag, now):
    """Look ``tag`` up in one set (``ways`` slots from ``base``); insert it LRU if absent."""
    victim = base
    for w in range(base, base + ways):
        if tags[w] == tag:
            stamps[w] = now
            return True
        if stamps[w] < stamps[victim]:
            victim = w
    tags[victim] = tag
    stamps[victim] = now
    return False


@njit(cache=True, nogil=True)
def cache_levels(lines, l2_sets, l2_ways, l3_sets, l3_ways, warm):
    """Count L2 hits, L3 hits and DRAM misses of a line-address trace (set-associative LRU).

    L1 is not modelled (its hits cost what the per-read core work costs). With ``warm`` the
    trace runs once uncounted first. Returns (l2_hits, l3_hits, dram_misses).
    """
    l2_tags = np.full(l2_sets * l2_ways, -1, dtype=np.int64)
    l2_stamps = np.zeros(l2_sets * l2_ways, dtype=np.int64)
    l3_tags = np.full(l3_sets * l3_ways, -1, dtype=np.int64)
    l3_stamps = np.zeros(l3_sets * l3_ways, dtype=np.int64)
    now = 0
    l2_hits = l3_hits = dram = 0
    for rnd in range(2 if warm else 1):
        count = rnd == 1 or not warm
        for i in range(lines.size):
            now += 1
            line = lines[i]
            if _lru_touch(l2_tags, l2_stamps, (line % l2_sets) * l2_ways, l2_ways, line, now):
                if count:
                    l2_hits += 1
                continue
            hit3 = _lru_touch(l3_tags, l3_stamps, (line % l3_sets) * l3_ways, l3_ways, line, now)
            if count:
                if hit3:
                    l3_hits += 1
                else:
                    dram += 1
    return l2_hits, l3_hits, dram
