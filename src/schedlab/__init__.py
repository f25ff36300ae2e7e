"""schedlab: scheduling and resource-management papers as measured, reusable software.

Each paper lives in its own subpackage (``schedlab.xbucket``, ``schedlab.faircache``, ...);
``schedlab.core`` holds only what two or more of them share.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("schedlab")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
