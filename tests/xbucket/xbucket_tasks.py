"""Small real tasks for the executor tests: stdlib only, so a child interpreter stays light."""

import time


def hold_memory(megabytes: int, seconds: float = 0.3) -> int:
    """Touch ``megabytes`` MB and hold them a while, so the watchdog can see the peak."""
    block = b"\x01" * (megabytes * 2**20)
    time.sleep(seconds)
    return len(block) // 2**20


def write_file(megabytes: int, seconds: float = 0.3) -> int:
    """Write ``megabytes`` MB into the sandbox (the current directory)."""
    with open("out.bin", "wb") as handle:
        handle.write(b"\x02" * (megabytes * 2**20))
    time.sleep(seconds)
    return megabytes
