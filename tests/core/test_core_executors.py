"""The same sweep gives the same claims in-process, on a process pool and on Ray."""

import polars as pl
import pytest

from schedlab.core.executors import LocalExecutor
from schedlab.core.experiment import claims_frame, experiments, run_sweep


def _square(x: int) -> int:
    return x * x


def _claims(executor) -> pl.DataFrame:
    sweep = run_sweep(experiments(["core"]), [0, 1], "quick", executor)
    return claims_frame(sweep).select("claim", "measured", "holds")


def test_process_pool_maps_every_item_once():
    pairs = dict(LocalExecutor(jobs=2).map_unordered(_square, list(range(6))))
    assert pairs == {i: i * i for i in range(6)}


def test_pool_and_inline_agree():
    assert _claims(LocalExecutor(jobs=1)).equals(_claims(LocalExecutor(jobs=2)))


@pytest.mark.slow
def test_ray_and_local_agree():
    pytest.importorskip("ray")
    from schedlab.core.executors import RayExecutor

    ray_exec = RayExecutor(jobs=2)
    try:
        on_ray = _claims(ray_exec)
    finally:
        ray_exec.close()
    assert on_ray.equals(_claims(LocalExecutor(jobs=1)))
