"""Assets declared from the stage registry (pipelines/stages.py): an asset's name, group, domain partitioning and
deps come from its stage, so that the asset graph is the registry's graph; a stage that writes an evaluation report
gets the `report_complete` check. The asset body stays in the module of its group: read the params, call the
build, return the manifest as metadata and the checks' results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg

from dagster_project.defs.checks import report_check_spec
from dagster_project.defs.partitions import domain_partitions
from pipelines.stages import STAGES


def stage_deps(name: str) -> list[dg.AssetKey]:
    """The asset keys of the stage's upstream stages."""
    return [dg.AssetKey(up) for up in STAGES.get(name).upstream]


def stage_asset(name: str, *, check_specs: Sequence[dg.AssetCheckSpec] = (),
                **asset_kwargs: Any) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """``@dg.asset`` for the registry's stage ``name`` (an unknown name is an error): its group, deps and, per domain,
    the `domain` partitions, plus ``check_specs`` and the report check; ``asset_kwargs`` add the Dagster-only
    settings (kinds, pool, op tags)."""
    stage = STAGES.get(name)
    specs = [*check_specs, *([report_check_spec(name)] if stage.report else [])]

    def decorate(body: Callable[..., Any]) -> dg.AssetsDefinition:
        if body.__name__ != name:
            raise ValueError(f"the asset function of stage {name!r} is called {body.__name__!r}")
        return dg.asset(name=name, group_name=stage.group, deps=stage_deps(name),
                        partitions_def=domain_partitions if stage.per_domain else None,
                        check_specs=specs or None, **asset_kwargs)(body)

    return decorate
