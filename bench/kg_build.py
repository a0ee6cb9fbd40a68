#!/usr/bin/env python
"""Benchmark of the KG build steps (build, graph statistics, entity index, search) on the registry's
domains and on a generated synthetic graph.

Every speed is reported as a RATIO against a naive baseline measured in the same process (the
machines are noisy: absolute timings move with the load, ratios much less). A ratio below 1 means
omne is faster than the baseline. Each measurement also records its wall time, its rate (entities
or embeddings per second) and its peak extra RSS (resident memory sampled in a background thread
during the stage, minus the RSS just before it).

    .venv/bin/python bench/kg_build.py                      # everything, default sizes
    .venv/bin/python bench/kg_build.py --domains chemistry  # one domain + the synthetic graph
    .venv/bin/python bench/kg_build.py --domains --skip-synthetic-index   # synthetic graph, no embedding
    .venv/bin/python bench/kg_build.py --toy --out /tmp/bench            # smoke test: a 400-entity graph

See docs/benchmarks.md for what each stage measures.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import polars as pl

# first: sets the offline environment and puts the project root on sys.path
from _common import (
    DEGREE_LAW,
    MB,
    BenchParser,
    alternate,
    args_record,
    figure,
    machine_info,
    measure,
    percentiles,
    ratio,
    setup_logging,
    with_rate,
    write_results,
)
from _common import make_synthetic as _make_synthetic
from _toy import toy_project
from tqdm.auto import tqdm

from pipelines.config import Params, load_params
from pipelines.domains import SourceSpec, load_registry
from pipelines.errors import KGSourceError
from pipelines.kg.embed import Encoder
from pipelines.kg.graph import ball_sizes, graph_stats
from pipelines.kg.importers import import_source
from pipelines.kg.index import EntityIndex, entity_texts, index_table, write_index
from pipelines.kg.model import KnowledgeGraph, assemble_graph
from pipelines.kg.store import write_kg

log = logging.getLogger("bench.kg_build")
SEARCH_K = 5


# --------------------------------------------------------------------------------------------
# Synthetic graph
# --------------------------------------------------------------------------------------------

def make_synthetic(folder: Path, entities: int, relations: int, seed: int) -> SourceSpec:
    """The shared generator (bench/_common.py), with this benchmark's pseudo-word syllables."""
    return _make_synthetic(folder, entities, relations, seed, extra_syllables=True)


# --------------------------------------------------------------------------------------------
# Stage 1: import + assemble + store, vs networkx
# --------------------------------------------------------------------------------------------

def _read_frame(path: Path) -> pl.DataFrame:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return pl.read_parquet(path)
    if suffix in {".jsonl", ".ndjson"}:
        return pl.read_ndjson(path, infer_schema_length=None)
    return pl.read_csv(path, separator="," if suffix == ".csv" else "\t", infer_schema=False)


def networkx_build(source: SourceSpec, root: Path) -> nx.MultiDiGraph:
    """The naive approach: read the files with polars and add every row to a networkx MultiDiGraph."""
    graph = nx.MultiDiGraph()
    if source.entities:
        for row in _read_frame(root / source.entities).iter_rows(named=True):
            graph.add_node(row["name"], type=row.get("type"), description=row.get("description"))
    for row in _read_frame(root / source.path).iter_rows(named=True):
        graph.add_edge(row["head"], row["tail"], key=row["relation"], description=row.get("description"))
    return graph


def bench_build(source: SourceSpec, root: Path, work: Path, repeat: int) -> tuple[KnowledgeGraph, dict]:
    steps: dict[str, float] = {}
    if source.kind != "triples":
        raise KGSourceError(f"{source.path}: the networkx baseline reads triple sources only, not {source.kind}")

    def ours() -> KnowledgeGraph:
        t0 = time.perf_counter()
        raw = import_source(source, root)
        t1 = time.perf_counter()
        kg = assemble_graph(raw, directed=source.is_directed)
        t2 = time.perf_counter()
        out = work / "kg"
        out.mkdir(parents=True, exist_ok=True)
        write_kg(kg, out)
        t3 = time.perf_counter()
        if not steps or t3 - t0 < sum(steps.values()):  # keep the steps of the best run
            steps.update(import_s=round(t1 - t0, 4), assemble_s=round(t2 - t1, 4), store_s=round(t3 - t2, 4))
        return kg

    log.info("  build: import_source + assemble_graph + write_kg vs polars + networkx MultiDiGraph (x%d each)",
             repeat)
    kg, ours_m, graph, base_m = alternate(ours, lambda: networkx_build(source, root), repeat=repeat)
    with_rate(ours_m, kg.num_entities)
    ours_m.update(steps=steps,
                  files_mb=round(sum(f.stat().st_size for f in (work / "kg").iterdir()) / MB, 2))
    with_rate(base_m, graph.number_of_nodes())
    base_m["edges"] = graph.number_of_edges()
    graph.clear()  # free the baseline graph before the next stage
    result = {"ours": ours_m, "baseline": base_m, "ratio": ratio(ours_m["wall_s"], base_m["wall_s"]),
              "cpu_ratio": ratio(ours_m["cpu_s"], base_m["cpu_s"])}
    log.info("    ours %.3f s (%s); baseline %.3f s; ratio %.3f", ours_m["wall_s"],
             ", ".join(f"{k} {v:.3f}" for k, v in steps.items()), base_m["wall_s"], result["ratio"])
    return kg, result


# --------------------------------------------------------------------------------------------
# Stage 2: graph statistics, vs networkx BFS balls on a sample extrapolated to all nodes
# --------------------------------------------------------------------------------------------

def bench_stats(kg: KnowledgeGraph, params: Params, sample: int, repeat: int, seed: int) -> dict:
    seeds = params.seeds
    n = kg.num_entities
    src, dst = kg.relations["src"].to_numpy(), kg.relations["dst"].to_numpy()
    keep = src != dst
    graph = nx.Graph()  # built outside the timing: the baseline only pays for the traversals
    graph.add_nodes_from(range(n))
    graph.add_edges_from(zip(src[keep].tolist(), dst[keep].tolist(), strict=True))
    rng = np.random.default_rng(seed)
    nodes = np.sort(rng.choice(n, size=min(sample, n), replace=False))

    log.info("  stats: graph_stats vs networkx depth-%d BFS from %d sampled nodes + connected components "
             "(x%d each)", seeds.depth, nodes.size, repeat)
    balls: list[int] = []
    parts: list[tuple[float, float]] = []

    def baseline() -> None:
        balls.clear()
        t0 = time.perf_counter()
        for node in tqdm(nodes.tolist(), desc="    nx BFS", unit="node", mininterval=1.0):
            balls.append(len(nx.single_source_shortest_path_length(graph, node, cutoff=seeds.depth)))
        t1 = time.perf_counter()
        nx.number_connected_components(graph)
        parts.append((t1 - t0, time.perf_counter() - t1))

    stats, ours_m, _, base_m = alternate(lambda: graph_stats(kg, seeds), baseline, repeat=repeat)
    with_rate(ours_m, n)
    bfs_s, components_s = min(parts, key=sum)
    estimated = bfs_s * n / nodes.size + components_s
    scale = estimated / base_m["wall_s"]
    base_m.update(measured_wall_s=base_m["wall_s"], wall_s=round(estimated, 4), extrapolated=True,
                  measured_cpu_s=base_m["cpu_s"], cpu_s=round(base_m["cpu_s"] * scale, 4),
                  sampled_nodes=int(nodes.size), sample_bfs_s=round(bfs_s, 4), components_s=round(components_s, 4),
                  mean_ball_size=round(float(np.mean(balls)), 1))
    with_rate(base_m, n)
    graph.clear()  # free the baseline graph before the next stage
    log.info("    ours %.3f s (%d eligible seeds of %d); baseline %.3f s for %d BFS -> %.1f s estimated for "
             "%d nodes; ratio %.4f", ours_m["wall_s"], stats.eligible_seeds, n, bfs_s, nodes.size, estimated, n,
             ours_m["wall_s"] / estimated)

    # the two compute the same thing: our ball sizes are clipped at max_nodes + 1
    ours_sizes = ball_sizes(kg.adjacency(), seeds.depth, seeds.max_nodes)[nodes]
    agree = float(np.mean(ours_sizes == np.minimum(np.asarray(balls), seeds.max_nodes + 1)))
    return {"ours": ours_m, "baseline": base_m, "ratio": ratio(ours_m["wall_s"], base_m["wall_s"]),
            "cpu_ratio": ratio(ours_m["cpu_s"], base_m["cpu_s"]), "ball_sizes_agree": round(agree, 4),
            "graph_stats": stats.model_dump()}


# --------------------------------------------------------------------------------------------
# Stage 3: embedding + LanceDB write, vs raw SentenceTransformer.encode; cache; search
# --------------------------------------------------------------------------------------------

def _perturb(name: str, variant: int) -> str:
    """Query variants: the exact name, lower case, without its last word, two letters swapped."""
    if variant == 0:
        return name
    if variant == 1:
        return name.lower()
    if variant == 2 and " " in name:
        return name.rsplit(" ", 1)[0]
    if len(name) > 3:
        i = len(name) // 2
        return name[:i - 1] + name[i] + name[i - 1] + name[i + 1:]
    return name


def _search_latencies(index: EntityIndex, queries: np.ndarray) -> tuple[list[float], list[list[int]]]:
    for vector in queries[:5]:  # warm-up: open files, first-query costs
        index.search_vector(vector, k=SEARCH_K)
    latencies, tops = [], []
    for vector in queries:
        t0 = time.perf_counter()
        hits = index.search_vector(vector, k=SEARCH_K)
        latencies.append(time.perf_counter() - t0)
        tops.append([hit.id for hit in hits])
    return latencies, tops


def _numpy_latencies(ids: np.ndarray, matrix: np.ndarray, queries: np.ndarray) -> tuple[list[float], list[list[int]]]:
    latencies, tops = [], []
    k = min(SEARCH_K, len(ids))
    for vector in queries:
        t0 = time.perf_counter()
        scores = matrix @ vector
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.argsort(-scores[best])]
        latencies.append(time.perf_counter() - t0)
        tops.append(ids[best].tolist())
    return latencies, tops


def bench_search(folder: Path, table: Any, vectors: np.ndarray, texts: list[str], params: Params,
                 encoder: Encoder, stage_ann: bool, write_s: float, with_ann: bool, queries: int,
                 work: Path, seed: int) -> dict:
    rows = table.num_rows
    rng = np.random.default_rng(seed)
    picked = rng.choice(rows, size=min(queries, rows), replace=False)
    query_texts = [_perturb(texts[i], j % 4) for j, i in enumerate(picked.tolist())]
    encode_lat = []
    query_vectors = []
    for text in query_texts:  # one text per call, as a tool's look-up does
        t0 = time.perf_counter()
        query_vectors.append(encoder.encode([text])[0])
        encode_lat.append(time.perf_counter() - t0)
    qv = np.stack(query_vectors)
    result: dict[str, Any] = {"queries": len(query_texts), "k": SEARCH_K, "query_encode": percentiles(encode_lat)}

    exact_dir, exact_params = folder, params.index
    if stage_ann:  # the stage's index is IVF-PQ already: write an exact one beside it for the comparison
        exact_params = params.index.model_copy(update={"ann_min_rows": rows + 1})
        exact_dir = work / "index_exact"
        write_index(exact_dir, table, exact_params)
    exact = EntityIndex(exact_dir, exact_params, encoder)
    log.info("  search: %d queries, exact (LanceDB flat) vs numpy brute force", len(query_texts))
    exact_lat, exact_tops = _search_latencies(exact, qv)
    ids = table.column("id").to_numpy()
    np_lat, np_tops = _numpy_latencies(ids, vectors, qv)
    result["exact"] = percentiles(exact_lat)
    result["numpy_baseline"] = percentiles(np_lat)
    result["exact_ratio_p50"] = ratio(result["exact"]["p50_ms"], result["numpy_baseline"]["p50_ms"])
    result["exact_top1_matches_numpy"] = round(float(np.mean([a[0] == b[0] for a, b in
                                                              zip(exact_tops, np_tops, strict=True)])), 4)
    result["exact_self_hit_at_1"] = round(float(np.mean([
        t[0] == int(ids[i]) for t, i in zip(exact_tops, picked.tolist(), strict=True)])), 4)
    log.info("    exact p50 %.2f ms, p95 %.2f ms; numpy p50 %.2f ms", result["exact"]["p50_ms"],
             result["exact"]["p95_ms"], result["numpy_baseline"]["p50_ms"])
    t0 = time.perf_counter()  # all the queries in one LanceDB query (the self-retrieval check's way)
    together = exact.search_vectors(qv, k=SEARCH_K)
    batched_s = time.perf_counter() - t0
    result["batched"] = {"wall_s": round(batched_s, 5), "one_by_one_s": round(sum(exact_lat), 5),
                         "ratio": ratio(batched_s, sum(exact_lat)),
                         "same_hits": [[hit.id for hit in hits] for hits in together] == exact_tops}
    log.info("    %d queries in one query %.3f s, one by one %.3f s (ratio %s, same hits: %s)", len(qv), batched_s,
             sum(exact_lat), result["batched"]["ratio"], result["batched"]["same_hits"])

    if not with_ann:
        return result
    ann_params = params.index.model_copy(update={"ann_min_rows": min(params.index.ann_min_rows, rows)})
    if stage_ann:
        ann_dir, ann_m = folder, {"wall_s": write_s, "note": "built by the index stage's write_index"}
    else:
        ann_dir = work / "index_ann"
        log.info("  ann: write_index with ann_min_rows=%d (IVF-PQ over %d rows)", ann_params.ann_min_rows, rows)
        built, ann_m = measure(lambda: write_index(ann_dir, table, ann_params), items=rows)
        assert built, "write_index built no ANN index"
    ann_m["ratio_vs_exact_write"] = ratio(ann_m["wall_s"], write_s) if not stage_ann else None
    ann = EntityIndex(ann_dir, ann_params, encoder)
    assert ann.has_ann
    ann_lat, ann_tops = _search_latencies(ann, qv)
    recall1 = float(np.mean([a[0] == e[0] for a, e in zip(ann_tops, exact_tops, strict=True)]))
    recall_k = float(np.mean([len(set(a) & set(e)) / len(e) for a, e in zip(ann_tops, exact_tops, strict=True)]))
    result["ann"] = {**percentiles(ann_lat), "build": ann_m, "recall_at_1_vs_exact": round(recall1, 4),
                     f"recall_at_{SEARCH_K}_vs_exact": round(recall_k, 4),
                     "nprobes": ann_params.ann_nprobes, "refine_factor": ann_params.ann_refine_factor,
                     "ratio_p50_vs_exact": ratio(percentiles(ann_lat)["p50_ms"], result["exact"]["p50_ms"])}
    log.info("    ann p50 %.2f ms, p95 %.2f ms, recall@1 vs exact %.3f", result["ann"]["p50_ms"],
             result["ann"]["p95_ms"], recall1)
    return result


def bench_index(kg: KnowledgeGraph, params: Params, encoder: Encoder, work: Path, *, sample: int | None,
                cache_sample: int, queries: int, with_ann: bool, seed: int, repeat: int) -> dict:
    rng = np.random.default_rng(seed)
    sampled = sample is not None and sample < kg.num_entities
    if sampled:
        rows = np.sort(rng.choice(kg.num_entities, size=sample, replace=False))
        kg = KnowledgeGraph(entities=kg.entities.select(pl.all().gather(rows)), relations=kg.relations.clear(),
                            directed=kg.directed)
    texts = entity_texts(kg, params.index)
    n, bs = len(texts), params.index.batch_size
    out: dict[str, Any] = {"embedded": n, "sampled": sampled, "text": params.index.text, "batch_size": bs}

    folders: list[Path] = []
    parts: dict[str, Any] = {}

    def baseline() -> np.ndarray:
        return encoder.model.encode(texts, batch_size=bs, normalize_embeddings=True, convert_to_numpy=True,
                                    show_progress_bar=True)

    def ours() -> tuple[np.ndarray, Any, bool]:
        folders.append(work / f"index-{len(folders)}")  # a fresh folder per run
        t0 = time.perf_counter()
        vectors = encoder.encode(texts, progress=True)
        t1 = time.perf_counter()
        table = index_table(kg, texts, vectors)
        ann = write_index(folders[-1], table, params.index)
        t2 = time.perf_counter()
        if not parts or t2 - t0 < parts["encode_s"] + parts["write_s"]:  # keep the parts of the best run
            parts.update(encode_s=round(t1 - t0, 4), write_s=round(t2 - t1, 4))
        return vectors, table, ann

    log.info("  index: Encoder.encode (no cache) + write_index vs SentenceTransformer.encode of %d texts "
             "(batch %d, x%d each)", n, bs, repeat)
    (vectors, table, stage_ann), ours_m, raw, base_m = alternate(ours, baseline, repeat=repeat)
    folder = folders[-1]
    with_rate(ours_m, n)
    with_rate(base_m, n)
    ours_m.update(parts, embeddings_per_s=round(n / parts["encode_s"], 1), ann_index=stage_ann)
    log.info("    ours %.1f s (encode %.1f s, write %.2f s); baseline %.1f s (%.0f embeddings/s); ratio %.3f",
             ours_m["wall_s"], parts["encode_s"], parts["write_s"], base_m["wall_s"], base_m["items_per_s"],
             ours_m["wall_s"] / base_m["wall_s"])
    out.update(ours=ours_m, baseline=base_m, ratio=ratio(ours_m["wall_s"], base_m["wall_s"]),
               cpu_ratio=ratio(ours_m["cpu_s"], base_m["cpu_s"]),
               encode_ratio=ratio(parts["encode_s"], base_m["wall_s"]),
               max_abs_diff_vs_baseline=float(np.abs(vectors - raw).max()))
    del raw

    # cache: a fresh disk cache, filled by a first call, read by a second
    subset = [texts[i] for i in np.sort(rng.choice(n, size=min(cache_sample, n), replace=False))]
    cached = Encoder(params.index, cache_dir=work / "embedding-cache")
    cached.__dict__["model"] = encoder.model  # share the loaded model: no second load inside the timing
    log.info("  cache: Encoder(cache_dir=tmp).encode of %d texts, cold then warm", len(subset))
    _, cold_m = measure(lambda: cached.encode(subset, progress=True), items=len(subset))
    _, warm_m = measure(lambda: cached.encode(subset), items=len(subset))
    uncached_s = parts["encode_s"] * len(subset) / n  # the uncached Encoder's time for as many texts
    out["cache"] = {"texts": len(subset), "cold": cold_m, "warm": warm_m,
                    "uncached_equivalent_s": round(uncached_s, 4),
                    "cold_ratio_vs_uncached": ratio(cold_m["wall_s"], uncached_s),
                    "warm_ratio_vs_uncached": ratio(warm_m["wall_s"], uncached_s)}
    log.info("    cold %.1f s, warm %.2f s: warm/uncached = %.4f", cold_m["wall_s"], warm_m["wall_s"],
             out["cache"]["warm_ratio_vs_uncached"])
    cached.cache.close()

    out["search"] = bench_search(folder, table, vectors, texts, params, encoder, stage_ann, parts["write_s"],
                                 with_ann, queries, work, seed)
    return out


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------

def bench_graph(name: str, source: SourceSpec, root: Path, params: Params, encoder: Encoder | None,
                args: argparse.Namespace, *, synthetic: bool, repeat: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"omne-bench-{name}-") as tmp:
        work = Path(tmp)
        kg, build = bench_build(source, root, work, repeat)
        result: dict[str, Any] = {"entities": kg.num_entities, "relations": kg.relations.height,
                                  "directed": kg.directed, "build": build}
        result["stats"] = bench_stats(kg, params, args.nx_sample, repeat, args.seed)
        if encoder is None:
            result["index"] = {"skipped": "--skip-synthetic-index" if synthetic else "--skip-index"}
        else:
            sample = args.synthetic_index_sample if synthetic and args.synthetic_index_sample > 0 else None
            result["index"] = bench_index(kg, params, encoder, work, sample=sample, cache_sample=args.cache_sample,
                                          queries=args.queries, with_ann=synthetic, seed=args.seed,
                                          repeat=args.index_repeat)
        return result


def _fmt(value: float | None, spec: str) -> str:
    if value is None:
        return "-".rjust(int("".join(c for c in spec.split(".")[0] if c.isdigit()) or 0))
    return format(value, spec)


def details(results: dict) -> str:
    """The plain-text report on stdout before the table: every stage's seconds, rates, memory and ratios."""
    lines = [f"{'graph':<11} {'stage':<12} {'ours s':>9} {'ours ent/s':>11} {'ours +MB':>9} "
             f"{'base s':>9} {'base +MB':>9} {'ratio':>8} {'cpu ratio':>9}"]
    lines.append("-" * len(lines[0]))
    search_lines = [f"{'graph':<11} {'rows':>7} {'exact p50/p95 ms':>17} {'numpy p50':>10} {'ratio':>7} "
                    f"{'ANN p50/p95 ms':>15} {'ANN/exact':>10} {'recall@1':>9} {'enc p50':>8} {'batched':>8}"]
    search_lines.append("-" * len(search_lines[0]))
    for name, graph in results["graphs"].items():
        if "skipped" in graph:
            lines.append(f"{name:<11} skipped: {graph['skipped']}")
            continue
        rows = []
        for stage in ("build", "stats"):
            entry = graph[stage]
            base = entry.get("baseline") or {}
            rows.append((stage + ("*" if stage == "stats" else ""), entry["ours"], base, entry["ratio"],
                         entry.get("cpu_ratio")))
        index = graph["index"]
        if "skipped" not in index:
            label = "index" + (f"[{index['embedded'] // 1000}k]" if index["sampled"] else "")
            rows.append((label, index["ours"], index["baseline"], index["ratio"], index.get("cpu_ratio")))
            cache = index["cache"]
            rows.append(("cache warm", cache["warm"], {"wall_s": cache["uncached_equivalent_s"]},
                         cache["warm_ratio_vs_uncached"], None))
        for stage, ours, base, r, cpu_r in rows:
            lines.append(f"{name:<11} {stage:<12} {_fmt(ours['wall_s'], '9.3f')} "
                         f"{_fmt(ours.get('items_per_s'), '11,.0f')} {_fmt(ours.get('peak_extra_rss_mb'), '9.1f')} "
                         f"{_fmt(base.get('wall_s'), '9.3f')} {_fmt(base.get('peak_extra_rss_mb'), '9.1f')} "
                         f"{_fmt(r, '8.3f')} {_fmt(cpu_r, '9.3f')}")
        if "skipped" not in index:
            search = index["search"]
            ann = search.get("ann")
            search_lines.append(
                f"{name:<11} {index['embedded']:>7} "
                f"{search['exact']['p50_ms']:>8.2f}/{search['exact']['p95_ms']:<8.2f} "
                f"{search['numpy_baseline']['p50_ms']:>10.2f} {_fmt(search['exact_ratio_p50'], '7.2f')} "
                + (f"{ann['p50_ms']:>7.2f}/{ann['p95_ms']:<7.2f} {_fmt(ann['ratio_p50_vs_exact'], '10.3f')} "
                   f"{ann['recall_at_1_vs_exact']:>9.3f} " if ann else f"{'-':>15} {'-':>10} {'-':>9} ")
                + f"{search['query_encode']['p50_ms']:>8.2f} {_fmt(search['batched']['ratio'], '8.3f')}")
    notes = ["ratio = ours / baseline wall time (< 1: omne is faster); cpu ratio: the same with process CPU time",
             "(less sensitive to other load on the machine). build baseline: polars read + networkx",
             "MultiDiGraph; stats* baseline: networkx depth-3 BFS on a node sample, extrapolated to all nodes;",
             "index baseline: raw SentenceTransformer.encode (ours adds the LanceDB write); cache warm: second",
             "call on a filled disk cache vs the uncached Encoder's time for as many texts. +MB: peak extra RSS."]
    search_notes = ["search: top-5 latency per query vector; ratio = LanceDB exact / numpy brute force (p50);",
                    "ANN = IVF-PQ + refine; recall@1 = ANN top-1 equals exact top-1; enc = one-query encode p50;",
                    "batched = every query vector in one exact LanceDB query / the same queries one by one."]
    return "\n".join(lines + [""] + notes + ["", *search_lines, "", *search_notes])


def render(results: dict) -> str:
    """A Markdown table (bench/tables.py puts it into docs/benchmarks.md), a row per graph: the ratios ours /
    baseline (< 1: omne faster) of the build, the statistics (with both times: the baseline's is extrapolated), the
    index (encode + write; the names embedded when sampled) and the warm cache against the uncached encoder; the
    exact search's p50 (and IVF-PQ's with its recall@1 where built). Then a line on the self-retrieval check's way:
    every query in one LanceDB query against one query each; then the graphs skipped (a source the baseline cannot
    read), on one line."""
    lines = ["| graph | build | statistics | index (encode + write) | warm cache / uncached | exact search p50 |",
             "|---|---|---|---|---|---|"]
    batched, skipped = [], []
    for name, graph in results["graphs"].items():
        if "skipped" in graph:
            skipped.append(f"{name} ({graph['skipped']})")
            continue
        build, stats, index = graph["build"], graph["stats"], graph["index"]
        cells = [f"{name} ({graph['entities']:,} entities / {graph['relations']:,} relations)",
                 figure(build["ratio"]),
                 f"{figure(stats['ratio'])} ({figure(stats['ours']['wall_s'])} s against "
                 f"{figure(stats['baseline']['wall_s'])} s)"]
        if "skipped" in index:
            cells += ["-", "-", "-"]
        else:
            search, ann = index["search"], index["search"].get("ann")
            cells += [figure(index["ratio"]) + (f" ({index['embedded']:,} names)" if index["sampled"] else ""),
                      figure(index["cache"]["warm_ratio_vs_uncached"]),
                      f"{search['exact']['p50_ms']:.1f} ms" + (
                          f", IVF-PQ {ann['p50_ms']:.1f} ms, recall@1 {ann['recall_at_1_vs_exact']:.3f}" if ann
                          else "")]
            b = search["batched"]
            batched.append(f"{name} {search['queries']} queries, {figure(b['ratio'])}x "
                           f"({'the same' if b['same_hits'] else 'NOT the same'} hits)")
        lines.append("| " + " | ".join(cells) + " |")
    if batched:
        lines += ["", f"Every query in one LanceDB query against one query each: {'; '.join(batched)}."]
    if skipped:
        lines += ["", f"Skipped: {'; '.join(skipped)}."]
    return "\n".join(lines)


TOY = {"synthetic_entities": 400, "synthetic_relations": 1500, "synthetic_index_sample": 150,
       "cache_sample": 20, "nx_sample": 50, "queries": 8, "repeat": 1, "synthetic_repeat": 1, "index_repeat": 1}


def build_parser() -> BenchParser:
    parser = BenchParser(
        "kg_build",
        description="Benchmark omne's KG build steps against naive baselines measured in the same process: "
                    "(1) import + assemble + store vs a networkx MultiDiGraph, (2) graph_stats vs networkx "
                    "BFS, (3) embedding + LanceDB index vs raw SentenceTransformer.encode, the embedding "
                    "cache, and search latency (exact, and IVF-PQ ANN with its recall on the synthetic graph). "
                    "Speeds are reported as ratios ours/baseline (< 1: omne faster).",
        toy=TOY, toy_note="the domains: the throw-away project's solar domain (25 entities)",
        repeat=3, repeat_help="runs of the build and stats stages on a domain (ours and baseline in turn, best "
                              "wall time kept)",
        seed_help="seed of the synthetic graph and of all samples")
    parser.add_argument("--domains", nargs="*", default=None, metavar="NAME",
                        help="registry domains to benchmark (default: every domain of the registry; "
                             "give the flag with no name for none); domains whose files are missing are skipped")
    parser.add_argument("--synthetic-entities", type=int, metavar="N", default=100_000,
                        help="entities of the synthetic graph (0: no synthetic graph)")
    parser.add_argument("--synthetic-relations", type=int, metavar="N", default=500_000,
                        help="relations of the synthetic graph")
    parser.add_argument("--synthetic-index-sample", type=int, metavar="N", default=20_000,
                        help="embed only this many synthetic entity names (0: all of them; embedding 100k "
                             "names takes a long time on a few CPU cores)")
    parser.add_argument("--skip-synthetic-index", action="store_true",
                        help="no embedding / index / search stage for the synthetic graph")
    parser.add_argument("--skip-index", action="store_true", help="no embedding / index / search stage at all")
    parser.add_argument("--cache-sample", type=int, metavar="N", default=5000,
                        help="texts used for the cold/warm embedding-cache timing (at most all of them)")
    parser.add_argument("--nx-sample", type=int, metavar="N", default=300,
                        help="nodes whose depth-3 BFS networkx runs for the stats baseline (extrapolated)")
    parser.add_argument("--queries", type=int, metavar="N", default=200, help="search queries per index")
    parser.add_argument("--synthetic-repeat", type=int, metavar="N", default=1,
                        help="runs of the build and stats stages on the synthetic graph")
    parser.add_argument("--index-repeat", type=int, metavar="N", default=3,
                        help="runs of the embedding + index stage (ours and baseline in turn, best kept)")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.verbose, ("sentence_transformers", "httpx", "urllib3", "filelock", "huggingface_hub"))
    if args.params is None:  # --toy: a throw-away project with the solar domain (nothing built)
        args.params = toy_project()
    params = load_params(args.params, args.profile)
    registry = load_registry(params.registry_path)
    names = registry.names if args.domains is None else args.domains
    started = time.perf_counter()

    results: dict[str, Any] = {
        "benchmark": "kg_build",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "params": {"profile": params.profile, "index": params.index.model_dump(), "seeds": params.seeds.model_dump()},
        "args": args_record(args),
        "graphs": {},
    }

    encoder = None
    if not args.skip_index and (names or (args.synthetic_entities > 0 and not args.skip_synthetic_index)):
        log.info("loading encoder %s (device %s)", params.index.encoder, params.index.device)
        encoder = Encoder(params.index, cache_dir=None)
        t0 = time.perf_counter()
        _ = encoder.model
        encoder.encode(["warm up the encoder"] * params.index.batch_size)
        results["encoder"] = {"model_id": encoder.model_id, "load_and_warmup_s": round(time.perf_counter() - t0, 2)}
        import torch

        results["machine"]["torch_threads"] = torch.get_num_threads()

    for name in names:
        try:
            domain = registry.get(name)
        except ValueError as exc:
            log.warning("skipping %s: %s", name, exc)
            results["graphs"][name] = {"skipped": str(exc)}
            continue
        missing = [str(p.relative_to(params.root)) for p in domain.source.files(params.root) if not p.exists()]
        if missing:
            log.warning("skipping %s: source file(s) not found: %s", name, ", ".join(missing))
            results["graphs"][name] = {"skipped": f"source file(s) not found: {', '.join(missing)}"}
            continue
        log.info("== domain %s", name)
        try:
            results["graphs"][name] = bench_graph(name, domain.source, params.root, params, encoder, args,
                                                  synthetic=False, repeat=args.repeat)
        except KGSourceError as exc:
            log.warning("skipping %s: %s", name, exc)
            results["graphs"][name] = {"skipped": str(exc)}

    if args.synthetic_entities > 0:
        with tempfile.TemporaryDirectory(prefix="omne-bench-synthetic-src-") as tmp:
            log.info("== synthetic graph: generating %d entities, %d relations (seed %d)",
                     args.synthetic_entities, args.synthetic_relations, args.seed)
            t0 = time.perf_counter()
            source = make_synthetic(Path(tmp), args.synthetic_entities, args.synthetic_relations, args.seed)
            log.info("   generated in %.1f s", time.perf_counter() - t0)
            synthetic_encoder = None if args.skip_synthetic_index else encoder
            graph = bench_graph("synthetic", source, Path(tmp), params, synthetic_encoder, args, synthetic=True,
                                repeat=args.synthetic_repeat)
            graph["generator"] = {"entities": args.synthetic_entities, "relations": args.synthetic_relations,
                                  "seed": args.seed, "degree_law": DEGREE_LAW}
            results["graphs"]["synthetic"] = graph

    print("\n" + details(results))
    write_results(results, render(results), args.out, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
