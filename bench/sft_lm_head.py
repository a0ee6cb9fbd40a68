#!/usr/bin/env python
"""Benchmark: the SFT step with TRL's fused LM head on the trained positions only vs on every position.

Why: TRL's fused LM head projects, on a CPU, every position of a conversation onto the vocabulary (49k
columns for SmolLM2) and back in the backward pass; only the positions whose next token is trained (the
assistant turns, ~1 in 5 of a quick conversation) count in the loss. ``train_sft`` and the RL stages run
inside ``pipelines.train.memory.labelled_positions_only``, which makes TRL project only those, as it does
on CUDA. This measures what that buys, as a RATIO against every position measured in the same process,
the two runs in turn (the machines are noisy: ratios move much less than absolute timings), and checks
that the losses of the same steps are the same:

* labelled: ``labelled_positions_only()`` (what ``train_sft`` runs);
* every: TRL's own choice on this device (every position on a CPU).

    .venv/bin/python bench/sft_lm_head.py                  # 16 conversations, 4096 tokens, 1 + 3 steps x 2 rounds
    .venv/bin/python bench/sft_lm_head.py --steps 4 --repeat 3
    .venv/bin/python bench/sft_lm_head.py --toy --out /tmp/bench   # smoke test: the tiny random llama, seconds

Everything else is bench/sft.py's: the SmolLM2 subject (tokenizer with the think tokens, LoRA as
``train_sft`` builds it), the same ``SFTConfig`` and data order, the weighted trainer
(``ThinkWeightedSFTTrainer``) in both runs, a fresh copy of the model per run, one untimed warm-up step.
Both runs use TRL's tile of 4,096 tokens (the quick profile's 512, ``sft.logprob_chunk_tokens``, is a
memory bound set by ``train_sft``). Target (PASS/MISS, never asserted): labelled >= 1.2x every
position's assistant tokens per second on a CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import sft as sft_bench  # bench/sft.py: Subject, train_once, the shared options

TARGET_SPEEDUP = 1.2
RUNS = ("labelled", "every")


def run_pair(subject: Any, args: argparse.Namespace, device: str) -> dict[str, Any]:
    """Labelled positions only and every position in turn, ``--repeat`` each; the speed-up per round
    (every position's s/step over labelled's) and the largest gap between the two runs' losses."""
    setups = {kind: lambda a, k=kind: setattr(a, "all_positions", k == "every") for kind in RUNS}
    runs = sft_bench.alternate_runs(subject, args, device, setups)
    args.all_positions = False
    speedups = [e["s_per_step"] / lab["s_per_step"] for lab, e in zip(runs["labelled"], runs["every"], strict=True)]
    loss_gaps = [abs(a - b) / max(abs(b), 1e-9) for ra, rb in zip(runs["labelled"], runs["every"], strict=True)
                 for a, b in zip(ra["losses"], rb["losses"], strict=False)]
    result = sft_bench.speedup_result(runs, ("s_per_step", "tokens_per_s", "assistant_tokens_per_s"), speedups)
    result["max_relative_loss_gap"] = round(max(loss_gaps), 6) if loss_gaps else None
    first = runs["labelled"][0]
    result["assistant_token_share"] = round(first["assistant_tokens"] / first["tokens"], 4) if first["tokens"] else None
    return result


def details(results: dict[str, Any]) -> str:
    """The plain-text report on stdout before the table: each run's medians, the speed-up of each round."""
    a, m = results["args"], results["result"]
    lines = [f"SFT step time, fused LM head on the trained positions only vs every position (ThinkWeightedSFTTrainer, "
             f"LoRA r={a['lora_r']}), device {results['device']}, {results['torch_threads']} threads",
             f"{sft_bench.sizes_line(a, 'labelled/every')}; trained (assistant) share of the tokens: "
             f"{m['assistant_token_share']:.1%}", "",
             *sft_bench.run_rows(m["summary"], [("s/step", "s_per_step", 8, 2), ("tok/s", "tokens_per_s", 8, 1),
                                                ("assistant tok/s", "assistant_tokens_per_s", 16, 1)])]
    lines += sft_bench.speedup_footer(results, "speed-up", f"labelled >= {TARGET_SPEEDUP}x every position",
                                      TARGET_SPEEDUP, gap_format=".4%")
    return "\n".join(lines)


def render(results: dict[str, Any]) -> str:
    """A Markdown table (bench/tables.py puts it into docs/benchmarks.md): every position's and the trained
    positions' s/step and assistant tokens/s over the rounds (one value, or the lowest-highest), the trained
    positions' speed-up (the median of the rounds') with its verdict; then the sizes, the trained share of the
    tokens and the largest gap between the two runs' losses of the same step."""
    a, m = results["args"], results["result"]
    gap = m["max_relative_loss_gap"]
    speedup = sft_bench.speedup_cell(m, TARGET_SPEEDUP)
    lines = ["| run: the fused LM head on | s/step | assistant tokens/s | x every (median of the rounds) |",
             "|---|---|---|---|"]
    for kind, label, cell in (("every", "every: TRL's own choice (every position off CUDA)", "1.00"),
                              ("labelled", "labelled: the trained positions only (train_sft's)", speedup)):
        runs = m["runs"][kind]
        lines.append(f"| {label} | {sft_bench.span([r['s_per_step'] for r in runs], 2)} | "
                     f"{sft_bench.span([r['assistant_tokens_per_s'] or 0 for r in runs], 1)} | {cell} |")
    share = m["assistant_token_share"]
    lines += ["", f"{Path(results['model']).name}, LoRA r={a['lora_r']}, ThinkWeightedSFTTrainer; device "
                  f"{results['device']}, {results['torch_threads']} threads; "
                  f"{sft_bench.sizes_line(a, 'labelled/every')}. Trained (assistant) share of the tokens: "
                  f"{'-' if share is None else f'{share:.1%}'}; largest relative gap between the two runs' losses of "
                  f"the same step: {'-' if gap is None else f'{gap:.4%}'}. "
                  f"Target: the trained positions only >= {TARGET_SPEEDUP:g}x every position."]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """bench/sft.py's options, with this benchmark's defaults; --toy: the tiny model instead of SmolLM2."""
    return sft_bench.parse_variant_args("sft_lm_head", __doc__, argv, toy={"max_length": 2048}, conversations=16,
                                        max_length=4096, steps=3, repeat=2)


def main(argv: list[str] | None = None) -> int:
    return sft_bench.run_variant("sft_lm_head", argv, parse_args,
                                 run_pair, sft_bench.printed_then_table(details, render))


if __name__ == "__main__":
    sys.exit(main())
