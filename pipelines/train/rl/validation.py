"""Validation EM during RL: greedy rollouts of the current policy on a fixed subset of the val split.

Imports transformers' ``TrainerCallback`` (and with it torch) at import time: ``build`` imports this module
inside ``train_rl``.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from pipelines.agent.rollout import Task
from pipelines.eval.answers import exact_match
from pipelines.llm.trl_vllm import sync_policy_weights
from pipelines.train.rl.rollouts import ToolRollouts


class ValidationEM(TrainerCallback):
    """EM of greedy rollouts on a fixed validation subset every ``every`` steps (and at the start), appended to
    the trainer's log history as ``{"step": ..., "val_em": ...}``."""

    def __init__(self, trainer: Any, rollouts: ToolRollouts, pairs: list[Any], every: int) -> None:
        self.trainer, self.rollouts, self.pairs, self.every = trainer, rollouts, pairs, every

    def measure(self, step: int) -> float:

        if getattr(self.trainer, "use_vllm", False):  # rollouts from vLLM: with the weights of this step

            sync_policy_weights(self.trainer)
        tasks = [Task(qa_id=p.id, domain=p.domain, question=p.question, gold_answers=p.answers, bucket=p.bucket,
                      hops=p.hops) for p in self.pairs]
        trajectories = self.rollouts.roll_out(self.trainer.accelerator.unwrap_model(self.trainer.model), tasks,
                                              temperature=0.0)
        em = sum(exact_match(t.answer, t.gold_answers) for t in trajectories) / len(trajectories)
        self.trainer.state.log_history.append({"step": step, "val_em": em})
        return em

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.measure(0)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.every == 0 or state.global_step == state.max_steps:
            self.measure(state.global_step)
