"""Collaborative large-model caching and inference offloading in MEC with coalition formation.

Paper: ../shared/papers/03-mec_coalition.md. The public API: build a market (seeded or from
the EUA topology), pick a policy by name, evaluate its plan.

>>> from schedlab.mec_coalition import synthetic, get_policy, evaluate
>>> inst = synthetic(cloudlets=10, models=10, users=60, seed=0)
>>> metrics = evaluate(inst, get_policy("coalition").plan(inst, seed=0))
"""

from schedlab.core.lazy import lazy_exports

_EXPORTS = {
    "CoalitionGame": "coalition", "find_deviation": "coalition", "form_coalitions": "coalition",
    "strong_price_of_anarchy": "coalition", "InfeasiblePlanError": "engine", "check": "engine",
    "evaluate": "engine", "randomized_rounding": "heuristics", "Placement": "ilp",
    "brute_force": "ilp", "nlip_objective": "ilp", "solve": "ilp", "Cloudlets": "model",
    "Economy": "model", "Instance": "model", "Users": "model", "Zoo": "model",
    "BASELINES": "policies", "POLICIES": "policies", "Plan": "policies", "Policy": "policies",
    "get_policy": "policies", "from_files": "workloads", "make_zoo": "workloads",
    "synthetic": "workloads",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
