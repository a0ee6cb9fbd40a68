#!/usr/bin/env python
"""Benchmark: the SFT step with LoRA on the last N transformer blocks vs on every block.

Why: with a LoRA adapter in every block, backward runs through the whole model. ``sft.lora_layers: N`` puts the
adapters in the last N blocks only and cuts the graph below the first of them
(``pipelines.train.lora.cut_gradient_below``), so the blocks below run forward only. This measures what that buys
per optimizer step, as a RATIO against every block measured in the same process, the two runs in turn (the
machines are noisy: ratios move much less than absolute timings):

* last: adapters in the last ``--lora-layers`` blocks (15 of SmolLM2's 30), the graph cut below them;
* every: adapters in every block (``sft.lora_layers: null``, the default).

    .venv/bin/python bench/sft_lora_layers.py                  # 16 conversations, 4096 tokens, 1 + 3 steps x 2 rounds
    .venv/bin/python bench/sft_lora_layers.py --lora-layers 10 --repeat 3
    .venv/bin/python bench/sft_lora_layers.py --toy --out /tmp/bench   # smoke test: the tiny random llama, seconds

Everything else is bench/sft.py's: the SmolLM2 subject (tokenizer with the think tokens, LoRA as ``train_sft``
builds it, the new token rows trainable), the same ``SFTConfig`` and data order, the weighted trainer
(``ThinkWeightedSFTTrainer``) in both runs, a fresh copy of the model per run, one untimed warm-up step. The two
runs train different adapters, so their losses are reported, not compared: what the last blocks alone learn is a
question for a whole SFT run and its evaluation (docs/sft.md, "LoRA on the last blocks"). Target (PASS/MISS,
never asserted): last >= 1.3x every block's assistant tokens per second.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import sft as sft_bench  # bench/sft.py: Subject, train_once, the shared options

TARGET_SPEEDUP = 1.3
RUNS = ("last", "every")


def run_pair(subject: Any, args: argparse.Namespace, device: str) -> dict[str, Any]:
    """LoRA on the last ``--lora-layers`` blocks and on every block in turn, ``--repeat`` each; the speed-up per
    round (every block's s/step over the last blocks')."""
    layers = args.lora_layers
    setups = {kind: lambda a, k=kind: setattr(a, "lora_layers", layers if k == "last" else None) for kind in RUNS}
    runs = sft_bench.alternate_runs(subject, args, device, setups)
    args.lora_layers = layers
    speedups = [e["s_per_step"] / last["s_per_step"] for last, e in zip(runs["last"], runs["every"], strict=True)]
    result = sft_bench.speedup_result(runs, ("s_per_step", "tokens_per_s", "assistant_tokens_per_s"), speedups)
    result["blocks"] = {"adapted": layers, "of": len(_blocks(subject))}
    result["losses"] = {kind: [round(x, 4) for x in runs[kind][0]["losses"]] for kind in RUNS}
    return result


def _blocks(subject: Any) -> Any:
    from pipelines.train.lora import decoder_blocks

    return decoder_blocks(subject.base)


def details(results: dict[str, Any]) -> str:
    """The plain-text report on stdout before the table: each run's medians, the speed-up of each round."""
    a, m = results["args"], results["result"]
    lines = [f"SFT step time, LoRA on the last {m['blocks']['adapted']} of {m['blocks']['of']} blocks vs every block "
             f"(ThinkWeightedSFTTrainer, LoRA r={a['lora_r']}), device {results['device']}, "
             f"{results['torch_threads']} threads",
             sft_bench.sizes_line(a, "last/every"), "",
             *sft_bench.run_rows(m["summary"], [("s/step", "s_per_step", 8, 2), ("tok/s", "tokens_per_s", 8, 1),
                                                ("assistant tok/s", "assistant_tokens_per_s", 16, 1)]),
             "", "losses of the first round's steps: " + "; ".join(f"{k} {v}" for k, v in m["losses"].items())]
    lines += sft_bench.speedup_footer(results, "speed-up", f"last >= {TARGET_SPEEDUP}x every block", TARGET_SPEEDUP)
    return "\n".join(lines)


def render(results: dict[str, Any]) -> str:
    """A Markdown table (bench/tables.py puts it into docs/benchmarks.md): every block's and the last blocks'
    s/step and assistant tokens/s over the rounds (one value, or the lowest-highest), the last blocks' speed-up (the
    median of the rounds') with its verdict; then the sizes and the losses of the first round (not compared: the
    two runs train different adapters)."""
    a, m = results["args"], results["result"]
    speedup = sft_bench.speedup_cell(m, TARGET_SPEEDUP)
    blocks = m["blocks"]
    lines = ["| run: LoRA adapters in | s/step | assistant tokens/s | x every (median of the rounds) |",
             "|---|---|---|---|"]
    for kind, label, cell in (
            ("every", f"every: all {blocks['of']} blocks", "1.00"),
            ("last", f"last: the last {blocks['adapted']} of {blocks['of']} blocks, the graph cut below", speedup)):
        runs = m["runs"][kind]
        lines.append(f"| {label} | {sft_bench.span([r['s_per_step'] for r in runs], 2)} | "
                     f"{sft_bench.span([r['assistant_tokens_per_s'] or 0 for r in runs], 1)} | {cell} |")
    losses = "; ".join(f"{kind} {', '.join(f'{x:.3f}' for x in m['losses'][kind])}" for kind in ("every", "last"))
    lines += ["", f"{Path(results['model']).name}, LoRA r={a['lora_r']}, ThinkWeightedSFTTrainer; device "
                  f"{results['device']}, {results['torch_threads']} threads; {sft_bench.sizes_line(a, 'last/every')}. "
                  f"Losses of the first round's steps (different adapters: not compared): {losses}. "
                  f"Target: last >= {TARGET_SPEEDUP:g}x every block."]
    return "\n".join(lines)


def _options(parser: Any) -> None:
    parser.add_argument("--lora-layers", type=int, metavar="N", default=15,
                        help="blocks adapted in the 'last' run, counted from the top (SmolLM2 has 30; default 15)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """bench/sft.py's options and --lora-layers, with this benchmark's defaults; --toy: the tiny model (2 blocks)."""
    return sft_bench.parse_variant_args("sft_lora_layers", __doc__, argv, toy={"max_length": 2048, "lora_layers": 1},
                                        options=_options, conversations=16, max_length=4096, steps=3, repeat=2)


def main(argv: list[str] | None = None) -> int:
    return sft_bench.run_variant("sft_lora_layers", argv, parse_args,
                                 run_pair, sft_bench.printed_then_table(details, render))


if __name__ == "__main__":
    sys.exit(main())
