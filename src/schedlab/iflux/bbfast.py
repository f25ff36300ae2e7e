"""Entry point of the fast ``burst_buffer.lua`` calls (``slurm_bb_job_process``, ``_setup``,
``_get_status``): run as a file, ``python -S .../schedlab/iflux/bbfast.py --spool S OP ...``.

slurmctld waits for ``slurm_bb_job_process`` with its locks held, so its wall time including
interpreter start matters. Importing ``schedlab`` runs the package's ``__init__`` (an
``importlib.metadata`` version lookup, ~30 ms here) and ``schedlab.core`` imports ``typing``;
this entry registers the three packages as bare namespaces instead, so only the standard
library and the modules the fast path needs (``core.errors``, ``iflux.fastpath``,
``iflux.burst_buffer``) are loaded. :func:`burst_buffer.install` byte-compiles them.
"""

import os
import sys
import types


def _bare_packages() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    for name, path in (("schedlab", root), ("schedlab.core", os.path.join(root, "core")),
                       ("schedlab.iflux", here)):
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [path]
            sys.modules[name] = module


if __name__ == "__main__":
    _bare_packages()
    from schedlab.iflux.burst_buffer import main

    sys.exit(main())
