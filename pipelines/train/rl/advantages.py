"""Credit assignment as plain torch functions (no TRL), so they can be tested and reasoned about on their own.

* ``turn_level_advantages``: per-turn returns G_t = r_t + λ·R (KG-R1's credit, from the configured rewards:
  ``pipelines.train.rewards.weighted_turn_rewards``), normalised over all turns of the group's rollouts, applied
  to that turn's tokens (``rl.<stage>.credit: turn``);
* ``gae_advantages`` and ``whiten``: PPO's generalised advantage estimation from a critic's values, over the
  model's own tokens only.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def turn_level_advantages(turn_returns: list[list[float]], spans: list[list[tuple[int, int]]], group_size: int,
                          length: int) -> torch.Tensor:
    """KG-R1's turn-level credit: each turn's return G_t, normalised over every turn of every rollout of the
    same question (consecutive groups of ``group_size`` rows), spread over that turn's tokens; (B, T)."""
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


def gae_advantages(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, *, gamma: float,
                   lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the model's own tokens only (mask 1); the episode's reward
    arrives at its last model token. Returns (advantages, returns), both (B, T), 0 outside the mask."""
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


def whiten(values: torch.Tensor, mask: torch.Tensor,
           all_sum: Callable[[torch.Tensor], torch.Tensor] = lambda total: total) -> torch.Tensor:
    """Zero mean, unit variance over the masked entries (0 elsewhere): PPO's advantage normalisation. ``all_sum``
    adds a sum up over the processes of a data-parallel run, so that each whitens by the statistics of the whole
    batch, as a single process would."""
    count = all_sum(mask.sum()).clamp(min=1)
    mean = all_sum((values * mask).sum()) / count
    var = all_sum((((values - mean) * mask) ** 2).sum()) / count
    return (values - mean) * (var + 1e-8).rsqrt() * mask
