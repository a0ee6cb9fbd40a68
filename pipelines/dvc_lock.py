"""Record in dvc.lock the stages that `omne run` built or found current, so that `dvc repro` afterwards
reruns none of them (without a lock DVC would rerun every stage, and without `persist` delete its outputs
first).

This is what `dvc commit` is for ("a stage's command was run outside `dvc repro`"): DVC hashes the
stage's deps, params and outs as they are now and writes them to dvc.lock. It is only true when the run
used what DVC reads, so nothing is recorded when the params file is not the project's params.yaml or the
profile differs from that file's `profile:` (DVC knows neither `--params` nor `$OMNE_PROFILE`). Only the
stages the run itself verified are committed: a stage left stale stays stale for DVC too. Registered as
the `dvc` entry point of group `omne.recorders` (pyproject.toml).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from pipelines.config import Params
from pipelines.domains import load_registry
from pipelines.stages import MAIN_DVC_FILE, STAGES, BuiltArtifact

DVC_TIMEOUT_S = 600


def dvc_executable() -> str | None:
    """The `dvc` of this interpreter's environment (the project's venv), else the one on PATH."""
    beside = Path(sys.executable).parent / "dvc"
    return str(beside) if beside.is_file() else shutil.which("dvc")


def defined_stages(domains: list[str]) -> set[str]:
    """Stage addresses of the project's dvc.yaml, generated from the stage registry (`foreach` stages expanded over
    the registry's domains)."""
    return set(STAGES.dvc_addresses(domains, MAIN_DVC_FILE))


def dvc_targets(built: list[BuiltArtifact]) -> list[str]:
    """The dvc.yaml addresses of ``built``, once each; a stage the registry does not declare, or one outside
    dvc.yaml (the sweep), is refused with an error that names it."""
    targets = []
    for item in built:
        stage = STAGES.get(item.stage)  # an unknown name: UnknownStageError, which lists the known ones
        if stage.dvc_file != MAIN_DVC_FILE:
            raise ValueError(f"stage {stage.name!r} is in {stage.dvc_file}, not in {MAIN_DVC_FILE}, which the dvc "
                             "recorder commits")
        targets.append(stage.dvc_address(item.partition))
    return list(dict.fromkeys(targets))


def why_not_recordable(params: Params, params_file: Path | None) -> str | None:
    """Why dvc.lock must not record this run (None when it may)."""
    root = params.root
    if not (root / "dvc.yaml").is_file() or not (root / ".dvc").is_dir():
        return "no DVC project here"
    project_params = root / "params.yaml"
    if params_file is None or not project_params.is_file() or params_file.resolve() != project_params.resolve():
        return f"the run's params file is not {project_params}, which DVC reads"
    declared = (yaml.safe_load(project_params.read_text(encoding="utf-8")) or {}).get("profile") or "quick"
    if declared != params.profile:
        return f"the run used profile {params.profile!r}, params.yaml says {declared!r}"
    return None


def commit_targets(targets: list[str], defined: set[str]) -> list[str]:
    """What `dvc commit` is given for ``targets``: the file ``dvc.yaml`` when they are every stage it defines (what
    `make run` builds), else the stage addresses. DVC collects each target on its own, building the pipeline's
    graph every time: the 48 stages of the eight default domains named one by one took 85 s to commit, the file
    5 s (2026-11-28), for the same dvc.lock."""
    return ["dvc.yaml"] if set(targets) == defined else targets


def record_dvc_stages(params: Params, params_file: Path | None, built: list[BuiltArtifact]) -> str:
    """`dvc commit --force` the stages of ``built`` that dvc.yaml defines; one line saying what happened."""
    targets = dvc_targets(built)  # before anything else: an unknown stage is an error even where DVC is absent
    reason = why_not_recordable(params, params_file)
    if reason:
        return f"record dvc: skipped ({reason})"
    defined = defined_stages(load_registry(params.registry_path).names)
    targets = [t for t in targets if t in defined]  # (a domain that left the registry since it was built)
    dvc = dvc_executable()
    if not targets or dvc is None:
        return "record dvc: skipped (dvc is not installed)" if targets else ""
    done = subprocess.run([dvc, "commit", "--force", "--quiet", *commit_targets(targets, defined)], cwd=params.root,
                          capture_output=True, text=True, timeout=DVC_TIMEOUT_S)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        return f"record dvc: dvc commit failed ({detail[-1] if detail else f'exit {done.returncode}'})"
    return f"record dvc: {len(targets)} stages in dvc.lock (`dvc repro` reuses them)"
