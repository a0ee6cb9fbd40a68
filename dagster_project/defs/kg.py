"""KG stage: per-domain `knowledge_graph` and `entity_index` assets with their checks.

Both are partitioned by domain (dynamic partitions, see partitions.py); `kg_source_sensor` re-materializes
`knowledge_graph` and everything downstream of it when a domain's source files change.
"""

import dagster as dg

from dagster_project.defs.checks import asset_check_result, asset_check_specs
from dagster_project.defs.factory import stage_asset
from dagster_project.defs.metadata import artifact_result
from dagster_project.defs.partitions import domain_partitions
from dagster_project.defs.resources import OmneResource
from pipelines.domains import load_registry
from pipelines.kg.build import build_entity_index
from pipelines.kg.checks import INDEX_CHECKS, KG_CHECKS, check_self_retrieval, run_kg_checks, self_retrieval_outcome
from pipelines.kg.domain_build import build_domain_kg
from pipelines.kg.index import EntityIndex
from pipelines.kg.store import read_kg
from pipelines.layout import kg_dir


@stage_asset("knowledge_graph", kinds={"parquet", "polars"},
             check_specs=asset_check_specs("knowledge_graph", KG_CHECKS, domain_partitions))
def knowledge_graph(context: dg.AssetExecutionContext, omne: OmneResource) -> dg.MaterializeResult:
    """The domain's KG: entities and relations parquet merged from its source, with a manifest."""
    params = omne.params()
    result = build_domain_kg(load_registry(params.registry_path).get(context.partition_key), params)
    stats = result.manifest.metadata["stats"]
    return artifact_result(result, {f"stat_{k}": v for k, v in stats.items()},
                           [asset_check_result(o) for o in run_kg_checks(read_kg(result.folder), params.checks)])


@stage_asset("entity_index", kinds={"lancedb"},
             check_specs=asset_check_specs("entity_index", INDEX_CHECKS, domain_partitions))
def entity_index(context: dg.AssetExecutionContext, omne: OmneResource) -> dg.MaterializeResult:
    """The domain's entity index: LanceDB table of name embeddings for entity_matcher."""
    params = omne.params()
    result = build_entity_index(context.partition_key, params)
    recorded = result.manifest.metadata.get("self_retrieval")
    if recorded is not None:  # measured on this index by the build: checking it again would re-encode every name
        outcome = self_retrieval_outcome(recorded, params.index)
    else:
        index = EntityIndex(result.folder, params.index)
        outcome = check_self_retrieval(index, read_kg(kg_dir(params.artifacts_dir, context.partition_key)),
                                       params.index)
    return artifact_result(result, check_results=[asset_check_result(outcome)])
