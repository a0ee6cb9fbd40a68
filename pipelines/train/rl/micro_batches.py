"""Memory without a change of result: a step's rollouts in micro-batches, each cut to the width it needs.

Cheap to import (torch loads inside the function that needs it): ``build`` reads
``micro_batch_size`` before any model is loaded.
"""

from __future__ import annotations

from typing import Any

PROMPT_KEYS = ("prompt_ids", "prompt_mask")


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
