"""The engine: checks a plan is feasible and replays a seeded request stream through it.

It knows nothing of the policy that made the plan. Per request it charges what the market
model says: a user pays its base price when deadline and accuracy are met, plus ``gamma`` per
unit of accuracy, minus ``beta`` per second of delay (the QoS-adjusted price, so the payoff the
engine reports is exactly what the ILP maximises); providers pay compute, edge-to-edge transfer,
the cloud's fee and transfer, storage per GB·s, and ``coord_cost`` per pair of coalition members
per second. Requests per user are Poisson(rate x horizon), so metrics are per-request averages
of a concrete stream, and money is reported per second.

With ``queueing=True`` each edge request also waits in its cloudlet's M/G/c queue
(``queueing.py``: the cloudlet's GPUs, the served streams' rates and service times, the service
SCV measured from a trace or 1), and a request whose total delay then misses its deadline loses
its price. None of the planners sees this delay, so it is a yardstick independent of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from schedlab.core.errors import SchedlabError
from schedlab.mec_coalition import heuristics
from schedlab.mec_coalition.model import Instance
from schedlab.mec_coalition.policies import Plan


class InfeasiblePlanError(SchedlabError):
    """A plan breaks a capacity, a coalition boundary or routes to a model that is not cached."""


def check(inst: Instance, plan: Plan) -> None:
    """Raise InfeasiblePlanError naming the first violated constraint."""
    n = inst.cloudlets.n
    label = np.full(n, -1)
    for k, s in enumerate(plan.coalitions):
        members = np.fromiter(s, dtype=np.int64)
        if members.size == 0 or (members < 0).any() or (members >= n).any():
            raise InfeasiblePlanError(f"coalition {k} is empty or names unknown cloudlets",
                                      field="coalitions")
        if (label[members] >= 0).any():
            raise InfeasiblePlanError("a cloudlet is in two coalitions", field="coalitions")
        label[members] = k
    if (label < 0).any():
        raise InfeasiblePlanError(f"cloudlet {int(np.argmax(label < 0))} is in no coalition",
                                  field="coalitions")
    place, cand = plan.placement, inst.cand
    used = heuristics.storage_used(inst, place.cached, plan.shared)
    over = used > inst.cloudlets.storage_gb + 1e-6
    if over.any():
        k = int(np.argmax(over))
        raise InfeasiblePlanError(f"cloudlet {k} stores {used[k]:.2f} GB of "
                                  f"{inst.cloudlets.storage_gb[k]:.2f}", field="storage_gb")
    t = place.choice[place.choice >= 0]
    if (cand.user[t] != np.nonzero(place.choice >= 0)[0]).any():
        raise InfeasiblePlanError("a user is routed by another user's option", field="choice")
    if not place.cached[cand.node[t], cand.model[t]].all():
        raise InfeasiblePlanError("a user is served by a model its cloudlet does not cache",
                                  field="choice")
    if (label[cand.node[t]] != label[inst.home[cand.user[t]]]).any():
        raise InfeasiblePlanError("a user is served outside its home's coalition",
                                  field="choice")
    load = np.bincount(cand.node[t], cand.load[t], n)
    if (load > inst.cloudlets.compute_tflops + 1e-6).any():
        k = int(np.argmax(load - inst.cloudlets.compute_tflops))
        raise InfeasiblePlanError(f"cloudlet {k} is loaded beyond its compute capacity",
                                  field="compute_tflops")


def queue_waits(inst: Instance, plan: Plan) -> np.ndarray:
    """Mean M/G/c queueing wait (s) at each cloudlet under ``plan``'s routing."""
    from schedlab.mec_coalition.queueing import cloudlet_waits

    cand, choice = inst.cand, plan.placement.choice
    t = choice[choice >= 0]
    users = cand.user[t]
    nodes = cand.node[t]
    service = inst.zoo.tflop[cand.model[t]] / inst.cloudlets.gpu_tflops[nodes]
    scv = (np.ones(users.size) if inst.users.service_scv is None
           else np.asarray(inst.users.service_scv, dtype=float)[users])
    return cloudlet_waits(inst.users.rate[users], service, scv, nodes, inst.cloudlets.servers)


def evaluate(inst: Instance, plan: Plan, seed: int = 0, horizon_s: float = 600.0,
             queueing: bool = False) -> dict[str, Any]:
    """Metrics of ``plan`` on a seeded request stream; raises if the plan is infeasible."""
    check(inst, plan)
    e, u, cand, cloud = inst.economy, inst.users, inst.cand, inst.cloud
    rng = np.random.default_rng(seed)
    count = rng.poisson(u.rate * horizon_s).astype(float)
    choice = plan.placement.choice
    edge = choice >= 0
    t = choice[edge]
    delay, acc = cloud.delay_s.copy(), cloud.acc.copy()
    delay[edge], acc[edge] = cand.delay_s[t], cand.acc[t]
    per_req_cost = cloud.cost / np.maximum(u.rate, 1e-12)
    per_req_cost[edge] = cand.cost[t] / np.maximum(u.rate[edge], 1e-12)
    met = cloud.meets_deadline.copy()
    met[edge] = True  # candidates meet deadline and accuracy by construction
    wait = np.zeros(inst.cloudlets.n)
    if queueing:
        wait = queue_waits(inst, plan)
        delay[edge] += wait[cand.node[t]]
        met[edge] = delay[edge] <= u.deadline_s[edge]
    revenue = u.price * met + e.gamma * acc - e.beta * delay
    served = count.sum()
    storage = float(inst.cloudlets.storage_cost @ heuristics.storage_used(
        inst, plan.placement.cached, plan.shared))
    coordination = sum(e.coord_cost * len(s) * (len(s) - 1) / 2 for s in plan.coalitions)
    cost = float(count @ per_req_cost) / horizon_s + storage + coordination
    payoff = float(count @ revenue) / horizon_s - cost
    sizes = np.array([len(s) for s in plan.coalitions])
    home_hit = edge.copy()
    home_hit[edge] = cand.node[t] == inst.home[edge]
    return dict(
        avg_delay_ms=1000 * float(count @ delay) / max(served, 1),
        cost=cost,
        payoff=payoff,
        storage_cost=storage,
        coordination_cost=coordination,
        accuracy=float(count @ acc) / max(served, 1),
        hit_ratio=float(count @ edge) / max(served, 1),
        local_hit_ratio=float(count @ home_hit) / max(served, 1),
        deadline_met=float(count @ met) / max(served, 1),
        coalitions=int(sizes.size),
        mean_coalition=float(sizes.mean()),
        max_coalition=int(sizes.max()),
        cached_models=int(plan.placement.cached.sum()),
        requests=int(served),
        queueing_ms=1000 * float(count[edge] @ wait[cand.node[t]]) / max(count[edge].sum(), 1),
    )


def expected_payoff(inst: Instance, plan: Plan) -> float:
    """Payoff per second in expectation (rates, not a sampled stream): all-cloud + objective."""
    objective = heuristics.objective(inst, plan.placement.cached, plan.placement.choice,
                                     plan.shared)
    coordination = sum(inst.economy.coord_cost * len(s) * (len(s) - 1) / 2
                       for s in plan.coalitions)
    return float(inst.cloud.payoff.sum()) + objective - coordination
