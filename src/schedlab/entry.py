"""The ``schedlab`` console script: ``hydra-mcs solve`` by a lean path, everything else by Typer.

``schedlab.cli`` imports Typer, Click and Rich (~0.07 s of CPU) before it parses anything; a
``hydra-mcs solve`` call on a small pair searches for less than that. So this entry point first
offers the arguments to ``schedlab.hydra_mcs.fastcli``, which takes the call only when its
output is byte for byte the Typer command's (plain arguments, no terminal) and returns ``None``
otherwise (``--help``, a typo, a terminal, ...): then ``schedlab.cli.main`` runs as always.
"""

from __future__ import annotations

import sys

_FAST = (["hydra-mcs", "solve"], ["hydra_mcs", "solve"])


def main() -> None:
    """Console-script entry point."""
    if sys.argv[1:3] in _FAST:
        from schedlab.hydra_mcs.fastcli import main as solve

        code = solve(sys.argv[3:])
        if code is not None:
            sys.exit(code)
    from schedlab.cli import main as full

    full()
