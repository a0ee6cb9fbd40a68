"""The QA dataset: every domain's pairs merged, de-duplicated and split, with per-domain statistics.

Splits come from a stable hash of the normalised question, so a pair keeps its split across runs
and clones, and two copies of one question in a bucket can never land in different splits. With
``qa.test_per_bucket`` the test split is each bucket's N pairs of lowest hash (the Omne-R1 paper's fixed
test sets), so a pair's split also depends on the other pairs of its bucket.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from pydantic import BaseModel

from pipelines.config import QAParams
from pipelines.errors import ConfigError
from pipelines.qa.models import Bucket, QAPair, Split
from pipelines.text.names import normalise_text


def split_hash(question: str, random_seed: int) -> float:
    """The question's place in [0, 1): a stable hash of the normalised text, so copies of it fall together."""
    digest = hashlib.sha256(f"{random_seed}\x1f{normalise_text(question)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_of(question: str, qa: QAParams, test_below: float | None = None) -> Split:
    """Test below ``test_below`` (default ``qa.test_share``), validation in the next ``qa.val_share``, else train."""
    fraction = split_hash(question, qa.random_seed)
    test = qa.test_share if test_below is None else test_below
    if fraction < test:
        return "test"
    if fraction < test + qa.val_share:
        return "val"
    return "train"


def bucket_test_bounds(pairs: list[QAPair], qa: QAParams) -> dict[Bucket, float]:
    """Per bucket, the hash below which a pair is a test pair: ``qa.test_share``, or with ``qa.test_per_bucket``
    the hash of the bucket's (N+1)-th lowest question, so that N pairs fall below it (fewer only where copies of one
    question, with different answers, tie at the bound: they stay together)."""
    if qa.test_per_bucket is None:
        return {"1-2": qa.test_share, "3+": qa.test_share}
    bounds: dict[Bucket, float] = {}
    for bucket, wanted in qa.test_per_bucket.items():
        hashes = sorted(split_hash(p.question, qa.random_seed) for p in pairs if p.bucket == bucket)
        if wanted >= len(hashes):
            raise ConfigError(f"qa.test_per_bucket: {wanted} test pairs of bucket {bucket} asked, but the dataset "
                              f"has {len(hashes)}, which would leave none to train on: lower it, or set it to null "
                              "to split by qa.test_share")
        bounds[bucket] = hashes[wanted]
    return bounds


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
    bounds = bucket_test_bounds(pairs, qa)
    return [pair.model_copy(update={"split": split_of(pair.question, qa, bounds[pair.bucket])}) for pair in pairs]


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
