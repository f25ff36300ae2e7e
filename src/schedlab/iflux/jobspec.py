"""Where intents come from: Flux jobspecs and Slurm batch scripts, with errors that say where.

Paper: IFlux (../shared/papers/10-iflux.md) extends the scheduler's job specification with
intents. Two front ends read them:

* a Flux jobspec (RFC 14/25, JSON or YAML) carries them as a list under
  ``attributes.system.intents``;
* a Slurm batch script carries them as ``#IFLUX key=value ...`` lines in its header (one intent
  per line, like ``#SBATCH``) or in ``--comment="iflux: k=v ...; k=v ..."``.

Every error is a BadInputError naming the file, the line where we know it, and the field.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from schedlab.core.errors import BadInputError
from schedlab.iflux.fastpath import directive_fields
from schedlab.iflux.intents import Intent, check_job, intent_from_dict

INTENTS_KEY = ("attributes", "system", "intents")


@dataclass
class JobIntents:
    """The intents of one job, where they came from, and the job's own spec (if any)."""

    intents: list[Intent]
    source: str = ""
    spec: dict[str, Any] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)


def load_document(path: str | Path) -> tuple[Any, dict[int, int]]:
    """Parse a JSON or YAML file; also return the line of each top-level-intent index (YAML)."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError("is a directory, not a file" if path.is_dir() else "no such file",
                            path=path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError("is not valid UTF-8 text", path=path) from exc
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text), {}
        except json.JSONDecodeError as exc:
            raise BadInputError(f"invalid JSON: {exc.msg}", path=path, line=exc.lineno) from None
        except RecursionError:
            raise BadInputError("invalid JSON: nested too deeply", path=path) from None
    try:
        document = yaml.safe_load(text)
        lines = _intent_lines(yaml.compose(text))
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise BadInputError(f"invalid YAML: {exc.problem}", path=path, line=line) from None
    except yaml.YAMLError as exc:
        raise BadInputError(f"invalid YAML: {exc}", path=path) from None
    except RecursionError:
        raise BadInputError("invalid YAML: nested too deeply", path=path) from None
    return document, lines


def _intent_lines(node: Any) -> dict[int, int]:
    """Line (1-based) of each item of attributes.system.intents in a composed YAML tree."""
    for key in INTENTS_KEY:
        if not isinstance(node, yaml.MappingNode):
            return {}
        node = next((v for k, v in node.value if getattr(k, "value", None) == key), None)
    if not isinstance(node, yaml.SequenceNode):
        return {}
    return {i: item.start_mark.line + 1 for i, item in enumerate(node.value)}


def intents_from_jobspec(spec: Any, path: str | Path | None = None,
                         lines: dict[int, int] | None = None) -> JobIntents:
    """Validate a Flux jobspec dict and pull out its intents (an empty list when it has none)."""
    if not isinstance(spec, dict):
        raise BadInputError("a jobspec is a mapping at the top level", path=path)
    version = spec.get("version", 1)
    if version not in (1, "1"):
        raise BadInputError(f"jobspec version {version!r} is not supported (RFC 25: 1)",
                            path=path, field="version")
    node: Any = spec
    for depth, key in enumerate(INTENTS_KEY):
        if not isinstance(node, dict):
            raise BadInputError("must be a mapping", path=path,
                                field=".".join(INTENTS_KEY[:depth]))
        node = node.get(key, [] if key == "intents" else {})
    if not isinstance(node, list):
        raise BadInputError("must be a list of intents", path=path, field=".".join(INTENTS_KEY))
    intents = []
    for i, raw in enumerate(node):
        where = dict(path=path, line=(lines or {}).get(i))
        try:
            intents.append(intent_from_dict(raw, where))
        except BadInputError as exc:
            exc.field = f"attributes.system.intents[{i}]" + (f".{exc.field}" if exc.field else "")
            raise
    check_job(intents, dict(path=path))
    command = _jobspec_command(spec)
    return JobIntents(intents, str(path or "<jobspec>"), spec, command)


def _jobspec_command(spec: dict[str, Any]) -> list[str]:
    tasks = spec.get("tasks") or []
    if tasks and isinstance(tasks, list) and isinstance(tasks[0], dict):
        command = tasks[0].get("command", [])
        if isinstance(command, list):
            return [str(c) for c in command]
    return []


def parse_directive(text: str, where: dict[str, Any]) -> Intent:
    """One intent from ``key=value key=value`` (shell quoting allowed)."""
    return intent_from_dict(directive_fields(text, where), where)


def intents_from_slurm_script(path: str | Path) -> JobIntents:
    """Intents from a batch script's ``#IFLUX`` header lines and ``#SBATCH --comment=iflux:``."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError("is a directory, not a file" if path.is_dir() else "no such file",
                            path=path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise BadInputError("is not valid UTF-8 text", path=path) from exc
    intents: list[Intent] = []
    in_header = True
    for lineno, line in enumerate(lines, start=1):
        stripped = line.strip()
        where = dict(path=path, line=lineno)
        if stripped.startswith("#IFLUX"):
            if not in_header:
                raise BadInputError("#IFLUX directives must precede the first command "
                                    "(like #SBATCH)", **where)
            intents.append(parse_directive(stripped[len("#IFLUX"):], where))
        elif stripped.startswith("#SBATCH") and "--comment" in stripped:
            intents += intents_from_comment(_comment_value(stripped, where), where)
        elif stripped and not stripped.startswith("#"):
            in_header = False
    check_job(intents, dict(path=path))
    return JobIntents(intents, str(path))


def _comment_value(line: str, where: dict[str, Any]) -> str:
    try:
        words = shlex.split(line[len("#SBATCH"):])
    except ValueError as exc:
        raise BadInputError(f"cannot split #SBATCH line: {exc}", **where) from None
    for i, word in enumerate(words):
        if word.startswith("--comment="):
            return word.split("=", 1)[1]
        if word == "--comment" and i + 1 < len(words):
            return words[i + 1]
    return ""


def intents_from_comment(comment: str, where: dict[str, Any] | None = None) -> list[Intent]:
    """``iflux: k=v ...; k=v ...`` (a Slurm job comment); other comments carry no intents."""
    where = where or {}
    comment = comment.strip()
    if not comment.lower().startswith("iflux:"):
        return []
    parts = [p for p in comment.split(":", 1)[1].split(";") if p.strip()]
    return [parse_directive(p, where) for p in parts]


def read_intents(path: str | Path) -> JobIntents:
    """Intents from any supported file: ``.json/.yaml/.yml`` jobspec or a Slurm batch script."""
    path = Path(path)
    if path.suffix.lower() in (".json", ".yaml", ".yml"):
        document, lines = load_document(path)
        if isinstance(document, list):  # a bare list of intents
            document = {"version": 1, "attributes": {"system": {"intents": document}}}
        return intents_from_jobspec(document, path, lines)
    return intents_from_slurm_script(path)
