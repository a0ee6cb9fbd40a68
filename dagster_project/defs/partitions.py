"""One dynamic partition per domain of the registry (kg_assets/domains.yaml).

The partition keys live in the Dagster instance, so that adding a domain (`omne kg import`) needs no
code reload:
- `domain_partitions_sensor` (defs/automation.py, running by default: it only edits partition keys and
  launches nothing) adds and removes keys to match the registry;
- loading the code location adds the keys that are missing (definitions.py), so that a fresh
  DAGSTER_HOME, the UI and `dagster asset materialize --partition X` know the domains at once;
- `kg_source_sensor` adds missing keys on each tick before it requests runs for them.
"""

from __future__ import annotations

import dagster as dg

from pipelines.config import Params
from pipelines.domains import load_registry

DOMAIN_PARTITIONS = "domain"

domain_partitions = dg.DynamicPartitionsDefinition(name=DOMAIN_PARTITIONS)


def registry_domains(params: Params) -> list[str]:
    """The domain names of the params' registry, in file order."""
    return load_registry(params.registry_path).names


def partition_changes(existing: list[str], wanted: list[str]) -> tuple[list[str], list[str]]:
    """(keys to add, keys to delete) that make ``existing`` equal to ``wanted``."""
    return [d for d in wanted if d not in existing], [d for d in existing if d not in wanted]


def partition_requests(instance: dg.DagsterInstance, wanted: list[str], *, delete: bool = True,
                       ) -> list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest]:
    """The sensor requests that bring the instance's domain partitions in line with ``wanted``."""
    add, remove = partition_changes(list(instance.get_dynamic_partitions(DOMAIN_PARTITIONS)), wanted)
    requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
    if add:
        requests.append(domain_partitions.build_add_request(add))
    if remove and delete:
        requests.append(domain_partitions.build_delete_request(remove))
    return requests


def add_missing_partitions(instance: dg.DagsterInstance, wanted: list[str]) -> list[str]:
    """Add the domains that the instance lacks (never deletes); returns the added keys."""
    add, _ = partition_changes(list(instance.get_dynamic_partitions(DOMAIN_PARTITIONS)), wanted)
    if add:
        instance.add_dynamic_partitions(DOMAIN_PARTITIONS, add)
    return add
