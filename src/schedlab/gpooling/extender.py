"""A kube-scheduler extender (HTTP filter / prioritize) scoring nodes with gPooling's policy.

gPooling (../shared/papers/14-gpooling.md) places slices so that the pool stays usable; on
Kubernetes the place to do that is the scheduler. kube-scheduler calls an extender with
``ExtenderArgs`` JSON (``Pod``, ``Nodes`` or ``NodeNames``) at ``filterVerb`` and
``prioritizeVerb``; this app answers with ``ExtenderFilterResult`` (``Nodes``/``NodeNames``,
``FailedNodes``, ``Error``) and a ``HostPriorityList`` (``Host``, ``Score`` in
0..``MAX_PRIORITY``), the shapes of ``k8s.io/kube-scheduler/extender/v1``.

A pod's slice comes from its annotations ``gpooling.io/gpu-milli`` (1..1000) and
``gpooling.io/gpu-memory`` (e.g. ``8GiB``), else from its containers' ``gpooling.io/vgpu``
limits (slots of ``1/split`` GPU, memory ``share x 16 GiB``). Filter keeps nodes with a device
that fits now (the :class:`Pool`'s books); prioritize scores each by the smallest increase of
FGD fragmentation a slice there would cause (the frag-aware policy's own measure and tie-break,
over the pod requests the extender has been asked to filter), so the node the policy would pick
scores highest. A malformed pod is
answered with ``Error`` naming the field, never a traceback. Scheduler config::

    extenders:
    - urlPrefix: http://127.0.0.1:8471
      filterVerb: filter
      prioritizeVerb: prioritize
      weight: 1
      nodeCacheCapable: true
      managedResources: [{name: gpooling.io/vgpu, ignoredByScheduler: true}]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import Body, FastAPI
from fastapi.responses import JSONResponse

from schedlab.core.errors import BadInputError
from schedlab.gpooling.devices import GIB, parse_size
from schedlab.gpooling.policies import FragAware
from schedlab.gpooling.pool import Pool
from schedlab.gpooling.state import FULL, Request

MAX_PRIORITY = 10
MILLI, MEMORY, SLOTS = "gpooling.io/gpu-milli", "gpooling.io/gpu-memory", "gpooling.io/vgpu"


def pod_request(pod: dict[str, Any], split: int = 10) -> Request:
    """The slice a pod asks for; BadInputError naming the field otherwise."""
    if not isinstance(pod, dict):
        raise BadInputError("must be an object", field="Pod")
    meta = pod.get("metadata") or {}
    notes = meta.get("annotations") or {}
    where = "Pod.metadata.annotations"
    if MILLI in notes:
        try:
            milli = int(str(notes[MILLI]))
        except ValueError:
            raise BadInputError(f"not an integer: {notes[MILLI]!r}",
                                field=f"{where}[{MILLI}]") from None
        if not 0 < milli <= FULL:
            raise BadInputError(f"must be in 1..{FULL}, got {milli}", field=f"{where}[{MILLI}]")
    else:
        slots = 0
        for i, container in enumerate((pod.get("spec") or {}).get("containers") or []):
            limits = ((container or {}).get("resources") or {}).get("limits") or {}
            if SLOTS in limits:
                try:
                    slots += int(str(limits[SLOTS]))
                except ValueError:
                    raise BadInputError(f"not an integer: {limits[SLOTS]!r}", field=(
                        f"Pod.spec.containers[{i}].resources.limits[{SLOTS}]")) from None
        if slots <= 0 or slots > split:
            raise BadInputError(f"the pod asks for no slice (set {MILLI}, or 1..{split} "
                                f"{SLOTS} in a container's limits)", field="Pod")
        milli = slots * FULL // split
    memory = milli * 16 * GIB // FULL
    if MEMORY in notes:
        memory = parse_size(str(notes[MEMORY]), f"{where}[{MEMORY}]")
    return Request(memory, milli, 1, None)


def _names(args: dict[str, Any]) -> list[str]:
    if args.get("NodeNames") is not None:
        names = args["NodeNames"]
    else:
        items = ((args.get("Nodes") or {}).get("items")) or []
        names = [((n or {}).get("metadata") or {}).get("name") for n in items]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise BadInputError("node names must be strings", field="NodeNames")
    return names


class Extender:
    """Filter and prioritize over a :class:`Pool`'s books."""

    def __init__(self, pool: Pool, split: int = 10) -> None:
        self.pool, self.split = pool, split
        self.meter = FragAware()  # learns the mix from the pods it is asked about
        self.node_of = np.array([d.node for d in pool.state.devices])

    def _fits(self, request: Request) -> np.ndarray:
        with self.pool._lock:  # the books, consistently
            return self.pool.state.fits_now(request)

    def filter(self, args: dict[str, Any]) -> dict[str, Any]:
        try:
            request = pod_request(args.get("Pod"), self.split)
            names = _names(args)
        except BadInputError as exc:
            return dict(Nodes=None, NodeNames=None, FailedNodes={}, Error=str(exc))
        self.meter.observe(request)
        fits = self._fits(request)
        ok_nodes = set(self.node_of[fits].tolist())
        known = set(self.node_of.tolist())
        keep = [n for n in names if n in ok_nodes]
        failed = {n: ("no gPooling device on this node" if n not in known else
                      "no device on this node has room for the slice") for n in names
                  if n not in ok_nodes}
        result: dict[str, Any] = dict(NodeNames=keep, FailedNodes=failed, Error="")
        if args.get("Nodes") is not None:
            items = args["Nodes"].get("items") or []
            result["Nodes"] = dict(args["Nodes"], items=[
                n for n in items if ((n or {}).get("metadata") or {}).get("name") in keep])
        else:
            result["Nodes"] = None
        return result

    def prioritize(self, args: dict[str, Any]) -> list[dict[str, Any]] | dict[str, str]:
        try:
            request = pod_request(args.get("Pod"), self.split)
            names = _names(args)
        except BadInputError as exc:
            return dict(Error=str(exc))
        state = self.pool.state
        with self.pool._lock:
            fits = state.fits_now(request)
            free_m, free_c = state.free_memory.copy(), state.free_milli.copy()
        before = self.meter.fragmentation(free_m, free_c, request)
        after = self.meter.fragmentation(free_m - request.memory, free_c - request.milli, request)
        left = (free_c - request.milli) / FULL  # ties: best fit, as the frag-aware policy does
        increase = np.where(fits, (after - before) / FULL + 1e-3 * left, np.inf)
        best = {}
        for n in names:
            on = self.node_of == n
            best[n] = float(increase[on].min()) if on.any() else float("inf")
        finite = [v for v in best.values() if np.isfinite(v)]
        lo, hi = (min(finite), max(finite)) if finite else (0.0, 0.0)
        scores = []
        for n in names:
            v = best[n]
            if not np.isfinite(v):
                score = 0
            elif hi == lo:
                score = MAX_PRIORITY
            else:
                score = round(MAX_PRIORITY * (hi - v) / (hi - lo))
            scores.append(dict(Host=n, Score=int(score)))
        return scores


def create_extender_app(pool: Pool, split: int = 10) -> FastAPI:
    """The extender's HTTP app (``POST /filter``, ``POST /prioritize``)."""
    extender = Extender(pool, split)
    app = FastAPI(title="gPooling scheduler extender", version="1")

    @app.post("/filter")
    def filter_(args: dict[str, Any] = Body(...)) -> dict[str, Any]:  # noqa: B008
        return extender.filter(args)

    @app.post("/prioritize")
    def prioritize(args: dict[str, Any] = Body(...)) -> Any:  # noqa: B008
        result = extender.prioritize(args)
        if isinstance(result, dict):  # a HostPriorityList cannot carry an error: say it in 400
            return JSONResponse(status_code=400, content=result)
        return result

    return app
