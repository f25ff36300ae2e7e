"""HTTP front of the platform (FastAPI on 127.0.0.1): ``POST /invoke/{fn}`` with a JSON body.

The body is ``{"arg": ..., "protocol": "arcus", "ns": "default"}``; the answer is the reply of
:meth:`Platform.invoke`. A malformed body is a 422 naming the field; an unknown function or
protocol is a 404/400 that lists valid names; a platform that cannot serve is a 503.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schedlab.arcus.platform import Platform
from schedlab.core.errors import MissingServiceError, SchedlabError, UnknownNameError


class InvokeBody(BaseModel):
    """The request body; unknown fields are rejected so a typo is an error, not a default."""

    model_config = ConfigDict(extra="forbid")
    arg: Any = None
    protocol: str = "arcus"
    ns: str = Field(default="default", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    rtt_ms: float = Field(default=0.0, ge=0.0, le=1000.0)


def make_app(platform: Platform) -> Any:
    """A FastAPI application bound to a started ``platform``."""
    from fastapi import FastAPI, HTTPException

    app = FastAPI(title="schedlab arcus gateway")

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"workers_alive": platform.alive(), "crashes": platform.crashes}

    @app.post("/invoke/{fn}")
    def invoke(fn: str, body: InvokeBody) -> dict[str, Any]:
        try:
            reply = platform.invoke(fn, body.arg, protocol=body.protocol, ns=body.ns,
                                    rtt_ms=body.rtt_ms)
        except UnknownNameError as exc:
            raise HTTPException(404 if exc.kind == "function" else 400, str(exc)) from None
        except MissingServiceError as exc:
            raise HTTPException(503, str(exc)) from None
        except SchedlabError as exc:
            raise HTTPException(500, str(exc)) from None
        return {"value": reply["value"], "latency_ms": reply["latency_s"] * 1e3,
                "rtts": reply["stats"]["rtts"]}

    return app
