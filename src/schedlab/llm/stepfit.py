"""A stored fit of an engine's step time: ``c0 + c_tok·tokens + c_seq·sequences`` seconds.

Fitted once from *measured* steps (least squares), saved as JSON with where it came from, and
reused: an engine clock that is refitted on every run moves with the machine's load, and so do
the decisions scheduled on it (issue 47: the VTC reference on the CPU engine was unstable for
that reason). Loading never refits; a bad file is one line naming the file and field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError

FIELDS = ("c0", "c_tok", "c_seq")


@dataclass(frozen=True)
class StepFit:
    """Seconds per engine step as a linear function of its tokens and sequences."""

    c0: float
    c_tok: float
    c_seq: float
    source: str = ""  # what was measured (engine, model, machine, date)
    steps: int = 0  # measured steps the fit came from
    rel_rms: float = float("nan")  # root-mean-square relative error of the fit on them

    def seconds(self, tokens: int | float, seqs: int | float) -> float:
        return self.c0 + self.c_tok * tokens + self.c_seq * seqs

    @property
    def tokens_per_s(self) -> float:
        """Prefill tokens per second at the margin (what one second of the engine is worth)."""
        return 1.0 / max(self.c_tok, 1e-12)

    @property
    def coefficients(self) -> tuple[float, float, float]:
        return self.c0, self.c_tok, self.c_seq

    @classmethod
    def fit(
        cls,
        tokens: Sequence[float],
        seqs: Sequence[float],
        seconds: Sequence[float],
        source: str = "",
    ) -> StepFit:
        """Least squares over measured steps; coefficients clipped at 0 (never negative time)."""
        x = np.column_stack([np.ones(len(tokens)), np.asarray(tokens), np.asarray(seqs)])
        y = np.asarray(seconds, dtype=float)
        if len(y) < 3:
            raise BadInputError(f"need >= 3 measured steps, got {len(y)}", field="steps")
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        coef = np.maximum(coef, 0.0)
        rel = (x @ coef - y) / np.maximum(y, 1e-12)
        return cls(
            *map(float, coef), source=source, steps=len(y), rel_rms=float(np.sqrt(np.mean(rel**2)))
        )

    def save(self, path: str | Path) -> Path:
        from schedlab.core.io import write_text

        data = {
            k: (None if isinstance(v, float) and math.isnan(v) else v)
            for k, v in asdict(self).items()
        }
        write_text(path, json.dumps(data, indent=1) + "\n")
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> StepFit:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise BadInputError(f"{path}: no such step-time fit", field="path") from None
        except json.JSONDecodeError as exc:
            raise BadInputError(
                f"{path}:{exc.lineno}: not JSON ({exc.msg})", field="json"
            ) from None
        if not isinstance(data, dict):
            raise BadInputError(f"{path}: expected a JSON object", field="json")
        values = {}
        for name in FIELDS:
            v = data.get(name)
            if (
                not isinstance(v, (int, float))
                or isinstance(v, bool)
                or not math.isfinite(v)
                or v < 0
            ):
                raise BadInputError(f"{path}: must be a finite number >= 0, got {v!r}", field=name)
            values[name] = float(v)
        if values["c0"] + values["c_tok"] + values["c_seq"] <= 0:
            raise BadInputError(f"{path}: all coefficients are 0", field="c0")
        rel = data.get("rel_rms", float("nan"))
        return cls(
            **values,
            source=str(data.get("source", "")),
            steps=int(data.get("steps", 0) or 0),
            rel_rms=float(rel) if isinstance(rel, (int, float)) else float("nan"),
        )
