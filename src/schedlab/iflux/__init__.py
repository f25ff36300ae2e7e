"""IFlux: intent-driven allocation of I/O accelerators in HPC schedulers.

Paper abstract: ../shared/papers/10-iflux.md. Users state *why, what and how* they do I/O;
IFlux maps those intents to hardware tiers and software accelerators, allocates and deploys them
with the job, and makes the job use them transparently (a private mount namespace).

Names are loaded lazily so the small helper processes (write-back daemon, I/O jobs, Slurm hooks)
start without importing NumPy or Pydantic.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Intent": "intents", "Level": "intents", "DataKind": "intents", "Usage": "intents",
    "Sharing": "intents", "Mode": "intents", "Consistency": "intents", "Pattern": "intents",
    "parse_size": "intents", "encode": "intents",
    "Tier": "rules", "Soft": "rules", "Rule": "rules", "DEFAULT_RULES": "rules",
    "compile_rules": "rules", "interpret": "rules",
    "Mapper": "policies", "MAPPERS": "policies", "make_mapper": "policies",
    "allocate": "policies", "Allocation": "policies", "Placement": "policies",
    "DEFAULT_CAPACITY": "policies",
    "JobIntents": "jobspec", "read_intents": "jobspec", "intents_from_jobspec": "jobspec",
    "intents_from_slurm_script": "jobspec",
    "Site": "storage", "StorageModel": "storage", "Client": "storage",
    "decide": "engine", "run": "engine",
    "Plan": "deploy", "RunReport": "deploy",
    "IFluxFrobnicator": "flux",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'schedlab.iflux' has no attribute {name!r}")
    return getattr(importlib.import_module(f"schedlab.iflux.{_EXPORTS[name]}"), name)
