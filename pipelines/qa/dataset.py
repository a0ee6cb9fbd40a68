"""The QA dataset: every domain's pairs merged, de-duplicated and split, with per-domain statistics.

Splits come from a stable hash of the normalised question, so a pair keeps its split across runs
and clones, and two copies of one question can never land in different splits.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from pydantic import BaseModel

from pipelines.config import QAParams
from pipelines.qa.models import QAPair, Split
from pipelines.text.names import normalise_text


def split_of(question: str, qa: QAParams) -> Split:
    digest = hashlib.sha256(f"{qa.random_seed}\x1f{normalise_text(question)}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    if fraction < qa.test_share:
        return "test"
    if fraction < qa.test_share + qa.val_share:
        return "val"
    return "train"


class DedupeReport(BaseModel):
    kept: int
    duplicates: int
    examples: list[str]


def dedupe(pairs: list[QAPair]) -> tuple[list[QAPair], DedupeReport]:
    """Keep the first pair of each (normalised question, normalised answer), in domain/id order."""
    seen: set[tuple[str, str]] = set()
    kept, dropped = [], []
    for pair in sorted(pairs, key=lambda p: (p.domain, p.id)):
        key = (normalise_text(pair.question), normalise_text(pair.answer))
        if key in seen:
            dropped.append(pair.id)
            continue
        seen.add(key)
        kept.append(pair)
    return kept, DedupeReport(kept=len(kept), duplicates=len(dropped), examples=dropped[:5])


def assign_splits(pairs: list[QAPair], qa: QAParams) -> list[QAPair]:
    return [pair.model_copy(update={"split": split_of(pair.question, qa)}) for pair in pairs]


def dataset_stats(pairs: list[QAPair]) -> dict[str, Any]:
    """Per-domain counts like the Omne-R1 paper's Table 1 (1/2-hop vs 3+), per split, and hop histograms."""
    domains: dict[str, dict[str, Any]] = {}
    for domain in sorted({p.domain for p in pairs}):
        mine = [p for p in pairs if p.domain == domain]
        domains[domain] = {
            "1-2": sum(p.bucket == "1-2" for p in mine),
            "3+": sum(p.bucket == "3+" for p in mine),
            "total": len(mine),
            "splits": {f"{split}/{bucket}": n for (split, bucket), n in
                       sorted(Counter((p.split, p.bucket) for p in mine).items())},
            "hops": {str(h): n for h, n in sorted(Counter(p.hops for p in mine).items())},
            "mean_question_words": round(sum(len(p.question.split()) for p in mine) / len(mine), 2),
        }
    return {
        "domains": domains,
        "total": len(pairs),
        "buckets": dict(sorted(Counter(p.bucket for p in pairs).items())),
        "splits": dict(sorted(Counter(p.split for p in pairs).items())),
        "test_by_bucket": dict(sorted(Counter(p.bucket for p in pairs if p.split == "test").items())),
    }
