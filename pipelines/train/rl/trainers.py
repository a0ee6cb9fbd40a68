"""The TRL trainers of the RL stages: ``ToolGRPOTrainer`` (GRPO with tool rollouts) and ``PPOToolTrainer``.

TRL 1.16 has no PPO trainer left, so PPO is GRPOTrainer's clipped policy loss with per-token GAE advantages from
a critic. Both extend TRL's ``GRPOTrainer`` through some of its PRIVATE methods, which TRL may change in any
release; every such override lives in this module, says the TRL version it was written for
(``WRITTEN_FOR_TRL``, the version pinned in pyproject.toml) and is checked against TRL's own class by
tests/test_rl_overrides.py. Methods of these classes whose names start with ``_`` are TRL overrides and nothing
else (the trainers' own helpers have public names).

This module imports TRL (seconds): modules that must stay cheap import it inside functions.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from accelerate.utils import DistributedType, gather_object
from trl import GRPOTrainer

from pipelines.config import RLStageParams
from pipelines.errors import ConfigError
from pipelines.train.rewards import RewardOptions, TurnRewards, weighted_turn_rewards
from pipelines.train.rl.advantages import gae_advantages, turn_level_advantages, whiten
from pipelines.train.rl.keep import CorrectRollouts
from pipelines.train.rl.micro_batches import trim_completion_padding
from pipelines.train.rl.resampling import SkippingSampler, conversation_losses
from pipelines.train.rl.rollouts import ToolRollouts

log = logging.getLogger(__name__)

WRITTEN_FOR_TRL = "1.16.0"  # the TRL release the private overrides below were read against (trl==1.16.0)


@contextmanager
def start_model_reference(model: Any, args: Any, peft_config: Any) -> Iterator[None]:
    """While TRL builds the trainer: a full-fine-tuning policy (no PEFT config) with a KL term (beta > 0) names, as
    its config's path, a folder holding the policy as it starts. TRL loads the reference model from that path, which
    for a start model merged from an adapter (stage 3 from a LoRA SFT model) is the adapter's base: not the stage's
    start model, and without the tokens the SFT added (an index error in the reference's forward)."""
    if model is None or isinstance(model, str) or not getattr(args, "beta", 0.0) or peft_config is not None:
        yield
        return
    name = model.config._name_or_path
    with tempfile.TemporaryDirectory(prefix="omne-rl-reference-") as folder:
        model.save_pretrained(folder)
        model.config._name_or_path = folder
        try:
            yield
        finally:
            model.config._name_or_path = name


class ToolGRPOTrainer(GRPOTrainer):
    """GRPO with tool rollouts; ``credit: turn`` switches to KG-R1's turn-level advantages (from the configured
    rewards); a sampler that skips resampled-out questions (KG-Hopper history / KG-Reasoner hard-case
    resampling)."""

    def __init__(self, *args: Any, rollouts: ToolRollouts, stage: RLStageParams, **kwargs: Any) -> None:
        self.rollouts, self.stage = rollouts, stage
        self.excluded: set[str] = set()
        self.hard_case_conversations: dict[str, list[dict[str, str]]] | None = None
        self.epochs_started = 0
        self.last_rewards: torch.Tensor | None = None  # weighted reward of each rollout of the last generation batch
        self.last_reward_parts: torch.Tensor | None = None  # (B, reward functions), unweighted, NaN: abstained
        self.keeper: CorrectRollouts | None = None  # keeps the exactly-correct rollouts (the stage-2 SFT data)
        # rollout_func: public but experimental in TRL 1.16.0 (it warns unless TRL_EXPERIMENTAL_SILENCE=1)
        with start_model_reference(kwargs.get("model"), kwargs.get("args"), kwargs.get("peft_config")):
            super().__init__(*args, rollout_func=rollouts, **kwargs)

    # TRL 1.16.0 private override: GRPOTrainer._generate_and_score_completions(self, inputs) -> dict of tensors
    # (prompt/completion ids and masks, "advantages" of shape (B,), "tool_mask" from the rollout's env_mask).
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        if self.keeper is not None and self.model.training:
            # the rewards are every process's (gathered in process order): so are the episodes, kept by one process
            episodes = gather_object([x["trajectory"] for x in inputs])
            if self.accelerator.is_main_process:
                self.keeper.keep(episodes, self.last_rewards.tolist(), self.state.global_step + 1)
        if self.stage.resample == "history":
            self.resample_by_history(inputs)
        if self.stage.credit == "turn":
            output["advantages"] = self.turn_advantages(inputs, output["completion_ids"].shape[1]).to(
                output["completion_ids"].device)
        return output

    # TRL 1.16.0 private override: GRPOTrainer._calculate_rewards(self, inputs, prompts, completions,
    # completion_ids_list) -> (B, number of reward functions), gathered over processes, NaN where a function abstains.
    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        per_function = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        weights = self.reward_weights.to(per_function.device)
        self.last_reward_parts = per_function.detach().cpu()
        self.last_rewards = (per_function * weights.unsqueeze(0)).nansum(dim=1).detach().cpu()
        return per_function

    # TRL 1.16.0 private override: GRPOTrainer._get_train_sampler(self, dataset=None) -> RepeatSampler (each index
    # num_generations times in a row), which transformers' Trainer asks for when it builds the train dataloader.
    def _get_train_sampler(self, dataset: Any = None) -> Any:
        return SkippingSampler(super()._get_train_sampler(dataset), self)

    # TRL 1.16.0 private override: GRPOTrainer._prepare_inputs(self, generation_batch) -> the micro-batch of this
    # accumulation step (generating and buffering a whole generation batch every steps_per_generation steps).
    def _prepare_inputs(self, generation_batch: Any) -> Any:
        inputs = super()._prepare_inputs(generation_batch)
        return trim_completion_padding(inputs) if self.model.training else inputs

    def turn_advantages(self, inputs: list[dict[str, Any]], length: int) -> torch.Tensor:
        """Turn-level advantages (B, length) of the generation batch from the configured rewards and weights:
        ``G_t = r_t + λ·R`` (``weighted_turn_rewards``), r_t from the rewards with a per-turn form (their
        ``turn_scores``: KG-R1's), R their global rewards plus the whole reward of every other function (as
        scored for this batch in ``_calculate_rewards``), normalised over the turns of each question's rollouts."""
        lam = RewardOptions(**self.stage.reward_options).kg_r1_lambda
        spans = [x["turn_spans"] for x in inputs]
        parts: list[list[TurnRewards]] = [[] for _ in inputs]
        # TRL's reward kwargs: every column but the prompt (the rollout's extra columns included)
        columns = {key: [x[key] for x in inputs] for key in inputs[0]
                   if key not in ("prompt", "completion", "completion_ids")}
        scalars = self.local_rows(self.last_reward_parts, len(inputs))  # the rewards were gathered over every process
        for k, function in enumerate(self.reward_funcs):
            scorer = getattr(function, "turn_scores", None)
            if scorer is not None:
                scored = scorer(columns["trajectory"], trainer_state=self.state, **columns)
            else:
                scored = [TurnRewards(global_reward=float(torch.nan_to_num(r))) for r in scalars[:, k]]
            for row, score in zip(parts, scored, strict=True):
                row.append(score)
        weights = self.reward_weights.tolist()
        returns = [weighted_turn_rewards(row, weights, len(turns)).returns(lam) for row, turns in zip(parts, spans,
                                                                                                    strict=True)]
        return turn_level_advantages(returns, spans, self.num_generations, length)

    def resample_by_history(self, inputs: list[dict[str, Any]]) -> None:
        """KG-Hopper: a question whose rollouts all earned the same reward teaches nothing; drop it. Judged on every
        process's rollouts (the rewards are gathered), so that each process's sampler skips the same questions."""
        rewards, questions = self.last_rewards, gather_object([x["qa_id"] for x in inputs])
        for start in range(0, len(questions), self.num_generations):
            group = rewards[start:start + self.num_generations]
            if len(group) == self.num_generations and float(group.max() - group.min()) < 1e-6:
                self.excluded.add(questions[start])

    def local_rows(self, gathered: torch.Tensor, rows: int) -> torch.Tensor:
        """This process's ``rows`` of a tensor gathered over every process in process order (as TRL slices its
        advantages): all of it in a single process."""
        start = self.accelerator.process_index * rows
        return gathered[start:start + rows]

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

    The critic (``build.value_model``: the start model's trunk with a scalar head, a LoRA adapter on it when the
    policy is LoRA) is trained with its own optimizer on the clipped value loss each time the policy loss is
    computed, so it steps with every policy step: over each minibatch of each of ``ppo_epochs`` passes (TRL's
    ``steps_per_generation`` and ``num_iterations``, set by ``build.update_schedule``), its old values and the GAE
    targets fixed when the batch was generated.

    Under several processes (``accelerate launch``, data parallel) the critic and its optimizer go through the
    trainer's accelerator as the policy does: every process's critic starts from the main process's weights and
    steps on gradients averaged over the processes, and the advantages' whitening and the value loss's denominator
    span every process's rollouts, so N processes train as one process on the same global batch.
    """

    def __init__(self, *args: Any, value_model: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.accelerator.distributed_type in (DistributedType.DEEPSPEED, DistributedType.FSDP):
            raise ConfigError(f"algorithm: ppo trains its critic with an optimizer of its own, which this trainer "
                              f"prepares for data parallel (DDP) only, not {self.accelerator.distributed_type.value}")
        optimizer = torch.optim.AdamW([p for p in value_model.parameters() if p.requires_grad],
                                      lr=self.stage.value_learning_rate)
        # the device, and with several processes DDP (rank 0's weights broadcast, gradients averaged at backward)
        self.value_model, self.value_optimizer = self.accelerator.prepare(value_model, optimizer)
        # the critic computes in its own dtype, as before it was prepared: no mixed-precision hook on its forward
        self.accelerator.unwrap_model(self.value_model, keep_fp32_wrapper=False)
        self.value_loss_window = 0.0  # the critic's loss summed over the micro-batches of the current step

    def critic_values(self, inputs: dict[str, Any], model: Any = None) -> torch.Tensor:
        """V(s_t) for every completion position t of a batch: the critic's score of the state before token t
        (``model``: the critic to run, default the prepared one)."""
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        scores = (model or self.value_model)(input_ids=ids, attention_mask=attention).logits[..., 0]
        prompt_length = inputs["prompt_ids"].shape[1]
        return scores[:, prompt_length - 1:-1]  # V(s_t): the state before completion token t

    # TRL 1.16.0 private override (through ToolGRPOTrainer): GRPOTrainer._generate_and_score_completions; adds the
    # per-token GAE advantages (B, T) and the critic's targets, which split_tensor_dict cuts into micro-batches.
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        mask = output["completion_mask"].float()
        if "tool_mask" in output:
            mask = mask * output["tool_mask"].float()
        # no gradient: the critic itself, out of its DDP wrapper (a forward there would synchronise the processes)
        critic = self.accelerator.unwrap_model(self.value_model)
        with torch.no_grad():  # a micro-batch of rows at a time (the same width: the same values)
            size = self.args.per_device_train_batch_size
            keys = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
            values = torch.cat([self.critic_values({k: output[k][i:i + size] for k in keys}, critic)
                                for i in range(0, output["prompt_ids"].shape[0], size)]).float() * mask
        rewards = self.local_rows(self.last_rewards, values.shape[0]).to(values.device)  # gathered over processes
        advantages, returns = gae_advantages(rewards, values, mask, gamma=self.stage.gamma,
                                             lam=self.stage.gae_lambda)
        output["advantages"] = whiten(advantages, mask, all_sum=self.sum_over_processes)
        output["returns"], output["old_values"] = returns, values
        # the value loss's denominator: the model tokens of every micro-batch of every process
        output["value_mask_total"] = self.sum_over_processes(mask.sum())
        return output

    def sum_over_processes(self, value: torch.Tensor) -> torch.Tensor:
        """A statistic summed over the processes (itself in a single process)."""
        return self.accelerator.reduce(value, "sum")

    def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        """TRL's policy loss, plus one step of the critic on the clipped value loss (its own optimizer)."""
        loss = super().compute_loss(model, inputs, *args, **kwargs)
        if self.value_model.training is False:
            self.value_model.train()
        mask = inputs["completion_mask"].float()
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"].float()
        # as the policy: the processes average their critic's gradients at the step's last micro-batch only
        syncing = self.accelerator.sync_gradients
        with nullcontext() if syncing else self.accelerator.no_sync(self.value_model):
            values = self.critic_values(inputs).float()
            clipped = inputs["old_values"] + (values - inputs["old_values"]).clamp(-self.stage.epsilon,
                                                                                    self.stage.epsilon)
            value_loss = 0.5 * torch.max((values - inputs["returns"]) ** 2, (clipped - inputs["returns"]) ** 2)
            # the masked mean over the optimizer step's rollouts, accumulated over its micro-batches: one critic step
            # per policy step, on the gradient of that mean. The total spans the generation batch of every process;
            # a step takes one of its minibatches, and DDP averages over processes, so it is scaled as TRL scales
            # num_items_in_batch (loss_type dapo)
            total = inputs.get("value_mask_total")
            share = self.current_gradient_accumulation_steps / self.args.steps_per_generation
            count = (mask.sum() if total is None
                     else total.to(mask.device).float() * share / self.accelerator.num_processes)
            value_loss = (value_loss * mask).sum() / count.clamp(min=1)
            value_loss.backward()
        self.value_loss_window += float(value_loss.detach())
        if syncing:
            torch.nn.utils.clip_grad_norm_(self.value_model.parameters(), self.args.max_grad_norm)
            self.value_optimizer.step()
            self.value_optimizer.zero_grad()
            window = torch.tensor(self.value_loss_window, dtype=torch.float64, device=self.accelerator.device)
            # TRL 1.16.0's logged-metric store; the mean over processes is the loss one process would have
            self._metrics["train"]["value_loss"].append(self.accelerator.gather(window).mean().item())
            self.value_loss_window = 0.0
        return loss
