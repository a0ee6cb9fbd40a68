"""Evaluation metrics (docs/evaluation.md, "Metrics"): answer quality, efficiency and behaviour of agent trajectories.

Plain functions over :class:`~pipelines.agent.trajectory.Trajectory` records, so that the evaluation
runner, RL reward code and notebooks all compute the same numbers. Three families:

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

import ast
import json
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from difflib import SequenceMatcher
from functools import lru_cache
from itertools import combinations
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from pipelines.agent.trajectory import Trajectory
from pipelines.eval.schema import HOP_GROUPS, SCORE_FIELDS, Behaviour, Efficiency, EvalMetrics, Scores, hops_key
from pipelines.eval.stats import wilson_interval
from pipelines.kg.model import TYPED_NAME, normalise_key
from pipelines.qa.models import GoldPath
from pipelines.text.names import mentions

Resolver = Callable[[str], str | None]
Triple = tuple[str, str, str]
GroupKey = Literal["bucket", "hops", "domain"]

__all__ = [
    "OUTCOMES", "QuestionScore", "Resolver", "Triple", "aggregate", "answer_set", "behaviour", "efficiency",
    "episode_outcome", "evaluate_trajectories", "exact_match", "exploration_scores", "gold_triples", "group_scores",
    "hit_at_1", "normalise_answer", "normalised_em", "parse_triples", "repeats_summary",
    "score_trajectories", "set_f1", "triple_named",
]

# ----- answers ---------------------------------------------------------------------------------------
_PUNCT = re.compile(r"[^\w\s]|_")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_SPACES = re.compile(r"\s+")
# a list separator: newline, ";", "|", a comma that is not inside a number ("1,000"), or " and "
_SEPARATORS = re.compile(r"(\n|;|\||(?<!\d),|,(?!\d)|\s+and\s+)")
_LIST_MARKER = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_QUOTES = "\"'`“”‘’«»"
_MAX_SPAN = 6  # pieces a resolver may glue back together into one entity ("Paris, Texas")


def exact_match(prediction: str | None, golds: Sequence[str]) -> bool:
    """The Omne-R1 paper's EM: the prediction equals a gold answer after whitespace strip (nothing else)."""
    if prediction is None:
        return False
    pred = prediction.strip()
    return any(pred == gold.strip() for gold in golds)


def normalise_answer(text: str | None) -> str:
    """SQuAD-style normal form (NFKC, case-folded, punctuation and articles dropped, spaces collapsed).

    Forgives surface differences that say nothing about correctness ("The Eiffel Tower." vs
    "eiffel tower"), so normalised EM and set F1 measure the answer, not its typography.
    """
    if not text:
        return ""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _ARTICLES.sub(" ", _PUNCT.sub("", text))
    return _SPACES.sub(" ", text).strip()


def normalised_em(prediction: str | None, golds: Sequence[str]) -> bool:
    """EM after :func:`normalise_answer` on both sides (an empty normal form never matches)."""
    pred = normalise_answer(prediction)
    return bool(pred) and any(pred == normalise_answer(gold) for gold in golds)


def _clean_item(item: str) -> str:
    item = _LIST_MARKER.sub("", item.strip())
    return item.strip().strip(_QUOTES).strip()


def _list_items(text: str) -> list[str] | None:
    """Items of a JSON (or Python-literal) list answer like ``["a", "b"]``; None when it is not one."""
    if not (text.startswith("[") and text.endswith("]")):
        return None
    for loader in (json.loads, ast.literal_eval):
        try:
            value = loader(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, list | tuple):
            out: list[str] = []
            stack = list(reversed(value))
            while stack:  # flatten nested lists, keep order
                item = stack.pop()
                if isinstance(item, list | tuple):
                    stack.extend(reversed(item))
                elif item is not None and str(item).strip():
                    out.append(str(item))
            return out
    return None


def _segment(text: str, resolve: Resolver | None) -> list[str]:
    """Split ``text`` at list separators, but keep together the longest run of pieces that the
    resolver recognises as one entity (so "Paris, Texas" stays whole when it is a KG entity)."""
    parts = _SEPARATORS.split(text)
    pieces, seps = parts[0::2], parts[1::2]
    atoms: list[str] = []
    i = 0
    while i < len(pieces):
        taken = False
        if resolve is not None:
            last = min(len(pieces) - 1, i + _MAX_SPAN - 1)
            for j in range(last, i, -1):  # longest span first
                if any(s == "\n" for s in seps[i:j]):
                    continue  # an entity never spans lines
                span = pieces[i] + "".join(seps[k] + pieces[k + 1] for k in range(i, j))
                span = _clean_item(span)
                if span and resolve(span) is not None:
                    atoms.append(span)
                    i, taken = j + 1, True
                    break
        if not taken:
            atoms.append(pieces[i])
            i += 1
    return atoms


def answer_set(prediction: str | None, resolve: Resolver | None = None) -> list[str]:
    """The prediction as an ordered, de-duplicated list of normalised answers (first = top answer).

    Accepts a JSON/Python list, or answers separated by newlines, ";", "|", "," or " and ". With a
    resolver (name -> canonical KG entity name, or None) the whole string and then the longest runs
    of pieces are tried as entity names first, so an entity whose name holds a comma is not split;
    resolved items become their canonical entity, the rest stay normalised text.
    """
    if prediction is None or not prediction.strip():
        return []
    text = prediction.strip()
    items = _list_items(text)
    if items is None:
        whole = _clean_item(text)
        if resolve is not None and whole and resolve(whole) is not None:
            items = [whole]
        else:
            items = _segment(text, resolve)
    out: list[str] = []
    seen: set[str] = set()
    for item in items:
        item = _clean_item(item)
        if not item:
            continue
        canonical = resolve(item) if resolve is not None else None
        value = normalise_answer(canonical if canonical is not None else item)
        if value and value not in seen:
            seen.add(value)
            out.append(value)
    return out


def _norm_set(items: Iterable[str]) -> set[str]:
    return {n for n in (normalise_answer(i) for i in items) if n}


def set_f1(predicted: Sequence[str], gold: Sequence[str]) -> float:
    """Answer-set F1 over normalised sets: rewards partial credit on multi-answer questions."""
    pred, ref = _norm_set(predicted), _norm_set(gold)
    if not pred or not ref:
        return 0.0
    tp = len(pred & ref)
    if tp == 0:
        return 0.0
    precision, recall = tp / len(pred), tp / len(ref)
    return 2 * precision * recall / (precision + recall)


def hit_at_1(predicted: Sequence[str], gold: Sequence[str]) -> bool:
    """Whether the model's first answer is a gold answer (order matters, the rest is ignored)."""
    if not predicted:
        return False
    first = normalise_answer(predicted[0])
    return bool(first) and first in _norm_set(gold)


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


# ----- triples: parsing tool responses, naming in <think> -------------------------------------------------
# omne node_info, tools.node_info_lines: triples: "3. Head -[label]-> Tail: description" (directed) or "-[label]-- Tail"
# (undirected); from_entity: "3. -[label]-> Tail", "3. <-[label]- Head" or "3. -[label]-- Other", read from the
# response's "Entity: X" line
_NODE_INFO_LINE = re.compile(r"^\s*(?:\d+\.\s*)?(?P<h>.+?)\s+-\[(?P<r>[^\]]*)\](?:->|--|-)\s+(?P<t>.+?)(?::\s.*)?$")
_NODE_INFO_FROM_ENTITY = re.compile(
    r"^\s*(?:\d+\.\s*)?(?P<into><)?-\[(?P<r>[^\]]*)\](?:->|--|-)\s+(?P<other>.+?)(?::\s.*)?$")
_NODE_INFO_ENTITY = re.compile(r"^\s*Entity:\s*(?P<e>.+?)\s*$")
# KG-R1: 'Tail entities for entity "X" with relation "R": a, b, c'
_KG_R1_ENTITIES = re.compile(
    r'(?P<side>Tail|Head) entities for entity "(?P<e>[^"]+)" with relation "(?P<r>[^"]+)":\s*(?P<items>.*)$')
_PAREN_SPLIT = re.compile(r"\)\s*[,;]?\s*\(")
_MAX_PAREN_PARTS = 8


def _paren_alternatives(inner: str) -> list[Triple]:
    """A "(head, relation, tail)" body; names holding ", " make it ambiguous: every split is kept."""
    parts = [p.strip().strip(_QUOTES).strip() for p in inner.split(",")]
    if len(parts) < 3 or len(parts) > _MAX_PAREN_PARTS or not all(parts):
        return []
    if len(parts) == 3:
        return [(parts[0], parts[1], parts[2])]
    # relations are short labels: readings with a one-part relation come first
    splits = sorted(combinations(range(1, len(parts)), 2), key=lambda ij: (ij[1] - ij[0], ij))
    return [(", ".join(parts[:i]), ", ".join(parts[i:j]), ", ".join(parts[j:])) for i, j in splits]


def _untyped(name: str) -> str:
    """A node_info neighbour's name without the type tools.neighbor_types writes after it ("Sun [star]")."""
    typed = TYPED_NAME.match(name)
    return typed["name"] if typed else name


def _typed_readings(shown: Triple) -> tuple[Triple, ...]:
    """A node_info triple as written, read first without the types written after its names, then as written."""
    plain = (_untyped(shown[0]), shown[1], _untyped(shown[2]))
    return (plain, shown) if plain != shown else (shown,)


@lru_cache(maxsize=8192)  # the same node_info response comes back in many episodes
def _triple_alternatives(text: str) -> tuple[tuple[Triple, ...], ...]:
    """Triples in a tool response, each as its possible readings (one, unless the text is ambiguous)."""
    out: list[tuple[Triple, ...]] = []
    stripped = text.strip()
    if stripped.startswith("[") and stripped.endswith("]"):  # a JSON list of [h, r, t] (graph-in-prompt)
        try:
            value = json.loads(stripped)
        except ValueError:
            value = None
        if isinstance(value, list):
            for item in value:
                if isinstance(item, list | tuple) and len(item) == 3 and all(isinstance(x, str) for x in item):
                    out.append(((item[0], item[1], item[2]),))
            if out:
                return tuple(out)
    about = ""  # the node_info response's entity, that from_entity lines start from
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if m := _NODE_INFO_ENTITY.match(line):
            about = m["e"]
            continue
        if m := _NODE_INFO_FROM_ENTITY.match(line):
            other = m["other"].strip()
            out.append(_typed_readings((other, m["r"].strip(), about) if m["into"] else (about, m["r"].strip(), other)))
            continue
        m = _KG_R1_ENTITIES.search(line)
        if m:
            entity, relation = m["e"], m["r"]
            for item in m["items"].split(","):
                item = item.strip()
                if not item or item.startswith("…") or item.startswith("..."):
                    continue
                out.append(((entity, relation, item) if m["side"] == "Tail" else (item, relation, entity),))
            continue
        body = _LIST_MARKER.sub("", line).rstrip(",;").strip()
        if body.startswith("(") and body.endswith(")"):
            found = [tuple(alt) for inner in _PAREN_SPLIT.split(body[1:-1]) if (alt := _paren_alternatives(inner))]
            if found:
                out.extend(found)
                continue
        m = _NODE_INFO_LINE.match(line)
        if m:
            out.append(_typed_readings((m["h"].strip(), m["r"].strip(), m["t"].strip())))
    return tuple(out)


def parse_triples(text: str) -> list[Triple]:
    """Triples listed in a tool response: omne ``node_info`` lines ("A -[label]-> B: description", or "-[label]-> B"
    and "<-[label]- A" from the response's "Entity: X"; a neighbour typed as "B [type]" read as B first, then as
    written),
    KG-R1 entity lists, "(head, relation, tail)" lines (search) and JSON triple lists.

    Ambiguous "(a, b, c, d)" lines (a name with a comma) give their first reading here.
    """
    return [alternatives[0] for alternatives in _triple_alternatives(text)]


def gold_triples(gold: GoldPath | None) -> list[Triple]:
    """The distinct (src, keywords, dst) triples of a question's validated gold paths."""
    if gold is None:
        return []
    out: dict[tuple, Triple] = {}
    for item in gold.paths:
        if item.valid:
            for edge in item.edges:
                out.setdefault(_triple_key((edge.src, edge.keywords, edge.dst)), (edge.src, edge.keywords, edge.dst))
    return list(out.values())


def _triple_key(triple: Triple) -> tuple:
    # direction-free identity: LightRAG graphs are undirected, and naming is symmetric in head and tail
    head, relation, tail = (normalise_key(x) for x in triple)
    return (relation, *sorted((head, tail)))


def _relation_forms(relation: str) -> list[str]:
    """Ways a relation label can be named in prose: the label, underscores as spaces, the last dotted
    segment of a Freebase-style id, and each comma-separated keyword of a LightRAG label."""
    forms = [relation, relation.replace("_", " ")]
    if "." in relation and " " not in relation:
        forms.append(relation.rsplit(".", 1)[-1].replace("_", " "))
    if "," in relation:
        forms += [k.strip() for k in relation.split(",")]
    return [f for f in dict.fromkeys(forms) if f.strip()]


class _Namer:
    """Whole-name, case-insensitive look-ups in one think text, memoised (names repeat across triples)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._folded = text.casefold()
        self._cache: dict[str, bool] = {}

    def entity(self, name: str) -> bool:
        hit = self._cache.get(name)
        if hit is None:  # a cheap substring test first: most names are not in the text at all
            folded = name.strip().casefold()
            hit = self._cache[name] = bool(folded) and folded in self._folded and mentions(self.text, name)
        return hit

    def relation(self, label: str) -> bool:
        return any(self.entity(form) for form in _relation_forms(label))

    def triple(self, triple: Triple) -> bool:
        head, relation, tail = triple
        return self.entity(head) and self.entity(tail) and self.relation(relation)


def triple_named(text: str, triple: Triple) -> bool:
    """Whether head, relation and tail are all named in ``text`` (whole names, any case)."""
    return _Namer(text).triple(triple)


def exploration_scores(think_text: str, gold: Sequence[Triple],
                       seen: Iterable[Sequence[Triple]]) -> tuple[float, float]:
    """EoG's (gold-triple coverage, exploration efficiency) of one episode.

    ``seen`` holds the KG triples the episode could name (from its tool responses), each as its
    possible readings. Coverage = gold triples named / gold triples. Efficiency = gold triples named /
    all KG triples named, where the latter is the (direction-free) union of the seen triples named
    and the gold triples named, so it stays in [0, 1]; 0 when nothing is named.
    """
    namer = _Namer(think_text)
    gold_named = {_triple_key(t) for t in gold if namer.triple(t)}
    named = set(gold_named)
    for alternatives in dict.fromkeys(tuple(a) for a in seen):  # the same triple is often listed again
        for reading in alternatives:
            if namer.triple(reading):
                named.add(_triple_key(reading))
                break
    coverage = len(gold_named) / len({_triple_key(t) for t in gold}) if gold else 0.0
    return coverage, (len(gold_named) / len(named) if named else 0.0)


# ----- behaviour -----------------------------------------------------------------------------------------
def _call_key(name: str | None, arguments: dict, text: str) -> tuple:
    if name is None:  # unparsed: the same text written again is the same call
        return ("", _SPACES.sub(" ", text.strip()))
    args = tuple(sorted((k, normalise_key(v) if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str))
                        for k, v in arguments.items()))
    return (name, args)


def _repeats(t: Trajectory) -> int:
    """Calls that repeat an earlier call of the episode (same tool, same arguments up to case/space)."""
    seen: set[tuple] = set()
    repeats = 0
    for call in t.tool_calls:
        key = _call_key(call.name, call.arguments, call.text)
        if key in seen:
            repeats += 1
        seen.add(key)
    return repeats


def _retrieved(t: Trajectory) -> bool:
    """A gold answer is named in a successful tool response (errors only echo what the model typed)."""
    golds = [g for g in t.gold_answers if g.strip()]
    return any(mentions(call.response, g) for call in t.tool_calls if call.ok for g in golds)


def graph_name_misses(t: Trajectory) -> tuple[int, int]:
    """(calls to a graph no server knows, calls to a known graph other than the question's): the two ways a
    model that memorised its training graphs' names fails on a graph it never saw by name."""
    unknown = sum(1 for c in t.tool_calls if c.error_type == "unknown_graph")
    other = sum(1 for c in t.tool_calls if c.error_type != "unknown_graph"
                and isinstance(c.arguments.get("graph_type"), str) and c.arguments["graph_type"] != t.domain)
    return unknown, other


def answer_from_tools(t: Trajectory) -> bool:
    """The episode's answer, exactly as written (case included: EM is exact), is a whole name in one of its
    successful tool responses: copied from what the tools showed, not retyped or made up."""
    answer = (t.answer or "").strip()
    if not answer:
        return False
    pattern = re.compile(r"(?<![\w-])" + re.escape(answer) + r"(?![\w-])")
    return any(c.ok and pattern.search(c.response or "") for c in t.tool_calls)


OUTCOMES = ("correct", "stopped_on_path", "misspelled_answer", "start_not_reached", "no_answer", "wrong_answer")
_MISSPELLED_RATIO = 0.8  # difflib similarity of a wrong answer to a gold answer above which it counts as retyped


def episode_outcome(t: Trajectory, gold: GoldPath | None) -> str | None:
    """How an episode ended, the first of ``OUTCOMES`` that holds: right; answered an entity of a
    validated gold path short of its end (stopped early, e.g. the country of a "capital of the country"
    question); a near miss of a gold answer's spelling; never called a tool successfully on a path's start
    entity (a retyped or wrong start name); no answer; another wrong answer. None without validated paths
    (nothing to compare with) — what stage-2 training needs to fix differs by outcome."""
    paths = [p.nodes for p in (gold.paths if gold else []) if p.valid]
    if not paths:
        return None
    if exact_match(t.answer, t.gold_answers):
        return "correct"
    answer = normalise_key(t.answer or "")
    if answer and any(answer == normalise_key(node) for nodes in paths for node in nodes[:-1]):
        return "stopped_on_path"
    if answer and any(_similarity(answer, normalise_key(g)) >= _MISSPELLED_RATIO for g in t.gold_answers):
        return "misspelled_answer"
    starts = {normalise_key(nodes[0]) for nodes in paths}
    named = {normalise_key(v) for c in t.tool_calls if c.ok for v in c.arguments.values() if isinstance(v, str)}
    if t.tool_calls and not starts & named:
        return "start_not_reached"
    return "no_answer" if not answer else "wrong_answer"


def _similarity(a: str, b: str) -> float:
    return SequenceMatcher(None, a, b).ratio()


def _tool_label(name: str | None) -> str:
    return name if name is not None else "invalid"


def behaviour(trajs: Sequence[Trajectory], gold_paths: Mapping[str, GoldPath] | None = None,
              kg_triples: Mapping[str, Iterable[Triple]] | None = None) -> Behaviour:
    """How the agent behaved: format errors, repeated / invalid calls, tool distributions, finish
    reasons, retrieval rate, and EoG's exploration metrics.

    ``gold_paths`` (qa_id -> GoldPath) enables the exploration metrics, averaged over episodes whose
    question has validated gold triples. ``kg_triples`` (qa_id -> triples) adds KG triples the model
    saw outside tool responses (e.g. the graph-in-prompt baseline's subgraph) to those parsed from
    its tool responses.
    """
    n = len(trajs)
    if n == 0:
        return Behaviour()
    format_types: Counter[str] = Counter()
    first_tool: Counter[str] = Counter()
    sequences: Counter[str] = Counter()
    histogram: Counter[int] = Counter()
    finish: Counter[str] = Counter()
    repeated = invalid = retrieved = unknown_graph = other_graph = 0
    answered = from_tools = missing_entity = 0
    coverage: list[float] = []
    efficiency_values: list[float] = []
    outcomes: Counter[str] = Counter()
    for t in trajs:
        format_types.update(t.format_errors)
        names = [_tool_label(c.name) for c in t.tool_calls]
        first_tool[names[0] if names else "none"] += 1
        sequences[">".join(names) if names else "none"] += 1
        histogram[len(names)] += 1
        finish[t.finish] += 1
        repeated += _repeats(t)
        invalid += sum(1 for c in t.tool_calls if not c.ok)
        unknown, other = graph_name_misses(t)
        unknown_graph += unknown
        other_graph += other
        retrieved += _retrieved(t)
        if (t.answer or "").strip():
            answered += 1
            from_tools += answer_from_tools(t)
        missing_entity += sum(1 for c in t.tool_calls if c.error_type == "entity_not_found")
        gold_path = gold_paths.get(t.qa_id) if gold_paths else None
        if (outcome := episode_outcome(t, gold_path)) is not None:
            outcomes[outcome] += 1
        gold = gold_triples(gold_path)
        if gold:
            seen = [alt for c in t.tool_calls if c.ok for alt in _triple_alternatives(c.response)]
            if kg_triples and t.qa_id in kg_triples:
                seen += [(tuple(x),) for x in kg_triples[t.qa_id]]
            cov, eff = exploration_scores(t.think_text, gold, seen)
            coverage.append(cov)
            efficiency_values.append(eff)
    top = sorted(sequences.items(), key=lambda kv: (-kv[1], kv[0]))[:20]
    return Behaviour(
        format_errors_per_sample=sum(format_types.values()) / n,
        format_error_types=dict(sorted(format_types.items())),
        repeated_tool_calls_per_sample=repeated / n,
        invalid_tool_calls_per_sample=invalid / n,
        unknown_graph_calls_per_sample=unknown_graph / n,
        other_graph_calls_per_sample=other_graph / n,
        unknown_graph_call_share=unknown_graph / max(1, sum(len(t.tool_calls) for t in trajs)),
        first_tool=dict(sorted(first_tool.items(), key=lambda kv: (-kv[1], kv[0]))),
        tool_sequences=dict(top),
        tool_calls_histogram={str(k): histogram[k] for k in sorted(histogram)},
        finish=dict(sorted(finish.items())),
        retrieval_rate=retrieved / n,
        answered_episodes=answered,
        answer_from_tools_share=from_tools / answered if answered else 0.0,
        missing_entity_calls_per_sample=missing_entity / n,
        missing_entity_call_share=missing_entity / max(1, sum(len(t.tool_calls) for t in trajs)),
        repeated_call_finish_share=finish["repeated_call"] / n,
        gold_triple_coverage=float(np.mean(coverage)) if coverage else 0.0,
        exploration_efficiency=float(np.mean(efficiency_values)) if efficiency_values else 0.0,
        exploration_episodes=len(coverage),
        outcomes={k: outcomes[k] for k in OUTCOMES if outcomes[k]},
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

