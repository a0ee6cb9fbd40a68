"""Rule checks of a generated QA pair, run before any LLM judge (and alone for the template generator).

The Omne-R1 paper's rule: the path is connected in the KG and contains the answer. Our stricter
default (``qa.strict_path``) also wants the path to start at the seed and end at the answer. The
question must name the start entity and none of the other path entities (``qa.name_rules``: ours, strict, or the
paper's, which its own example questions pass). Each failure comes back as feedback text, which is what the retry
prompt shows the generator.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from pipelines.config import NameRules
from pipelines.qa.models import Bucket, PathEdge
from pipelines.qa.paths import RelationGraph, Step
from pipelines.text.names import _name_pattern, leaked_names, mentions

HOP_RANGES: dict[str, tuple[int, int]] = {"1-2": (1, 2), "3+": (3, 10_000)}


class RuleVerdict(BaseModel):
    path_valid: bool
    question_valid: bool
    feedback: list[str]
    node_ids: list[int] = []
    steps: list[tuple[int, bool]] = []  # (relation, forward) along the path when it is valid

    @property
    def valid(self) -> bool:
        return self.path_valid and self.question_valid


def resolve_steps(graph: RelationGraph, node_ids: list[int], preferred: list[str] | None = None,
                  forward: list[bool] | None = None) -> list[Step] | None:
    """One relation per consecutive pair (the one whose keywords the generator named, if any, and walked the way
    ``forward`` says when a label joins the two entities both ways: "A excludes B" and "B excludes A")."""
    steps = []
    for i, (a, b) in enumerate(zip(node_ids, node_ids[1:], strict=False)):
        options = graph.steps_between(a, b)
        if not options:
            return None
        wanted = preferred[i].casefold() if preferred and i < len(preferred) else None
        named = [s for s in options if wanted and graph.keywords[s.relation].casefold() == wanted] or options
        way = forward[i] if forward is not None and i < len(forward) else None
        steps.append(next((s for s in named if s.forward == way), named[0]))
    return steps


def edge_steps(graph: RelationGraph, node_ids: list[int], edges: list[PathEdge]) -> list[Step] | None:
    """The steps of a stored path: each edge's relation, walked the way its ``src`` says."""
    return resolve_steps(graph, node_ids, [e.keywords for e in edges],
                         [e.src == graph.names[a] for e, a in zip(edges, node_ids, strict=False)])


def check_path(graph: RelationGraph, path: list[str], answer: str, seed: int, bucket: Bucket, *,
               strict: bool, max_hops: int) -> tuple[list[int], list[str]]:
    """Entity ids of the path and the problems found (empty when the path is valid)."""
    problems: list[str] = []
    if len(path) < 2:
        return [], ["the path must list at least two entities, start ... answer"]
    ids = [graph.entity_id(name) for name in path]
    missing = [name for name, i in zip(path, ids, strict=True) if i is None]
    if missing:
        return [], [f"path entities not in the knowledge graph: {', '.join(repr(m) for m in missing)}"]
    node_ids = [int(i) for i in ids if i is not None]
    if len(set(node_ids)) != len(node_ids):
        problems.append("the path visits an entity twice")
    for a, b in zip(node_ids, node_ids[1:], strict=False):
        if not graph.steps_between(a, b):
            problems.append(f"no relation between {graph.names[a]!r} and {graph.names[b]!r}")
    answer_id = graph.entity_id(answer)
    if answer_id is None or answer_id not in node_ids:
        problems.append(f"the answer {answer!r} is not an entity on the path")
    if strict:
        if node_ids[0] != seed:
            problems.append(f"the path must start at {graph.names[seed]!r}")
        if answer_id is not None and node_ids[-1] != answer_id:
            problems.append("the answer must be the last entity of the path")
    low, high = HOP_RANGES[bucket]
    hops = len(node_ids) - 1
    if not low <= hops <= min(high, max_hops):
        problems.append(f"the path has {hops} hop(s); this question needs {low}-{min(high, max_hops)}")
    return node_ids, problems


_MARKERS = {"that", "which", "whose", "whom", "who"}
_PREPOSITIONS = {"of", "in", "to", "by", "with", "for", "from", "on", "at", "into", "about", "under", "through"}
_CLAUSES = re.compile(r"[.?!;,:]")
_DOUBLED = re.compile(r"\b(\w+)\s+\1\b", re.IGNORECASE)
_KEYWORD_LIST = re.compile(r"\b\w+,\w+\b")
_PREPOSITION = r"(?:of|in|to|by|with|for|from|on|at|into|about)"
_DANGLING = re.compile(rf"\b{_PREPOSITION}\s+(?:{_PREPOSITION}\b|[,.;:!])", re.IGNORECASE)


def _masked(question: str, names: list[str]) -> str:
    """The question with every path entity's name replaced by "X" (names may hold any words)."""
    for name in sorted({n for n in names if n.strip()}, key=len, reverse=True):
        question = _name_pattern(name).sub("X", question)
    return question


def relative_depth(question: str, names: list[str]) -> int:
    """Relative-clause markers (that, which, whose, who, whom) in the question's busiest clause, names masked:
    0 or 1 reads at once, 2 is a clause inside a clause. A clause's first word ("Which", ", which is ...") and
    a fronted "in which"/"on which" do not count."""
    depth = 0
    for clause in _CLAUSES.split(_masked(question, names)):
        words = clause.lower().split()
        markers = [i for i, w in enumerate(words) if w in _MARKERS and i > 0
                   and not (i == 1 and words[0] in _PREPOSITIONS)]
        depth = max(depth, len(markers))
    return depth


def form_problems(question: str, names: list[str], max_words: int | None = None) -> list[str]:
    """What makes a question hard to read, whoever wrote it: too many words, a clause inside a clause,
    a word twice in a row, a preposition with nothing after it, a keyword list pasted in."""
    problems = []
    words = len(question.split())
    if max_words is not None and words > max_words:
        problems.append(f"the question has {words} words; at most {max_words} (qa.max_question_words)")
    masked = _masked(question, names)
    if relative_depth(question, names) > 1:
        problems.append("the question nests a relative clause inside another; split it into short sentences")
    if doubled := _DOUBLED.search(masked):
        problems.append(f"the question repeats a word: {doubled.group(0)!r}")
    if dangling := _DANGLING.search(masked):
        problems.append(f"a preposition has no object: {dangling.group(0)!r}")
    if listed := _KEYWORD_LIST.search(masked):
        problems.append(f"the question holds a keyword list: {listed.group(0)!r}")
    return problems


_TRAILING_ABBREVIATION = re.compile(r"\s*\([^()]*\)\s*$")


def start_forms(start: str, rules: NameRules = "strict") -> list[str]:
    """How a question may name the start: whole, and under the paper's rules also without a trailing
    "(abbreviation)", as the paper's 1/2-hop example names "Colony Collapse Disorder (CCD)"."""
    short = _TRAILING_ABBREVIATION.sub("", start)
    return [start, short] if rules == "paper" and short.strip() and short != start else [start]


def names_start(question: str, start: str, rules: NameRules = "strict") -> bool:
    return any(mentions(question, form) for form in start_forms(start, rules))


def leaks(question: str, path: list[str], answer: str, generic: frozenset[str] = frozenset(),
          rules: NameRules = "strict") -> list[str]:
    """``names.leaked_names``; under the paper's rules the start's own name is masked first, so that a hidden
    name's word inside it does not count (the paper's 3+ example starts at Madame de Merret and ends at Comtesse de
    Merret)."""
    if rules == "paper" and path:
        question = _masked(question, start_forms(path[0], rules))
    return leaked_names(question, path, answer, generic)


def check_question(question: str, path: list[str], answer: str, generic: frozenset[str] = frozenset(),
                   max_words: int | None = None, rules: NameRules = "strict") -> list[str]:
    """Problems of a question's text (empty when it is fine): the start named, nothing else of the path
    given away (``leaks``, with the domain's ``generic`` words), one question, readable forms."""
    problems: list[str] = []
    if not question.strip():
        return ["the question is empty"]
    if path and not names_start(question, path[0], rules):
        problems.append(f"the question must name the start entity {path[0]!r}")
    leaked = leaks(question, path, answer, generic, rules)
    if leaked:
        problems.append(f"the question gives away other path entities: {', '.join(repr(n) for n in leaked)}")
    if question.count("?") > 1:
        problems.append("write one comprehensive question, not several sub-questions")
    return problems + form_problems(question, [*path, answer], max_words)


def check_pair(graph: RelationGraph, path: list[str], question: str, answer: str, seed: int, bucket: Bucket, *,
               strict: bool, max_hops: int, relations: list[str] | None = None,
               max_words: int | None = None, name_rules: NameRules = "strict") -> RuleVerdict:
    node_ids, path_problems = check_path(graph, path, answer, seed, bucket, strict=strict, max_hops=max_hops)
    question_problems = check_question(question, path, answer, graph.generic_words, max_words, name_rules)
    steps = resolve_steps(graph, node_ids, relations) if not path_problems else None
    return RuleVerdict(path_valid=not path_problems and steps is not None,
                       question_valid=not question_problems,
                       feedback=path_problems + question_problems, node_ids=node_ids,
                       steps=[(s.relation, s.forward) for s in steps or []])
