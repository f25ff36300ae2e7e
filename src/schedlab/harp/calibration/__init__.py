"""Published cost-model parameters with their provenance, and a validation against the papers.

Each ``*.toml`` here is one source (ISAAC, PUMA, MNSIM 2.0): ``[[param]]`` entries set one
:class:`~schedlab.harp.arch.ArchConfig` field each and say where the number comes from
(``cite``); ``[[reported]]`` entries are figures the paper itself reports, which
:func:`validation_rows` compares with what our cost model (``costs.py``) derives. A reported
figure is compared either with the same source's calibration when our model has to *aggregate*
it (a chip's peak GOPS/s/mm^2 from per-component areas, times and energies), or, when it is a
single component, with another source's calibration named by ``compare_with`` (e.g. ISAAC's
ADC energy against PUMA's constants, which PUMA says it took from ISAAC). A figure the same
calibration sets directly would match by construction and is not listed.

``load_calibration("puma")`` reads a packaged file; a path reads a user's own file in the same
format. ``schedlab harp estimate --calibration puma`` applies it before ``--arch`` overrides.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

from schedlab.core.errors import ConfigError, UnknownNameError
from schedlab.harp.arch import ArchConfig, arch_from_dict
from schedlab.harp.costs import analog_row_ns, area_mm2, dynamic_energy_pj, leakage_mw
from schedlab.harp.workloads import Op, Workload

HERE = Path(__file__).parent
CALIBRATIONS = ("isaac", "puma", "mnsim")


@dataclass(frozen=True)
class Param:
    field: str
    value: float
    cite: str


@dataclass(frozen=True)
class Reported:
    metric: str
    value: float
    unit: str
    cite: str
    compare_with: str = ""  # another calibration's key: a component figure checked across sources


@dataclass(frozen=True)
class Calibration:
    key: str
    paper: str
    code: str
    crossbars: int
    tiles: int
    params: tuple[Param, ...]
    reported: tuple[Reported, ...]
    path: Path

    def overrides(self) -> dict:
        """The params as a nested dict ArchConfig accepts."""
        data: dict = {}
        for p in self.params:
            node = data
            *parents, leaf = p.field.split(".")
            for key in parents:
                node = node.setdefault(key, {})
            node[leaf] = p.value
        return data

    def arch(self, base: dict | None = None) -> ArchConfig:
        """This calibration over ``base`` (an ArchConfig dump; defaults when None)."""
        merged = _merge(base or ArchConfig().model_dump(), self.overrides())
        merged["name"] = f"calibrated-{self.key}"
        return arch_from_dict(merged, path=self.path)


def _merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        out[key] = _merge(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def _need(entry: dict, key: str, kind: type | tuple[type, ...], path: Path, where: str):
    if key not in entry:
        raise ConfigError(f"{where}: missing '{key}'", path=path, field=key)
    value = entry[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ConfigError(
            f"{where}: '{key}' must be {getattr(kind, '__name__', kind)}, got {value!r}",
            path=path,
            field=key,
        )
    return value


def load_calibration(name: str | Path) -> Calibration:
    """A packaged calibration by key (``isaac``, ``puma``, ``mnsim``) or a TOML file by path."""
    path = Path(name)
    if path.suffix != ".toml":
        if str(name) not in CALIBRATIONS:
            raise UnknownNameError("calibration", str(name), list(CALIBRATIONS))
        path = HERE / f"{name}.toml"
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError("calibration file not found", path=path) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=path) from None
    source = data.get("source", {})
    chip = data.get("chip", {})
    params, reported = [], []
    known = ArchConfig().model_dump()
    for i, entry in enumerate(data.get("param", [])):
        where = f"param #{i + 1}"
        field = _need(entry, "field", str, path, where)
        node = known
        for part in field.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ConfigError(f"{where}: unknown architecture field", path=path, field=field)
            node = node[part]
        value = _need(entry, "value", (int, float), path, where)
        cite = _need(entry, "cite", str, path, where)
        params.append(Param(field, value, cite))
    for i, entry in enumerate(data.get("reported", [])):
        where = f"reported #{i + 1}"
        metric = _need(entry, "metric", str, path, where)
        if metric not in METRICS:
            raise UnknownNameError(f"{path}: {where} metric", metric, list(METRICS))
        reported.append(
            Reported(
                metric,
                float(_need(entry, "value", (int, float), path, where)),
                _need(entry, "unit", str, path, where),
                _need(entry, "cite", str, path, where),
                entry.get("compare_with", ""),
            )
        )
    cal = Calibration(
        key=_need(source, "key", str, path, "[source]"),
        paper=_need(source, "paper", str, path, "[source]"),
        code=source.get("code", ""),
        crossbars=_need(chip, "crossbars", int, path, "[chip]"),
        tiles=_need(chip, "tiles", int, path, "[chip]"),
        params=tuple(params),
        reported=tuple(reported),
        path=path,
    )
    cal.arch()  # a value the architecture rejects fails here, naming the file and field
    return cal


def peak_figures(arch: ArchConfig, crossbars: int) -> dict[str, float]:
    """What our cost model derives for a chip of ``crossbars`` all running MVMs back to back.

    One crossbar-filling weight (rows x cols/slices) per crossbar, each multiplying a vector
    every ``analog_row_ns``; energy per vector from ``dynamic_energy_pj`` (crossbar, ADC, DAC,
    buffer traffic) plus the leakage of the whole chip; area from ``area_mm2``.
    """
    xbar = arch.crossbar
    width = xbar.cols // xbar.slices
    op = Op("peak", 0, "static", k=xbar.rows, n=width)
    ns = analog_row_ns(op, arch)
    gops = crossbars * 2 * xbar.rows * width / ns  # ops per ns = GOPS
    energy = sum(dynamic_energy_pj(Workload("peak", 1, (op,)), arch).values())
    power_mw = crossbars * energy / ns + leakage_mw(crossbars, arch)
    area = sum(area_mm2(crossbars, arch).values())
    return {
        "peak_gops_per_mm2": gops / area,
        "peak_gops_per_w": gops / (power_mw / 1e3),
        "peak_tops": gops / 1e3,
        "chip_mm2": area,
        "chip_w": power_mw / 1e3,
        "adc_pj_per_conversion": xbar.adc_power_mw * xbar.adc_sample_ns,
        "dac_mw_per_crossbar": xbar.rows * xbar.dac_power_mw,
        "buffer_mm2_per_tile": arch.memory.buffer_area_mm2,
        "tiles": math.ceil(crossbars / arch.memory.crossbars_per_tile),
    }


METRICS = (
    "peak_gops_per_mm2",
    "peak_gops_per_w",
    "adc_pj_per_conversion",
    "dac_mw_per_crossbar",
    "buffer_mm2_per_tile",
)


def validation_rows(names: tuple[str, ...] = CALIBRATIONS) -> list[dict]:
    """One row per reported figure: our model's value, the paper's, and the relative error."""
    rows = []
    for name in names:
        cal = load_calibration(name)
        for rep in cal.reported:
            used = load_calibration(rep.compare_with) if rep.compare_with else cal
            ours = peak_figures(used.arch(), cal.crossbars)[rep.metric]
            rows.append(
                {
                    "source": cal.key,
                    "metric": rep.metric,
                    "unit": rep.unit,
                    "calibration_used": used.key,
                    "ours": ours,
                    "reported": rep.value,
                    "error": (ours - rep.value) / rep.value,
                    "cite": rep.cite,
                }
            )
    return rows
