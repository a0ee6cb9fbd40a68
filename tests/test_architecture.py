"""The library's layout rules (docs/architecture.md): its modules import each other without a cycle,
``pipelines/`` never imports Dagster, and artifact folders are named in ``pipelines/layout.py`` only (``make lint``
checks the style: ruff, configured in pyproject.toml)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx

from tests.conftest import PROJECT_ROOT

LIBRARY = PROJECT_ROOT / "pipelines"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PROJECT_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(tree: ast.Module) -> list[str]:
    """Every module an ``import`` statement names, at module level or inside functions, except the ones under
    ``if TYPE_CHECKING:`` (never executed)."""
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in
                   ast.unparse(node.test) for n in ast.walk(node)}
    names: list[str] = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return names


def library_import_graph() -> nx.DiGraph:
    modules = {_module_name(path): path for path in LIBRARY.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for target in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            while target and target not in modules:  # pipelines.x.y.Name -> pipelines.x.y
                target = target.rpartition(".")[0]
            if target and target not in (name, "pipelines"):
                graph.add_edge(name, target)
    return graph


def test_the_library_has_no_import_cycle() -> None:
    graph = library_import_graph()
    assert graph.number_of_edges() > 100  # the walk sees the imports (lazy ones included)
    assert graph.has_edge("pipelines.kg.build", "pipelines.manifest")
    cycles = sorted(nx.simple_cycles(graph), key=len)
    assert not cycles, f"import cycles in pipelines/: {cycles[:5]}"


def test_the_library_never_imports_dagster() -> None:
    offenders = [_module_name(path) for path in LIBRARY.rglob("*.py")
                 if any(name.split(".")[0] == "dagster" for name in
                        _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))))]
    assert not offenders


def test_artifact_folders_are_named_in_layout_only() -> None:
    """``artifacts_dir / "..."`` spelled anywhere but pipelines/layout.py is a second place to keep in step."""
    folders = "kg|index|qa|sft|models|reports|cache|kgqa|\\.locks"
    spelled = re.compile(rf"""(artifacts_dir|artifacts)\)? / ["']({folders})["']""")
    offenders = [f"{path.relative_to(PROJECT_ROOT)}:{number}"
                 for folder in ("pipelines", "dagster_project")
                 for path in (PROJECT_ROOT / folder).rglob("*.py") if path.name != "layout.py"
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if spelled.search(line)]
    assert not offenders
