"""Map the library's check declarations and outcomes onto Dagster asset checks."""

import json
from pathlib import Path
from typing import Any

import dagster as dg

from pipelines.eval.report import PREDICTIONS_FILE
from pipelines.kg.checks import CheckOutcome, CheckSpec

REPORT_COMPLETE = "report_complete"


def asset_check_specs(asset: str, checks: dict[str, CheckSpec],
                      partitions_def: dg.PartitionsDefinition) -> list[dg.AssetCheckSpec]:
    return [dg.AssetCheckSpec(spec.name, asset=asset, description=spec.description, blocking=spec.blocking,
                              partitions_def=partitions_def)
            for spec in checks.values()]


def asset_check_result(outcome: CheckOutcome) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=outcome.spec.name, passed=outcome.passed, metadata=outcome.metadata,
        severity=dg.AssetCheckSeverity.ERROR if outcome.spec.blocking else dg.AssetCheckSeverity.WARN,
        description=outcome.spec.description,
    )


def report_check_spec(asset: str) -> dg.AssetCheckSpec:
    """The check of every asset that writes an evaluation report (pipelines/stages.py: ``Stage.report``)."""
    return dg.AssetCheckSpec(REPORT_COMPLETE, asset=asset, blocking=True,
                             description="every question has a prediction and every metric group is filled")


def report_check_result(folder: Path, metrics: Any) -> dg.AssetCheckResult:
    """Whether the report in ``folder`` is complete: every scored question has a prediction, buckets are filled."""
    predicted = predicted_questions(folder / PREDICTIONS_FILE)  # also when the report was reused
    complete = bool(predicted) and metrics.overall.n == len(predicted) and bool(metrics.by_bucket)
    return dg.AssetCheckResult(check_name=REPORT_COMPLETE, passed=complete,
                               metadata={"questions": len(predicted), "scored": metrics.overall.n})


def predicted_questions(path: Path) -> set[str]:
    """The question ids that have a prediction in a report's predictions.jsonl."""
    if not path.is_file():
        return set()
    with path.open(encoding="utf-8") as lines:
        return {json.loads(line)["qa_id"] for line in lines if line.strip()}
