"""Child side of LocalExecutor for Python callables: ``python -m schedlab.xbucket.runner CALL OUT``.

Runs in a fresh interpreter (small baseline, nothing inherited from the parent's heap) inside
the task's sandbox. Loads the pickled (function, args), calls it, and pickles ("ok", value,
peak MB) or ("error", text, peak MB) to OUT. A MemoryError (RLIMIT_AS reached) exits with
MEMORY_ERROR_EXIT so the executor can tell "ran out of its allocation" from an ordinary
failure. X-Bucket: ../shared/papers/15-xbucket.md.
"""

from __future__ import annotations

import pickle
import sys
import traceback

#: exit status meaning "the task hit its memory limit"
MEMORY_ERROR_EXIT = 75


def peak_rss_mb() -> float:
    """VmHWM: this process's exact peak RSS since exec (ru_maxrss would include the parent's
    pages that were resident when the executor forked us)."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def main(argv: list[str]) -> int:
    call_path, out_path = argv[1], argv[2]
    with open(call_path, "rb") as handle:
        payload = pickle.load(handle)
    function, args, kwargs = (*payload, {})[:3]  # (function, args[, kwargs])
    try:
        outcome = ("ok", function(*args, **kwargs))
    except MemoryError:
        return MEMORY_ERROR_EXIT
    except Exception:  # the task's own error travels back as text, not as a crash here
        outcome = ("error", traceback.format_exc())
    with open(out_path, "wb") as handle:
        pickle.dump((*outcome, peak_rss_mb()), handle)
    return 0 if outcome[0] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
