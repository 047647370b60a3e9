"""The layout holds: imports go one way (tasks → app → providers), and nothing imports itself in a circle.

Imports are read from the source (AST), never executed, and every one counts: a lazy import
inside a function or under TYPE_CHECKING couples two modules as surely as one at the top.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "tasks", "providers")


def module_files() -> dict[str, Path]:
    """Every module of ours by dotted name; a package is its `__init__.py`."""
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def packages() -> set[str]:
    return {module for module, path in module_files().items() if path.name == "__init__.py"}


def imported_modules(module: str, path: Path, modules: Collection[str]) -> set[str]:
    """The modules of ours that one module imports. `from a import b` imports module `a.b`
    where there is one (as import-linter and grimp read it), else module `a`; relative
    imports are made absolute."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
    return {name for name in found if name in modules and name != module}


def import_graph() -> dict[str, set[str]]:
    """Module → the modules of ours it imports."""
    modules = module_files()
    return {module: imported_modules(module, path, modules) for module, path in modules.items()}


def concern_of(module: str, packages: Collection[str]) -> str:
    """The package a module belongs to: each of app's packages (`app.delivery`, …) with
    everything inside it, app's root modules as `app`, and `tasks` and `providers` whole."""
    parts = module.split(".")
    if parts[0] == "app" and len(parts) > 1 and ".".join(parts[:2]) in packages:
        return ".".join(parts[:2])
    return parts[0]


def package_graph(graph: Mapping[str, set[str]], packages: Collection[str]) -> dict[str, set[str]]:
    """Package → the packages it imports from."""
    edges: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = concern_of(module, packages)
        edges.setdefault(source, set()).update(concern_of(t, packages) for t in targets)
        edges[source].discard(source)
    return edges


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more nodes (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def crossings(graph: Mapping[str, set[str]], source: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        if module.partition(".")[0] == source
        for target in targets
        if target.partition(".")[0] in forbidden
    )


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_app_never_imports_tasks(graph):
    assert crossings(graph, "app", ("tasks",)) == []


def test_providers_import_nothing_of_ours_but_providers(graph):
    assert crossings(graph, "providers", ("app", "tasks")) == []


def test_no_two_modules_import_each_other(graph):
    assert cycles(graph) == []


def test_no_two_packages_import_each_other(graph):
    assert cycles(package_graph(graph, packages())) == []


def test_the_checks_see_what_they_look_for():
    """The reader and the cycle finder on a made-up graph: the checks above cannot pass by seeing nothing."""
    made_up = {"app.a": {"app.b"}, "app.b": {"app.c"}, "app.c": {"app.a"}, "app.d": {"tasks.x"}, "tasks.x": set()}
    assert cycles(made_up) == [["app.a", "app.b", "app.c"]]
    assert crossings(made_up, "app", ("tasks",)) == ["app.d imports tasks.x"]
    assert package_graph(
        {"app.delivery.store": {"app.config"}, "app.config": set(), "providers.inbound.ses": {"providers.base"}},
        {"app", "app.delivery", "providers", "providers.inbound"},
    ) == {"app.delivery": {"app"}, "app": set(), "providers": set()}
    real = import_graph()
    assert "app.delivery.store" in real["tasks.deliver"]
    assert "app.config" in real["app.delivery.broker"]
