"""What DataFlowDrs reads from a Darshan log, with PyDarshan: run as a script in a child process.

``darshan.py`` runs this file (``python darshan_extract.py LOG``, pickled result on stdout)
because libdarshan-util aborts or crashes the interpreter on some corrupt logs. It imports
only PyDarshan and NumPy -- not schedlab, Polars or the rest of the package -- so the child
costs what PyDarshan's own start-up does. Counter records come back as NumPy columns and DXT
segments as flat NumPy arrays: no per-record Python objects cross the pipe.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path


def extract(path: str | Path) -> dict:
    """Everything this reader uses from a log, as plain Python (PyDarshan in this process)."""
    import darshan
    report = darshan.DarshanReport(str(path), read_all=True)
    out = dict(job=dict(report.metadata["job"]), exe=str(report.metadata.get("exe") or ""),
               modules=list(report.records), records={}, dxt={},
               names={int(k): str(v) for k, v in dict(report.name_records).items()})
    out["skipped"] = []
    for module in ("POSIX", "MPI-IO", "STDIO", "H5F", "H5D"):
        if module in report.records:
            try:  # one module PyDarshan cannot frame must not lose the others
                frames = report.records[module].to_df()
                out["records"][module] = tuple(
                    {str(c): frames[k][c].to_numpy() for c in frames[k].columns}
                    for k in ("counters", "fcounters"))
            except (KeyError, ValueError, TypeError, RuntimeError, AttributeError) as exc:
                out["skipped"].append(f"{module} records unreadable ({str(exc)[:60]})")
    for module in ("DXT_POSIX", "DXT_MPIIO"):
        if module in report.records:
            try:
                out["dxt"][module] = _segments(report.records[module].to_df())
            except (KeyError, ValueError, TypeError, RuntimeError) as exc:
                out["skipped"].append(f"{module} segments unreadable ({str(exc)[:60]})")
    out["lustre"] = {}
    if "LUSTRE" in report.records:
        try:
            for rec in report.records["LUSTRE"].to_df()["components"].to_dict("records"):
                ids = out["lustre"].setdefault(int(rec["id"]), [])
                ids.extend(int(o) for o in rec["LUSTRE_OST_IDS"] if int(o) not in ids)
        except (KeyError, ValueError, TypeError, RuntimeError, AttributeError) as exc:
            out["skipped"].append(f"LUSTRE records unreadable ({str(exc)[:60]})")
    used = {"POSIX", "MPI-IO", "STDIO", "H5F", "H5D", "DXT_POSIX", "DXT_MPIIO"}
    if not used & set(out["modules"]):
        out["skipped"].append("no POSIX, MPI-IO, STDIO, HDF5 or DXT records (modules: "
                              f"{', '.join(out['modules']) or 'none'}): nothing to analyse")
    return out


def _segments(records: list[dict]) -> dict:
    """A DXT module's segments as flat NumPy columns: rank, id, write (0 read / 1 write),
    offset, length, start, end; per record its reads then its writes (PyDarshan's order)."""
    import numpy as np

    parts = []
    for d in records:
        for write, key in ((0, "read_segments"), (1, "write_segments")):
            seg = d.get(key)
            if seg is None or not len(seg):
                continue
            n = len(seg)
            parts.append((np.full(n, int(d["rank"])), np.full(n, int(d["id"]), dtype=np.uint64),
                          np.full(n, write, dtype=np.int8),
                          *(seg[c].to_numpy() for c in ("offset", "length", "start_time",
                                                        "end_time"))))
    names = ("rank", "id", "write", "offset", "length", "start", "end")
    if not parts:
        return {n: np.zeros(0) for n in names}
    return {n: np.concatenate([p[i] for p in parts]) for i, n in enumerate(names)}


if __name__ == "__main__":
    # run as a script, this folder is sys.path[0], where our darshan.py would shadow PyDarshan
    if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)
    sys.stdout.buffer.write(pickle.dumps(extract(sys.argv[1])))
