"""Evaluation metrics (docs/evaluation.md, "Metrics"): answer quality, efficiency and behaviour of agent trajectories.

Plain functions over :class:`~pipelines.agent.trajectory.Trajectory` records, so that the evaluation
runner, RL reward code and notebooks all compute the same numbers. Three families (answer matching is in
:mod:`pipelines.eval.answers`, triples in :mod:`pipelines.eval.triples`, behaviour in
:mod:`pipelines.eval.behaviour`):

* answer quality per question (:func:`score_trajectories`) and per group (:func:`aggregate`,
  :func:`group_scores`): EM after whitespace strip (the Omne-R1 paper's metric), SQuAD-normalised EM,
  answer-set F1 and Hit@1 on predictions split into answer sets (:func:`answer_set`);
* KG-R1's efficiency protocol (:func:`efficiency`): tokens, latency, throughput, KG calls;
* behaviour (:func:`behaviour`): format errors, repeated / invalid calls, tool distributions,
  retrieval rate and EoG's exploration metrics (gold-path triple coverage and exploration
  efficiency, from the triples the model names in its ``<think>`` text).

N-run union (KG-R1's "beam" protocol): when several trajectories share a ``qa_id`` (different
``sample`` values) the question is scored once, on the union of the samples' answer sets (F1), with
EM / normalised EM true when any sample is correct and Hit@1 true when any sample's *first* answer
is a gold answer — each run's top answer is a top-1 candidate of the union, which is what lets the
N-run protocol raise Hit@1 as well as F1.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from pipelines.agent.trajectory import Trajectory
from pipelines.eval.answers import Resolver, answer_set, exact_match, hit_at_1, normalise_answer, normalised_em, set_f1
from pipelines.eval.behaviour import behaviour
from pipelines.eval.schema import HOP_GROUPS, SCORE_FIELDS, Efficiency, EvalMetrics, Scores, hops_key
from pipelines.eval.stats import wilson_interval
from pipelines.eval.triples import Triple
from pipelines.qa.models import GoldPath

GroupKey = Literal["bucket", "hops", "domain"]

__all__ = [
    "QuestionScore", "aggregate", "efficiency", "evaluate_trajectories", "group_scores", "repeats_summary",
    "score_trajectories",
]


# ----- per-question scores -----------------------------------------------------------------------------
class QuestionScore(BaseModel):
    """One question's scores (over its N samples when the N-run union is used)."""

    model_config = ConfigDict(extra="forbid")
    qa_id: str
    domain: str
    bucket: str | None = None
    hops: int | None = None
    em: bool = False
    norm_em: bool = False
    f1: float = 0.0
    hit1: bool = False
    answered: bool = False  # some sample produced an <answer>
    samples: int = 1  # trajectories merged into this score
    predicted: list[str] = Field(default_factory=list)  # the (union) answer set, top answers first
    gold: list[str] = Field(default_factory=list)  # the normalised (resolved) gold set


def _gold_set(golds: Sequence[str], resolve: Resolver | None) -> list[str]:
    out: list[str] = []
    for gold in golds:
        canonical = resolve(gold) if resolve is not None else None
        value = normalise_answer(canonical if canonical is not None else gold)
        if value and value not in out:
            out.append(value)
    return out


def score_trajectories(trajs: Sequence[Trajectory], resolve: Resolver | None = None) -> list[QuestionScore]:
    """Score each question once; samples of the same ``qa_id`` are merged by the N-run union.

    Union protocol (KG-R1's "beam"): F1 on the union of the samples' answer sets (in sample order),
    EM / normalised EM true if any sample is correct, Hit@1 true if any sample's first answer is gold.
    Questions keep the order in which they first appear.
    """
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        groups[t.qa_id].append(t)
    out: list[QuestionScore] = []
    for qa, members in groups.items():
        members = sorted(members, key=lambda t: t.sample)
        first = members[0]
        gold = _gold_set(first.gold_answers, resolve)
        union: list[str] = []
        hit = False
        for t in members:
            answers = answer_set(t.answer, resolve)
            hit = hit or hit_at_1(answers, gold)
            union.extend(a for a in answers if a not in union)
        out.append(QuestionScore(
            qa_id=qa, domain=first.domain, bucket=first.bucket, hops=first.hops,
            em=any(exact_match(t.answer, t.gold_answers) for t in members),
            norm_em=any(normalised_em(t.answer, t.gold_answers) for t in members),
            f1=set_f1(union, gold), hit1=hit,
            answered=any(t.answer is not None for t in members),
            samples=len(members), predicted=union, gold=gold,
        ))
    return out


def aggregate(scores: Sequence[QuestionScore]) -> Scores:
    """Means over questions (every question weighs the same, whatever its number of samples), and the Wilson
    95% interval of EM over those questions (a question is right when any of its samples is)."""
    if not scores:
        return Scores()
    correct = sum(s.em for s in scores)
    low, high = wilson_interval(correct, len(scores))
    return Scores(
        n=len(scores),
        em=correct / len(scores), em_low=low, em_high=high,
        norm_em=float(np.mean([s.norm_em for s in scores])),
        f1=float(np.mean([s.f1 for s in scores])),
        hit1=float(np.mean([s.hit1 for s in scores])),
        answered=float(np.mean([s.answered for s in scores])),
    )


_HOPS_ORDER = {group: rank for rank, group in enumerate(HOP_GROUPS, start=1)}


def group_scores(scores: Sequence[QuestionScore], key: GroupKey) -> dict[str, Scores]:
    """Scores per bucket, hop group or domain; questions without that key (external sets) are left out."""
    groups: dict[str, list[QuestionScore]] = defaultdict(list)
    for s in scores:
        value = hops_key(s.hops) if key == "hops" else getattr(s, key)
        if value is not None:
            groups[str(value)].append(s)
    if key == "hops":
        names = sorted(groups, key=lambda k: (_HOPS_ORDER.get(k, 0), k))
    else:
        names = sorted(groups)
    return {name: aggregate(groups[name]) for name in names}


# ----- efficiency -----------------------------------------------------------------------------------------
def _sd(values: Sequence[float]) -> float:
    """Sample standard deviation (ddof=1): these are samples of a run / of seeds; 0 below two values."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def _kg_calls(t: Trajectory) -> int:
    # a call that could not be parsed never reached the KG; a parsed one did, even if it failed there
    return sum(1 for c in t.tool_calls if c.name is not None)


def efficiency(trajs: Sequence[Trajectory], wall_time_s: float) -> Efficiency:
    """KG-R1's efficiency figures: per-episode means, latency spread, and batched throughput.

    Per-turn latency pools every turn of the run (falling back to episode latency / rounds when the
    backend did not time turns); throughput divides by the run's wall time, not by summed latencies,
    because batching overlaps episodes.
    """
    if not trajs:
        return Efficiency()
    latencies = [t.latency_s for t in trajs]
    turns = [x for t in trajs for x in t.turn_latency_s]
    if turns:
        per_turn = float(np.mean(turns))
    else:
        rounds = sum(t.rounds for t in trajs)
        per_turn = sum(latencies) / rounds if rounds else 0.0
    generated = sum(t.generated_tokens for t in trajs)
    wall = wall_time_s if wall_time_s > 0 else 0.0
    return Efficiency(
        generated_tokens_mean=generated / len(trajs),
        total_tokens_mean=float(np.mean([t.generated_tokens + t.prompt_tokens for t in trajs])),
        latency_mean_s=float(np.mean(latencies)),
        latency_sd_s=_sd(latencies),
        latency_per_turn_mean_s=per_turn,
        turns_mean=float(np.mean([t.rounds for t in trajs])),
        samples_per_s=len(trajs) / wall if wall else 0.0,
        generated_tokens_per_s=generated / wall if wall else 0.0,
        kg_calls_per_sample=float(np.mean([_kg_calls(t) for t in trajs])),
    )


# ----- repeats and the whole report ------------------------------------------------------------------------


def repeats_summary(runs: Sequence[EvalMetrics | Scores]) -> dict[str, dict[str, float]]:
    """Mean and sample sd (ddof=1; 0 for one run) of each metric over repeats with different seeds.

    Given EvalMetrics, the overall scores (``em``, ``f1``, ...) and the efficiency figures (prefixed
    ``efficiency.``) are summarised; given Scores, only the scores.
    """
    if not runs:
        return {}
    columns: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        scores = run.overall if isinstance(run, EvalMetrics) else run
        for name in SCORE_FIELDS:
            columns[name].append(float(getattr(scores, name)))
        if isinstance(run, EvalMetrics):
            for name, value in run.efficiency.model_dump(exclude={"generation"}).items():  # the figures per repeat
                columns[f"efficiency.{name}"].append(float(value))
    return {name: {"mean": float(np.mean(values)), "sd": _sd(values)} for name, values in columns.items()}


def evaluate_trajectories(trajs: Sequence[Trajectory], *, run: str, model: str, protocol: str, split: str,
                          baseline: str | None = None, wall_time_s: float, resolve: Resolver | None = None,
                          gold_paths: Mapping[str, GoldPath] | None = None,
                          kg_triples: Mapping[str, Iterable[Triple]] | None = None) -> EvalMetrics:
    """Everything metrics.json holds for one run. Fills each trajectory's ``correct`` (its own EM) in
    place, as the Trajectory contract says evaluation does; questions are scored with the N-run union."""
    for t in trajs:
        t.correct = exact_match(t.answer, t.gold_answers)
    scores = score_trajectories(trajs, resolve)
    return EvalMetrics(
        run=run, model=model, protocol=protocol, baseline=baseline, split=split,
        overall=aggregate(scores),
        by_bucket=group_scores(scores, "bucket"),
        by_hops=group_scores(scores, "hops"),
        by_domain=group_scores(scores, "domain"),
        domains=sorted({t.domain for t in trajs if t.domain}),
        efficiency=efficiency(trajs, wall_time_s),
        behaviour=behaviour(trajs, gold_paths, kg_triples),
        samples=max((t.sample for t in trajs), default=0) + 1,
    )

