"""The layout rule of docs/ARCHITECTURE.md, checked on the source: no system imports another
system (shared code lives in ``core``, ``llm`` or ``traces``, which import no system), and no
package's files import each other in a cycle.

Read from the AST of every file under src/schedlab, so an import inside a function counts
exactly like one at the top of the file: moving an import into a function hides a cycle from
Python, not from this test.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
#: packages every system may use; they may import no system
NEUTRAL = frozenset({"core", "llm", "traces"})


@dataclass(frozen=True)
class Edge:
    """One import of module ``target`` by module ``source`` (at ``line`` of ``path``)."""

    source: str
    target: str
    path: Path
    line: int


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The module file ``name`` lands in (its longest prefix that is a module)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports(path: Path, src: Path, modules: set[str]) -> list[Edge]:
    """Every import of a ``schedlab`` module in ``path``, at module or function level.

    ``from pkg import sub`` imports the submodule ``pkg.sub`` when there is one, else a name
    of ``pkg``; relative imports are resolved against the file's package.
    """
    source = module_name(path, src)
    package = source if path.name == "__init__.py" else source.rpartition(".")[0]
    edges: list[Edge] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            named = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            named = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                     for a in node.names]
        else:
            continue
        for name in dict.fromkeys(named):
            target = _resolve(name, modules) if name.split(".")[0] == "schedlab" else None
            if target is not None and target != source:
                edges.append(Edge(source, target, path, node.lineno))
    return edges


def all_imports(src: Path = SRC) -> list[Edge]:
    files = sorted((src / "schedlab").rglob("*.py"))
    modules = {module_name(p, src) for p in files}
    return [e for p in files for e in imports(p, src, modules)]


def cross_system_imports(edges: list[Edge], src: Path = SRC) -> list[Edge]:
    """Imports of one system by another system or by a neutral package.

    The app's top-level files (``cli.py``, ``entry.py``) are exempt: mounting every system's
    commands is their job.
    """
    packages = {d.name for d in (src / "schedlab").iterdir() if (d / "__init__.py").is_file()}

    def area(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 and parts[1] in packages else None

    bad = []
    for e in edges:
        mine, theirs = area(e.source), area(e.target)
        if mine is None or theirs is None or mine == theirs or theirs in NEUTRAL:
            continue
        bad.append(e)
    return bad


def import_cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected groups (two or more files) of the import graph inside each package."""
    graph: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        if e.source.split(".")[:2] == e.target.split(".")[:2]:
            graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(groups)


def _where(e: Edge) -> str:
    return f"{e.path.relative_to(SRC.parent) if e.path.is_relative_to(SRC.parent) else e.path}" \
           f":{e.line}: {e.source} imports {e.target}"


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    return all_imports()


def test_no_system_imports_another_system(edges: list[Edge]) -> None:
    bad = cross_system_imports(edges)
    assert not bad, "move the shared piece to schedlab/core, llm or traces:\n" + "\n".join(
        _where(e) for e in bad)


def test_no_import_cycle_between_a_packages_files(edges: list[Edge]) -> None:
    groups = import_cycles(edges)
    detail = []
    for group in groups:
        members = set(group)
        detail += [_where(e) for e in edges if e.source in members and e.target in members]
    assert not groups, (f"{len(groups)} import cycle(s); move what both sides need to a lower "
                        "module:\n" + "\n".join(detail))


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in {"schedlab/__init__.py": "", "schedlab/cli.py": "", **files}.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_checks_catch_what_they_forbid(tmp_path: Path) -> None:
    src = _tree(tmp_path, {
        "schedlab/core/__init__.py": "",
        "schedlab/core/io.py": "from schedlab.alpha import a\n",  # neutral -> system
        "schedlab/alpha/__init__.py": "",
        "schedlab/alpha/a.py": "def f():\n    from schedlab.alpha import b\n",  # function level
        "schedlab/alpha/b.py": "from . import a\nfrom schedlab.core.io import x\n",
        "schedlab/beta/__init__.py": "",
        "schedlab/beta/c.py": "import schedlab.alpha.b as other\nfrom ..alpha.a import f\n",
        "schedlab/beta/d.py": "from schedlab.traces.fmt import read\n",
        "schedlab/traces/__init__.py": "",
        "schedlab/traces/fmt.py": "def read(): ...\n",
    })
    (src / "schedlab/cli.py").write_text("from schedlab.beta import c\n")  # the app: allowed
    found = all_imports(src)
    bad = {(e.source, e.target) for e in cross_system_imports(found, src)}
    assert bad == {("schedlab.core.io", "schedlab.alpha.a"),
                   ("schedlab.beta.c", "schedlab.alpha.b"),
                   ("schedlab.beta.c", "schedlab.alpha.a")}
    assert import_cycles(found) == [["schedlab.alpha.a", "schedlab.alpha.b"]]


def test_a_submodule_named_through_its_package_is_not_an_edge_to_the_package(
        tmp_path: Path) -> None:
    src = _tree(tmp_path, {
        "schedlab/gamma/__init__.py": "from schedlab.gamma.back import B\n",
        "schedlab/gamma/back.py": "from schedlab.gamma import tools\n",
        "schedlab/gamma/tools.py": "",
    })
    assert import_cycles(all_imports(src)) == []
    (src / "schedlab/gamma/back.py").write_text("from schedlab.gamma import B\n")
    assert import_cycles(all_imports(src)) == [["schedlab.gamma", "schedlab.gamma.back"]]
