"""A generated, static list of the registered experiments (``experiments.json``).

Why: the registry is filled by importing each system's ``experiment`` module, which pulls in
NumPy, Polars, SciPy, torch, ... - ~5 s of CPU just for ``schedlab list`` to say which systems
are implemented. ``list`` reads this file instead; ``reproduce`` still imports the real
registry. A test checks the file equals the live registry, so it cannot go stale silently.

Regenerate after adding or renaming an experiment::

    python -m schedlab.core.catalogue          # rewrite experiments.json
    python -m schedlab.core.catalogue --check  # exit 1 if it differs from the registry
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from schedlab.core.systems import CORE, SYSTEM_NAMES

CATALOGUE = Path(__file__).with_name("experiments.json")

#: {system: [{"name": ..., "description": ...}, ...]}, systems and experiments sorted by name
Catalogue = dict[str, list[dict[str, str]]]


def static_catalogue(path: Path = CATALOGUE) -> Catalogue:
    """The experiments as last generated (no system is imported)."""
    return json.loads(path.read_text(encoding="utf-8"))


def live_catalogue() -> Catalogue:
    """The experiments the registry holds now: imports every system's experiment module."""
    from schedlab.core.experiment import experiments

    found: Catalogue = {}
    for system in (CORE, *SYSTEM_NAMES):
        rows = sorted((dict(name=e.name, description=e.description)
                       for e in experiments([system])), key=lambda r: r["name"])
        if rows:
            found[system] = rows
    return dict(sorted(found.items()))


def render(catalogue: Catalogue) -> str:
    return json.dumps(catalogue, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    from schedlab.core.io import write_text

    args = sys.argv[1:] if argv is None else argv
    text = render(live_catalogue())
    if "--check" in args:
        same = CATALOGUE.is_file() and CATALOGUE.read_text(encoding="utf-8") == text
        print("experiments.json is " + ("up to date" if same else
                                         "stale: run python -m schedlab.core.catalogue"))
        return 0 if same else 1
    write_text(CATALOGUE, text)
    print(f"wrote {CATALOGUE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
