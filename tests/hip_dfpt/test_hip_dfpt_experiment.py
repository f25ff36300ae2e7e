"""The registered experiments run end to end at toy scale and their required claims hold."""

from __future__ import annotations

import pytest

from schedlab.core.experiment import experiments


def test_the_experiments_are_registered() -> None:
    names = {e.name for e in experiments(["hip_dfpt"])}
    assert names == {"real_dfpt", "scale_balance", "live_balance"}


def test_real_dfpt_toy_scale() -> None:
    pytest.importorskip("pyscf")
    from schedlab.hip_dfpt.experiment import real_dfpt

    result = real_dfpt(molecule="h2", basis="sto-3g", grid_level=0, devices=2, streams=1, seed=0)
    assert result.frame.height == 5 and result.figures
    required = [c for c in result.claims if c.required]
    assert len(required) == 2 and all(c.holds for c in required)


def test_scale_balance_toy_scale() -> None:
    from schedlab.hip_dfpt.experiment import scale_balance

    result = scale_balance(atoms=800, devices=16, streams=2, seed=1)
    assert len(result.claims) == 5 and len(result.figures) == 2
    assert set(result.frame["config"]) >= {"sota", "hip-dfpt"}


def test_live_balance_toy_scale() -> None:
    pytest.importorskip("pyscf")
    from schedlab.hip_dfpt.experiment import live_balance

    result = live_balance(molecule="h2", basis="sto-3g", grid_level=0, devices=2, xc="pbe", seed=0)
    required = [c for c in result.claims if c.required]
    assert len(required) == 3 and all(c.holds for c in required)
    assert result.frame.height >= 1 and (result.frame["cpu_balance"] >= 1.0).all()
