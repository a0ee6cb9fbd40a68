"""Shared fixtures: a throw-away omne project (params.yaml + registry + tiny domain) per test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from filelock import FileLock

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("LANCE_LOG", "error")

from pipelines.config import Params, load_params  # noqa: E402

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
VENV_BIN = Path(sys.executable).parent

TINY_REGISTRY = """domains:
  solar:
    description: A tiny solar-system graph.
    source:
      kind: triples
      path: kg_assets/solar/triples.csv
      entities: kg_assets/solar/entities.csv
"""


def make_project(root: Path, registry: str = TINY_REGISTRY) -> Path:
    """A minimal omne project: the real params.yaml, a registry, and the tiny solar domain."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(PROJECT_ROOT / "params.yaml", root / "params.yaml")
    shutil.copytree(DATA / "solar", root / "kg_assets" / "solar")
    (root / "kg_assets" / "domains.yaml").write_text(registry, encoding="utf-8")
    return root


CHEMISTRY_REGISTRY = """domains:
  chemistry:
    description: Elements and isotopes.
    source:
      kind: triples
      path: kg_assets/chemistry/triples.jsonl
      entities: kg_assets/chemistry/entities.jsonl
"""


def chemistry_project(root: Path) -> Params:
    """A project with the real chemistry domain (and its phrases file), its KG and seed subgraphs built."""
    from pipelines.config import load_params
    from pipelines.domains import load_registry
    from pipelines.kg.build import build_knowledge_graph
    from pipelines.qa.build import build_seed_subgraphs

    make_project(root, CHEMISTRY_REGISTRY)
    shutil.copytree(PROJECT_ROOT / "kg_assets" / "chemistry", root / "kg_assets" / "chemistry")
    params = load_params(root / "params.yaml")
    build_knowledge_graph(load_registry(params.registry_path).get("chemistry"), params)
    build_seed_subgraphs("chemistry", params)
    return params


EMBEDDED_DOMAINS = ("chemistry", "geography", "medicine")


def embedded_domains_project(root: Path, *, per_bucket: int | None = None) -> Params:
    """A project with three of the embedded domains (registry, sources, phrases files), their KGs, seeds and
    template QA pairs built; ``per_bucket`` caps the QA targets (default: params.yaml's)."""
    from pipelines.config import load_params
    from pipelines.domains import load_registry
    from pipelines.kg.build import build_knowledge_graph
    from pipelines.qa.build import build_qa_pairs, build_seed_subgraphs

    real = yaml.safe_load((PROJECT_ROOT / "kg_assets" / "domains.yaml").read_text(encoding="utf-8"))["domains"]
    make_project(root, yaml.safe_dump({"domains": {d: real[d] for d in EMBEDDED_DOMAINS}}, sort_keys=False))
    for domain in EMBEDDED_DOMAINS:
        shutil.copytree(PROJECT_ROOT / "kg_assets" / domain, root / "kg_assets" / domain)
    if per_bucket is not None:
        text = (root / "params.yaml").read_text()
        text = text.replace("one_two_hop_per_domain: 150", f"one_two_hop_per_domain: {per_bucket}")
        (root / "params.yaml").write_text(text.replace("three_plus_per_domain: 150",
                                                       f"three_plus_per_domain: {per_bucket}"))
    params = load_params(root / "params.yaml")
    registry = load_registry(params.registry_path)
    for domain in EMBEDDED_DOMAINS:
        build_knowledge_graph(registry.get(domain), params)
        build_seed_subgraphs(domain, params)
        build_qa_pairs(domain, params, progress=False)
    return params


TWIN_DOMAINS = ("solar", "mirror")


def twin_solar_project(root: Path) -> Params:
    """Two tiny domains for the domain filters (docs/evaluation.md, "Domain filters"): solar, and mirror, the same
    graph with every name followed by "Prime" (other questions, so none is deduplicated away); KGs, indexes, QA
    pairs, gold paths and the merged dataset of both built (val_share 0.3, as ``solar_qa``)."""
    import re

    from pipelines.domains import load_registry
    from pipelines.kg.build import build_entity_index, build_knowledge_graph
    from pipelines.qa.build import build_gold_paths, build_qa_dataset, build_qa_pairs, build_seed_subgraphs

    make_project(root, TINY_REGISTRY + TINY_REGISTRY.split("\n", 1)[1].replace("solar", "mirror"))
    source = (DATA / "solar" / "entities.csv").read_text(), (DATA / "solar" / "triples.csv").read_text()
    names = {line.split(",")[0] for line in source[0].splitlines()[1:]}
    names |= {part for line in source[1].splitlines()[1:] for part in line.split(",")[:3:2]}
    pattern = re.compile("|".join(rf"\b{re.escape(n)}\b" for n in sorted(names, key=len, reverse=True)))
    (root / "kg_assets" / "mirror").mkdir()
    for name, text in zip(("entities.csv", "triples.csv"), source, strict=True):
        (root / "kg_assets" / "mirror" / name).write_text(pattern.sub(lambda m: f"{m[0]} Prime", text))
    path = root / "params.yaml"
    path.write_text(path.read_text().replace("  val_share: 0.1\n", "  val_share: 0.3\n", 1))
    params = load_params(path)
    for domain in load_registry(params.registry_path).domains:
        build_knowledge_graph(domain, params)
        build_entity_index(domain.name, params)
        build_seed_subgraphs(domain.name, params)
        build_qa_pairs(domain.name, params)
        build_gold_paths(domain.name, params)
    build_qa_dataset(params)
    return params


@pytest.fixture(scope="session")
def twin_qa(tmp_path_factory: pytest.TempPathFactory) -> Params:
    """``twin_solar_project``, built once per test session (tests that rebuild its dataset work on a copy)."""
    return twin_solar_project(tmp_path_factory.mktemp("twin") / "project")


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "project")


@pytest.fixture()
def params(project: Path) -> Params:
    return load_params(project / "params.yaml")


def cli_env(**extra: str) -> dict[str, str]:
    """Environment for subprocesses: the venv's scripts first on PATH, offline model loading."""
    # DAGSTER_HOME (which make exports) is dropped: `omne run` records into the test project's own instance
    env = {k: v for k, v in os.environ.items() if k not in ("OMNE_PARAMS", "OMNE_PROFILE", "DAGSTER_HOME")}
    return {**env, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


@pytest.fixture(scope="module")
def solar(tmp_path_factory: pytest.TempPathFactory) -> Params:
    """A solar project with its KG and index built, shared by the tests of one module."""
    from tests.tool_support import build_solar_project

    return build_solar_project(tmp_path_factory.mktemp("solar") / "project")


@pytest.fixture(scope="module")
def toolbox(solar: Params):  # noqa: ANN201 - imported lazily: most test modules do not need the tools
    from pipelines.agent.tools import KGToolbox

    box = KGToolbox(solar)
    box.load_all()
    return box


@pytest.fixture(scope="module")
def server(toolbox) -> Iterator[str]:  # noqa: ANN001
    """The real tool server on 127.0.0.1 (uvicorn in a thread), its base URL."""
    from pipelines.agent.server import create_app
    from tests.tool_support import ServerThread

    with ServerThread(create_app(toolbox)) as running:
        yield running.url


@pytest.fixture(scope="module")
def solar_qa(solar: Params) -> Params:
    """The solar project with its QA dataset built (seeds, pairs, gold paths, splits)."""
    from pipelines.config import load_params
    from pipelines.qa.build import build_gold_paths, build_qa_dataset, build_qa_pairs, build_seed_subgraphs

    # six questions: a larger val share keeps the val split (RL validation) non-empty
    path = solar.root / "params.yaml"
    path.write_text(path.read_text().replace("  val_share: 0.1\n", "  val_share: 0.3\n", 1))
    solar = load_params(path, solar.profile)
    build_seed_subgraphs("solar", solar)
    build_qa_pairs("solar", solar)
    build_gold_paths("solar", solar)
    build_qa_dataset(solar, ["solar"])
    return solar


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random llama (tests/model_support.py), one per test module; a module needing another shape overrides
    the fixture."""
    from tests.model_support import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny") / "llama")


def run_checked(cwd: Path, *args: str) -> str:
    """Run a command as a user would in ``cwd`` (the venv's scripts first on PATH); its output, or a failed assert
    showing the ends of both streams."""
    result = subprocess.run(list(args), cwd=cwd, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{args}: {result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result.stdout + result.stderr


def dvc_project(root: Path, tiny_model: Path) -> Path:
    """A git + DVC repository laid out like the project (dvc.yaml, sweeps/, pipelines/), with the tiny solar domain
    and a tiny random model (the mechanics are under test, not SmolLM2). The tiny domain makes a handful of QA
    pairs: a large test share keeps its test split non-empty."""
    from tests.model_support import use_tiny_models

    make_project(root)
    use_tiny_models(root / "params.yaml", tiny_model, qa={"test_share": 0.4, "val_share": 0.0})
    shutil.copy(PROJECT_ROOT / "dvc.yaml", root / "dvc.yaml")
    shutil.copytree(PROJECT_ROOT / "sweeps", root / "sweeps")
    shutil.copytree(PROJECT_ROOT / "pipelines", root / "pipelines", ignore=shutil.ignore_patterns("__pycache__"))
    (root / ".gitignore").write_text("/artifacts/\n/.dagster_home/\n")
    run_checked(root, "git", "init", "-q")
    run_checked(root, "git", "config", "user.email", "test@example.com")
    run_checked(root, "git", "config", "user.name", "test")
    run_checked(root, "dvc", "init", "-q")
    run_checked(root, "dvc", "config", "core.analytics", "false")
    run_checked(root, "git", "add", "-A")
    run_checked(root, "git", "commit", "-qm", "init")
    return root


@dataclass(frozen=True)
class BuiltRun:
    """A ``dvc_project`` that one `omne run` built completely (and recorded in its dvc.lock and Dagster instance)."""

    root: Path  # shared by every test of the session: change a copy (``copy_to``), never this folder
    output: str  # what `omne run` printed

    def copy_to(self, dest: Path) -> Path:
        shutil.copytree(self.root, dest, symlinks=True)
        return dest


@pytest.fixture(scope="session")
def built_run(tmp_path_factory: pytest.TempPathFactory) -> BuiltRun:
    """One finished `omne run` of the tiny DVC project for the session: the tests that start from a finished run
    (the CLI's rerun, `dvc repro` after it, a kill during a later stage) copy it instead of each training their own
    (~150 s each on 2 cores). Under pytest-xdist the first worker to ask builds it, under a file lock in the folder
    the workers share, and the others wait for it."""
    worker_base = tmp_path_factory.getbasetemp()
    shared = worker_base.parent if os.environ.get("PYTEST_XDIST_WORKER") else worker_base
    folder, printed = shared / "built-run", shared / "built-run.out"
    with FileLock(str(shared / "built-run.lock")):
        if not printed.is_file():
            from tests.model_support import build_tiny_llama

            shutil.rmtree(folder, ignore_errors=True)  # a build that failed earlier in the session
            project = dvc_project(folder / "repo", build_tiny_llama(folder / "tiny-llama"))
            printed.write_text(run_checked(project, "omne", "run"), encoding="utf-8")
    return BuiltRun(folder / "repo", printed.read_text(encoding="utf-8"))


@pytest.fixture
def no_llm_endpoint_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own endpoint settings must not leak into the LLM client tests."""
    for name in ("OMNE_LLM_BASE_URL", "OMNE_LLM_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
