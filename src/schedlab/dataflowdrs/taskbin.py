"""The task program every workflow task runs as a separate, unmodified OS process.

DataFlowDrs (paper 09) traces real programs. Each task here is ``python -S taskbin.py SPEC``
where SPEC is a JSON object: it reads its input files with ``read(block)`` system calls, hashes
``work_mb`` megabytes of data (real CPU work), and writes its outputs with ``write(block)`` calls.
The block size is what a "small-I/O storm" changes; the tier a file lives on is what a "slow
storage tier" changes. Standard library only, so the process starts in milliseconds.

SPEC keys: ``inputs`` [path], ``outputs`` [[path, bytes]], ``block`` int, ``work_mb`` float.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

_CHUNK = 1 << 16


def read_all(path: str, block: int, digest: hashlib._Hash) -> int:
    """Read ``path`` to the end in ``block``-byte calls, folding a sample into ``digest``."""
    total = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            data = os.read(fd, block)
            if not data:
                break
            total += len(data)
            digest.update(data[:64])
    finally:
        os.close(fd)
    return total


def compute(work_mb: float, seed: bytes) -> bytes:
    """Hash ``work_mb`` MB: real, deterministic CPU work standing in for the task's science."""
    h = hashlib.sha256(seed)
    buffer = bytearray(_CHUNK)
    for _ in range(int(work_mb * (1 << 20) / _CHUNK)):
        h.update(buffer)
        buffer[:32] = h.digest()
    return h.digest()


def write_file(path: str, size: int, block: int, pattern: bytes) -> None:
    """Write ``size`` bytes in ``block``-byte calls (the content derives from the inputs)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    unit = (pattern * (block // len(pattern) + 1))[:block]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = size
        while left > 0:
            n = min(block, left)
            os.write(fd, unit[:n])
            left -= n
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: taskbin.py SPEC_JSON\n")
        return 2
    spec = json.loads(argv[1])
    block = max(1, int(spec.get("block", 1 << 20)))
    digest = hashlib.sha256()
    for path in spec.get("inputs", []):
        read_all(path, block, digest)
    pattern = compute(float(spec.get("work_mb", 0.0)), digest.digest())
    for path, size in spec.get("outputs", []):
        write_file(path, int(size), block, pattern)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
