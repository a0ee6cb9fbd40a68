#!/usr/bin/env python
"""Where node_info lists the next entity of a gold path, by the graph's order and by the question's, and what
the question's order costs per call.

``tools.node_info_order`` sets the order of node_info's relation lines: ``graph`` (by label, outgoing first, the
same for every question) or ``question`` (relation groups, each read as a phrase with the entity and the other end's
type, ranked by how close they are to the clause of the episode's question the walk is at, listed in turns; a group
leading back to an entity the episode already listed ranks last;
docs/tools.md, "The order of node_info's relations"). The benchmark replays each pair's gold path (``pair.path``,
start first) as ONE tool episode with its question, as the SFT template's walk does: ``node_info`` of every
entity of the path but the last, on the pair's graph, through ``InProcessToolClient.call(..., episode_id=...,
question=...)``.

* Positions: every relation listed (``node_info_max_neighbors`` None), so that ranks beyond the cap are seen; the
  rank of the first line (``parse_triples``) whose other end is the path's next entity. Counted per order and
  sample: hops, first (rank 0), within 3, 5, 8, 15, absent, and per bucket the pairs whose every hop is first
  (a policy taking the first relation walks the whole path). The samples: the evaluation's questions (the test
  split's stable sample of ``eval.limit`` per bucket that ``omne eval`` uses) and a stable sample of
  ``--train-pairs`` per bucket of the train split. Also the question's order with an episode per hop (no memory of
  the entities already listed, so the way back does not rank last): what the episode's memory is worth.
* Cost: node_info's latency in the question's order (ours) against the graph's (the baseline), the same walks with
  the params' cap (the quick profile's 8), in the same process, baseline then ours in turn, ``--repeat`` runs,
  the best kept: warm (each toolbox's vectors cached by an untimed run first) and cold (a fresh toolbox per run,
  its query cache empty, sharing the loaded encoder: the question's order pays one MiniLM encoder call per
  question, per clause and per entity, whose relation phrases are encoded in one batch). Mean microseconds per call
  and the ratio ours/baseline.

    .venv/bin/python bench/node_info_order.py                       # params.yaml's artifacts (`omne run`)
    .venv/bin/python bench/node_info_order.py --train-pairs 50 --repeat 3
    .venv/bin/python bench/node_info_order.py --toy --out /tmp/bench  # smoke test: the tests' solar graph

A missing QA dataset is built with ``omne run --skip-eval`` (minutes). One torch thread by default (``--threads``,
as bench/rollout.py: steadier on a shared machine; 0: torch's own, one per core). See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

# first: sets the offline environment and puts the project root on sys.path
from _common import (
    BenchParser,
    args_record,
    load_average,
    load_line,
    machine_info,
    measure,
    merge_runs,
    ratio,
    setup_logging,
    write_results,
)
from _toy import toy_project

from pipelines.agent.calls import ToolCall, format_call
from pipelines.agent.client import InProcessToolClient
from pipelines.agent.tools import KGToolbox
from pipelines.config import Params, load_params
from pipelines.eval.runner import load_split, stable_sample
from pipelines.eval.triples import parse_triples
from pipelines.kg.embed import Encoder
from pipelines.layout import qa_dir
from pipelines.qa.models import QAPair

log = logging.getLogger("bench.node_info_order")

ORDERS = ("graph", "question")  # the baseline first
# positions: variant -> (order, the gold path walked as one episode); the last without the episode's memory
POSITIONS = {"graph": ("graph", True), "question": ("question", True), "question_no_memory": ("question", False)}
LABELS = {"graph": "graph", "question": "question", "question_no_memory": "question, an episode per hop"}
WITHIN = (3, 5, 8, 15)
SAMPLES = ("test", "train")
RELATION_LINE = re.compile(r"^\d+\. ")
TOY = {"train_pairs": 3, "repeat": 1, "threads": 1}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = BenchParser("node_info_order", description=__doc__, toy=TOY, repeat=5,
                         repeat_help="cost: runs of the baseline (graph order) and ours (question order), in turn; "
                                     "the best kept",
                         seeded=False,
                         toy_note="the throw-away project's solar QA dataset (built in-process, tiny encoder)")
    parser.add_argument("--train-pairs", type=int, default=150, metavar="N",
                        help="train pairs per bucket (a stable sample, eval.seed); 0: the evaluation's questions only")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="evaluation questions per bucket (default: eval.limit, as omne eval)")
    parser.add_argument("--cap", type=int, default=None, metavar="N",
                        help="node_info_max_neighbors of the cost runs (default: the params', the quick profile's 8)")
    parser.add_argument("--domain", action="append", default=None, metavar="D",
                        help="only these domains' questions (repeatable), e.g. the LightRAG graphs")
    parser.add_argument("--unlabelled-relations", choices=["phrase", "keywords"], default=None,
                        help="tools.unlabelled_relations: how node_info labels a LightRAG graph's relations "
                             "(default: the params')")
    parser.add_argument("--threads", type=int, default=1, metavar="N",
                        help="torch threads (the encoder of the cold runs); 0: torch's default (one per core)")
    args = parser.parse_args(argv)
    for name in ("train_pairs", "repeat", "threads"):
        if getattr(args, name) < (1 if name == "repeat" else 0):
            parser.error(f"--{name.replace('_', '-')} must be >= {1 if name == 'repeat' else 0}")
    if args.cap is not None and args.cap < 1:
        parser.error("--cap must be >= 1")
    return args


def with_tools(params: Params, **update: Any) -> Params:
    return params.model_copy(update={"tools": params.tools.model_copy(update=update)})


def ensure_dataset(params: Params, params_file: Path, profile: str | None) -> None:
    """The QA dataset's splits, built with `omne run --skip-eval` when missing (KGs, index, QA; no training)."""
    folder = qa_dir(params.artifacts_dir, "dataset")
    if all((folder / f"{split}.jsonl").is_file() for split in SAMPLES):
        return
    log.info("building the QA dataset with `omne run --skip-eval` (%s missing; minutes)", folder)
    omne = Path(sys.executable).with_name("omne")
    command = [str(omne)] if omne.exists() else [sys.executable, "-m", "pipelines.cli"]
    profile_option = ["--profile", profile] if profile else []
    subprocess.run([*command, "--params", str(params_file), *profile_option, "run", "--skip-eval"], cwd=params.root,
                   check=True)


def samples(params: Params, limit: int | None, train_pairs: int) -> dict[str, list[QAPair]]:
    """The evaluation's questions (omne eval's stable sample of the test split), a stable sample of the train split."""
    out = {"test": stable_sample(load_split(params, "test", "eval"), limit, params.eval.seed)}
    if train_pairs:
        out["train"] = stable_sample(load_split(params, "train", "eval"), train_pairs, params.eval.seed)
    return out


def node_info_call(name: str, graph: str) -> str:
    return format_call(ToolCall(name="node_info", arguments={"node_name": name, "graph_type": graph}))


def rank_of(text: str, following: str) -> int | None:
    """0-based rank of the first relation line of a node_info response whose other end is ``following`` (its
    head or tail: the entity itself is the other); None when no listed line reaches it. Each line is read with the
    response's ``Entity:`` line, so that a line written from the entity ("-[label]-> B") names both of its ends."""
    entity = next((line for line in text.splitlines() if line.startswith("Entity:")), "")
    lines = [line for line in text.splitlines() if RELATION_LINE.match(line)]
    for rank, line in enumerate(lines):
        triples = parse_triples(f"{entity}\n{line}" if entity else line)
        if triples and following in (triples[0][0], triples[0][2]):
            return rank
    return None


def replay(client: InProcessToolClient, pair: QAPair, episode_id: str, one_episode: bool = True) -> list[int | None]:
    """The pair's gold path walked as one episode with its question (or, ``one_episode`` False, an episode per hop:
    no memory of the entities already listed): the rank of each hop's next entity."""
    ranks: list[int | None] = []
    for hop, (here, following) in enumerate(zip(pair.path, pair.path[1:], strict=False)):
        result = client.call(node_info_call(here, pair.domain), question=pair.question,
                             episode_id=episode_id if one_episode else f"{episode_id}:{hop}")
        ranks.append(rank_of(result.content, following) if result.ok else None)
    return ranks


def count(ranks_by_pair: dict[str, list[int | None]], pairs: list[QAPair]) -> dict[str, Any]:
    """Hops, first, within 3/5/8/15, absent; per bucket the pairs whose every hop is first."""
    ranks = [r for pair in pairs for r in ranks_by_pair[pair.id]]
    listed = [r for r in ranks if r is not None]
    out: dict[str, Any] = {"pairs": len(pairs), "hops": len(ranks), "first": sum(r == 0 for r in listed)}
    out.update({f"within_{k}": sum(r < k for r in listed) for k in WITHIN})
    out["absent"] = len(ranks) - len(listed)
    out["mean_rank"] = round(sum(listed) / len(listed), 3) if listed else None
    out["by_bucket"] = {}
    for bucket in sorted({p.bucket for p in pairs}):
        chosen = [p for p in pairs if p.bucket == bucket]
        out["by_bucket"][bucket] = {
            "pairs": len(chosen), "hops": sum(len(ranks_by_pair[p.id]) for p in chosen),
            "all_first": sum(all(r == 0 for r in ranks_by_pair[p.id]) for p in chosen)}
    return out


def positions(params: Params, encoder: Encoder, domains: list[str],
              chosen: dict[str, list[QAPair]]) -> dict[str, dict[str, Any]]:
    """Per order and sample, where each hop's next entity stands with every relation listed; and the question's
    order with an episode per hop (what the episode's memory of the entities already listed is worth)."""
    out: dict[str, dict[str, Any]] = {}
    for variant, (order, one_episode) in POSITIONS.items():
        toolbox = KGToolbox(with_tools(params, node_info_order=order, node_info_max_neighbors=None), domains,
                            encoder=encoder)
        client = InProcessToolClient(toolbox)
        out[variant] = {}
        for split, pairs in chosen.items():
            t0 = time.perf_counter()
            ranks = {p.id: replay(client, p, f"positions:{variant}:{split}:{p.id}", one_episode) for p in pairs}
            out[variant][split] = count(ranks, pairs)
            c = out[variant][split]
            log.info("  %-18s %-5s %3d pairs, %3d hops: first %d, within 8 %d, absent %d (%.1f s)", variant, split,
                     c["pairs"], c["hops"], c["first"], c["within_8"], c["absent"], time.perf_counter() - t0)
    return out


def walks(chosen: dict[str, list[QAPair]]) -> list[QAPair]:
    return [p for pairs in chosen.values() for p in pairs]


def walk_all(client: InProcessToolClient, pairs: list[QAPair], tag: str) -> int:
    """Every pair's walk (fresh episode ids under ``tag``); returns the failed calls."""
    failed = 0
    for pair in pairs:
        for here in pair.path[:-1]:
            result = client.call(node_info_call(here, pair.domain), episode_id=f"{tag}:{pair.id}",
                                 question=pair.question)
            failed += not result.ok
    return failed


def cost(params: Params, encoder: Encoder, domains: list[str], pairs: list[QAPair], cap: int | None,
         repeat: int) -> dict[str, Any]:
    """node_info's latency, question order (ours) vs graph order (the baseline): warm and cold."""
    calls = sum(len(p.path) - 1 for p in pairs)
    toolbox_params = {order: with_tools(params, node_info_order=order, node_info_max_neighbors=cap)
                      for order in ORDERS}
    serial = iter(range(1_000_000))

    def toolbox_for(order: str) -> KGToolbox:
        toolbox = KGToolbox(toolbox_params[order], domains, encoder=encoder)
        toolbox.load_all()  # the graphs loaded outside the timings
        return toolbox

    def run(mode: str, make: Callable[[str], KGToolbox]) -> dict[str, Any]:
        runs: dict[str, list[dict[str, Any]]] = {order: [] for order in ORDERS}
        failed: dict[str, int] = dict.fromkeys(ORDERS, 0)
        cached: dict[str, int] = {}
        for index in range(repeat):
            for order in ORDERS:  # the baseline (graph) first, then ours (question)
                toolbox = make(order)
                client = InProcessToolClient(toolbox)
                tag = f"cost:{mode}:{order}:{next(serial)}"
                failed[order], m = measure(lambda c=client, t=tag: walk_all(c, pairs, t), items=calls)
                m["mean_us_per_call"] = round(m["wall_s"] / calls * 1e6, 1) if calls else None
                runs[order].append(m)
                cached[order] = sum(key[0] == "query" for key in toolbox._cache._entries)  # noqa: SLF001
            log.info("  %s run %d of %d: graph %.1f us/call, question %.1f us/call", mode, index + 1, repeat,
                     runs["graph"][-1]["mean_us_per_call"] or 0, runs["question"][-1]["mean_us_per_call"] or 0)
        out: dict[str, Any] = {}
        for order in ORDERS:
            best = merge_runs(runs[order])
            out[order] = {**best, "mean_us_per_call": round(best["wall_s"] / calls * 1e6, 1) if calls else None,
                          "failed_calls": failed[order], "query_vectors_cached": cached[order]}
        out["ratio"] = ratio(out["question"]["wall_s"], out["graph"]["wall_s"])
        out["cpu_ratio"] = ratio(out["question"]["cpu_s"], out["graph"]["cpu_s"])
        return out

    def per_vector(warm: dict[str, Any], cold: dict[str, Any]) -> float | None:
        """What one vector embedded costs (ms): the cold runs' extra time over the warm ones, per vector."""
        vectors = cold["question"]["query_vectors_cached"]
        extra = cold["question"]["wall_s"] - warm["question"]["wall_s"]
        return round(extra / vectors * 1e3, 2) if vectors else None

    warm_boxes = {order: toolbox_for(order) for order in ORDERS}
    for order, toolbox in warm_boxes.items():  # untimed: every phrase, clause and question vector into the cache
        walk_all(InProcessToolClient(toolbox), pairs, f"cost:warm-up:{order}")
    log.info("cost: %d pairs, %d node_info calls per run, cap %s; warm, then cold (x%d each)", len(pairs), calls,
             cap, repeat)
    warm = run("warm", warm_boxes.__getitem__)
    cold = run("cold", toolbox_for)
    cold["question"]["encode_ms_per_vector"] = per_vector(warm, cold)
    return {"pairs": len(pairs), "calls": calls, "cap": cap, "warm": warm, "cold": cold}


def render(results: dict[str, Any]) -> str:
    setup = results["setup"]
    out = [f"node_info order: where the next entity of a gold path is listed (every relation listed; "
           f"profile {setup['profile']}, encoder {setup['encoder']}, seed {setup['seed']})", ""]
    header = "| sample | order | pairs | hops | first | within 3 | within 5 | within 8 | within 15 | absent | " \
             "all hops first, by bucket |"
    out += [header, "|" + "---|" * (header.count("|") - 1)]
    for split in setup["samples"]:
        for variant in POSITIONS:
            c = results["positions"][variant][split]
            buckets = ", ".join(f"{b}: {v['all_first']} of {v['pairs']}" for b, v in c["by_bucket"].items())
            out.append(f"| {split} | {LABELS[variant]} | {c['pairs']} | {c['hops']} | {c['first']} | {c['within_3']} | "
                       f"{c['within_5']} | {c['within_8']} | {c['within_15']} | {c['absent']} | {buckets} |")
    cost_ = results["cost"]
    out += ["", f"cost: node_info in the question's order (ours) vs the graph's (baseline), {cost_['calls']} calls "
                f"per run ({cost_['pairs']} walks), cap {cost_['cap']}, best of {setup['repeat']}, "
                f"{setup['torch_threads']} torch thread(s)", "",
            "| cache | graph us/call | question us/call | ratio question/graph | CPU ratio | query vectors |",
            "|---|---|---|---|---|---|"]
    for mode in ("warm", "cold"):
        m = cost_[mode]
        out.append(f"| {mode} | {m['graph']['mean_us_per_call']} | {m['question']['mean_us_per_call']} | "
                   f"{m['ratio']} | {m['cpu_ratio']} | {m['question']['query_vectors_cached']} |")
    per = cost_["cold"]["question"]["encode_ms_per_vector"]
    out += ["", f"cold: the question's order encodes each question, clause and entity's relation phrases once per "
                f"toolbox ({cost_['cold']['question']['query_vectors_cached']} encoder calls, ~{per} ms each)",
            load_line(results["machine"])]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.verbose, ("sentence_transformers", "httpx", "filelock", "pipelines.agent.tools"))
    started, load_start = time.perf_counter(), load_average()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.params is None:  # --toy: a throw-away project, the solar QA dataset built in-process
        args.params = toy_project(build="qa")
    params = load_params(args.params, args.profile)
    ensure_dataset(params, args.params, args.profile)
    if args.unlabelled_relations:
        params = with_tools(params, unlabelled_relations=args.unlabelled_relations)
    if args.domain:
        params = params.model_copy(update={"eval": params.eval.model_copy(update={"domains": args.domain})})
    limit = params.eval.limit if args.limit is None else args.limit
    chosen = samples(params, limit, args.train_pairs)
    if not chosen["test"]:
        raise SystemExit(f"the test split of {params.artifacts_dir} has no questions")
    domains = sorted({p.domain for pairs in chosen.values() for p in pairs})
    cap = params.tools.node_info_max_neighbors if args.cap is None else args.cap
    log.info("%s", "; ".join(f"{split}: {len(pairs)} pairs, {sum(len(p.path) - 1 for p in pairs)} hops"
                             for split, pairs in chosen.items()))

    t0 = time.perf_counter()
    encoder = Encoder(params.index)  # no disk cache: the toolboxes' in-memory query caches only
    encoder.encode(["warm up the encoder"])
    log.info("encoder %s loaded in %.1f s", encoder.model_id, time.perf_counter() - t0)

    log.info("positions: every relation listed, each gold path walked as one episode")
    where = positions(params, encoder, domains, chosen)
    spent = cost(params, encoder, domains, walks(chosen), cap, args.repeat)

    results: dict[str, Any] = {
        "benchmark": "node_info_order",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {**machine_info(), "load_average_at_start": load_start, "torch": torch.__version__,
                    "torch_threads": torch.get_num_threads()},
        "args": args_record(args),
        "setup": {"profile": params.profile, "artifacts": str(params.artifacts_dir), "encoder": params.index.encoder,
                  "encoder_id": encoder.model_id, "samples": list(chosen),
                  "hops": {split: sum(len(p.path) - 1 for p in pairs) for split, pairs in chosen.items()},
                  "eval_limit": limit, "train_pairs": args.train_pairs,
                  "seed": params.eval.seed, "domains": domains, "params_order": params.tools.node_info_order,
                  "unlabelled_relations": params.tools.unlabelled_relations,
                  "params_cap": params.tools.node_info_max_neighbors, "repeat": args.repeat,
                  "torch_threads": torch.get_num_threads()},
        "positions": where,
        "cost": spent,
    }
    results["machine"]["load_average_at_end"] = load_average()
    write_results(results, render(results), args.out, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
