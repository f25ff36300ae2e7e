"""The write-back cache daemon IFlux starts beside a job and stops after it.

Paper: IFlux (../shared/papers/10-iflux.md) deploys middleware with the job. While the job writes
to its fast tier, this process copies files that have stopped changing to the PFS, so the flush
after the job only has the tail left. It records what it made durable in a state file (written
atomically) that the final flush reads, and on SIGTERM finishes the file in hand and exits.

Run as ``python -m schedlab.iflux.daemon writeback SRC DST STATE [--interval S] [--settle S]
[--compress]``; standard library only, so it starts in a fraction of a second.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from schedlab.iflux.storage import Client
from schedlab.iflux.transfer import flush_tree, load_state, save_state


def writeback(src: Path, dst: Path, state: Path, interval: float, settle: float,
              compress: bool) -> int:
    stop = {"now": False}

    def on_term(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    client = Client()
    done = load_state(state)
    failures = 0
    while not stop["now"]:
        stats, done = flush_tree(client, src, dst, compress=compress, done=done, settle=settle)
        if stats.files:
            save_state(state, done)
        failures += len(stats.failed)
        deadline = time.monotonic() + interval
        while not stop["now"] and time.monotonic() < deadline:
            time.sleep(min(0.02, interval))
    save_state(state, done)
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="schedlab.iflux.daemon")
    sub = parser.add_subparsers(dest="kind", required=True)
    wb = sub.add_parser("writeback")
    wb.add_argument("src", type=Path)
    wb.add_argument("dst", type=Path)
    wb.add_argument("state", type=Path)
    wb.add_argument("--interval", type=float, default=0.2)
    wb.add_argument("--settle", type=float, default=0.2)
    wb.add_argument("--compress", action="store_true")
    args = parser.parse_args(argv)
    return writeback(args.src, args.dst, args.state, args.interval, args.settle, args.compress)


if __name__ == "__main__":
    sys.exit(main())
