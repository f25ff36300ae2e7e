"""Collaborative large-model caching and inference offloading in MEC with coalition formation.

Paper: ../shared/papers/03-mec_coalition.md. The public API: build a market (seeded or from
the EUA topology), pick a policy by name, evaluate its plan.

>>> from schedlab.mec_coalition import synthetic, get_policy, evaluate
>>> inst = synthetic(cloudlets=10, models=10, users=60, seed=0)
>>> metrics = evaluate(inst, get_policy("coalition").plan(inst, seed=0))
"""

from schedlab.mec_coalition.coalition import (
    CoalitionGame,
    find_deviation,
    form_coalitions,
    strong_price_of_anarchy,
)
from schedlab.mec_coalition.engine import InfeasiblePlanError, check, evaluate
from schedlab.mec_coalition.heuristics import randomized_rounding
from schedlab.mec_coalition.ilp import Placement, brute_force, nlip_objective, solve
from schedlab.mec_coalition.model import Cloudlets, Economy, Instance, Users, Zoo
from schedlab.mec_coalition.policies import BASELINES, POLICIES, Plan, Policy, get_policy
from schedlab.mec_coalition.workloads import from_files, make_zoo, synthetic

__all__ = [
    "BASELINES", "POLICIES", "Cloudlets", "CoalitionGame", "Economy", "InfeasiblePlanError",
    "Instance", "Placement", "Plan", "Policy", "Users", "Zoo", "brute_force", "check",
    "evaluate", "find_deviation", "form_coalitions", "from_files", "get_policy", "make_zoo",
    "nlip_objective", "randomized_rounding", "solve", "strong_price_of_anarchy", "synthetic",
]
