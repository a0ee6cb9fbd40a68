"""QA stage: per-domain `seed_subgraphs`, `qa_pairs`, `gold_paths`, and the merged `qa_dataset`, with checks."""

import dagster as dg

from dagster_project.defs.checks import asset_check_result, asset_check_specs
from dagster_project.defs.factory import stage_asset
from dagster_project.defs.metadata import artifact_result
from dagster_project.defs.partitions import domain_partitions
from dagster_project.defs.resources import OmneResource
from pipelines.qa import build as qa_build
from pipelines.qa.checks import (
    GOLD_CHECKS,
    PAIR_CHECKS,
    SEED_CHECKS,
    check_bucket_targets,
    check_gold_coverage,
    check_pairs_pass_rules,
    check_subgraph_sizes,
)
from pipelines.qa.expectations import QA_TABLE_CHECKS, validate_qa_table
from pipelines.qa.report import qa_quality_report, report_markdown


class QAPairsConfig(dg.Config):
    """Launchpad overrides of the generation step (empty / 0: what params.yaml says)."""

    generator: str = ""  # template | llm
    limit: int = 0  # at most this many pairs per bucket


def _unpartitioned(asset: str, checks: dict) -> list[dg.AssetCheckSpec]:
    return [dg.AssetCheckSpec(spec.name, asset=asset, description=spec.description, blocking=spec.blocking)
            for spec in checks.values()]


@stage_asset("seed_subgraphs", kinds={"parquet", "scipy"},
             check_specs=asset_check_specs("seed_subgraphs", SEED_CHECKS, domain_partitions))
def seed_subgraphs(context: dg.AssetExecutionContext, omne: OmneResource) -> dg.MaterializeResult:
    """Seed entities whose depth-3 BFS subgraph has 20-400 nodes, with the subgraph's nodes."""
    params = omne.params()
    result = qa_build.build_seed_subgraphs(context.partition_key, params)
    sizes = qa_build.read_seed_subgraphs(context.partition_key, params)["size"].to_list()
    return artifact_result(result, result.manifest.metadata, [asset_check_result(check_subgraph_sizes(sizes, params))])


@stage_asset("qa_pairs", kinds={"jsonl"}, check_specs=asset_check_specs("qa_pairs", PAIR_CHECKS, domain_partitions))
def qa_pairs(context: dg.AssetExecutionContext, config: QAPairsConfig, omne: OmneResource) -> dg.MaterializeResult:
    """Validated multi-hop QA pairs of the domain (template generator, or the LLM with judge and retries)."""
    params, domain = omne.params(), context.partition_key
    result = qa_build.build_qa_pairs(domain, params, generator=config.generator or None, limit=config.limit or None,
                                     progress=False)
    pairs = qa_build.read_qa_pairs(domain, params)
    graph = qa_build.relation_graph(domain, params)
    targets = result.manifest.params["targets"]
    meta = result.manifest.metadata
    return artifact_result(
        result, {"generator": meta["generator"], **{f"stat_{k}": v for k, v in meta["stats"].items()},
                 "llm_usage": dg.MetadataValue.json(meta.get("llm_usage") or {}),
                 **({"paraphrase": dg.MetadataValue.json(meta["paraphrase"])} if meta.get("paraphrase") else {})},
        [asset_check_result(check_pairs_pass_rules(graph, pairs, params)),
         asset_check_result(check_bucket_targets(pairs, targets))],
    )


@stage_asset("gold_paths", kinds={"jsonl"},
             check_specs=asset_check_specs("gold_paths", GOLD_CHECKS, domain_partitions))
def gold_paths(context: dg.AssetExecutionContext, omne: OmneResource) -> dg.MaterializeResult:
    """Every simple start->answer path of each pair (EoG), verified by rules or the LLM."""
    params, domain = omne.params(), context.partition_key
    result = qa_build.build_gold_paths(domain, params, progress=False)
    outcome = check_gold_coverage(qa_build.read_gold_paths(domain, params), qa_build.read_qa_pairs(domain, params))
    return artifact_result(result, {k: v for k, v in result.manifest.metadata.items() if k != "llm_usage"},
                           [asset_check_result(outcome)])


@stage_asset("qa_dataset", kinds={"parquet", "great_expectations"},
             check_specs=_unpartitioned("qa_dataset", QA_TABLE_CHECKS))
def qa_dataset(context: dg.AssetExecutionContext, omne: OmneResource) -> dg.MaterializeResult:
    """The pairs of the domains qa.domains / qa.exclude_domains select (all by default) merged, de-duplicated and
    split (train/val/test), checked by a GE suite."""
    params = omne.params()
    result = qa_build.build_qa_dataset(params)
    table = qa_build.read_qa_dataset(params)
    outcomes = validate_qa_table(table, params.qa.max_hops, strict_path=params.qa.strict_path,  # GE suite + leakage
                                 generic_words=qa_build.read_generic_words(params), name_rules=params.qa.name_rules)
    stats = result.stats
    preview = table.select("id", "domain", "bucket", "split", "question", "answer").head(20).to_pandas()
    quality = qa_quality_report(params)  # docs/qa.md, "Quality report"
    overall = [d.overall for d in quality.domains]
    return artifact_result(
        result, {"stats": dg.MetadataValue.json(stats), "per_domain": dg.MetadataValue.md(_stats_markdown(stats)),
                 "preview": dg.MetadataValue.md(preview.to_markdown(index=False)),
                 "quality": dg.MetadataValue.md(report_markdown(quality, with_samples=True)),
                 "quality_leaks": sum(r.leaks for r in overall),
                 "quality_form_problems": sum(r.form_problems for r in overall),
                 "quality_words_max": max((r.words_max for r in overall), default=0),
                 "quality_guessable": sum(r.guessable for r in overall)},
        [asset_check_result(o) for o in outcomes],
    )


def _stats_markdown(stats: dict) -> str:
    lines = ["| domain | 1/2-hop | 3+ | total |", "|---|---:|---:|---:|"]
    lines += [f"| {d} | {r['1-2']} | {r['3+']} | {r['total']} |" for d, r in stats.get("domains", {}).items()]
    return "\n".join(lines)
