"""Real `dvc repro` in a temporary git repository laid out like the project."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from pipelines.stages import STAGES
from tests.conftest import BuiltRun, cli_env, dvc_project
from tests.conftest import run_checked as run
from tests.model_support import build_tiny_llama

MAIN_STAGES = STAGES.dvc_addresses(["solar"])  # the registry's order, which `dvc repro` follows here


def ran_stages(output: str) -> list[str]:
    return re.findall(r"Running stage '([^']+)'", output)


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    return dvc_project(tmp_path / "repo", build_tiny_llama(tmp_path / "tiny-llama"))


def test_repro_builds_the_same_files_as_the_cli_and_reruns_nothing(repo: Path, built_run: BuiltRun) -> None:
    out = run(repo, "dvc", "repro")
    assert "knowledge_graph@solar" in out and "entity_index@solar" in out
    assert (repo / "artifacts" / "index" / "solar" / "entities.lance").is_dir()
    assert ran_stages(out) == MAIN_STAGES  # the main pipeline is what `make run` builds, in dependency order
    sweep_out = run(repo, "dvc", "repro", "sweeps/dvc.yaml")  # the sweep lives beside it, reusing its stages
    assert ran_stages(sweep_out) == [f"sweeps/dvc.yaml:{a}" for a in STAGES.dvc_addresses(["solar"], "sweeps/dvc.yaml")]
    sweep = json.loads((repo / "artifacts" / "reports" / "think_sweep" / "sweep.json").read_text())
    assert [p["think_weight"] for p in sweep] == [1.0, 0.0] and all(p["steps"] == 1 for p in sweep)
    assert "sweep.json" in run(repo, "dvc", "plots", "show", "--json")
    metrics = run(repo, "dvc", "metrics", "show")
    assert "summary.json" in metrics and "em" in metrics and "f1" in metrics
    assert "check qa_table_expectations: passed" in out and "check split_leakage: passed" in out
    dataset = json.loads((repo / "artifacts" / "qa" / "dataset" / "manifest.json").read_text())
    assert dataset["rows"]["pairs"] > 0 and set(dataset["inputs"]) >= {"artifacts/qa/pairs/solar/qa_pairs.jsonl"}
    again = run(repo, "dvc", "repro", "sweeps/dvc.yaml", "dvc.yaml")
    assert "Running stage" not in again and "up to date" in again.lower()

    # the data stages built by `omne run` in another repository with the same params: byte-identical files
    for folder in ("kg/solar", "qa/seeds/solar", "qa/pairs/solar", "qa/gold/solar", "qa/dataset"):
        ours, theirs = (json.loads((root / "artifacts" / folder / "manifest.json").read_text())["files"]
                        for root in (repo, built_run.root))
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


def test_dvc_repro_after_omne_run_recomputes_nothing(built_run: BuiltRun, tmp_path: Path) -> None:
    """`omne run` records what it built in dvc.lock: `dvc repro` then runs no stage, and a changed param reruns
    exactly the stages downstream of it."""
    assert f"record dvc: {len(MAIN_STAGES)} stages in dvc.lock" in built_run.output
    repo = built_run.copy_to(tmp_path / "repo")
    again = run(repo, "dvc", "repro")
    assert ran_stages(again) == [] and "up to date" in again.lower()
    assert "up to date" in run(repo, "dvc", "status", "dvc.yaml").lower()  # (the sweep, never built, is not)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["rl"]["stage3"]["learning_rate"] = params["rl"]["stage3"]["learning_rate"] * 2
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert ran_stages(run(repo, "dvc", "repro")) == STAGES.downstream("stage3_rl_model")


def _artifact_folders(root: Path) -> list[Path]:
    """Every artifact folder (one holding a manifest.json, or named like one) under artifacts/."""
    return sorted({p.parent for p in (root / "artifacts").rglob("manifest.json")})


def _assert_complete_or_absent(root: Path) -> None:
    """What a killed run may leave: finished artifacts (their manifest lists files that exist with those hashes),
    and temporary folders beside them (dot-names), never a half-written artifact under its real name."""
    from pipelines.manifest import read_manifest, sha256_file

    for folder in _artifact_folders(root):
        if any(part.startswith(".") for part in folder.relative_to(root).parts):
            continue  # a temporary folder of the killed write
        manifest = read_manifest(folder)
        assert manifest is not None, folder
        for name, digest in manifest.files.items():
            path = folder / name
            assert path.exists(), f"{path} is missing"
            if path.is_file():  # (a LanceDB table is a folder, hashed its own way)
                assert sha256_file(path) == digest, f"{path} differs from its manifest"


def test_kill_during_a_dvc_stage_then_repro_resumes(built_run: BuiltRun, tmp_path: Path) -> None:
    """kill -9 of `dvc repro` in the middle of training: every artifact is complete or absent, the finished
    stages are not redone, and a second `dvc repro` completes the pipeline. It starts from a finished run whose SFT
    data and SFT params then changed (the data stages before them are not what this test is about)."""
    repo = built_run.copy_to(tmp_path / "repo")
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["sft_data"]["seed"] += 1
    params["sft"]["learning_rate"] *= 2
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    process = subprocess.Popen(["dvc", "repro"], cwd=repo, env=cli_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen = []
    assert process.stdout is not None
    for line in process.stdout:
        seen.append(line)
        if "Running stage 'sft_model'" in line:
            break
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and process.poll() is None:  # let the training start writing
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert any("Running stage 'sft_conversations'" in line for line in seen), "".join(seen)[-2000:]
    _assert_complete_or_absent(repo)
    resumed = run(repo, "dvc", "repro")
    ran = ran_stages(resumed)
    assert "sft_conversations" not in ran and "qa_dataset" not in ran  # recorded in dvc.lock before the kill
    assert ran[-1] == "stage3_eval_report" and "sft_model" in ran
    _assert_complete_or_absent(repo)
    assert "up to date" in run(repo, "dvc", "status", "dvc.yaml").lower()


def test_commit_targets_name_the_file_only_for_every_stage() -> None:
    """`dvc commit` collects each target on its own (85 s for 48 stage names, 5 s for the file): a run that built
    every stage of dvc.yaml commits the file; one that built some commits exactly those."""
    from pipelines.dvc_lock import commit_targets

    defined = {"knowledge_graph@solar", "qa_dataset", "sft_model"}
    assert commit_targets(["qa_dataset", "knowledge_graph@solar", "sft_model"], defined) == ["dvc.yaml"]
    assert commit_targets(["knowledge_graph@solar"], defined) == ["knowledge_graph@solar"]


def test_a_project_without_dvc_is_not_recorded(tmp_path: Path) -> None:
    """`omne run` in a folder that is not a DVC project (no dvc.yaml or no .dvc/) records nothing in DVC, and says
    why; one that is records, given the params.yaml DVC reads and the profile it declares."""
    from pipelines.config import load_params
    from pipelines.dvc_lock import why_not_recordable
    from tests.conftest import make_project

    root = make_project(tmp_path / "project")
    params = load_params(root / "params.yaml")
    assert why_not_recordable(params, root / "params.yaml") == "no DVC project here"
    (root / "dvc.yaml").write_text("stages: {}\n")
    assert why_not_recordable(params, root / "params.yaml") == "no DVC project here"  # no .dvc/ beside it
    (root / ".dvc").mkdir()
    assert why_not_recordable(params, root / "params.yaml") is None
    assert "is not" in why_not_recordable(params, tmp_path / "other.yaml")
    paper = load_params(root / "params.yaml", profile="paper")
    assert why_not_recordable(paper, root / "params.yaml") == "the run used profile 'paper', params.yaml says 'quick'"
