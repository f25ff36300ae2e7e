"""Arcus next to DBOS Transact (issue 44): the same workflows, per-step latency and exactly-once
under SIGKILLs, in one run.

    python -m venv --system-site-packages /tmp/dbos-venv && /tmp/dbos-venv/bin/pip install dbos
    python benchmarks/arcus/dbos_side_by_side.py --dbos-python /tmp/dbos-venv/bin/python

DBOS is never a dependency of this project: it runs in a child process started with
``--dbos-python`` (default ``$DBOS_PYTHON``), and the script prints why and exits 0 when that
interpreter cannot import ``dbos``.

**The same workflows.** Arcus's application functions (``schedlab.arcus.apps``: the rw
microbenchmark's ``chain``/``ops``, hotel, retwis, the ledger) are written against ``ctx.read``,
``ctx.write`` and ``ctx.invoke``. Under DBOS they run unchanged inside a ``@DBOS.workflow``
whose ``ctx.read``/``ctx.write`` are ``@ds.transaction`` steps on a table ``kv(k, v)`` (DBOS's
exactly-once path: the step's checkpoint commits in the same database transaction as its
write) and whose ``ctx.invoke`` is a child workflow. State lives in PostgreSQL (a private
``postgres`` on 127.0.0.1, fsync on, started for the run; DBOS's system database is the same
server) or, with ``--db sqlite`` or when no PostgreSQL can be started, in SQLite files.

**Per-step latency** (no faults): p50 of one ``ctx.read`` and one durable ``ctx.write`` (for
Arcus: from ``ctx.write`` until the writing thread knows it is in Redis), mean workflow latency,
Arcus on its platform (4 workers, Redis on 127.0.0.1, loopback), DBOS in one process.

**Exactly-once under kills**: the ledger workload (counters and lists, two child workflows per
request) run sequentially; Arcus's worker processes and DBOS's process are SIGKILLed at random
moments (DBOS's is restarted each time and recovers its pending workflows on launch, then
re-submits every request under the same workflow id); both are checked by Arcus's oracle
checker (lost or duplicated writes, inconsistent reads, final state vs one crash-free run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve()
SRC = HERE.parents[2] / "src"


# --- the DBOS side (runs in the child interpreter) ------------------------------------------
def dbos_worker(args: argparse.Namespace) -> int:
    """Run ``args.workload`` as DBOS workflows; print one JSON document at the end."""
    import sqlalchemy as sa
    from dbos import DBOS, SetWorkflowID, SQLAlchemyDatasource

    from schedlab.arcus.apps import FUNCTIONS
    from schedlab.arcus.iobase import dumps, loads
    from schedlab.arcus.workloads import make_workload

    DBOS(config={"name": "arcus-peer", "system_database_url": args.sysdb,
                 "log_level": "ERROR"})
    ds = SQLAlchemyDatasource.create(args.appdb)
    table = f"kv_{args.tag}"
    steps: dict[str, list[float]] = {"read": [], "write": []}

    @ds.transaction()
    def kv_read(key: str) -> str | None:
        row = ds.sql_session().execute(sa.text(f"SELECT v FROM {table} WHERE k = :k"),
                                       {"k": key}).first()
        return None if row is None else row[0]

    @ds.transaction()
    def kv_write(key: str, value: str) -> None:
        ds.sql_session().execute(
            sa.text(f"INSERT INTO {table} (k, v) VALUES (:k, :v) "
                    "ON CONFLICT (k) DO UPDATE SET v = excluded.v"), {"k": key, "v": value})

    class Ctx:
        def read(self, key: str):
            start = time.perf_counter()
            value = kv_read(key)
            steps["read"].append(time.perf_counter() - start)
            return loads(value)

        def write(self, key: str, value) -> None:
            start = time.perf_counter()
            kv_write(key, dumps(value))
            steps["write"].append(time.perf_counter() - start)

        def invoke(self, fn: str, arg):
            return json.loads(dumps(run(fn, arg)))  # a child workflow

    @DBOS.workflow()
    def run(fn: str, arg):
        return FUNCTIONS[fn](Ctx(), arg)

    workload = make_workload(args.workload, args.requests, args.seed, read_ratio=0.5, keys=16)
    with ds.engine.begin() as conn:  # the table and the initial state, once (one transaction)
        conn.execute(sa.text(f"CREATE TABLE IF NOT EXISTS {table} (k TEXT PRIMARY KEY, v TEXT)"))
        loaded = conn.execute(sa.text(f"SELECT 1 FROM {table} WHERE k = '__loaded__'")).first()
        if loaded is None:
            for key, value in workload.initial.items():
                conn.execute(sa.text(f"INSERT INTO {table} (k, v) VALUES (:k, :v)"),
                             {"k": key, "v": dumps(value)})
            conn.execute(sa.text(f"INSERT INTO {table} (k, v) VALUES ('__loaded__', '1')"))
    DBOS.launch()  # recovers the workflows a killed incarnation left pending
    print("ready", flush=True)
    outputs, latencies = [], []
    for index, (fn, arg) in enumerate(workload.requests):
        start = time.perf_counter()
        with SetWorkflowID(f"{args.tag}-r{index}"):
            handle = DBOS.start_workflow(run, fn, arg)
        outputs.append(json.loads(dumps(handle.get_result())))
        latencies.append(time.perf_counter() - start)
    with ds.engine.connect() as conn:
        state = {k: loads(v) for k, v in conn.execute(
            sa.text(f"SELECT k, v FROM {table} WHERE k <> '__loaded__'"))}
    print("result " + json.dumps(dict(outputs=outputs, latencies=latencies, steps=steps,
                                      state=state)), flush=True)
    DBOS.destroy()
    return 0


# --- databases ------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Postgres:
    """A private PostgreSQL on 127.0.0.1 (fsync on), as the ``postgres`` user when run as root
    (the server refuses root)."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="arcus-dbos-pg-")
        self.port = _free_port()
        self.user = None
        if os.geteuid() == 0:
            self.user = "postgres"
            shutil.chown(self.dir, user="postgres")

    def _run(self, command: str) -> subprocess.CompletedProcess:
        argv = (["su", self.user, "-s", "/bin/sh", "-c", command] if self.user
                else ["/bin/sh", "-c", command])
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    def start(self) -> Postgres:
        for tool in ("initdb", "pg_ctl"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"{tool} not found")
        done = self._run(f"initdb -D {self.dir}/data -A trust -U postgres")
        if done.returncode:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()[-200:]}")
        done = self._run(f"pg_ctl -D {self.dir}/data -l {self.dir}/log -w -o "
                         f"'-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
                         "-c max_connections=200' start")
        if done.returncode:
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()[-200:]}")
        return self

    def url(self, db: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{db}"

    def stop(self) -> None:
        self._run(f"pg_ctl -D {self.dir}/data -m immediate stop")
        shutil.rmtree(self.dir, ignore_errors=True)


def _worker_argv(python: str, db: dict, workload: str, requests: int, seed: int,
                 tag: str) -> list[str]:
    return [python, str(HERE), "--worker", "--sysdb", db["sysdb"], "--appdb", db["appdb"],
            "--workload", workload, "--requests", str(requests), "--seed", str(seed),
            "--tag", tag]


def run_dbos(python: str, db: dict, workload: str, requests: int, seed: int, tag: str,
             kills: int = 0, kill_s: tuple[float, float] = (0.05, 0.6)) -> dict:
    """Run the workload under DBOS in a child process, SIGKILLing it ``kills`` times at random
    moments after it is ready (it is restarted each time); the last incarnation's report."""
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    rng = random.Random(seed)
    done_kills, restarts, start = 0, 0, time.monotonic()
    while True:
        child = subprocess.Popen(_worker_argv(python, db, workload, requests, seed, tag),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=env)
        ready = threading.Event()
        lines: list[str] = []

        def pump(stream=child.stdout, lines=lines, ready=ready) -> None:
            for line in stream:
                lines.append(line)
                if line.startswith("ready"):
                    ready.set()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        if done_kills < kills:
            ready.wait(120)
            time.sleep(rng.uniform(*kill_s))
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
                child.wait()
                reader.join(5)
                done_kills += 1
                restarts += 1
                continue
        child.wait()
        reader.join(10)
        stderr = child.stderr.read()
        result = next((line for line in lines if line.startswith("result ")), None)
        if child.returncode != 0 or result is None:
            raise RuntimeError(f"DBOS worker failed (exit {child.returncode}): "
                               f"{stderr.strip()[-800:]}")
        report = json.loads(result[len("result "):])
        report.update(kills=done_kills, restarts=restarts,
                      wall_s=time.monotonic() - start)
        return report


# --- the driver ---------------------------------------------------------------------------
def _p50_us(values: list[float]) -> float:
    return statistics.median(values) * 1e6 if values else float("nan")


def _check_dbos(workload_name: str, requests: int, seed: int, report: dict) -> dict:
    from schedlab.arcus.bench import check
    from schedlab.arcus.workloads import make_workload

    workload = make_workload(workload_name, requests, seed, read_ratio=0.5, keys=16)
    found = check(workload, report["outputs"], report["state"])
    return dict(lost_writes=found.lost_writes, duplicated_writes=found.duplicated_writes,
                inconsistent_reads=found.inconsistent_reads,
                state_mismatches=found.state_mismatches, violations=found.total)


def _arcus_under_kills(platform, workload, protocol: str, kills: int, seed: int,
                       kill_s: tuple[float, float]) -> dict:
    """run_bench with a thread SIGKILLing random worker processes meanwhile."""
    from schedlab.arcus.bench import run_bench

    rng = random.Random(seed)
    stop, count = threading.Event(), [0]

    def killer() -> None:
        while not stop.is_set() and count[0] < kills:
            if stop.wait(rng.uniform(*kill_s)):
                return
            pids = platform.worker_pids()
            if pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(rng.choice(pids), signal.SIGKILL)
                    count[0] += 1

    thread = threading.Thread(target=killer, daemon=True)
    start = time.monotonic()
    thread.start()
    try:
        result = run_bench(platform, workload, protocol, seed=seed)
    finally:
        stop.set()
        thread.join()
    result.update(kills=count[0], wall_s=time.monotonic() - start)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sysdb", help=argparse.SUPPRESS)
    parser.add_argument("--appdb", help=argparse.SUPPRESS)
    parser.add_argument("--workload", default="rw", help=argparse.SUPPRESS)
    parser.add_argument("--tag", default="t", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--requests", type=int, default=30, help="per latency workload")
    parser.add_argument("--workloads", default="rw,hotel,retwis")
    parser.add_argument("--kill-requests", type=int, default=40, help="ledger requests")
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs per system")
    parser.add_argument("--db", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--dbos-python", default=os.environ.get("DBOS_PYTHON", sys.executable))
    parser.add_argument("--json", default=None, help="write the report here")
    args = parser.parse_args(argv)
    if args.worker:
        return dbos_worker(args)

    probe = subprocess.run([args.dbos_python, "-c", "import dbos, psycopg"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"skipped: {args.dbos_python} cannot import dbos (pip install dbos in a venv, "
              "then pass --dbos-python)", file=sys.stderr)
        return 0
    from schedlab.arcus.bench import run_bench
    from schedlab.arcus.platform import Platform
    from schedlab.arcus.store import RedisServer, find_redis_binary, redis_description
    from schedlab.arcus.workloads import make_workload

    if find_redis_binary() is None:
        print("skipped: redis-server is not installed", file=sys.stderr)
        return 0
    version = subprocess.run([args.dbos_python, "-c",
                              "import importlib.metadata as m; print(m.version('dbos'))"],
                             capture_output=True, text=True).stdout.strip()
    tmp = tempfile.mkdtemp(prefix="arcus-dbos-")
    postgres, why_not = None, ""
    if args.db == "postgres":
        try:
            postgres = Postgres().start()
        except (RuntimeError, OSError, KeyError, subprocess.SubprocessError) as exc:
            why_not = f"PostgreSQL could not be started ({exc}); SQLite instead"
            print(why_not, file=sys.stderr)
    if postgres is not None:
        db = dict(kind=f"PostgreSQL (private, 127.0.0.1:{postgres.port}, fsync on)",
                  sysdb=postgres.url(), appdb=postgres.url())
    else:
        db = dict(kind="SQLite files", sysdb=f"sqlite:///{tmp}/sys.sqlite",
                  appdb=f"sqlite:///{tmp}/app.sqlite")
    report: dict = dict(dbos_version=version, database=db["kind"], note=why_not,
                        arcus=redis_description(), latency=[], kills={})
    try:
        with RedisServer(aof="always") as server, Platform(server.url, workers=4) as platform:
            for name in ("arcus", "halfmoon"):
                run_bench(platform, make_workload("ledger", 8, 0), name)
            for index, name in enumerate(w for w in args.workloads.split(",") if w):
                workload = make_workload(name, args.requests, args.seed, read_ratio=0.5,
                                         keys=16)
                dbos = run_dbos(args.dbos_python, db, name, args.requests, args.seed,
                                tag=f"lat{index}")
                dbos.update(_check_dbos(name, args.requests, args.seed, dbos))
                row = dict(workload=name, requests=args.requests,
                           dbos_read_p50_us=_p50_us(dbos["steps"]["read"]),
                           dbos_write_p50_us=_p50_us(dbos["steps"]["write"]),
                           dbos_e2e_mean_ms=1e3 * statistics.mean(dbos["latencies"]),
                           dbos_violations=dbos["violations"])
                for protocol in ("arcus", "halfmoon"):
                    ours = run_bench(platform, workload, protocol, seed=args.seed)
                    row.update({f"{protocol}_read_p50_us": ours["read_p50_us"],
                                f"{protocol}_write_p50_us": ours["write_durable_p50_us"],
                                f"{protocol}_e2e_mean_ms": ours["e2e_mean_ms"],
                                f"{protocol}_violations": ours["violations"]})
                report["latency"].append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
            ledger = make_workload("ledger", args.kill_requests, args.seed)
            arcus = _arcus_under_kills(platform, ledger, "arcus", args.kills, args.seed,
                                       (0.05, 0.4))
            dbos = run_dbos(args.dbos_python, db, "ledger", args.kill_requests, args.seed,
                            tag="kill", kills=args.kills)
            dbos.update(_check_dbos("ledger", args.kill_requests, args.seed, dbos))
            report["kills"] = dict(
                requests=args.kill_requests,
                arcus={k: arcus[k] for k in ("kills", "violations", "lost_writes",
                                             "duplicated_writes", "inconsistent_reads",
                                             "state_mismatches", "wall_s", "e2e_mean_ms")},
                dbos={k: dbos[k] for k in ("kills", "violations", "lost_writes",
                                           "duplicated_writes", "inconsistent_reads",
                                           "state_mismatches", "wall_s")})
    finally:
        if postgres is not None:
            postgres.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"DBOS Transact {version} on {db['kind']}; Arcus: {report['arcus']}")
    print(f"{'workload':9} {'read p50 us (arcus/halfmoon/dbos)':36} "
          f"{'durable write p50 us':30} {'e2e mean ms':24} violations")
    for row in report["latency"]:
        print(f"{row['workload']:9} "
              f"{row['arcus_read_p50_us']:8.0f} {row['halfmoon_read_p50_us']:8.0f} "
              f"{row['dbos_read_p50_us']:8.0f}{'':10} "
              f"{row['arcus_write_p50_us']:8.0f} {row['halfmoon_write_p50_us']:8.0f} "
              f"{row['dbos_write_p50_us']:8.0f}   "
              f"{row['arcus_e2e_mean_ms']:6.1f} {row['halfmoon_e2e_mean_ms']:6.1f} "
              f"{row['dbos_e2e_mean_ms']:6.1f}    "
              f"{row['arcus_violations']}/{row['halfmoon_violations']}/{row['dbos_violations']}")
    kills = report["kills"]
    for system in ("arcus", "dbos"):
        k = kills[system]
        print(f"{system}: {kills['requests']} ledger requests, {k['kills']} SIGKILLs, "
              f"{k['violations']} violations (lost {k['lost_writes']}, duplicated "
              f"{k['duplicated_writes']}, inconsistent reads {k['inconsistent_reads']}, "
              f"state {k['state_mismatches']}), {k['wall_s']:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    bad = sum(r["arcus_violations"] + r["dbos_violations"] for r in report["latency"])
    return 1 if bad or kills["arcus"]["violations"] or kills["dbos"]["violations"] else 0


if __name__ == "__main__":  # the platform's fork server imports this module again
    raise SystemExit(main())
