"""Run in a subprocess by tests/test_dagster.py (the code location reads OMNE_PARAMS when it loads):
materialize the KG assets of one partition with Dagster's in-process API and print what happened."""

from __future__ import annotations

import json
import sys

import dagster as dg

from dagster_project.defs.kg import entity_index, knowledge_graph
from dagster_project.defs.partitions import domain_partitions
from dagster_project.defs.resources import OmneResource


def main(partition: str, profile: str) -> None:
    result = dg.materialize(
        [knowledge_graph, entity_index], partition_key=partition, resources={"omne": OmneResource()},
        run_config={"resources": {"omne": {"config": {"profile": profile}}}} if profile else None,
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False,
    )
    checks = {f"{e.asset_key.to_user_string()}.{e.check_name}": {"passed": e.passed, "severity": e.severity.value,
                                                                 "metadata": {k: v.value for k, v in e.metadata.items()}}
              for e in result.get_asset_check_evaluations()}
    metadata = {node: {k: v.value for k, v in m.metadata.items() if k != "manifest"}
                for node in ("knowledge_graph", "entity_index")
                for m in result.asset_materializations_for_node(node)}
    print(json.dumps({"success": result.success, "partitions": domain_partitions.get_partition_keys(),
                      "checks": checks, "metadata": metadata}, default=str))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
