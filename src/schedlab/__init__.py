"""schedlab: scheduling and resource-management papers as measured, reusable software.

Each paper lives in its own subpackage (``schedlab.xbucket``, ``schedlab.faircache``, ...);
``schedlab.core`` holds only what two or more of them share.
"""

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    # the version is read on first use: importlib.metadata costs ~15 ms, and every command
    # (``schedlab hydra-mcs solve`` on a small pair runs for ~0.2 s) imports this package
    if name != "__version__":
        raise AttributeError(f"module 'schedlab' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("schedlab")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0.0.0+unknown"
    globals()["__version__"] = found
    return found
