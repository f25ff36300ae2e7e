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


def reserve_address_space(gigabytes: int, touch_mb: int, seconds: float = 0.2) -> int:
    """Reserve ``gigabytes`` GiB of address space with mmap but touch only ``touch_mb`` MB (as
    a JVM, Go runtime or CUDA context does); returns the MB touched."""
    import mmap

    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0x4000)
    region = mmap.mmap(-1, gigabytes * 2**30, flags=flags)
    page = b"\x01" * 4096
    for offset in range(0, touch_mb * 2**20, 4096):
        region[offset:offset + 4096] = page
    time.sleep(seconds)
    region.close()
    return touch_mb


def spike_in_child(megabytes: int, seconds: float = 0.05) -> int:
    """A grandchild that holds ``megabytes`` MB for ``seconds`` and exits: a spike shorter
    than a slow sampler's interval, which only a kernel limit on the whole tree sees."""
    import subprocess
    import sys

    code = f"import time; b = b'\\x01' * ({megabytes} * 2**20); time.sleep({seconds})"
    return subprocess.run([sys.executable, "-c", code], check=False).returncode


def exit_now(code: int) -> None:
    """Leave the child at once with ``code``, writing no result (as a crash would)."""
    import os

    os._exit(code)
