"""The questions of an RL stage: its training sample, its validation subset, and TRL's prompt dataset."""

from __future__ import annotations

import hashlib
import math
from typing import Any

from pipelines.config import Params, RLStageParams
from pipelines.eval.triples import gold_triples


def rl_questions(params: Params, stage: int) -> list[Any]:
    """Training questions of RL stage ``stage``: the train split's questions of the domains rl.stage<N>.domains /
    exclude_domains select, filtered by ``data_mix``, a stable sample."""
    from pipelines.eval.runner import load_split, stable_sample

    settings = stage_params(params, stage)
    pairs = load_split(params, "train", f"rl.stage{stage}")
    if settings.data_mix != "mixed":
        pairs = [p for p in pairs if p.bucket == settings.data_mix]
    buckets = max(1, len({p.bucket for p in pairs}))
    per_bucket = None if settings.max_questions is None else math.ceil(settings.max_questions / buckets)
    return stable_sample(pairs, per_bucket, settings.seed)[: settings.max_questions]


def validation_questions(params: Params, stage: int) -> list[Any]:
    """A fixed random subset of the val split's questions of the stage's domains (the Omne-R1 paper logs EM on 512);
    none when those domains have no val question (a small dataset)."""
    from pipelines.eval.runner import domain_pairs, load_split

    settings = stage_params(params, stage)
    pairs = domain_pairs(load_split(params, "val"), params, f"rl.stage{stage}")
    pairs = sorted(pairs, key=lambda p: hashlib.sha256(f"{settings.seed}:{p.id}".encode()).hexdigest())
    return pairs[: settings.val_questions]


def stage_params(params: Params, stage: int) -> RLStageParams:
    """rl.stage<N>: the settings of RL stage 1 or 3."""
    return getattr(params.rl, f"stage{stage}")


def rl_dataset(pairs: list[Any], protocol: Any, gold_paths: dict[str, Any]) -> Any:
    """A conversational prompt dataset (system + user) with the columns the rewards read."""
    import datasets


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
