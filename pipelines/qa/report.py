"""The QA quality report (docs/qa.md, "Quality report"): how the built dataset's questions read, per domain and
hop count, with a sample of questions to read.

One function, :func:`qa_quality_report`, computes it from ``artifacts/qa/dataset/qa.parquet``; ``omne qa report``
prints it, the Dagster asset ``qa_dataset`` shows it as metadata. Every figure is recounted from the question texts
with the same rules the build applies (``pipelines.qa.validate`` and ``pipelines.text.names``), so a rule that let
something through shows up here as a count that is not zero.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from pipelines.config import NameRules, Params
from pipelines.errors import ArtifactMissingError, ConfigError
from pipelines.layout import qa_dir
from pipelines.manifest import read_manifest
from pipelines.qa.build import read_generic_words, read_qa_dataset, relation_graph
from pipelines.qa.validate import form_problems, leaks, relative_depth
from pipelines.text.names import normalise_text

GUESSABLE_RULE = (
    "a question is guessable from the question alone when its answer is the most frequent answer among the other "
    "questions of its domain that end with the same relation label (path_edges[-1].keywords) and ask for the same "
    "type (the answer entity's type noun): a majority-class guess that needs no graph (leave-one-out: a question "
    "alone in its group, or whose group's other questions have no single most frequent answer, is not guessable)"
)
ALL_HOPS = "all"


class HopQuality(BaseModel):
    """The figures of one domain's questions with one hop count (``hops`` "1", "2", ..., or "all")."""

    domain: str
    hops: str
    questions: int
    words_median: float
    words_p95: float  # numpy's linear percentile of the words per question
    words_max: int
    depth_max: int  # relative-clause depth (validate.relative_depth), the largest
    depth_ge2: int  # questions with a clause inside a clause
    depth_ge2_share: float
    leaks: int  # questions that give away a path entity other than the start (validate.leaks, qa.name_rules)
    form_problems: int  # questions with at least one readable-form problem (validate.form_problems)
    guessable: int  # questions whose answer the majority-class guess gets (GUESSABLE_RULE)
    guessable_share: float


class QASample(BaseModel):
    id: str
    bucket: str
    hops: int
    split: str | None
    question: str
    answer: str


class DomainQuality(BaseModel):
    domain: str
    rows: list[HopQuality]  # one per hop count, then the "all" row
    samples: dict[str, list[QASample]]  # by bucket ("1-2", "3+")

    @property
    def overall(self) -> HopQuality:
        return self.rows[-1]


class QAReport(BaseModel):
    dataset: str  # the dataset folder, relative to the project root
    questions: int
    max_question_words: int
    samples_per_bucket: int
    random_seed: int  # of the samples (params.qa.random_seed)
    guessable_rule: str = GUESSABLE_RULE
    domains: list[DomainQuality] = Field(default_factory=list)

    def rows(self) -> list[HopQuality]:
        return [row for domain in self.domains for row in domain.rows]


def question_words(question: str) -> int:
    """Words of a question as every QA figure counts them (whitespace-separated, as ``dataset_stats`` does)."""
    return len(question.split())


def guessable_flags(answers: Sequence[str], groups: Sequence[Any]) -> list[bool]:
    """Per question: whether the single most frequent answer of the *other* questions of its group is its answer
    (normalised text; no other question, or a tie for the most frequent: no guess)."""
    counts: dict[Any, Counter[str]] = {}
    keys = [normalise_text(a) for a in answers]
    for key, group in zip(keys, groups, strict=True):
        counts.setdefault(group, Counter())[key] += 1
    flags = []
    for key, group in zip(keys, groups, strict=True):
        others = counts[group].copy()
        others[key] -= 1
        best = max(others.values(), default=0)
        modes = [a for a, n in others.items() if n == best]
        flags.append(best > 0 and modes == [key])
    return flags


def _round(value: float) -> float:
    return round(float(value), 4)


def hop_quality(domain: str, hops: str, records: list[dict[str, Any]]) -> HopQuality:
    """The figures of ``records`` (each with words, depth, leaked, form, guessable)."""
    words = np.array([r["words"] for r in records], dtype=float)
    n = len(records)
    deep = sum(r["depth"] >= 2 for r in records)
    guessed = sum(r["guessable"] for r in records)
    return HopQuality(
        domain=domain, hops=hops, questions=n,
        words_median=_round(np.median(words)) if n else 0.0,
        words_p95=round(float(np.percentile(words, 95)), 1) if n else 0.0,
        words_max=int(words.max()) if n else 0,
        depth_max=max((r["depth"] for r in records), default=0), depth_ge2=deep,
        depth_ge2_share=_round(deep / n) if n else 0.0,
        leaks=sum(r["leaked"] for r in records), form_problems=sum(r["form"] for r in records),
        guessable=guessed, guessable_share=_round(guessed / n) if n else 0.0,
    )


def sample_questions(rows: list[dict[str, Any]], n: int, seed: int, domain: str, bucket: str) -> list[QASample]:
    """``n`` questions of a bucket, the same ones for the same dataset and seed (sorted by hops, then id)."""
    ordered = sorted(rows, key=lambda r: r["id"])
    chosen = random.Random(f"{seed}/{domain}/{bucket}").sample(ordered, min(n, len(ordered)))
    return [QASample(id=r["id"], bucket=r["bucket"], hops=r["hops"], split=r.get("split"), question=r["question"],
                     answer=r["answer"]) for r in sorted(chosen, key=lambda r: (r["hops"], r["id"]))]


def domain_quality(domain: str, rows: list[dict[str, Any]], *, generic: frozenset[str], asked: Mapping[str, str],
                   max_words: int | None, samples: int, seed: int, name_rules: NameRules = "strict") -> DomainQuality:
    """The report of one domain's dataset rows (dicts with the QA table's columns); ``asked`` maps an answer
    name to the type noun its questions ask for ("" where unknown)."""
    groups = [((r["path_edges"] or [{}])[-1].get("keywords", ""), asked.get(r["answer"], "")) for r in rows]
    flags = guessable_flags([r["answer"] for r in rows], groups)
    records = []
    for row, guessable in zip(rows, flags, strict=True):
        names = [*row["path"], row["answer"]]
        records.append({"hops": int(row["hops"]), "words": question_words(row["question"]),
                        "depth": relative_depth(row["question"], names),
                        "leaked": bool(leaks(row["question"], row["path"], row["answer"], generic, name_rules)),
                        "form": bool(form_problems(row["question"], names, max_words)), "guessable": guessable})
    table = [hop_quality(domain, str(h), [r for r in records if r["hops"] == h])
             for h in sorted({r["hops"] for r in records})]
    table.append(hop_quality(domain, ALL_HOPS, records))
    by_bucket = {bucket: [r for r in rows if r["bucket"] == bucket] for bucket in ("1-2", "3+")}
    return DomainQuality(domain=domain, rows=table,
                         samples={b: sample_questions(mine, samples, seed, domain, b) for b, mine in by_bucket.items()})


def asked_types(domain: str, params: Params) -> dict[str, str]:
    """Answer name -> the type noun a question about it asks for ("which <noun>"), from the domain's KG and
    phrases; empty when the KG is not built (the guess then groups by the last relation alone)."""

    try:
        graph = relation_graph(domain, params)
    except (ArtifactMissingError, FileNotFoundError):
        return {}
    return {name: graph.phrasebook.noun(node) for node, name in enumerate(graph.names)}


def qa_quality_report(params: Params, domains: Sequence[str] | None = None, *, samples: int = 10) -> QAReport:
    """The quality report of the built QA dataset, per domain (all of the dataset's, or ``domains``)."""

    folder = qa_dir(params.artifacts_dir, "dataset")
    table = read_qa_dataset(params)
    manifest = read_manifest(folder)
    present = list(dict.fromkeys(table["domain"].to_list()))
    order = [d for d in (manifest.params.get("domains", []) if manifest else []) if d in present]
    order += [d for d in present if d not in order]
    if domains:
        unknown = [d for d in domains if d not in order]
        if unknown:
            raise ConfigError(f"{', '.join(repr(d) for d in unknown)}: not in the QA dataset "
                              f"(its domains: {', '.join(order) or 'none'})")
        order = [d for d in order if d in domains]
    generic = read_generic_words(params)
    rows = table.to_dicts()
    where = folder.relative_to(params.root) if folder.is_relative_to(params.root) else folder
    report = QAReport(dataset=str(where), questions=0, max_question_words=params.qa.max_question_words,
                      samples_per_bucket=samples, random_seed=params.qa.random_seed)
    for domain in order:
        mine = [r for r in rows if r["domain"] == domain]
        report.domains.append(domain_quality(domain, mine, generic=generic.get(domain, frozenset()),
                                             asked=asked_types(domain, params), max_words=params.qa.max_question_words,
                                             samples=samples, seed=params.qa.random_seed,
                                             name_rules=params.qa.name_rules))
        report.questions += len(mine)
    return report


def report_markdown(report: QAReport, *, with_samples: bool = False) -> str:
    """The report as a Markdown table (Dagster metadata), optionally followed by the sampled questions."""
    lines = ["| domain | hops | questions | words median | p95 | max | depth max | depth>=2 | leaks | form problems "
             "| guessable |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report.rows():
        lines.append(f"| {r.domain} | {r.hops} | {r.questions} | {r.words_median:g} | {r.words_p95:g} | {r.words_max} "
                     f"| {r.depth_max} | {r.depth_ge2_share:.1%} | {r.leaks} | {r.form_problems} "
                     f"| {r.guessable_share:.1%} |")
    lines += ["", f"Guessable: {report.guessable_rule}."]
    if with_samples:
        for domain in report.domains:
            for bucket, chosen in domain.samples.items():
                lines += ["", f"**{domain.domain}, {bucket}-hop**", ""]
                lines += [f"- {s.question} → {s.answer}" for s in chosen]
    return "\n".join(lines)
