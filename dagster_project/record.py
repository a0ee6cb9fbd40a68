"""Tell the project's Dagster instance what `omne run` built, so that the UI shows it as materializations of
its assets, with the manifests' metadata and the checks' results, exactly as if the UI had built it.

It materializes the same assets in-process on the instance ($DAGSTER_HOME, else the project's
`.dagster_home`, the instance `make dagster` opens). Their library builds find the artifacts current and
skip, so a recording costs the checks, not the builds. An artifact whose data version (the hash of its
files) is already the instance's latest for that asset and partition is left out: rerunning `omne run`
adds no duplicate history. Registered as the `dagster` entry point of group `omne.recorders`
(pyproject.toml), which `pipelines.run` calls; `pipelines/` itself never imports Dagster.
"""

from __future__ import annotations

import os
import warnings
from collections import defaultdict
from pathlib import Path

import dagster as dg
from dagster._core.definitions.data_version import DATA_VERSION_TAG

with warnings.catch_warnings():  # partitioned asset checks are a preview feature: said once by the UI, not per run
    warnings.simplefilter("ignore", dg.PreviewWarning)
    from dagster_project.defs import evaluation, kg, qa, training
    from dagster_project.defs.metadata import data_version
    from dagster_project.defs.partitions import add_missing_partitions, registry_domains
    from dagster_project.defs.resources import OmneResource
from pipelines.config import Params
from pipelines.manifest import read_manifest
from pipelines.stages import STAGES, BuiltArtifact

RECORDED_BY_TAG = "omne/recorded_by"
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}  # the run's events are in the UI, not on stdout
_DEFINED = {a.key.to_user_string(): a for module in (kg, qa, evaluation, training) for a in vars(module).values()
            if isinstance(a, dg.AssetsDefinition)}
# the asset of every stage `omne run` builds, in registry order (a stage without its asset is an error at import)
ASSETS: dict[str, dg.AssetsDefinition] = {s.name: _DEFINED[s.name] for s in STAGES.run_stages()}


INSTANCE_CONFIG = """\
# Written by `omne run` for the project's own Dagster instance (the folder is git-ignored). The defaults
# (SQLite storage in this folder, runs queued for the daemon that `dagster dev` starts) otherwise; telemetry
# off: these machines are offline.
telemetry:
  enabled: false
concurrency:
  runs:
    max_concurrent_runs: 4  # runs in progress at once, e.g. a build_domains backfill's domains (Dagster: 10)
"""


def instance_home(params: Params) -> Path:
    """$DAGSTER_HOME, else the project's .dagster_home (what the Makefile exports for `make dagster`); a new
    folder gets a dagster.yaml (an existing one is never touched)."""
    home = Path(os.environ.get("DAGSTER_HOME") or params.root / ".dagster_home")
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(INSTANCE_CONFIG, encoding="utf-8")
    return home


def latest_data_version(instance: dg.DagsterInstance, asset: str, partition: str | None) -> str | None:
    """The data version of the asset's (partition's) newest materialization in the instance."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition] if partition else None),
        limit=1).records
    if not records or records[0].asset_materialization is None:
        return None
    return records[0].asset_materialization.tags.get(DATA_VERSION_TAG)


def unrecorded(instance: dg.DagsterInstance, built: list[BuiltArtifact]) -> list[BuiltArtifact]:
    """The artifacts the instance does not know in their current version (by data version); a stage that is not
    one `omne run` builds is refused (``UnknownStageError``, or ValueError for a registered stage outside the run)."""
    missing = []
    for item in built:
        stage = STAGES.get(item.stage)  # an unknown name: UnknownStageError, which lists the known ones
        if stage.name not in ASSETS:
            raise ValueError(f"stage {stage.name!r} is not one `omne run` builds; the Dagster recorder records "
                             f"{', '.join(ASSETS)}")
        version = data_version(read_manifest(item.folder))
        if version is None or latest_data_version(instance, item.stage, item.partition) != version.value:
            missing.append(item)
    return missing


def record_builds(params: Params, params_file: Path | None, built: list[BuiltArtifact]) -> str:
    """Materialize, on the project's instance, the assets of ``built`` that it does not know yet."""
    home = instance_home(params)
    resources = {"omne": OmneResource(params_path=str(params_file or ""), profile=params.profile)}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        add_missing_partitions(instance, registry_domains(params))
        todo = unrecorded(instance, built)
        by_partition: dict[str | None, list[str]] = defaultdict(list)
        for item in todo:
            by_partition[item.partition].append(item.stage)
        failed = []
        for partition, stages in by_partition.items():
            result = dg.materialize([ASSETS[s] for s in ASSETS if s in stages], partition_key=partition,
                                    instance=instance, resources=resources, raise_on_error=False,
                                    run_config=QUIET, tags={RECORDED_BY_TAG: "omne run"})
            if not result.success:
                failed.append(f"{partition or 'unpartitioned'} (run {result.run_id})")
    where = f"Dagster instance {home}"
    if failed:
        return f"record dagster: {len(todo)} materializations in {where}; failed: {', '.join(failed)}"
    return f"record dagster: {len(todo)} new materializations in {where} ({len(built) - len(todo)} already current)"
