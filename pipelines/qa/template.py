"""The offline question generator: deterministic questions along a sampled KG path, no LLM needed.

A question is written from the relations' own descriptions (each a sentence naming both ends, as
the KG sources give them), with the answer turned into "which <type>" and every bridge entity
into a relative clause built from the previous relation: "Abu Dhabi is the capital of United Arab
Emirates." + "United Arab Emirates uses the UAE Dirham." becomes "Which currency does ... " style
text such as "The country that Abu Dhabi is the capital of uses which currency?". A relation whose
description does not name both ends falls back to "<head> <keywords> <tail>". The answer must be
the only entity the relation chain reaches from the start, so every question has one answer.
"""

from __future__ import annotations

import re

import numpy as np

from pipelines.qa.names import _name_pattern, mentions
from pipelines.qa.paths import RelationGraph, Step

_SPACES = re.compile(r"\s+")
_TRAILING = re.compile(r"[\s.;:,!]+$")
_ARTICLE = re.compile(r"(?i)(?:^|(?<=\s))(?:the|a|an)\s+$")


def relation_sentence(graph: RelationGraph, relation: int) -> str:
    """The first description line that names both ends of the relation, else a sentence from its keywords."""
    head, tail = graph.names[graph.src[relation]], graph.names[graph.dst[relation]]
    for line in graph.rel_descriptions[relation].splitlines():
        line = line.strip()
        if line and mentions(line, head) and mentions(line, tail) and len(_name_pattern(tail).findall(line)) == 1 \
                and len(_name_pattern(head).findall(line)) == 1:
            return _TRAILING.sub("", line)
    return keyword_sentence(head, graph.keywords[relation], tail)


_PREPOSITIONS = {"of", "in", "to", "by", "with", "for", "from", "on", "at", "into", "as"}


def keyword_sentence(head: str, keywords: str, tail: str) -> str:
    """A plain sentence from a relation label: 'is <label> <tail>' for 'capital of'/'in block',
    '<label> <tail>' for a verb ('excludes', 'borders'), else 'has a "<label>" relation to'."""
    label = _SPACES.sub(" ", keywords.replace("_", " ")).strip()
    words = label.lower().split()
    if not words:
        return f"{head} is related to {tail}"
    if words[-1] in _PREPOSITIONS or words[0] in _PREPOSITIONS:
        return f"{head} is {label} {tail}"
    if len(words) == 1 and words[0].endswith("s") and not words[0].endswith("ss"):
        return f"{head} {label} {tail}"
    article = "an" if label[0].lower() in "aeiou" else "a"
    return f'{head} has {article} "{label}" relation to {tail}'


def _entity_noun(graph: RelationGraph, node: int) -> str:
    kind = graph.types[node].strip().replace("_", " ").lower()
    return kind or "entity"


def _replace(sentence: str, name: str, text: str, protect: str = "") -> str:
    """Replace the first whole mention of ``name`` that is not inside a mention of ``protect``
    (so masking "Cayman Islands" leaves "Western (subdivision of Cayman Islands)" intact)."""
    guarded = [m.span() for m in _name_pattern(protect).finditer(sentence)] if protect.strip() else []
    for match in _name_pattern(name).finditer(sentence):
        if not any(a <= match.start() and match.end() <= b for a, b in guarded):
            before = sentence[:match.start()]
            if text.startswith(("which ", "the ")):  # "uses the X" -> "uses which currency", not "the which"
                before = _ARTICLE.sub("", before)
            return before + text + sentence[match.end():]
    return sentence


def _relative_clause(sentence: str, name: str, noun: str, protect: str) -> str:
    """'X is the capital of B' about B -> 'the country that X is the capital of'."""
    rest = _SPACES.sub(" ", _replace(sentence, name, " ", protect)).strip()
    return f"the {noun} that {rest}"


def write_question(graph: RelationGraph, start: int, steps: list[Step]) -> str:
    """The question of a path: bridges become nested relative clauses, the answer 'which <type>'."""
    nodes = graph.path_nodes(start, steps)
    described = graph.names[start]  # how the current node is referred to in the question
    for i, step in enumerate(steps):
        here, there = nodes[i], nodes[i + 1]
        sentence = relation_sentence(graph, step.relation)
        if i > 0:
            sentence = _replace(sentence, graph.names[here], described, graph.names[there])
        if i < len(steps) - 1:
            described = _relative_clause(sentence, graph.names[there], _entity_noun(graph, there),
                                         described if i > 0 else graph.names[here])
            continue
        asked = f"which {_entity_noun(graph, there)}"
        question = _replace(sentence, graph.names[there], asked, described if i > 0 else graph.names[here])
        question = question[0].upper() + question[1:]
        return _SPACES.sub(" ", question).strip() + "?"
    return ""


def remaining_questions(graph: RelationGraph, start: int, steps: list[Step]) -> list[str]:
    """What is left to ask after each hop but the last: the question this writer gives the rest of the path
    from the entity reached. "The country that Abu Dhabi is the capital of uses which currency?" leaves
    "United Arab Emirates uses which currency?" after one hop: a nested question read one clause at a time."""
    nodes = graph.path_nodes(start, steps)
    return [write_question(graph, nodes[k], steps[k:]) for k in range(1, len(steps))]


def sample_template_path(graph: RelationGraph, seed: int, hops: int, allowed: set[int],
                         rng: np.random.Generator, tries: int = 20) -> list[Step] | None:
    """A walk of ``hops`` steps inside the seed subgraph whose relation chain has a unique answer."""
    for _ in range(tries):
        steps = graph.random_walk(seed, hops, rng, allowed)
        if steps is None:
            continue
        answer = graph.path_nodes(seed, steps)[-1]
        if graph.follow(seed, graph.chain(steps), cap=1) == {answer}:
            return steps
    return None
