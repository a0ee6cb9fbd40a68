"""Stages 1 and 3 (Omne-R1 paper): reinforcement learning with multi-turn tool rollouts on TRL's GRPOTrainer.

The policy's rollouts come from the same ``RolloutEngine`` as evaluation and SFT data collection
(plugged into TRL as its ``rollout_func``): each episode is re-encoded as prompt ids (system + user)
and completion ids (every later turn), with ``env_mask`` 0 on everything the environment wrote —
tool responses, chat-template wrappers, forced prefixes — so that only the model's own tokens carry
policy gradient. Rewards are the plain functions of ``pipelines.train.rewards``, scored on the
``Trajectory`` objects (so a tool response the model typed itself earns nothing).

Two credit assignments (``rl.<stage>.credit``): ``sequence`` (TRL's group-normalised advantage, one
per rollout) and ``turn`` (KG-R1: per-turn returns G_t = r_t + λ·R_global, normalised over all turns
of the group's rollouts, applied to that turn's tokens). ``algorithm: ppo`` replaces the group
baseline with a value model and GAE (``PPOToolTrainer``, below): TRL 1.16 has no PPO trainer left,
so PPO is GRPOTrainer's clipped policy loss with per-token GAE advantages from a critic.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from pipelines.agent.rollout import RolloutEngine, RolloutParams, Task
from pipelines.agent.trajectory import Trajectory
from pipelines.config import Params, RLStageParams
from pipelines.layout import SFT_MODEL, model_dir, rl_model_name
from pipelines.manifest import BuildResult

log = logging.getLogger(__name__)


# ----- encoding an episode for the trainer --------------------------------------------------------------------
class EncodedRollout(BaseModel):
    """One episode as the trainer sees it: ids, which completion tokens the model wrote, where each turn is."""

    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]  # 1: written by the model (policy loss), 0: written by the environment or the template
    turn_spans: list[tuple[int, int]]  # [start, end) in completion_ids of each assistant turn's model tokens
    truncated: bool = False


def _render(tokenizer: Any, messages: list[dict[str, str]], *, generation_prompt: bool) -> list[int]:
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _model_char_spans(content: str, injected: Sequence[str], prefix: str) -> list[tuple[int, int]]:
    """Character spans of an assistant message that the model generated: everything except the forced
    prefix and the environment's injected responses (search protocol: responses inside the reasoning)."""
    taken = [(0, len(prefix))] if prefix and content.startswith(prefix) else []
    cursor = 0
    for text in injected:
        at = content.find(text, cursor)
        if at >= 0:
            taken.append((at, at + len(text)))
            cursor = at + len(text)
    spans, start = [], 0
    for begin, end in sorted(taken):
        if begin > start:
            spans.append((start, begin))
        start = max(start, end)
    if start < len(content):
        spans.append((start, len(content)))
    return spans


def encode_trajectory(trajectory: Trajectory, tokenizer: Any, *, assistant_prefix: str = "",
                      inline_response: Any = None, max_length: int | None = None) -> EncodedRollout:
    """Tokenise an episode the way the model saw it, turn by turn, marking the model's own tokens.

    Each message boundary comes from rendering ``messages[:k]`` with the chat template, so the template's
    wrappers (``<|im_start|>assistant``, ``<|im_end|>``) are environment tokens; inside an assistant
    message the model's tokens are found through the tokenizer's character offsets.
    """
    messages = trajectory.messages
    prompt_ids = _render(tokenizer, messages[:2], generation_prompt=True)
    ids: list[int] = []
    mask: list[int] = []
    spans: list[tuple[int, int]] = []
    previous = prompt_ids
    injected = [inline_response(call.response) for call in trajectory.tool_calls] if inline_response else []
    for k in range(2, len(messages)):
        message = messages[k]
        following = k + 1 < len(messages) and messages[k + 1]["role"] == "assistant"
        rendered = _render(tokenizer, messages[:k + 1], generation_prompt=message["role"] != "assistant" or following)
        if rendered[:len(previous)] != previous:  # a template that re-renders earlier turns: fall back to the tail
            common = next((i for i, (a, b) in enumerate(zip(rendered, previous, strict=False)) if a != b),
                          min(len(rendered), len(previous)))
            del ids[max(0, common - len(prompt_ids)):], mask[max(0, common - len(prompt_ids)):]
        else:
            common = len(previous)
        segment = rendered[common:]
        segment_mask = [0] * len(segment)
        if message["role"] == "assistant":
            segment_mask = _assistant_mask(tokenizer, segment, message["content"], injected, assistant_prefix)
            model_positions = [i for i, m in enumerate(segment_mask) if m]
            if model_positions:
                offset = len(prompt_ids) + len(ids) - len(prompt_ids)
                spans.append((offset + model_positions[0], offset + model_positions[-1] + 1))
        ids += segment
        mask += segment_mask
        previous = rendered
    truncated = False
    if max_length is not None and len(prompt_ids) + len(ids) > max_length:
        keep = max(0, max_length - len(prompt_ids))
        ids, mask, truncated = ids[:keep], mask[:keep], True
        spans = [(a, min(b, keep)) for a, b in spans if a < keep]
    return EncodedRollout(prompt_ids=prompt_ids, completion_ids=ids, env_mask=mask, turn_spans=spans,
                          truncated=truncated)


def _assistant_mask(tokenizer: Any, segment: list[int], content: str, injected: Sequence[str],
                    prefix: str) -> list[int]:
    """1 on the segment's tokens that fall inside the model-written characters of ``content``."""
    text = tokenizer.decode(segment, skip_special_tokens=False)
    at = text.find(content)
    if at < 0:  # the template changed the content (e.g. stripped it): credit the whole segment but the wrappers
        return [0 if t in tokenizer.all_special_ids else 1 for t in segment]
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if encoded["input_ids"] != segment:
        return [0 if t in tokenizer.all_special_ids else 1 for t in segment]
    model_spans = [(at + a, at + b) for a, b in _model_char_spans(content, injected, prefix)]
    return [int(any(a < end and start < b for a, b in model_spans) and end > start)
            for start, end in encoded["offset_mapping"]]


# ----- data ---------------------------------------------------------------------------------------------------
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


# ----- the rollout function TRL calls --------------------------------------------------------------------------
@dataclass
class ToolRollouts:
    """TRL's ``rollout_func``: runs each prompt through the policy and the KG tools with the rollout engine."""

    protocol: Any
    tools: Any
    tokenizer: Any
    stage: RLStageParams
    tasks: dict[str, Task]  # by user-prompt text (TRL hands over prompts only)
    max_length: int
    last: list[Trajectory] = field(default_factory=list)
    calls: int = 0
    prefix_cache_mb: int = 512  # the rollout client's prefix store (agent.prefix_cache_mb)

    def task_for(self, prompt: list[dict[str, str]]) -> Task:
        return self.tasks[prompt[-1]["content"]]

    def roll_out(self, model: Any, tasks: list[Task], *, temperature: float, seed: int | None = None
                 ) -> list[Trajectory]:
        """Episodes of ``tasks`` generated by ``model`` (as it is now) with the real tools, in one batch. A new
        client per call: its prefix store (the system prompt, each episode's earlier rounds) lives only while
        the weights are fixed."""
        from pipelines.llm.local import TransformersChatClient

        client = TransformersChatClient.from_model(model, self.tokenizer, name="policy", batch_size=len(tasks),
                                                   prefix_cache_mb=self.prefix_cache_mb)
        engine = RolloutEngine(client, self.protocol, self.tools, RolloutParams(
            max_new_tokens=self.stage.max_new_tokens, temperature=temperature, batch_size=len(tasks), seed=seed),
            name=self.protocol.name)
        was_training = model.training
        model.eval()
        try:
            return engine.run(tasks, progress=False)
        finally:
            model.train(was_training)

    def __call__(self, prompts: list[list[dict[str, str]]], trainer: Any) -> dict[str, Any]:
        seen: dict[str, int] = {}
        tasks = []
        for prompt in prompts:  # TRL repeats each prompt num_generations times: each copy its own sample
            task = self.task_for(prompt)
            seen[task.qa_id] = seen.get(task.qa_id, -1) + 1
            tasks.append(task.model_copy(update={"sample": seen[task.qa_id]}))
        trajectories = self.roll_out(trainer.accelerator.unwrap_model(trainer.model), tasks,
                                     temperature=self.stage.temperature,
                                     seed=self.stage.seed * 100_003 + self.calls * 1009)
        self.calls += 1
        encoded = [encode_trajectory(t, self.tokenizer, assistant_prefix=self.protocol.assistant_prefix(),
                                     inline_response=self.protocol.response_message if self.protocol.inline_responses
                                     else None, max_length=self.max_length) for t in trajectories]
        self.last = trajectories
        _log_rollout_metrics(trainer, trajectories)
        return {"prompt_ids": [e.prompt_ids for e in encoded], "completion_ids": [e.completion_ids for e in encoded],
                "logprobs": None, "env_mask": [e.env_mask for e in encoded], "trajectory": trajectories,
                "turn_spans": [e.turn_spans for e in encoded]}


def _log_rollout_metrics(trainer: Any, trajectories: list[Trajectory]) -> None:
    """Tool calls, rounds and generated tokens per episode, into the trainer's logged metrics."""
    metrics = getattr(trainer, "_metrics", None)
    if metrics is None or not trajectories:
        return
    n = len(trajectories)
    bucket = metrics["train"]
    bucket["rollout/tool_calls"].append(sum(len(t.tool_calls) for t in trajectories) / n)
    bucket["rollout/rounds"].append(sum(t.rounds for t in trajectories) / n)
    bucket["rollout/generated_tokens"].append(sum(t.generated_tokens for t in trajectories) / n)
    bucket["rollout/answered"].append(sum(t.answer is not None for t in trajectories) / n)


def trajectory_rewards(names: list[str], weights: list[float] | None, options: dict[str, Any],
                       overlong_tokens: int | None = None, judge: Any = None) -> list[Any]:
    """The named rewards (pipelines.train.rewards) scored on the rollout's Trajectory objects, which
    ``ToolRollouts`` hands to TRL as the extra column ``trajectory``; an episode that generated more than
    ``overlong_tokens`` earns 0 (EoG's overlong penalty)."""
    from pipelines.train.rewards import build_reward_functions

    def on_trajectories(function: Any) -> Any:
        def reward(completions: list[Any], trajectory: list[Trajectory] | None = None, **kwargs: Any) -> list[float]:
            scored = function(trajectory if trajectory is not None else completions, **kwargs)
            if overlong_tokens is None or trajectory is None:
                return scored
            return [0.0 if t.generated_tokens > overlong_tokens else r for r, t in zip(scored, trajectory, strict=True)]

        reward.__name__ = function.__name__
        return reward

    return [on_trajectories(f) for f in build_reward_functions(names, weights, judge=judge, **options)]


# ----- credit assignment ---------------------------------------------------------------------------------------
def turn_level_advantages(turn_returns: list[list[float]], spans: list[list[tuple[int, int]]], group_size: int,
                          length: int) -> Any:
    """KG-R1's turn-level credit: each turn's return G_t, normalised over every turn of every rollout of the
    same question (consecutive groups of ``group_size`` rows), spread over that turn's tokens; (B, T)."""
    import torch

    advantages = torch.zeros(len(turn_returns), length)
    for start in range(0, len(turn_returns), group_size):
        pooled = [g for row in turn_returns[start:start + group_size] for g in row]
        if not pooled:
            continue
        mean = sum(pooled) / len(pooled)
        std = (sum((g - mean) ** 2 for g in pooled) / len(pooled)) ** 0.5
        for row in range(start, min(start + group_size, len(turn_returns))):
            for g, (a, b) in zip(turn_returns[row], spans[row], strict=False):
                advantages[row, a:min(b, length)] = (g - mean) / (std + 1e-4)
    return advantages


def gae_advantages(rewards: Any, values: Any, mask: Any, *, gamma: float, lam: float) -> tuple[Any, Any]:
    """Generalised advantage estimation over the model's own tokens only (mask 1); the episode's reward
    arrives at its last model token. Returns (advantages, returns), both (B, T), 0 outside the mask."""
    import torch

    advantages = torch.zeros_like(values)
    for row in range(values.shape[0]):
        positions = mask[row].nonzero(as_tuple=True)[0]
        if positions.numel() == 0:
            continue
        v = values[row, positions]
        r = torch.zeros_like(v)
        r[-1] = rewards[row]
        following = torch.cat([v[1:], v.new_zeros(1)])
        deltas = r + gamma * following - v
        running = v.new_zeros(())
        out = torch.zeros_like(v)
        for t in range(v.numel() - 1, -1, -1):
            running = deltas[t] + gamma * lam * running
            out[t] = running
        advantages[row, positions] = out
    returns = (advantages + values) * mask
    return advantages, returns


def _whiten(values: Any, mask: Any) -> Any:
    count = mask.sum().clamp(min=1)
    mean = (values * mask).sum() / count
    var = (((values - mean) * mask) ** 2).sum() / count
    return (values - mean) * (var + 1e-8).rsqrt() * mask


PROMPT_KEYS = ("prompt_ids", "prompt_mask")
MEMORY_KEYS = ("micro_batch", "logprob_chunk_tokens")  # RL settings that bound memory, never the result


def trim_completion_padding(inputs: dict[str, Any]) -> dict[str, Any]:
    """A micro-batch without the completion columns that are padding in all of its rows (TRL pads every
    completion of the generation batch to the longest one). Those columns are masked out of attention and
    loss and come after every real token, which a causal model never lets earlier positions see: the
    log-probabilities, the loss and the gradient are the same; only the padding's activations (and time)
    go. Every 2-D tensor as wide as the completion (ids, masks, per-token advantages, old log-probabilities,
    PPO values and returns) is cut alike; the prompt is left as it is (positions unchanged)."""
    import torch

    mask = inputs.get("completion_mask")
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2 or mask.shape[1] == 0:
        return inputs
    width = mask.shape[1]
    used = mask.bool().any(dim=0).nonzero()
    keep = int(used[-1]) + 1 if used.numel() else 1
    if keep >= width:
        return inputs
    out = dict(inputs)
    for key, value in inputs.items():
        if key not in PROMPT_KEYS and isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[1] == width:
            out[key] = value[:, :keep]
    return out


def micro_batch_size(rollouts: int, wanted: int) -> int:
    """Rollouts per forward/backward pass: the largest divisor of a step's ``rollouts`` that is at most ``wanted``
    (TRL splits a generation batch into equal micro-batches)."""
    return max(d for d in range(1, min(rollouts, wanted) + 1) if rollouts % d == 0)


def _trainer_classes() -> tuple[type, type]:
    """GRPOTrainer subclasses, built lazily (importing TRL costs seconds)."""
    import torch
    from trl import GRPOTrainer

    class ToolGRPOTrainer(GRPOTrainer):
        """GRPO with tool rollouts; ``turn_credit`` switches to KG-R1's turn-level advantages; a sampler that
        skips resampled-out questions (KG-Hopper history / KG-Reasoner hard-case resampling)."""

        def __init__(self, *args: Any, rollouts: ToolRollouts, stage: RLStageParams, **kwargs: Any) -> None:
            self.rollouts, self.stage = rollouts, stage
            self.excluded: set[str] = set()
            self.hard_case_conversations: dict[str, list[dict[str, str]]] | None = None
            self.epochs_started = 0
            super().__init__(*args, rollout_func=rollouts, **kwargs)

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            output = super()._generate_and_score_completions(inputs)
            if self.stage.resample == "history":
                self._history_resample(inputs)
            if self.stage.credit == "turn":
                output["advantages"] = self._turn_advantages(inputs, output["completion_ids"].shape[1]).to(
                    output["completion_ids"].device)
            return output

        def _turn_advantages(self, inputs: list[dict[str, Any]], length: int) -> Any:
            from pipelines.train.rewards import RewardOptions, kg_r1_scores

            options = RewardOptions(**self.stage.reward_options)
            trajectories = [x["trajectory"] for x in inputs]
            scores = kg_r1_scores(trajectories, options=options)
            returns = [s.returns(options.kg_r1_lambda) for s in scores]
            return turn_level_advantages(returns, [x["turn_spans"] for x in inputs], self.num_generations, length)

        def _history_resample(self, inputs: list[dict[str, Any]]) -> None:
            """KG-Hopper: a question whose rollouts all earned the same reward teaches nothing; drop it."""
            rewards = self._last_rewards
            for start in range(0, len(inputs), self.num_generations):
                group = rewards[start:start + self.num_generations]
                if len(group) == self.num_generations and float(group.max() - group.min()) < 1e-6:
                    self.excluded.add(inputs[start]["qa_id"])

        def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
            per_function = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            weights = self.reward_weights.to(per_function.device)
            self._last_rewards = (per_function * weights.unsqueeze(0)).nansum(dim=1).detach().cpu()
            return per_function

        def _get_train_sampler(self, dataset: Any = None) -> Any:
            return _SkippingSampler(super()._get_train_sampler(dataset), self)

        def _prepare_inputs(self, generation_batch: Any) -> Any:
            inputs = super()._prepare_inputs(generation_batch)
            return trim_completion_padding(inputs) if self.model.training else inputs

        def start_epoch(self, epoch: int) -> None:
            """KG-Reasoner's hard-case resampling: from the second epoch on, train only on the multi-hop questions
            the policy still finds hard (its loss on the question's gold-path SFT conversation above a threshold)."""
            if self.stage.resample != "hard_case" or epoch < 1 or self.hard_case_conversations is None:
                return
            losses = conversation_losses(self.accelerator.unwrap_model(self.model), self.processing_class,
                                         self.hard_case_conversations)
            hard = {qa for qa, loss in losses.items() if loss > self.stage.hard_case_loss}
            self.excluded = {row["qa_id"] for row in self.train_dataset
                             if row["bucket"] != "3+" or (row["qa_id"] in losses and row["qa_id"] not in hard)}
            log.info("hard-case resampling, epoch %d: %d hard multi-hop questions kept", epoch + 1, len(hard))

    class PPOToolTrainer(ToolGRPOTrainer):
        """PPO (the Omne-R1 paper's algorithm): GAE advantages from a value model in place of the group baseline.

        The critic is the base model's trunk with a scalar head (``AutoModelForTokenClassification``),
        trained with its own optimizer on the clipped value loss each time the policy loss is computed.
        """

        def __init__(self, *args: Any, value_model: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.value_model = value_model.to(self.accelerator.device)
            self.value_optimizer = torch.optim.AdamW(
                [p for p in self.value_model.parameters() if p.requires_grad], lr=self.stage.value_learning_rate)
            self._value_loss_window = 0.0

        def _values(self, inputs: dict[str, Any]) -> Any:
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
            attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
            scores = self.value_model(input_ids=ids, attention_mask=attention).logits[..., 0]
            prompt_length = inputs["prompt_ids"].shape[1]
            return scores[:, prompt_length - 1:-1]  # V(s_t): the state before completion token t

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            output = super()._generate_and_score_completions(inputs)
            mask = output["completion_mask"].float()
            if "tool_mask" in output:
                mask = mask * output["tool_mask"].float()
            with torch.no_grad():  # a micro-batch of rows at a time (the same width: the same values)
                size = self.args.per_device_train_batch_size
                keys = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
                values = torch.cat([self._values({k: output[k][i:i + size] for k in keys})
                                    for i in range(0, output["prompt_ids"].shape[0], size)]).float() * mask
            rewards = self._last_rewards.to(values.device)
            advantages, returns = gae_advantages(rewards, values, mask, gamma=self.stage.gamma,
                                                 lam=self.stage.gae_lambda)
            output["advantages"] = _whiten(advantages, mask)
            output["returns"], output["old_values"] = returns, values
            output["value_mask_total"] = mask.sum()  # the value loss's denominator over every micro-batch
            return output

        def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            loss = super().compute_loss(model, inputs, *args, **kwargs)
            if self.value_model.training is False:
                self.value_model.train()
            mask = inputs["completion_mask"].float()
            if "tool_mask" in inputs:
                mask = mask * inputs["tool_mask"].float()
            values = self._values(inputs).float()
            clipped = inputs["old_values"] + (values - inputs["old_values"]).clamp(-self.stage.epsilon,
                                                                                    self.stage.epsilon)
            value_loss = 0.5 * torch.max((values - inputs["returns"]) ** 2, (clipped - inputs["returns"]) ** 2)
            # the masked mean over the whole step's rollouts, accumulated over its micro-batches: one critic step
            # per policy step, on the gradient of that mean (as with the step in one micro-batch)
            total = inputs.get("value_mask_total")
            count = mask.sum() if total is None else total.to(mask.device).float()
            value_loss = (value_loss * mask).sum() / count.clamp(min=1)
            value_loss.backward()
            self._value_loss_window += float(value_loss.detach())
            if self.accelerator.sync_gradients:
                torch.nn.utils.clip_grad_norm_(self.value_model.parameters(), self.args.max_grad_norm)
                self.value_optimizer.step()
                self.value_optimizer.zero_grad()
                self._metrics["train"]["value_loss"].append(self._value_loss_window)
                self._value_loss_window = 0.0
            return loss

    return ToolGRPOTrainer, PPOToolTrainer


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
                before = _render(tokenizer, messages[:k], generation_prompt=False) if k else []
                after = _render(tokenizer, messages[:k + 1], generation_prompt=False)
                part = after[len(before):]
                ids += part
                labels += part if message["role"] == "assistant" else [-100] * len(part)
            tensor = torch.tensor([ids], device=model.device)
            out = model(input_ids=tensor, labels=torch.tensor([labels], device=model.device))
            losses[qa_id] = float(out.loss)
    model.train(was_training)
    return losses


class _SkippingSampler:
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


# ----- building a stage ---------------------------------------------------------------------------------------
def _start_model(params: Params, stage: int, start: str | None) -> Path:
    from pipelines.agent.models import BASE, resolve_model_folder

    if start:
        return resolve_model_folder(start, params)
    if stage == 1:
        return resolve_model_folder(BASE, params)
    folder = model_dir(params.artifacts_dir, SFT_MODEL)
    if not folder.is_dir():
        from pipelines.errors import ArtifactMissingError

        raise ArtifactMissingError(f"{folder}: stage 3 starts from the SFT model (run `omne sft train` first)")
    return folder


def load_policy(folder: Path, params: Params) -> tuple[Any, Any]:
    """The policy to start from: a full model folder, or an SFT/RL adapter merged onto its base."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipelines.agent.models import adapter_base

    if (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file():
        from pipelines.train.sft import load_sft_model

        model, tokenizer = load_sft_model(folder, base_model_folder=adapter_base(folder, params), merge=True)
    else:
        model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def train_rl(params: Params, stage: int, *, start: str | None = None, name: str | None = None, force: bool = False,
             progress: bool = True) -> BuildResult:
    """Run one RL stage and save the policy (merged, HF format) with its log history, curves and manifest;
    reused when the start model, the data and the stage's params are unchanged."""
    import torch
    from trl import GRPOConfig

    from pipelines.agent.client import InProcessToolClient
    from pipelines.agent.tools import KGToolbox
    from pipelines.atomic import atomic_directory
    from pipelines.eval.runner import load_gold_paths, make_protocol
    from pipelines.layout import qa_dir
    from pipelines.manifest import (
        fingerprint,
        model_identity,
        new_manifest,
        read_manifest,
        relative_path,
        sha256_files,
        write_manifest,
    )
    from pipelines.train.memory import fused_logprob_tokens, release_memory
    from pipelines.train.sft import use_bf16

    settings: RLStageParams = getattr(params.rl, f"stage{stage}")
    output = model_dir(params.artifacts_dir, name or rl_model_name(stage))
    start_folder = _start_model(params, stage, start)
    dataset_dir = qa_dir(params.artifacts_dir, "dataset")
    inputs = {**sha256_files([dataset_dir / "train.jsonl", dataset_dir / "val.jsonl"], params.root),
              "start_model": model_identity(start_folder)}
    # memory knobs leave the model as it is: out of the fingerprint (recorded in the manifest's metadata)
    memory = {"micro_batch": settings.micro_batch, "logprob_chunk_tokens": settings.logprob_chunk_tokens,
              "prefix_cache_mb": params.agent.prefix_cache_mb}
    shaping = {"stage": stage, "rl": settings.model_dump(mode="json", exclude=set(MEMORY_KEYS)),
               "agent": params.agent.model_dump(mode="json", exclude={"prefix_cache_mb"}),
               "tools": params.section("tools")}
    existing = read_manifest(output)
    if not force and existing is not None and existing.input_fingerprint == fingerprint(inputs, shaping):
        return BuildResult(folder=output, manifest=existing, skipped=True)

    agent = params.agent.model_copy(update={"max_rounds": settings.max_rounds or params.agent.max_rounds})
    protocol = make_protocol(params.model_copy(update={"agent": agent}), agent.protocol, None)
    pairs = rl_questions(params, settings)
    if not pairs:
        raise ValueError(f"rl.stage{stage}: no training questions (data_mix {settings.data_mix!r} on the train split)")
    dataset = rl_dataset(pairs, protocol, load_gold_paths(params))
    tasks = {row["prompt"][-1]["content"]: Task(qa_id=p.id, domain=p.domain, question=p.question,
                                                gold_answers=p.answers, bucket=p.bucket, hops=p.hops)
             for row, p in zip(dataset, pairs, strict=True)}
    model, tokenizer = load_policy(start_folder, params)
    toolbox = KGToolbox(params)
    rollouts = ToolRollouts(protocol=protocol, tools=InProcessToolClient(toolbox), tokenizer=tokenizer, stage=settings,
                            tasks=tasks, max_length=settings.max_length, prefix_cache_mb=params.agent.prefix_cache_mb)
    use_cuda = torch.cuda.is_available() and params.agent.device != "cpu"
    rollouts_per_step = settings.questions_per_step * settings.num_generations
    micro = micro_batch_size(rollouts_per_step, settings.micro_batch)
    config = GRPOConfig(
        output_dir=str(output.with_name(output.name + ".trainer")), max_steps=settings.max_steps,
        num_train_epochs=settings.epochs, learning_rate=settings.learning_rate, beta=settings.beta,
        epsilon=settings.epsilon, max_grad_norm=settings.max_grad_norm, num_generations=settings.num_generations,
        # a step's rollouts in micro-batches (TRL's gradient accumulation over one generation batch: the same loss)
        per_device_train_batch_size=micro, gradient_accumulation_steps=rollouts_per_step // micro,
        temperature=settings.temperature, logging_steps=1, save_strategy="no",
        report_to="none", seed=settings.seed, bf16=use_bf16(settings.bf16, cuda=use_cuda), use_cpu=not use_cuda,
        max_completion_length=settings.max_length, disable_tqdm=not progress,
        reward_weights=settings.reward_weights, lr_scheduler_type="constant", warmup_steps=0,
        remove_unused_columns=False, dataloader_num_workers=0, gradient_checkpointing=settings.gradient_checkpointing)
    peft_config = None
    if settings.method == "lora":
        from peft import LoraConfig

        peft_config = LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha, target_modules="all-linear",
                                 task_type="CAUSAL_LM")
    rewards = trajectory_rewards(settings.rewards, None, settings.reward_options, settings.overlong_tokens)
    grpo_class, ppo_class = _trainer_classes()
    common = dict(model=model, reward_funcs=rewards, args=config, train_dataset=dataset, processing_class=tokenizer,
                  peft_config=peft_config, rollouts=rollouts, stage=settings)
    if settings.algorithm == "ppo":
        trainer = ppo_class(**common, value_model=_value_model(start_folder, params, tokenizer))
    else:
        trainer = grpo_class(**common)
    if settings.resample == "hard_case":
        trainer.hard_case_conversations = _gold_conversations(params, {p.id for p in pairs if p.bucket == "3+"})
    validation = validation_questions(params, settings)
    if validation and settings.val_questions:
        trainer.add_callback(ValidationEM(trainer, rollouts, validation, settings.eval_every))
    with fused_logprob_tokens(settings.logprob_chunk_tokens):
        trainer.train()

    with atomic_directory(output) as tmp:
        policy = trainer.accelerator.unwrap_model(trainer.model)
        if hasattr(policy, "merge_and_unload"):
            policy = policy.merge_and_unload()
        policy.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        history = trainer.state.log_history
        (tmp / "trainer_state.json").write_text(json.dumps({"log_history": history,
                                                            "global_step": trainer.state.global_step}, indent=2))
        plot_rl_curves(history, tmp / "training_curves.png", title=f"RL stage {stage} ({settings.algorithm})")
        summary = rl_summary(history)
        manifest = new_manifest(f"rl_stage{stage}_model", files={}, inputs=inputs, params=shaping,
                                rows={"questions": len(pairs), "steps": trainer.state.global_step},
                                metadata={"start_model": relative_path(start_folder, params.root), **summary,
                                          "memory": memory})
        write_manifest(tmp, manifest)
    del trainer, model, policy, rollouts, toolbox, common
    release_memory()  # the next stage of the same process starts without this one's model and trainer
    return BuildResult(folder=output, manifest=manifest)


def _gold_conversations(params: Params, qa_ids: set[str]) -> dict[str, list[dict[str, str]]]:
    """The stage-2 SFT conversations (gold paths walked with the tools) of these questions, as chat messages."""
    from pipelines.train.sft import sharegpt_to_messages
    from pipelines.train.sft_data import read_sft_conversations

    out: dict[str, list[dict[str, str]]] = {}
    for record in read_sft_conversations(params):
        qa_id = record.id.rsplit("-", 1)[0]
        if qa_id in qa_ids and qa_id not in out:
            out[qa_id] = sharegpt_to_messages(record)
    return out


def _value_model(folder: Path, params: Params, tokenizer: Any) -> Any:
    """The PPO critic: the start model's trunk with a fresh scalar head (one value per token)."""
    from transformers import AutoModelForTokenClassification

    base = folder
    if (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file():
        from pipelines.agent.models import adapter_base

        base = adapter_base(folder, params)
    critic = AutoModelForTokenClassification.from_pretrained(base, num_labels=1)
    if critic.get_input_embeddings().weight.shape[0] < len(tokenizer):
        critic.resize_token_embeddings(len(tokenizer))
    critic.config.pad_token_id = tokenizer.pad_token_id
    return critic


def rl_summary(history: list[dict[str, Any]]) -> dict[str, Any]:
    """First and last mean reward, validation EM, tool calls: what a reader of the manifest wants first."""
    rewards = [h["reward"] for h in history if "reward" in h]
    val = [h["val_em"] for h in history if "val_em" in h]
    calls = [h["rollout/tool_calls"] for h in history if "rollout/tool_calls" in h]
    half = max(1, len(rewards) // 2)
    return {"steps_logged": len(rewards), "reward_first": rewards[0] if rewards else None,
            "reward_last": rewards[-1] if rewards else None,
            "reward_first_half_mean": sum(rewards[:half]) / half if rewards else None,
            "reward_second_half_mean": (sum(rewards[half:]) / len(rewards[half:])) if rewards[half:] else None,
            "val_em": val, "tool_calls_last": calls[-1] if calls else None}


def plot_rl_curves(history: list[dict[str, Any]], path: Path, title: str) -> None:
    """Reward (and each reward part), validation EM, tool calls and response length against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    steps = [h for h in history if "reward" in h]
    x = [h.get("step", i + 1) for i, h in enumerate(steps)]
    axes[0].plot(x, [h["reward"] for h in steps], marker="o", label="reward")
    for key in sorted({k for h in steps for k in h if k.startswith("rewards/") and k.endswith("/mean")}):
        axes[0].plot(x, [h.get(key, float("nan")) for h in steps], linestyle="--", label=key.split("/")[1])
    axes[0].set(title="reward", xlabel="step")
    axes[0].legend(fontsize=7)
    val = [h for h in history if "val_em" in h]
    axes[1].plot([h["step"] for h in val], [h["val_em"] for h in val], marker="o", color="tab:green")
    axes[1].set(title="validation EM", xlabel="step", ylim=(-0.02, 1.02))
    axes[2].plot(x, [h.get("rollout/tool_calls", float("nan")) for h in steps], marker="o", color="tab:purple")
    axes[2].set(title="tool calls / episode", xlabel="step")
    axes[3].plot(x, [h.get("rollout/generated_tokens", float("nan")) for h in steps], marker="o", color="tab:red")
    axes[3].set(title="generated tokens / episode", xlabel="step")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _validation_callback_class() -> type:
    from transformers import TrainerCallback

    class _ValidationEM(TrainerCallback):
        """EM of greedy rollouts on a fixed validation subset every ``every`` steps (and at the start)."""

        def __init__(self, trainer: Any, rollouts: ToolRollouts, pairs: list[Any], every: int) -> None:
            self.trainer, self.rollouts, self.pairs, self.every = trainer, rollouts, pairs, every

        def measure(self, step: int) -> float:
            from pipelines.eval.metrics import exact_match

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

    return _ValidationEM


def ValidationEM(trainer: Any, rollouts: ToolRollouts, pairs: list[Any], every: int) -> Any:  # noqa: N802
    return _validation_callback_class()(trainer, rollouts, pairs, every)

