"""The interference model fitted to measured pairs: the fit, its held-out error on Lucid's
data (when present), the truth the engine accounts with, and bad measurement files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from schedlab.core.errors import BadInputError
from schedlab.couchsurfer.interference import (
    DEFAULT_COEF,
    Measurements,
    PairTruth,
    Profile,
    fit,
    load_measurements,
    predict_speed,
    validate,
    validate_by_workload,
)

SOLO = "model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem,label\n"
PAIRS = (",model1,dataset1,gpu_num1,batchsize1,amp1,speed1,model2,dataset2,gpu_num2,batchsize2,"
         "amp2,speed2,gpu_util,gmem_util,gmem\n")


def _synthetic(coef: tuple[float, ...], n: int = 12) -> Measurements:
    rng = np.random.default_rng(0)
    profiles = [Profile(f"m{i}", 32, 0, float(u), 0.2, 2.0, 1)
                for i, u in enumerate(rng.uniform(0.1, 1.0, n))]
    pairs = []
    for i in range(n):
        for j in range(i + 1, n):
            ui, uj = profiles[i].gpu_util, profiles[j].gpu_util
            pairs.append((i, j, predict_speed(ui, uj, coef), predict_speed(uj, ui, coef)))
    return Measurements(profiles, pairs)


def test_fit_recovers_the_coefficients_of_noise_free_pairs() -> None:
    coef = (0.01, 0.05, 0.2, 0.1)
    assert fit(_synthetic(coef)) == pytest.approx(coef, abs=1e-9)
    assert validate(_synthetic(coef)).mae == pytest.approx(0.0, abs=1e-9)


def test_truth_uses_the_measured_pair_in_either_order() -> None:
    m = Measurements([Profile("a", 32, 0, 0.5, 0.2, 2, 0), Profile("b", 32, 0, 0.9, 0.5, 4, 2)],
                     [(0, 1, 0.7, 0.6)])
    truth = PairTruth(m)
    assert truth.speeds(10, 0.5, 0, 11, 0.9, 1) == (0.7, 0.6)
    assert truth.speeds(12, 0.9, 1, 13, 0.5, 0) == (0.6, 0.7)
    # an unmeasured pair (no profile) gets the prediction plus a fixed per-pair residual
    first = truth.speeds(1, 0.5, -1, 2, 0.5, -1)
    assert first == PairTruth(m).speeds(1, 0.5, -1, 2, 0.5, -1)
    assert all(0.05 <= s <= 1 for s in first)


@pytest.mark.parametrize(("solo", "pairs", "where"), [
    (SOLO.replace("gpu_util", "util"), PAIRS, ("single_data.csv", ":1", "gpu_util")),
    (SOLO + "A,d,32,0,1.0,150,10,100,1\n", PAIRS, ("single_data.csv", ":2", "gpu_util")),
    (SOLO + "A,d,32,0,1.0,50,10,100,1\n",
     PAIRS + "0,B,d,1,32,0,0.9,A,d,1,32,0,0.8,50,20,100\n", ("colocate_info.csv", ":2", "model1")),
    (SOLO + "A,d,32,0,1.0,50,10,100,1\n",
     PAIRS + "0,A,d,1,32,0,fast,A,d,1,32,0,0.8,50,20,100\n", ("colocate_info.csv", ":2",
                                                              "speed1")),
    (SOLO + "A,d,32,0,1.0,50,10,100,1\nA,e,32,0,1.0,60,10,100,1\n", PAIRS,
     ("single_data.csv", ":3", "model")),
])
def test_bad_measurement_files_name_file_line_field(tmp_path: Path, solo: str, pairs: str,
                                                    where: tuple[str, str, str]) -> None:
    (tmp_path / "single_data.csv").write_text(solo)
    (tmp_path / "colocate_info.csv").write_text(pairs)
    with pytest.raises(BadInputError) as info:
        load_measurements(tmp_path)
    message = str(info.value)
    assert "\n" not in message
    for part in where:
        assert part in message
    with pytest.raises(BadInputError, match="no such folder"):
        load_measurements(tmp_path / "missing")


def test_lucid_pairs_held_out_error(shared_data: Path) -> None:
    m = load_measurements(shared_data / "colocation")
    assert len(m.pairs) == 1388
    v = validate(m, seed=0)
    # the fitted model beats a constant and the old assumed model on pairs it never saw
    assert v.mae < v.median_mae < v.old_model_mae
    assert v.coef == pytest.approx(DEFAULT_COEF, abs=1e-3)
    assert abs(v.predicted_median_speed - v.measured_median_speed) < 0.05
    assert validate_by_workload(m)["all"] < 0.2
