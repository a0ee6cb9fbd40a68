"""Data-quality checks of the KG layer, as plain functions: Dagster's asset checks and the CLI call them.

``KG_CHECKS`` / ``INDEX_CHECKS`` declare each check once (name, what it asserts, whether a failure
blocks downstream work); the functions return a ``CheckOutcome`` with counts as metadata.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from pydantic import BaseModel

from pipelines.config import CheckParams, IndexParams
from pipelines.kg.index import EntityIndex, self_retrieval_recall
from pipelines.kg.model import KnowledgeGraph


class CheckSpec(BaseModel):
    name: str
    description: str
    blocking: bool


class CheckOutcome(BaseModel):
    spec: CheckSpec
    passed: bool
    metadata: dict[str, Any] = {}


KG_CHECKS = {spec.name: spec for spec in [
    CheckSpec(name="no_dangling_edges", description="every relation's src and dst is an entity id", blocking=True),
    CheckSpec(name="unique_normalised_keys", description="no two entities share a normalised look-up key",
              blocking=True),
    CheckSpec(name="no_empty_names", description="every entity has a non-empty name", blocking=True),
    CheckSpec(name="description_share", description="share of entities with a description >= "
              "checks.min_description_share", blocking=False),
    CheckSpec(name="isolated_share", description="share of entities without any relation <= "
              "checks.max_isolated_share", blocking=False),
]}
INDEX_CHECKS = {spec.name: spec for spec in [
    CheckSpec(name="self_retrieval", description="looking up sampled entities by name finds them first "
              "(recall@1 >= index.self_retrieval_min_recall)", blocking=True),
]}


def check_no_dangling_edges(kg: KnowledgeGraph) -> CheckOutcome:
    ends = pl.concat([kg.relations["src"], kg.relations["dst"]])
    dangling = int((ends.is_null() | (ends < 0) | (ends >= kg.num_entities)).sum())
    return CheckOutcome(spec=KG_CHECKS["no_dangling_edges"], passed=dangling == 0,
                        metadata={"dangling_endpoints": dangling, "relations": kg.relations.height})


def check_unique_keys(kg: KnowledgeGraph) -> CheckOutcome:
    duplicated = kg.entities.filter(pl.col("key").is_duplicated())
    examples = duplicated["key"].unique().sort().head(5).to_list()
    return CheckOutcome(spec=KG_CHECKS["unique_normalised_keys"], passed=duplicated.height == 0,
                        metadata={"duplicated_rows": duplicated.height, "examples": ", ".join(examples)})


def check_no_empty_names(kg: KnowledgeGraph) -> CheckOutcome:
    empty = int((kg.entities["name"].fill_null("").str.strip_chars() == "").sum())
    return CheckOutcome(spec=KG_CHECKS["no_empty_names"], passed=empty == 0, metadata={"empty_names": empty})


def check_description_share(kg: KnowledgeGraph, params: CheckParams) -> CheckOutcome:
    n = kg.num_entities
    described = int((kg.entities["description"].fill_null("").str.strip_chars() != "").sum())
    share = described / n if n else 0.0
    return CheckOutcome(spec=KG_CHECKS["description_share"], passed=share >= params.min_description_share,
                        metadata={"described": described, "entities": n, "share": round(share, 4),
                                  "min_share": params.min_description_share})


def check_isolated_share(kg: KnowledgeGraph, params: CheckParams) -> CheckOutcome:
    n = kg.num_entities
    isolated = int((kg.adjacency().getnnz(axis=1) == 0).sum())
    share = isolated / n if n else 1.0
    return CheckOutcome(spec=KG_CHECKS["isolated_share"], passed=share <= params.max_isolated_share,
                        metadata={"isolated": isolated, "entities": n, "share": round(share, 4),
                                  "max_share": params.max_isolated_share})


def run_kg_checks(kg: KnowledgeGraph, params: CheckParams) -> list[CheckOutcome]:
    return [check_no_dangling_edges(kg), check_unique_keys(kg), check_no_empty_names(kg),
            check_description_share(kg, params), check_isolated_share(kg, params)]


def check_self_retrieval(index: EntityIndex, kg: KnowledgeGraph, params: IndexParams) -> CheckOutcome:
    return self_retrieval_outcome(self_retrieval_recall(index, kg, params.self_retrieval_sample), params)


def self_retrieval_outcome(result: dict, params: IndexParams) -> CheckOutcome:
    """The check on a recall measured already (the index build records it in its manifest: no second pass)."""
    return CheckOutcome(spec=INDEX_CHECKS["self_retrieval"],
                        passed=result["recall_at_1"] >= params.self_retrieval_min_recall,
                        metadata={**result, "min_recall": params.self_retrieval_min_recall})
