"""A kube-scheduler extender (HTTP filter / prioritize) scoring nodes with gPooling's policy.

gPooling (../shared/papers/14-gpooling.md) places slices so that the pool stays usable; on
Kubernetes the place to do that is the scheduler. kube-scheduler POSTs ``ExtenderArgs`` JSON
(``Pod``, and ``Nodes`` (a NodeList) or ``NodeNames`` when ``nodeCacheCapable``) to the
``filterVerb`` and ``prioritizeVerb``; this app answers with an ``ExtenderFilterResult``
(``Nodes``/``NodeNames``, ``FailedNodes``, ``FailedAndUnresolvableNodes``, ``Error``) and a
``HostPriorityList`` (``[{"Host", "Score"}]``, 0..``MaxExtenderPriority`` = 10): the shapes of
``k8s.io/kube-scheduler/extender/v1``, whose Go structs carry no JSON tags, so the keys are the
Go field names (read here case-insensitively, as Go's decoder does).

What a pod asks for, per container (each container gets its own virtual device from the device
plugin, ``kubernetes.py``): ``resources.limits`` (else ``requests``) of ``gpooling.io/vgpu``,
slots of ``1/split`` GPU (memory ``slots x device memory / split``, or
``gpooling.io/vgpu-memory`` in MiB if the container also asks for that). A pod annotation
``gpooling.io/gpu-milli`` (1..1000) with optional ``gpooling.io/gpu-memory`` (``8GiB``) asks
for one slice directly. A pod that asks for none of these is not ours: every node passes and
scores 0, so the extender never blocks other pods.

**Filter** keeps the nodes where every container's slice fits on some GPU now (the
:class:`Pool`'s books); a node with no gPooling GPU, or none large enough ever, is *unresolvable*
(preemption cannot help), a node that is just full is *failed*. **Prioritize** places the slices
greedily with the frag-aware policy's own measure (the increase of FGD-style expected
fragmentation, ties to best fit) and scores the node whose placement fragments the pool least
10, the worst 0. Malformed JSON, an unknown ``gpooling.io/...`` resource or a bad quantity is
HTTP 400 with ``Error`` naming the field. Scheduler config::

    extenders:
    - urlPrefix: http://127.0.0.1:8471
      filterVerb: filter
      prioritizeVerb: prioritize
      weight: 1
      nodeCacheCapable: true
      managedResources: [{name: gpooling.io/vgpu, ignoredByScheduler: true}]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import FastAPI
from fastapi import Request as HttpRequest
from fastapi.responses import JSONResponse

from schedlab.core.errors import BadInputError
from schedlab.gpooling.devices import parse_size
from schedlab.gpooling.kubernetes import placement_cost
from schedlab.gpooling.policies import FragAware
from schedlab.gpooling.pool import Pool
from schedlab.gpooling.state import FULL, Request

MAX_PRIORITY = 10  # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority
MIN_PRIORITY = 0
RESOURCE = "gpooling.io/vgpu"
MILLI, MEMORY = "gpooling.io/gpu-milli", "gpooling.io/gpu-memory"


def _key(obj: dict[str, Any], name: str) -> Any:
    """``obj[name]`` matched case-insensitively (Go's encoding/json does the same)."""
    if name in obj:
        return obj[name]
    lower = name.lower()
    for key, value in obj.items():
        if isinstance(key, str) and key.lower() == lower:
            return value
    return None


def _count(value: Any, field: str) -> int:
    """An extended-resource quantity: a whole number, as a JSON number or a string."""
    if isinstance(value, bool):
        raise BadInputError(f"not a quantity: {value!r}", field=field)
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    else:
        raise BadInputError(f"extended resources are whole numbers, got {value!r}", field=field)
    if number < 0:
        raise BadInputError(f"must not be negative, got {number}", field=field)
    return number


def _object(value: Any, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadInputError(f"must be an object, got {type(value).__name__}", field=field)
    return value


@dataclass(frozen=True)
class Slice:
    """One container's ask: ``milli`` of a GPU and ``memory`` bytes. Without ``memory`` it is
    its share of whatever GPU it lands on: ``slots x (device memory // split)`` for slots (what
    the device plugin grants), else ``milli``'s share."""

    milli: int
    memory: int | None = None
    slots: int = 0
    split: int = 0

    def memory_on(self, device_memory):
        """Bytes on a device (or an array of devices) of ``device_memory`` bytes."""
        if self.memory is not None:
            return device_memory * 0 + self.memory
        if self.slots:
            return self.slots * (device_memory // self.split)
        return self.milli * device_memory // FULL

    def request(self, device_memory: int) -> Request:
        return Request(int(self.memory_on(int(device_memory))), self.milli, 1, None)


def pod_requests(pod: Any, split: int = 10, resource: str = RESOURCE) -> list[Slice]:
    """The slices a pod asks for (one per container that asks); [] if it asks for none.

    BadInputError names the field of anything malformed."""
    if not isinstance(pod, dict):
        raise BadInputError("missing or not an object (the pod to place)", field="Pod")
    meta = _object(pod.get("metadata"), "Pod.metadata")
    notes = _object(meta.get("annotations"), "Pod.metadata.annotations")
    where = "Pod.metadata.annotations"
    domain = resource.split("/")[0] + "/"
    memory_resource = f"{resource}-memory"
    if MILLI in notes:
        try:
            milli = int(str(notes[MILLI]))
        except ValueError:
            raise BadInputError(f"not an integer: {notes[MILLI]!r}",
                                field=f"{where}[{MILLI}]") from None
        if not 0 < milli <= FULL:
            raise BadInputError(f"must be in 1..{FULL}, got {milli}", field=f"{where}[{MILLI}]")
        memory = None
        if MEMORY in notes:
            memory = parse_size(str(notes[MEMORY]), f"{where}[{MEMORY}]")
        return [Slice(milli, memory)]
    spec = _object(pod.get("spec"), "Pod.spec")
    containers = spec.get("containers") or []
    if not isinstance(containers, list):
        raise BadInputError("must be a list", field="Pod.spec.containers")
    out = []
    for i, container in enumerate(containers):
        base = f"Pod.spec.containers[{i}].resources"
        resources = _object(_object(container, f"Pod.spec.containers[{i}]").get("resources"),
                            base)
        limits = _object(resources.get("limits"), f"{base}.limits")
        requests = _object(resources.get("requests"), f"{base}.requests")
        asked = {**requests, **limits}  # limits win; requests alone default the limit
        for name in asked:
            if isinstance(name, str) and name.startswith(domain) \
                    and name not in (resource, memory_resource):
                raise BadInputError(f"unknown resource {name!r}; this extender manages "
                                    f"{resource} (and {memory_resource}, MiB)",
                                    field=f"{base}.limits[{name}]")
        if resource not in asked:
            if memory_resource in asked:
                raise BadInputError(f"{memory_resource} needs {resource} as well",
                                    field=f"{base}.limits")
            continue
        which = "limits" if resource in limits else "requests"
        slots = _count(asked[resource], f"{base}.{which}[{resource}]")
        if slots == 0:
            continue
        if slots > split:
            raise BadInputError(f"a virtual device is at most one GPU ({split} slots), asked "
                                f"for {slots}", field=f"{base}.{which}[{resource}]")
        memory = None
        if memory_resource in asked:
            memory = _count(asked[memory_resource], f"{base}.limits[{memory_resource}]") << 20
            if memory <= 0:
                raise BadInputError("must be positive", field=f"{base}.limits[{memory_resource}]")
        out.append(Slice(slots * (FULL // split), memory, slots, split))
    return out


def pod_request(pod: Any, split: int = 10) -> Request:
    """The first slice of a pod, sized on a 16 GiB GPU (BadInputError if it asks for none)."""
    slices = pod_requests(pod, split)
    if not slices:
        raise BadInputError(f"the pod asks for no slice (set {MILLI}, or 1..{split} "
                            f"{RESOURCE} in a container's limits)", field="Pod")
    return slices[0].request(16 << 30)


def _names(args: dict[str, Any]) -> tuple[list[str], dict[str, Any] | None]:
    """The candidate node names, and the NodeList they came from (if the scheduler sent one)."""
    names, nodes = _key(args, "NodeNames"), _key(args, "Nodes")
    if names is None and nodes is None:
        raise BadInputError("give the candidate nodes (Nodes or NodeNames)", field="NodeNames")
    if names is None:
        nodes = _object(nodes, "Nodes")
        items = nodes.get("items") or []
        if not isinstance(items, list):
            raise BadInputError("must be a list", field="Nodes.items")
        names = []
        for i, node in enumerate(items):
            name = _object(_object(node, f"Nodes.items[{i}]").get("metadata"),
                           f"Nodes.items[{i}].metadata").get("name")
            if not isinstance(name, str):
                raise BadInputError("missing node name", field=f"Nodes.items[{i}].metadata.name")
            names.append(name)
        return names, nodes
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise BadInputError("must be a list of node names", field="NodeNames")
    return names, None


class Extender:
    """Filter and prioritize over a :class:`Pool`'s books (library calls; the app wraps them)."""

    def __init__(self, pool: Pool, split: int = 10, resource: str = RESOURCE) -> None:
        self.pool, self.split, self.resource = pool, split, resource
        self.meter = FragAware()  # learns the request mix from the pods it is asked about
        index: dict[str, list[int]] = {}
        for i, d in enumerate(pool.state.devices):
            index.setdefault(d.node, []).append(i)
        self.devices_of = {n: np.array(ix, dtype=np.int64) for n, ix in index.items()}

    def _slices(self, args: dict[str, Any]) -> list[Slice]:
        return pod_requests(_key(args, "Pod"), self.split, self.resource)

    def _snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        with self.pool._lock:  # the books, consistently
            state = self.pool.state
            return state.free_memory.copy(), state.free_milli.copy()

    def _place(self, slices: Sequence[Slice], node: str, free_m: np.ndarray,
               free_c: np.ndarray) -> float | None:
        """Greedy frag-aware placement of ``slices`` on ``node``'s devices, from the free
        memory and compute of the whole pool (not changed); the summed fragmentation
        increase, or None if some slice does not fit (or the node has no devices)."""
        ix = self.devices_of.get(node)
        if ix is None:
            return None
        free_m, free_c = free_m[ix].copy(), free_c[ix].copy()  # just this node's devices
        total_memory = self.pool.state.total_memory[ix]
        total = 0.0
        for piece in sorted(slices, key=lambda s: s.milli, reverse=True):
            memory = piece.memory_on(total_memory)  # what the device plugin grants there
            fits = (free_m >= memory) & (free_c >= piece.milli)
            if not fits.any():
                return None
            probe = piece.request(int(total_memory[np.flatnonzero(fits)[0]]))
            increase = placement_cost(self.meter, free_m, free_c, memory, piece.milli, probe,
                                      fits)
            d = int(np.argmin(increase))
            total += float(increase[d])
            free_m[d] -= memory[d]
            free_c[d] -= piece.milli
        return total

    def filter(self, args: dict[str, Any]) -> dict[str, Any]:
        """``ExtenderFilterResult`` for ``ExtenderArgs``; BadInputError on malformed input."""
        args = _object(args, "ExtenderArgs")
        slices = self._slices(args)
        names, nodes = _names(args)
        keep, failed, unresolvable = [], {}, {}
        free_m, free_c = self._snapshot()
        total_m = self.pool.state.total_memory
        idle_c = np.full_like(free_c, FULL)
        for n in names:
            if not slices:
                keep.append(n)
            elif n not in self.devices_of:
                unresolvable[n] = "no gPooling GPU on this node"
            elif self._place(slices, n, total_m, idle_c) is None:
                unresolvable[n] = "the pod's slices can never fit this node's GPUs"
            elif self._place(slices, n, free_m, free_c) is None:
                failed[n] = "no room on this node's GPUs for the pod's slices now"
            else:
                keep.append(n)
        for piece in slices:  # the mix the fragmentation measure expects
            self.meter.observe(piece.request(int(self.pool.state.total_memory.max())))
        result: dict[str, Any] = dict(Nodes=None, NodeNames=None, FailedNodes=failed,
                                      FailedAndUnresolvableNodes=unresolvable, Error="")
        if nodes is not None:
            kept = set(keep)
            result["Nodes"] = dict(nodes, items=[
                item for item in nodes.get("items") or []
                if (item.get("metadata") or {}).get("name") in kept])
        else:
            result["NodeNames"] = keep
        return result

    def prioritize(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        """``HostPriorityList`` for ``ExtenderArgs``; BadInputError on malformed input."""
        args = _object(args, "ExtenderArgs")
        slices = self._slices(args)
        names, _ = _names(args)
        if not slices:
            return [dict(Host=n, Score=MIN_PRIORITY) for n in names]
        free_m, free_c = self._snapshot()
        cost = {}
        for n in names:
            placed = self._place(slices, n, free_m, free_c)
            cost[n] = np.inf if placed is None else placed
        finite = [v for v in cost.values() if np.isfinite(v)]
        lo, hi = (min(finite), max(finite)) if finite else (0.0, 0.0)
        scores = []
        for n in names:
            v = cost[n]
            if not np.isfinite(v):
                score = MIN_PRIORITY
            elif hi - lo < 1e-12:
                score = MAX_PRIORITY
            else:
                score = round(MAX_PRIORITY * (hi - v) / (hi - lo))
            scores.append(dict(Host=n, Score=int(score)))
        return scores


def create_extender_app(pool: Pool, split: int = 10, resource: str = RESOURCE) -> FastAPI:
    """The extender's HTTP app: ``POST /filter``, ``POST /prioritize``, ``GET /healthz``."""
    extender = Extender(pool, split, resource)
    app = FastAPI(title="gPooling scheduler extender", version="1")

    async def _args(http: HttpRequest) -> dict[str, Any]:
        body = await http.body()
        try:
            args = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            where = f" at line {exc.lineno} column {exc.colno}" \
                if isinstance(exc, json.JSONDecodeError) else ""
            raise BadInputError(f"the body is not JSON{where}", field="ExtenderArgs") from None
        if not isinstance(args, dict):
            raise BadInputError("the body must be a JSON object", field="ExtenderArgs")
        return args

    def _bad(exc: BadInputError, **shape: Any) -> JSONResponse:
        return JSONResponse(status_code=400, content=dict(shape, Error=str(exc)))

    @app.post("/filter")
    async def filter_(http: HttpRequest) -> Any:
        try:
            return extender.filter(await _args(http))
        except BadInputError as exc:
            return _bad(exc, Nodes=None, NodeNames=None, FailedNodes={},
                        FailedAndUnresolvableNodes={})

    @app.post("/prioritize")
    async def prioritize(http: HttpRequest) -> Any:
        try:
            return extender.prioritize(await _args(http))
        except BadInputError as exc:  # a HostPriorityList cannot carry an error: 400 says it
            return _bad(exc)

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return dict(ok=True, devices=len(pool.state), resource=resource, split=split)

    return app
