"""Data-quality checks of the per-domain QA artifacts, as plain functions (Dagster asset checks call them).

The dataset-level checks (the Great Expectations suite and split leakage) are in expectations.py.
"""

from __future__ import annotations

from pipelines.config import Params
from pipelines.kg.checks import CheckOutcome, CheckSpec
from pipelines.qa.models import GoldPath, QAPair
from pipelines.qa.paths import RelationGraph
from pipelines.qa.validate import check_pair

SEED_CHECKS = {spec.name: spec for spec in [
    CheckSpec(name="subgraph_size_bounds", description="every seed subgraph has seeds.min_nodes..max_nodes nodes, "
              "and there is at least one", blocking=True),
]}
PAIR_CHECKS = {spec.name: spec for spec in [
    CheckSpec(name="pairs_pass_rules", description="every stored pair passes the rule checks again against the KG "
              "(connected path, answer last, start named, no other path entity named)", blocking=True),
    CheckSpec(name="bucket_targets", description="each bucket reached qa.*_per_domain pairs", blocking=False),
]}
GOLD_CHECKS = {spec.name: spec for spec in [
    CheckSpec(name="every_pair_has_valid_path", description="each QA pair has at least one valid gold path",
              blocking=True),
]}


def check_subgraph_sizes(sizes: list[int], params: Params) -> CheckOutcome:
    low, high = params.seeds.min_nodes, params.seeds.max_nodes
    outside = [s for s in sizes if not low <= s <= high]
    return CheckOutcome(spec=SEED_CHECKS["subgraph_size_bounds"], passed=bool(sizes) and not outside,
                        metadata={"subgraphs": len(sizes), "outside_bounds": len(outside),
                                  "min": min(sizes, default=0), "max": max(sizes, default=0)})


def check_pairs_pass_rules(graph: RelationGraph, pairs: list[QAPair], params: Params) -> CheckOutcome:
    failures: list[str] = []
    for pair in pairs:
        seed = graph.entity_id(pair.start_entity)
        verdict = check_pair(graph, pair.path, pair.question, pair.answer, seed if seed is not None else -1,
                             pair.bucket, strict=params.qa.strict_path, max_hops=params.qa.max_hops,
                             name_rules=params.qa.name_rules)
        if not verdict.valid:
            failures.append(f"{pair.id}: {'; '.join(verdict.feedback)}")
    return CheckOutcome(spec=PAIR_CHECKS["pairs_pass_rules"], passed=bool(pairs) and not failures,
                        metadata={"pairs": len(pairs), "failing": len(failures), "examples": failures[:5]})


def check_bucket_targets(pairs: list[QAPair], targets: dict[str, int]) -> CheckOutcome:
    counts = {bucket: sum(p.bucket == bucket for p in pairs) for bucket in targets}
    return CheckOutcome(spec=PAIR_CHECKS["bucket_targets"],
                        passed=all(counts[b] >= n for b, n in targets.items()),
                        metadata={f"pairs_{b}": counts[b] for b in counts}
                        | {f"target_{b}": n for b, n in targets.items()})


def check_gold_coverage(golds: list[GoldPath], pairs: list[QAPair]) -> CheckOutcome:
    by_id = {g.qa_id: g for g in golds}
    missing = [p.id for p in pairs if p.id not in by_id or not any(x.valid for x in by_id[p.id].paths)]
    return CheckOutcome(spec=GOLD_CHECKS["every_pair_has_valid_path"], passed=not missing,
                        metadata={"pairs": len(pairs), "without_valid_path": len(missing), "examples": missing[:5]})
