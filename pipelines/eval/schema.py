"""What an evaluation report holds (metrics.json): scores per bucket, hop count and domain, plus the
efficiency and behaviour figures of KG-R1's protocol and EoG's exploration metrics.

The names of the scores and of the groups they are reported by are defined here once: metrics, the
report, its plots and its flat summary all read them from this module, so they cannot drift apart.
"""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel, Field, model_validator

from pipelines.eval.stats import wilson_interval
from pipelines.llm.generation import GenerationWork
from pipelines.qa.models import Bucket


class Scores(BaseModel):
    """Answer quality over a group of questions (means over questions, in [0, 1]).

    ``n`` is the number of questions: a question answered by several samples (eval.samples > 1) counts once,
    scored by the N-run union, so ``em_low``/``em_high`` (the Wilson 95% interval of EM, of ``round(em * n)``
    right out of ``n``) are about questions, not episodes. Scores read from a report written before the
    interval existed get it computed from ``n`` and ``em``.
    """

    n: int = 0
    em: float = 0.0  # exact match after whitespace strip (the Omne-R1 paper's metric)
    em_low: float = 0.0  # Wilson 95% interval of em (0-1 when n is 0)
    em_high: float = 1.0
    norm_em: float = 0.0  # exact match after SQuAD-style normalisation (case, punctuation, articles)
    f1: float = 0.0  # answer-set F1 (answers split, normalised, deduped, resolved to KG entities)
    hit1: float = 0.0  # the first predicted answer is a gold answer
    answered: float = 0.0  # share of episodes that produced an <answer>

    @model_validator(mode="before")
    @classmethod
    def _interval(cls, data: Any) -> Any:
        """Fill the EM interval when it is not given (old metrics.json files, scores built by hand)."""
        if isinstance(data, dict) and not {"em_low", "em_high"} <= data.keys():
            n, em = int(data.get("n", 0) or 0), float(data.get("em", 0.0) or 0.0)
            low, high = wilson_interval(min(n, max(0, round(em * n))), n)
            data = {"em_low": low, "em_high": high, **data}
        return data


INTERVAL_FIELDS: tuple[str, ...] = ("em_low", "em_high")  # the bounds of EM's interval, reported beside it
SCORE_FIELDS: tuple[str, ...] = tuple(name for name in Scores.model_fields
                                      if name != "n" and name not in INTERVAL_FIELDS)  # em, norm_em, f1, ...
SCORE_LABELS: dict[str, str] = {"em": "EM", "norm_em": "norm. EM", "f1": "F1", "hit1": "Hit@1", "answered": "answered"}
HEADLINE_FIELDS: tuple[str, ...] = ("em", "f1", "hit1")  # the numbers reported per group (flat metrics, plots)

BUCKETS: tuple[str, ...] = get_args(Bucket)  # the QA pairs' hop buckets ("1-2", "3+"), in report order
HOP_GROUPS: tuple[str, ...] = ("1", "2", "3", ">=4")  # by_hops keys, in report order; the last one is open-ended


def hops_key(hops: int | None) -> str | None:
    """The report's hop group of a hop count (None when the question has none, as in external sets)."""
    if hops is None:
        return None
    return HOP_GROUPS[-1] if hops >= len(HOP_GROUPS) else str(hops)


class Efficiency(BaseModel):
    """KG-R1's efficiency protocol: token counts with one fixed tokenizer, latency, throughput."""

    generated_tokens_mean: float = 0.0  # completion tokens per question, summed over turns
    total_tokens_mean: float = 0.0  # prompt + completion tokens per question, summed over turns
    latency_mean_s: float = 0.0
    latency_sd_s: float = 0.0
    latency_per_turn_mean_s: float = 0.0
    turns_mean: float = 0.0
    samples_per_s: float = 0.0  # batched throughput of the run
    generated_tokens_per_s: float = 0.0
    kg_calls_per_sample: float = 0.0
    generation: GenerationWork | None = None  # a local backend's prefill and decoding (None: an endpoint, a script)


class Behaviour(BaseModel):
    format_errors_per_sample: float = 0.0
    format_error_types: dict[str, int] = Field(default_factory=dict)
    repeated_tool_calls_per_sample: float = 0.0  # same name and arguments as an earlier call
    invalid_tool_calls_per_sample: float = 0.0  # calls that came back with an error
    unknown_graph_calls_per_sample: float = 0.0  # calls naming a graph_type the tools do not know
    other_graph_calls_per_sample: float = 0.0  # calls naming a known graph other than the question's
    unknown_graph_call_share: float = 0.0  # unknown-graph calls / all calls
    first_tool: dict[str, int] = Field(default_factory=dict)  # name of the first call -> episodes
    tool_sequences: dict[str, int] = Field(default_factory=dict)  # "entity_matcher>node_info" -> episodes (top 20)
    tool_calls_histogram: dict[str, int] = Field(default_factory=dict)  # calls per episode -> episodes
    finish: dict[str, int] = Field(default_factory=dict)  # answer / max_rounds / max_tokens / no_action / repeated_call
    retrieval_rate: float = 0.0  # share of episodes where a gold answer entity appears in a tool response
    # the graphs users bring (LightRAG's upper-case names): does the agent answer with a name the tools showed, name
    # entities that exist, and stop retrying a failed call?
    answered_episodes: int = 0  # episodes with a non-empty answer
    answer_from_tools_share: float = 0.0  # of the answered: the answer, exactly as written, in a successful response
    answer_in_last_thought_share: float = 0.0  # of the answered: the answer, as written, in the thought before it
    missing_entity_calls_per_sample: float = 0.0  # calls that named an entity not in the graph (entity_not_found)
    missing_entity_call_share: float = 0.0  # those calls / all calls
    repeated_call_finish_share: float = 0.0  # episodes ended for repeating the same call (finish repeated_call)
    # episodes whose first answer no tool had shown, sent back once (agent.unshown_answer_note), and of those the
    # ones whose final answer the tools showed
    unshown_answer_notes: int = 0
    unshown_answer_fixed: int = 0
    gold_triple_coverage: float = 0.0  # EoG: share of validated gold-path triples named in the think text
    exploration_efficiency: float = 0.0  # EoG: gold triples named in think / all KG triples named in think
    exploration_episodes: int = 0  # episodes with validated gold triples (0: exploration metrics not computed)
    # how each episode ended (needs validated gold paths; OUTCOMES in behaviour.py): correct / stopped_on_path /
    # misspelled_answer / start_not_reached / no_answer / wrong_answer -> episodes
    outcomes: dict[str, int] = Field(default_factory=dict)


class EvalMetrics(BaseModel):
    run: str
    model: str
    protocol: str
    baseline: str | None = None
    split: str
    overall: Scores
    by_bucket: dict[str, Scores] = Field(default_factory=dict)
    by_hops: dict[str, Scores] = Field(default_factory=dict)  # HOP_GROUPS
    by_domain: dict[str, Scores] = Field(default_factory=dict)
    domains: list[str] = Field(default_factory=list)  # the domains of the questions evaluated (eval.domains selects)
    efficiency: Efficiency = Efficiency()
    behaviour: Behaviour = Behaviour()
    samples: int = 1  # N independent rollouts per question (N-run union when > 1)
    judge: dict[str, float] | None = None  # eval.judge: {"accuracy", "asked", "failed"} of the LLM judge
    repeats: dict[str, dict[str, float]] = Field(default_factory=dict)  # metric -> {"mean": .., "sd": ..} over seeds
