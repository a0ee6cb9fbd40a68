"""Which questions a stage keeps training on (``rl.<stage>.resample``).

* ``history`` (KG-Hopper): a question whose rollouts all earned the same reward teaches nothing and is dropped
  (decided in the trainer, which sees the rewards);
* ``hard_case`` (KG-Reasoner): from the second epoch on, only the multi-hop questions whose gold-path SFT
  conversation the policy still finds hard (``conversation_losses``) are kept.

Both leave questions out through ``SkippingSampler``, which wraps TRL's sampler.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pipelines.config import Params
from pipelines.train.rl.episodes import chat_token_ids
from pipelines.train.sft import sharegpt_to_messages


class SkippingSampler:
    """Wraps TRL's repeat sampler and leaves out the indices of questions resampled away (every copy of an
    index goes, so the groups of num_generations copies stay whole)."""

    def __init__(self, inner: Any, trainer: Any) -> None:
        self.inner, self.trainer = inner, trainer

    def __iter__(self) -> Iterator[int]:
        self.trainer.start_epoch(self.trainer.epochs_started)
        self.trainer.epochs_started += 1
        ids = self.trainer.train_dataset["qa_id"]
        excluded = set(self.trainer.excluded)
        kept = [i for i in self.inner if ids[i] not in excluded]
        if not kept:  # everything resampled away: keep going on the full set rather than stopping
            kept = list(self.inner)
        return iter(kept)

    def __len__(self) -> int:
        return len(self.inner)


def conversation_losses(model: Any, tokenizer: Any, conversations: dict[str, list[dict[str, str]]]) -> dict[str, float]:
    """Mean NLL of each conversation's assistant turns under ``model`` (the SFT loss KG-Reasoner resamples by)."""
    import torch

    losses = {}
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for qa_id, messages in conversations.items():
            ids, labels = [], []
            for k, message in enumerate(messages):
                before = chat_token_ids(tokenizer, messages[:k], generation_prompt=False) if k else []
                after = chat_token_ids(tokenizer, messages[:k + 1], generation_prompt=False)
                part = after[len(before):]
                ids += part
                labels += part if message["role"] == "assistant" else [-100] * len(part)
            tensor = torch.tensor([ids], device=model.device)
            out = model(input_ids=tensor, labels=torch.tensor([labels], device=model.device))
            losses[qa_id] = float(out.loss)
    model.train(was_training)
    return losses


def conversation_qa_id(conversation_id: str, qa_ids: set[str]) -> str | None:
    """Which of ``qa_ids`` an SFT conversation was made from: its id is the pair's id and a suffix of one or more
    parts (``-t0``, ``-t0-m`` for a misspelled start, ``-agent1``); None when none of them."""
    prefixes = [conversation_id[:i] for i, char in enumerate(conversation_id) if char == "-"]
    return next((prefix for prefix in reversed(prefixes) if prefix in qa_ids), None)


def gold_conversations(params: Params, qa_ids: set[str]) -> dict[str, list[dict[str, str]]]:
    """The stage-2 SFT conversation of each of these questions, as chat messages: a template one (a gold path walked
    with the tools) when the question has one, else its first."""
    from pipelines.train.sft_data import read_sft_conversations

    chosen: dict[str, Any] = {}
    for record in read_sft_conversations(params):
        qa_id = conversation_qa_id(record.id, qa_ids)
        if qa_id is not None and (qa_id not in chosen or (record.source == "template"
                                                           and chosen[qa_id].source != "template")):
            chosen[qa_id] = record
    return {qa_id: sharegpt_to_messages(record) for qa_id, record in chosen.items()}
