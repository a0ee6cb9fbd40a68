#!/usr/bin/env python
"""Benchmark of the rollout engine: batched episodes vs a sequential one-question-at-a-time loop.

Every speed is a RATIO against a baseline measured in the same process, ours and the baseline in
turn, best of N (the machines are noisy: absolute timings move with the load, ratios much less).

    .venv/bin/python bench/rollout.py                                  # 32 test questions, batch 32 vs 1, CPU
    .venv/bin/python bench/rollout.py --questions 8 --repeat 1         # quick (~1 min)
    .venv/bin/python bench/rollout.py --device cuda --max-new-tokens 256 --max-rounds 5   # on a GPU
    .venv/bin/python bench/rollout.py --toy --out /tmp/bench           # smoke test: a tiny random llama, seconds

Same model (``load_agent_model("base")`` = SmolLM2-135M-Instruct, or ``--model PATH``), same
questions (``--questions`` of the ``--split`` split, chosen by ``stable_sample`` over both buckets),
same protocol (``omne``) and the same in-process KG tools (``InProcessToolClient(KGToolbox)``), greedy:

* ours: ``RolloutEngine`` with ``batch_size`` ``--batch-size`` (32): the live episodes of a batch
  generate together, one left-padded ``generate`` per round, then their tool calls run;
* baseline: the same engine with ``batch_size`` 1: one question at a time, round after round.

Both use the local client as it is: with its prefix cache (the shared system prompt and each episode's
earlier rounds are not recomputed; the client's store is emptied before every timed run), a static
cache and decode chunks. ``--compare-plain`` also times both on the plain path (the client before
the prefix cache) in the same process, and compares their trajectories with the cached ones.

Reported: questions/s (= samples/s: one rollout per question), generated tokens/s, prompt
tokens/s, KG calls/s, model turns, the time inside ``generate`` and inside the tools, and whether
the trajectories (messages) are the same in both (greedy); where they differ, where and why (the
top-2 logit margin of the model at the first differing token). Target (PASS/MISS, never asserted):
batched >= 5x the sequential questions/s.

``--fast onnx`` (the default) also runs both engines on the ONNX Runtime backend (``agent.backend: onnx``, the
model converted once, ``--onnx-precision``) in turn with the others, and times batch-1 decoding of both backends
(the same long reply, ``--decode-tokens`` tokens: the time of those tokens minus the time of the first one).
Ratios against today's transformers path in the same process: batch-1 decode tokens/s, and the fast batched
engine's questions/s against the transformers sequential loop's (targets: >= 5x each); its trajectories are
compared with the transformers ones (same greedy answers, or where and why not).

See docs/benchmarks.md for the method and the results.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import torch

# first: sets the offline environment and puts the project root on sys.path
from _common import (
    MB,
    BenchParser,
    Stage,
    args_record,
    load_average,
    load_line,
    machine_info,
    merge_runs,
    ratio,
    setup_logging,
    verdict,
    write_results,
)
from _toy import toy_project

from pipelines.agent.client import InProcessToolClient
from pipelines.agent.models import load_agent_model
from pipelines.agent.protocols import PROTOCOLS, OmneProtocol, Protocol, TurnAction
from pipelines.agent.rollout import RolloutEngine, RolloutParams, Task
from pipelines.agent.tools import KGToolbox
from pipelines.agent.trajectory import Trajectory
from pipelines.config import Params, load_params
from pipelines.eval.runner import load_split, make_protocol, make_tasks, stable_sample
from pipelines.llm.base import ChatRequest
from pipelines.llm.onnx_export import ONNX_PRECISIONS
from pipelines.qa.models import QAPair

log = logging.getLogger("bench.rollout")

TARGET_SPEEDUP = 5.0  # batched questions/s >= 5x the sequential loop's (CPU, batch 32)


# --------------------------------------------------------------------------------------------
# Setup
# --------------------------------------------------------------------------------------------

def choose_questions(pairs: list[QAPair], count: int, seed: int) -> list[QAPair]:
    """``count`` pairs, as even as possible over the buckets, each bucket's chosen by ``stable_sample``
    (a seeded hash of the ids: the same questions in every run); buckets interleaved."""
    buckets = sorted({p.bucket for p in pairs})
    per_bucket = math.ceil(count / max(len(buckets), 1))
    chosen = stable_sample(pairs, per_bucket, seed)
    lists = [[p for p in chosen if p.bucket == b] for b in buckets]
    out: list[QAPair] = []
    for index in range(per_bucket):
        for items in lists:
            if index < len(items) and len(out) < count:
                out.append(items[index])
    return out


FORCED_CALL = '<tool_call>entity_matcher(node_name="'


class ForcedCallProtocol(OmneProtocol):
    """--force-tool-call: the omne protocol with every turn started by ``FORCED_CALL`` (the assistant
    prefix), so that the model only writes the name and the rest of the call. A stand-in for a
    tool-using policy: every episode runs its rounds with a KG call in each (the base model never
    calls a tool on its own)."""

    def assistant_prefix(self) -> str:
        return super().assistant_prefix() + FORCED_CALL

    def parse(self, generated: str) -> TurnAction:
        action = super().parse(FORCED_CALL + generated)
        if action.text.startswith(FORCED_CALL):  # the engine puts the prefix back in front of the turn
            action.text = action.text[len(FORCED_CALL):]
        return action


def forced(protocol: Protocol) -> ForcedCallProtocol:
    return ForcedCallProtocol(protocol.tools, max_rounds=protocol.max_rounds, mode=protocol.mode)


class _FirstStep:
    """A generate streamer that only notes when the first new token comes out: ``put`` is called
    once with the prompt, then once per step, so its second call ends the prefill (first forward)."""

    def __init__(self) -> None:
        self.puts = 0
        self.first: float | None = None

    def put(self, value: Any) -> None:
        self.puts += 1
        if self.puts == 2:
            self.first = time.perf_counter()

    def end(self) -> None:
        pass


class GenerateRecorder:
    """Wraps the local model's ``generate`` (instance attribute, this process only): the number of
    calls, their rows, prompt widths and steps (rows x steps = token positions decoded, padding and
    finished rows included), the time inside them, split into prefill (until the first new token,
    timed with a streamer) and decoding.

    With the client's prefix cache, prompts are computed before ``generate`` (the client's
    ``prefill_stats``: positions computed, reused from its store, ``prefill_seconds``) and ``generate`` starts
    from a cache holding all but each row's last prompt token, possibly in several calls per batch
    (decode chunks: rows that ended leave the batch between them); such a call counts as decoding,
    its first step included, and its prompt positions are only the ones it computes."""

    def __init__(self, lm: Any, client: Any = None) -> None:
        self.inner = lm.generate
        lm.generate = self
        self.client = client
        self.reset()

    def _client_stats(self) -> dict[str, float]:
        return dict(getattr(self.client, "prefill_stats", None) or {})

    def reset(self) -> None:
        self.calls = self.rows = self.row_steps = self.steps = self.prefill_positions = 0
        self.decode_steps = self.batches = 0
        self.seconds = self.prefill_seconds = 0.0
        self.max_rows = 0
        self.client_start = self._client_stats()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        past = kwargs.get("past_key_values")
        cached = int(past.get_seq_length()) if past is not None else 0
        first = _FirstStep() if kwargs.get("streamer") is None and not cached else None
        if first is not None:
            kwargs["streamer"] = first
        start = time.perf_counter()
        output = self.inner(*args, **kwargs)
        end = time.perf_counter()
        self.seconds += end - start
        self.prefill_seconds += ((first.first or end) - start) if first is not None else 0.0
        rows, width = kwargs["input_ids"].shape
        steps = output.shape[1] - width
        self.calls += 1
        if not cached:  # else the client counts the batch (one or more calls) and its rows
            self.batches += 1
            self.rows += rows
            self.prefill_positions += rows * width
        self.max_rows = max(self.max_rows, rows)
        self.steps += steps
        self.decode_steps += steps if cached else max(steps - 1, 0)
        self.row_steps += rows * steps
        return output

    def record(self, generated: int, wall: float) -> dict[str, Any]:
        decode = self.seconds - self.prefill_seconds
        stats = self._client_stats()
        outside = {k: stats.get(k, 0) - self.client_start.get(k, 0) for k in stats}
        prefill = self.prefill_seconds + outside.get("prefill_seconds", 0.0)
        return {"generate_calls": self.calls, "batches": self.batches + int(outside.get("batches", 0)),
                "generate_rows": self.rows + int(outside.get("rows", 0)), "generate_max_rows": self.max_rows,
                "generate_s": round(self.seconds, 4), "generate_share": round(self.seconds / wall, 4),
                "prefill_s": round(prefill, 4), "prefill_in_generate_s": round(self.prefill_seconds, 4),
                "prefill_before_generate_s": round(outside.get("prefill_seconds", 0.0), 4),
                "prefill_positions": self.prefill_positions + int(outside.get("computed", 0)),
                "reused_positions": int(outside.get("reused", 0)), "anchor_positions": int(outside.get("anchor", 0)),
                "anchor_s": round(outside.get("anchor_seconds", 0.0), 4),
                "decode_s": round(decode, 4), "decode_steps": self.steps, "row_steps": self.row_steps,
                "decode_ms_per_step": round(decode / max(self.decode_steps, 1) * 1000, 2),
                "useful_step_share": round(generated / self.row_steps, 4) if self.row_steps else None}


@contextmanager
def plain_path(client: Any, plain: bool) -> Iterator[None]:
    """``plain``: the local client without the prefix cache: no prefix cache (nor its static cache and decode
    chunks), and the stop-string criteria built anew by ``generate`` at every call."""
    if not plain or not hasattr(client, "prefix_cache"):
        yield
        return
    from transformers import StoppingCriteriaList
    from transformers.generation.stopping_criteria import StopStringCriteria

    before = client.prefix_cache
    client.prefix_cache = False
    client._stopping = lambda stop: StoppingCriteriaList([StopStringCriteria(client.tokenizer, list(stop))])  # noqa: SLF001
    try:
        yield
    finally:
        client.prefix_cache = before
        del client._stopping  # noqa: SLF001 - back to the method


# --------------------------------------------------------------------------------------------
# One timed run
# --------------------------------------------------------------------------------------------

def timed_run(label: str, engine: RolloutEngine, tasks: list[Task], recorder: GenerateRecorder | None,
              progress: bool) -> tuple[list[Trajectory], dict[str, Any]]:
    KGToolbox._embed.cache_clear()  # noqa: SLF001 - every run starts with a cold query-embedding cache
    clear = getattr(engine.client, "clear_prefix_cache", None)
    if clear is not None:
        clear()  # and with no stored prompt states (the system prompt is computed once in every run)
    if recorder is not None:
        recorder.reset()
    backend = getattr(engine.client, "backend", None)
    backend_before = dict(backend.stats) if backend is not None and recorder is None else None
    with Stage(interval=0.05) as stage:  # a coarse RSS sampler: its thread would compete for the GIL
        trajectories = engine.run(tasks, progress=progress)
    wall = stage.wall_s
    turns = sum(t.rounds for t in trajectories)
    generated = sum(t.generated_tokens for t in trajectories)
    prompt = sum(t.prompt_tokens for t in trajectories)
    calls = [c for t in trajectories for c in t.tool_calls]
    tool_s = sum(c.latency_s for c in calls)
    m: dict[str, Any] = {
        "wall_s": round(wall, 4), "cpu_s": round(stage.cpu_s, 4), "peak_extra_rss_mb": round(stage.peak_extra / MB, 1),
        "questions": len(trajectories), "turns": turns, "generated_tokens": generated, "prompt_tokens": prompt,
        "kg_calls": len(calls), "kg_calls_ok": sum(c.ok for c in calls),
        "answered": sum(t.finish == "answer" for t in trajectories),
        "finish": dict(Counter(t.finish for t in trajectories)),
        "questions_per_s": round(len(trajectories) / wall, 4), "generated_tokens_per_s": round(generated / wall, 2),
        "prompt_tokens_per_s": round(prompt / wall, 1), "kg_calls_per_s": round(len(calls) / wall, 3),
        "turns_per_s": round(turns / wall, 3), "tool_s": round(tool_s, 4),
    }
    if recorder is not None:
        m.update(recorder.record(generated, wall))
    elif backend_before is not None:
        stats = engine.client.backend.stats
        delta = {k: stats[k] - backend_before.get(k, 0) for k in stats}
        m.update({"prefill_s": round(delta.get("prefill_seconds", 0.0), 4), "decode_s": round(
            delta.get("decode_seconds", 0.0), 4), "prefill_positions": int(delta.get("computed", 0)),
            "reused_positions": int(delta.get("reused", 0)), "anchor_positions": int(delta.get("anchor", 0)),
            "decode_steps": int(delta.get("decode_steps", 0)), "row_steps": int(delta.get("row_steps", 0)),
            "decode_ms_per_step": round(delta.get("decode_seconds", 0.0) / max(delta.get("decode_steps", 0), 1)
                                        * 1000, 2)})
    log.info("    %-22s %7.2f s: %.3f questions/s, %.1f generated tokens/s, %d turns, %d KG calls (%.3f s in tools%s)",
             label, wall, m["questions_per_s"], m["generated_tokens_per_s"], turns, len(calls), tool_s,
             f", {recorder.seconds:.2f} s in {recorder.calls} generate calls, of which prefill "
             f"{recorder.prefill_seconds:.2f} s" if recorder is not None else
             f", prefill {m.get('prefill_s', 0):.2f} s, decoding {m.get('decode_s', 0):.2f} s" if "decode_s" in m
             else "")
    return trajectories, m


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest run's figures, with every run's wall time (merge_runs: least CPU, largest peak memory)."""
    best = min(runs, key=lambda r: r["wall_s"])
    return {**best, **merge_runs(runs), "runs": runs}


DECODE_PROMPT = "Count from 1 to 500, one number per line, and nothing else."
# the reply starts counting for it: without it, the int8 model greeted in 13 tokens where transformers counted for
# 122, and per-token rates over such different lengths are not comparable (2026-11-30)
DECODE_PREFIX = "1\n2\n3\n4\n5\n"


def decode_rate(client: Any, tokens: int, repeat: int) -> dict[str, Any]:
    """Batch-1 decoding speed of a client: the same greedy reply of up to ``tokens`` tokens and of 1 token, timed
    in turn (best of ``repeat``) after an untimed call that stores the prompt; tokens/s = (reply tokens - 1) /
    (time of the long reply - time of the 1-token reply), so the prompt's cost cancels out. The reply starts with
    ``DECODE_PREFIX``, so that every backend goes on counting to its token limit."""
    messages = [{"role": "user", "content": DECODE_PROMPT}]
    long_request = ChatRequest(messages=messages, max_tokens=tokens, prefix=DECODE_PREFIX, tag="bench.decode")
    short_request = long_request.model_copy(update={"max_tokens": 1})
    client.clear_prefix_cache()
    client.complete_many([short_request])
    best_long = best_short = math.inf
    reply = None
    for _ in range(repeat):
        start = time.perf_counter()
        client.complete_many([short_request])
        best_short = min(best_short, time.perf_counter() - start)
        start = time.perf_counter()
        reply = client.complete_many([long_request])[0]
        best_long = min(best_long, time.perf_counter() - start)
    generated = getattr(reply, "completion_tokens", 0)
    seconds = max(best_long - best_short, 1e-9)
    return {"tokens": generated, "long_s": round(best_long, 4), "short_s": round(best_short, 4),
            "tokens_per_s": round((generated - 1) / seconds, 2) if generated > 1 else None,
            "text": getattr(reply, "text", "")[:120]}


# --------------------------------------------------------------------------------------------
# Comparing trajectories
# --------------------------------------------------------------------------------------------

def signature(t: Trajectory) -> tuple:
    return (t.qa_id, tuple((m["role"], m["content"]) for m in t.messages), t.answer, t.finish)


def first_difference(a: Trajectory, b: Trajectory) -> dict[str, Any]:
    """Where two trajectories of one question part: message index, round, character offset, context."""
    for index, (ma, mb) in enumerate(zip(a.messages, b.messages, strict=False)):
        if ma == mb:
            continue
        x, y = ma["content"], mb["content"]
        offset = next((k for k, (u, v) in enumerate(zip(x, y, strict=False)) if u != v), min(len(x), len(y)))
        round_index = sum(m["role"] == "assistant" for m in a.messages[:index])
        return {"message": index, "role": ma["role"], "round": round_index, "char": offset,
                "common": x[max(0, offset - 60):offset], "sequential": x[offset:offset + 60],
                "batched": y[offset:offset + 60]}
    return {"message": min(len(a.messages), len(b.messages)), "role": None, "round": None, "char": 0,
            "common": "", "sequential": f"<{len(a.messages)} messages>", "batched": f"<{len(b.messages)} messages>"}


def token_margin(client: Any, a: Trajectory, diff: dict[str, Any], prefix: str) -> dict[str, Any] | None:
    """At the first differing assistant token: the model's top-2 next tokens and their logit margin in a
    batch-1 forward pass (a near tie that batched fp arithmetic can flip), or None when not local."""
    if diff.get("role") != "assistant" or not hasattr(client, "tokenizer"):
        return None
    tokenizer, lm = client.tokenizer, client.lm
    messages = a.messages[:diff["message"]]
    text = a.messages[diff["message"]]["content"]
    body = text[len(prefix):] if prefix and text.startswith(prefix) else text
    ids = tokenizer(body, add_special_tokens=False)["input_ids"]
    cut = max(0, diff["char"] - (len(text) - len(body)))
    common = 0  # tokens of the sequential reply wholly before the first differing character
    for k in range(len(ids) + 1):
        if len(tokenizer.decode(ids[:k])) <= cut:
            common = k
        else:
            break
    prompt = client.prompt_ids(ChatRequest(messages=messages, prefix=prefix))
    input_ids = torch.tensor([prompt + ids[:common]], device=client.device)
    with torch.inference_mode():
        logits = lm(input_ids=input_ids).logits[0, -1].float()
    top = torch.topk(logits, 2)
    return {"token_index": common, "top2": [tokenizer.decode([int(i)]) for i in top.indices],
            "top2_logits": [round(float(v), 4) for v in top.values],
            "margin": round(float(top.values[0] - top.values[1]), 5)}


def compare(sequential: list[Trajectory], batched: list[Trajectory], client: Any, prefix: str,
            diagnose: int) -> dict[str, Any]:
    differing = [(a, b) for a, b in zip(sequential, batched, strict=True) if signature(a) != signature(b)]
    out: dict[str, Any] = {"same_trajectories": not differing, "compared": len(sequential),
                           "differing": len(differing),
                           "same_answers": sum(a.answer == b.answer for a, b in zip(sequential, batched, strict=True)),
                           "same_tool_calls": sum([c.text for c in a.tool_calls] == [c.text for c in b.tool_calls]
                                                  for a, b in zip(sequential, batched, strict=True)),
                           "examples": []}
    for a, b in differing[:diagnose]:
        diff = {"qa_id": a.qa_id, **first_difference(a, b)}
        try:
            diff["top2_at_difference"] = token_margin(client, a, diff, prefix)
        except Exception as exc:  # noqa: BLE001 - a diagnostic only
            diff["top2_at_difference"] = {"error": f"{type(exc).__name__}: {exc}"}
        out["examples"].append(diff)
    return out


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

def _difference_line(e: dict[str, Any], first: str = "", second: str = "") -> str:
    """One differing trajectory of a comparison: where it first differs, and the top-2 logit margin there."""
    margin = e.get("top2_at_difference") or {}
    why = f"; top-2 at that token {margin['top2']} logit margin {margin['margin']:.4g}" if "margin" in margin else ""
    return (f"  {e['qa_id']}: message {e['message']} (round {e['round']}), char {e['char']}: "
            f"{e['sequential'][:24]!r}{first} vs {e['batched'][:24]!r}{second}{why}")


def report(results: dict[str, Any]) -> str:
    """The full text report (stdout): every engine's figures, inside generate, the trajectories' differences."""
    s, b, setup = results["sequential"], results["batched"], results["setup"]
    out = [(f"rollout: {setup['questions']} questions of the {setup['split']} split ({setup['buckets']}), protocol "
            f"{setup['protocol']} ({setup['mode']}), model {setup['model']}, greedy, <= {setup['max_new_tokens']} new "
            f"tokens x {setup['max_rounds']} rounds, in-process KG tools"
            + (f", every turn forced to start with {FORCED_CALL!r}" if setup["force_tool_call"] else "")),
           (f"device {setup['device']} ({setup['dtype']}"
            + (f", {setup['torch_threads']} torch threads" if setup["device"] == "cpu" else f", {setup['gpu']}")
            + f"); best of {setup['repeat']} runs each, in turn")]
    head = (f"{'engine':<20} {'wall s':>8} {'cpu s':>8} {'questions/s':>11} {'gen tok/s':>9} {'prompt tok/s':>12} "
            f"{'KG calls/s':>10} {'turns':>5} {'gen tok':>7} {'KG calls':>8} {'generate':>8} {'in gen':>6} {'x':>6}")
    out += ["", head, "-" * len(head)]
    plain = results.get("plain")
    rows = [("sequential (batch 1)", s, s), (f"batched (batch {setup['batch_size']})", b, s)]
    if plain:
        rows += [("sequential, plain", plain["sequential"], plain["sequential"]),
                 ("batched, plain", plain["batched"], plain["sequential"])]
    fast = results.get("fast")
    if fast:
        rows += [(f"{fast['backend']} sequential", fast["sequential"], s),
                 (f"{fast['backend']} batched", fast["batched"], s)]
    for label, m, base in rows:
        x = base["wall_s"] / m["wall_s"]
        out.append(f"{label:<20} {m['wall_s']:>8.2f} {m['cpu_s']:>8.2f} {m['questions_per_s']:>11.3f} "
                   f"{m['generated_tokens_per_s']:>9.1f} {m['prompt_tokens_per_s']:>12.1f} "
                   f"{m['kg_calls_per_s']:>10.2f} "
                   f"{m['turns']:>5} {m['generated_tokens']:>7} {m['kg_calls']:>8} {m.get('generate_calls', '-'):>8} "
                   f"{(m.get('generate_share') or 0) * 100:>5.0f}% {x:>6.2f}")
    c = results["comparison"]
    out += [(f"x = the sequential wall time of the same path / this one's; ratio batched/sequential wall = "
             f"{results['ratio']:.4f}, cpu = {results['cpu_ratio']:.4f}. questions/s = samples/s (one rollout per "
             f"question). generate = model generate calls; in gen = share of the wall time inside them."),
            f"answers given: sequential {s['answered']}, batched {b['answered']} of {s['questions']}."]
    if b.get("anchor_positions"):
        steady = (s["wall_s"] - s["anchor_s"]) / (b["wall_s"] - b["anchor_s"])
        out.append(f"the system prompt ({b['anchor_positions']:,} positions) is computed "
                   f"once per run, {s['anchor_s']:.2f} s sequential, {b['anchor_s']:.2f} s batched (the store is "
                   f"emptied before every run); without it (a process that keeps it, e.g. an evaluation over many "
                   f"batches) batched would be {steady:.2f}x sequential.")
    if plain:
        out.append(f"plain = the client without its prefix cache, static cache or decode chunks, stop-string criteria "
                   f"rebuilt at every generate call (the code before the prefix cache): batched "
                   f"{plain['speedup']:.2f}x "
                   f"sequential there; the prefix cache path is {plain['gain_sequential']:.2f}x faster sequential, "
                   f"{plain['gain_batched']:.2f}x batched; batched with the cache is "
                   f"{plain['batched_vs_plain_sequential']:.2f}x "
                   f"the plain sequential loop.")
    if fast:
        d = fast["decode"]
        out += [(f"{fast['backend']} rows: the same engines generating with ONNX Runtime ({fast['precision']}, "
                 f"converted in {fast['convert_s']:.1f} s); x = the transformers sequential wall time / this one's. "
                 f"{fast['backend']} batched = {fast['batched_vs_transformers_batched']:.2f}x transformers batched, "
                 f"{fast['sequential_vs_transformers_sequential']:.2f}x sequential vs sequential."),
                (f"batch-1 decoding ({d['transformers']['tokens']} tokens, best of {setup['repeat']}): transformers "
                 f"{d['transformers']['tokens_per_s']} tokens/s, {fast['backend']} {d['fast']['tokens_per_s']} "
                 f"tokens/s: {fast['decode_ratio']}x; same reply: {str(d['same_reply']).lower()}")]
        fc = fast["comparison"]
        out.append(f"{fast['backend']} batched vs transformers sequential: same trajectories "
                   f"{str(fc['same_trajectories']).lower()} ({fc['differing']} of {fc['compared']} differ, same answer "
                   f"in {fc['same_answers']})")
        out += [_difference_line(e, " (transformers)", f" ({fast['backend']})") for e in fc["examples"]]
    if "generate_calls" in b:
        head = (f"{'inside generate':<20} {'calls':>5} {'rows':>5} {'prefill s':>9} {'prompt pos':>10} {'reused':>8} "
                f"{'decode s':>8} {'steps':>5} {'ms/step':>7} {'kept':>5}")
        out += ["", head, "-" * len(head)]
        for label, m, _ in rows:
            if "generate_calls" not in m:
                out.append(f"{label:<20} {'-':>5} {'-':>5} {m.get('prefill_s', 0):>9.2f} "
                           f"{m.get('prefill_positions', 0):>10,} {m.get('reused_positions', 0):>8,} "
                           f"{m.get('decode_s', 0):>8.2f} {m.get('decode_steps', 0):>5} "
                           f"{m.get('decode_ms_per_step', 0):>7.1f} {'':>5}")
                continue
            out.append(f"{label:<20} {m['generate_calls']:>5} {m['generate_rows']:>5} {m['prefill_s']:>9.2f} "
                       f"{m['prefill_positions']:>10,} {m.get('reused_positions', 0):>8,} {m['decode_s']:>8.2f} "
                       f"{m['decode_steps']:>5} {m['decode_ms_per_step']:>7.1f} "
                       f"{(m['useful_step_share'] or 0) * 100:>4.0f}%")
        out.append("prefill = prompt positions computed: before generate (prefix cache path: each prompt's new tokens "
                   "at batch 1) plus inside it until the first new token (plain path: rows x padded prompt width); "
                   "reused = prompt positions taken from the client's prefix store (shared system prompt, an "
                   "episode's earlier rounds); steps = decoding steps of all calls; kept = generated tokens / "
                   "(rows x steps): the rest are rows that had stopped, or text cut at a stop string, while their "
                   "batch ran on (with the prefix cache, ended rows leave the batch between decode chunks).")
    out.append("")
    if c["same_trajectories"]:
        out.append(f"same trajectories: true (all {c['compared']} questions: the same messages, answers and finish)")
    else:
        out.append(f"same trajectories: false: {c['differing']} of {c['compared']} questions differ (same answer in "
                   f"{c['same_answers']}, same tool calls in {c['same_tool_calls']})")
        out += [_difference_line(e) for e in c["examples"]]
    if plain:
        for label in ("sequential", "batched"):
            p = plain[f"same_as_plain_{label}"]
            out.append(f"{label} with the prefix cache vs plain: same trajectories "
                       f"{str(p['same_trajectories']).lower()} ({p['differing']} of {p['compared']} differ)")
            for e in p["examples"]:
                margin = e.get("top2_at_difference") or {}
                why = (f"; top-2 at that token {margin['top2']} logit margin {margin['margin']:.4g}"
                       if "margin" in margin else "")
                out.append(f"  {e['qa_id']}: message {e['message']} (round {e['round']}), char {e['char']}: "
                           f"{e['sequential'][:24]!r} (cache) vs {e['batched'][:24]!r} (plain){why}")
        out.append(f"plain batched vs plain sequential: same trajectories "
                   f"{str(plain['comparison']['same_trajectories']).lower()}")
    det = results["determinism"]
    out.append(f"repeat runs identical: sequential {str(det['sequential']).lower()}, batched "
               f"{str(det['batched']).lower()}")
    out += ["", "targets"]
    for t in results["targets"]:
        out.append(f"  {verdict(t['pass'])}  {t['target']:<52} {t['value']:,.2f} {t['unit']}")
    out += ["", load_line(results["machine"]) + "."]
    return "\n".join(out)


def render(results: dict[str, Any]) -> str:
    """A Markdown table (bench/tables.py puts it into docs/benchmarks.md): each engine's questions/s and its ratio to
    the transformers sequential loop, with the verdicts against the targets; then batch-1 decoding and whether the
    trajectories are the same as the transformers sequential loop's."""
    s, b, setup, fast = results["sequential"], results["batched"], results["setup"], results.get("fast")
    passed = [t["pass"] for t in results["targets"]]
    lines = ["| engine | questions/s | x the transformers sequential loop |", "|---|---|---|",
             f"| transformers, sequential (batch 1) | {s['questions_per_s']:.3f} | 1.00 |",
             f"| transformers, batched (batch {setup['batch_size']}) | {b['questions_per_s']:.3f} | "
             f"**{results['speedup']:.2f}** ({verdict(passed[0]).strip()}) |"]
    c = results["comparison"]
    same = [f"transformers batched {c['differing']} of {c['compared']}"]
    if fast:
        name = f"{fast['backend']} {fast['precision']}"
        fs, fb = fast["sequential"], fast["batched"]
        lines += [f"| {name}, sequential | {fs['questions_per_s']:.3f} | "
                  f"{fast['sequential_vs_transformers_sequential']:.2f} |",
                  f"| {name}, batched | {fb['questions_per_s']:.3f} | "
                  f"**{fast['batched_vs_transformers_sequential']:.2f}** ({verdict(passed[2]).strip()}) |"]
        d = fast["decode"]
        decode_x = f"**{fast['decode_ratio']:.2f}x**" if fast["decode_ratio"] is not None else "-"
        fc = fast["comparison"]
        same.append(f"{name} batched {fc['differing']} of {fc['compared']} (same answer in {fc['same_answers']})")
        ft, tt = d["fast"], d["transformers"]
        decode = (f"Batch-1 decoding: {name} {ft['tokens_per_s'] or 0:.1f} tokens/s over {ft['tokens']} tokens, "
                  f"transformers {tt['tokens_per_s'] or 0:.1f} over {tt['tokens']}"
                  f"{'' if d['same_reply'] else ' (not the same reply)'}: {decode_x} transformers "
                  f"({verdict(passed[1]).strip()}). ")
    else:
        decode = ""
    lines += ["", f"{decode}Trajectories differing from the transformers sequential loop's: {'; '.join(same)}."]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------

TOY = {"questions": 2, "split": "train", "batch_size": 2, "max_new_tokens": 8, "max_rounds": 2, "repeat": 1,
       "device": "cpu", "diagnose": 1, "force_tool_call": True, "decode_tokens": 16}


def add_device_options(parser: BenchParser) -> None:
    """--device and --threads (this benchmark's and bench/rl_step.py's)."""
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where the model runs (auto: cuda when available)")
    parser.add_argument("--threads", type=int, default=1, metavar="N",
                        help="torch intra-op threads on cpu (0: torch's default, one per core). 1 by default: on a "
                             "shared machine torch's OpenMP threads lose their time slice whenever another process "
                             "holds a core (a batch-1 forward measured 5x slower with 2 threads than with 1 under "
                             "load)")


def check_device_options(parser: BenchParser, args: argparse.Namespace) -> None:
    """Refuse what add_device_options cannot run: negative --threads, --device cuda without a CUDA device."""
    if args.threads < 0:
        parser.error("--threads must be >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")


def build_parser() -> BenchParser:
    parser = BenchParser(
        "rollout",
        description="Benchmark the batched rollout engine against a sequential one-question-at-a-time loop, timed "
                    "in the same process\n(in turn, best of N): the same model, questions, protocol and in-process "
                    "KG tools, greedy decoding.\n"
                    "  ours:     RolloutEngine with batch_size --batch-size (the live episodes generate together, "
                    "one left-padded\n            generate per round);\n"
                    "  baseline: the same engine with batch_size 1 (one question at a time).\n"
                    "Reports questions/s (= samples/s), generated tokens/s, prompt tokens/s, KG calls/s, turns, the "
                    "ratio, and whether\nthe trajectories are the same (and, where not, the first differing token "
                    "and the model's top-2 logit margin there).",
        epilog="Target (printed as PASS/MISS, never asserted): batched >= 5x the sequential questions/s.\n"
               "The defaults keep each sequential run to 3-5 minutes on 2 CPU cores (11-15 minutes in all, 2 runs of "
               "each).\n"
               "Results: a table on stdout, every number in --out (default: bench/results/).",
        toy=TOY, toy_note="the throw-away project's solar QA dataset (built in-process) and a tiny random llama as "
                          "the base model",
        repeat=2, repeat_help="runs of each engine (sequential then batched, in turn; the fastest kept)",
        seed=None, seed_help="seed of the question sample (default: params eval.seed)")
    parser.add_argument("--model", default="base", metavar="PATH",
                        help="'base' (params agent.base_model: SmolLM2-135M-Instruct, converted once to "
                             "artifacts/models/smollm2), a local transformers folder or a PEFT adapter folder")
    parser.add_argument("--questions", type=int, default=32, metavar="N",
                        help="questions rolled out, as even as possible over the buckets (1-2 hops, 3+), chosen by "
                             "stable_sample (seeded hash of the ids: the same in every run)")
    parser.add_argument("--split", choices=("train", "val", "test"), default="test", help="QA split to take them from")
    parser.add_argument("--batch-size", type=int, default=32, metavar="N",
                        help="episodes of the batched engine generated together (the client's generate batch too); "
                             "the baseline: 1")
    parser.add_argument("--max-new-tokens", type=int, default=64, metavar="N", help="generated tokens per round")
    parser.add_argument("--max-rounds", type=int, default=2, metavar="N", help="model turns per episode")
    parser.add_argument("--protocol", choices=sorted(PROTOCOLS), default="omne", help="agent protocol")
    parser.add_argument("--mode", choices=("think", "no_think"), default=None,
                        help="think mode (default: params agent.mode)")
    parser.add_argument("--force-tool-call", action="store_true",
                        help="omne protocol only: start every turn with '<tool_call>entity_matcher(node_name=\"' so "
                             "that the model writes a name and the rest of the call. The base model never calls a tool "
                             "on its own (it answers in plain text in one turn: no KG call, one turn per question); "
                             "this stands in for a tool-using policy: --max-rounds turns per question with a KG call "
                             "in each")
    add_device_options(parser)
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                        help="model weights (auto: the client's choice, float32 on cpu, bfloat16 on cuda)")
    parser.add_argument("--compare-plain", action="store_true",
                        help="also time both engines on the plain path (the local client without its prefix cache, "
                             "static cache and decode chunks, stop-string criteria rebuilt at every generate call: "
                             "the code before the prefix cache), in turn with the others, and compare the trajectories")
    parser.add_argument("--diagnose", type=int, default=5, metavar="N",
                        help="differing trajectories to explain (first differing token, top-2 logits at it)")
    parser.add_argument("--require-same", action="store_true",
                        help="exit with status 1 when the sequential and batched trajectories differ")
    parser.add_argument("--fast", choices=("onnx", "none"), default="onnx",
                        help="also run both engines on this fast backend (agent.backend), in turn with the others, and "
                             "time batch-1 decoding of both backends; none: transformers only")
    parser.add_argument("--onnx-precision", choices=ONNX_PRECISIONS, default=None,
                        help="the ONNX conversion's weights: fp32 (same numbers as transformers), int8 or int4 "
                             "(default: params agent.onnx_precision)")
    parser.add_argument("--decode-tokens", type=int, default=128, metavar="N",
                        help="reply length of the batch-1 decoding measurement (a long greedy reply)")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("questions", "batch_size", "max_new_tokens", "max_rounds", "repeat", "decode_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.diagnose < 0:
        parser.error("--diagnose must be >= 0")
    if args.force_tool_call and args.protocol != "omne":
        parser.error("--force-tool-call goes with --protocol omne")
    check_device_options(parser, args)
    return args


def bench_params(params: Params, args: argparse.Namespace) -> Params:
    agent = params.agent.model_copy(update={
        "max_rounds": args.max_rounds, "kg_r1_max_queries": max(1, args.max_rounds - 1),
        "max_new_tokens": args.max_new_tokens, "temperature": 0.0, "batch_size": args.batch_size,
        "device": args.device, "backend": "transformers",  # the baseline; --fast runs the other backend
        **({"mode": args.mode} if args.mode else {})})
    return params.model_copy(update={"agent": agent})


def start(args: argparse.Namespace, adjust: Callable[[Params, argparse.Namespace], Params]) -> Params:
    """What a rollout benchmark does first (this one and bench/rl_step.py): quiet logging, torch's threads
    (--threads), and the params: --params (--profile), or with --toy a throw-away project (the solar QA dataset,
    the tiny llama) built in-process; ``adjust`` applies the script's options to them."""
    setup_logging(args.verbose, ("httpx", "filelock", "pipelines", "sentence_transformers", "transformers"))
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.params is None:
        args.params = toy_project(build="qa", model=True)
    return adjust(load_params(args.params, args.profile), args)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started, load_start = time.perf_counter(), load_average()
    params = start(args, bench_params)
    seed = params.eval.seed if args.seed is None else args.seed

    pairs = choose_questions(load_split(params, args.split), args.questions, seed)
    if not pairs:
        raise SystemExit(f"the {args.split} split has no questions")
    buckets = Counter(p.bucket for p in pairs)
    log.info("%d questions of the %s split (%s)", len(pairs), args.split,
             ", ".join(f"{n} x {b}" for b, n in sorted(buckets.items())))

    t0 = time.perf_counter()
    toolbox = KGToolbox(params, sorted({p.domain for p in pairs}))
    toolbox.load_all()
    toolbox._embed("warm-up")  # noqa: SLF001 - loads the query encoder outside the timings
    tools = InProcessToolClient(toolbox)
    client = load_agent_model(args.model, params)
    if args.dtype != "auto":
        client.lm = client.lm.to(getattr(torch, args.dtype))
    if hasattr(client, "batch_size"):
        client.batch_size = args.batch_size  # one generate per round for the batched engine
    lm = getattr(client, "lm", None)
    recorder = GenerateRecorder(lm, client) if lm is not None else None
    device = getattr(client, "device", "endpoint")
    dtype = str(next(lm.parameters()).dtype).removeprefix("torch.") if lm is not None else None
    log.info("model %s on %s (%s), tools loaded, in %.1f s", client.model, device, dtype, time.perf_counter() - t0)

    protocol = make_protocol(params, args.protocol, None)
    protocol.max_rounds = args.max_rounds
    if args.force_tool_call:
        protocol = forced(protocol)
    tasks = make_tasks(pairs, toolbox, params, None, 1)
    base = RolloutParams(max_new_tokens=args.max_new_tokens, temperature=0.0, batch_size=1, seed=seed)
    sequential = RolloutEngine(client, protocol, tools, base, name=args.protocol)
    batched = RolloutEngine(client, protocol, tools, base.model_copy(update={"batch_size": args.batch_size}),
                            name=args.protocol)

    fast_client, convert_s = None, 0.0
    if args.fast != "none":  # the same model on the fast backend (converted once: cached by the model's identity)
        t0 = time.perf_counter()
        args.onnx_precision = args.onnx_precision or params.agent.onnx_precision
        fast_params = params.model_copy(update={"agent": params.agent.model_copy(
            update={"backend": args.fast, "onnx_precision": args.onnx_precision})})
        fast_client = load_agent_model(args.model, fast_params)
        fast_client.batch_size = args.batch_size
        convert_s = time.perf_counter() - t0
        log.info("fast backend %s (%s): %s, ready in %.1f s", args.fast, args.onnx_precision, fast_client.model,
                 convert_s)

    # warm-up (untimed): first generate calls at batch 1 and batch 2, stop-string tables, tool paths
    t0 = time.perf_counter()
    warm = RolloutParams(max_new_tokens=min(8, args.max_new_tokens), temperature=0.0, batch_size=2, seed=seed)
    for warm_client in [client] + ([fast_client] if fast_client is not None else []):
        RolloutEngine(warm_client, protocol, tools, warm, name="warm-up").run(tasks[:2], progress=False)
        RolloutEngine(warm_client, protocol, tools, warm.model_copy(update={"batch_size": 1}), name="warm-up").run(
            tasks[:1], progress=False)
    log.info("warm-up in %.1f s", time.perf_counter() - t0)

    progress = sys.stderr.isatty()
    variants = [("sequential", sequential, False), ("batched", batched, False)]
    if args.compare_plain:
        variants += [("sequential_plain", sequential, True), ("batched_plain", batched, True)]
    if fast_client is not None:
        variants += [("fast_sequential", RolloutEngine(fast_client, protocol, tools, base, name=args.protocol), False),
                     ("fast_batched", RolloutEngine(fast_client, protocol, tools, base.model_copy(
                         update={"batch_size": args.batch_size}), name=args.protocol), False)]
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in variants}
    signatures: dict[str, list[tuple]] = {label: [] for label, _, _ in variants}
    kept: dict[str, list[Trajectory]] = {}
    log.info("rollouts: sequential (batch 1) vs batched (batch %d)%s, x%d each, in turn; <= %d new tokens x %d rounds",
             args.batch_size, ", then both on the plain path" if args.compare_plain else "", args.repeat,
             args.max_new_tokens, args.max_rounds)
    for index in range(args.repeat):
        log.info("  run %d of %d", index + 1, args.repeat)
        for label, engine, plain in variants:
            kept[label] = []  # let the previous run's trajectories go first
            with plain_path(client, plain):
                kept[label], m = timed_run(label, engine, tasks, recorder if engine.client is client else None,
                                           progress)
            runs[label].append(m)
            signatures[label].append(tuple(signature(t) for t in kept[label]))

    seq_m, bat_m = best_of(runs["sequential"]), best_of(runs["batched"])
    comparison = compare(kept["sequential"], kept["batched"], client, protocol.assistant_prefix(), args.diagnose)
    speedup = round(seq_m["wall_s"] / bat_m["wall_s"], 3)
    plain_results = None
    if args.compare_plain:
        pseq, pbat = best_of(runs["sequential_plain"]), best_of(runs["batched_plain"])
        plain_results = {
            "sequential": pseq, "batched": pbat, "speedup": round(pseq["wall_s"] / pbat["wall_s"], 3),
            "gain_sequential": round(pseq["wall_s"] / seq_m["wall_s"], 3),
            "gain_batched": round(pbat["wall_s"] / bat_m["wall_s"], 3),
            "batched_vs_plain_sequential": round(pseq["wall_s"] / bat_m["wall_s"], 3),
            "comparison": compare(kept["sequential_plain"], kept["batched_plain"], client,
                                  protocol.assistant_prefix(), args.diagnose),
            # "sequential" in these = with the prefix cache, "batched" = plain
            "same_as_plain_sequential": compare(kept["sequential"], kept["sequential_plain"], client,
                                                protocol.assistant_prefix(), args.diagnose),
            "same_as_plain_batched": compare(kept["batched"], kept["batched_plain"], client,
                                             protocol.assistant_prefix(), args.diagnose)}
    fast_results = None
    if fast_client is not None:
        log.info("batch-1 decoding: up to %d tokens, transformers then %s, best of %d", args.decode_tokens, args.fast,
                 args.repeat)
        decode_ref = decode_rate(client, args.decode_tokens, args.repeat)
        decode_fast = decode_rate(fast_client, args.decode_tokens, args.repeat)
        fseq, fbat = best_of(runs["fast_sequential"]), best_of(runs["fast_batched"])
        fast_results = {
            "backend": args.fast, "precision": args.onnx_precision, "model": fast_client.model,
            "convert_s": round(convert_s, 2), "sequential": fseq, "batched": fbat,
            "batched_vs_transformers_sequential": round(seq_m["wall_s"] / fbat["wall_s"], 3),
            "batched_vs_transformers_batched": round(bat_m["wall_s"] / fbat["wall_s"], 3),
            "sequential_vs_transformers_sequential": round(seq_m["wall_s"] / fseq["wall_s"], 3),
            "decode": {"transformers": decode_ref, "fast": decode_fast,
                       "same_reply": decode_ref["text"] == decode_fast["text"]},
            "decode_ratio": ratio(decode_fast["tokens_per_s"], decode_ref["tokens_per_s"]),
            "comparison": compare(kept["sequential"], kept["fast_batched"], client, protocol.assistant_prefix(),
                                  args.diagnose),
            "same_as_transformers_sequential": compare(kept["sequential"], kept["fast_sequential"], client,
                                                       protocol.assistant_prefix(), args.diagnose)}
        log.info("%s: batch-1 decoding %sx transformers; batched %.2fx the transformers sequential loop", args.fast,
                 fast_results["decode_ratio"], fast_results["batched_vs_transformers_sequential"])
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else None
    results: dict[str, Any] = {
        "benchmark": "rollout",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {**machine_info(), "load_average_at_start": load_start, "torch": torch.__version__,
                    "torch_threads": torch.get_num_threads(), "cuda_available": torch.cuda.is_available(),
                    "gpu": gpu},
        "args": args_record(args),
        "setup": {"questions": len(tasks), "buckets": ", ".join(f"{n} x {b}" for b, n in sorted(buckets.items())),
                  "split": args.split, "qa_ids": [t.qa_id for t in tasks], "protocol": args.protocol,
                  "mode": protocol.mode, "model": client.model, "device": device, "dtype": dtype, "gpu": gpu,
                  "torch_threads": torch.get_num_threads(), "batch_size": args.batch_size,
                  "max_new_tokens": args.max_new_tokens, "max_rounds": args.max_rounds, "repeat": args.repeat,
                  "seed": seed, "profile": params.profile, "force_tool_call": args.force_tool_call,
                  "prefix_cache": getattr(client, "prefix_cache", None),
                  "decode_chunk": getattr(client, "decode_chunk", None), "compare_plain": args.compare_plain},
        "sequential": seq_m, "batched": bat_m,
        "speedup": speedup, "ratio": ratio(bat_m["wall_s"], seq_m["wall_s"]),
        "cpu_ratio": ratio(bat_m["cpu_s"], seq_m["cpu_s"]),
        "throughput_ratio_generated_tokens": ratio(bat_m["generated_tokens_per_s"], seq_m["generated_tokens_per_s"]),
        "comparison": comparison,
        "determinism": {label: len(set(sigs)) == 1 for label, sigs in signatures.items()},
        **({"plain": plain_results} if plain_results else {}),
        **({"fast": fast_results} if fast_results else {}),
    }
    results["machine"]["load_average_at_end"] = load_average()
    results["targets"] = [{"target": f"batched (batch {args.batch_size}) >= {TARGET_SPEEDUP:g}x sequential questions/s",
                           "value": speedup, "unit": "x", "pass": speedup >= TARGET_SPEEDUP}]
    if fast_results:
        decode_x = fast_results["decode_ratio"]
        results["targets"] += [
            {"target": f"{args.fast} batch-1 decoding >= {TARGET_SPEEDUP:g}x transformers tokens/s",
             "value": decode_x or 0.0, "unit": "x", "pass": None if decode_x is None else decode_x >= TARGET_SPEEDUP},
            {"target": f"{args.fast} batched (batch {args.batch_size}) >= {TARGET_SPEEDUP:g}x transformers "
                       f"sequential questions/s", "value": fast_results["batched_vs_transformers_sequential"],
             "unit": "x", "pass": fast_results["batched_vs_transformers_sequential"] >= TARGET_SPEEDUP}]
    log.info("batched %.2f s vs sequential %.2f s: %.2fx; same trajectories: %s (%d of %d differ)", bat_m["wall_s"],
             seq_m["wall_s"], speedup, comparison["same_trajectories"], comparison["differing"], comparison["compared"])
    print(report(results))
    write_results(results, render(results), args.out, started)
    return 1 if args.require_same and not comparison["same_trajectories"] else 0


if __name__ == "__main__":
    sys.exit(main())
