"""Automation: the domain-partition sensor, the KG-source sensor and the weekly training schedule.

- `domain_partitions_sensor` (running by default; it launches nothing): keeps the `domain` dynamic
  partitions equal to the registry (kg_assets/domains.yaml), adding and removing keys.
- `kg_source_sensor` (stopped by default): hashes each domain's source files every minute and, when a
  domain's content hash changes, requests a run of `knowledge_graph` and everything downstream of it
  (index, QA, dataset, training, evaluation) for that domain's partition: retraining when KGs change.
  Its first tick records the current hashes as the baseline and requests nothing; a domain that
  appears in the registry later counts as changed. Blocking checks stop the run before bad data
  reaches training.
- `weekly_train_and_evaluate` (stopped by default): Mondays 03:00 UTC, the `train_and_evaluate` job.

Turn them on in the UI (Automation -> toggle) or with
`dagster sensor start -m dagster_project.definitions kg_source_sensor` and
`dagster schedule start -m dagster_project.definitions weekly_train_and_evaluate`; they then run
under the daemon of `dagster dev` (or `dagster-daemon run`).
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg

from dagster_project.defs import jobs
from dagster_project.defs.kg import knowledge_graph
from dagster_project.defs.partitions import partition_requests, registry_domains
from dagster_project.defs.resources import OmneResource
from pipelines.config import Params
from pipelines.domains import Domain, load_registry
from pipelines.manifest import fingerprint, sha256_files

KG_AND_DOWNSTREAM = dg.AssetSelection.assets(knowledge_graph).downstream()
SOURCE_SENSOR_INTERVAL_S = 60
TRIGGER_TAG = "omne/trigger"


def source_hash(domain: Domain, root: Path) -> str:
    """One sha256 over the domain's source files (content, by relative path) and its source spec."""
    files = sha256_files(domain.source.files(root), root)
    return fingerprint(files, domain.source.model_dump(mode="json"))


def source_hashes(params: Params) -> tuple[dict[str, str], dict[str, str]]:
    """(domain -> source hash, domain -> problem) for every registry domain; a domain whose source
    cannot be read is reported, not hashed."""
    hashes, problems = {}, {}
    for domain in load_registry(params.registry_path).domains:
        try:
            hashes[domain.name] = source_hash(domain, params.root)
        except OSError as exc:
            problems[domain.name] = f"{type(exc).__name__}: {exc}"
    return hashes, problems


def _selected_keys(context: dg.SensorEvaluationContext) -> list[dg.AssetKey] | None:
    """knowledge_graph and everything downstream, as keys (None: the sensor's target, the same)."""
    repository = context.repository_def
    if repository is None:
        return None
    return sorted(KG_AND_DOWNSTREAM.resolve(repository.asset_graph), key=lambda k: k.to_user_string())


@dg.sensor(name="domain_partitions_sensor", minimum_interval_seconds=30,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Keeps the `domain` partitions equal to kg_assets/domains.yaml (adds and removes keys; "
                       "launches no run).")
def domain_partitions_sensor(context: dg.SensorEvaluationContext, omne: OmneResource) -> dg.SensorResult:
    wanted = registry_domains(omne.params())
    requests = partition_requests(context.instance, wanted)
    if not requests:
        return dg.SensorResult(skip_reason=f"partitions match the registry ({len(wanted)} domains)")
    return dg.SensorResult(dynamic_partitions_requests=requests)


@dg.sensor(name="kg_source_sensor", target=KG_AND_DOWNSTREAM, minimum_interval_seconds=SOURCE_SENSOR_INTERVAL_S,
           default_status=dg.DefaultSensorStatus.STOPPED,
           description="When a domain's KG source files change (sha256), re-materializes that domain's "
                       "knowledge_graph and everything downstream, training and evaluation included.")
def kg_source_sensor(context: dg.SensorEvaluationContext, omne: OmneResource) -> dg.SensorResult:
    params = omne.params()
    hashes, problems = source_hashes(params)
    for name, problem in problems.items():
        context.log.warning(f"domain {name!r}: source not readable, left as it was ({problem})")
    first_tick = context.cursor is None
    seen: dict[str, dict] = json.loads(context.cursor) if context.cursor else {}
    cursor = {name: seen[name] for name in problems if name in seen}
    runs, selection = [], None
    for name, digest in hashes.items():
        before = seen.get(name)
        if before is not None and before["hash"] == digest:
            cursor[name] = before
            continue
        changes = before["changes"] + 1 if before else 0 if first_tick else 1
        cursor[name] = {"hash": digest, "changes": changes}
        if first_tick:
            continue
        if selection is None:
            selection = _selected_keys(context)
        runs.append(dg.RunRequest(
            run_key=f"{name}:{changes}:{digest[:16]}", partition_key=name, asset_selection=selection,
            tags={TRIGGER_TAG: "kg_source_changed", "omne/source_sha256": digest[:16]}))
        context.log.info(f"domain {name!r}: source changed ({digest[:16]}), requesting its KG and downstream")
    partitions = partition_requests(context.instance, list(hashes) + list(problems), delete=False)
    skip = None if runs else ("recorded the source hashes of " + ", ".join(sorted(hashes)) if first_tick
                              else "no KG source changed")
    return dg.SensorResult(run_requests=runs, cursor=json.dumps(cursor, sort_keys=True),
                           dynamic_partitions_requests=partitions, skip_reason=skip)


weekly_train_and_evaluate = dg.ScheduleDefinition(
    name="weekly_train_and_evaluate", cron_schedule="0 3 * * 1", execution_timezone="UTC", job=jobs.train_and_evaluate,
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Every Monday 03:00 UTC: the training stages, then the evaluation reports (gpu pool).")
