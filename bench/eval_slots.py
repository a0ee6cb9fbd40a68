#!/usr/bin/env python
"""Benchmark of an evaluation's rollouts: rolling slots (an ended episode's slot refilled next round) vs fixed batches.

``omne eval`` rolls its questions out with ``RolloutEngine``: ``agent.batch_size`` episodes at a time, one model
turn of each live one per round (one batched ``complete_many``), then their tool calls, until all of them have
ended; then the next ``batch_size``. The last rounds of each batch decode its few long episodes while the other
slots stay empty. The candidate fills them: each episode at its own round, and one that ends frees its slot for the
next task at the next round. Every speed is a RATIO against the baseline measured in the same process, the two in
turn (the machines are noisy: absolute timings move with the load, ratios much less):

* baseline: ``RolloutEngine`` as it is (fixed batches);
* ours: ``RollingSlots``, a subclass defined here whose ``run`` refills the slots out of the engine's own pieces
  (``_start``, ``_round``, ``_finish``). Only the scheduling differs. (Measured on the 2-core CPU, 2026-11-26: no
  faster, 0.98x, with the same trajectories, so the engine keeps fixed batches; docs/benchmarks.md.)

    .venv/bin/python bench/eval_slots.py                          # omne eval's 40 + 40 test questions, agent.backend
    .venv/bin/python bench/eval_slots.py --limit 8 --repeat 1      # 8 + 8 questions, one run of each
    .venv/bin/python bench/eval_slots.py --toy --out /tmp/bench   # smoke test: a tiny random llama, seconds

Everything else is ``omne eval``'s (``pipelines.eval.runner.evaluate``): the questions of ``question_source`` (the
``--split`` split, a stable sample of ``--limit`` per bucket), ``source.tasks`` with ``eval.samples``, the KG tools in
process (``InProcessToolClient(source.toolbox)``), ``make_protocol`` with ``agent.protocol``, the model of
``load_agent_model`` on ``--backend`` (``agent.backend``: onnx by default, converted once per model; ``--model``: the
SFT model when artifacts/models/sft exists, else the base model) and ``RolloutParams.of_agent(params.agent,
seed=eval.seed)``. The client's prefix store and the query-embedding cache
are emptied before every timed run; one untimed short warm-up run of each variant first. One torch thread by default
(``--threads``, as bench/rollout.py: steadier on a shared machine; the onnx backend takes torch's setting);
``--threads 0`` is omne eval's own (one per core), the setting for the 120 s target.

Reported per variant: wall seconds, questions/s, generated tokens and tokens/s, the model calls (the client's
``complete_many``: one per round of the engine) and their rows (live episodes: mean, histogram, the list), the
share of the wall time inside them, EM (``exact_match``, as the report's); the speed-up (baseline wall / ours
wall) of the best runs and per round; whether the trajectories are the same (``signature`` per task) and, where
greedy batched decoding with other padding flipped a near-tie, how many differ and each variant's EM.
Targets (PASS/MISS, never asserted): 80 questions evaluated in <= 120 s (n/a with fewer questions), and ours
>= 1.2x the baseline's wall speed.

See docs/benchmarks.md for the method and the results.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from collections import Counter
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
from rl_step import model_spec  # bench/rl_step.py: --model as load_agent_model takes it
from rollout import (  # bench/rollout.py
    GenerateRecorder,
    add_device_options,
    best_of,
    check_device_options,
    signature,
    start,
    timed_run,
)
from tqdm.auto import tqdm

from pipelines.agent.client import InProcessToolClient
from pipelines.agent.models import load_agent_model
from pipelines.agent.rollout import RolloutEngine, RolloutParams, Task
from pipelines.agent.trajectory import Trajectory
from pipelines.config import Params
from pipelines.eval.answers import exact_match
from pipelines.eval.runner import make_protocol, question_source
from pipelines.llm.generation import LOCAL_BACKENDS
from pipelines.llm.onnx_export import ONNX_PRECISIONS

log = logging.getLogger("bench.eval_slots")

TARGET_SPEEDUP = 1.2  # ours >= 1.2x the baseline's wall speed
TARGET_QUESTIONS, TARGET_WALL_S = 80, 120.0  # issue: "evaluating 80 test questions with the SFT model <= 2 minutes"
VARIANTS = ("baseline", "ours")
LABELS = {"baseline": "baseline (fixed batches)", "ours": "rolling slots"}
TOY = {"split": "train", "limit": 3, "batch_size": 2, "max_new_tokens": 8, "max_rounds": 2, "repeat": 1,
       "device": "cpu", "threads": 1}


class RollingSlots(RolloutEngine):
    """The candidate scheduler: up to ``batch_size`` episodes live, each at its own round; one that ends frees its
    slot for the next task at the next round, so that every call decodes a full batch until the tasks run out.
    Built from the engine's own ``_start``, ``_round`` and ``_finish``, so that the two differ in scheduling only."""

    def run(self, tasks: list[Task], *, progress: bool = True) -> list[Trajectory]:
        results: list[Trajectory | None] = [None] * len(tasks)
        waiting = iter(enumerate(tasks))
        live: list[tuple[int, Any]] = []
        with tqdm(total=len(tasks), desc=f"rollouts {self.name}", unit="q", disable=not progress) as bar:
            while True:
                while len(live) < self.params.batch_size and (task := next(waiting, None)) is not None:
                    live.append((task[0], self._start(task[1])))
                if not live:
                    break
                self._round([episode for _, episode in live])
                for index, episode in live:
                    if episode.done:
                        results[index] = self._finish(episode)
                        bar.update(1)
                live = [(index, episode) for index, episode in live if not episode.done]
        return results  # type: ignore[return-value]


class ModelCalls:
    """Wraps a client's ``complete_many`` (instance attribute, this process only): the rows (requests) of each call and
    the seconds inside. The engine makes one call per round with its live episodes, so the rows say how full the
    batch was; with fixed batches they fall in the last rounds of each chunk."""

    def __init__(self, client: Any) -> None:
        self.inner = client.complete_many
        client.complete_many = self
        self.reset()

    def reset(self) -> None:
        self.rows: list[int] = []
        self.seconds = 0.0

    def __call__(self, requests: list[Any], *args: Any, **kwargs: Any) -> Any:
        self.rows.append(len(requests))
        t0 = time.perf_counter()
        try:
            return self.inner(requests, *args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0

    def record(self, wall: float) -> dict[str, Any]:
        calls = len(self.rows)
        return {"model_calls": calls, "model_rows": sum(self.rows),
                "rows_per_call": round(sum(self.rows) / calls, 3) if calls else None,
                "max_rows": max(self.rows, default=0),
                "rows_histogram": {str(k): n for k, n in sorted(Counter(self.rows).items())},
                "rows_by_call": list(self.rows), "model_s": round(self.seconds, 4),
                "model_share": round(self.seconds / wall, 4) if wall > 0 else None}


def em_of(trajectories: list[Trajectory]) -> dict[str, Any]:
    """EM as the report scores it (``exact_match``: the answer equals a gold answer after a whitespace strip)."""
    correct = sum(exact_match(t.answer, t.gold_answers) for t in trajectories)
    return {"correct": correct, "em": round(correct / len(trajectories), 4) if trajectories else None}


# --------------------------------------------------------------------------------------------
# Setup
# --------------------------------------------------------------------------------------------

def build_parser() -> BenchParser:
    parser = BenchParser(
        "eval_slots", description=__doc__.split("\n\n")[0],
        epilog=f"Targets (printed as PASS/MISS, never asserted): {TARGET_QUESTIONS} questions evaluated in <= "
               f"{TARGET_WALL_S:g} s; ours >= {TARGET_SPEEDUP:g}x the baseline's wall speed.\nResults: a table on "
               "stdout, every number in --out (default: bench/results/).",
        toy=TOY, toy_note="the throw-away project's solar QA dataset (built in-process) and a tiny random llama as "
                          "the base model",
        repeat=2, repeat_help="rounds of baseline then ours, in turn; the best run of each kept, the per-round "
                              "ratios' median reported too",
        seeded=False)
    parser.add_argument("--model", default=None, metavar="PATH",
                        help="'sft' (artifacts/models/sft), 'base' (params agent.base_model), a transformers folder "
                             "or a PEFT adapter folder (default: sft when it exists, else base)")
    parser.add_argument("--split", default=None, help="the questions' split (default: params eval.split)")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="questions per bucket, a stable sample as omne eval's (default: params eval.limit)")
    parser.add_argument("--batch-size", type=int, default=None, metavar="N",
                        help="live episodes (default: params agent.batch_size)")
    parser.add_argument("--backend", choices=LOCAL_BACKENDS, default=None,
                        help="who generates (default: params agent.backend)")
    parser.add_argument("--onnx-precision", choices=ONNX_PRECISIONS, default=None,
                        help="backend onnx: the conversion (default: params agent.onnx_precision)")
    parser.add_argument("--max-new-tokens", type=int, default=None, metavar="N",
                        help="generated tokens per round (default: params agent.max_new_tokens)")
    parser.add_argument("--max-rounds", type=int, default=None, metavar="N",
                        help="model turns per episode (default: params agent.max_rounds)")
    add_device_options(parser)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("limit", "batch_size", "max_new_tokens", "max_rounds", "repeat"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    check_device_options(parser, args)
    return args


def bench_params(params: Params, args: argparse.Namespace) -> Params:
    """params.yaml's agent section with the options given (the rest is what omne eval reads)."""
    given = {"backend": args.backend, "onnx_precision": args.onnx_precision, "batch_size": args.batch_size,
             "max_new_tokens": args.max_new_tokens, "max_rounds": args.max_rounds}
    update: dict[str, Any] = {k: v for k, v in given.items() if v is not None} | {"device": args.device}
    if args.max_rounds is not None:  # kg_r1 counts its rounds as queries + 1
        update["kg_r1_max_queries"] = max(1, args.max_rounds - 1)
    return params.model_copy(update={"agent": params.agent.model_copy(update=update)})


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

def render(results: dict[str, Any]) -> str:
    setup, comparison = results["setup"], results["comparison"]
    out = [(f"eval_slots: omne eval's rollouts of {setup['questions']} {setup['split']} questions "
            f"({setup['buckets']}), protocol {setup['protocol']} ({setup['mode']}), model {setup['model']}, "
            f"backend {setup['backend']}, "
            f"batch {setup['batch_size']}, <= {setup['max_new_tokens']} new tokens x {setup['max_rounds']} rounds, "
            f"temperature {setup['temperature']:g}, in-process KG tools"),
           (f"device {setup['device']}, {setup['torch_threads']} torch threads; {setup['repeat']} round(s) of baseline "
            f"then ours, best run of each kept")]
    head = (f"{'variant':<26} {'wall s':>8} {'q/s':>6} {'gen tok':>7} {'tok/s':>7} {'calls':>5} {'rows/call':>9} "
            f"{'in model':>8} {'EM':>6}")
    out += ["", head, "-" * len(head)]
    for variant in VARIANTS:
        m = results[variant]
        out.append(f"{LABELS[variant]:<26} {m['wall_s']:>8.2f} {m['questions_per_s']:>6.3f} "
                   f"{m['generated_tokens']:>7} {m['generated_tokens_per_s']:>7.1f} {m['model_calls']:>5} "
                   f"{m['rows_per_call'] or 0:>9.2f} {(m['model_share'] or 0) * 100:>7.0f}% {m['em'] or 0:>6.3f}")
    out += [""] + [f"rows per call, {LABELS[v]}: " + ", ".join(f"{rows} x{n}" for rows, n in
                                                             results[v]["rows_histogram"].items()) for v in VARIANTS]
    out += [
        f"speed-up (baseline s / ours s): {results['speedup']}x best runs, median {results['median_speedup']}x "
        f"(per round: {', '.join(str(x) for x in results['speedups'])})",
        ("calls = the client's complete_many calls (one per engine round), rows/call = live episodes per call; "
         "in model = share of the wall time inside them."),
        (f"trajectories: {'the same' if comparison['same_trajectories'] else 'differ'} "
         f"({comparison['differing']} of {comparison['compared']} differ, the answers of "
         f"{comparison['differing_answers']}); "
         f"EM baseline {comparison['em']['baseline']['em']}, ours {comparison['em']['ours']['em']}; each variant the "
         "same in every round: " + ", ".join(f"{v} {str(results['determinism'][v]).lower()}" for v in VARIANTS)),
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
    limit = params.eval.limit if args.limit is None else args.limit

    t0 = time.perf_counter()
    source = question_source(params, split=args.split, limit=limit)
    tasks = source.tasks(params, None, params.eval.samples)
    source.toolbox._embed("warm-up")  # noqa: SLF001 - loads the query encoder outside the timings
    tools = InProcessToolClient(source.toolbox)
    client = load_agent_model(model_spec(args.model, params), params)
    lm = getattr(client, "lm", None)  # the transformers backend: generate's prefill and decoding timed too
    recorder = GenerateRecorder(lm, client) if lm is not None else None
    calls = ModelCalls(client)
    buckets = ", ".join(f"{n} x {b}" for b, n in sorted(Counter(t.bucket for t in tasks).items()))
    log.info("%d %s questions (%s); model %s (%s backend) and tools loaded in %.1f s", len(tasks), source.split,
             buckets, client.model, params.agent.backend, time.perf_counter() - t0)

    protocol = make_protocol(params, params.agent.protocol, None)
    rollout = RolloutParams.of_agent(params.agent, seed=params.eval.seed)
    engines = {"baseline": RolloutEngine(client, protocol, tools, rollout, name=params.agent.protocol),
               "ours": RollingSlots(client, protocol, tools, rollout, name=params.agent.protocol)}

    t0 = time.perf_counter()  # warm-up (untimed): a full batch and a short one, stop-string tables, tool paths
    short = rollout.model_copy(update={"max_new_tokens": min(8, rollout.max_new_tokens)})
    for engine in engines.values():
        type(engine)(client, protocol, tools, short, name="warm-up").run(tasks[:rollout.batch_size + 1],
                                                                         progress=False)
    log.info("warm-up in %.1f s", time.perf_counter() - t0)

    progress = sys.stderr.isatty()
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    signatures: dict[str, list[tuple]] = {v: [] for v in VARIANTS}
    kept: dict[str, list[Trajectory]] = {}
    log.info("baseline (fixed batches) then ours (rolling slots), batch %d, x%d", rollout.batch_size, args.repeat)
    for index in range(args.repeat):
        log.info("  round %d of %d", index + 1, args.repeat)
        for variant in VARIANTS:
            kept[variant] = []  # let the previous run's trajectories go first
            calls.reset()
            kept[variant], m = timed_run(variant, engines[variant], tasks, recorder, progress)  # empties the stores
            m.update(calls.record(m["wall_s"]), **em_of(kept[variant]))
            runs[variant].append(m)
            signatures[variant].append(tuple(signature(t) for t in kept[variant]))

    best = {v: best_of(runs[v]) for v in VARIANTS}
    speedups = [ratio(b["wall_s"], o["wall_s"]) for b, o in zip(runs["baseline"], runs["ours"], strict=True)]
    speedup = ratio(best["baseline"]["wall_s"], best["ours"]["wall_s"])
    pairs = list(zip(kept["baseline"], kept["ours"], strict=True))
    differing = [b.qa_id for b, o in pairs if signature(b) != signature(o)]
    comparison = {"compared": len(pairs), "same_trajectories": not differing, "differing": len(differing),
                  "differing_qa_ids": differing, "differing_answers": sum(b.answer != o.answer for b, o in pairs),
                  "em": {v: em_of(kept[v]) for v in VARIANTS},
                  "note": "greedy batched decoding pads each row by its batch's other prompts: another batch "
                          "composition can flip a near-tie of the logits, and the episode goes another way"}
    gpu = torch.cuda.get_device_name(0) if str(getattr(client, "device", "")) == "cuda" else None
    results: dict[str, Any] = {
        "benchmark": "eval_slots",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {**machine_info(), "load_average_at_start": load_start, "torch": torch.__version__,
                    "torch_threads": torch.get_num_threads(), "cuda_available": torch.cuda.is_available(), "gpu": gpu},
        "args": args_record(args),
        "setup": {"questions": len(tasks), "qa_ids": [t.qa_id for t in tasks], "split": source.split, "limit": limit,
                  "samples": params.eval.samples, "buckets": buckets, "protocol": protocol.name,
                  "mode": protocol.mode, "model": client.model, "backend": params.agent.backend,
                  "onnx_precision": params.agent.onnx_precision, "device": getattr(client, "device", "cpu"),
                  "torch_threads": torch.get_num_threads(), "batch_size": rollout.batch_size,
                  "max_new_tokens": rollout.max_new_tokens, "max_rounds": protocol.max_rounds,
                  "temperature": rollout.temperature, "seed": rollout.seed, "max_same_call": rollout.max_same_call,
                  "prefix_cache_mb": params.agent.prefix_cache_mb, "repeat": args.repeat, "profile": params.profile},
        **best,
        "speedup": speedup, "speedups": speedups,
        "median_speedup": ratio(statistics.median(speedups), 1.0) if all(speedups) else None,
        "comparison": comparison,
        "determinism": {v: len(set(signatures[v])) == 1 for v in VARIANTS},
    }
    results["machine"]["load_average_at_end"] = load_average()
    wall = best["ours"]["wall_s"]
    results["targets"] = [
        {"target": f"{TARGET_QUESTIONS} questions evaluated in <= {TARGET_WALL_S:g} s (ours; {len(tasks)} here, n/a "
                   f"with fewer)", "value": wall, "unit": " s",
         "pass": wall <= TARGET_WALL_S if len(tasks) >= TARGET_QUESTIONS else None},
        {"target": f"ours >= {TARGET_SPEEDUP:g}x the baseline's wall speed", "value": speedup or 0.0, "unit": "x",
         "pass": None if speedup is None else speedup >= TARGET_SPEEDUP}]
    log.info("ours %.2f s vs baseline %.2f s: %sx; %d of %d trajectories differ", wall, best["baseline"]["wall_s"],
             speedup, len(differing), len(pairs))
    write_results(results, render(results), args.out, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
