"""The control plane over HTTP (FastAPI): one path to create, resize and release virtual devices.

gPooling (../shared/papers/14-gpooling.md) exposes pooling through a unified control path. Every
route is a thin call into :class:`~schedlab.gpooling.pool.Pool`; errors keep their meaning:
422 for a request that can never be satisfied or is malformed, 409 when the pool is full now,
404 for an unknown virtual device.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.gpooling.devices import parse_size
from schedlab.gpooling.pool import NoRoomError, Pool


class CreateBody(BaseModel):
    memory: str | int = Field(description="bytes, or a size such as '10GiB'")
    compute: float = Field(gt=0, le=1, description="share of one device's time")
    model: str | None = Field(default=None, description="only devices of this model")


class ResizeBody(BaseModel):
    memory: str | int | None = None
    compute: float | None = Field(default=None, gt=0, le=1)


class UsageBody(BaseModel):
    usage: dict[str, float]


def _http(exc: BadInputError) -> HTTPException:
    if isinstance(exc, UnknownNameError):
        return HTTPException(404, detail=str(exc))
    if isinstance(exc, NoRoomError):
        return HTTPException(409, detail=str(exc))
    return HTTPException(422, detail=str(exc))


def create_app(pool: Pool) -> FastAPI:
    """An app serving ``pool``; the pool is the only state, so tests can build one per case."""
    app = FastAPI(title="gPooling control plane", version="1")

    @app.get("/devices")
    def devices() -> list[dict[str, Any]]:
        return [dict(id=d.id, node=d.node, index=d.index, model=d.model, vendor=d.spec.vendor,
                     memory=d.spec.memory) for d in pool.state.devices]

    @app.get("/stats")
    def stats() -> dict[str, Any]:
        return pool.stats()

    @app.get("/vdevs")
    def list_vdevs() -> list[dict[str, Any]]:
        return [v.to_dict() for v in pool.list()]

    @app.post("/vdevs", status_code=201)
    def create(body: CreateBody) -> dict[str, Any]:
        try:
            return pool.create(parse_size(body.memory), body.compute, body.model).to_dict()
        except BadInputError as exc:
            raise _http(exc) from None

    @app.get("/vdevs/{vid}")
    def get(vid: str) -> dict[str, Any]:
        try:
            vdev = pool.get(vid)
            pool.usage(vid)
            return vdev.to_dict()
        except BadInputError as exc:
            raise _http(exc) from None

    @app.patch("/vdevs/{vid}")
    def resize(vid: str, body: ResizeBody) -> dict[str, Any]:
        try:
            memory = None if body.memory is None else parse_size(body.memory)
            return pool.resize(vid, memory, body.compute).to_dict()
        except BadInputError as exc:
            raise _http(exc) from None

    @app.delete("/vdevs/{vid}")
    def release(vid: str) -> dict[str, Any]:
        try:
            return pool.release(vid).to_dict()
        except BadInputError as exc:
            raise _http(exc) from None

    @app.post("/vdevs/{vid}/usage")
    def report(vid: str, body: UsageBody) -> dict[str, Any]:
        try:
            return pool.report(vid, body.usage).to_dict()
        except BadInputError as exc:
            raise _http(exc) from None

    return app
