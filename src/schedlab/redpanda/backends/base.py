"""The contract every RedPanda back end implements (CGRA and dynamic HLS)."""

from __future__ import annotations

from typing import Any, Protocol

from schedlab.redpanda.graph import Graph


class Backend(Protocol):
    """Turns an optimised RedPanda graph into a target artefact plus metrics."""

    name: str

    def compile(self, graph: Graph, **options: Any) -> Any:
        """Map/generate for the target; the result carries a ``metrics()`` dict."""
        ...


#: back ends by CLI target name ("module:class", imported on demand)
BACKENDS: dict[str, str] = {"cgra": "schedlab.redpanda.backends.cgra:CGRABackend",
                            "dhls": "schedlab.redpanda.backends.dhls.backend:DHLSBackend"}
