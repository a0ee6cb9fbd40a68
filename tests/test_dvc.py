"""Real `dvc repro` in a temporary git repository laid out like the project."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT, cli_env, make_project
from tests.model_support import build_tiny_llama, use_tiny_models


def run(cwd: Path, *args: str) -> str:
    result = subprocess.run(list(args), cwd=cwd, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{args}: {result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result.stdout + result.stderr


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    root = make_project(tmp_path / "repo")
    # the tiny solar domain makes a handful of QA pairs: a large test share keeps its test split non-empty;
    # the eval stage runs a tiny random model (the DVC mechanics are under test here, not SmolLM2)
    params = root / "params.yaml"
    use_tiny_models(params, build_tiny_llama(tmp_path / "tiny-llama"), qa={"test_share": 0.5})
    shutil.copy(PROJECT_ROOT / "dvc.yaml", root / "dvc.yaml")
    shutil.copytree(PROJECT_ROOT / "pipelines", root / "pipelines", ignore=shutil.ignore_patterns("__pycache__"))
    (root / ".gitignore").write_text("/artifacts/\n")
    run(root, "git", "init", "-q")
    run(root, "git", "config", "user.email", "test@example.com")
    run(root, "git", "config", "user.name", "test")
    run(root, "dvc", "init", "-q")
    run(root, "dvc", "config", "core.analytics", "false")
    run(root, "git", "add", "-A")
    run(root, "git", "commit", "-qm", "init")
    return root


def test_repro_builds_the_same_files_as_the_cli_and_reruns_nothing(repo: Path, tmp_path: Path) -> None:
    out = run(repo, "dvc", "repro")
    assert "knowledge_graph@solar" in out and "entity_index@solar" in out
    assert (repo / "artifacts" / "index" / "solar" / "entities.lance").is_dir()
    for stage in ("seed_subgraphs@solar", "qa_pairs@solar", "gold_paths@solar", "qa_dataset", "eval_report",
                  "sft_conversations", "sft_model", "sft_eval_report", "think_sweep", "stage1_rl_model",
                  "stage3_rl_model", "stage3_eval_report"):
        assert f"Running stage '{stage}'" in out
    sweep = json.loads((repo / "artifacts" / "reports" / "think_sweep" / "sweep.json").read_text())
    assert [p["think_weight"] for p in sweep] == [1.0, 0.0] and all(p["steps"] == 1 for p in sweep)
    assert "sweep.json" in run(repo, "dvc", "plots", "show", "--json")
    metrics = run(repo, "dvc", "metrics", "show")
    assert "summary.json" in metrics and "em" in metrics and "f1" in metrics
    assert "check qa_table_expectations: passed" in out and "check split_leakage: passed" in out
    dataset = json.loads((repo / "artifacts" / "qa" / "dataset" / "manifest.json").read_text())
    assert dataset["rows"]["pairs"] > 0 and set(dataset["inputs"]) >= {"artifacts/qa/pairs/solar/qa_pairs.jsonl"}
    again = run(repo, "dvc", "repro")
    assert "Running stage" not in again and "up to date" in again.lower()

    # the data stages rebuilt from scratch by the CLI, outside DVC, with the same params: byte-identical files
    reference = make_project(tmp_path / "reference")
    shutil.copy(repo / "params.yaml", reference / "params.yaml")
    run(reference, "omne", "run", "--skip-eval")
    for folder in ("kg/solar", "qa/seeds/solar", "qa/pairs/solar", "qa/gold/solar", "qa/dataset"):
        ours, theirs = (json.loads((root / "artifacts" / folder / "manifest.json").read_text())["files"]
                        for root in (repo, reference))
        assert ours == theirs, folder

    status = run(repo, "dvc", "status")
    assert "up to date" in status.lower()


def test_source_change_reruns_only_that_domains_stages(repo: Path) -> None:
    run(repo, "dvc", "repro", "qa_dataset")  # the data stages (training is covered by the test above)
    triples = repo / "kg_assets" / "solar" / "triples.csv"
    triples.write_text(triples.read_text() + "Pluto,orbits,Sun,Pluto is a dwarf planet.\n")
    out = run(repo, "dvc", "repro", "qa_dataset")
    assert "Running stage 'knowledge_graph@solar'" in out
    assert json.loads((repo / "artifacts" / "kg" / "solar" / "manifest.json").read_text())["rows"]["entities"] == 29


def test_exp_run_switches_the_profile(repo: Path) -> None:
    # the paper profile generates QA with an LLM endpoint: only the KG stage runs here, on CPU, offline
    run(repo, "dvc", "exp", "run", "-S", "profile=paper", "knowledge_graph@solar")
    manifest = json.loads((repo / "artifacts" / "kg" / "solar" / "manifest.json").read_text())
    assert manifest["params"]["profile"] == "paper"
