"""Dagster builds several domain partitions at once: `dagster job backfill` of `build_domains` over two domains
queues a run per domain, a real `dagster-daemon` launches both from the run queue of the project's dagster.yaml,
and their steps run at the same time; the merged QA dataset, which such runs may each build, is built by one
process at a time (docs/orchestration.md, "Jobs, schedule and sensors")."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import dagster as dg
import pytest

from dagster_project.defs.jobs import DOMAIN_STAGES
from dagster_project.record import INSTANCE_CONFIG
from pipelines.config import Params
from pipelines.crashsafe import file_lock
from pipelines.errors import ArtifactMissingError
from pipelines.layout import lock_file
from pipelines.qa.build import DATASET_LOCK, build_qa_dataset
from tests.conftest import TINY_REGISTRY, cli_env, make_project

DOMAINS = ("solar", "lunar")
# lunar: the same source files as solar under another name, so both domains cost the same
REGISTRY = TINY_REGISTRY + TINY_REGISTRY.split("\n", 1)[1].replace("  solar:\n", "  lunar:\n", 1)
LOCATION = ("-m", "dagster_project.definitions")
WAIT_S = 300


def _stop(process: subprocess.Popen) -> None:
    """End the daemon and what it started (its code server, the runs): all in the process group it leads."""
    for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 30)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue


def _finished_runs(instance: dg.DagsterInstance, daemon: subprocess.Popen, log: Path) -> list[dg.DagsterRun]:
    """The job's two runs once both have finished (a failed assert with the daemon's log on a timeout)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        runs = instance.get_runs(filters=dg.RunsFilter(job_name="build_domains"))
        if len(runs) == len(DOMAINS) and all(run.is_finished for run in runs):
            return runs
        states = [run.status.value for run in runs]
        assert daemon.poll() is None, f"the daemon exited ({daemon.returncode}), runs {states}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"runs {states} after {WAIT_S} s:\n{log.read_text()[-3000:]}"
        time.sleep(1)


def _step_window(instance: dg.DagsterInstance, run_id: str) -> tuple[float, float, set[str]]:
    """(first step start, last step success, the steps that succeeded) of a run, from its event log."""
    records = instance.all_logs(run_id, of_type={dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS})
    starts = [r.timestamp for r in records if r.dagster_event_type == dg.DagsterEventType.STEP_START]
    succeeded = [r for r in records if r.dagster_event_type == dg.DagsterEventType.STEP_SUCCESS]
    return min(starts), max(r.timestamp for r in succeeded), {r.step_key for r in succeeded}


@pytest.mark.slow
def test_a_backfill_builds_two_domains_in_parallel_runs(tmp_path: Path) -> None:
    assert {"knowledge_graph", "entity_index", "gold_paths"} <= set(DOMAIN_STAGES) and "qa_dataset" not in DOMAIN_STAGES
    project = make_project(tmp_path / "project", REGISTRY)
    home = project / ".dagster_home"  # the instance `omne run` sets up, with its dagster.yaml (run queue limit)
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE_CONFIG, encoding="utf-8")
    env = cli_env(OMNE_PARAMS=str(project / "params.yaml"), DAGSTER_HOME=str(home))
    log = tmp_path / "daemon.log"
    # as a user would: the runs are queued first, then a daemon launches them (started one after the other: two
    # processes that create a fresh instance's SQLite tables at once collide)
    backfill = subprocess.run(["dagster", "job", "backfill", *LOCATION, "-j", "build_domains",
                               "--partitions", ",".join(DOMAINS), "--noprompt"],
                              cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert backfill.returncode == 0, backfill.stderr[-3000:]
    assert "Launched backfill job" in backfill.stdout, backfill.stdout
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs >= len(DOMAINS)
        queued = instance.get_runs(filters=dg.RunsFilter(job_name="build_domains"))
        assert sorted(run.status.value for run in queued) == ["QUEUED"] * len(DOMAINS)  # no daemon yet
        with log.open("w") as out:
            daemon = subprocess.Popen(["dagster-daemon", "run", *LOCATION], cwd=project, env=env, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        try:
            runs = _finished_runs(instance, daemon, log)
        finally:
            _stop(daemon)
        windows = {run.tags["dagster/partition"]: _step_window(instance, run.run_id) for run in runs}
        statuses = {run.tags["dagster/partition"]: run.status for run in runs}
        backfills = {run.tags.get("dagster/backfill") for run in runs}
    assert statuses == dict.fromkeys(DOMAINS, dg.DagsterRunStatus.SUCCESS), log.read_text()[-3000:]
    assert len(backfills) == 1 and None not in backfills  # one backfill, one run per domain
    assert all(steps == set(DOMAIN_STAGES) for *_, steps in windows.values()), windows
    for domain in DOMAINS:
        assert (project / "artifacts" / "kg" / domain / "manifest.json").is_file()
        assert (project / "artifacts" / "qa" / "gold" / domain / "manifest.json").is_file()
    assert not (project / "artifacts" / "qa" / "dataset").exists()  # left to one materialization after
    # the two runs' steps overlapped in time: the later first step started before the earlier last one ended
    assert max(start for start, _, _ in windows.values()) < min(end for _, end, _ in windows.values()), windows


def test_one_qa_dataset_build_at_a_time(params: Params) -> None:
    """A second build waits for the dataset lock (held here as another process would hold it), then runs."""
    outcome: list[BaseException] = []

    def build() -> None:
        try:
            build_qa_dataset(params)
        except ArtifactMissingError as exc:  # no domain has QA pairs here: it got past the lock
            outcome.append(exc)

    with file_lock(lock_file(params.artifacts_dir, DATASET_LOCK)):
        waiting = threading.Thread(target=build)
        waiting.start()
        waiting.join(timeout=1.0)
        assert waiting.is_alive() and not outcome
    waiting.join(timeout=30)
    assert not waiting.is_alive() and len(outcome) == 1
