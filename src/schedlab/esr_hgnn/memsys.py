"""Shared DRAM channels under ESR-HGNN's sampling channels: placement, contention, real timings.

Paper: ESR-HGNN (../shared/papers/05-esr_hgnn.md). The unit has several sampling channels; the
graph lives in DRAM. Two placements are modelled, stated in every result:

* ``partitioned``: one copy of the graph, its CSR arrays interleaved across the ``memory
  channels`` at ``interleave_bytes`` granularity (as a memory controller's address map does);
  every sampling channel reads from every memory channel, so sampling channels *contend* for
  banks, row buffers and data buses.
* ``replicated``: sampling channel ``k`` reads a full private copy of the graph in memory channel
  ``k mod memory_channels`` (capacity cost: one graph per copy); sampling channels share a memory
  channel only when there are more of them than memory channels.

:func:`replay_shared` replays all sampling channels' read traces together on the memory channels,
in issue order: each sampling channel issues one read per unit cycle with at most ``mlp`` in
flight; each read waits for its bank (open-page: row hit = CL, closed = tRCD + CL, conflict =
precharge, respecting tRAS, + tRCD + CL), each activate takes the earliest time that keeps tRRD
to the channel's recent activates and at most four in any tFAW before it (so a read stuck behind
a busy bank does not hold back activates of other banks), and the burst holds the channel's
data bus. Timings come from DRAM simulators' configuration files (presets
below, cited), in picoseconds.

A read of a 64 B line that one of the same channel's in-flight reads already fetches is merged
into it (MSHR merging, counted as ``merged``), as DRAMsim3's controller merges pending reads.
Not modelled: refresh, writes, bank groups (tCCD_L is used for every column read), ranks,
command-bus conflicts, and FR-FCFS reordering (first come first served per bank).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from pydantic import BaseModel, ConfigDict, Field

from schedlab.core.errors import BadInputError


class DramTiming(BaseModel):
    """One DRAM channel: geometry and timings in memory clocks of ``tck_ps``."""

    model_config = ConfigDict(extra="forbid")

    name: str
    tck_ps: int = Field(gt=0)
    cl: int = Field(ge=1)
    rcd: int = Field(ge=1)
    rp: int = Field(ge=1)
    ras: int = Field(ge=0)
    rrd: int = Field(ge=0)
    faw: int = Field(ge=0)
    ccd: int = Field(ge=1)
    burst: int = Field(ge=1, description="data-bus clocks per access (BL / 2)")
    burst_bytes: int = Field(ge=1)
    banks: int = Field(ge=1)
    row_bytes: int = Field(ge=64)
    source: str

    def ps(self, clocks: int) -> int:
        return int(clocks) * self.tck_ps

    @property
    def peak_gbs(self) -> float:
        """Peak bandwidth of one channel: one burst per max(burst, tCCD) clocks."""
        return self.burst_bytes / (max(self.burst, self.ccd) * self.tck_ps * 1e-12) / 1e9


#: DRAMsim3 (Li et al., MEMSYS'20; github.com/umd-memsys/DRAMsim3) configs/HBM2_8Gb_x128.ini:
#: tCK 1 ns, CL = tRCDRD = tRP = 14, tRAS 34, tRRD_S 4, tFAW 30, tCCD_S 1 (tCCD_L 2), BL 4 on a
#: 128-bit channel (64 B per access in 2 clocks), 4 bank groups x 4 banks, 64 columns x 128 bit
#: = 1 KiB rows, 8 channels per stack (256 GB/s). Ramulator's HBM.h (Kim et al., CAL'15) gives
#: the same 14 ns CL/tRCD/tRP and 34 ns tRAS at 1 Gb/s (tCK 2 ns, nCL = nRCD = nRP = 7).
HBM2 = DramTiming(
    name="hbm2",
    tck_ps=1000,
    cl=14,
    rcd=14,
    rp=14,
    ras=34,
    rrd=4,
    faw=30,
    ccd=2,
    burst=2,
    burst_bytes=64,
    banks=16,
    row_bytes=1024,
    source="DRAMsim3 configs/HBM2_8Gb_x128.ini (tCCD_L 2 used for tCCD)",
)
#: DRAMsim3 configs/DDR4_8Gb_x8_3200.ini: tCK 0.63 ns (DDR4-3200: 625 ps), CL = tRCD = tRP = 22,
#: tRAS 52, tRRD_S 4, tFAW 34, tCCD_S 4 / tCCD_L 8, BL 8 on a 64-bit channel (64 B in 4 clocks),
#: 16 banks, 1024 columns x 8 bit x 8 devices = 8 KiB rows; 25.6 GB/s peak per channel, but
#: consecutive reads of one row stay in one bank group, so tCCD_L (8) paces them: 12.8 GB/s.
DDR4 = DramTiming(
    name="ddr4",
    tck_ps=625,
    cl=22,
    rcd=22,
    rp=22,
    ras=52,
    rrd=4,
    faw=34,
    ccd=8,
    burst=4,
    burst_bytes=64,
    banks=16,
    row_bytes=8192,
    source="DRAMsim3 configs/DDR4_8Gb_x8_3200.ini (tCCD_L 8 used for tCCD)",
)
PRESETS = {"hbm2": HBM2, "ddr4": DDR4}
PLACEMENTS = ("partitioned", "replicated")


def preset(name: str) -> DramTiming:
    if name not in PRESETS:
        raise BadInputError(f"unknown memory {name!r}; valid: {', '.join(PRESETS)}", field="memory")
    return PRESETS[name]


@njit(cache=True, nogil=True)
def replay_shared(
    addresses,
    offsets,
    home,
    n_mem,
    interleave,
    row_bytes,
    banks,
    issue_ps,
    cl,
    rcd,
    rp,
    ras,
    rrd,
    faw,
    ccd,
    burst,
    mlp,
    line_bytes,
):
    """Replay K sampling channels' reads (``addresses[offsets[k]:offsets[k+1]]``) together.

    ``home[k] >= 0``: channel k reads only memory channel ``home[k]`` (replicated placement);
    ``home[k] < 0``: addresses are interleaved over ``n_mem`` channels in ``interleave``-byte
    granules (partitioned). A read of a ``line_bytes`` line that one of the channel's in-flight
    reads already fetches is merged into it (MSHR merging; ``line_bytes`` 0 disables). All times
    in ps. Returns (finish time per sampling channel, row hits, row misses, merged reads,
    data-bus busy ps per memory channel).
    """
    k_count = offsets.size - 1
    pos = offsets[:-1].copy()
    next_issue = np.zeros(k_count, dtype=np.int64)
    window = np.zeros((k_count, max(mlp, 1)), dtype=np.int64)
    lines = np.full((k_count, max(mlp, 1)), -1, dtype=np.int64)
    merged = 0
    issued = np.zeros(k_count, dtype=np.int64)
    finish = np.zeros(k_count, dtype=np.int64)
    n_banks = n_mem * banks
    open_row = np.full(n_banks, -1, dtype=np.int64)
    bank_ready = np.zeros(n_banks, dtype=np.int64)
    act_time = np.zeros(n_banks, dtype=np.int64)
    acts = 64  # recent activates per channel, the window tRRD/tFAW are checked against
    act_ring = np.full((n_mem, acts), -(1 << 40), dtype=np.int64)
    act_ptr = np.zeros(n_mem, dtype=np.int64)
    bus_free = np.zeros(n_mem, dtype=np.int64)
    bus_busy = np.zeros(n_mem, dtype=np.int64)
    hits = 0
    misses = 0
    remaining = addresses.size
    while remaining > 0:
        best = -1
        best_t = np.int64(1 << 62)
        for k in range(k_count):
            if pos[k] < offsets[k + 1]:
                t = max(next_issue[k], window[k, issued[k] % mlp])
                if t < best_t:
                    best_t = t
                    best = k
        k = best
        issue = best_t
        next_issue[k] = issue + issue_ps
        a = addresses[pos[k]]
        pos[k] += 1
        remaining -= 1
        if line_bytes > 0:
            line = a // line_bytes
            hit_done = np.int64(-1)
            for j in range(mlp):
                if lines[k, j] == line and window[k, j] > issue:
                    hit_done = window[k, j]
                    break
            if hit_done >= 0:
                merged += 1
                if hit_done > finish[k]:
                    finish[k] = hit_done
                continue
        if home[k] >= 0:
            m = home[k]
            local = a
        else:
            granule = a // interleave
            m = granule % n_mem
            local = (granule // n_mem) * interleave + a % interleave
        page = local // row_bytes
        b = m * banks + page % banks
        row = page // banks
        start = max(issue, bank_ready[b])
        if open_row[b] == row:
            col = start
            hits += 1
        else:
            misses += 1
            if open_row[b] >= 0:  # conflict: precharge after tRAS, then activate
                ready = max(start, act_time[b] + ras) + rp
            else:
                ready = start
            # earliest activate >= ready that keeps tRRD to every recent activate and at most
            # four activates in every tFAW window (activates may be placed out of order)
            act = ready
            near = np.empty(acts + 1, dtype=np.int64)
            for _ in range(8 * acts):
                moved = False
                for j in range(acts):
                    e = act_ring[m, j]
                    if act - rrd < e < act + rrd:
                        act = e + rrd
                        moved = True
                if faw > 0:
                    n_near = 0
                    for j in range(acts):
                        e = act_ring[m, j]
                        if act - faw < e < act + faw:
                            near[n_near] = e
                            n_near += 1
                    if n_near >= 4:
                        near[n_near] = act
                        window_sorted = np.sort(near[: n_near + 1])
                        for i in range(n_near - 3):
                            lo_e = window_sorted[i]
                            hi_e = window_sorted[i + 4]
                            if hi_e - lo_e < faw and lo_e <= act <= hi_e:
                                # five activates within tFAW: move past the first one's window
                                act = (
                                    max(act + 1, window_sorted[i + 4 - 4] + faw)
                                    if lo_e != act
                                    else window_sorted[i + 1] + faw
                                )
                                moved = True
                                break
                if not moved:
                    break
            act_ring[m, act_ptr[m]] = act
            act_ptr[m] = (act_ptr[m] + 1) % acts
            act_time[b] = act
            open_row[b] = row
            col = act + rcd
        data = max(col + cl, bus_free[m])
        done = data + burst
        bus_free[m] = done
        bus_busy[m] += burst
        bank_ready[b] = col + ccd
        window[k, issued[k] % mlp] = done
        if line_bytes > 0:
            lines[k, issued[k] % mlp] = a // line_bytes
        issued[k] += 1
        if done > finish[k]:
            finish[k] = done
    return finish, hits, misses, merged, bus_busy


def replay_channels(
    traces: list[np.ndarray],
    timing: DramTiming,
    placement: str,
    memory_channels: int,
    interleave_bytes: int,
    issue_ps: int,
    mlp: int,
    merge: bool = True,
) -> dict:
    """Replay every sampling channel's trace on shared memory channels; times in seconds."""
    if placement not in PLACEMENTS:
        raise BadInputError(
            f"unknown placement {placement!r}; valid: {', '.join(PLACEMENTS)}", field="placement"
        )
    if memory_channels < 1 or interleave_bytes < 1 or mlp < 1:
        raise BadInputError(
            "memory_channels, interleave_bytes and mlp must be positive", field="memory_channels"
        )
    k = len(traces)
    offsets = np.zeros(k + 1, dtype=np.int64)
    np.cumsum([t.size for t in traces], out=offsets[1:])
    addresses = np.concatenate(traces).astype(np.int64) if k else np.empty(0, np.int64)
    if placement == "replicated":
        home = np.arange(k, dtype=np.int64) % memory_channels
    else:
        home = np.full(k, -1, dtype=np.int64)
    t = timing
    finish, hits, misses, merged, busy = replay_shared(
        addresses,
        offsets,
        home,
        memory_channels,
        interleave_bytes,
        t.row_bytes,
        t.banks,
        int(issue_ps),
        t.ps(t.cl),
        t.ps(t.rcd),
        t.ps(t.rp),
        t.ps(t.ras),
        t.ps(t.rrd),
        t.ps(t.faw),
        t.ps(t.ccd),
        t.ps(t.burst),
        int(mlp),
        t.burst_bytes if merge else 0,
    )
    makespan = float(finish.max()) * 1e-12 if k else 0.0
    return dict(
        channel_seconds=tuple(float(f) * 1e-12 for f in finish),
        seconds=makespan,
        row_hits=int(hits),
        row_misses=int(misses),
        merged=int(merged),
        bus_utilisation=float(busy.sum())
        / max(1.0, float(finish.max() if k else 1) * memory_channels),
        copies=k if placement == "replicated" else 1,
    )
