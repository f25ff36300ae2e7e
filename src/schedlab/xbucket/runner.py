"""Child side of LocalExecutor for Python callables: ``python runner.py CALL OUT``.

Runs in a fresh interpreter (small baseline, nothing inherited from the parent's heap) inside
the task's sandbox. Loads (function, args, kwargs) — pickled (``P`` prefix) or, as Parsl sends
apps, dilled (``D``: decorated functions, closures, ``__main__`` functions, which dill loads
against this interpreter's ``__main__``, so such an app imports what it uses inside its body,
Parsl's own rule) — calls it, and pickles ("ok", value, peak MB) or ("error", (traceback text,
pickled exception or None), peak MB) to OUT, so the caller can raise the app's own exception
type. A MemoryError (RLIMIT_AS reached) exits with MEMORY_ERROR_EXIT so the executor can tell
"ran out of its allocation" from an ordinary failure. X-Bucket: ../shared/papers/15-xbucket.md.
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


def _dumps(outcome: tuple) -> bytes:
    """Pickle, else dill (a value only dill can carry), else the reason as an error."""
    try:
        return pickle.dumps(outcome)
    except Exception as first:
        try:
            import dill

            return dill.dumps(outcome)
        except Exception:
            text = f"cannot send the task's result back: {first!r}"
            return pickle.dumps(("error", (text, None), outcome[2]))


def _exception_bytes(exc: BaseException) -> bytes | None:
    """The exception pickled, if it also loads back (some classes' __init__ refuse their args)."""
    try:
        raw = pickle.dumps(exc)
        pickle.loads(raw)
        return raw
    except Exception:
        return None


def main(argv: list[str]) -> int:
    call_path, out_path = argv[1], argv[2]
    with open(call_path, "rb") as handle:
        raw = handle.read()
    if raw[:1] == b"D":
        import dill

        payload = dill.loads(raw[1:])
    else:
        payload = pickle.loads(raw[1:] if raw[:1] == b"P" else raw)
    function, args, kwargs = (*payload, {})[:3]  # (function, args[, kwargs])
    try:
        outcome: tuple = ("ok", function(*args, **kwargs))
    except MemoryError:
        return MEMORY_ERROR_EXIT
    except Exception as exc:  # the task's own error travels back, not as a crash here
        outcome = ("error", (traceback.format_exc(), _exception_bytes(exc)))
    data = _dumps((*outcome, peak_rss_mb()))
    with open(out_path, "wb") as handle:
        handle.write(data)
    return 0 if outcome[0] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
