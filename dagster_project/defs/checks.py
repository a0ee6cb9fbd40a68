"""Map the library's check declarations and outcomes onto Dagster asset checks."""

import dagster as dg

from pipelines.kg.checks import CheckOutcome, CheckSpec


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
