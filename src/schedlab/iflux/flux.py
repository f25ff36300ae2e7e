"""IFlux as a Flux frobnicator-style plugin: jobspec in, jobspec with its I/O allocation out.

Paper: IFlux (../shared/papers/10-iflux.md) was built for Flux. Flux's job-ingest pipeline passes
each submitted jobspec (RFC 14/25) through *frobnicator* plugins that may modify it, and through
validators that may reject it. :class:`IFluxFrobnicator` does both for intents: it validates
``attributes.system.intents`` (a bad intent rejects the job at submission, before anything is
allocated), maps and fits them, and records the allocation in ``attributes.system.iflux`` where
a job-shell plugin (our :mod:`deploy` runtime) picks it up. Flux itself is not installable here,
so the plugin works on plain dicts with the same shape Flux hands to Python plugins.
"""

from __future__ import annotations

import copy
from typing import Any

from schedlab.core.errors import BadInputError
from schedlab.iflux.jobspec import intents_from_jobspec
from schedlab.iflux.policies import DEFAULT_CAPACITY, allocate, shared_mapper
from schedlab.iflux.rules import Tier


class IFluxFrobnicator:
    """``frob(jobspec, userid, info)`` -> a new jobspec; raises BadInputError to reject.

    ``capacity`` is the free space per tier the plugin may hand out (the scheduler's view).
    """

    name = "iflux"

    def __init__(self, mapper: str = "iflux", capacity: dict[Tier, int] | None = None) -> None:
        self.mapper = shared_mapper(mapper)
        self.capacity = dict(DEFAULT_CAPACITY if capacity is None else capacity)
        self.total = dict(self.capacity)  # what release() may give back at most

    def validate(self, jobspec: dict[str, Any]) -> None:
        """A Flux validator: reject malformed or contradicting intents at submission."""
        intents_from_jobspec(jobspec)

    def frob(self, jobspec: dict[str, Any], userid: int = 0,
             info: dict[str, Any] | None = None) -> dict[str, Any]:
        job = intents_from_jobspec(jobspec)
        out = copy.deepcopy(jobspec)
        if not job.intents:
            return out
        allocation = allocate(job.intents, self.mapper, self.capacity)
        system = out.setdefault("attributes", {}).setdefault("system", {})
        system["iflux"] = allocation.to_dict()
        shell = system.setdefault("shell", {}).setdefault("options", {})
        shell["iflux"] = {"enable": True}
        return out

    def reserve(self, jobspec: dict[str, Any]) -> dict[Tier, int]:
        """Frob and take the allocated space out of this plugin's capacity (a running queue)."""
        placed = self.frob(jobspec)["attributes"]["system"].get("iflux")
        if placed is None:
            return {}
        used: dict[Tier, int] = {}
        for p in placed["placements"]:
            tier = Tier(p["tier"])
            if tier is not Tier.PFS:
                used[tier] = used.get(tier, 0) + int(p["size"])
        for tier, size in used.items():  # all checked before any is taken
            if self.capacity.get(tier, 0) < size:
                raise BadInputError(f"capacity on {tier} was taken by earlier jobs",
                                    field="attributes.system.intents")
        for tier, size in used.items():
            self.capacity[tier] -= size
        return used

    def release(self, used: dict[Tier, int]) -> None:
        """Give back what :meth:`reserve` took (the job ended or was cancelled). Releasing
        more than is reserved (the same job released twice) is refused, changing nothing."""
        for tier, size in used.items():
            if size < 0:
                raise BadInputError(f"cannot release a negative size on {tier}", field=str(tier))
            if self.capacity.get(tier, 0) + size > self.total.get(tier, 0):
                raise BadInputError(f"cannot release {size} bytes on {tier}: more than is "
                                    "reserved (released twice?)", field=str(tier))
        for tier, size in used.items():
            self.capacity[tier] = self.capacity.get(tier, 0) + size
