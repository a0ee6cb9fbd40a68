#!/usr/bin/env python
"""Benchmark of QA synthesis: seed/subgraph sampling, and LLM generation against a local fake
OpenAI-compatible server (concurrency and the disk cache).

Every speed is a RATIO against a baseline measured in the same process, ours and the baseline in
turn, best of N (the machines are noisy: absolute timings move with the load, ratios much less).

    .venv/bin/python bench/qa.py                                   # everything, default sizes
    .venv/bin/python bench/qa.py --domains chemistry --synthetic-entities 0 --llm-seeds 16   # quick
    .venv/bin/python bench/qa.py --llm-seeds 0                     # seeds only
    .venv/bin/python bench/qa.py --toy --out /tmp/bench            # smoke test, seconds

1. Seeds: the eligible seeds of a graph (depth-3 ball of 20..400 nodes, ``params.seeds``) and their
   balls, with the library (``eligible_seeds`` + ``ball_nodes``: sparse matrix products, what
   ``sample_seed_subgraphs`` does) vs a per-seed networkx ``single_source_shortest_path_length``
   loop; both must give the same eligible set and the same balls. Target: >= 5x faster.
2. LLM generation: ``generate_llm_pairs`` on one domain through ``OpenAIChatClient`` against
   ``scripted_openai_app`` (uvicorn in a thread, ``--latency`` per reply) whose replies are valid
   template questions along real KG paths and judge verdicts "valid"; concurrency 1 (sequential,
   the baseline) vs ``--concurrency``. Target: >= 10x the sequential throughput. Then
   ``CachedChatClient`` over a fresh folder: a cold run, and a rerun answered from the cache (the
   server must see no request).

See docs/benchmarks.md for the method and the results.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import networkx as nx
import numpy as np

# first: sets the offline environment and puts the project root on sys.path
from _common import (
    DEGREE_LAW,
    MB,
    BenchParser,
    Stage,
    alternate,
    args_record,
    load_average,
    load_line,
    machine_info,
    make_synthetic,
    ratio,
    setup_logging,
    verdict,
    write_results,
)
from _toy import toy_project
from scipy import sparse

from pipelines.config import Params, QAParams, load_params
from pipelines.domains import load_registry
from pipelines.kg.graph import eligible_seeds
from pipelines.kg.importers import import_source
from pipelines.kg.model import KnowledgeGraph, assemble_graph
from pipelines.kg.store import read_kg
from pipelines.layout import kg_dir
from pipelines.llm.cache import CachedChatClient
from pipelines.llm.openai_client import OpenAIChatClient
from pipelines.llm.scripted import scripted_openai_app, serve_in_thread
from pipelines.manifest import MANIFEST_NAME
from pipelines.qa import prompts
from pipelines.qa.generate import BUCKETS, generate_llm_pairs, hop_choices
from pipelines.qa.models import Bucket, SeedSubgraph
from pipelines.qa.paths import RelationGraph
from pipelines.qa.seeds import ball_nodes, sample_seed_subgraphs
from pipelines.qa.template import sample_template_path, write_question
from pipelines.qa.validate import check_pair
from pipelines.text.names import normalise_text

log = logging.getLogger("bench.qa")
SYNTHETIC = "synthetic"
MODEL = "scripted-model"
NO_KEY_ENV = "OMNE_BENCH_QA_NO_API_KEY"  # an unset variable: the client sends no real key to the fake server

TARGET_SEEDS_SPEEDUP = 5.0  # eligible seeds + balls >= 5x faster than the networkx BFS loop
TARGET_CONCURRENCY_SPEEDUP = 10.0  # LLM generation throughput with concurrency >= 10x sequential


# --------------------------------------------------------------------------------------------
# 1. Seed subgraphs vs a networkx BFS loop
# --------------------------------------------------------------------------------------------

def networkx_graph(adjacency: sparse.csr_matrix) -> nx.Graph:
    """The same undirected graph (KnowledgeGraph.adjacency: no self loops) as networkx, all nodes kept."""
    upper = sparse.triu(adjacency, k=1).tocoo()
    graph = nx.Graph()
    graph.add_nodes_from(range(adjacency.shape[0]))
    graph.add_edges_from(zip(upper.row.tolist(), upper.col.tolist(), strict=True))
    return graph


def bench_seeds(name: str, kg: KnowledgeGraph, params: Params, sample: int, repeat: int, seed: int) -> dict:
    seeds = params.seeds
    n = kg.num_entities
    graph = networkx_graph(kg.adjacency())  # outside the timing: the baseline only pays for the traversals
    sampled = 0 < sample < n
    nodes = np.sort(np.random.default_rng(seed).choice(n, size=sample, replace=False)) if sampled else np.arange(n)
    node_list = nodes.tolist()
    depth, low, high = seeds.depth, seeds.min_nodes, seeds.max_nodes

    def ours() -> tuple[np.ndarray, list[np.ndarray]]:  # what sample_seed_subgraphs does, for every eligible seed
        adjacency = kg.adjacency()
        eligible = eligible_seeds(adjacency, seeds)
        return eligible, ball_nodes(adjacency, eligible, depth)

    def baseline() -> tuple[list[int], list[list[int]]]:
        eligible: list[int] = []
        balls: list[list[int]] = []
        for node in node_list:
            ball = nx.single_source_shortest_path_length(graph, node, cutoff=depth)
            if low <= len(ball) <= high:
                eligible.append(node)
                balls.append(list(ball))
        return eligible, balls

    log.info("  %s seeds: eligible_seeds + ball_nodes (all %d nodes) vs networkx BFS loop from %s (x%d each)",
             name, n, f"{nodes.size} sampled nodes, extrapolated" if sampled else "every node", repeat)
    (eligible, balls), ours_m, (base_eligible, base_balls), base_m = alternate(ours, baseline, repeat=repeat)

    # the same results: the eligible seeds among the baseline's nodes, and their balls
    ours_ball = dict(zip(eligible.tolist(), balls, strict=True))
    expected = eligible[np.isin(eligible, nodes)].tolist()
    same_eligible = expected == base_eligible
    same_balls = same_eligible and all(np.array_equal(ours_ball[v], np.sort(np.asarray(b, dtype=ours_ball[v].dtype)))
                                       for v, b in zip(base_eligible, base_balls, strict=True))
    scale = n / nodes.size
    base_m.update(nodes=int(nodes.size), extrapolated=sampled, measured_wall_s=base_m["wall_s"],
                  measured_cpu_s=base_m["cpu_s"], wall_s=round(base_m["wall_s"] * scale, 4),
                  cpu_s=round(base_m["cpu_s"] * scale, 4), eligible_in_sample=len(base_eligible))
    ours_m.update(nodes=n, nodes_per_s=round(n / ours_m["wall_s"], 1), eligible=int(eligible.size),
                  ball_entries=int(sum(b.size for b in balls)))
    base_m["nodes_per_s"] = round(n / base_m["wall_s"], 1)
    result = {
        "entities": n, "relations": kg.relations.height, "undirected_edges": graph.number_of_edges(),
        "eligible_seeds": int(eligible.size),
        "mean_ball_size": round(float(np.mean([b.size for b in balls])), 1) if balls else None,
        "ours": ours_m, "baseline": base_m,
        "ratio": ratio(ours_m["wall_s"], base_m["wall_s"]), "cpu_ratio": ratio(ours_m["cpu_s"], base_m["cpu_s"]),
        "speedup": ratio(base_m["wall_s"], ours_m["wall_s"]),
        "cpu_speedup": ratio(base_m["cpu_s"], ours_m["cpu_s"]),  # None when a run took no measurable CPU time
        "same_eligible": same_eligible, "same_balls": same_balls, "same_results": same_eligible and same_balls,
        "compared_nodes": int(nodes.size), "compared_eligible": len(base_eligible),
    }
    log.info("    ours %.3f s (%d eligible of %d); networkx %.3f s%s -> %.1fx faster; same results: %s",
             ours_m["wall_s"], eligible.size, n, base_m["wall_s"],
             f" (extrapolated from {base_m['measured_wall_s']:.3f} s on {nodes.size} nodes)" if sampled else "",
             result["speedup"], result["same_results"])
    graph.clear()
    return result


# --------------------------------------------------------------------------------------------
# 2. LLM generation against a fake OpenAI-compatible server
# --------------------------------------------------------------------------------------------

SEED_LINE = re.compile(r'^This is a subgraph of the ".*?" knowledge graph around the entity "(.*)"\.$', re.MULTILINE)
JUDGE_REPLY = json.dumps({"valid": True, "reason": "ok"})
BAD_REPLY = json.dumps({"path": [], "question": "", "answer": ""})


class FakeLLM:
    """The fake server's handler: a generation prompt gets the prepared reply of its seed and bucket
    (seed name parsed from the prompt's first line), a judge prompt the verdict "valid"."""

    def __init__(self, replies: dict[tuple[str, Bucket], str]) -> None:
        self.replies = replies
        self.unknown = 0

    def __call__(self, body: dict[str, Any]) -> str:
        messages = body.get("messages") or []
        system = messages[0].get("content", "") if messages else ""
        if system == prompts.JUDGE_SYSTEM:
            return JUDGE_REPLY
        user = next((m.get("content", "") for m in messages if m.get("role") == "user"), "")
        match = SEED_LINE.search(user)
        bucket: Bucket = "3+" if "Write a multi-hop" in user else "1-2"
        reply = self.replies.get((match.group(1), bucket)) if match else None
        if reply is None:
            self.unknown += 1
            return BAD_REPLY
        return reply


class ThreadServer:
    """The fake server in a thread of this process: its log and handler read directly."""

    def __init__(self, replies: dict[tuple[str, Bucket], str], latency_s: float) -> None:
        self.handler = FakeLLM(replies)
        self.app = scripted_openai_app(self.handler, latency_s=latency_s, model=MODEL)
        self.log = self.app.state.log

    @contextmanager
    def running(self) -> Iterator[str]:
        with serve_in_thread(self.app) as url:
            yield url

    def stats(self) -> dict[str, int]:
        return {"total": self.log.total, "max_in_flight": self.log.max_in_flight, "unknown": self.handler.unknown}

    def reset_max_in_flight(self) -> None:
        self.log.max_in_flight = 0


def _serve_child(replies: dict[tuple[str, Bucket], str], latency_s: float, conn: Any) -> None:
    """Child process: the same app and handler under serve_in_thread, plus a /bench/stats route."""
    server = ThreadServer(replies, latency_s)

    async def stats() -> dict[str, int]:
        return server.stats()

    async def reset() -> dict[str, bool]:
        server.reset_max_in_flight()
        return {"ok": True}

    server.app.add_api_route("/bench/stats", stats, methods=["GET"])
    server.app.add_api_route("/bench/reset", reset, methods=["POST"])
    with server.running() as url:
        conn.send(url)
        conn.recv()  # until the parent says stop (or dies: EOFError)


class ProcessServer:
    """The fake server in a child process (spawned): client and server do not share a GIL, as with a
    real endpoint; the log is read over HTTP."""

    def __init__(self, replies: dict[tuple[str, Bucket], str], latency_s: float) -> None:
        self.replies, self.latency_s = replies, latency_s
        self.url = ""

    @contextmanager
    def running(self) -> Iterator[str]:
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        child = context.Process(target=_serve_child, args=(self.replies, self.latency_s, theirs), daemon=True,
                                name="bench-qa-fake-llm")
        child.start()
        try:
            deadline = time.monotonic() + 120
            while not ours.poll(0.1):
                if not child.is_alive():
                    raise RuntimeError(f"the fake LLM server process exited (code {child.exitcode}) before it started")
                if time.monotonic() > deadline:
                    raise RuntimeError("the fake LLM server process did not start within 120 s")
            self.url = ours.recv()
            yield self.url
        finally:
            try:
                ours.send("stop")
            except (BrokenPipeError, OSError):
                pass
            child.join(timeout=30)
            if child.is_alive():
                child.terminate()
                child.join(timeout=10)

    def stats(self) -> dict[str, int]:
        return httpx.get(f"{self.url}/bench/stats", timeout=30).json()

    def reset_max_in_flight(self) -> None:
        httpx.post(f"{self.url}/bench/reset", timeout=30).raise_for_status()


def template_reply(graph: RelationGraph, sub: SeedSubgraph, bucket: Bucket, qa: QAParams,
                   rng: np.random.Generator, tries: int = 10) -> tuple[str, str, str] | None:
    """A generation reply that passes the rule checks: a template question along a real path of the
    seed's subgraph (JSON text, question, answer), or None when the subgraph has none."""
    allowed = set(sub.nodes)
    for _ in range(tries):
        for hops in hop_choices(bucket, qa.max_hops):
            steps = sample_template_path(graph, sub.seed, hops, allowed, rng)
            if steps is None:
                continue
            question = write_question(graph, sub.seed, steps)
            path = [graph.names[v] for v in graph.path_nodes(sub.seed, steps)]
            verdict = check_pair(graph, path, question, path[-1], sub.seed, bucket, strict=qa.strict_path,
                                 max_hops=qa.max_hops)
            if verdict.valid:
                text = json.dumps({"path": path, "question": question, "answer": path[-1]}, ensure_ascii=False)
                return text, question, path[-1]
    return None


def prepare_llm(kg: KnowledgeGraph, domain: str, params: Params, count: int) -> dict[str, Any]:
    """Seeds (sampled like `omne qa seeds`) for which both buckets have a valid scripted reply."""
    graph = RelationGraph(kg)
    qa = params.qa
    candidates = sample_seed_subgraphs(kg, domain, params.seeds, max(4 * count, qa.seeds_per_domain), qa.random_seed)
    rng = np.random.default_rng(qa.random_seed)
    chosen: list[SeedSubgraph] = []
    replies: dict[tuple[str, Bucket], str] = {}
    seen: set[tuple[str, str]] = set()
    skipped = 0
    for sub in candidates:
        if len(chosen) == count:
            break
        made = {bucket: template_reply(graph, sub, bucket, qa, rng) for bucket in BUCKETS}
        keys = {(normalise_text(r[1]), normalise_text(r[2])) for r in made.values() if r}
        if any(r is None for r in made.values()) or len(keys) < len(BUCKETS) or keys & seen:
            skipped += 1
            continue
        seen |= keys
        chosen.append(sub)
        replies.update({(sub.seed_name, bucket): r[0] for bucket, r in made.items() if r})
    return {"graph": graph, "subgraphs": chosen, "replies": replies, "skipped": skipped,
            "candidates": len(candidates)}


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest run's figures, with every run's wall time, the least CPU and the largest peak memory."""
    best = min(runs, key=lambda r: r["wall_s"])
    return {**best, "walls_s": [r["wall_s"] for r in runs], "cpu_s": min(r["cpu_s"] for r in runs),
            "peak_extra_rss_mb": max(r["peak_extra_rss_mb"] for r in runs),
            "requests_per_s": round(best["requests"] / best["wall_s"], 1),
            "pairs_per_s": round(best["pairs"] / best["wall_s"], 2), "runs": runs}


def chat_client(params: Params, url: str, concurrency: int) -> OpenAIChatClient:
    llm = params.llm.model_copy(update={"concurrency": concurrency, "api_key_env": NO_KEY_ENV})
    return OpenAIChatClient(llm, base_url=f"{url}/v1", model=MODEL)


def bench_llm(kg: KnowledgeGraph, domain: str, params: Params, args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    prep = prepare_llm(kg, domain, params, args.llm_seeds)
    prepare_s = time.perf_counter() - t0
    graph, subgraphs = prep["graph"], prep["subgraphs"]
    n = len(subgraphs)
    if n == 0:
        raise RuntimeError(f"{domain}: no seed subgraph with valid template replies for both buckets")
    targets: dict[Bucket, int] = {bucket: n for bucket in BUCKETS}
    log.info("  prepared scripted replies for %d seeds x %d buckets in %.1f s (%d candidates skipped: no valid "
             "template question in one bucket, or a duplicate)", n, len(BUCKETS), prepare_s,
             prep["skipped"])
    server = (ProcessServer if args.server == "process" else ThreadServer)(prep["replies"], args.latency)
    out: dict[str, Any] = {"domain": domain, "seeds": n, "tasks": n * len(BUCKETS), "latency_s": args.latency,
                           "concurrency": args.concurrency, "server": args.server,
                           "candidates_skipped": prep["skipped"], "prepare_replies_s": round(prepare_s, 2)}
    pair_sets: dict[str, list[frozenset[tuple[str, ...]]]] = {}  # the pairs of every run, by kind of run

    with server.running() as url:
        log.info("  fake OpenAI-compatible server at %s (in a %s; latency %.0f ms per reply)", url,
                 "child process" if args.server == "process" else "thread of this process", args.latency * 1000)
        # warm-up (untimed): the SDK import paths, the first connection, the server's first request
        generate_llm_pairs(graph, subgraphs[:2], params.qa, params.llm, domain,
                           chat_client(params, url, args.concurrency), {b: 2 for b in BUCKETS}, progress=False)

        def run(label: str, client: Any) -> dict[str, Any]:
            """One timed generation; the server's request count and peak concurrency read outside the timing."""
            before = server.stats()["total"]
            server.reset_max_in_flight()
            with Stage(interval=0.05) as stage:  # a coarse RSS sampler: its thread would compete for the GIL
                result = generate_llm_pairs(graph, subgraphs, params.qa, params.llm, domain, client, targets,
                                            progress=False)
            seen, stats = server.stats(), result.stats()
            pair_sets.setdefault(label, []).append(frozenset((p.id, p.question, p.answer, *p.path)
                                                             for p in result.pairs))
            return {"wall_s": round(stage.wall_s, 4), "cpu_s": round(stage.cpu_s, 4),
                    "peak_extra_rss_mb": round(stage.peak_extra / MB, 1), "requests": seen["total"] - before,
                    "max_in_flight": seen["max_in_flight"], "pairs": stats["pairs"],
                    "mean_attempts": stats["mean_attempts"]}

        runs: dict[str, list[dict[str, Any]]] = {"sequential": [], "concurrent": [], "cache_cold": [],
                                                 "cache_rerun": []}
        log.info("  generate_llm_pairs on %d seeds (%d tasks): concurrency 1 vs %d, no cache (x%d each, in turn)",
                 n, n * len(BUCKETS), args.concurrency, args.llm_repeat)
        sequential, concurrent = chat_client(params, url, 1), chat_client(params, url, args.concurrency)
        for _ in range(args.llm_repeat):
            runs["sequential"].append(run("sequential", sequential))
            runs["concurrent"].append(run("concurrent", concurrent))
        seq_m, conc_m = best_of(runs["sequential"]), best_of(runs["concurrent"])
        for label, m in (("sequential", seq_m), ("concurrent", conc_m)):
            out[label] = m
            log.info("    %-10s %.2f s: %d requests (%.1f/s), %d pairs (%.2f/s), max in flight %d", label, m["wall_s"],
                     m["requests"], m["requests_per_s"], m["pairs"], m["pairs_per_s"], m["max_in_flight"])
        out["speedup"] = ratio(seq_m["wall_s"], conc_m["wall_s"])
        out["throughput_ratio_requests"] = ratio(conc_m["requests_per_s"], seq_m["requests_per_s"])
        out["throughput_ratio_pairs"] = ratio(conc_m["pairs_per_s"], seq_m["pairs_per_s"])
        out["cpu_ratio"] = ratio(conc_m["cpu_s"], seq_m["cpu_s"])
        # what bounds the ratio: the time per request beyond the server's latency when sequential, and the
        # process CPU per request when concurrent (the client's work; the server runs elsewhere in process mode)
        out["sequential_overhead_ms_per_request"] = round(
            (seq_m["wall_s"] / seq_m["requests"] - args.latency) * 1000, 2)
        out["concurrent_cpu_ms_per_request"] = round(conc_m["cpu_s"] / conc_m["requests"] * 1000, 2)

        # the cache: a fresh folder per repeat, a cold run that fills it, a rerun answered from it
        log.info("  CachedChatClient (concurrency %d) over a fresh folder: cold run, then the same generation "
                 "again (x%d)", args.concurrency, args.cache_repeat)
        entries = 0
        for index in range(args.cache_repeat):
            with tempfile.TemporaryDirectory(prefix="omne-bench-qa-cache-") as tmp:
                cached = CachedChatClient(chat_client(params, url, args.concurrency), Path(tmp) / "llm")
                try:
                    runs["cache_cold"].append(run("cache_cold", cached))
                    runs["cache_rerun"].append(run("cache_rerun", cached))
                    entries = len(cached)
                finally:
                    cached.close()
            cold, warm = runs["cache_cold"][-1], runs["cache_rerun"][-1]
            log.info("    run %d: cold %.2f s (%d requests), rerun %.3f s (%d requests), %d cache entries", index + 1,
                     cold["wall_s"], cold["requests"], warm["wall_s"], warm["requests"], entries)
        cold_m, warm_m = best_of(runs["cache_cold"]), best_of(runs["cache_rerun"])
        unknown = server.stats()["unknown"]
        out["cache"] = {
            "cold": cold_m, "rerun": warm_m, "entries": entries,
            "rerun_ratio_vs_cold": ratio(warm_m["wall_s"], cold_m["wall_s"]),
            "rerun_speedup_vs_cold": round(cold_m["wall_s"] / warm_m["wall_s"], 1),
            "cold_ratio_vs_uncached": ratio(cold_m["wall_s"], conc_m["wall_s"]),
            "rerun_server_requests": max(r["requests"] for r in runs["cache_rerun"]),
        }
    out["same_pairs"] = len({pairs for runs_of in pair_sets.values() for pairs in runs_of}) == 1
    out["pairs_compared"] = {label: len(runs_of) for label, runs_of in pair_sets.items()}
    out["handler_unknown_prompts"] = unknown
    log.info("    cache rerun %.3f s = %.4f x the cold run (%d requests reached the server); same pairs in every "
             "run: %s", warm_m["wall_s"], out["cache"]["rerun_ratio_vs_cold"], out["cache"]["rerun_server_requests"],
             out["same_pairs"])
    return out


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    checks = []
    for name, g in results["seeds"].items():
        if "skipped" in g:
            continue
        checks.append({"kind": "seeds", "target": f"seeds + balls >= {TARGET_SEEDS_SPEEDUP:g}x networkx BFS loop",
                       "where": name, "value": g["speedup"], "unit": "x",
                       "pass": g["speedup"] >= TARGET_SEEDS_SPEEDUP and g["same_results"]})
    llm = results.get("llm")
    if llm and "skipped" not in llm:
        checks.append({"kind": "concurrency",
                       "target": f"LLM generation c={llm['concurrency']} >= {TARGET_CONCURRENCY_SPEEDUP:g}x sequential",
                       "where": llm["domain"], "value": llm["speedup"], "unit": "x",
                       "pass": llm["speedup"] >= TARGET_CONCURRENCY_SPEEDUP})
        checks.append({"kind": "cache", "target": "cached rerun sends no request", "where": llm["domain"],
                       "value": llm["cache"]["rerun_server_requests"], "unit": "requests",
                       "pass": llm["cache"]["rerun_server_requests"] == 0})
    return checks


def span(values: list[float], digits: int = 1) -> str:
    """One value, or the lowest and the highest: "7.7", "5.5-7.9"."""
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}-{high}"


def render(results: dict[str, Any]) -> str:
    """A Markdown table (bench/tables.py puts it into docs/benchmarks.md): the seeds' speed-up over networkx on the
    registry domains (each one up to four, else their range) and the generated graph, LLM generation's concurrent
    against sequential throughput, the cached rerun; each with its verdict against the targets (the graphs that
    missed the seeds' target named, up to four, else counted)."""
    checks = {kind: [c for c in results["targets"] if c.get("kind") == kind]
              for kind in ("seeds", "concurrency", "cache")}
    lines = ["| measurement | result |", "|---|---|"]
    measured = {name: g for name, g in results["seeds"].items() if "skipped" not in g}
    domains = [name for name in measured if name != SYNTHETIC]
    if measured:
        s = results["params"]["seeds"]
        labels, values = [], []
        if domains:
            listed = len(domains) <= 4
            labels.append(" / ".join(domains) if listed else f"{len(domains)} domains (lowest-highest)")
            values.append(" / ".join(f"{measured[d]['speedup']:.1f}" for d in domains) if listed
                          else span([measured[d]["speedup"] for d in domains]))
        if SYNTHETIC in measured:
            labels.append(f"synthetic ({measured[SYNTHETIC]['entities']:,} entities)")
            values.append(f"{measured[SYNTHETIC]['speedup']:.1f}")
        same = all(g["same_results"] for g in measured.values())
        missed = [c["where"] for c in checks["seeds"] if not c["pass"]]
        missed_on = ", ".join(missed) if len(missed) <= 4 else f"{len(missed)} of {len(checks['seeds'])} graphs"
        skipped = [name for name, g in results["seeds"].items() if "skipped" in g]
        lines.append(f"| seeds (depth-{s['depth']} balls of {s['min_nodes']}..{s['max_nodes']} nodes), x faster than "
                     f"networkx: {' / '.join(labels)}{f' ({len(skipped)} skipped)' if skipped else ''} | "
                     f"{' / '.join(values)} ({f'MISS on {missed_on}' if missed else 'PASS'}; "
                     f"{'the same' if same else 'NOT the same'} seeds and balls) |")
    llm = results.get("llm") or {}
    if "skipped" in llm:
        lines.append(f"| LLM generation | skipped ({llm['skipped']}) |")
    elif llm:
        seq, conc, cache = llm["sequential"], llm["concurrent"], llm["cache"]
        where = "a child process" if llm["server"] == "process" else "a thread"
        (concurrency,), (cached,) = checks["concurrency"], checks["cache"]
        lines += [f"| LLM generation on {llm['domain']} ({llm['seeds']} seeds x 2 buckets, fake server in {where}, "
                  f"{llm['latency_s'] * 1000:.0f} ms a reply), concurrency {llm['concurrency']} against sequential | "
                  f"**{llm['speedup']:.1f}x** ({conc['requests_per_s']:.0f} against {seq['requests_per_s']:.0f} "
                  f"requests/s, client CPU {llm['concurrent_cpu_ms_per_request']:.1f} ms a request; "
                  f"{verdict(concurrency['pass'])}) |",
                  f"| cached rerun | {cache['rerun_server_requests']} requests, "
                  f"{cache['rerun_ratio_vs_cold']:.2f}x the cold run's time ({verdict(cached['pass'])}) |"]
    return "\n".join(lines)


def details(results: dict[str, Any]) -> str:
    """The plain-text report on stdout before the table: every graph's and every run's figures."""
    out = ["seed subgraphs: eligible seeds (depth-3 ball of 20..400 nodes) + their balls; x = times faster than "
           "the networkx BFS loop"]
    head = (f"{'graph':<10} {'entities':>8} {'edges':>7} {'eligible':>8} {'ours s':>8} {'nodes/s':>9} "
            f"{'nx s':>9} {'nodes/s':>8} {'x faster':>8} {'x cpu':>6} {'same':>5}")
    out += [head, "-" * len(head)]
    for name, g in results["seeds"].items():
        if "skipped" in g:
            out.append(f"{name:<10} skipped: {g['skipped']}")
            continue
        o, b = g["ours"], g["baseline"]
        star = "*" if b["extrapolated"] else " "
        out.append(f"{name:<10} {g['entities']:>8,} {g['undirected_edges']:>7,} {g['eligible_seeds']:>8,} "
                   f"{o['wall_s']:>8.3f} {o['nodes_per_s']:>9,.0f} {b['wall_s']:>8.3f}{star} {b['nodes_per_s']:>8,.0f} "
                   f"{g['speedup']:>8.1f} {g['cpu_speedup'] or 0:>6.1f} {str(g['same_results']).lower():>5}")
    if any(g.get("baseline", {}).get("extrapolated") for g in results["seeds"].values()):
        out.append("* networkx timed on a node sample (--seed-sample) and extrapolated to all nodes; 'same' compares "
                   "the sample.")
    llm = results.get("llm")
    if llm and "skipped" not in llm:
        where = "a child process" if llm["server"] == "process" else "a thread of this process (shared GIL)"
        out += ["", (f"LLM generation: generate_llm_pairs on {llm['domain']}, {llm['seeds']} seeds x 2 buckets, "
                     f"fake OpenAI server in {where}, {llm['latency_s'] * 1000:.0f} ms per reply")]
        head = (f"{'run':<24} {'wall s':>8} {'requests':>8} {'req/s':>8} {'pairs':>6} {'pairs/s':>8} "
                f"{'in flight':>9} {'x':>8}")
        out += [head, "-" * len(head)]
        seq, conc, cache = llm["sequential"], llm["concurrent"], llm["cache"]
        rows = [("sequential (c=1)", seq, 1.0), (f"concurrent (c={llm['concurrency']})", conc, llm["speedup"]),
                (f"cache cold (c={llm['concurrency']})", cache["cold"], seq["wall_s"] / cache["cold"]["wall_s"]),
                ("cache rerun", cache["rerun"], seq["wall_s"] / cache["rerun"]["wall_s"])]
        for label, m, x in rows:
            out.append(f"{label:<24} {m['wall_s']:>8.3f} {m['requests']:>8} {m['requests_per_s']:>8.1f} "
                       f"{m['pairs']:>6} {m['pairs_per_s']:>8.1f} {m['max_in_flight']:>9} {x:>8.1f}")
        out.append(f"x = sequential wall time / this run's. Cache rerun = {cache['rerun_ratio_vs_cold']:.4f} x the "
                   f"cold "
                   f"run ({cache['rerun_server_requests']} requests reached the server); cold run with cache = "
                   f"{cache['cold_ratio_vs_uncached']:.2f} x the uncached concurrent run. Same pairs in every run: "
                   f"{str(llm['same_pairs']).lower()}.")
    out += ["", "targets"]
    for c in results["targets"]:
        out.append(f"  {verdict(c['pass'])}  {c['target']:<48} {c['where']:<10} {c['value']:,.2f} {c['unit']}")
    out += ["", load_line(results["machine"]) + "."]
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------

def domain_kg(params: Params, domain: str) -> KnowledgeGraph:
    """The built KG of a registry domain (built with `omne kg build` first when missing)."""
    folder = kg_dir(params.artifacts_dir, domain)
    if not (folder / MANIFEST_NAME).is_file():
        log.info("building the KG of %s with `omne kg build` (artifacts missing)", domain)
        omne = Path(sys.executable).with_name("omne")
        command = [str(omne)] if omne.exists() else [sys.executable, "-m", "pipelines.cli"]
        subprocess.run([*command, "--params", str(params.root / "params.yaml"), "kg", "build", "--domain", domain],
                       cwd=params.root, check=True)
    return read_kg(folder)


TOY = {"synthetic_entities": 400, "synthetic_relations": 1200, "seed_sample": 100, "repeat": 1, "synthetic_repeat": 1,
       "llm_domain": "solar", "llm_seeds": 3, "concurrency": 4, "latency": 0.01, "server": "thread", "llm_repeat": 1,
       "cache_repeat": 1}


def build_parser() -> BenchParser:
    parser = BenchParser(
        "qa",
        description="Benchmark QA synthesis against baselines timed in the same process (ours and the baseline in "
                    "turn, best of N):\n"
                    "  1. seed/subgraph sampling (eligible_seeds + ball_nodes) vs a per-seed networkx BFS loop, on "
                    "the registry domains\n     and a generated power-law-ish graph; both must give the same "
                    "eligible seeds and balls;\n"
                    "  2. LLM generation (generate_llm_pairs + OpenAIChatClient) against a local fake "
                    "OpenAI-compatible server that\n     answers after --latency: concurrency --concurrency vs 1, "
                    "and a rerun answered from the disk cache.",
        epilog="Targets (printed as PASS/MISS, never asserted): seeds >= 5x faster than networkx with the same "
               "results;\nLLM generation with concurrency >= 10x the sequential throughput; the cached rerun sends "
               "no request.\nResults: a report and a Markdown table (docs/benchmarks.md's) on stdout, every number "
               "in --out\n(default: bench/results/).",
        toy=TOY, toy_note="the domains: the throw-away project's solar domain (its KG built in-process)",
        repeat=3, repeat_help="seeds runs per registry domain (ours and networkx in turn, best kept)",
        seed_help="seed of the generated graph and of the networkx node sample")
    parser.add_argument("--domains", nargs="*", default=None, metavar="NAME",
                        help="registry domains for the seeds benchmark (default: every domain of the registry; give "
                             "the flag alone for none); a domain whose KG is not built is built with `omne kg build`")
    parser.add_argument("--synthetic-entities", type=int, default=20_000, metavar="N",
                        help="entities of the generated graph for the seeds benchmark (0: none)")
    parser.add_argument("--synthetic-relations", type=int, default=60_000, metavar="N",
                        help="relations of the generated graph (endpoints ~ rank^-0.6: a few hubs)")
    parser.add_argument("--seed-sample", type=int, default=6000, metavar="N",
                        help="the networkx baseline runs from at most N nodes per graph: a seeded uniform sample on "
                             "larger graphs, its time extrapolated to all nodes (0: every node, however large)")
    parser.add_argument("--synthetic-repeat", type=int, default=2, metavar="N",
                        help="seeds runs on the generated graph")
    parser.add_argument("--llm-domain", default="chemistry", metavar="NAME",
                        help="registry domain whose KG and seeds the LLM generation uses")
    parser.add_argument("--llm-seeds", type=int, default=64, metavar="N",
                        help="seed subgraphs generated for (x 2 buckets = generation tasks; 0: no LLM benchmark)")
    parser.add_argument("--concurrency", type=int, default=32, metavar="N",
                        help="requests in flight of the concurrent client (the baseline: 1)")
    parser.add_argument("--latency", type=float, default=0.05, metavar="S",
                        help="seconds the fake server waits before each reply (asyncio.sleep: concurrent requests "
                             "wait together)")
    parser.add_argument("--server", choices=("process", "thread"), default="process",
                        help="where the fake server runs: a child process (like a real endpoint: client and server "
                             "do not share the GIL), or a thread of this process (client and server share one GIL: "
                             "the per-request CPU of both bounds the concurrent throughput)")
    parser.add_argument("--llm-repeat", type=int, default=3, metavar="N",
                        help="runs of the sequential and the concurrent generation (in turn, best kept)")
    parser.add_argument("--cache-repeat", type=int, default=2, metavar="N",
                        help="cold run + cached rerun pairs, each over a fresh cache folder (best kept)")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("repeat", "synthetic_repeat", "llm_repeat", "cache_repeat", "concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("synthetic_entities", "synthetic_relations", "seed_sample", "llm_seeds"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must be >= 0")
    if args.latency < 0:
        parser.error("--latency must be >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.verbose, ("httpx", "httpx2", "openai", "uvicorn", "uvicorn.error", "filelock", "pipelines"))
    started = time.perf_counter()
    if args.params is None:  # --toy: a throw-away project, the solar KG built in-process
        args.params = toy_project(build="kg")
    params = load_params(args.params, args.profile)
    domains = load_registry(params.registry_path).names if args.domains is None else args.domains
    results: dict[str, Any] = {
        "benchmark": "qa",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {**machine_info(), "load_average_at_start": load_average()},
        "params": {"profile": params.profile, "seeds": params.seeds.model_dump(),
                   "qa": params.qa.model_dump(include={"random_seed", "max_hops", "max_retries", "strict_path",
                                                       "max_prompt_relations", "show_descriptions", "judge"}),
                   "llm": params.llm.model_dump(include={"timeout_s", "max_retries", "json_repair_rounds",
                                                         "temperature", "max_tokens"})},
        "args": args_record(args),
        "seeds": {},
    }

    for domain in domains:
        log.info("== %s", domain)
        try:
            kg = domain_kg(params, domain)
        except (FileNotFoundError, subprocess.CalledProcessError) as exc:  # ArtifactMissingError included
            log.warning("skipping %s: %s", domain, exc)
            results["seeds"][domain] = {"skipped": str(exc)}
            continue
        results["seeds"][domain] = bench_seeds(domain, kg, params, args.seed_sample, args.repeat, args.seed)

    if args.synthetic_entities > 0:
        with tempfile.TemporaryDirectory(prefix="omne-bench-qa-synthetic-") as tmp:
            log.info("== %s: generating %d entities, %d relations (seed %d)", SYNTHETIC, args.synthetic_entities,
                     args.synthetic_relations, args.seed)
            t0 = time.perf_counter()
            source = make_synthetic(Path(tmp), args.synthetic_entities, args.synthetic_relations, args.seed)
            kg = assemble_graph(import_source(source, Path(tmp)), directed=source.is_directed)
            log.info("   generated and assembled in %.1f s", time.perf_counter() - t0)
        graph = bench_seeds(SYNTHETIC, kg, params, args.seed_sample, args.synthetic_repeat, args.seed)
        graph["generator"] = {"entities": args.synthetic_entities, "relations": args.synthetic_relations,
                              "seed": args.seed, "degree_law": DEGREE_LAW}
        results["seeds"][SYNTHETIC] = graph
        del kg

    if args.llm_seeds > 0:
        log.info("== LLM generation on %s", args.llm_domain)
        results["llm"] = bench_llm(domain_kg(params, args.llm_domain), args.llm_domain, params, args)
    else:
        results["llm"] = {"skipped": "--llm-seeds 0"}

    results["machine"]["load_average_at_end"] = load_average()
    results["targets"] = targets(results)
    print("\n" + details(results))
    write_results(results, render(results), args.out, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
