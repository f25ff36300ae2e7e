"""The control plane over HTTP (FastAPI): one path to create, resize and release virtual devices.

gPooling (../shared/papers/14-gpooling.md) exposes pooling through a unified control path. Every
route is a thin call into :class:`~schedlab.gpooling.pool.Pool`, for the tenant its bearer token
names (``Authorization: Bearer <token>``). Codes: 401 no or unknown token, 403 another tenant's
virtual device, 404 unknown id, 409 full now or a change that would pull resources from under
attached processes (``?force=true`` from the owner overrides for release and shrink), 422 a
request that can never be satisfied or is malformed.
"""

from __future__ import annotations

import hmac
import json
import math
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, field_validator

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.gpooling.devices import parse_size
from schedlab.gpooling.pool import ForbiddenError, NoRoomError, Pool


class CreateBody(BaseModel):
    memory: str | int = Field(description="bytes, or a size such as '10GiB'")
    compute: float = Field(gt=0, le=1, description="share of one device's time")
    model: str | None = Field(default=None, description="only devices of this model")


class ResizeBody(BaseModel):
    memory: str | int | None = None
    compute: float | None = Field(default=None, gt=0, le=1)


class UsageBody(BaseModel):
    """Counters an agent pushes: the usage region's own field names, finite and >= 0."""

    usage: dict[str, float]

    @field_validator("usage")
    @classmethod
    def _known_counters(cls, usage: dict[str, float]) -> dict[str, float]:
        from schedlab.gpooling import shm

        known = dict.fromkeys((*shm.FIELDS, *shm.LIMIT_FIELDS))
        for key, value in usage.items():
            if key not in known:
                raise ValueError(f"unknown counter '{key}'; valid: {', '.join(known)}")
            if not math.isfinite(value) or (value < 0 and key not in shm.SIGNED_FIELDS):
                raise ValueError(f"counter '{key}' must be finite and >= 0, got {value}")
        return usage


def _http(exc: BadInputError) -> HTTPException:
    if isinstance(exc, UnknownNameError):
        return HTTPException(404, detail=str(exc))
    if isinstance(exc, ForbiddenError):
        return HTTPException(403, detail=str(exc))
    if isinstance(exc, NoRoomError):  # ConflictError too
        return HTTPException(409, detail=str(exc))
    return HTTPException(422, detail=str(exc))


def read_tokens(path: str | Path) -> dict[str, str]:
    """Tokens file → {token: tenant}. JSON ``{"tenant": "token", ...}`` or lines ``tenant token``
    (``#`` comments). Errors name the file and line."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise BadInputError(f"cannot read tokens file: {exc.strerror}", path=path) from exc
    pairs: list[tuple[str, str, int]] = []
    if text.lstrip().startswith("{"):
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInputError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno) from exc
        for tenant, token in document.items():
            if not isinstance(token, str):
                raise BadInputError("a token must be a string", path=path, field=tenant)
            pairs.append((tenant, token, 0))
    else:
        for number, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split()
            if len(fields) != 2:
                raise BadInputError("expected 'tenant token'", path=path, line=number)
            pairs.append((fields[0], fields[1], number))
    tokens: dict[str, str] = {}
    for tenant, token, number in pairs:
        if len(token) < 16:
            raise BadInputError("token is shorter than 16 characters", path=path,
                                line=number or None, field="token")
        if token in tokens:
            raise BadInputError("the same token is given to two tenants", path=path,
                                line=number or None, field="token")
        tokens[token] = tenant
    if not tokens:
        raise BadInputError("no tokens in file", path=path)
    return tokens


def new_token() -> str:
    return secrets.token_urlsafe(24)


def create_app(pool: Pool, tokens: Mapping[str, str]) -> FastAPI:
    """An app serving ``pool`` to the tenants of ``tokens`` ({token: tenant}; tenant "admin"
    sees every virtual device). There is no anonymous access."""
    if not tokens:
        raise BadInputError("the control plane needs at least one token", field="tokens")
    known = dict(tokens)
    app = FastAPI(title="gPooling control plane", version="2")

    @app.exception_handler(RequestValidationError)
    def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        """422 with each bad field named; never echo the input (NaN/inf would not encode)."""
        errors = [dict(field=".".join(str(p) for p in e.get("loc", ()) if p != "body"),
                       message=str(e.get("msg", ""))) for e in exc.errors()]
        text = "; ".join(f"field '{e['field']}': {e['message']}" for e in errors)
        return JSONResponse(status_code=422, content=dict(detail=text, errors=errors))

    def tenant(request: Request) -> str:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise HTTPException(401, detail="missing bearer token",
                                headers={"WWW-Authenticate": "Bearer"})
        for candidate, name in known.items():
            if hmac.compare_digest(candidate.encode(), token.strip().encode()):
                return name
        raise HTTPException(401, detail="unknown token", headers={"WWW-Authenticate": "Bearer"})

    who = Depends(tenant)

    @app.get("/devices")
    def devices(_: str = who) -> list[dict[str, Any]]:
        return [dict(id=d.id, node=d.node, index=d.index, model=d.model, vendor=d.spec.vendor,
                     memory=d.spec.memory) for d in pool.state.devices]

    @app.get("/stats")
    def stats(_: str = who) -> dict[str, Any]:
        return pool.stats()

    @app.get("/vdevs")
    def list_vdevs(me: str = who) -> list[dict[str, Any]]:
        return [v.to_dict() for v in pool.list(me)]

    @app.post("/vdevs", status_code=201)
    def create(body: CreateBody, me: str = who) -> dict[str, Any]:
        try:
            return pool.create(parse_size(body.memory), body.compute, body.model,
                               owner=me).to_dict()
        except BadInputError as exc:
            raise _http(exc) from None

    @app.get("/vdevs/{vid}")
    def get(vid: str, me: str = who) -> dict[str, Any]:
        try:
            vdev = pool.authorise(vid, me)
            pool.usage(vid, me)
            return vdev.to_dict()
        except BadInputError as exc:
            raise _http(exc) from None

    @app.patch("/vdevs/{vid}")
    def resize(vid: str, body: ResizeBody, force: bool = False,
               me: str = who) -> dict[str, Any]:
        try:
            memory = None if body.memory is None else parse_size(body.memory)
            return pool.resize(vid, memory, body.compute, tenant=me, force=force).to_dict()
        except BadInputError as exc:
            raise _http(exc) from None

    @app.delete("/vdevs/{vid}")
    def release(vid: str, force: bool = False, me: str = who) -> dict[str, Any]:
        try:
            return pool.release(vid, tenant=me, force=force).to_dict()
        except BadInputError as exc:
            raise _http(exc) from None

    @app.post("/vdevs/{vid}/usage")
    def report(vid: str, body: UsageBody, me: str = who) -> dict[str, Any]:
        try:
            return pool.report(vid, body.usage, tenant=me).to_dict()
        except BadInputError as exc:
            raise _http(exc) from None

    return app
