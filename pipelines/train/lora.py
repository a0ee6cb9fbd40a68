"""LoRA adapters for the SFT and RL trainers: on every linear layer of the transformer blocks, or of the last N.

A LoRA adapter on every block makes backward run through the whole model: the gradient of the first block's
adapter needs the activations' gradient all the way down. With adapters on the last ``layers`` blocks only
(``sft.lora_layers``, ``rl.<stage>.lora_layers``), the hidden states entering the first adapted block are cut
from the graph (``cut_gradient_below``): backward stops there, and the blocks below run forward only and keep no
activations. On SmolLM2 (30 blocks) the last 15 adapted made an SFT step 1.5x as fast (bench/sft_lora_layers.py),
and the quick SFT model answered 16 fewer of 80 test questions, so the default adapts every block (docs/sft.md,
"LoRA on the last blocks").

What it costs: the blocks below do not adapt, and new token rows (``<think>``, ``</think>``) learn from the output
side only (on a tied LM head the same rows serve the input side, so the input still sees the trained rows).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from pipelines.errors import ConfigError


def decoder_blocks(model: Any) -> Any:
    """The model's transformer blocks (an ``nn.ModuleList``), for a causal LM of transformers, with or without a PEFT
    wrapper around it."""
    inner = model
    for _ in range(4):  # PeftModel -> LoraModel -> the causal LM -> its decoder
        blocks = getattr(inner, "layers", None)
        if blocks is not None and hasattr(blocks, "__len__"):
            return blocks
        decoder = inner.get_decoder() if hasattr(inner, "get_decoder") else None
        inner = decoder if decoder is not None and decoder is not inner else getattr(inner, "model", None)
        if inner is None:
            break
    raise ConfigError(f"lora_layers: found no transformer blocks (a `layers` list) in {type(model).__name__}")


def block_linear_names(model: Any) -> list[str]:
    """The names (last path part) of the linear layers inside the transformer blocks: what ``all-linear`` targets,
    spelled out, since PEFT's ``layers_to_transform`` needs a list."""
    import torch

    names = {name.rsplit(".", 1)[-1] for name, module in decoder_blocks(model).named_modules()
             if isinstance(module, torch.nn.Linear)}
    if not names:
        raise ConfigError(f"lora_layers: the transformer blocks of {type(model).__name__} hold no linear layers")
    return sorted(names)


def adapted_blocks(model: Any, layers: int | None) -> list[int]:
    """Indices of the blocks that get an adapter: the last ``layers`` (None: every block)."""
    total = len(decoder_blocks(model))
    if layers is None:
        return list(range(total))
    if layers > total:
        raise ConfigError(f"lora_layers: {layers} blocks asked, the model has {total}")
    return list(range(total - layers, total))


def lora_config(model: Any, *, r: int, alpha: int, dropout: float = 0.0, layers: int | None = None,
                trainable_tokens: dict[str, list[int]] | None = None, task_type: str = "CAUSAL_LM") -> Any:
    """PEFT's ``LoraConfig`` for a causal LM (or, ``task_type`` TOKEN_CLS, the PPO critic: PEFT then trains its
    value head in full beside the adapter): rank ``r`` and ``alpha`` on every linear layer of the blocks
    (``layers`` None) or of the last ``layers`` blocks; ``trainable_tokens``: embedding rows trained beside
    (``trainable_token_indices``)."""
    from peft import LoraConfig

    # named for a head other than an LM head: PEFT's all-linear would adapt the head that its task trains in full
    targets: dict[str, Any] = {"target_modules": "all-linear"} if layers is None and task_type == "CAUSAL_LM" else {
        "target_modules": block_linear_names(model), "layers_to_transform": adapted_blocks(model, layers)}
    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, task_type=task_type,
                      trainable_token_indices=trainable_tokens, **targets)


def _cut(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    import torch

    if not torch.is_grad_enabled():  # generation, evaluation: nothing to cut
        return None
    if args:
        return (args[0].detach().requires_grad_(), *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": kwargs["hidden_states"].detach().requires_grad_()}


def cut_gradient_below(model: Any, layers: int | None) -> Any:
    """With adapters on the last ``layers`` blocks only, the hidden states entering the first of them become a new
    leaf of the graph (detached, still requiring a gradient, so that reentrant gradient checkpointing keeps the
    adapted blocks' gradients): backward ends there. Returns the hook's handle (``remove()`` undoes it); None when
    every block is adapted."""
    if layers is None:
        return None
    blocks = decoder_blocks(model)
    first = adapted_blocks(model, layers)[0]
    if first == 0:
        return None
    return blocks[first].register_forward_pre_hook(_cut, with_kwargs=True)


@contextlib.contextmanager
def merged_adapter(model: Any) -> Iterator[bool]:
    """Inside the block, a PEFT model's LoRA adapters are merged into its weights (``W + scale * B A``), so that
    generation runs each linear layer once instead of the base layer plus the adapter's two small products and
    PEFT's Python around them; on leaving, they are unmerged (the base weights again, up to float rounding: TRL
    merges and unmerges the same way to hand a PEFT policy's weights to vLLM). Yields False, and does nothing, for
    a model without adapters or one already merged. Only for forward passes without gradients: the adapters'
    own parameters receive no gradient through merged weights."""
    merge = getattr(model, "merge_adapter", None)
    merged = callable(merge) and not any(getattr(module, "merged", False) for module in model.modules())
    if merged:
        merge()
    try:
        yield merged
    finally:
        if merged:
            model.unmerge_adapter()
