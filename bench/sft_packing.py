#!/usr/bin/env python
"""Benchmark: padding-free batches of several conversations vs today's one conversation per micro-batch.

Why: with ``sft.per_device_batch: 1`` nothing is padded, but every forward pass holds one conversation.
TRL's ``padding_free=True`` puts a batch's conversations end to end in one row (position ids restart per
conversation, so attention stays within each); on a GPU that fills the device. This measures whether it
trains more assistant (loss-bearing) tokens per second on this machine, as a RATIO against today's setting
measured in the same process, the two runs in turn (the machines are noisy: ratios move much less than
absolute timings):

* today: per-device batch 1 x gradient accumulation ``--batch`` (params.yaml's quick profile: 1 x 2);
* padding_free: per-device batch ``--batch`` x gradient accumulation 1, ``padding_free=True``.

Both see the same conversations in each optimizer step (same data seed, same effective batch), so the
same assistant tokens per step; the ratio of assistant tokens per second is the ratio of step times. Each run's
peak memory is measured too (on CUDA the memory torch allocated, on a CPU the RSS, over the run's start).

    .venv/bin/python bench/sft_packing.py                  # 16 conversations, 1 + 3 steps x 1 round, batch 2
    .venv/bin/python bench/sft_packing.py --batch 4 --repeat 2
    .venv/bin/python bench/sft_packing.py --toy --out /tmp/bench   # smoke test: the tiny random llama, seconds

Everything else is bench/sft.py's: the SmolLM2 subject (tokenizer with the think tokens, LoRA as
``train_sft`` builds it), the weighted trainer (``ThinkWeightedSFTTrainer``) in both runs, a fresh copy
of the model per run, untimed warm-up steps. Conversations longer than ``--max-length`` are left out
(padding-free takes conversations whole). Target (PASS/MISS, never asserted): padding-free >= 1.1x
today's assistant tokens per second, the bar for adopting it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import sft as sft_bench  # bench/sft.py: Subject, train_once, the shared options
from _common import ratio, verdict

log = logging.getLogger("bench.sft_packing")

TARGET_SPEEDUP = 1.1
RUNS = ("today", "padding_free")


def run_pair(subject: Any, args: argparse.Namespace, device: str) -> dict[str, Any]:
    """Today's setting and padding-free in turn, ``--repeat`` each; the speed-up per round (padding-free
    assistant tokens/s over today's)."""
    batch = args.batch

    def setup(free: bool) -> Any:
        def apply(a: argparse.Namespace) -> None:
            a.padding_free, a.batch, a.grad_accumulation = free, batch if free else 1, 1 if free else batch
        return apply

    runs = sft_bench.alternate_runs(subject, args, device, {"today": setup(False), "padding_free": setup(True)},
                                    memory=True)
    args.padding_free, args.batch, args.grad_accumulation = False, batch, 1
    speedups = [f["assistant_tokens_per_s"] / t["assistant_tokens_per_s"]
                for t, f in zip(runs["today"], runs["padding_free"], strict=True) if t["assistant_tokens_per_s"]]
    same = all(r["step_assistant_tokens"] == runs["today"][0]["step_assistant_tokens"] for k in RUNS for r in runs[k])
    result = sft_bench.speedup_result(runs, ("s_per_step", "assistant_tokens_per_s", "tokens_per_s",
                                             "peak_memory_mb"), speedups)
    result["same_assistant_tokens_every_step"] = same
    result["peak_memory"] = "cuda_allocated" if device == "cuda" else "rss"
    result["peak_memory_ratio"] = ratio(result["summary"]["padding_free"]["peak_memory_mb"],
                                        result["summary"]["today"]["peak_memory_mb"])
    return result


def details(results: dict[str, Any]) -> str:
    """The plain-text report on stdout before the table: each run's medians, the speed-up of each round."""
    a, m = results["args"], results["result"]
    lines = [f"SFT assistant tokens per second, padding-free batch {a['batch']} x 1 vs batch 1 x grad accumulation "
             f"{a['batch']} (ThinkWeightedSFTTrainer, {Path(results['model']).name}, LoRA r={a['lora_r']}), device "
             f"{results['device']}, {results['torch_threads']} threads",
             f"{results['data']['conversations']} conversations of at most {a['max_length']} tokens, "
             f"{a['warmup_steps']} warm-up + {a['steps']} timed steps per run, runs alternated x {a['repeat']}", "",
             *sft_bench.run_rows(m["summary"], [("s/step", "s_per_step", 8, 2),
                                                ("asst tok/s", "assistant_tokens_per_s", 10, 1),
                                                ("tok/s", "tokens_per_s", 8, 1),
                                                ("peak MB", "peak_memory_mb", 8, 0)], width=13)]
    lines += ["", f"speed-up (padding-free / today, assistant tokens/s) per round: "
                  f"{', '.join(f'{x:.3f}' for x in m['speedups'])}; same assistant tokens in every step: "
                  f"{str(m['same_assistant_tokens_every_step']).lower()}"]
    if m["median_speedup"] is not None:
        lines.append(f"  {verdict(m['median_speedup'] >= TARGET_SPEEDUP)}  padding-free >= {TARGET_SPEEDUP}x today  "
                     f"median {m['median_speedup']:.3f}x")
    lines.append(sft_bench.load_footer(results))
    return "\n".join(lines)


def render(results: dict[str, Any]) -> str:
    """A Markdown table (bench/tables.py puts it into docs/benchmarks.md): today's and padding-free's s/step,
    assistant tokens/s and peak memory over the rounds (one value, or the lowest-highest; padding-free's memory
    against today's, the ratio of their medians), padding-free's speed-up in assistant tokens/s (the median of the
    rounds') with its verdict; then the sizes and whether both trained the same assistant tokens every step."""
    a, m, data = results["args"], results["result"], results["data"]
    speedup = sft_bench.speedup_cell(m, TARGET_SPEEDUP)
    memory_ratio = "" if m["peak_memory_ratio"] is None else f" ({m['peak_memory_ratio']:.2f}x)"
    lines = ["| run: conversations a step (batch x grad accumulation) | s/step | assistant tokens/s | peak memory MB "
             "| x today's assistant tokens/s (median of the rounds) |", "|---|---|---|---|---|"]
    for kind, label, memory, cell in (
            ("today", f"today: 1 x {a['batch']}", "", "1.00"),
            ("padding_free", f"padding_free: {a['batch']} x 1, in one row", memory_ratio, speedup)):
        runs = m["runs"][kind]
        lines.append(f"| {label} | {sft_bench.span([r['s_per_step'] for r in runs], 2)} | "
                     f"{sft_bench.span([r['assistant_tokens_per_s'] or 0 for r in runs], 1)} | "
                     f"{sft_bench.span([r['peak_memory_mb'] for r in runs], 0)}{memory} | {cell} |")
    left_out = f" ({data['left_out_overlong']} longer ones left out)" if data["left_out_overlong"] else ""
    peak = ("CUDA memory allocated" if m["peak_memory"] == "cuda_allocated" else "RSS") + " over the run's start"
    lines += ["", f"{Path(results['model']).name}, LoRA r={a['lora_r']}, ThinkWeightedSFTTrainer; device "
                  f"{results['device']}, {results['torch_threads']} threads; {data['conversations']} conversations of "
                  f"at most {a['max_length']} tokens{left_out}, {a['warmup_steps']} warm-up + {a['steps']} timed "
                  f"steps per run, runs alternated today/padding_free x {a['repeat']}; peak memory: the peak "
                  f"{peak}, the model's copy included. The same assistant tokens in every step: "
                  f"{'yes' if m['same_assistant_tokens_every_step'] else 'NO'}. "
                  f"Target: padding-free >= {TARGET_SPEEDUP:g}x today's assistant tokens/s."]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """bench/sft.py's options with this benchmark's defaults (--batch: conversations per optimizer step);
    --toy: the tiny model instead of SmolLM2."""
    return sft_bench.parse_variant_args("sft_packing", __doc__, argv, toy={"max_length": 2048}, conversations=16,
                                        max_length=4096, steps=3, warmup_steps=1, repeat=1, batch=2)


def fitting(conversations: list[dict[str, Any]], subject: Any) -> list[int]:
    """Indices of the conversations that fit ``subject.max_length`` tokens (rendered by its chat template)."""
    from pipelines.train.sft import sharegpt_to_messages

    def length(conversation: dict[str, Any]) -> int:
        rendered = subject.tokenizer.apply_chat_template(sharegpt_to_messages(conversation), tokenize=True,
                                                         return_dict=True)
        return len(rendered["input_ids"])

    return [i for i, c in enumerate(conversations) if length(c) < subject.max_length]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device, started, conversations = sft_bench.start_variant(args)
    from pipelines.train.sft import sft_dataset

    subject = sft_bench.Subject("smollm2", args.model, conversations, args.max_length, args)
    kept = fitting(conversations, subject)
    subject.dataset = sft_dataset([conversations[i] for i in kept], mode="think")
    results = sft_bench.variant_results("sft_packing", args, device)
    results["data"] = {"path": str(args.data), "conversations": len(kept),
                       "left_out_overlong": len(conversations) - len(kept)}
    results["result"] = run_pair(subject, args, device)
    return sft_bench.finish_variant(results, sft_bench.printed_then_table(details, render), args,
                                   started)


if __name__ == "__main__":
    sys.exit(main())
