"""The terminal tables of `omne run` and the commands that print the same figures (`omne qa build`, `omne qa
stats`, `omne eval`): one place for their columns, so every entry point prints a stage the same way."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from pipelines.run import DomainRow, StageTimes


def console() -> Console:
    """Rich console: the terminal's width, or 160 columns when the output is a file or a pipe (logs, CI)."""
    return Console(width=None if sys.stdout.isatty() else 160)


def _table(title: str, columns: list[str], left: tuple[str, ...]) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="left" if column in left else "right")
    return table


def print_domain_sources(domains: list[Any]) -> None:
    """One row per domain (``pipelines.domains.Domain``): its field, where its data comes from and the licence."""
    if not domains:
        return
    table = _table("omne domains", ["domain", "field", "source", "licence"], ("domain", "field", "source", "licence"))
    for domain in domains:
        table.add_row(domain.name, domain.field or "-", domain.origin or domain.source.path, domain.licence or "-")
    console().print(table)


def print_domain_table(rows: list[DomainRow]) -> None:
    """One row per domain: the KG's statistics, the index's self-retrieval, what was rebuilt and the time."""
    if not rows:
        return
    stats = rows[0].stats
    table = _table("omne knowledge graphs",
                   ["domain", "entities", "relations", "components", "largest comp.", "mean degree",
                    f"seeds d{stats.seed_depth} {stats.seed_min_nodes}-{stats.seed_max_nodes}", "described",
                    "index R@1", "kg / index / qa", "s"], ("domain",))
    for row in rows:
        s = row.stats
        table.add_row(row.domain, f"{s.entities:,}", f"{s.relations:,}", f"{s.components:,}",
                      f"{s.largest_component:,}", f"{s.mean_degree:.2f}", f"{s.eligible_seeds:,}",
                      f"{s.described_share:.0%}", f"{row.recall_at_1:.3f}",
                      f"{row.kg_state} / {row.index_state} / {row.qa_state}", f"{row.seconds:.1f}")
    console().print(table)


def print_qa_stats(stats: dict[str, Any]) -> None:
    """The QA dataset per domain: buckets, splits, hops and question length (the Omne-R1 paper's Table 1)."""
    table = _table("omne QA dataset", ["domain", "1/2-hop", "3+", "total", "train", "val", "test",
                                       "hops 1/2/3/4+", "words/q"], ("domain",))
    for domain, row in stats.get("domains", {}).items():
        splits = {s: sum(n for k, n in row["splits"].items() if k.startswith(f"{s}/"))
                  for s in ("train", "val", "test")}
        hops = row["hops"]
        hop_text = "/".join(str(hops.get(str(h), 0)) for h in (1, 2, 3)) + \
            f"/{sum(n for h, n in hops.items() if int(h) >= 4)}"
        table.add_row(domain, f"{row['1-2']:,}", f"{row['3+']:,}", f"{row['total']:,}", f"{splits['train']:,}",
                      f"{splits['val']:,}", f"{splits['test']:,}", hop_text, f"{row['mean_question_words']:.1f}")
    console().print(table)


def print_qa_report(report: Any) -> None:
    """The QA quality report (``pipelines.qa.report.QAReport``): one row per domain and hop count, then the
    sampled questions of each domain and bucket."""
    table = _table("omne QA quality", ["domain", "hops", "n", "words med", "p95", "max", "depth max", "depth>=2",
                                       "leaks", "form problems", "guessable"], ("domain", "hops"))
    for domain in report.domains:
        for r in domain.rows:
            table.add_row(r.domain, r.hops, f"{r.questions:,}", f"{r.words_median:g}", f"{r.words_p95:g}",
                          str(r.words_max), str(r.depth_max), f"{r.depth_ge2_share:.1%}", str(r.leaks),
                          str(r.form_problems), f"{r.guessable_share:.1%}", end_section=r.hops == "all")
    out = console()
    out.print(table)
    out.print(f"guessable: {report.guessable_rule}", highlight=False)
    for domain in report.domains:
        for bucket, samples in domain.samples.items():
            if not samples:
                continue
            shown = _table(f"{domain.domain}, {bucket}-hop: {len(samples)} sampled questions",
                           ["hops", "question", "answer"], ("question", "answer"))
            for sample in samples:
                shown.add_row(str(sample.hops), sample.question, sample.answer)
            out.print(shown)


def print_eval_table(runs: list) -> None:
    """One row per run and group: EM and its Wilson 95% interval, normalised EM, F1, Hit@1, tool calls and tokens
    per question."""
    table = _table("omne evaluation", ["run", "group", "n", "EM", "EM 95% CI", "norm EM", "F1", "Hit@1", "answered",
                                       "calls/q", "gen tok/q"], ("run", "group"))
    for metrics in runs:
        groups = [("all", metrics.overall), *((f"bucket {k}", v) for k, v in metrics.by_bucket.items())]
        for label, scores in groups:
            table.add_row(metrics.run, label, str(scores.n), f"{scores.em:.3f}",
                          f"{scores.em_low:.2f}-{scores.em_high:.2f}", f"{scores.norm_em:.3f}",
                          f"{scores.f1:.3f}", f"{scores.hit1:.3f}", f"{scores.answered:.2f}",
                          f"{metrics.efficiency.kg_calls_per_sample:.2f}" if label == "all" else "",
                          f"{metrics.efficiency.generated_tokens_mean:.0f}" if label == "all" else "")
    out = console()
    out.print(table)
    for metrics in runs:  # what the agent did with the tools (docs/evaluation.md, "Behaviour")
        b = metrics.behaviour
        out.print(f"{metrics.run}: answers the tools showed {b.answer_from_tools_share:.0%} of {b.answered_episodes} "
                  f"answered ({b.answer_in_last_thought_share:.0%} as the last thought wrote them) · calls naming a "
                  f"missing entity {b.missing_entity_calls_per_sample:.2f}/q "
                  f"({b.missing_entity_call_share:.0%} of calls) · ended by a repeated call "
                  f"{b.repeated_call_finish_share:.0%}"
                  + (f" · unshown answers sent back {b.unshown_answer_notes}, then shown {b.unshown_answer_fixed}"
                     if b.unshown_answer_notes else ""), highlight=False)
    for metrics in runs:  # where each run's generating time went (a local backend only)
        if metrics.efficiency.generation is not None:
            out.print(f"{metrics.run}: {metrics.efficiency.generation.line()}", highlight=False)


def print_comparison(comparison: Any) -> None:
    """`omne eval compare`: one row per group of shared questions (``pipelines.eval.compare.Comparison``), then
    the questions left out and the verdict."""
    c = comparison
    table = _table(f"omne eval compare: A = {c.run_a}, B = {c.run_b} (exact McNemar, two-sided)",
                   ["group", "n", "both right", "only A", "only B", "both wrong", "EM A", "EM B", "p"], ("group",))
    for label, s in [("all", c.overall), *((f"bucket {k}", v) for k, v in c.by_bucket.items())]:
        table.add_row(label, str(s.n), str(s.both), str(s.only_a), str(s.only_b), str(s.neither), f"{s.em_a:.3f}",
                      f"{s.em_b:.3f}", f"{s.p_value:.3g}")
    out = console()
    out.print(table)
    if c.only_in_a or c.only_in_b:
        out.print(f"left out: {c.only_in_a} questions only in A, {c.only_in_b} only in B", highlight=False)
    out.print(c.verdict, highlight=False)


def print_sweep_table(points: list[Any]) -> None:
    """`omne sft sweep`'s table: one row per think weight (``pipelines.train.sweep``'s points), EM overall and per
    bucket, F1 and the generated tokens per question."""
    buckets = sorted({b for p in points for b in p.em_by_bucket})
    table = _table("think-weight sweep", ["think weight", "steps", "final loss", "EM", *(f"EM {b}" for b in buckets),
                                          "F1", "gen tok/q"], left=())
    for p in points:
        table.add_row(f"{p.think_weight:g}", str(p.steps), f"{p.final_loss:.4f}" if p.final_loss is not None else "-",
                      f"{p.em:.3f}", *(f"{p.em_by_bucket.get(b, 0.0):.3f}" for b in buckets), f"{p.f1:.3f}",
                      f"{p.generated_tokens_mean:.0f}")
    console().print(table)


def print_stage_table(times: StageTimes) -> None:
    """Wall time, share of the run and peak resident memory of each stage of one `omne run`, and where it ran
    (``main``: the `omne run` process, its high-water mark reset at the stage's start; ``child``: a process of
    its own, whose peak it is)."""
    total = times.total()
    table = _table("omne run: wall time and peak memory per stage", ["stage", "s", "share", "peak RSS GiB", "process"],
                   ("stage", "process"))
    for stage, seconds in times.seconds.items():
        peak = times.peak_rss_mb.get(stage)
        table.add_row(stage, f"{seconds:.1f}", f"{seconds / total:.0%}" if total else "",
                      f"{peak / 1024:.2f}" if peak is not None else "", times.process(stage))
    overall = max(times.peak_rss_mb.values(), default=None)
    table.add_row("total", f"{total:.1f}", "100%", f"{overall / 1024:.2f}" if overall is not None else "", "")
    console().print(table)


def print_memory_estimates(estimates: list, *, model: str, device: str, profile: str) -> None:
    """One row per stage: the estimated bytes of each part and the total, in GiB (``pipelines.train.memory``)."""
    parts = list(dict.fromkeys(part for estimate in estimates for part in estimate.parts))
    table = _table(f"estimated peak memory per {device} device, profile {profile}, model {model} (GiB)",
                   ["stage", *parts, "total", "assuming"], ("stage", "assuming"))
    for estimate in estimates:
        cells = [f"{estimate.parts[p] / (1 << 30):.2f}" if p in estimate.parts else "" for p in parts]
        table.add_row(estimate.stage, *cells, f"{estimate.total / (1 << 30):.2f}", "; ".join(estimate.notes))
    console().print(table)
