"""The package layers of pipelines/ (docs/architecture.md, "Layers"): a module imports only from its own layer and
the layers below it, whether the import sits at the top of the module or inside a function. Read from the source
with ``ast``, so that an import nobody runs in a test still counts."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "pipelines"

# bottom to top; a top-level module is its own unit (pipelines/config.py -> "config"), a package is one unit
LAYERS: list[set[str]] = [
    {"errors", "crashsafe", "atomic", "domains", "config", "layout", "manifest", "lineage", "heap", "stage_process",
     "params_doc"},
    {"llm"},
    {"text"},
    {"kg"},
    {"qa"},
    {"agent"},
    {"eval"},
    {"train"},
    {"stages", "run", "tables", "dvc_lock", "paper", "cli"},
]
LAYER_OF = {unit: level for level, units in enumerate(LAYERS) for unit in units}


def unit_of(module: str) -> str:
    """The layer unit of a dotted module name under pipelines ("pipelines.qa.template" -> "qa")."""
    return module.split(".")[1]


def project_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a pipelines module in ``path``, wherever it sits."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "pipelines":  # "from pipelines import cli" (not "import __version__")
                names = [f"pipelines.{alias.name}" for alias in node.names
                         if (ROOT / alias.name).is_dir() or (ROOT / f"{alias.name}.py").is_file()]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.startswith("pipelines.")]
    return found


def modules() -> list[tuple[Path, str]]:
    return [(path, unit_of(".".join(path.relative_to(ROOT.parent).with_suffix("").parts)))
            for path in sorted(ROOT.rglob("*.py")) if path.name != "__init__.py" or path.parent != ROOT]


def test_every_unit_of_pipelines_has_a_layer() -> None:
    units = {unit for _, unit in modules()}
    assert units - set(LAYER_OF) == set(), "a new package or top-level module needs a layer here and in the docs"
    assert set(LAYER_OF) - units == set(), "a layer names a unit that no longer exists"


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    upward = []
    for path, unit in modules():
        for line, module in project_imports(path):
            target = unit_of(module)
            if LAYER_OF[target] > LAYER_OF[unit]:
                upward.append(f"{path.relative_to(ROOT.parent)}:{line} ({unit}) imports {module} ({target})")
    assert upward == [], "upward imports:\n" + "\n".join(upward)


def test_the_check_finds_an_upward_import_inside_a_function(tmp_path: Path) -> None:
    source = tmp_path / "late.py"
    source.write_text("def f():\n    from pipelines.train.sft import train_sft\n    return train_sft\n",
                      encoding="utf-8")
    assert project_imports(source) == [(2, "pipelines.train.sft")]
    assert LAYER_OF[unit_of("pipelines.train.sft")] > LAYER_OF["agent"]
