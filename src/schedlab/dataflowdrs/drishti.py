"""A Drishti-style baseline: Drishti's published insight rules over the same I/O counters.

Drishti (Bez et al., "Drishti: Guiding End-Users in the I/O Optimization Journey", PDSW 2022;
github.com/hpc-io/drishti-io, ``drishti/includes/config.py`` and ``module.py``) reads a Darshan
log and fires insight rules with fixed thresholds. Implemented here from those rules, with
their thresholds and codes, on :func:`~schedlab.dataflowdrs.insights.io_profile` (the log's
counters, or the same counters counted from a trace):

=====  ======================================================  ============================
code   rule (HIGH unless noted)                                threshold (Drishti's)
=====  ======================================================  ============================
S01    STDIO share of bytes moved                              > 10 % (``interface_stdio``)
P07    misaligned memory requests / all requests               > 10 %
P08    misaligned file requests / all requests                 > 10 %
P05/6  small (< 1 MB) reads / writes: share and count          > 10 % and > 1000
P11/13 random (non-sequential) reads / writes                  > 20 % and > 1000
P15/16 small requests to shared files: share and count         > 10 % and > 1000
P17    metadata time of a rank                                 > 30 s (``metadata_time_rank``)
P19    stragglers on a shared file: |slowest-fastest| rank     > 15 %
       time over the file's read+write+metadata time
M02/3  MPI-IO used, no collective call, independent requests  > 1000
=====  ======================================================  ============================

Drishti reports insights, not times: the baseline ranks its HIGH insights in the order the
released tool (drishti-io 0.8) prints them on the example logs (the order above: misaligned
before small requests), each mapped to the bottleneck kind it names. P09/P10
(redundant traffic) and the informational/WARN rules (M01, P01-P04) are not bottlenecks and
are not ranked; P18 (byte imbalance on shared files) needs the fastest/slowest-rank byte
counters, which :func:`io_profile` does not keep, and is not implemented.

Checked against the released tool (``pip install drishti-io``, 0.8) on the five example logs
it reads (it crashes on ``dxt.darshan``, whose exe string is empty): the same HIGH insight
kinds on all five, and the same first one.
"""

from __future__ import annotations

import polars as pl

from schedlab.dataflowdrs.bottleneck import Bottleneck
from schedlab.dataflowdrs.diagnosis import Analysis

THRESHOLDS = {  # drishti/includes/config.py
    "small_bytes": 1048576, "small_requests": 0.1, "small_requests_absolute": 1000,
    "misaligned_requests": 0.1, "metadata_time_rank": 30.0, "random_operations": 0.2,
    "random_operations_absolute": 1000, "imbalance_stragglers": 0.15, "interface_stdio": 0.1,
    "collective_operations": 0.5, "collective_operations_absolute": 1000,
}
KIND = {"S01": "stdio", "P05": "small-io", "P06": "small-io", "P07": "misaligned-io",
        "P08": "misaligned-io", "P11": "random-io", "P13": "random-io", "P15": "small-io",
        "P16": "small-io", "P17": "metadata", "P19": "shared-file", "M02": "no-collective",
        "M03": "no-collective"}


def insights(profile: pl.DataFrame, darshan: bool = True) -> list[tuple[str, str]]:
    """(code, message) for every HIGH insight that fires, in Drishti's print order."""
    t = THRESHOLDS
    out: list[tuple[str, str]] = []
    if profile.height == 0:
        return out
    posix = profile.filter(pl.col("module") == "POSIX")
    stdio = profile.filter(pl.col("module") == "STDIO")
    tot = lambda df, c: int(df[c].sum() or 0) if df.height else 0  # noqa: E731
    size = tot(posix, "bytes_read") + tot(posix, "bytes_written")
    size_stdio = tot(stdio, "bytes_read") + tot(stdio, "bytes_written")
    if size + size_stdio and size_stdio / (size + size_stdio) > t["interface_stdio"]:
        out.append(("S01", f"STDIO carries {size_stdio / (size + size_stdio):.0%} of the bytes"))
    reads, writes = tot(posix, "reads"), tot(posix, "writes")
    ops = reads + writes
    if ops and tot(posix, "mem_misaligned") / ops > t["misaligned_requests"]:
        out.append(("P07", f"{tot(posix, 'mem_misaligned') / ops:.0%} misaligned memory"))
    if ops and tot(posix, "misaligned") / ops > t["misaligned_requests"]:
        out.append(("P08", f"{tot(posix, 'misaligned') / ops:.0%} misaligned file requests"))
    for code, small, total, what in (("P05", tot(posix, "small_reads"), reads, "read"),
                                     ("P06", tot(posix, "small_writes"), writes, "write")):
        if small and small / total > t["small_requests"] and small > t[
                "small_requests_absolute"]:
            out.append((code, f"{small} small {what} requests ({small / total:.0%})"))
    if darshan:  # sequential counters exist only in Darshan logs
        for code, seq, total, what in (("P11", tot(posix, "seq_reads"), reads, "read"),
                                       ("P13", tot(posix, "seq_writes"), writes, "write")):
            rand = total - seq
            if total and rand / total > t["random_operations"] and rand > t[
                    "random_operations_absolute"]:
                out.append((code, f"{rand} random {what} requests ({rand / total:.0%})"))
    shared = posix.filter(pl.col("shared"))
    for code, col, total, what in (("P15", "small_reads", reads, "read"),
                                   ("P16", "small_writes", writes, "write")):
        small = tot(shared, col)
        if small and small / total > t["small_requests"] and small > t[
                "small_requests_absolute"]:
            out.append((code, f"{small} small {what} requests to shared files"))
    meta = posix.group_by("rank").agg(pl.col("meta_time").sum())
    slow = meta.filter(pl.col("meta_time") > t["metadata_time_rank"])
    if slow.height:
        out.append(("P17", f"{slow.height} ranks spend > 30 s in metadata"))
    for r in shared.iter_rows(named=True):  # over the file's total transfer time, as Drishti
        total = r["read_time"] + r["write_time"] + r["meta_time"]
        if total and abs(r["slowest_time"] - r["fastest_time"]) / total > t[
                "imbalance_stragglers"]:
            out.append(("P19", f"stragglers on {r['path']}"))
            break
    mpi = profile.filter(pl.col("module") == "MPI-IO")
    if mpi.height:
        indep, coll = tot(mpi, "indep_ops"), tot(mpi, "coll_ops")
        # drishti-io 0.8 fires M02/M03 only when no collective call was made at all
        if coll == 0 and indep > t["collective_operations_absolute"]:
            out.append(("M02", f"{indep} independent MPI-IO requests, none collective"))
    return out


class DrishtiBaseline:
    """Baseline: Drishti's published insight rules and thresholds (HIGH insights, its order)."""

    name = "drishti"

    def rank(self, analysis: Analysis) -> list[Bottleneck]:
        trace = analysis.trace
        if analysis.profile is None or trace is None:
            return []
        fired = insights(analysis.profile, trace.meta.get("source") == "darshan")
        out, seen = [], set()
        for code, message in fired:
            kind = KIND[code]
            if kind in seen:
                continue
            seen.add(kind)
            out.append(Bottleneck(kind, "job", float(len(fired) - len(out)),
                                  f"Drishti {code}: {message}"))
        return out


__all__ = ["KIND", "THRESHOLDS", "DrishtiBaseline", "insights"]
