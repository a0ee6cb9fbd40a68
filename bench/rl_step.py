#!/usr/bin/env python
"""Benchmark of one GRPO step's rollouts: seeds mixed in one batch vs one at a time, or LoRA merged vs unmerged.

A GRPO step rolls out ``--generations`` samples of each of its ``--questions`` training questions at
temperature ``--temperature``; each rollout carries its own seed (the step's seed + its sample number), as
``ToolRollouts`` builds them (``numbered_samples``, ``rollout_seed``). The transformers backend samples such
requests together (``TransformersBackend.mixes_seeds``: one generator seeded by all of the batch's seeds,
``batch_seed``); before, requests were grouped by seed, so a step's rollouts generated one at a time. Every
speed is a RATIO against that baseline measured in the same process, the two in turn (the machines are
noisy: absolute timings move with the load, ratios much less):

* ours: the rollout client as it is (``client.backend.mixes_seeds`` True): a round's live rollouts in one
  ``generate`` call;
* baseline: the same client with ``client.backend.mixes_seeds = False`` on the instance: one seed per batch,
  one rollout per ``generate`` call (the behaviour before the change).

    .venv/bin/python bench/rl_step.py                          # 1 question x 4 samples, <= 128 tokens x 7 rounds
    .venv/bin/python bench/rl_step.py --questions 2 --repeat 5
    .venv/bin/python bench/rl_step.py --compare merge --model base --max-new-tokens 64 --max-rounds 3
    .venv/bin/python bench/rl_step.py --toy --out /tmp/bench   # smoke test: a tiny random llama, seconds

Everything else is RL's (``ToolRollouts.roll_out``): the questions are RL stage 3's own training sample
(``rl_questions``, its first ``--questions``), the protocol ``make_protocol`` with ``agent.protocol`` and
``--max-rounds`` rounds (so ``tools.prompt_specs`` apply), the real KG tools in process
(``InProcessToolClient(KGToolbox(params))``), ``RolloutEngine`` with ``RolloutParams.of_agent`` (the
sizes and seed given here, params.agent's episode rules) and a ``TransformersChatClient.from_model`` client on the
model (``--model``: the SFT model stage 3 starts from when artifacts/models/sft exists, else the base model;
loaded by ``load_agent_model``, an adapter merged in). The client's prefix store is emptied before every
timed run (RL makes a new client per step), the query-embedding cache too; one untimed warm-up run of each.

Reported per variant: wall seconds per step, generated tokens, generated tokens/s, model rounds, the
backend's ``generate`` calls and rows, the time inside the model's ``generate``; the speed-up (baseline
wall / ours wall) and the tokens/s ratio (ours / baseline), of the best runs and per round (median). The two
sample different tokens (one generator for the batch vs one per seed), so their token counts and rounds
differ: tokens/s is the fair comparison. Every round uses the same step seed, so each variant samples the same
tokens in every round (checked: ``same_tokens_every_round``) and its best wall time is its best tokens/s.
Target (PASS/MISS, never asserted): ours >= 2x the baseline's generated tokens/s.

``--compare merge`` measures another change instead: the policy RL trains is a PEFT model, the model above with a
new LoRA adapter on every linear layer of its blocks (``lora_config`` with ``rl.stage3``'s rank and alpha; its B
matrices drawn at random, std 0.02, so that it acts as a trained adapter does). RL's transformers rollouts now run
it with the adapters merged into the weights (``merged_adapter``):

* ours: the step's rollouts inside ``merged_adapter(policy)`` (each linear layer one product);
* baseline: the same policy unmerged (each linear layer its base product, the adapter's two small ones and PEFT's
  Python around them: RL's rollouts before the change).

The two use the same seeds and the same weights up to float rounding, so they sample the same tokens but where
rounding flips a draw (``same_rollouts``). Target: ours >= 1.2x the baseline's generated tokens/s.

See docs/benchmarks.md for the method and the results.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from typing import Any

import torch

# first: sets the offline environment and puts the project root on sys.path
from _common import (
    BenchParser,
    args_record,
    load_average,
    load_line,
    machine_info,
    ratio,
    verdict,
    write_results,
)
from rollout import (  # bench/rollout.py
    GenerateRecorder,
    add_device_options,
    best_of,
    check_device_options,
    signature,
    start,
    timed_run,
)

from pipelines.agent.client import InProcessToolClient
from pipelines.agent.models import BASE, load_agent_model
from pipelines.agent.rollout import RolloutEngine, RolloutParams, Task
from pipelines.agent.tools import KGToolbox
from pipelines.config import Params
from pipelines.eval.runner import make_protocol
from pipelines.layout import SFT_MODEL, model_dir
from pipelines.llm.local import TransformersChatClient
from pipelines.train.lora import lora_config, merged_adapter
from pipelines.train.rl.data import rl_questions
from pipelines.train.rl.rollouts import numbered_samples, rollout_seed

log = logging.getLogger("bench.rl_step")

STAGE = 3  # the questions and the seed are RL stage 3's
# --compare seeds: rollouts were ~15 s of a 20.8 s step before the change, 4 rollouts in one batch instead of 4;
# --compare merge: PEFT's adapter products and Python on each of the 210 linear layers of a decoding step
TARGET_SPEEDUP = {"seeds": 2.0, "merge": 1.2}
VARIANTS = ("baseline", "ours")
LABELS = {"seeds": {"baseline": "baseline (a seed per batch)", "ours": "ours (seeds mixed)"},
          "merge": {"baseline": "baseline (LoRA unmerged)", "ours": "ours (LoRA merged)"}}
LORA_B_STD = 0.02  # --compare merge: the adapter's B drawn at random (a new adapter's B is 0: no adapter at all)
TOY = {"max_new_tokens": 8, "max_rounds": 2, "repeat": 1, "device": "cpu"}


class GenerateCalls:
    """Wraps a client's ``backend.generate`` (instance attribute, this process only): its calls, their rows
    (requests) and the most rows in one call. One call per batch of the client: with seeds mixed, a round's live
    rollouts; grouped by seed, one rollout."""

    def __init__(self, backend: Any) -> None:
        self.inner = backend.generate
        backend.generate = self
        self.reset()

    def reset(self) -> None:
        self.calls = self.rows = self.max_rows = 0

    def __call__(self, prompts: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        self.rows += len(prompts)
        self.max_rows = max(self.max_rows, len(prompts))
        return self.inner(prompts, *args, **kwargs)

    def record(self) -> dict[str, Any]:
        return {"backend_generate_calls": self.calls, "backend_generate_rows": self.rows,
                "backend_max_rows": self.max_rows,
                "rows_per_call": round(self.rows / self.calls, 3) if self.calls else None}


@contextmanager
def seeds_per_batch(client: Any, variant: str) -> Iterator[None]:
    """The baseline: ``mixes_seeds`` False on the client's backend (requests grouped by seed); ours: as it is."""
    backend = client.backend
    if variant == "baseline":
        backend.mixes_seeds = False
    try:
        yield
    finally:
        vars(backend).pop("mixes_seeds", None)  # back to the class's value


def variant_context(compare: str, client: Any, variant: str) -> Any:
    """What a variant changes around its rollouts: the seeds' grouping, or (merge) the adapters merged for ours."""
    if compare == "seeds":
        return seeds_per_batch(client, variant)
    return merged_adapter(client.lm) if variant == "ours" else nullcontext()


def lora_policy(lm: Any, params: Params, seed: int) -> Any:
    """The policy RL would train from ``lm``: a PEFT model with ``rl.stage3``'s LoRA on every linear layer of the
    blocks, its B matrices drawn (std ``LORA_B_STD``) so that the adapters change the outputs, in eval mode."""
    from peft import get_peft_model

    stage = params.rl.stage3
    policy = get_peft_model(lm, lora_config(lm, r=stage.lora_r, alpha=stage.lora_alpha, layers=stage.lora_layers))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * LORA_B_STD)
    return policy.eval()


# --------------------------------------------------------------------------------------------
# Setup
# --------------------------------------------------------------------------------------------

def build_parser() -> BenchParser:
    parser = BenchParser(
        "rl_step", description=__doc__.split("\n\n")[0],
        epilog=f"Target (printed as PASS/MISS, never asserted): ours >= {TARGET_SPEEDUP['seeds']:g}x (--compare merge: "
               f"{TARGET_SPEEDUP['merge']:g}x) the baseline's generated "
               "tokens/s.\nResults: a table on stdout, every number in --out (default: bench/results/).",
        toy=TOY, toy_note="the throw-away project's solar QA dataset (built in-process) and a tiny random llama as "
                          "the base model",
        repeat=3, repeat_help="rounds of baseline then ours, in turn; the best run of each kept, the per-round "
                              "ratios' median reported too",
        seed=None, seed_help=f"RL's training seed: the step's seed is rollout_seed(seed, 0) (default: params "
                             f"rl.stage{STAGE}.seed)")
    parser.add_argument("--compare", choices=("seeds", "merge"), default="seeds",
                        help="seeds: a step's rollouts sampled together (ours) vs one seed per batch (baseline); "
                             "merge: the LoRA policy RL trains generating with its adapters merged (ours) vs "
                             "unmerged (baseline)")
    parser.add_argument("--model", default=None, metavar="PATH",
                        help="'sft' (artifacts/models/sft, the model stage 3 starts from), 'base' (params "
                             "agent.base_model), a transformers folder or a PEFT adapter folder (default: sft when "
                             "it exists, else base)")
    parser.add_argument("--questions", type=int, default=1, metavar="N",
                        help=f"training questions of the step: the first N of RL stage {STAGE}'s own sample "
                             f"(rl_questions: the train split, data_mix, stable_sample)")
    parser.add_argument("--generations", type=int, default=4, metavar="N", help="rollouts (samples) per question")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (> 0)")
    parser.add_argument("--max-new-tokens", type=int, default=128, metavar="N",
                        help="generated tokens per round (quick rl.stage3.max_new_tokens)")
    parser.add_argument("--max-rounds", type=int, default=7, metavar="N",
                        help="model turns per rollout (quick stage 3: agent.max_rounds)")
    add_device_options(parser)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("questions", "generations", "max_new_tokens", "max_rounds", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.temperature <= 0:
        parser.error("--temperature must be > 0 (greedy requests never had a seed of their own)")
    check_device_options(parser, args)
    return args


def bench_params(params: Params, args: argparse.Namespace) -> Params:
    """The transformers backend (RL's rollouts with rl.stage3.backend transformers) and the rounds asked for."""
    agent = params.agent.model_copy(update={"max_rounds": args.max_rounds, "backend": "transformers",
                                            "device": args.device})
    return params.model_copy(update={"agent": agent})


def model_spec(choice: str | None, params: Params) -> str:
    """--model as load_agent_model takes it: 'sft' is the SFT model's folder; unset, that folder when it exists."""
    sft = model_dir(params.artifacts_dir, SFT_MODEL)
    if choice == "sft" or (choice is None and sft.is_dir()):
        if not sft.is_dir():
            raise SystemExit(f"--model sft: {sft} does not exist (run `omne sft train` first)")
        return str(sft)
    return choice or BASE


def step_tasks(params: Params, questions: int, generations: int) -> list[Task]:
    """A step's rollouts: each of the first ``questions`` of the stage's training sample ``generations`` times in a
    row (as TRL repeats a prompt), numbered as ``ToolRollouts`` numbers them."""
    pairs = rl_questions(params, STAGE)[:questions]
    if not pairs:
        raise SystemExit(f"rl.stage{STAGE}: no training questions in the train split")
    return numbered_samples([Task(qa_id=p.id, domain=p.domain, question=p.question, gold_answers=p.answers,
                                  bucket=p.bucket, hops=p.hops) for p in pairs for _ in range(generations)])


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

def render(results: dict[str, Any]) -> str:
    setup = results["setup"]
    out = [(f"rl_step ({setup['compare']}): one GRPO step's rollouts: {setup['questions']} question(s) of RL stage "
            f"{STAGE}'s training "
            f"sample x {setup['generations']} samples at temperature {setup['temperature']:g}, seeds "
            f"{setup['step_seed']} + sample; protocol {setup['protocol']} ({setup['mode']}), model {setup['model']}, "
            f"<= {setup['max_new_tokens']} new tokens x {setup['max_rounds']} rounds, in-process KG tools, client "
            f"batch {setup['batch_size']}"),
           (f"device {setup['device']} ({setup['dtype']}"
            + (f", {setup['torch_threads']} torch threads" if setup["device"] == "cpu" else "")
            + f"); {setup['repeat']} round(s) of baseline then ours, best run of each kept")]
    head = (f"{'variant':<28} {'s/step':>8} {'gen tok':>7} {'gen tok/s':>9} {'rounds':>6} {'answered':>8} "
            f"{'generate':>8} {'rows':>5} {'max rows':>8} {'in gen':>6}")
    out += ["", head, "-" * len(head)]
    for variant in VARIANTS:
        m = results[variant]
        answered = f"{m['answered']}/{m['questions']}"
        out.append(f"{LABELS[setup['compare']][variant]:<28} {m['wall_s']:>8.2f} {m['generated_tokens']:>7} "
                   f"{m['generated_tokens_per_s']:>9.1f} {m['turns']:>6} {answered:>8} "
                   f"{m['backend_generate_calls']:>8} {m['backend_generate_rows']:>5} {m['backend_max_rows']:>8} "
                   f"{(m.get('generate_share') or 0) * 100:>5.0f}%")
    out += [
        "",
        f"speed-up (baseline s / ours s): {results['speedup']}x best runs, median {results['median_speedup']}x "
        f"(per round: {', '.join(str(x) for x in results['speedups'])})",
        f"tokens/s ratio (ours / baseline): {results['throughput_ratio']}x best runs, median "
        f"{results['median_throughput_ratio']}x (per round: {', '.join(str(x) for x in results['throughput_ratios'])})",
        (("the two sample different tokens (one generator for the batch vs one per seed): their token counts and "
          "rounds differ, tokens/s is the fair comparison. " if setup["compare"] == "seeds" else
          f"the same seeds and weights up to rounding: {results['same_rollouts']} of {setup['rollouts']} rollouts "
          "the same in both (best runs). ")
         + "generate/rows = the backend's generate calls and their requests; in gen = share of the wall time inside "
           "the model's generate."),
        (f"distinct rollouts of a question: baseline {results['baseline']['distinct_rollouts']}, ours "
         f"{results['ours']['distinct_rollouts']} of {setup['rollouts']}; same tokens in every round: "
         + ", ".join(f"{v} {str(results['same_tokens_every_round'][v]).lower()}" for v in VARIANTS)),
    ]
    out += [f"  {verdict(t['pass'])}  {t['target']}  {t['value']}{t['unit']}" for t in results["targets"]]
    out.append(load_line(results["machine"]))
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started, load_start = time.perf_counter(), load_average()
    params = start(args, bench_params)
    stage_seed = params.rl.stage3.seed if args.seed is None else args.seed
    tasks = step_tasks(params, args.questions, args.generations)

    t0 = time.perf_counter()
    toolbox = KGToolbox(params)
    toolbox.load_all()
    toolbox._embed("warm-up")  # noqa: SLF001 - loads the query encoder outside the timings
    tools = InProcessToolClient(toolbox)
    loaded = load_agent_model(model_spec(args.model, params), params)
    size = max(1, min(len(tasks), params.agent.batch_size))  # as ToolRollouts.roll_out
    lm = lora_policy(loaded.lm, params, stage_seed) if args.compare == "merge" else loaded.lm
    client = TransformersChatClient.from_model(lm, loaded.tokenizer, name=loaded.model, batch_size=size,
                                               prefix_cache_mb=params.agent.prefix_cache_mb)
    calls = GenerateCalls(client.backend)
    recorder = GenerateRecorder(client.lm, client)
    dtype = str(next(client.lm.parameters()).dtype).removeprefix("torch.")
    log.info("model %s on %s (%s), tools loaded, in %.1f s", client.model, client.device, dtype,
             time.perf_counter() - t0)

    protocol = make_protocol(params, params.agent.protocol, None)
    step_seed = rollout_seed(stage_seed, 0)
    rollout = RolloutParams.of_agent(params.agent, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                     batch_size=size, seed=step_seed)
    engine = RolloutEngine(client, protocol, tools, rollout, name=protocol.name)

    t0 = time.perf_counter()  # warm-up (untimed): batch-1 and batch-N generate calls, stop-string tables, tools
    warm = RolloutEngine(client, protocol, tools, rollout.model_copy(
        update={"max_new_tokens": min(8, args.max_new_tokens)}), name="warm-up")
    for variant in VARIANTS:
        with variant_context(args.compare, client, variant):
            warm.run(tasks, progress=False)
    log.info("warm-up in %.1f s", time.perf_counter() - t0)

    progress = sys.stderr.isatty()
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    signatures: dict[str, list[tuple]] = {v: [] for v in VARIANTS}
    log.info("%d rollouts (%d question(s) x %d), temperature %g, step seed %d; baseline then ours, x%d", len(tasks),
             args.questions, args.generations, args.temperature, step_seed, args.repeat)
    for index in range(args.repeat):
        log.info("  round %d of %d", index + 1, args.repeat)
        for variant in VARIANTS:
            calls.reset()
            with variant_context(args.compare, client, variant):
                trajectories, m = timed_run(variant, engine, tasks, recorder, progress)  # empties the prefix store
            m.update(calls.record())
            signature_ = tuple(signature(t) for t in trajectories)
            m["distinct_rollouts"] = len(set(signature_))
            runs[variant].append(m)
            signatures[variant].append(signature_)

    best = {v: best_of(runs[v]) for v in VARIANTS}
    kept = {v: signatures[v][min(range(len(runs[v])), key=lambda i, v=v: runs[v][i]["wall_s"])]
            for v in VARIANTS}  # the best (fastest) run's rollouts, as best_of picks it

    def median(values: list[float | None]) -> float | None:
        known = [x for x in values if x is not None]
        return ratio(statistics.median(known), 1.0) if known else None

    speedups = [ratio(b["wall_s"], o["wall_s"]) for b, o in zip(runs["baseline"], runs["ours"], strict=True)]
    throughputs = [ratio(o["generated_tokens_per_s"], b["generated_tokens_per_s"])
                   for b, o in zip(runs["baseline"], runs["ours"], strict=True)]
    throughput = ratio(best["ours"]["generated_tokens_per_s"], best["baseline"]["generated_tokens_per_s"])
    results: dict[str, Any] = {
        "benchmark": "rl_step",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {**machine_info(), "load_average_at_start": load_start, "torch": torch.__version__,
                    "torch_threads": torch.get_num_threads(), "cuda_available": torch.cuda.is_available()},
        "args": args_record(args),
        "setup": {"compare": args.compare, "questions": args.questions, "generations": args.generations,
                  "rollouts": len(tasks),
                  "qa_ids": sorted({t.qa_id for t in tasks}), "question_choice": f"rl_questions(params, {STAGE})",
                  "temperature": args.temperature, "stage_seed": stage_seed, "step_seed": step_seed,
                  "protocol": protocol.name, "mode": protocol.mode, "model": client.model,
                  "device": client.device, "dtype": dtype, "torch_threads": torch.get_num_threads(),
                  "batch_size": size, "max_new_tokens": args.max_new_tokens, "max_rounds": args.max_rounds,
                  "max_same_call": params.agent.max_same_call, "prefix_cache_mb": params.agent.prefix_cache_mb,
                  "repeat": args.repeat, "profile": params.profile},
        **best,
        "speedup": ratio(best["baseline"]["wall_s"], best["ours"]["wall_s"]),
        "throughput_ratio": throughput,
        "speedups": speedups, "median_speedup": median(speedups),
        "throughput_ratios": throughputs, "median_throughput_ratio": median(throughputs),
        "same_tokens_every_round": {v: len(set(signatures[v])) == 1 for v in VARIANTS},
        "same_rollouts": sum(a == b for a, b in zip(kept["baseline"], kept["ours"], strict=True)),
        "note": ("the two variants sample different tokens (one generator for the batch vs one per seed): token "
                 "counts and rounds differ; tokens/s is the fair comparison" if args.compare == "seeds" else
                 "the same seeds, the weights equal up to rounding: same_rollouts counts the rollouts both sampled "
                 "alike"),
    }
    results["machine"]["load_average_at_end"] = load_average()
    target = TARGET_SPEEDUP[args.compare]
    results["targets"] = [{"target": f"ours >= {target:g}x the baseline's generated tokens/s",
                           "value": throughput or 0.0, "unit": "x",
                           "pass": None if throughput is None else throughput >= target}]
    log.info("ours %.2f s vs baseline %.2f s per step: %sx; tokens/s %sx", best["ours"]["wall_s"],
             best["baseline"]["wall_s"], results["speedup"], throughput)
    write_results(results, render(results), args.out, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
