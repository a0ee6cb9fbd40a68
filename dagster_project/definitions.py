"""Entry point of the code location (`dagster dev` / `dg`): everything under defs/ is loaded.

Loading also prepares the Dagster instance of $DAGSTER_HOME (when set): the registry's domains that
are not yet `domain` partitions are added (so a fresh instance, the UI and `dagster asset materialize
--partition X` know them without waiting for `domain_partitions_sensor`), and the `gpu` pool gets its
default limit when it has none. Both are idempotent and never remove anything.
"""

import logging
import os
from pathlib import Path

import dagster as dg

from dagster_project.defs.partitions import add_missing_partitions, registry_domains
from dagster_project.defs.resources import OmneResource, ensure_pool_limit

log = logging.getLogger(__name__)


def prepare_instance() -> None:
    """Add missing domain partitions and the gpu pool limit to $DAGSTER_HOME's instance; never fails."""
    home = os.environ.get("DAGSTER_HOME")
    if not home or not Path(home).is_dir():
        return
    try:
        with dg.DagsterInstance.get() as instance:
            added = add_missing_partitions(instance, registry_domains(OmneResource().params()))
            if added:
                log.info("added domain partitions %s", ", ".join(added))
            ensure_pool_limit(instance)
    except Exception as exc:  # noqa: BLE001 - a broken registry must not stop the UI from loading
        log.warning("could not prepare the Dagster instance (%s); domain_partitions_sensor will retry", exc)


@dg.definitions
def defs() -> dg.Definitions:
    definitions = dg.load_from_defs_folder(path_within_project=Path(__file__).parent / "defs")
    prepare_instance()
    return definitions
