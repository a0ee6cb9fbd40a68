"""The questions of an RL stage: its training sample, its validation subset, and TRL's prompt dataset."""

from __future__ import annotations

import hashlib
import math
from typing import Any

from pipelines.config import Params, RLStageParams


def rl_questions(params: Params, stage: RLStageParams) -> list[Any]:
    """Training questions of the stage: the train split filtered by ``data_mix``, a stable sample."""
    from pipelines.eval.runner import load_split, stable_sample

    pairs = load_split(params, "train")
    if stage.data_mix != "mixed":
        pairs = [p for p in pairs if p.bucket == stage.data_mix]
    buckets = max(1, len({p.bucket for p in pairs}))
    per_bucket = None if stage.max_questions is None else math.ceil(stage.max_questions / buckets)
    return stable_sample(pairs, per_bucket, stage.seed)[: stage.max_questions]


def validation_questions(params: Params, stage: RLStageParams) -> list[Any]:
    """A fixed random subset of the val split (the Omne-R1 paper logs EM on 512 of them)."""
    from pipelines.eval.runner import load_split

    pairs = sorted(load_split(params, "val"), key=lambda p: hashlib.sha256(f"{stage.seed}:{p.id}".encode()).hexdigest())
    return pairs[: stage.val_questions]


def rl_dataset(pairs: list[Any], protocol: Any, gold_paths: dict[str, Any]) -> Any:
    """A conversational prompt dataset (system + user) with the columns the rewards read."""
    import datasets

    from pipelines.eval.metrics import gold_triples

    rows = []
    for pair in pairs:
        rows.append({
            "prompt": [{"role": "system", "content": protocol.system_prompt()},
                       {"role": "user", "content": protocol.user_prompt(pair.question, pair.domain)}],
            "qa_id": pair.id, "question": pair.question, "domain": pair.domain, "answers": pair.answers,
            "bucket": pair.bucket, "hops": pair.hops,
            "gold_triples": [list(triple) for triple in gold_triples(gold_paths.get(pair.id))],
        })
    return datasets.Dataset.from_list(rows)
