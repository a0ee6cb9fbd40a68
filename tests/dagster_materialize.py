"""Run in a subprocess by tests/test_dagster.py (the assets read the project from OMNE_PARAMS): fill
the `domain` dynamic partitions of an ephemeral instance from the registry, materialize the KG assets
(or with "qa" as third argument the KG and QA assets, then the unpartitioned qa_dataset) of one
partition with Dagster's in-process API and print what happened."""

from __future__ import annotations

import json
import sys

import dagster as dg

from dagster_project.defs.kg import entity_index, knowledge_graph
from dagster_project.defs.partitions import DOMAIN_PARTITIONS, registry_domains
from dagster_project.defs.resources import OmneResource


def _instance() -> dg.DagsterInstance:
    """An ephemeral instance whose domain partitions are the registry's (what the sensors keep in sync)."""
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(DOMAIN_PARTITIONS, registry_domains(OmneResource().params()))
    return instance


def _summary(results: list[dg.ExecuteInProcessResult], nodes: list[str], instance: dg.DagsterInstance) -> dict:
    checks = {f"{e.asset_key.to_user_string()}.{e.check_name}": {"passed": e.passed, "severity": e.severity.value,
                                                                 "metadata": {k: v.value for k, v in e.metadata.items()}}
              for result in results for e in result.get_asset_check_evaluations()}
    metadata = {node: {k: v.value for k, v in m.metadata.items() if k != "manifest"}
                for result in results for node in nodes for m in _materializations(result, node)}
    failures = [e.event_specific_data.error.to_string()[-1500:] for r in results for e in r.all_events
                if e.is_step_failure]
    return {"success": all(r.success for r in results), "failures": failures,
            "partitions": list(instance.get_dynamic_partitions(DOMAIN_PARTITIONS)),
            "checks": checks, "metadata": metadata}


def _materializations(result: dg.ExecuteInProcessResult, node: str) -> list:
    try:
        return result.asset_materializations_for_node(node)
    except dg.DagsterInvariantViolationError:
        return []


def main(partition: str, profile: str, stage: str = "kg") -> None:
    instance = _instance()
    config = {"resources": {"omne": {"config": {"profile": profile}}}} if profile else None
    resources = {"omne": OmneResource()}
    assets = [knowledge_graph, entity_index]
    if stage == "qa":  # the QA assets do not need the entity index
        from dagster_project.defs.qa import gold_paths, qa_pairs, seed_subgraphs
        assets = [knowledge_graph, seed_subgraphs, qa_pairs, gold_paths]
    results = [dg.materialize(assets, partition_key=partition, resources=resources, run_config=config,
                              instance=instance, raise_on_error=False)]
    nodes = [a.key.to_user_string() for a in assets]
    if stage == "qa":
        from dagster_project.defs.qa import qa_dataset
        results.append(dg.materialize([qa_dataset], resources=resources, run_config=config, instance=instance,
                                      raise_on_error=False))
        nodes.append("qa_dataset")
    print(json.dumps(_summary(results, nodes, instance), default=str))


def evaluate(model: str) -> None:
    """Materialize eval_report (unpartitioned) with a model given in run config."""
    from dagster_project.defs.evaluation import eval_report

    instance = _instance()
    result = dg.materialize([eval_report], resources={"omne": OmneResource()}, instance=instance,
                            run_config={"ops": {"eval_report": {"config": {"model": model, "split": "train",
                                                                           "limit": 2}}}},
                            raise_on_error=False)
    print(json.dumps(_summary([result], ["eval_report"], instance), default=str))


if __name__ == "__main__":
    if sys.argv[1] == "--eval":
        evaluate(sys.argv[2])
    else:
        main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "", sys.argv[3] if len(sys.argv) > 3 else "kg")
