"""``experiments.json`` (what ``schedlab list`` reads) equals the live registry.

This test imports every system's experiment module (seconds of CPU) so that ``schedlab list``
never has to. When it fails, regenerate: ``python -m schedlab.core.catalogue``.
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from schedlab import cli
from schedlab.core.catalogue import live_catalogue, render, static_catalogue
from schedlab.core.systems import SYSTEM_NAMES


def test_the_generated_catalogue_equals_the_registry():
    live = live_catalogue()
    assert render(static_catalogue()) == render(live), (
        "experiments.json is stale: run python -m schedlab.core.catalogue")
    assert "core" in live and set(live) - {"core"} <= set(SYSTEM_NAMES)


def test_list_reports_each_systems_experiments_from_the_catalogue():
    result = CliRunner().invoke(cli.app, ["list", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["system"]: r for r in json.loads(result.stdout)}
    catalogue = static_catalogue()
    for system, row in rows.items():
        names = [e["name"] for e in catalogue.get(system, [])]
        assert row["experiments"] == names
        assert row["status"] == ("implemented" if names else "planned")
