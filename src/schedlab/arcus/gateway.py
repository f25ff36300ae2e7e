"""HTTP front of the platform (FastAPI on 127.0.0.1).

* ``POST /invoke/{fn}`` with body ``{"arg": ..., "protocol": "arcus", "ns": "default"}`` runs one
  instance and answers ``{id, value, latency_ms, rtts}``. An ``Idempotency-Key`` header makes a
  retry of the same request the same instance (it answers the first execution's result and
  applies nothing twice); reusing a key for another request is a 422.
* ``POST /submit/{fn}`` (same body and header) starts it and answers 202 ``{id, status_url}``;
  ``GET /status/{id}?ns=default`` answers ``{id, state, value?, error?}`` (state pending, done,
  failed; 404 when unknown).
* ``GET /health``.

What a client can do: call (and poll) the functions this gateway exposes - with ``serve --module
my_app`` only those ``my_app`` defines (the built-in demos only with ``--demo``) - with any JSON
argument, in any namespace and under any protocol it names. Every route except ``GET /health``
(worker and crash counts only, for probes) needs ``Authorization: Bearer <token>`` when the
gateway has tokens (``serve`` always has: from ``--token-file``, one per line, or one it
generates, unless ``--no-auth`` on loopback); without a valid one the answer is 401 and nothing
runs. What it cannot do: call a function the gateway does not expose (404, the same answer as a
name that does not exist, and the list of valid names it gives holds only exposed ones), read or
write state keys except through those functions, or reach Redis. A token grants everything
above: give per-client tokens (one line each) to revoke one client without the others.

Errors: a malformed body or header is a 422 naming the field; an unknown function or protocol is
a 404/400 listing valid names; a namespace bound to another protocol is a 409; a platform or
Redis that cannot serve is a 503 (not acknowledged: retry, with the same key); no reply in time
is a 504 (the instance may still finish: retry with the same key to get its result).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schedlab.arcus.platform import Platform
from schedlab.arcus.runtime import InvocationError
from schedlab.core.errors import BadInputError, MissingServiceError, SchedlabError, UnknownNameError

NS_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"


class InvokeBody(BaseModel):
    """The request body; unknown fields are rejected so a typo is an error, not a default."""

    model_config = ConfigDict(extra="forbid")
    arg: Any = None
    protocol: str = "arcus"
    ns: str = Field(default="default", pattern=NS_PATTERN)
    rtt_ms: float = Field(default=0.0, ge=0.0, le=1000.0)


def _http_error(exc: SchedlabError) -> Any:
    from fastapi import HTTPException

    if isinstance(exc, UnknownNameError):
        return HTTPException(404 if exc.kind == "function" else 400, str(exc))
    if isinstance(exc, MissingServiceError):
        return HTTPException(503, str(exc))
    if isinstance(exc, InvocationError) and exc.field == "timeout":
        return HTTPException(504, str(exc))
    if isinstance(exc, BadInputError) and exc.field == "protocol":
        return HTTPException(409, str(exc))
    if isinstance(exc, BadInputError):
        return HTTPException(422, str(exc))
    return HTTPException(500, str(exc))


def _json_bodies(app: Any) -> Any:
    """ASGI wrapper: a body sent as a form (``curl -d`` without ``-H 'Content-Type: ...'``) is
    read as the JSON it is, instead of a 422 about a "valid dictionary"; this API takes no forms."""

    async def wrapped(scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            headers = [(k, v) for k, v in scope.get("headers", []) if k != b"content-type"]
            sent = dict(scope.get("headers", [])).get(b"content-type", b"")
            if sent.startswith(b"application/x-www-form-urlencoded"):
                scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        await app(scope, receive, send)

    return wrapped


def _bearer(app: Any, tokens: tuple[str, ...]) -> Any:
    """ASGI wrapper: 401 unless ``Authorization: Bearer <one of tokens>`` (constant-time
    comparison against each token, so timing does not reveal a prefix)."""
    import hmac
    import json

    wanted = [t.encode() for t in tokens]

    async def wrapped(scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and scope.get("path") != "/health":
            sent = dict(scope.get("headers", [])).get(b"authorization", b"")
            scheme, _, given = sent.partition(b" ")
            ok = scheme.lower() == b"bearer" and any(
                [hmac.compare_digest(given.strip(), token) for token in wanted])
            if not ok:
                body = json.dumps({"detail": "missing or invalid bearer token"}).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return wrapped


def read_tokens(path: Any) -> tuple[str, ...]:
    """Bearer tokens from a file, one per line (blank lines and ``#`` comments skipped); each
    at least 16 characters. Errors name the file and line."""
    from pathlib import Path

    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"cannot read the token file: {exc}", path=path,
                            field="token-file") from None
    tokens = []
    for number, line in enumerate(lines, 1):
        token = line.strip()
        if not token or token.startswith("#"):
            continue
        if len(token) < 16 or any(c.isspace() for c in token) or not token.isprintable():
            raise BadInputError("a token is at least 16 printable characters without spaces",
                                path=path, line=number, field="token")
        tokens.append(token)
    if not tokens:
        raise BadInputError("the token file has no token", path=path, field="token-file")
    return tuple(tokens)


def make_app(platform: Platform, tokens: tuple[str, ...] = ()) -> Any:
    """A FastAPI application bound to a started ``platform``; with ``tokens``, every request
    needs one of them as a bearer token (401 otherwise)."""
    from fastapi import FastAPI, Header, HTTPException, Query

    app = FastAPI(title="schedlab arcus gateway", docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.add_middleware(_json_bodies)
    if tokens:
        app.add_middleware(_bearer, tokens=tokens)
    key_header = Header(default=None, alias="Idempotency-Key", min_length=1, max_length=255)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"workers_alive": platform.alive(), "crashes": platform.crashes,
                "redelivered": platform.redelivered, "redis_errors": platform.redis_errors}

    @app.post("/invoke/{fn}")
    def invoke(fn: str, body: InvokeBody, key: str | None = key_header) -> dict[str, Any]:
        try:
            reply = platform.invoke(fn, body.arg, protocol=body.protocol, ns=body.ns,
                                    rtt_ms=body.rtt_ms, idempotency_key=key)
        except SchedlabError as exc:
            raise _http_error(exc) from None
        return {"id": reply["id"], "value": reply["value"],
                "latency_ms": reply["latency_s"] * 1e3, "rtts": reply["stats"]["rtts"]}

    @app.post("/submit/{fn}", status_code=202)
    def submit(fn: str, body: InvokeBody, key: str | None = key_header) -> dict[str, Any]:
        try:
            instance = platform.submit(fn, body.arg, protocol=body.protocol, ns=body.ns,
                                       rtt_ms=body.rtt_ms, idempotency_key=key)
        except SchedlabError as exc:
            raise _http_error(exc) from None
        return {"id": instance, "status_url": f"/status/{instance}?ns={body.ns}"}

    @app.get("/status/{instance}")
    def status(instance: str,
               ns: str = Query(default="default", pattern=NS_PATTERN)) -> dict[str, Any]:
        try:
            found = platform.status(instance, ns)
        except SchedlabError as exc:
            raise _http_error(exc) from None
        if found["state"] == "unknown":
            raise HTTPException(404, f"no submitted instance '{instance}' in namespace '{ns}'")
        return found

    return app
