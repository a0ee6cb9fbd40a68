"""Data contracts of QA synthesis (docs/architecture.md, "Data contracts"): seed subgraphs, QA pairs and their gold
paths.

Files are parquet (seed subgraphs, the QA table) or jsonl (per-domain pairs with their attempts),
written atomically; these models are the boundary every reader and writer goes through.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

Bucket = Literal["1-2", "3+"]
Split = Literal["train", "val", "test"]


def bucket_of(hops: int) -> Bucket:
    return "1-2" if hops <= 2 else "3+"


def qa_id(domain: str, question: str, answer: str) -> str:
    """Stable id of a QA pair: the same pair gets the same id in every run and every clone."""
    return hashlib.sha256(f"{domain}\x1f{question}\x1f{answer}".encode()).hexdigest()[:16]


class SeedSubgraph(BaseModel):
    model_config = ConfigDict(extra="forbid")
    domain: str
    seed: int  # entity id
    seed_name: str
    depth: int
    nodes: list[int]  # entity ids of the depth-`depth` BFS ball, the seed first
    size: int


class PathEdge(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    src: str  # entity names, as stored in the KG relation (its written direction)
    keywords: str
    dst: str


class Validation(BaseModel):
    model_config = ConfigDict(extra="forbid")
    valid: bool
    reason: str = ""
    attempts: int = 1
    path_valid: bool = True
    judge: str = ""  # the LLM judge's reason, when a judge ran


class Attempt(BaseModel):
    """One generation round of a seed: what the generator proposed and why it was rejected (if it was)."""

    model_config = ConfigDict(extra="forbid")
    path: list[str] = Field(default_factory=list)
    question: str = ""
    answer: str = ""
    path_valid: bool = False
    feedback: str = ""


class QAPair(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    domain: str
    question: str
    answer: str
    answers: list[str]
    hops: int
    bucket: Bucket
    path: list[str]
    path_edges: list[PathEdge]
    start_entity: str
    qtype: str
    generator: str
    validation: Validation
    split: Split | None = None
    seed: int | None = None
    # the template writer's question when an LLM paraphrase replaced it (qa.paraphrase: llm); left out of the
    # stored record when None, so files written without a paraphrase keep their bytes and older files read as before
    template_question: str | None = None

    @model_serializer(mode="wrap")
    def _without_unset_template(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if data.get("template_question") is None:
            data.pop("template_question", None)
        return data


class GoldPathItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    nodes: list[str]
    edges: list[PathEdge]
    valid: bool
    reason: str = ""


class GoldPath(BaseModel):
    """Every simple start->answer path of a QA pair within the hop limit, each with a verdict."""

    model_config = ConfigDict(extra="forbid")
    qa_id: str
    domain: str
    paths: list[GoldPathItem]
    truncated: bool = False  # more paths existed than gold_max_paths
