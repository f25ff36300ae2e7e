"""The one exception family schedlab raises on purpose.

Every error a user can cause (a malformed trace, an unknown system, a missing service) is a
``SchedlabError`` that names *where* the problem is, so the CLI can print one clear line instead
of a traceback from deep inside a parser.
"""

from __future__ import annotations

from pathlib import Path


class SchedlabError(Exception):
    """Base class: a message plus the optional file, line and field it is about."""

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = Path(path) if path is not None else None
        self.line = line
        self.field = field
        self.hint = hint

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = str(self.path)
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        field = f"field '{self.field}': " if self.field else ""
        hint = f" ({self.hint})" if self.hint else ""
        return f"{where}{field}{self.message}{hint}"

    def __reduce__(self):  # keep path/line/field when crossing process boundaries
        kwargs = dict(path=self.path, line=self.line, field=self.field, hint=self.hint)
        return (_rebuild, (type(self), self.message, kwargs))


def _rebuild(cls: type[SchedlabError], message: str, kwargs: dict) -> SchedlabError:
    return cls(message, **kwargs)


class BadInputError(SchedlabError):
    """A file, record or option the user gave us is malformed or out of range."""


class ConfigError(BadInputError):
    """A configuration (Pydantic model, CLI option combination) is invalid."""


class UnknownNameError(BadInputError):
    """A name (system, algorithm, policy) is not one we know; the message lists valid ones."""

    def __init__(self, kind: str, name: str, valid: list[str] | tuple[str, ...]) -> None:
        super().__init__(f"unknown {kind} '{name}'; valid: {', '.join(valid)}")
        self.kind, self.name, self.valid = kind, name, list(valid)

    def __reduce__(self):
        return (UnknownNameError, (self.kind, self.name, self.valid))


class MissingDependencyError(SchedlabError):
    """An optional dependency (an extra such as ``schedlab[torch]``) is not installed."""


class MissingServiceError(SchedlabError):
    """A real service (Redis, PostgreSQL, a compiler) is needed but not reachable or installed."""
