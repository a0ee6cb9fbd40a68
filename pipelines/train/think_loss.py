"""The weighted think-loss of stage-2 SFT (Omne-R1 paper, section 3.4, Algorithm 1).

Every assistant token is a training target; the tokens of a reasoning span — from the ``<think>``
token through the ``</think>`` token, both included, found in the labels — count ``think_weight``
(the paper's best: 0.001), every other assistant token counts 1, and prompts (system / user), tool
responses (user turns holding ``<tool_response>``) and padding count 0 (they are -100 in the labels).
A ``<think>`` that is never closed (e.g. cut by truncation) leaves the rest of its turn at weight 1.
Labels and weights are shifted together, and the loss is

    loss = sum(w * nll) / sum(w),   and 0 when sum(w) <= 1e-8.

It is built as a small extension of TRL's ``SFTTrainer``, not a training loop of its own:

* ``ThinkWeightCollator`` wraps the collator TRL builds (``DataCollatorForLanguageModeling``) and
  adds a ``loss_weights`` tensor to every batch, computed from the batch's labels (which TRL has
  already masked to the assistant tokens of the ``{% generation %}`` blocks);
* ``ThinkWeightedSFTTrainer.compute_loss`` runs TRL's fused LM head (per-token log-probabilities
  without materialising the logits, exactly as ``SFTTrainer`` does) and reduces them with the
  weights instead of a plain mean. With gradient accumulation, ``sum(w)`` is taken over the whole
  accumulated batch (``get_batch_samples``), so the loss of an optimizer step is exactly
  ``sum(w * nll) / sum(w)`` over all its micro-batches (and its devices), as TRL/transformers do for
  the token count of the unweighted loss.

``weighted_causal_lm_loss`` is the same loss computed from full logits, for tests and for callers
that have logits at hand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from trl import SFTTrainer

from pipelines.agent.protocols import THINK_CLOSE, THINK_OPEN

ZERO_WEIGHT = 1e-8  # a (micro-)batch whose total weight is at most this has loss 0


# ----------------------------------------------------------------------------------------- weights


def think_spans(input_ids: torch.Tensor, assistant_mask: torch.Tensor, think_open_id: int,
                think_close_id: int) -> torch.Tensor:
    """Boolean mask of the think spans of the assistant tokens (the shape of ``input_ids``).

    A span runs from a ``<think>`` token through the next ``</think>`` token of the same assistant run
    (``assistant_mask`` is 1 on the trained tokens: ``labels != -100``), both tags included. A
    ``<think>`` with no ``</think>`` after it in its run opens no span (Algorithm 1: an unclosed think
    keeps weight 1); a second ``<think>`` before a close starts the span anew (the earlier opener is
    left out); a ``</think>`` with no opener is left out. Spans never cross a non-assistant token, so
    a tool response never joins two turns' thinking. Works on a batch (B, T) or a single row (T);
    padding-free rows (several sequences end to end) work too, since TRL masks the first token of
    each sequence. Only the tag positions are visited in Python (a few per turn).
    """
    single = input_ids.dim() == 1
    ids = input_ids.unsqueeze(0) if single else input_ids
    mask = (assistant_mask.unsqueeze(0) if single else assistant_mask).to(device=ids.device).bool()
    if ids.shape != mask.shape:
        raise ValueError(f"input_ids {tuple(ids.shape)} and assistant_mask {tuple(mask.shape)} differ in shape")
    spans = torch.zeros_like(mask)
    if ids.numel():
        # run id of each token: increments where an assistant run starts
        previous = F.pad(mask[:, :-1], (1, 0), value=False)
        run = (mask & ~previous).cumsum(dim=-1).tolist()
        is_open = (mask & (ids == think_open_id)).tolist()
        tags = (mask & ((ids == think_open_id) | (ids == think_close_id))).nonzero().tolist()  # row-major
        opened: tuple[int, int, int] | None = None  # (row, col, run) of the pending <think>
        for row, col in tags:
            if is_open[row][col]:
                opened = (row, col, run[row][col])
            elif opened is not None and opened[0] == row and opened[2] == run[row][col]:
                spans[row, opened[1]: col + 1] = True
                opened = None
    return spans[0] if single else spans


def think_weights(input_ids: torch.Tensor, assistant_mask: torch.Tensor, think_open_id: int, think_close_id: int,
                  think_weight: float) -> torch.Tensor:
    """Per-token loss weights (float32, the shape of ``input_ids``), Algorithm 1 of Omne-R1 paper:
    0 outside ``assistant_mask`` (prompts, tool responses, padding), ``think_weight`` on the think
    spans (``think_spans``: ``<think>`` through ``</think>``, tags included; an unclosed think keeps
    1), 1 on the rest of the assistant output."""
    mask = assistant_mask.to(device=input_ids.device).bool()
    weights = mask.to(torch.float32)
    return weights.masked_fill(think_spans(input_ids, mask, think_open_id, think_close_id), float(think_weight))


def weighted_nll(nll: torch.Tensor, weights: torch.Tensor, total: torch.Tensor | float | None = None) -> torch.Tensor:
    """``sum(w * nll) / total`` (total defaults to ``sum(w)``); 0 when the total is <= 1e-8.

    The zero case keeps the graph (``0 * sum``) so that backward works on a batch with nothing to learn.
    """
    numerator = (weights.float() * nll.float()).sum()
    denominator = weights.float().sum() if total is None else torch.as_tensor(total, device=nll.device).float()
    # no host sync: torch.where instead of a Python comparison
    return torch.where(denominator > ZERO_WEIGHT, numerator / denominator.clamp(min=ZERO_WEIGHT), numerator * 0.0)


def shifted_weights(weights: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The weights of the next-token targets: ``weights[..., 1:]``, 0 where the shifted label is -100."""
    return weights[..., 1:] * (labels[..., 1:] != -100).to(weights.dtype)


def weighted_causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The weighted think-loss from full logits (B, T, V): shift logits, labels and weights together,
    per-token NLL in float32, then ``sum(w * nll) / sum(w)`` (0 when ``sum(w) <= 1e-8``)."""
    shift_logits = logits[..., :-1, :].float()
    shift_labels = labels[..., 1:]
    nll = F.cross_entropy(shift_logits.reshape(-1, shift_logits.size(-1)), shift_labels.reshape(-1),
                          ignore_index=-100, reduction="none").view(shift_labels.shape)
    return weighted_nll(nll, shifted_weights(weights.to(nll.device), labels))


# ----------------------------------------------------------------------------------------- collator


def single_token_id(tokenizer: Any, token: str) -> int:
    """The id of ``token`` when the tokenizer encodes it as one token (anywhere in a text), else ValueError."""
    ids = tokenizer.encode(f"a {token}b", add_special_tokens=False)
    alone = tokenizer.encode(token, add_special_tokens=False)
    token_id = tokenizer.convert_tokens_to_ids(token)
    if len(alone) != 1 or alone[0] != token_id or token_id not in ids:
        raise ValueError(f"{token!r} is not a single token of this tokenizer (it encodes as {alone}); "
                         "add it first (pipelines.train.sft.add_think_tokens)")
    return int(token_id)


@dataclass
class ThinkWeightCollator:
    """Wraps a collator (TRL's ``DataCollatorForLanguageModeling``) and adds ``loss_weights``.

    The weights come from the collated ``labels`` (assistant tokens, -100 elsewhere and on padding)
    and ``input_ids`` as ``think_weights`` computes them; they are not shifted here (the loss shifts
    them with the labels). ``think_mask`` (the think spans) rides along for the metrics. Everything
    the wrapped collator returns is passed on unchanged.
    """

    collator: Callable[[list[dict[str, Any]]], dict[str, Any]]
    think_open_id: int
    think_close_id: int
    think_weight: float

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.collator(examples)
        mask = batch["labels"] != -100
        spans = think_spans(batch["input_ids"], mask, self.think_open_id, self.think_close_id)
        batch["loss_weights"] = mask.to(torch.float32).masked_fill(spans, self.think_weight)
        batch["think_mask"] = spans
        return batch


# ----------------------------------------------------------------------------------------- trainer


class ThinkWeightedSFTTrainer(SFTTrainer):
    """TRL's ``SFTTrainer`` with the weighted think-loss (Omne-R1 paper, Algorithm 1).

    Same arguments as ``SFTTrainer`` plus ``think_weight`` and the two tag strings, which must be
    single tokens of the processing class. Use it with ``assistant_only_loss=True`` (so that prompts
    and tool responses are -100 in the labels) and a chat template with ``{% generation %}`` blocks.
    The collator TRL builds (or the one passed) is wrapped in a ``ThinkWeightCollator``. Everything
    else is TRL's: dataset preparation, truncation, the fused LM head, PEFT wrapping, metrics
    (entropy, mean_token_accuracy, num_tokens), to which this adds ``assistant_loss`` (the plain
    assistant-only mean NLL of the same batch, computed from the same log-probabilities at no extra
    cost) and ``think_token_share`` (the share of trained tokens inside think spans); ``trained_assistant_tokens``
    counts the loss-bearing (assistant) tokens of every training micro-batch, the work the SFT time buys.

    Not supported (refused at construction): ``compute_loss_func``, label smoothing, ``loss_type``
    other than ``"nll"`` and DeepSpeed sequence parallelism — each of them replaces the loss.
    """

    # compute_loss normalises by the total weight of the whole accumulated batch, so Trainer must not
    # divide by the number of accumulation steps again
    loss_is_scaled_for_ga = True

    def __init__(self, *args: Any, think_weight: float = 1.0, think_open: str = THINK_OPEN,
                 think_close: str = THINK_CLOSE, **kwargs: Any) -> None:
        if kwargs.get("compute_loss_func") is not None:
            raise ValueError("ThinkWeightedSFTTrainer computes its own loss: compute_loss_func is not supported")
        if not 0.0 <= think_weight:
            raise ValueError(f"think_weight must be >= 0, got {think_weight}")
        super().__init__(*args, **kwargs)
        if self.args.loss_type != "nll" or self.args.label_smoothing_factor > 0:
            raise ValueError("ThinkWeightedSFTTrainer needs loss_type='nll' and no label smoothing")
        parallelism = getattr(self.accelerator, "parallelism_config", None)
        if parallelism is not None and getattr(parallelism, "sp_enabled", False):
            raise ValueError("ThinkWeightedSFTTrainer does not support sequence parallelism")
        self.think_weight = float(think_weight)
        self.trained_assistant_tokens = 0  # loss-bearing target tokens of the training batches so far
        self.think_open_id = single_token_id(self._tokenizer, think_open)
        self.think_close_id = single_token_id(self._tokenizer, think_close)
        if not isinstance(self.data_collator, ThinkWeightCollator):
            self.data_collator = ThinkWeightCollator(self.data_collator, self.think_open_id, self.think_close_id,
                                                     self.think_weight)
        _give_output_embeddings_a_bias(self.model)

    # The total weight of an optimizer step, over its micro-batches (and devices), rides along in
    # every micro-batch so that compute_loss can normalise by it.
    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> tuple[list, Any]:
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        if batch_samples and all("loss_weights" in b for b in batch_samples):
            total = sum(shifted_weights(b["loss_weights"], b["labels"]).sum() for b in batch_samples)
            total = torch.as_tensor(total, dtype=torch.float32).to(device)
            if self.args.average_tokens_across_devices and self.args.world_size > 1:
                total = self.accelerator.gather(total.reshape(1)).sum()
            for batch in batch_samples:
                batch["loss_weight_total"] = total
        return batch_samples, num_items_in_batch

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        mode = "train" if self.model.training else "eval"
        weights = inputs.pop("loss_weights", None)
        spans = inputs.pop("think_mask", None)
        total = inputs.pop("loss_weight_total", None)
        if weights is None:  # a batch that did not come through ThinkWeightCollator
            mask = inputs["labels"] != -100
            spans = think_spans(inputs["input_ids"], mask, self.think_open_id, self.think_close_id)
            weights = mask.to(torch.float32).masked_fill(spans, self.think_weight)
        inputs["use_cache"] = False
        if self.aux_loss_enabled:
            inputs["output_router_logits"] = True
        outputs = model(**inputs, fused_lm_head=True)
        nll = -outputs.log_probs  # (B, T-1), aligned with labels[:, 1:]; 0 where the label is -100
        label_mask = outputs.label_mask
        w = shifted_weights(weights.to(nll.device), inputs["labels"].to(nll.device)) * label_mask
        if total is not None:
            loss = weighted_nll(nll, w, total)
            if self.args.average_tokens_across_devices and self.args.world_size > 1:
                loss = loss * self.accelerator.num_processes  # DDP averages the gradients across ranks
        else:
            loss = weighted_nll(nll, w)
            if self.model.training:  # loss_is_scaled_for_ga: scale a per-micro-batch mean here
                loss = loss / max(1, getattr(self, "current_gradient_accumulation_steps", 1))
        if self.aux_loss_enabled:
            steps = self.current_gradient_accumulation_steps if total is not None else 1
            loss = loss + self.router_aux_loss_coef * outputs.aux_loss / steps

        with torch.no_grad():
            gather = self.accelerator.gather_for_metrics
            num_valid = gather(label_mask.sum()).sum()
            metrics = self._metrics[mode]
            valid = float(num_valid) > 0
            metrics["entropy"].append((gather(outputs.entropy.sum()).sum() / num_valid).item() if valid else 0.0)
            metrics["mean_token_accuracy"].append((gather(outputs.is_top1.sum()).sum() / num_valid).item()
                                                  if valid else 0.0)
            metrics["assistant_loss"].append((gather(nll.detach().sum()).sum() / num_valid).item() if valid else 0.0)
            if spans is not None:
                in_think = gather((spans[..., 1:].to(label_mask.device) & label_mask).sum()).sum()
                metrics["think_token_share"].append((in_think / num_valid).item() if valid else 0.0)
            if mode == "train":
                self.trained_assistant_tokens += int(num_valid)
                if "attention_mask" in inputs:
                    seen = gather(inputs["attention_mask"].sum()).sum().item()
                else:
                    seen = gather(torch.tensor(inputs["position_ids"].size(1),
                                               device=inputs["position_ids"].device)).sum().item()
                self._total_train_tokens += seen // self._tp_size
            metrics["num_tokens"] = [self._total_train_tokens]
            if self.aux_loss_enabled:
                metrics["aux_loss"].append(gather(outputs.aux_loss).mean().item())

        if return_outputs:  # only for compute_metrics: the logits need a second forward (as in TRL)
            with torch.no_grad():
                outputs = model(**{k: v for k, v in inputs.items() if k != "labels"})
            return loss, outputs
        return loss


def _give_output_embeddings_a_bias(model: Any) -> None:
    """TRL's fused LM head reads ``lm_head.weight`` and ``lm_head.bias``; PEFT's TrainableTokensWrapper
    (put on a tied or targeted ``lm_head`` by ``trainable_token_indices``) exposes ``weight`` — the
    merged weights, new token rows included — but not ``bias``, so the fused head fails with an
    AttributeError. The wrapped layer's own bias (None for every LM head here) is attached to the
    wrapper, which leaves PEFT's forward untouched."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        return
    try:
        head.bias  # noqa: B018 - probing the attribute
    except AttributeError:
        inner = getattr(head, "original_module", None) or getattr(head, "base_layer", None)
        object.__setattr__(head, "bias", getattr(inner, "bias", None))
