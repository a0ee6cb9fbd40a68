#!/usr/bin/env python
"""Benchmark of the agent's KG tools (node_info, entity_matcher): in-process, over HTTP, and against
naive baselines measured in the same process.

Speeds are reported as RATIOS against baselines timed in the same run (the machines are noisy:
absolute timings move with the load, ratios much less); the absolute latencies are printed too, and
the targets are reported as PASS/MISS, never asserted.

    .venv/bin/python bench/tools.py                                   # default domains + 100k synthetic graph
    .venv/bin/python bench/tools.py --domains chemistry --synthetic-entities 0   # one small domain only
    .venv/bin/python bench/tools.py --domains --work-dir /tmp/omne-synth         # synthetic only, kept for reruns
    .venv/bin/python bench/tools.py --toy --out /tmp/bench                       # smoke test, seconds

Measured per graph (a registry domain, or a generated power-law-ish graph built into a temporary
project folder with the library's own build steps):

* node_info: ``KGToolbox.call`` on the python-call text (parse + execute), p50/p99 latency and
  calls/s; baselines: (a) KG-R1's server per call — a Python loop over every (head, relation, tail)
  triple of the domain collecting the entity's relations, formatted like node_info; (b) a networkx
  MultiDiGraph built once, ``out_edges``/``in_edges`` with data + the same formatting.
* entity_matcher: the full call (MiniLM query embedding + exact top-5) with a cold query cache
  (query strings never seen in this process, fresh disk cache) and a warm one (repeated queries);
  the exact top-5 search alone (``DomainGraph.nearest``) vs LanceDB flat search
  (``EntityIndex.search_vector`` on the same vectors); on the synthetic graph also the IVF-PQ index
  that the build wrote (its latency and recall@5 against exact).
* HTTP: the real FastAPI app (``create_app``) under uvicorn in a background thread on 127.0.0.1;
  single calls through ``HttpToolClient.call`` and the batch endpoint with batches of 64 calls.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import lancedb
import networkx as nx
import numpy as np
import threadpoolctl
import torch
import uvicorn
import yaml

# first: sets the offline environment and puts the project root on sys.path
from _common import (
    DEGREE_LAW,
    BenchParser,
    args_record,
    figure,
    load_average,
    load_line,
    machine_info,
    ratio,
    setup_logging,
    verdict,
    write_results,
)
from _common import make_synthetic as _make_synthetic
from _toy import toy_project
from tqdm.auto import tqdm

from pipelines.agent.calls import ToolCall, format_call
from pipelines.agent.client import HttpToolClient
from pipelines.agent.kg_view import DomainGraph
from pipelines.agent.requests import CallRequest
from pipelines.agent.server import create_app
from pipelines.agent.tools import KGToolbox, relation_line
from pipelines.config import Params, load_params
from pipelines.domains import Domain, Registry, SourceSpec, load_registry, save_registry
from pipelines.kg.build import build_entity_index, build_knowledge_graph
from pipelines.kg.embed import Encoder
from pipelines.kg.index import TABLE_NAME, EntityIndex
from pipelines.kg.store import read_kg
from pipelines.layout import index_dir, kg_dir
from pipelines.manifest import MANIFEST_NAME

log = logging.getLogger("bench.tools")
TOP_K = 5
CHUNK = 100  # ours and the baselines run in turn, CHUNK calls each, so a burst of load hits all alike
SYNTHETIC = "synthetic"

TARGET_NODE_INFO_RATIO = 100.0  # node_info >= 100x the linear-scan baseline
TARGET_NEAREST_P50_MS = 5.0  # exact top-5 over 100k entities, in-process
TARGET_NEAREST_MIN_ENTITIES = 100_000
TARGET_BATCH_CALLS_PER_S = 2000.0  # HTTP batch endpoint


# --------------------------------------------------------------------------------------------
# Measurement helpers
# --------------------------------------------------------------------------------------------

def summary(latencies_s: Sequence[float], calls: int | None = None) -> dict[str, Any]:
    """p50/p99/mean of per-call latencies and the sequential rate (calls / summed latency)."""
    if not latencies_s:
        return {"calls": 0}
    seconds = np.asarray(latencies_s, dtype=np.float64)
    total = float(seconds.sum())
    calls = len(seconds) if calls is None else calls
    ms = seconds * 1000.0
    return {"calls": calls, "p50_ms": round(float(np.percentile(ms, 50)), 4),
            "p99_ms": round(float(np.percentile(ms, 99)), 4), "mean_ms": round(float(ms.mean()), 4),
            "calls_per_s": round(calls / total, 1) if total > 0 else None}


def speedup(ours_s: Sequence[float], baseline_s: Sequence[float]) -> dict[str, float | None]:
    """How many times faster ours is: baseline / ours, on the mean (= calls/s ratio) and on the p50."""
    if not len(ours_s) or not len(baseline_s):
        return {"mean": None, "p50": None}
    return {"mean": ratio(float(np.mean(baseline_s)), float(np.mean(ours_s))),
            "p50": ratio(float(np.median(baseline_s)), float(np.median(ours_s)))}


def timed(fn: Callable[[Any], Any], items: Sequence[Any], out: list[float]) -> list[Any]:
    results = []
    for item in items:
        t0 = time.perf_counter()
        results.append(fn(item))
        out.append(time.perf_counter() - t0)
    return results


def chunks(n: int, size: int = CHUNK) -> list[range]:
    return [range(start, min(start + size, n)) for start in range(0, n, size)]


def progress(iterable: Any, desc: str, total: int | None = None) -> Any:
    return tqdm(iterable, desc=f"    {desc}", total=total, unit="chunk", leave=False, mininterval=2.0,
                file=sys.stderr)


# --------------------------------------------------------------------------------------------
# Baselines for node_info
# --------------------------------------------------------------------------------------------

def _format(name: str, etype: str, description: str, relations: list[tuple[str, str, str, str]], cap: int | None,
            arrow: str = "->") -> str:
    """The node_info layout, for the baselines (same fields, same cap; lines read from the entity, as
    tools.node_info_lines: from_entity)."""
    lines = [f"Entity: {name}", f"Type: {etype or 'unknown'}", f"Description: {description or 'none'}",
             f"Relations ({len(relations)}):"]
    shown = relations if cap is None else relations[:cap]
    for rank, (head, relation, tail, text) in enumerate(shown, start=1):
        link = relation_line(relation, tail if head == name else head, outgoing=head == name, directed=arrow == "->")
        lines.append(f"{rank}. {link}" + (f": {text}" if text else ""))
    if len(shown) < len(relations):
        lines.append(f"… {len(relations) - len(shown)} more relations not shown")
    return "\n".join(lines)


class LinearScan:
    """KG-R1's server: the triples as a list of tuples, scanned in full for every call."""

    def __init__(self, graph: DomainGraph, cap: int | None) -> None:
        names = graph.names
        self.triples = [(names[s], k, names[d], t) for s, d, k, t in
                        zip(graph.rel_src.tolist(), graph.rel_dst.tolist(), graph.rel_keywords,
                            graph.rel_descriptions, strict=True)]
        self.info = {n: (t, d) for n, t, d in zip(names, graph.types, graph.descriptions, strict=True)}
        self.cap = cap

    def __call__(self, name: str) -> tuple[str, int]:
        found = []
        for triple in self.triples:
            if triple[0] == name or triple[2] == name:
                found.append(triple)
        info = self.info.get(name)
        if info is None and not found:
            return f'Entity "{name}" not found in KG', 0
        etype, description = info or ("", "")
        return _format(name, etype, description, found, self.cap), len(found)


class NetworkxAdjacency:
    """A networkx MultiDiGraph built once; a call reads the node's out- and in-edges with their data."""

    def __init__(self, graph: DomainGraph, cap: int | None) -> None:
        t0 = time.perf_counter()
        g = nx.MultiDiGraph()
        g.add_nodes_from((n, {"type": t, "description": d})
                         for n, t, d in zip(graph.names, graph.types, graph.descriptions, strict=True))
        names = graph.names
        g.add_edges_from((names[s], names[d], k, {"description": t}) for s, d, k, t in
                         zip(graph.rel_src.tolist(), graph.rel_dst.tolist(), graph.rel_keywords,
                             graph.rel_descriptions, strict=True))
        self.build_s = time.perf_counter() - t0
        self.g, self.cap = g, cap

    def __call__(self, name: str) -> tuple[str, int]:
        if name not in self.g:
            return f'Entity "{name}" not found in KG', 0
        node = self.g.nodes[name]
        found = [(h, k, t, d) for h, t, k, d in self.g.out_edges(name, keys=True, data="description")]
        found += [(h, k, t, d) for h, t, k, d in self.g.in_edges(name, keys=True, data="description")]
        return _format(name, node["type"], node["description"], found, self.cap), len(found)


RELATIONS_LINE = re.compile(r"^Relations \((\d+)\):$", re.MULTILINE)


def relation_count(content: str) -> int | None:
    match = RELATIONS_LINE.search(content)
    return int(match.group(1)) if match else None


# --------------------------------------------------------------------------------------------
# Query strings
# --------------------------------------------------------------------------------------------

class QueryPool:
    """Distinct query strings derived from entity names, never handed out twice in this process."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    @staticmethod
    def variant(name: str, kind: int) -> str:
        """The name, lower case, without its last word, two middle letters swapped, or without a letter."""
        if kind == 1:
            return name.lower()
        if kind == 2 and " " in name.strip():
            return name.strip().rsplit(" ", 1)[0]
        if kind == 3 and len(name) > 3:
            i = len(name) // 2
            return name[:i - 1] + name[i] + name[i - 1] + name[i + 1:]
        if kind == 4 and len(name) > 4:
            i = len(name) // 3
            return name[:i] + name[i + 1:]
        return name

    def draw(self, names: list[str], count: int, rng: np.random.Generator) -> list[str]:
        out: list[str] = []
        order = rng.permutation(len(names))
        for round_ in range(5):  # every name in 5 variants at most
            for j in order.tolist():
                if len(out) == count:
                    return out
                text = self.variant(names[j], (j + round_) % 5).strip()
                if text and text not in self.seen:
                    self.seen.add(text)
                    out.append(text)
        return out


# --------------------------------------------------------------------------------------------
# HTTP server in a background thread
# --------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(toolbox: KGToolbox) -> Iterator[str]:
    """The real app under uvicorn, on 127.0.0.1 and a free port, in a daemon thread."""
    port = free_port()
    config = uvicorn.Config(create_app(toolbox), host="127.0.0.1", port=port, log_level="warning",
                            access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="bench-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the tool server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def bench_http(url: str, texts: list[str], batch_size: int, expected: dict[str, str]) -> dict[str, Any]:
    """Single calls through HttpToolClient.call, then the batch endpoint; content checked against in-process."""
    client = HttpToolClient(url)
    try:
        for text in texts[:20]:  # warm-up: connection, first-request costs
            client.call(text)
        single: list[float] = []
        results = []
        for part in progress(chunks(len(texts)), "http single", len(chunks(len(texts)))):
            results += timed(client.call, [texts[i] for i in part], single)
        batches = [[CallRequest(call=t) for t in texts[i:i + batch_size]] for i in range(0, len(texts), batch_size)]
        client.batch(batches[0])
        batch_s: list[float] = []
        batch_results = []
        for batch in progress(batches, "http batch", len(batches)):
            t0 = time.perf_counter()
            batch_results += client.batch(batch)
            batch_s.append(time.perf_counter() - t0)
    finally:
        client.close()
    mismatched = sum(1 for text, r in zip(texts, results, strict=True)
                     if text in expected and r.content != expected[text])
    mismatched += sum(1 for text, r in zip(texts, batch_results, strict=True)
                      if text in expected and r.content != expected[text])
    failed = sum(not r.ok for r in results) + sum(not r.ok for r in batch_results)
    per_batch = summary(batch_s, calls=len(texts))
    return {"single": summary(single),
            "batch": {"batch_size": batch_size, "batches": len(batches), "calls": len(texts),
                      "calls_per_s": per_batch["calls_per_s"], "batch_p50_ms": per_batch["p50_ms"],
                      "batch_p99_ms": per_batch["p99_ms"]},
            "content_mismatches_vs_in_process": mismatched, "failed_calls": failed}


# --------------------------------------------------------------------------------------------
# One graph
# --------------------------------------------------------------------------------------------

def call_text(name: str, node_name: str, graph_type: str) -> str:
    return format_call(ToolCall(name=name, arguments={"node_name": node_name, "graph_type": graph_type}))


def bench_node_info(toolbox: KGToolbox, graph: DomainGraph, names: list[str], baseline_calls: int,
                    url: str, batch_size: int) -> dict[str, Any]:
    domain = graph.name
    cap = toolbox.tool_params.node_info_max_neighbors
    texts = [call_text("node_info", n, domain) for n in names]
    parsed = [ToolCall(name="node_info", arguments={"node_name": n, "graph_type": domain}) for n in names]

    log.info("  node_info: building baselines (triple list, networkx MultiDiGraph)")
    t0 = time.perf_counter()
    scan = LinearScan(graph, cap)
    scan_build_s = time.perf_counter() - t0
    nxg = NetworkxAdjacency(graph, cap)
    log.info("    triple list %.2f s, networkx %.2f s", scan_build_s, nxg.build_s)

    every = max(1, len(names) // max(1, baseline_calls))
    for i in range(min(20, len(names))):  # warm-up
        toolbox.call(texts[i]), toolbox.execute(parsed[i]), nxg(names[i])
    ours: list[float] = []
    execute: list[float] = []
    nx_s: list[float] = []
    scan_s: list[float] = []
    ours_on_scanned: list[float] = []
    results, nx_counts, scan_counts = [], [], []
    log.info("  node_info: %d calls in-process (KGToolbox.call and .execute), networkx on the same names, "
             "linear scan on every %d-th name", len(names), every)
    gc.collect()
    for part in progress(chunks(len(names)), "node_info", len(chunks(len(names)))):
        start = len(ours)
        results += timed(toolbox.call, [texts[i] for i in part], ours)
        timed(toolbox.execute, [parsed[i] for i in part], execute)
        nx_counts += [c for _, c in timed(nxg, [names[i] for i in part], nx_s)]
        scanned = [i for i in part if i % every == 0]
        scan_counts += [(i, c) for i, (_, c) in zip(scanned, timed(scan, [names[i] for i in scanned], scan_s),
                                                    strict=True)]
        ours_on_scanned += [ours[start + (i - part.start)] for i in scanned]

    counts = [relation_count(r.content) for r in results]
    agree_nx = float(np.mean([a == b for a, b in zip(counts, nx_counts, strict=True)]))
    agree_scan = float(np.mean([counts[i] == c for i, c in scan_counts])) if scan_counts else None
    failed = sum(not r.ok for r in results)
    degrees = np.array([c or 0 for c in counts])
    out: dict[str, Any] = {
        "in_process": summary(ours),
        "execute_only": summary(execute),
        "linear_scan": {**summary(scan_s), "triples": len(scan.triples), "build_s": round(scan_build_s, 3)},
        "networkx": {**summary(nx_s), "build_s": round(nxg.build_s, 3)},
        "speedup_vs_linear_scan": speedup(ours_on_scanned, scan_s),
        "speedup_vs_networkx": speedup(ours, nx_s),
        "execute_speedup_vs_networkx": speedup(execute, nx_s),
        "relation_count_agreement": {"networkx": round(agree_nx, 4),
                                     "linear_scan": round(agree_scan, 4) if agree_scan is not None else None},
        "failed_calls": failed,
        "sampled_degree": {"mean": round(float(degrees.mean()), 2), "max": int(degrees.max())},
        "node_info_max_neighbors": cap,
    }
    del scan, nxg
    gc.collect()
    log.info("    in-process p50 %.1f µs, %.0f calls/s; linear scan p50 %.2f ms -> x%.0f; "
             "networkx p50 %.1f µs -> x%.2f",
             out["in_process"]["p50_ms"] * 1000, out["in_process"]["calls_per_s"], out["linear_scan"]["p50_ms"],
             out["speedup_vs_linear_scan"]["mean"], out["networkx"]["p50_ms"] * 1000,
             out["speedup_vs_networkx"]["mean"])
    log.info("  node_info over HTTP: %d single calls, then batches of %d", len(texts), batch_size)
    out["http"] = bench_http(url, texts, batch_size, {t: r.content for t, r in zip(texts, results, strict=True)})
    log.info("    single p50 %.2f ms (%.0f calls/s); batch %.0f calls/s",
             out["http"]["single"]["p50_ms"], out["http"]["single"]["calls_per_s"],
             out["http"]["batch"]["calls_per_s"])
    return out


def bench_entity_matcher(toolbox: KGToolbox, graph: DomainGraph, encoder: Encoder, pool: QueryPool,
                         rng: np.random.Generator, calls: int, cold_calls: int, warm_pool: int, search_queries: int,
                         flat: EntityIndex, ann: EntityIndex | None, url: str, batch_size: int) -> dict[str, Any]:
    domain = graph.name
    queries = pool.draw(graph.names, max(cold_calls, warm_pool, search_queries), rng)
    texts = [call_text("entity_matcher", q, domain) for q in queries]
    texts[cold_calls:] = []  # the cold pass times the first cold_calls; the other queries are encoded untimed
    log.info("  entity_matcher cold: %d never-seen queries (encode + exact top-%d)", len(texts), TOP_K)
    cold: list[float] = []
    results = []
    gc.collect()
    for part in progress(chunks(len(texts)), "cold", len(chunks(len(texts)))):
        results += timed(toolbox.call, [texts[i] for i in part], cold)
    out: dict[str, Any] = {"cold": summary(cold), "failed_calls": sum(not r.ok for r in results)}
    if len(queries) > cold_calls:  # queries beyond the cold sample, for the warm pool and the search (untimed)
        encoder.encode(queries[cold_calls:])
    for text in (call_text("entity_matcher", q, domain) for q in queries[cold_calls:warm_pool]):
        toolbox.call(text)  # into the toolbox's query cache (untimed)

    # what the model alone costs per query (no cache, no search): explains the cold figure
    extra = pool.draw(graph.names, min(200, len(queries)), rng)
    model_s: list[float] = []
    timed(lambda q: encoder.model.encode([q], normalize_embeddings=True, convert_to_numpy=True), extra, model_s)
    out["query_encode_model_only"] = summary(model_s)
    # the same with torch on one thread: how much the default thread count costs on a busy machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model_1: list[float] = []
        timed(lambda q: encoder.model.encode([q], normalize_embeddings=True, convert_to_numpy=True),
              pool.draw(graph.names, min(200, len(queries)), rng), model_1)
    finally:
        torch.set_num_threads(threads)
    out["query_encode_model_only_torch_1_thread"] = summary(model_1)

    warm_texts = [call_text("entity_matcher", q, domain) for q in queries[:warm_pool]]  # all cached now
    cycle = [warm_texts[i % len(warm_texts)] for i in range(calls)]
    log.info("  entity_matcher warm: %d calls cycling over %d cached queries", len(cycle), len(warm_texts))
    warm: list[float] = []
    for part in progress(chunks(len(cycle)), "warm", len(chunks(len(cycle)))):
        timed(toolbox.call, [cycle[i] for i in part], warm)
    out["warm"] = summary(warm)
    out["warm_pool"] = len(warm_texts)

    # exact top-k alone, vs LanceDB flat search on the same vectors (and the built ANN index, if any)
    search_texts = queries[:search_queries]
    vectors = encoder.encode(search_texts)  # in the disk cache already: no model time
    log.info("  search: %d query vectors, DomainGraph.nearest vs LanceDB flat%s over %d vectors", len(vectors),
             " and IVF-PQ" if ann else "", graph.num_entities)
    for v in vectors[:5]:  # warm-up
        graph.nearest(v, TOP_K), flat.search_vector(v, TOP_K)
        if ann:
            ann.search_vector(v, TOP_K)
    near_s: list[float] = []
    flat_s: list[float] = []
    ann_s: list[float] = []
    near_top, flat_top, ann_top = [], [], []
    for part in progress(chunks(len(vectors), 50), "search", len(chunks(len(vectors), 50))):
        near_top += timed(lambda v: graph.nearest(v, TOP_K), [vectors[i] for i in part], near_s)
        flat_top += timed(lambda v: flat.search_vector(v, TOP_K), [vectors[i] for i in part], flat_s)
        if ann:
            ann_top += timed(lambda v: ann.search_vector(v, TOP_K), [vectors[i] for i in part], ann_s)
    near_1: list[float] = []  # diagnostic: the same search with BLAS limited to one thread
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        timed(lambda v: graph.nearest(v, TOP_K), vectors, near_1)
    near_ids = [[i for i, _ in hits] for hits in near_top]
    flat_ids = [[h.id for h in hits] for hits in flat_top]
    search: dict[str, Any] = {
        "entities": graph.num_entities, "dimension": int(graph.vectors.shape[1]), "k": TOP_K,
        "nearest": summary(near_s), "lance_flat": summary(flat_s), "speedup_vs_lance_flat": speedup(near_s, flat_s),
        "nearest_blas_1_thread": summary(near_1),
        "top1_agreement_vs_lance_flat": round(float(np.mean([a[0] == b[0] for a, b in
                                                              zip(near_ids, flat_ids, strict=True)])), 4),
        f"top{TOP_K}_set_agreement_vs_lance_flat": round(float(np.mean([set(a) == set(b) for a, b in
                                                                         zip(near_ids, flat_ids, strict=True)])), 4),
    }
    if ann:
        ann_ids = [[h.id for h in hits] for hits in ann_top]
        search["lance_ivf_pq"] = {**summary(ann_s), "nprobes": ann.params.ann_nprobes,
                                  "refine_factor": ann.params.ann_refine_factor,
                                  f"recall_at_{TOP_K}_vs_exact": round(float(np.mean([
                                      len(set(a) & set(b)) / len(b)
                                      for a, b in zip(ann_ids, near_ids, strict=True)])), 4),
                                  "speedup_of_nearest_vs_ivf_pq": speedup(near_s, ann_s)}
    out["search"] = search
    log.info("    cold p50 %.2f ms (model alone %.2f ms); warm p50 %.2f ms; nearest p50 %.2f ms vs lance flat %.2f ms"
             " -> x%.1f", out["cold"]["p50_ms"], out["query_encode_model_only"]["p50_ms"], out["warm"]["p50_ms"],
             search["nearest"]["p50_ms"], search["lance_flat"]["p50_ms"], search["speedup_vs_lance_flat"]["p50"])

    log.info("  entity_matcher over HTTP (warm queries): %d single calls, then batches of %d", len(cycle), batch_size)
    contents = {t: toolbox.call(t).content for t in warm_texts}
    out["http_warm"] = bench_http(url, cycle, batch_size, contents)
    log.info("    single p50 %.2f ms (%.0f calls/s); batch %.0f calls/s", out["http_warm"]["single"]["p50_ms"],
             out["http_warm"]["single"]["calls_per_s"], out["http_warm"]["batch"]["calls_per_s"])
    return out


def bench_graph(toolbox: KGToolbox, domain: str, encoder: Encoder, pool: QueryPool, args: argparse.Namespace,
                url: str, flat: EntityIndex, ann: EntityIndex | None) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    graph = toolbox.graph(domain)
    load_s = time.perf_counter() - t0
    n = graph.num_entities
    log.info("== %s: %d entities, %d relations (DomainGraph loaded in %.2f s)", domain, n, graph.rel_src.size, load_s)
    if graph.vectors is None:
        raise RuntimeError(f"{domain}: no entity index (run `omne kg index`)")
    names = [graph.names[i] for i in rng.choice(n, size=args.calls, replace=args.calls > n).tolist()]
    result: dict[str, Any] = {"entities": n, "relations": int(graph.rel_src.size), "directed": graph.directed,
                              "domain_graph_load_s": round(load_s, 3), "sample": "uniform over entities, seed "
                              f"{args.seed}"}
    result["node_info"] = bench_node_info(toolbox, graph, names, args.baseline_calls, url, args.batch_size)
    result["entity_matcher"] = bench_entity_matcher(toolbox, graph, encoder, pool, rng, args.calls,
                                                    args.cold_calls or args.calls, args.warm_pool,
                                                    args.search_queries, flat, ann, url, args.batch_size)
    return result


# --------------------------------------------------------------------------------------------
# Registry domains and the synthetic project
# --------------------------------------------------------------------------------------------

def ensure_built(params: Params, domains: list[str]) -> None:
    missing = [d for d in domains
               if not (kg_dir(params.artifacts_dir, d) / MANIFEST_NAME).is_file()
               or not (index_dir(params.artifacts_dir, d) / MANIFEST_NAME).is_file()]
    if not missing:
        return
    log.info("building %s with `omne run` (artifacts missing)", ", ".join(missing))
    omne = Path(sys.executable).with_name("omne")
    command = [str(omne)] if omne.exists() else [sys.executable, "-m", "pipelines.cli"]
    command += ["--params", str(params.root / "params.yaml"), "run"]
    for d in missing:
        command += ["--domain", d]
    subprocess.run(command, cwd=params.root, check=True)


def make_synthetic(folder: Path, entities: int, relations: int, seed: int) -> None:
    """The shared generator (bench/_common.py), with this benchmark's pseudo-word syllables."""
    _make_synthetic(folder, entities, relations, seed, extra_syllables=False)


def synthetic_project(work: Path, args: argparse.Namespace, model_encoder: Encoder) -> Params:
    """A project folder: generated source, a params.yaml copy pointing into it, a one-domain registry,
    then the library's build steps (skipped when up to date, e.g. a kept --work-dir)."""
    source = work / "source"
    spec = {"entities": args.synthetic_entities, "relations": args.synthetic_relations, "seed": args.seed}
    stamp = source / "generator.json"
    if not stamp.is_file() or json.loads(stamp.read_text()) != spec:
        log.info("generating %d entities / %d relations (seed %d) in %s", args.synthetic_entities,
                 args.synthetic_relations, args.seed, source)
        t0 = time.perf_counter()
        make_synthetic(source, args.synthetic_entities, args.synthetic_relations, args.seed)
        stamp.write_text(json.dumps(spec))
        log.info("  generated in %.1f s", time.perf_counter() - t0)
    raw = yaml.safe_load(args.params.read_text(encoding="utf-8")) or {}
    raw["paths"] = {**(raw.get("paths") or {}), "registry": "domains.yaml", "artifacts": "artifacts"}
    (work / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    domain = Domain(name=SYNTHETIC, description="Generated power-law-ish benchmark graph.",
                    source=SourceSpec(kind="triples", path="source/triples.parquet",
                                      entities="source/entities.parquet"))
    save_registry(work / "domains.yaml", Registry(domains=[domain]))
    params = load_params(work / "params.yaml", args.profile)

    log.info("build_knowledge_graph(%s) ...", SYNTHETIC)
    t0 = time.perf_counter()
    kg = build_knowledge_graph(domain, params)
    log.info("  %s in %.1f s", "up to date" if kg.skipped else "built", time.perf_counter() - t0)
    build_encoder = Encoder(params.index, cache_dir=params.artifacts_dir / "cache" / "embeddings")
    build_encoder.__dict__["model"] = model_encoder.model  # share the loaded model
    log.info("build_entity_index(%s): embedding %d names (a few minutes on 2 cores), LanceDB table, "
             "IVF-PQ index when >= %d rows ...", SYNTHETIC, kg.manifest.rows["entities"], params.index.ann_min_rows)
    t0 = time.perf_counter()
    index = build_entity_index(SYNTHETIC, params, encoder=build_encoder)
    log.info("  %s in %.1f s (ANN index: %s)", "up to date" if index.skipped else "built", time.perf_counter() - t0,
             index.manifest.metadata.get("ann_index"))
    build_encoder.cache.close()
    return params


def flat_index(params: Params, domain: str, encoder: Encoder, work: Path) -> tuple[EntityIndex, EntityIndex | None]:
    """LanceDB flat search over the domain's vectors (a flat copy when the built index is IVF-PQ), and
    the built ANN index when there is one."""
    built = EntityIndex(index_dir(params.artifacts_dir, domain), params.index, encoder)
    if not built.has_ann:
        return built, None
    folder = work / f"flat-{domain}"
    shutil.rmtree(folder, ignore_errors=True)
    table = lancedb.connect(index_dir(params.artifacts_dir, domain)).open_table(TABLE_NAME).to_arrow()
    lancedb.connect(folder).create_table(TABLE_NAME, data=table, mode="overwrite")
    flat = EntityIndex(folder, params.index, encoder)
    assert not flat.has_ann
    return flat, built


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

def _f(value: Any, spec: str, width: int) -> str:
    return format(value, spec).rjust(width) if value is not None else "-".rjust(width)


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    checks = []
    for name, g in results["graphs"].items():
        ratio = g["node_info"]["speedup_vs_linear_scan"]["mean"]
        checks.append({"target": f"node_info >= {TARGET_NODE_INFO_RATIO:.0f}x linear scan", "graph": name,
                       "value": ratio, "unit": "x", "pass": ratio is not None and ratio >= TARGET_NODE_INFO_RATIO})
    for name, g in results["graphs"].items():
        search = g["entity_matcher"]["search"]
        if search["entities"] >= TARGET_NEAREST_MIN_ENTITIES:
            p50 = search["nearest"]["p50_ms"]
            checks.append({"target": f"exact top-5 over {search['entities']:,} p50 <= {TARGET_NEAREST_P50_MS:g} ms",
                           "graph": name, "value": p50, "unit": "ms", "pass": p50 <= TARGET_NEAREST_P50_MS})
    if not any(c["target"].startswith("exact") for c in checks):
        checks.append({"target": f"exact top-5 over >= {TARGET_NEAREST_MIN_ENTITIES:,} entities p50 <= "
                       f"{TARGET_NEAREST_P50_MS:g} ms", "graph": "-", "value": None, "unit": "ms", "pass": None})
    for name, g in results["graphs"].items():
        rate = g["node_info"]["http"]["batch"]["calls_per_s"]
        checks.append({"target": f"HTTP batch node_info >= {TARGET_BATCH_CALLS_PER_S:,.0f} calls/s", "graph": name,
                       "value": rate, "unit": "calls/s", "pass": rate is not None and rate >= TARGET_BATCH_CALLS_PER_S})
    return checks


def details(results: dict[str, Any]) -> str:
    """The plain-text report on stdout before the table: every latency, rate and ratio, the targets."""
    graphs = results["graphs"]
    out = ["node_info (latency p50/p99; rate = calls/s, one caller; x = times faster than the baseline)"]
    head = (f"{'graph':<10} {'entities':>8} {'relations':>9} {'in-proc p50/p99 µs':>19} {'calls/s':>8} "
            f"{'scan p50 ms':>11} {'x scan':>7} {'nx p50 µs':>9} {'x nx':>6} {'HTTP p50/p99 ms':>16} "
            f"{'calls/s':>8} {'batch64/s':>9}")
    out += [head, "-" * len(head)]
    for name, g in graphs.items():
        ni = g["node_info"]
        ip, http = ni["in_process"], ni["http"]
        out.append(f"{name:<10} {g['entities']:>8,} {g['relations']:>9,} "
                   f"{ip['p50_ms'] * 1000:>9.1f}/{ip['p99_ms'] * 1000:<9.1f} {_f(ip['calls_per_s'], ',.0f', 8)} "
                   f"{ni['linear_scan']['p50_ms']:>11.3f} {_f(ni['speedup_vs_linear_scan']['mean'], ',.0f', 7)} "
                   f"{ni['networkx']['p50_ms'] * 1000:>9.1f} {_f(ni['speedup_vs_networkx']['mean'], '.2f', 6)} "
                   f"{http['single']['p50_ms']:>7.2f}/{http['single']['p99_ms']:<8.2f} "
                   f"{_f(http['single']['calls_per_s'], ',.0f', 8)} {_f(http['batch']['calls_per_s'], ',.0f', 9)}")
    out += ["", ("entity_matcher (ms; cold = never-seen query: MiniLM encode + exact top-5; warm = cached query;"
                 " search = top-5 alone)")]
    head = (f"{'graph':<10} {'cold p50/p99':>14} {'cold/s':>7} {'model p50':>9} {'warm p50/p99':>14} {'warm/s':>7} "
            f"{'nearest p50/p99':>16} {'lance flat p50':>14} {'x flat':>7} {'IVF-PQ p50 R@5':>15} "
            f"{'HTTP/s':>7} {'batch64/s':>9}")
    out += [head, "-" * len(head)]
    for name, g in graphs.items():
        em = g["entity_matcher"]
        cold, warm, s = em["cold"], em["warm"], em["search"]
        ivf = s.get("lance_ivf_pq")
        ivf_text = f"{ivf['p50_ms']:>7.2f} {ivf[f'recall_at_{TOP_K}_vs_exact']:>6.3f}" if ivf else "-"
        out.append(f"{name:<10} {cold['p50_ms']:>6.2f}/{cold['p99_ms']:<7.2f} {_f(cold['calls_per_s'], ',.0f', 7)} "
                   f"{em['query_encode_model_only']['p50_ms']:>9.2f} {warm['p50_ms']:>6.3f}/{warm['p99_ms']:<7.3f} "
                   f"{_f(warm['calls_per_s'], ',.0f', 7)} "
                   f"{s['nearest']['p50_ms']:>7.3f}/{s['nearest']['p99_ms']:<8.3f} "
                   f"{s['lance_flat']['p50_ms']:>14.3f} {_f(s['speedup_vs_lance_flat']['p50'], '.1f', 7)} "
                   f"{ivf_text:>15} {_f(em['http_warm']['single']['calls_per_s'], ',.0f', 7)} "
                   f"{_f(em['http_warm']['batch']['calls_per_s'], ',.0f', 9)}")
    out += ["", "thread sensitivity (diagnostic, p50 ms): the library's default thread counts vs one thread"]
    head = (f"{'graph':<10} {'encode 1 query':>14} {'torch 1 thread':>14} {'nearest':>9} {'BLAS 1 thread':>13}")
    out += [head, "-" * len(head)]
    for name, g in graphs.items():
        em = g["entity_matcher"]
        out.append(f"{name:<10} {em['query_encode_model_only']['p50_ms']:>14.2f} "
                   f"{em['query_encode_model_only_torch_1_thread']['p50_ms']:>14.2f} "
                   f"{em['search']['nearest']['p50_ms']:>9.3f} "
                   f"{em['search']['nearest_blas_1_thread']['p50_ms']:>13.3f}")
    out += ["", "targets"]
    for c in results["targets"]:
        value = "-" if c["value"] is None else f"{c['value']:,.2f} {c['unit']}"
        out.append(f"  {verdict(c['pass'])}  {c['target']:<45} {c['graph']:<10} {value}")
    m = results["machine"]
    out += ["", f"{load_line(m)}; BLAS threads {m.get('blas_threads')}, torch threads {m.get('torch_threads')}.",
            "The HTTP server runs in a thread of this process (client and server share the GIL and the cores)."]
    return "\n".join(out)


def render(results: dict[str, Any]) -> str:
    """A Markdown table (bench/tables.py puts it into docs/benchmarks.md), a row per graph: node_info's in-process p50,
    how many times faster than the linear scan (with the node_info target's verdict, the triples scanned and the
    scan's p50) and than networkx, entity_matcher's cold and warm p50, the HTTP batch endpoint's calls/s (with its
    target's verdict). Then a line on the exact top-5 search alone against LanceDB's flat search, with the verdict
    of its target where a graph is large enough (n/a where none is)."""
    checks = {(c["target"].split()[0], c["graph"]): c for c in results["targets"]}
    batch = results["args"]["batch_size"]
    lines = ["| graph | node_info p50 | x linear scan | x networkx | entity_matcher cold / warm p50 | "
             f"HTTP batch{batch} calls/s |", "|---|---|---|---|---|---|"]
    searches = []
    for name, g in results["graphs"].items():
        ni, em = g["node_info"], g["entity_matcher"]
        scan, rate = ni["linear_scan"], ni["http"]["batch"]["calls_per_s"]
        lines.append(
            f"| {name} ({g['entities']:,} entities / {g['relations']:,} relations) | "
            f"{figure(ni['in_process']['p50_ms'] * 1000)} µs | "
            f"**{figure(ni['speedup_vs_linear_scan']['mean'])}** ({verdict(checks['node_info', name]['pass'])}: "
            f"{scan['triples']:,} triples scanned in {figure(scan['p50_ms'])} ms p50) | "
            f"{figure(ni['speedup_vs_networkx']['mean'])} | "
            f"{figure(em['cold']['p50_ms'])} ms / {figure(em['warm']['p50_ms'])} ms | "
            f"{figure(rate)} ({verdict(checks['HTTP', name]['pass'])}) |")
        s = em["search"]
        exact = checks.get(("exact", name))
        searches.append(f"{name} ({s['entities']:,} vectors) {figure(s['nearest']['p50_ms'])} ms p50"
                        + (f" ({verdict(exact['pass'])})" if exact else "")
                        + f", {figure(s['speedup_vs_lance_flat']['p50'])}x faster")
    large = [c for c in results["targets"] if c["target"].startswith("exact") and c["graph"] != "-"]
    target = (f"exact top-5 p50 <= {TARGET_NEAREST_P50_MS:g} ms over {TARGET_NEAREST_MIN_ENTITIES:,} entities"
              + ("" if large else ": n/a, no graph that large"))
    lines += ["", f"Exact top-5 (`DomainGraph.nearest`) against LanceDB's flat search: {'; '.join(searches)} "
                  f"(target: {target})."]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------

TOY = {"synthetic_entities": 300, "synthetic_relations": 1000, "calls": 40, "cold_calls": 20, "baseline_calls": 10,
       "search_queries": 20, "warm_pool": 10, "batch_size": 16}


def build_parser() -> BenchParser:
    parser = BenchParser(
        "tools",
        description="Benchmark the agent's KG tools (node_info, entity_matcher) in-process and over HTTP, "
                    "against baselines timed in the same process: a linear scan over all triples (KG-R1's "
                    "server), a networkx adjacency look-up, and LanceDB flat search. Speeds are ratios; "
                    "targets are printed as PASS/MISS.",
        epilog="Targets: node_info >= 100x the linear scan; exact top-5 over 100k entities p50 <= 5 ms "
               "in-process; HTTP batch >= 2,000 calls/s.\nThe registry domains must be built (missing ones "
               "are built with `omne run`); the synthetic graph is built into --work-dir (default: a temporary "
               "folder, removed at the end; embedding 100k names takes minutes on 2 cores).",
        toy=TOY, toy_note="the domains: the throw-away project's solar domain (built in-process, tiny encoder)",
        seed_help="seed of the generated graph and samples")
    parser.add_argument("--domains", nargs="*", default=None, metavar="NAME",
                        help="registry domains to benchmark (default: every domain of the registry; "
                             "give the flag alone for none)")
    parser.add_argument("--synthetic-entities", type=int, default=100_000, metavar="N",
                        help="entities of the generated graph (0: no generated graph)")
    parser.add_argument("--synthetic-relations", type=int, default=500_000, metavar="N",
                        help="relations of the generated graph (duplicates merged by the build)")
    parser.add_argument("--calls", type=int, default=2000, metavar="N",
                        help="calls per measurement (node_info names, entity_matcher cold and warm queries, HTTP)")
    parser.add_argument("--cold-calls", type=int, default=None, metavar="N",
                        help="entity_matcher calls with never-seen queries (default: --calls; each one runs the "
                             "MiniLM encoder, slow on a busy machine)")
    parser.add_argument("--baseline-calls", type=int, default=200, metavar="N",
                        help="linear-scan baseline calls per graph (a scan of 500k triples is ~0.1 s per call)")
    parser.add_argument("--search-queries", type=int, default=300, metavar="N",
                        help="query vectors for the top-5 search alone (nearest vs LanceDB)")
    parser.add_argument("--warm-pool", type=int, default=100, metavar="N",
                        help="distinct queries the warm entity_matcher calls cycle over")
    parser.add_argument("--batch-size", type=int, default=64, metavar="N", help="calls per HTTP batch request")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="keep the synthetic project here and reuse it on the next run (builds are skipped "
                             "when up to date)")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("calls", "cold_calls", "baseline_calls", "search_queries", "warm_pool", "batch_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.verbose, ("sentence_transformers", "httpx", "urllib3", "filelock", "huggingface_hub",
                                 "uvicorn", "pipelines.agent.tools"))
    started = time.perf_counter()
    if args.params is None:  # --toy: a throw-away project, the solar domain built in-process
        args.params = toy_project(build="index")
    params = load_params(args.params, args.profile)
    domains = load_registry(params.registry_path).names if args.domains is None else args.domains
    ensure_built(params, domains)

    results: dict[str, Any] = {
        "benchmark": "tools",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {**machine_info(), "torch_threads": torch.get_num_threads(),
                    "blas_threads": max((i["num_threads"] for i in threadpoolctl.threadpool_info()
                                         if i.get("user_api") == "blas"), default=None)},
        "args": args_record(args),
        "params": {"profile": params.profile, "tools": params.tools.model_dump(), "index": params.index.model_dump()},
        "graphs": {},
    }
    results["machine"]["load_average_at_start"] = load_average()
    if os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1):
        log.warning("the machine is busy (load average %.2f on %d cores): multi-threaded torch/BLAS calls "
                    "(query encoding, top-k) will be much slower than on an idle machine",
                    os.getloadavg()[0], os.cpu_count())
    pool = QueryPool()
    with tempfile.TemporaryDirectory(prefix="omne-bench-tools-") as tmp:
        tmp_path = Path(tmp)
        # one encoder for every toolbox, its disk cache fresh (so "cold" is cold, and the project's
        # cache is not filled with benchmark queries); the model is loaded and warmed up once
        encoder = Encoder(params.index, cache_dir=tmp_path / "query-cache")
        t0 = time.perf_counter()
        encoder.model.encode(["warm up the encoder"] * 8)
        results["encoder"] = {"model_id": encoder.model_id, "device": params.index.device,
                              "load_and_warmup_s": round(time.perf_counter() - t0, 2)}
        log.info("encoder %s loaded in %.1f s", encoder.model_id, results["encoder"]["load_and_warmup_s"])

        if domains:
            toolbox = KGToolbox(params, domains=domains, encoder=encoder)
            with serve(toolbox) as url:
                log.info("tool server for %s at %s", ", ".join(domains), url)
                for domain in domains:
                    flat, ann = flat_index(params, domain, encoder, tmp_path)
                    results["graphs"][domain] = bench_graph(toolbox, domain, encoder, pool, args, url, flat, ann)
            del toolbox
            gc.collect()

        if args.synthetic_entities > 0:
            work = args.work_dir or tmp_path / "synthetic"
            work.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            synthetic_params = synthetic_project(work, args, encoder)
            build_s = time.perf_counter() - t0
            toolbox = KGToolbox(synthetic_params, domains=[SYNTHETIC], encoder=encoder)
            flat, ann = flat_index(synthetic_params, SYNTHETIC, encoder, tmp_path)
            with serve(toolbox) as url:
                log.info("tool server for %s at %s", SYNTHETIC, url)
                graph = bench_graph(toolbox, SYNTHETIC, encoder, pool, args, url, flat, ann)
            kg = read_kg(kg_dir(synthetic_params.artifacts_dir, SYNTHETIC))
            graph["generator"] = {"entities": args.synthetic_entities, "relations": args.synthetic_relations,
                                  "seed": args.seed, "degree_law": DEGREE_LAW,
                                  "built_relations": kg.relations.height, "project_build_s": round(build_s, 1),
                                  "work_dir": str(args.work_dir) if args.work_dir else None}
            results["graphs"][SYNTHETIC] = graph
        if encoder.cache is not None:
            encoder.cache.close()

    results["machine"]["load_average_at_end"] = load_average()
    results["targets"] = targets(results)
    print("\n" + details(results))
    write_results(results, render(results), args.out, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
