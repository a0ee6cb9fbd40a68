"""The main job of `make run`: every domain's KG, entity index and QA pairs (template generator unless
params say otherwise), the merged QA dataset, then per-domain summary tables."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table
from tqdm.auto import tqdm

from pipelines.config import Params
from pipelines.domains import Domain
from pipelines.kg.build import build_entity_index, build_knowledge_graph
from pipelines.kg.graph import GraphStats
from pipelines.qa.build import DatasetResult, build_gold_paths, build_qa_dataset, build_qa_pairs, build_seed_subgraphs


class DomainRow(BaseModel):
    domain: str
    stats: GraphStats
    recall_at_1: float
    kg_state: str
    index_state: str
    qa_state: str = ""
    seconds: float


class StageTimes:
    """Wall seconds per stage of one `omne run` (summed over domains), in the order the stages ran: where
    the time of the main job goes, printed at its end and kept in artifacts/reports/run_timings.json."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.started = time.perf_counter()

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - start

    def total(self) -> float:
        return time.perf_counter() - self.started

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"stages_s": {k: round(v, 2) for k, v in self.seconds.items()},
                                    "total_s": round(self.total(), 2)}, indent=2) + "\n", encoding="utf-8")

    def print_table(self, console: Console | None = None) -> None:
        total = self.total()
        table = Table(title="omne run: wall time per stage")
        for column in ("stage", "s", "share"):
            table.add_column(column, justify="left" if column == "stage" else "right")
        for stage, seconds in self.seconds.items():
            table.add_row(stage, f"{seconds:.1f}", f"{seconds / total:.0%}" if total else "")
        table.add_row("total", f"{total:.1f}", "100%")
        (console or Console(width=None if sys.stdout.isatty() else 160)).print(table)


def run_main_job(params: Params, domains: list[Domain], *, force: bool = False,
                 times: StageTimes | None = None) -> list[DomainRow]:
    times = times or StageTimes()
    rows = []
    for domain in tqdm(domains, desc="domains", unit="domain"):
        start = time.perf_counter()
        with times.timed("knowledge graphs"):
            kg = build_knowledge_graph(domain, params, force=force)
        with times.timed("entity indexes"):
            index = build_entity_index(domain.name, params, force=force)
        with times.timed("seed subgraphs"):
            seeds = build_seed_subgraphs(domain.name, params, force=force)
        with times.timed("QA pairs"):
            pairs = build_qa_pairs(domain.name, params, force=force)
        with times.timed("gold paths"):
            gold = build_gold_paths(domain.name, params, force=force)
        qa_state = "cached" if seeds.skipped and pairs.skipped and gold.skipped else "built"
        rows.append(DomainRow(
            domain=domain.name,
            stats=GraphStats.model_validate(kg.manifest.metadata["stats"]),
            recall_at_1=index.manifest.metadata["self_retrieval"]["recall_at_1"],
            kg_state="cached" if kg.skipped else "built",
            index_state="cached" if index.skipped else "built",
            qa_state=qa_state,
            seconds=round(time.perf_counter() - start, 2),
        ))
    return rows


def run_qa_dataset(params: Params, domains: list[Domain], *, force: bool = False) -> DatasetResult:
    return build_qa_dataset(params, [d.name for d in domains], force=force)


def print_domain_table(rows: list[DomainRow], console: Console | None = None) -> None:
    if not rows:
        return
    stats = rows[0].stats
    table = Table(title="omne knowledge graphs")
    for column in ("domain", "entities", "relations", "components", "largest comp.", "mean degree",
                   f"seeds d{stats.seed_depth} {stats.seed_min_nodes}-{stats.seed_max_nodes}",
                   "described", "index R@1", "kg / index / qa", "s"):
        table.add_column(column, justify="left" if column == "domain" else "right")
    for row in rows:
        s = row.stats
        table.add_row(row.domain, f"{s.entities:,}", f"{s.relations:,}", f"{s.components:,}",
                      f"{s.largest_component:,}", f"{s.mean_degree:.2f}", f"{s.eligible_seeds:,}",
                      f"{s.described_share:.0%}", f"{row.recall_at_1:.3f}", f"{row.kg_state} / {row.index_state} / {row.qa_state}",
                      f"{row.seconds:.1f}")
    (console or Console(width=None if sys.stdout.isatty() else 160)).print(table)
