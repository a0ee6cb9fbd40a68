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


def _share(value: object) -> str:
    return f"{float(value):.1%}" if isinstance(value, (int, float)) else "?"


# One line per failed check, with its counts and the params key of its threshold: what the CLI prints.
_SUMMARIES = {
    "no_dangling_edges": lambda m: f"{m['dangling_endpoints']} relation endpoint(s) name no entity "
                                   f"(of {m['relations']} relations)",
    "unique_normalised_keys": lambda m: f"{m['duplicated_rows']} entities share a normalised look-up key "
                                        f"(e.g. {m['examples']})",
    "no_empty_names": lambda m: f"{m['empty_names']} entities have an empty name",
    "description_share": lambda m: f"{m['described']} of {m['entities']} entities ({_share(m['share'])}) have a "
                                   f"description; at least {_share(m['min_share'])} expected "
                                   "(checks.min_description_share)",
    "isolated_share": lambda m: f"{m['isolated']} of {m['entities']} entities ({_share(m['share'])}) have no "
                                f"relation; at most {_share(m['max_share'])} allowed (checks.max_isolated_share)",
    "self_retrieval": lambda m: f"looking entities up by name finds {_share(m.get('recall_at_1'))} of them first; "
                                f"at least {_share(m.get('min_recall'))} expected "
                                "(index.self_retrieval_min_recall)",
}


def outcome_summary(outcome: CheckOutcome) -> str:
    """``check_name: what failed, with counts and threshold`` (the CLI's warning line; Dagster shows metadata)."""
    summarise = _SUMMARIES.get(outcome.spec.name)
    try:
        detail = summarise(outcome.metadata) if summarise else outcome.spec.description
    except KeyError:  # metadata without the expected counts: fall back to what the check asserts
        detail = outcome.spec.description
    return f"{outcome.spec.name}: {detail}"


def failed_checks(outcomes: list[CheckOutcome]) -> list[CheckOutcome]:
    return [o for o in outcomes if not o.passed]
