"""What an RL stage's log history says: the summary its manifest records and its training curves (a PNG)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def rl_summary(history: list[dict[str, Any]]) -> dict[str, Any]:
    """First and last mean reward, the mean of the first and of the last third of the steps (is the reward
    rising, beyond one step's question?), validation EM, tool calls: what a reader of the manifest wants first."""
    rewards = [h["reward"] for h in history if "reward" in h]
    val = [h["val_em"] for h in history if "val_em" in h]
    calls = [h["rollout/tool_calls"] for h in history if "rollout/tool_calls" in h]
    third = max(1, len(rewards) // 3)
    return {"steps_logged": len(rewards), "reward_first": rewards[0] if rewards else None,
            "reward_last": rewards[-1] if rewards else None,
            "reward_first_third_mean": sum(rewards[:third]) / third if rewards else None,
            "reward_last_third_mean": sum(rewards[-third:]) / third if rewards else None,
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
    axes[1].set(title="validation EM" if val else "validation EM (val_questions: 0)", xlabel="step",
                ylim=(-0.02, 1.02))
    axes[2].plot(x, [h.get("rollout/tool_calls", float("nan")) for h in steps], marker="o", color="tab:purple")
    axes[2].set(title="tool calls / episode", xlabel="step")
    axes[3].plot(x, [h.get("rollout/generated_tokens", float("nan")) for h in steps], marker="o", color="tab:red")
    axes[3].set(title="generated tokens / episode", xlabel="step")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
