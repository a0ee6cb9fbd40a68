#!/usr/bin/env python
"""Benchmark of the stage-2 SFT trainer: the overhead of the weighted think-loss over plain TRL SFT.

Every speed is a RATIO against a baseline measured in the same process, the two runs in turn (the
machines are noisy: absolute timings move with the load, ratios much less).

    .venv/bin/python bench/sft.py                      # = --quick: 8 conversations, 512 tokens, 4 steps x 2 rounds
    .venv/bin/python bench/sft.py --steps 8 --repeat 3 --max-length 2048 --conversations 32
    .venv/bin/python bench/sft.py --models tiny        # only the tiny random model
    .venv/bin/python bench/sft.py --device cuda        # on a GPU (bf16 where supported, as train_sft)
    .venv/bin/python bench/sft.py --toy --out /tmp/bench   # smoke test: the tiny model, generated data, seconds

Same model (the SmolLM2 folder, ``--model``; its tokenizer with the think tokens and the training
chat template from ``prepare_tokenizer``, the embeddings grown by ``resize_for_tokens``), same data
(the first ``--conversations`` of the SFT conversations, ``sft_dataset``), same LoRA config as
``train_sft`` (r ``--lora-r`` on every linear layer, the new token rows as trainable tokens), same
``SFTConfig`` (``assistant_only_loss``, ``--max-length`` with truncation, batch, gradient
accumulation, constant learning rate, seed: the same data order), a fresh copy of the model per run:

* weighted: ``ThinkWeightedSFTTrainer`` with ``think_weight`` ``--think-weight`` (0.001): the
  ``ThinkWeightCollator`` (think spans found in every batch), the weighted reduction over the whole
  accumulated batch and its extra metrics;
* plain: TRL's own ``SFTTrainer`` (assistant-only mean NLL through the same fused LM head), i.e. the
  same training without per-token weights. Our trainer has no switch to a plain path
  (``think_weight=1.0`` still runs the weighted code), so TRL's trainer is the baseline.

Each run trains ``--warmup-steps`` (1) untimed optimizer steps, then ``--steps`` (4) timed ones; a
step is timed from the end of the previous optimizer step to the end of its own (data loading and
collation, forward and backward of every micro-batch, optimizer step and the logging of the previous
step: everything a training loop pays). Runs alternate weighted, plain, weighted, plain, ...
(``--repeat`` of each); reported per model: seconds per optimizer step, tokens/s (tokens of the
batches, padding excluded), process CPU seconds per step, and the ratio weighted / plain of the step
time in each round and its median. Target (PASS/MISS, never asserted): the weighted
think-loss costs <= 5% over plain SFT on SmolLM2.

The same on a tiny random llama (``tests/model_support.build_tiny_llama``: 2 layers of width 64, a
300-token BPE vocabulary), where the model is so cheap that the loss, the weights and the trainer's
Python are a large share of the step: an upper bound of the relative overhead. Its tokenizer cuts
the conversations into ~3x as many tokens (the system prompt alone is ~1,400; at 512 tokens no
assistant token is left and TRL drops every example), so it runs at ``--tiny-max-length`` (2048:
~600 assistant tokens per conversation, the first think spans closed) rather than ``--max-length``.

See docs/benchmarks.md for the method and the results.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

# first: sets the offline environment and puts the project root on sys.path
from _common import (
    MB,
    ROOT,
    BenchParser,
    Stage,
    args_record,
    cpu_seconds,
    load_average,
    machine_info,
    settle,
    setup_logging,
    verdict,
    write_results,
)
from _toy import tiny_model, toy_conversations
from transformers import AutoModelForCausalLM, TrainerCallback

log = logging.getLogger("bench.sft")

TARGET_OVERHEAD = 0.05  # weighted step time <= 1.05 x plain, on the real model
QUICK = {"conversations": 8, "max_length": 512, "tiny_max_length": 2048, "steps": 4, "warmup_steps": 1,
         "repeat": 2}
RUNS = ("weighted", "plain")


# --------------------------------------------------------------------------------------------
# Setup
# --------------------------------------------------------------------------------------------

def read_conversations(path: Path, count: int) -> list[dict[str, Any]]:
    """The first ``count`` ShareGPT records of the SFT conversations (JSON lines)."""
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                rows.append(json.loads(line))
                if len(rows) >= count:
                    break
    if not rows:
        raise SystemExit(f"no conversations in {path}")
    return rows


def resolve_device(choice: str) -> str:
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here")
    return choice


class Subject:
    """One model under test: its tokenizer (think tokens, training template, pad token), the base model
    grown to the tokenizer (copied for every run), its LoRA config as ``train_sft`` builds it, and the
    conversations as TRL's dataset."""

    def __init__(self, name: str, folder: Path, conversations: list[dict[str, Any]], max_length: int,
                 args: argparse.Namespace) -> None:
        from pipelines.train.sft import prepare_tokenizer, resize_for_tokens, sft_dataset

        self.name, self.folder, self.max_length = name, folder, max_length
        self.tokenizer, self.new_tokens = prepare_tokenizer(folder)
        self.base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        resize_for_tokens(self.base, self.tokenizer, self.new_tokens)
        self.dataset = sft_dataset(conversations, mode="think")
        self.args = args

    def lora_config(self) -> Any:
        """As ``train_sft``: every block, or the last ``args.lora_layers`` (bench/sft_lora_layers.py)."""
        from pipelines.train.lora import lora_config
        from pipelines.train.sft import trainable_token_rows

        return lora_config(self.base, r=self.args.lora_r, alpha=self.args.lora_alpha,
                           layers=getattr(self.args, "lora_layers", None),
                           trainable_tokens=trainable_token_rows(self.base, self.new_tokens))

    def parameters(self) -> int:
        return sum(p.numel() for p in self.base.parameters())


def sft_config(output_dir: Path, max_length: int, args: argparse.Namespace, device: str) -> Any:
    """The ``SFTConfig`` of ``train_sft`` at benchmark sizes: constant learning rate, no saving, logging
    every step and no activation checkpointing (as params.yaml), no progress bar. ``args.padding_free``
    (bench/sft_packing.py): each batch's conversations end to end in one row, unpadded (TRL then wants no
    ``max_length``: the conversations are taken whole)."""
    from trl import SFTConfig

    from pipelines.train.precision import use_bf16

    padding_free = bool(getattr(args, "padding_free", False))
    bf16 = use_bf16("auto" if args.bf16 == "auto" else args.bf16 == "true", cuda=device == "cuda")
    return SFTConfig(
        output_dir=str(output_dir), seed=args.seed, data_seed=args.seed,
        max_steps=args.warmup_steps + args.steps,
        per_device_train_batch_size=args.batch, gradient_accumulation_steps=args.grad_accumulation,
        learning_rate=1e-4, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        bf16=bf16, fp16=False, activation_checkpointing=args.activation_checkpointing,
        max_length=None if padding_free else max_length, packing=False, padding_free=padding_free,
        assistant_only_loss=True, logging_steps=1,
        save_strategy="no", report_to="none", disable_tqdm=True,
        dataloader_num_workers=0, dataloader_pin_memory=device == "cuda", use_cpu=device == "cpu",
    )


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------

class StepTimer(TrainerCallback):
    """Wall time, process CPU time, the trainer's token count and its trained (assistant) token count
    (``ThinkWeightedSFTTrainer`` only, else 0) at the start of training and at the end of every optimizer
    step (CUDA synchronised first)."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.trainer: Any = None
        self.marks: list[tuple[float, float, int, int]] = []

    def _mark(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
        tokens = int(getattr(self.trainer, "_total_train_tokens", 0)) if self.trainer is not None else 0
        trained = int(getattr(self.trainer, "trained_assistant_tokens", 0)) if self.trainer is not None else 0
        self.marks.append((time.perf_counter(), cpu_seconds(), tokens, trained))

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._mark()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._mark()


def _paired_best_ms(plain: Any, weighted: Any, repeat: int, cuda: bool) -> tuple[float, float]:
    """The fastest of ``repeat`` calls of each of two functions, called in turn after one untimed call
    each (so that a burst of load hits both alike), in milliseconds."""
    best = [float("inf"), float("inf")]
    plain(), weighted()
    for _ in range(repeat):
        for index, fn in enumerate((plain, weighted)):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            if cuda:
                torch.cuda.synchronize()
            best[index] = min(best[index], time.perf_counter() - t0)
    return best[0] * 1000.0, best[1] * 1000.0


def extra_work(trainer: Any, args: argparse.Namespace, device: str, repeat: int = 50) -> dict[str, Any]:
    """The work the weighted trainer adds to a micro-batch, timed apart (best of ``repeat``, the two
    variants in turn, so that the machine's load moves it little): the ``ThinkWeightCollator`` over
    TRL's own collator (think spans and weights of the batch), and the weighted reduction of the
    per-token NLL (``shifted_weights`` + ``weighted_nll`` over the step's total weight) over TRL's
    plain one (``sum / count``), on the first 4 micro-batches of the prepared dataset (random NLL
    values of the batch's shape). Left out: the step's total weight (one sum per micro-batch in
    ``get_batch_samples``) and the two extra metrics (two ``.item()`` per micro-batch)."""
    from pipelines.train.think_loss import shifted_weights, weighted_nll

    cuda = device == "cuda"
    dataset = trainer._remove_unused_columns(trainer.train_dataset, description="training")
    wrapped, inner = trainer.data_collator, trainer.data_collator.collator
    batches = [[dataset[j] for j in range(i, min(i + args.batch, len(dataset)))]
               for i in range(0, min(len(dataset), 4 * args.batch), args.batch)]
    collate = [_paired_best_ms(lambda b=b: inner(b), lambda b=b: wrapped(b), repeat, False) for b in batches]
    collate_inner, collate_wrapped = [c[0] for c in collate], [c[1] for c in collate]
    loss_plain, loss_weighted = [], []
    for examples in batches:
        batch = wrapped(examples)
        labels = batch["labels"].to(trainer.args.device)
        weights = batch["loss_weights"].to(trainer.args.device)
        mask = labels[..., 1:] != -100
        nll = torch.rand(mask.shape, device=labels.device) * mask
        count = mask.sum()
        total = shifted_weights(weights, labels).sum()
        plain_ms, weighted_ms = _paired_best_ms(
            lambda n=nll, c=count: n.sum() / torch.as_tensor(c).clamp(min=1),
            lambda n=nll, w=weights, lb=labels, m=mask, t=total: weighted_nll(n, shifted_weights(w, lb) * m, t),
            repeat, cuda)
        loss_plain.append(plain_ms)
        loss_weighted.append(weighted_ms)
    median = statistics.median
    per_micro = (median(collate_wrapped) - median(collate_inner)) + (median(loss_weighted) - median(loss_plain))
    return {"micro_batches": len(batches), "repeat": repeat,
            "collate_plain_ms": round(median(collate_inner), 3),
            "collate_weighted_ms": round(median(collate_wrapped), 3),
            "loss_plain_ms": round(median(loss_plain), 3), "loss_weighted_ms": round(median(loss_weighted), 3),
            "extra_ms_per_micro_batch": round(per_micro, 3),
            "extra_ms_per_step": round(per_micro * args.grad_accumulation, 3)}


def train_once(subject: Subject, kind: str, args: argparse.Namespace, device: str,
               measure_parts: bool = False) -> dict[str, Any]:
    """One training run (``kind`` weighted or plain) on a fresh copy of the model; the timed steps."""
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTTrainer

    from pipelines.train.lora import cut_gradient_below
    from pipelines.train.memory import labelled_positions_only
    from pipelines.train.think_loss import ThinkWeightedSFTTrainer, _give_output_embeddings_a_bias

    settle()
    model = copy.deepcopy(subject.base)
    cut_gradient_below(model, getattr(args, "lora_layers", None))  # as train_sft: backward ends at the adapters
    timer = StepTimer(cuda=device == "cuda")
    with tempfile.TemporaryDirectory(prefix="omne-bench-sft-") as tmp:
        config = sft_config(Path(tmp), subject.max_length, args, device)
        common = dict(model=model, args=config, train_dataset=subject.dataset, processing_class=subject.tokenizer,
                      peft_config=subject.lora_config(), callbacks=[timer])
        t0 = time.perf_counter()
        if kind == "weighted":
            trainer = ThinkWeightedSFTTrainer(**common, think_weight=args.think_weight)
        else:
            trainer = SFTTrainer(**common)
            # TRL's fused LM head reads lm_head.bias, which PEFT's trainable-tokens wrapper lacks; the
            # same no-op fix ThinkWeightedSFTTrainer applies (an attribute set to None: no compute)
            _give_output_embeddings_a_bias(trainer.model)
        setup_s = time.perf_counter() - t0
        examples = len(trainer.train_dataset)  # TRL drops the examples left with no assistant token
        trainer.remove_callback(PrinterCallback)
        timer.trainer = trainer
        # as train_sft: TRL's fused LM head projects only the trained positions (bench/sft_lm_head.py: every one)
        scored = contextlib.nullcontext() if getattr(args, "all_positions", False) else labelled_positions_only()
        with scored:
            output = trainer.train()
        history = list(trainer.state.log_history)
        parts = extra_work(trainer, args, device) if measure_parts and kind == "weighted" else None
    marks = timer.marks
    expected = args.warmup_steps + args.steps + 1
    if len(marks) != expected:
        raise RuntimeError(f"{kind}: {len(marks) - 1} optimizer steps timed, expected {expected - 1}")
    steps = [(b[0] - a[0], b[1] - a[1], b[2] - a[2], b[3] - a[3]) for a, b in zip(marks, marks[1:], strict=False)]
    timed = steps[args.warmup_steps:]
    wall = sum(s[0] for s in timed)
    tokens = sum(s[2] for s in timed)
    trained = sum(s[3] for s in timed)
    losses = [h["loss"] for h in history if "loss" in h]
    result = {
        "kind": kind,
        "setup_s": round(setup_s, 3),
        "train_examples": examples,
        "warmup_s": [round(s[0], 4) for s in steps[:args.warmup_steps]],
        "step_walls_s": [round(s[0], 4) for s in timed],
        "step_cpu_s": [round(s[1], 4) for s in timed],
        "step_tokens": [s[2] for s in timed],
        "s_per_step": round(wall / len(timed), 4),
        "median_step_s": round(statistics.median(s[0] for s in timed), 4),
        "cpu_s_per_step": round(sum(s[1] for s in timed) / len(timed), 4),
        "tokens": tokens,
        "tokens_per_s": round(tokens / wall, 1) if wall > 0 else None,
        "step_assistant_tokens": [s[3] for s in timed],
        "assistant_tokens": trained,
        "assistant_tokens_per_s": round(trained / wall, 1) if wall > 0 else None,
        "losses": [round(x, 5) for x in losses],
        "train_runtime_s": output.metrics.get("train_runtime"),
    }
    if parts is not None:
        result["extra_work"] = parts
    if kind == "weighted":
        result["assistant_losses"] = [round(h["assistant_loss"], 5) for h in history if "assistant_loss" in h]
        result["think_token_share"] = [round(h["think_token_share"], 4) for h in history
                                       if "think_token_share" in h]
    del trainer, model
    settle()
    if device == "cuda":
        torch.cuda.empty_cache()
    return result


def alternate_runs(subject: Subject, args: argparse.Namespace, device: str,
                   setups: dict[str, Callable[[argparse.Namespace], None]], *,
                   memory: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Weighted-trainer runs (``train_once``) of each setup in turn, ``--repeat`` rounds; a setup sets its
    options on ``args`` before its run (the variant benchmarks: sft_precision, sft_packing). ``memory``: each run's
    peak memory too (``peak_memory_mb``): on CUDA the most memory torch allocated during the run over what it held
    before, on a CPU the peak RSS over the RSS before the run (sampled every 10 ms); the model's fresh copy counts
    in both."""
    cuda = device == "cuda"
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in setups}
    for round_index in range(args.repeat):
        for kind, setup in setups.items():
            setup(args)
            before = 0
            if memory and cuda:
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
            with Stage(interval=0.01) if memory else contextlib.nullcontext() as stage:
                run = train_once(subject, "weighted", args, device)
            if memory:
                extra = torch.cuda.max_memory_allocated() - before if cuda else stage.peak_extra
                run["peak_memory_mb"] = round(extra / MB, 1)
            runs[kind].append(run)
            log.info("round %d %s: %.2f s/step, %.0f tokens/s, %.0f assistant tokens/s, losses %s", round_index + 1,
                     kind, run["s_per_step"], run["tokens_per_s"] or 0, run["assistant_tokens_per_s"] or 0,
                     run["losses"])
    return runs


def speedup_result(runs: dict[str, list[dict[str, Any]]], keys: tuple[str, ...],
                   speedups: list[float]) -> dict[str, Any]:
    """A variant benchmark's result: per setup the median over its rounds of each of ``keys`` (s_per_step,
    tokens_per_s, ...), the speed-up of each round and their median, and the runs themselves."""
    return {"summary": {kind: {key: round(statistics.median(r[key] for r in rounds), 3) for key in keys}
                        for kind, rounds in runs.items()},
            "speedups": [round(x, 3) for x in speedups],
            "median_speedup": round(statistics.median(speedups), 3) if speedups else None,
            "runs": runs}


def bench_subject(subject: Subject, args: argparse.Namespace, device: str) -> dict[str, Any]:
    """Weighted and plain in turn, ``--repeat`` each; ratios per round and their median."""
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in RUNS}
    for round_index in range(args.repeat):
        for kind in RUNS:
            log.info("%s: round %d/%d, %s ...", subject.name, round_index + 1, args.repeat, kind)
            run = train_once(subject, kind, args, device, measure_parts=round_index == 0)
            runs[kind].append(run)
            log.info("   %.3f s/step, %.0f tokens/s (steps %s s)", run["s_per_step"], run["tokens_per_s"] or 0,
                     ", ".join(f"{w:.2f}" for w in run["step_walls_s"]))
    ratios = [w["s_per_step"] / p["s_per_step"] for w, p in zip(runs["weighted"], runs["plain"], strict=True)]
    cpu_ratios = [w["cpu_s_per_step"] / p["cpu_s_per_step"] for w, p in zip(runs["weighted"], runs["plain"],
                                                                              strict=True)
                  if p["cpu_s_per_step"] > 0]
    same_tokens = all(r["step_tokens"] == runs["plain"][0]["step_tokens"] for k in RUNS for r in runs[k])
    extra = runs["weighted"][0].get("extra_work")
    summary = {kind: {"s_per_step": round(statistics.median(r["s_per_step"] for r in runs[kind]), 4),
                      "tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in runs[kind]), 1),
                      "cpu_s_per_step": round(statistics.median(r["cpu_s_per_step"] for r in runs[kind]), 4)}
               for kind in RUNS}
    return {
        "model": str(subject.folder) if subject.name != "tiny" else "tests/model_support.build_tiny_llama",
        "parameters": subject.parameters(),
        "max_length": subject.max_length,
        "train_examples": runs["plain"][0]["train_examples"],
        "tokens_per_step": runs["plain"][0]["step_tokens"],
        "same_tokens_every_run": same_tokens,
        "runs": runs,
        "summary": summary,
        "ratios": [round(r, 4) for r in ratios],
        "median_ratio": round(statistics.median(ratios), 4),
        "cpu_ratios": [round(r, 4) for r in cpu_ratios],
        "median_cpu_ratio": round(statistics.median(cpu_ratios), 4) if cpu_ratios else None,
        "extra_work": extra,
        "extra_work_share": round(extra["extra_ms_per_step"] / 1000.0 / summary["plain"]["s_per_step"], 5)
        if extra and summary["plain"]["s_per_step"] > 0 else None,
    }


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

def render_table(results: dict[str, Any]) -> str:
    a = results["args"]
    lines = [f"SFT step time: weighted think-loss (ThinkWeightedSFTTrainer, think_weight {a['think_weight']:g}) "
             f"vs plain TRL SFTTrainer (assistant-only loss)",
             f"{a['conversations']} conversations, batch {a['batch']} x grad accumulation {a['grad_accumulation']}, "
             f"LoRA r={a['lora_r']}, {a['warmup_steps']} warm-up + {a['steps']} timed optimizer steps per run, "
             f"runs alternated weighted/plain x {a['repeat']}; device {results['device']}, "
             f"{results['torch_threads']} torch threads"]
    header = (f"{'model':<9} {'max len':>7} {'run':<9} {'s/step':>8} {'tok/s':>8} {'cpu s/step':>10} "
              f"{'tok/step':>8} {'ratio':>7}  per round")
    lines += ["", header, "-" * len(header)]
    for name, m in results["models"].items():
        tok_step = sum(m["tokens_per_step"]) / max(len(m["tokens_per_step"]), 1)
        for kind in RUNS:
            s = m["summary"][kind]
            per_round = ", ".join(f"{r['s_per_step']:.3f}" for r in m["runs"][kind])
            ratio_col = f"{m['median_ratio']:.3f}" if kind == "weighted" else "1.000"
            per = f"{per_round} s" + (f"  (ratios {', '.join(f'{r:.3f}' for r in m['ratios'])})"
                                      if kind == "weighted" else "")
            lines.append(f"{name:<9} {m['max_length']:>7} {kind:<9} {s['s_per_step']:>8.3f} {s['tokens_per_s']:>8.1f} "
                         f"{s['cpu_s_per_step']:>10.3f} {tok_step:>8.0f} {ratio_col:>7}  {per}")
    lines += ["",
              "s/step, tok/s, cpu s/step: median over the rounds of each run's mean over its timed steps; ratio = "
              "weighted / plain s/step, median of the per-round ratios (> 1: the weighted loss is slower).",
              "tok/step: tokens of the batches (padding excluded) per optimizer step."]
    for name, m in results["models"].items():
        if m["median_cpu_ratio"] is not None:
            lines.append(f"{name}: cpu-time ratio {m['median_cpu_ratio']:.3f} (per round "
                         f"{', '.join(f'{r:.3f}' for r in m['cpu_ratios'])}); {m['train_examples']} of "
                         f"{a['conversations']} conversations trained (TRL drops those with no assistant token "
                         f"left); same tokens in every run: {str(m['same_tokens_every_run']).lower()}")
    for name, m in results["models"].items():
        x = m.get("extra_work")
        if x:
            lines.append(f"{name}: extra work of the weighted loss, timed apart (best of {x['repeat']}): collate "
                         f"{x['collate_weighted_ms']:.2f} vs {x['collate_plain_ms']:.2f} ms, loss reduction "
                         f"{x['loss_weighted_ms']:.3f} vs {x['loss_plain_ms']:.3f} ms per micro-batch -> "
                         f"{x['extra_ms_per_step']:.2f} ms per step = {m['extra_work_share']:.3%} of the plain step")
    lines.append("")
    for name, m in results["models"].items():
        if name == "tiny":
            continue
        overhead = m["median_ratio"] - 1.0
        passed = verdict(overhead <= TARGET_OVERHEAD)
        detail = [f"cpu time {m['median_cpu_ratio'] - 1.0:+.1%}"] if m["median_cpu_ratio"] is not None else []
        if m.get("extra_work_share") is not None:
            detail.append(f"extra work timed apart {m['extra_work_share']:+.3%}")
        lines.append(f"  {passed}  weighted think-loss overhead <= {TARGET_OVERHEAD:.0%}    "
                     f"{name:<9} wall {overhead:+.1%}" + (f"  ({'; '.join(detail)})" if detail else ""))
    lines.append(load_footer(results))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------

TOY = {"models": ["tiny"], "data": None, "conversations": 4, "tiny_max_length": 512, "steps": 2, "warmup_steps": 1,
       "repeat": 1, "threads": 1}


def build_parser(name: str = "sft", description: str | None = None) -> BenchParser:
    """bench/sft.py's options (bench/sft_precision.py reuses them under its own name)."""
    parser = BenchParser(
        name, description=description or __doc__.split("\n\n")[0],
        epilog="See docs/benchmarks.md for the method and the results.",
        toy=TOY, toy_note="the tiny model only, on generated two-round conversations about the solar graph",
        repeat=QUICK["repeat"], repeat_aliases=("--rounds",),
        repeat_help=f"runs of each trainer, in turn (quick: {QUICK['repeat']})",
        seed_help="training seed (the data order)", params=False)
    parser.add_argument("--quick", action="store_true",
                        help="the quick sizes (the default): 8 conversations, max length 512 (tiny model 2048), "
                             "1 warm-up + 4 timed steps, 2 rounds; options given explicitly still win")
    parser.add_argument("--models", nargs="+", choices=["smollm2", "tiny"], default=["smollm2", "tiny"],
                        help="which models to run")
    parser.add_argument("--model", type=Path, default=ROOT / "artifacts" / "models" / "smollm2",
                        help="the base model folder (HF) of the 'smollm2' runs")
    parser.add_argument("--data", type=Path,
                        default=ROOT / "artifacts" / "sft" / "conversations" / "conversations.jsonl",
                        help="the SFT conversations (ShareGPT JSON lines)")
    parser.add_argument("--conversations", type=int, metavar="N", help="the first N conversations (quick: 8)")
    parser.add_argument("--max-length", type=int, metavar="N",
                        help="tokens per conversation, longer ones truncated (quick: 512)")
    parser.add_argument("--tiny-max-length", type=int, metavar="N",
                        help="the same for the tiny model, whose tokenizer needs ~3x the tokens (quick: 2048)")
    parser.add_argument("--steps", type=int, metavar="N", help="timed optimizer steps per run (quick: 4)")
    parser.add_argument("--warmup-steps", type=int, metavar="N",
                        help="untimed optimizer steps at the start of every run (quick: 1)")
    parser.add_argument("--batch", type=int, metavar="N", default=1, help="per-device batch")
    parser.add_argument("--grad-accumulation", type=int, metavar="N", default=2, help="gradient accumulation")
    parser.add_argument("--lora-r", type=int, metavar="N", default=8, help="LoRA rank")
    parser.add_argument("--lora-alpha", type=int, metavar="N", default=16, help="LoRA alpha")
    parser.add_argument("--think-weight", type=float, default=0.001, help="the weighted trainer's think_weight")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="auto: CUDA when available, else CPU")
    parser.add_argument("--bf16", choices=["auto", "true", "false"], default="auto",
                        help="auto: bf16 mixed precision on a CUDA GPU or a CPU with native bf16 (as train_sft)")
    parser.add_argument("--activation-checkpointing", action="store_true",
                        help="recompute activations in backward (params.yaml sft.gradient_checkpointing: false; "
                             "TRL's SFTConfig would turn it on)")
    parser.add_argument("--threads", type=int, metavar="N", default=0,
                        help="torch threads (0: torch's default for this machine)")
    return parser


def check_args(parser: BenchParser, args: argparse.Namespace) -> argparse.Namespace:
    """The quick sizes where not given, the bounds; with --toy and no --data, generated conversations."""
    for key, value in QUICK.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for key in ("conversations", "max_length", "tiny_max_length", "steps", "repeat", "batch", "grad_accumulation",
                "lora_r"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be >= 1")
    if args.warmup_steps < 0:
        parser.error("--warmup-steps must be >= 0")
    if args.data is None:  # --toy
        args.data = toy_conversations(count=args.conversations)
    return args


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    return check_args(parser, parser.parse_args(argv))


def parse_variant_args(name: str, doc: str, argv: list[str] | None, toy: dict[str, Any],
                       options: Callable[[BenchParser], None] | None = None, **defaults: Any) -> argparse.Namespace:
    """The options of a benchmark that runs bench/sft.py's SmolLM2 subject two ways (sft_precision,
    sft_packing): these options (and the ones ``options`` adds) with its ``defaults``; --toy: ``toy`` and the tiny
    random llama."""
    parser = build_parser(name, description=doc.split("\n\n")[0])
    if options is not None:
        options(parser)
    parser.set_defaults(models=["smollm2"], **defaults)
    parser.set_toy(model=None, **toy)
    args = check_args(parser, parser.parse_args(argv))
    if args.model is None:  # --toy
        args.model = tiny_model()
    return args


QUIET_LOGGERS = ("httpx", "urllib3", "filelock", "huggingface_hub", "datasets", "transformers", "peft", "trl",
                 "accelerate")


def quiet_training_logs(verbose: bool) -> None:
    """Logging set up, the training libraries' warnings, verbosity and progress bars off (they would bury
    the benchmark's own lines)."""
    setup_logging(verbose, QUIET_LOGGERS)
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    try:
        import datasets

        datasets.disable_progress_bars()
        datasets.logging.set_verbosity_error()
    except ImportError:
        pass


def start_variant(args: argparse.Namespace) -> tuple[str, float, list[dict[str, Any]]]:
    """A variant benchmark's start: quiet logs, the torch threads asked for; (device, start time, the
    conversations of ``--data``)."""
    quiet_training_logs(args.verbose)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    return resolve_device(args.device), time.perf_counter(), read_conversations(args.data, args.conversations)


def span(values: list[float], digits: int) -> str:
    """A table cell over the rounds: one value, or the lowest and the highest: "23.0", "17.0-18.9"."""
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}-{high}"


def speedup_cell(result: dict[str, Any], target: float) -> str:
    """The table cell of a two-way benchmark's speed-up: the median of the rounds' in bold, each round's and the
    verdict against ``target`` ("**1.35** (per round 1.21, 1.50; PASS)"); "-" when it could not be measured."""
    median = result["median_speedup"]
    if median is None:
        return "-"
    rounds = ", ".join(f"{x:.2f}" for x in result["speedups"])
    return f"**{median:.2f}** (per round {rounds}; {verdict(median >= target)})"


def printed_then_table(details: Callable[[dict[str, Any]], str],
                       table: Callable[[dict[str, Any]], str]) -> Callable[[dict[str, Any]], str]:
    """A variant benchmark's report: its plain-text ``details`` printed, its Markdown ``table`` returned (what
    write_results stores, prints and bench/tables.py puts into docs/benchmarks.md)."""
    def report(results: dict[str, Any]) -> str:
        print("\n" + details(results))
        return table(results)
    return report


def finish_variant(results: dict[str, Any], table: Callable[[dict[str, Any]], str], args: argparse.Namespace,
                   started: float) -> int:
    """The load average at the end, then the results written and the table printed; the exit status."""
    results["load_average"]["end"] = load_average()
    write_results(results, table(results), args.out, started)
    return 0


def variant_results(name: str, args: argparse.Namespace, device: str) -> dict[str, Any]:
    """The head of a two-way benchmark's results (sft_precision, sft_packing): what ran where, the load."""
    return {"benchmark": name, "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine_info(), "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
            "torch_threads": torch.get_num_threads(), "args": args_record(args), "model": str(args.model),
            "load_average": {"start": load_average()}}


def run_rows(summary: dict[str, dict[str, float]], columns: list[tuple[str, str, int, int]],
             width: int = 9) -> list[str]:
    """A variant table's header, rule and one row per run: ``columns`` are (title, summary key, width, decimals)."""
    head = f"{'run':<{width}}" + "".join(f" {title:>{w}}" for title, _, w, _ in columns)
    rows = [f"{kind:<{width}}" + "".join(f" {values[key]:>{w}.{d}f}" for _, key, w, d in columns)
            for kind, values in summary.items()]
    return [head, "-" * len(head), *rows]


def sizes_line(args: dict[str, Any], runs: str) -> str:
    """A variant table's second line: the data and step sizes of each run, and how the runs (``runs``) alternated."""
    return (f"{args['conversations']} conversations, max length {args['max_length']}, batch {args['batch']} x grad "
            f"accumulation {args['grad_accumulation']}, {args['warmup_steps']} warm-up + {args['steps']} timed steps "
            f"per run, runs alternated {runs} x {args['repeat']}")


def speedup_footer(results: dict[str, Any], label: str, claim: str, target: float,
                   gap_format: str = ".2%") -> list[str]:
    """A variant table's last lines: the speed-up of each round (``label``), the largest gap between the two runs'
    losses of the same step, the verdict on ``claim`` (the median speed-up >= ``target``) and the load footer."""
    m = results["result"]
    gap = "" if "max_relative_loss_gap" not in m else ("; largest relative gap between the two runs' losses of the "
                                                        f"same step: {m['max_relative_loss_gap']:{gap_format}}")
    return ["", f"{label} per round: {', '.join(f'{x:.2f}' for x in m['speedups'])}{gap}",
            f"  {verdict(m['median_speedup'] >= target)}  {claim}   median {m['median_speedup']:.2f}x",
            load_footer(results)]


def run_variant(name: str, argv: list[str] | None, parse_args: Callable[[list[str] | None], argparse.Namespace],
                run_pair: Callable[[Any, argparse.Namespace, str], dict[str, Any]],
                table: Callable[[dict[str, Any]], str]) -> int:
    """A two-way benchmark on the SmolLM2 subject of ``--data``'s conversations (sft_precision, sft_lm_head,
    sft_lora_layers):
    its options, ``run_pair``'s result under ``result``, the table printed and the JSON written."""
    args = parse_args(argv)
    device, started, conversations = start_variant(args)
    results = variant_results(name, args, device)
    subject = Subject("smollm2", args.model, conversations, args.max_length, args)
    results["result"] = run_pair(subject, args, device)
    return finish_variant(results, table, args, started)


def load_footer(results: dict[str, Any]) -> str:
    """The table's last line: cores and the load average at start and end (how far from idle the run was)."""
    load = results["load_average"]
    return (f"\n{results['machine']['cpu_cores']} CPU cores; load average at start {load['start'][0]}, "
            f"at end {load['end'][0]}.")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_training_logs(args.verbose)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    started = time.perf_counter()
    conversations = read_conversations(args.data, args.conversations)

    import peft
    import transformers
    import trl

    results: dict[str, Any] = {
        "benchmark": "sft",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch_threads": torch.get_num_threads(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
                     "peft": peft.__version__},
        "args": args_record(args),
        "data": {"path": str(args.data), "conversations": len(conversations)},
        "load_average": {"start": load_average()},
        "models": {},
    }
    log.info("device %s, %d torch threads, %d conversations", results["device"], results["torch_threads"],
             len(conversations))
    with tempfile.TemporaryDirectory(prefix="omne-bench-sft-tiny-") as tiny_dir:
        for name in args.models:
            if name == "smollm2":
                folder, max_length = args.model, args.max_length
            else:
                folder, max_length = tiny_model(Path(tiny_dir) / "tiny-llama"), args.tiny_max_length
            log.info("== %s (%s), max length %d", name, folder, max_length)
            subject = Subject(name, folder, conversations, max_length, args)
            results["models"][name] = bench_subject(subject, args, device)
            del subject
            settle()
    results["load_average"]["end"] = load_average()
    write_results(results, render_table(results), args.out, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
