#!/usr/bin/env python
"""Benchmark: the stage-2 SFT trainer in bf16 mixed precision vs fp32, on this machine's device.

Why: ``sft.bf16: auto`` (and ``rl.*.bf16``) turns bf16 autocast on where the hardware multiplies bf16
natively — a CUDA GPU, or a CPU with AVX512-BF16 / AMX (``pipelines.train.precision.cpu_has_native_bf16``).
This measures what that buys, as a RATIO against fp32 measured in the same process, the two runs in
turn (the machines are noisy: absolute timings move with the load, ratios much less), and how far
the losses of the same steps move.

    .venv/bin/python bench/sft_precision.py                 # 8 conversations, 2048 tokens, 1 + 3 steps x 2 rounds
    .venv/bin/python bench/sft_precision.py --steps 4 --repeat 3
    .venv/bin/python bench/sft_precision.py --toy --out /tmp/bench   # smoke test: the tiny random llama, seconds

Everything else is bench/sft.py's: the same SmolLM2 subject (tokenizer with the think tokens, LoRA as
``train_sft`` builds it), the same ``SFTConfig`` and data order, the weighted trainer
(``ThinkWeightedSFTTrainer``) in both runs, a fresh copy of the model per run, one untimed warm-up
step. Target (PASS/MISS, never asserted): bf16 at least 1.3x faster than fp32 where ``auto`` picks it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import sft as sft_bench  # bench/sft.py: Subject, train_once, the shared options
import torch

TARGET_SPEEDUP = 1.3
RUNS = ("bf16", "fp32")


def run_pair(subject: Any, args: argparse.Namespace, device: str) -> dict[str, Any]:
    """bf16 and fp32 in turn, ``--repeat`` each; the speed-up per round (fp32 s/step / bf16 s/step)."""
    from pipelines.train.precision import cpu_has_native_bf16

    setups = {kind: lambda a, k=kind: setattr(a, "bf16", "true" if k == "bf16" else "false") for kind in RUNS}
    runs = sft_bench.alternate_runs(subject, args, device, setups)
    speedups = [f["s_per_step"] / b["s_per_step"] for b, f in zip(runs["bf16"], runs["fp32"], strict=True)]
    loss_gaps = [abs(b - f) / max(abs(f), 1e-9) for rb, rf in zip(runs["bf16"], runs["fp32"], strict=True)
                 for b, f in zip(rb["losses"], rf["losses"], strict=False)]
    result = sft_bench.speedup_result(runs, ("s_per_step", "tokens_per_s"), speedups)
    result["max_relative_loss_gap"] = round(max(loss_gaps), 4) if loss_gaps else None
    # whether this device multiplies bf16 natively (what bf16: auto decides on)
    result["native_bf16"] = bool(torch.cuda.is_bf16_supported()) if device == "cuda" else cpu_has_native_bf16()
    return result


def details(results: dict[str, Any]) -> str:
    """The plain-text report on stdout before the table: each run's medians, the speed-up of each round."""
    a, m = results["args"], results["result"]
    lines = [f"SFT step time, bf16 autocast vs fp32 (ThinkWeightedSFTTrainer, {Path(results['model']).name}, "
             f"LoRA r={a['lora_r']}), device {results['device']} (native bf16: {m['native_bf16']}), "
             f"{results['torch_threads']} threads",
             sft_bench.sizes_line(a, "bf16/fp32"), "",
             *sft_bench.run_rows(m["summary"], [("s/step", "s_per_step", 8, 2), ("tok/s", "tokens_per_s", 8, 1)],
                                 width=6)]
    lines += sft_bench.speedup_footer(results, "speed-up fp32/bf16", f"bf16 >= {TARGET_SPEEDUP}x fp32", TARGET_SPEEDUP)
    return "\n".join(lines)


def render(results: dict[str, Any]) -> str:
    """A Markdown table (bench/tables.py puts it into docs/benchmarks.md): fp32's and bf16's s/step and tokens/s
    over the rounds (one value, or the lowest-highest), bf16's speed-up over fp32 (the median of the rounds') with
    its verdict; then the device, the sizes and the largest gap between the two runs' losses of the same step."""
    a, m = results["args"], results["result"]
    gap = m["max_relative_loss_gap"]
    speedup = sft_bench.speedup_cell(m, TARGET_SPEEDUP)
    lines = ["| run | s/step | tokens/s | x fp32 (median of the rounds) |", "|---|---|---|---|"]
    for kind, label, cell in (("fp32", "fp32", "1.00"), ("bf16", "bf16 autocast", speedup)):
        runs = m["runs"][kind]
        lines.append(f"| {label} | {sft_bench.span([r['s_per_step'] for r in runs], 2)} | "
                     f"{sft_bench.span([r['tokens_per_s'] or 0 for r in runs], 1)} | {cell} |")
    lines += ["", f"{Path(results['model']).name}, LoRA r={a['lora_r']}, ThinkWeightedSFTTrainer; device "
                  f"{results['device']} (native bf16: {'yes' if m['native_bf16'] else 'no'}), "
                  f"{results['torch_threads']} threads; {sft_bench.sizes_line(a, 'bf16/fp32')}. Largest relative gap "
                  f"between the two runs' losses of the same step: {'-' if gap is None else f'{gap:.2%}'}. "
                  f"Target: bf16 >= {TARGET_SPEEDUP:g}x fp32."]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """bench/sft.py's options, with this benchmark's defaults; --toy: the tiny model instead of SmolLM2."""
    return sft_bench.parse_variant_args("sft_precision", __doc__, argv, toy={"max_length": 512}, conversations=8,
                                        max_length=2048, steps=3, repeat=2)


def main(argv: list[str] | None = None) -> int:
    return sft_bench.run_variant("sft_precision", argv, parse_args,
                                 run_pair, sft_bench.printed_then_table(details, render))


if __name__ == "__main__":
    sys.exit(main())
