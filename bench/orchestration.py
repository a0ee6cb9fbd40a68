#!/usr/bin/env python
"""Benchmark of Dagster's own overhead per asset: each data stage of one domain built by the library
function directly vs materialized by Dagster (in process, ``dg.materialize``), same work in both.

Every figure is a RATIO against the library call measured in the same process, the variants in turn,
best of ``--repeat`` (the machines are noisy: absolute timings move with the load, ratios much less).

    .venv/bin/python bench/orchestration.py                       # geography, 2 rounds (~10 min on 2 busy cores)
    .venv/bin/python bench/orchestration.py --domain chemistry --repeat 3
    .venv/bin/python bench/orchestration.py --instance disk       # sqlite storage on disk, as `dagster dev`
    .venv/bin/python bench/orchestration.py --toy --out /tmp/bench   # smoke test: the tiny solar domain

A throw-away project (params.yaml + kg_assets/ with the registry, copied into a temporary folder;
``OMNE_PARAMS`` and the ``OmneResource``'s ``params_path`` point at it) is built once (an untimed
warm-up materialization of every asset), then for each stage -- knowledge_graph, entity_index,
seed_subgraphs, qa_pairs, gold_paths of the ``--domain`` partition, and the unpartitioned
qa_dataset -- three variants run in turn, ``--repeat`` times:

1. **library**: the build function (``build_knowledge_graph``, ``build_entity_index``, ...) with
   ``force=True``, the arguments the asset passes;
2. **asset body**: the asset's decorated function invoked directly (``knowledge_graph(context,
   omne=...)`` with ``dg.build_asset_context``): the library call plus what the asset adds (its
   checks, the reads behind its metadata, the MaterializeResult), without any run machinery;
3. **dagster**: ``dg.materialize([asset], partition_key=..., instance=..., resources={"omne": ...})``
   on one instance (ephemeral by default) that holds the domain partition.

The asset bodies do not pass ``force``: before every variant (outside the timing) the stage's
artifact folder is deleted, and for entity_index also the embedding disk cache
(``artifacts/cache/embeddings``, ``--keep-embedding-cache`` to keep it), so that all three do the
full work. Overhead = dagster - library (wall time, best run of each), split into the asset body's
extra work (body - library) and Dagster's run machinery (dagster - body). Target (printed
as PASS/MISS, never asserted): overhead below 15% of the library time for stages whose library time
is over 10 s; for shorter stages the fixed cost of a run (run storage, event log) is a larger share
and no target applies. torch runs with ``--threads`` 1 (the encoder of entity_index) in every variant.
Every number goes to ``--out`` (default bench/results/orchestration.json); stdout gets a report and a
Markdown table (``render``: what bench/tables.py puts into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# first: sets the offline environment and puts the project root on sys.path
from _common import (
    BenchParser,
    Stage,
    args_record,
    load_average,
    load_line,
    machine_info,
    ratio,
    setup_logging,
    verdict,
    write_results,
)
from _toy import toy_project

warnings.filterwarnings("ignore", message=".*is currently in (preview|beta).*")  # the checks' partitions_def

import dagster as dg  # noqa: E402

from dagster_project.defs.kg import entity_index, knowledge_graph  # noqa: E402
from dagster_project.defs.partitions import DOMAIN_PARTITIONS  # noqa: E402
from dagster_project.defs.qa import QAPairsConfig, gold_paths, qa_dataset, qa_pairs, seed_subgraphs  # noqa: E402
from dagster_project.defs.resources import OmneResource  # noqa: E402
from pipelines.config import PARAMS_ENV, Params  # noqa: E402
from pipelines.domains import load_registry  # noqa: E402
from pipelines.kg.build import build_entity_index, build_knowledge_graph  # noqa: E402
from pipelines.layout import index_dir, kg_dir  # noqa: E402
from pipelines.qa import build as qa_build  # noqa: E402

log = logging.getLogger("bench.orchestration")

TARGET_SHARE = 0.15  # Dagster's overhead below 15% of the stage time ...
TARGET_MIN_S = 10.0  # ... for stages whose library time is over 10 s
VARIANTS = ("library", "body", "dagster")


@dataclass
class StageSpec:
    name: str
    asset: dg.AssetsDefinition
    partitioned: bool
    library: Callable[[Params, str], Any]  # the build function as the asset calls it, with force=True
    folders: Callable[[Params, str], list[Path]]  # what to delete so that the asset body does the full work


def _embedding_cache(params: Params) -> Path:
    return params.artifacts_dir / "cache" / "embeddings"


def stage_specs(keep_embedding_cache: bool) -> list[StageSpec]:
    return [
        StageSpec("knowledge_graph", knowledge_graph, True,
                  lambda p, d: build_knowledge_graph(load_registry(p.registry_path).get(d), p, force=True),
                  lambda p, d: [kg_dir(p.artifacts_dir, d)]),
        StageSpec("entity_index", entity_index, True,
                  lambda p, d: build_entity_index(d, p, force=True),
                  lambda p, d: [index_dir(p.artifacts_dir, d),
                                *([] if keep_embedding_cache else [_embedding_cache(p)])]),
        StageSpec("seed_subgraphs", seed_subgraphs, True,
                  lambda p, d: qa_build.build_seed_subgraphs(d, p, force=True),
                  lambda p, d: [qa_build.qa_dir(p.artifacts_dir, "seeds", d)]),
        StageSpec("qa_pairs", qa_pairs, True,
                  lambda p, d: qa_build.build_qa_pairs(d, p, generator=None, limit=None, force=True, progress=False),
                  lambda p, d: [qa_build.qa_dir(p.artifacts_dir, "pairs", d)]),
        StageSpec("gold_paths", gold_paths, True,
                  lambda p, d: qa_build.build_gold_paths(d, p, force=True, progress=False),
                  lambda p, d: [qa_build.qa_dir(p.artifacts_dir, "gold", d)]),
        StageSpec("qa_dataset", qa_dataset, False,
                  lambda p, d: qa_build.build_qa_dataset(p, force=True),
                  lambda p, d: [qa_build.qa_dir(p.artifacts_dir, "dataset")]),
    ]


# --------------------------------------------------------------------------------------------
# The throw-away project and the Dagster instance
# --------------------------------------------------------------------------------------------

def make_project(root: Path, params_file: Path) -> Path:
    """params.yaml + kg_assets/ (the registry and every domain's source files) copied under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(params_file, root / "params.yaml")
    shutil.copytree(params_file.parent / "kg_assets", root / "kg_assets")
    return root / "params.yaml"


def make_instance(kind: str, folder: Path, domain: str) -> dg.DagsterInstance:
    """One instance for the whole benchmark (as a long-lived deployment has), holding the domain partition."""
    if kind == "disk":
        folder.mkdir(parents=True, exist_ok=True)
        instance = dg.DagsterInstance.local_temp(str(folder), overrides={"telemetry": {"enabled": False}})
    else:
        instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(DOMAIN_PARTITIONS, [domain])
    return instance


# --------------------------------------------------------------------------------------------
# The three variants
# --------------------------------------------------------------------------------------------

def run_library(spec: StageSpec, params: Params, domain: str) -> dict[str, Any]:
    result = spec.library(params, domain)
    if result.skipped:
        raise RuntimeError(f"{spec.name}: the library call skipped the build")
    return {}


def run_body(spec: StageSpec, resource: OmneResource, instance: dg.DagsterInstance, domain: str) -> dict[str, Any]:
    context = dg.build_asset_context(partition_key=domain if spec.partitioned else None, instance=instance)
    kwargs: dict[str, Any] = {"omne": resource}
    if spec.asset is qa_pairs:
        kwargs["config"] = QAPairsConfig()
    result = spec.asset(context, **kwargs)
    if result.metadata.get("reused_existing") is True:
        raise RuntimeError(f"{spec.name}: the asset body reused the existing artifact")
    return {}


def run_dagster(spec: StageSpec, resource: OmneResource, instance: dg.DagsterInstance, domain: str) -> dict[str, Any]:
    started = time.time()
    result = dg.materialize([spec.asset], partition_key=domain if spec.partitioned else None, instance=instance,
                            resources={"omne": resource})
    ended = time.time()
    if not result.success:
        raise RuntimeError(f"{spec.name}: materialization failed")
    (materialization,) = result.asset_materializations_for_node(spec.name)
    if materialization.metadata["reused_existing"].value is True:
        raise RuntimeError(f"{spec.name}: the materialization reused the existing artifact")
    stamps: dict[str, float] = {}
    entries = instance.all_logs(result.run_id)
    for entry in entries:
        if entry.dagster_event_type is not None:
            stamps.setdefault(entry.dagster_event_type.value, entry.timestamp)
    step_start, step_end = stamps.get("STEP_START"), stamps.get("STEP_SUCCESS")
    if step_start is None or step_end is None:
        return {}
    return {"before_step_s": round(step_start - started, 4), "step_s": round(step_end - step_start, 4),
            "after_step_s": round(ended - step_end, 4), "events": len(entries)}


def bench_stage(spec: StageSpec, params: Params, resource: OmneResource, instance: dg.DagsterInstance,
                domain: str, rounds: int) -> dict[str, Any]:
    calls = {"library": lambda: run_library(spec, params, domain),
             "body": lambda: run_body(spec, resource, instance, domain),
             "dagster": lambda: run_dagster(spec, resource, instance, domain)}
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for r in range(rounds):
        order = VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))  # no variant always first
        for variant in order:
            for folder in spec.folders(params, domain):
                shutil.rmtree(folder, ignore_errors=True)
            with Stage() as stage:
                extra = calls[variant]()
            run = {"wall_s": round(stage.wall_s, 4), "cpu_s": round(stage.cpu_s, 4),
                   "peak_extra_rss_mb": round(stage.peak_extra / 2**20, 1), **extra}
            runs[variant].append(run)
            log.info("  %-15s round %d  %-8s %8.3f s wall  %8.3f s cpu", spec.name, r + 1, variant, run["wall_s"],
                     run["cpu_s"])
    best = {v: min(runs[v], key=lambda m: m["wall_s"]) for v in VARIANTS}
    lib, body, dag = (best[v]["wall_s"] for v in VARIANTS)
    lib_cpu, dag_cpu = min(m["cpu_s"] for m in runs["library"]), min(m["cpu_s"] for m in runs["dagster"])
    overhead = dag - lib
    applies = lib > TARGET_MIN_S
    return {
        "runs": runs, "best": best, "partitioned": spec.partitioned,
        "library_s": lib, "body_s": body, "dagster_s": dag,
        "overhead_s": round(overhead, 4), "overhead_share": ratio(overhead, lib) if overhead else 0.0,
        "body_extra_s": round(body - lib, 4), "machinery_s": round(dag - body, 4),
        "ratio_dagster_vs_library": ratio(dag, lib),
        "cpu_overhead_s": round(dag_cpu - lib_cpu, 4), "cpu_overhead_share": ratio(dag_cpu - lib_cpu, lib_cpu),
        "target_applies": applies,
        "pass": (overhead / lib < TARGET_SHARE) if applies else None,
    }


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------

def _span(values: list[float], digits: int = 2) -> str:
    """One value, or the lowest and the highest: "0.09", "0.19-0.84"."""
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}-{high}"


def render(results: dict[str, Any]) -> str:
    """A Markdown table (bench/tables.py puts it into docs/benchmarks.md): a row per stage the target applies to
    (library time over 10 s; when none does, the longest stage, without a verdict) with its overhead share; the
    other partitioned stages in one row (the ranges of their seconds); each other unpartitioned stage (qa_dataset)
    in its own row."""
    a, stages = results["args"], results["stages"]
    lines = [f"| stage ({a['domain']}, best of {a['repeat']}) | library s | dagster s | overhead (dagster - library) "
             f"| of which Dagster's machinery (dagster - asset body) |", "|---|---|---|---|---|"]
    alone = [name for name, s in stages.items() if s["target_applies"]]
    if not alone and stages:
        alone = [max(stages, key=lambda name: stages[name]["library_s"])]
    for name in alone:
        s = stages[name]
        d, cpu = s["best"]["dagster"], s["cpu_overhead_share"]
        inside = (f" ({d['before_step_s']:.2f} before the step, {d['after_step_s']:.2f} after)" if "step_s" in d
                  else "")
        label, target = ((f"over {TARGET_MIN_S:g} s", verdict(s["pass"])) if s["target_applies"]
                         else (f"the longest, under {TARGET_MIN_S:g} s", "no target"))
        lines.append(f"| {name} ({label}) | {s['library_s']:.1f} | {s['dagster_s']:.1f} | "
                     f"**{100 * s['overhead_share']:.1f}%** ({target}; CPU "
                     f"{'-' if cpu is None else f'{100 * cpu:.1f}%'}) | {s['machinery_s']:.2f} s{inside} |")
    rest = [name for name in stages if name not in alone]
    short = [name for name in rest if stages[name]["partitioned"]]
    groups = ([short] if short else []) + [[name] for name in rest if not stages[name]["partitioned"]]
    for group in groups:
        rows = [stages[name] for name in group]
        only = rows[0] if len(rows) == 1 else None
        body = (f" (the rest, {only['body_extra_s']:.2f} s: the asset body's checks and metadata)"
                if only and only["body_extra_s"] > only["machinery_s"] else "")
        lines.append(f"| {', '.join(group)} | {_span([r['library_s'] for r in rows])} | "
                     f"{_span([r['dagster_s'] for r in rows])} | {_span([r['overhead_s'] for r in rows])} s | "
                     f"{_span([r['machinery_s'] for r in rows], 3)} s{body} |")
    return "\n".join(lines)


def details(results: dict[str, Any]) -> str:
    """The plain-text report on stdout before the table: every variant's best time, the split of the overhead."""
    head = (f"{'stage':<16} {'library s':>9} {'body s':>8} {'dagster s':>9} {'overhead s':>10} {'ovh %':>7} "
            f"{'body+ s':>8} {'machinery s':>11} {'cpu ovh %':>9}  target (<15% if >10 s)")
    lines = [head, "-" * len(head)]
    for name, s in results["stages"].items():
        target = ("PASS" if s["pass"] else "MISS") if s["target_applies"] else "n/a (< 10 s)"
        cpu_share = s["cpu_overhead_share"]
        lines.append(f"{name:<16} {s['library_s']:>9.3f} {s['body_s']:>8.3f} {s['dagster_s']:>9.3f} "
                     f"{s['overhead_s']:>10.3f} {100 * s['overhead_share']:>6.1f}% {s['body_extra_s']:>8.3f} "
                     f"{s['machinery_s']:>11.3f} {'-' if cpu_share is None else f'{100 * cpu_share:.1f}%':>9}  "
                     f"{target}")
    total = results["totals"]
    lines.append(f"{'total':<16} {total['library_s']:>9.3f} {total['body_s']:>8.3f} {total['dagster_s']:>9.3f} "
                 f"{total['overhead_s']:>10.3f} {100 * total['overhead_share']:>6.1f}%")
    lines += ["",
              "best (minimum) wall time of each variant over the rounds. overhead = dagster - library; ovh % of the",
              "library time. body+ = asset body invoked directly - library (the asset's checks and metadata reads);",
              "machinery = dagster - body (run creation, step execution, event log, resources). cpu ovh %: the same",
              "overhead on process CPU time (less sensitive to other load on the machine).",
              "",
              "inside dg.materialize (best run): before step / step (STEP_START..STEP_SUCCESS) / after step, events"]
    for name, s in results["stages"].items():
        d = s["best"]["dagster"]
        if "step_s" in d:
            lines.append(f"  {name:<16} {d['before_step_s']:>7.3f} / {d['step_s']:>8.3f} / "
                         f"{d['after_step_s']:>6.3f} s, {d['events']} events")
    m = results["machine"]
    lines += ["", f"{load_line(m)}; {m['torch_threads']} torch thread(s); "
                  f"instance {results['args']['instance']}; dagster {results['dagster']}."]
    return "\n".join(lines)


TOY = {"domain": "solar", "repeat": 1}


def build_parser() -> BenchParser:
    parser = BenchParser(
        "orchestration",
        description="Dagster's own overhead per asset: each data stage of one domain (knowledge_graph, "
                    "entity_index, seed_subgraphs, qa_pairs, gold_paths, then qa_dataset) built by the library "
                    "function directly (force=True), by the asset body invoked directly, and by dg.materialize "
                    "of the asset, in turn, on a throw-away copy of the project.",
        epilog="Target (PASS/MISS, never asserted): Dagster's overhead below 15% of the stage time "
               "for stages over 10 s.",
        toy=TOY, toy_note="the project copied is a throw-away one with the solar domain and a tiny random encoder",
        repeat=2, repeat_aliases=("--rounds",),
        repeat_help="rounds of the three variants per stage (in turn; best wall time kept)",
        seeded=False,  # the stages take their seeds from params.yaml
        params_help="params.yaml copied into the throw-away project (with the kg_assets/ beside it)")
    parser.add_argument("--domain", default="geography", help="registry domain (the partition) to build")
    parser.add_argument("--stages", nargs="+", metavar="NAME", default=None,
                        help="only these stages (the upstream ones are built by the warm-up all the same)")
    parser.add_argument("--instance", choices=("ephemeral", "disk"), default="ephemeral",
                        help="Dagster instance: in-memory storage, or sqlite files in a temporary DAGSTER_HOME "
                             "(what `dagster dev` uses; telemetry off)")
    parser.add_argument("--keep-embedding-cache", action="store_true",
                        help="do not clear the embedding disk cache before each entity_index run (then the "
                             "stage reads the vectors from the cache instead of encoding)")
    parser.add_argument("--threads", type=int, default=1, metavar="N",
                        help="torch intra-op threads (0: torch's default, one per core). 1 by default: on a shared "
                             "machine torch's OpenMP threads lose their time slice whenever another process holds "
                             "a core (encoding geography's names ran 3.5x slower with 2 threads than with 1 under "
                             "a load of 7 on 2 cores); every variant runs with the same setting")
    parser.add_argument("--no-warmup", action="store_true",
                        help="no untimed warm-up materialization (the first stage then builds the upstream "
                             "artifacts in its first round, which is then slower)")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.verbose, ("sentence_transformers", "httpx", "urllib3", "filelock", "huggingface_hub",
                                 "alembic", "great_expectations", "dagster"))
    started = time.perf_counter()
    import torch  # the encoder's; imported here to set its threads before any variant runs

    if args.threads:
        torch.set_num_threads(args.threads)
    specs = stage_specs(args.keep_embedding_cache)
    if args.stages:
        unknown = set(args.stages) - {s.name for s in specs}
        if unknown:
            raise SystemExit(f"unknown stage(s): {', '.join(sorted(unknown))}")
        specs = [s for s in specs if s.name in args.stages]
    results: dict[str, Any] = {
        "benchmark": "orchestration",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {**machine_info(), "load_average_at_start": load_average(),
                    "torch_threads": torch.get_num_threads()},
        "dagster": dg.__version__,
        "args": args_record(args),
        "stages": {},
    }
    if args.params is None:  # --toy: a throw-away project with the solar domain (copied again below)
        args.params = toy_project()
    with tempfile.TemporaryDirectory(prefix="omne-bench-orchestration-") as tmp:
        params_path = make_project(Path(tmp) / "project", args.params.resolve())
        os.environ[PARAMS_ENV] = str(params_path)  # anything reading the default params reads the copy
        resource = OmneResource(params_path=str(params_path), profile=args.profile or "")
        params = resource.params()
        if args.domain not in load_registry(params.registry_path).names:
            raise SystemExit(f"unknown domain {args.domain!r}: not in {params.registry_path}")
        instance = make_instance(args.instance, Path(tmp) / "dagster_home", args.domain)
        results["params"] = {"profile": params.profile, "project": str(params.root)}

        if not args.no_warmup:  # builds every artifact once, and pays the first-call costs of both paths
            log.info("warm-up: materialize the five %s assets, then qa_dataset (untimed)", args.domain)
            t0 = time.perf_counter()
            dg.materialize([knowledge_graph, entity_index, seed_subgraphs, qa_pairs, gold_paths],
                           partition_key=args.domain, instance=instance, resources={"omne": resource})
            dg.materialize([qa_dataset], instance=instance, resources={"omne": resource})
            results["warmup_s"] = round(time.perf_counter() - t0, 1)
            log.info("warm-up done in %.1f s", results["warmup_s"])

        for spec in specs:
            log.info("== %s (%s)", spec.name, args.domain if spec.partitioned else "unpartitioned")
            results["stages"][spec.name] = s = bench_stage(spec, params, resource, instance, args.domain,
                                                           args.repeat)
            log.info("   library %.3f s, body %.3f s, dagster %.3f s: overhead %.3f s (%.1f%%)", s["library_s"],
                     s["body_s"], s["dagster_s"], s["overhead_s"], 100 * s["overhead_share"])
        instance.dispose()

    stages = results["stages"].values()
    totals = {k: round(sum(s[k] for s in stages), 4) for k in ("library_s", "body_s", "dagster_s")}
    totals["overhead_s"] = round(totals["dagster_s"] - totals["library_s"], 4)
    totals["overhead_share"] = ratio(totals["overhead_s"], totals["library_s"]) or 0.0
    results["totals"] = totals
    results["machine"]["load_average_at_end"] = load_average()
    print("\n" + details(results))
    write_results(results, render(results), args.out, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
