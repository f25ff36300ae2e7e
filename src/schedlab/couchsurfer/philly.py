"""Microsoft Philly trace (msr-fiddle/philly-traces, Jeon et al., ATC'19): ``cluster_job_log``.

Layout: a JSON array (or JSON Lines) of jobs, each ``{"status", "vc", "jobid", "user",
"submitted_time", "attempts": [{"start_time", "end_time", "detail": [{"ip", "gpus": [...]}]}]}``
with times as ``YYYY-MM-DD HH:MM:SS`` (or ``None``). Mapping to CouchSurfer jobs:

* GPUs: the GPUs of the first attempt (summed over its machines); run time: first attempt's
  start to last attempt's end (the Philly analysis notebook's definition);
* jobs that never started (no attempt with a start and an end) are dropped and counted;
* kind: the trace has none; a job that did not pass (``Killed``/``Failed``: stopped early,
  by its user or by an error: the trial-and-error runs CouchSurfer calls exploratory) is
  exploratory, a ``Pass`` job deterministic (``exploratory_status`` changes it);
* estimate: causal per-user history median (:mod:`.predict`).

Philly's machines are 2-GPU (12 GiB) and 8-GPU (24 GiB) nodes; the default cluster is
``gpus`` GPUs as 8-GPU 24 GiB nodes, so multi-node jobs (> 8 GPUs) are dropped and counted.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from schedlab.core.errors import BadInputError
from schedlab.couchsurfer.alibaba import TraceLoad
from schedlab.couchsurfer.interference import Measurements
from schedlab.couchsurfer.jobs import ClusterSpec
from schedlab.couchsurfer.tracejobs import Run, default_cluster, parse_time, runs_to_jobs


def _records(path: Path):
    """(line, record) for every job: a JSON array read element by element, or JSON Lines."""
    if not path.is_file():
        raise BadInputError("no such file", path=path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"cannot read: {exc}", path=path) from None
    decoder = json.JSONDecoder()
    start = len(text) - len(text.lstrip())
    if start >= len(text):
        raise BadInputError("empty file", path=path, line=1)

    def line_of(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    if text[start] == "[":
        pos = start + 1
        while True:
            while pos < len(text) and text[pos] in " \t\r\n,":
                pos += 1
            if pos >= len(text):
                raise BadInputError("unterminated JSON array", path=path, line=line_of(pos))
            if text[pos] == "]":
                return
            try:
                obj, end = decoder.raw_decode(text, pos)
            except json.JSONDecodeError as exc:
                raise BadInputError(f"not JSON: {exc.msg}", path=path,
                                    line=line_of(exc.pos)) from None
            yield line_of(pos), obj
            pos = end
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.strip():
            try:
                yield number, json.loads(raw)
            except json.JSONDecodeError as exc:
                raise BadInputError(f"not JSON: {exc.msg}", path=path, line=number) from None


def read_philly(path: str | Path, *, gpus: int = 64, cluster: ClusterSpec | None = None,
                seed: int = 0, predictor: str = "history",
                exploratory_status: tuple[str, ...] = ("Killed", "Failed"),
                measurements: Measurements | None = None) -> TraceLoad:
    """Jobs and a cluster from a Philly ``cluster_job_log``."""
    path = Path(path)
    cluster = cluster or default_cluster(gpus, 8, 24.0)
    runs: list[Run] = []
    dropped: Counter = Counter()
    for line, rec in _records(path):
        if not isinstance(rec, dict):
            raise BadInputError("a job must be a JSON object", path=path, line=line)
        for name in ("status", "submitted_time", "attempts"):
            if name not in rec:
                raise BadInputError("missing", path=path, line=line, field=name)
        attempts = rec["attempts"]
        if not isinstance(attempts, list):
            raise BadInputError("must be a list", path=path, line=line, field="attempts")
        submitted = parse_time(rec["submitted_time"], path, line, "submitted_time")
        spans, n_gpus = [], None
        for k, att in enumerate(attempts):
            if not isinstance(att, dict):
                raise BadInputError("must be an object", path=path, line=line,
                                    field=f"attempts[{k}]")
            s = parse_time(att.get("start_time"), path, line, f"attempts[{k}].start_time")
            e = parse_time(att.get("end_time"), path, line, f"attempts[{k}].end_time")
            detail = att.get("detail", [])
            if not isinstance(detail, list) or not all(
                    isinstance(d, dict) and isinstance(d.get("gpus", []), list) for d in detail):
                raise BadInputError("must be a list of {ip, gpus: [...]}", path=path,
                                    line=line, field=f"attempts[{k}].detail")
            if n_gpus is None and detail:
                n_gpus = sum(len(d.get("gpus", [])) for d in detail)
            if s is not None and e is not None:
                if e < s:
                    raise BadInputError("ends before it starts", path=path, line=line,
                                        field=f"attempts[{k}].end_time")
                spans.append((s, e))
        if submitted is None or not spans or not n_gpus:
            dropped["never_started" if submitted is not None else "no_submit_time"] += 1
            continue
        runtime = spans[-1][1] - spans[0][0]
        if runtime <= 0:
            dropped["zero_length"] += 1
            continue
        runs.append(Run(submitted, runtime, int(n_gpus), str(rec.get("user", "")),
                        str(rec["status"]) in exploratory_status))
    if not runs:
        raise BadInputError("no job with a started attempt and GPUs", path=path,
                            field="attempts")
    return runs_to_jobs(runs, dropped, cluster, seed=seed, predictor=predictor,
                        measurements=measurements, source="Philly")
