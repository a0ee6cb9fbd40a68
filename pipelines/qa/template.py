"""The offline question generator: deterministic questions along a sampled KG path, no LLM needed.

Each hop is said with its relation's phrases (pipelines/text/phrases.py: the domain's editable phrases file,
else the rules), in forms a person reads once (docs/qa.md, "How template questions read"): a direct
question for one hop, one noun phrase for the bridge of two ("Which currency does the country whose capital
is Lima use?"), and two or three short sentences for three or more ("Roscommon is a state/province of a
country, which is in a subregion. Which region is that subregion part of?"). The start is named once, no
other path entity is named, and the answer must be the only entity the relation chain reaches from the
start, so every question has one answer.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from pipelines.qa.paths import RelationGraph, Step
from pipelines.text.names import find_name
from pipelines.text.phrases import (
    PREPOSITIONS,
    RelationPhrases,
    drop_article,
    edge_phrase,
    label_statement,
    shown_keywords,
)

_SPACES = re.compile(r"\s+")
_TRAILING = re.compile(r"[\s.;:,!]+$")


def relation_sentence(graph: RelationGraph, relation: int, *, descriptions: bool = True,
                      phrased: bool = True) -> str:
    """The first description line that names both ends of the relation (``descriptions``), else a sentence from
    its phrasebook entry, else (``phrased``, an undirected graph: LightRAG's) the phrase node_info labels it with,
    read in the same direction ("A is a subcategory of B", not a sentence around its keyword list), else its
    keywords."""
    head, tail = graph.names[graph.src[relation]], graph.names[graph.dst[relation]]
    for line in graph.rel_descriptions[relation].splitlines() if descriptions else []:
        line = line.strip()
        if line and len(find_name(line, head) or []) == 1 and len(find_name(line, tail) or []) == 1:
            return _TRAILING.sub("", line)
    phrases = graph.phrasebook.relation(relation)
    if phrases is not None:
        return _fill(phrases.statement, head=head, tail=tail)
    if phrased and not graph.kg.directed and (found := edge_phrase(graph.rel_descriptions[relation], head, tail)):
        phrase, backward = found
        return f"{tail} {phrase} {head}" if backward else f"{head} {phrase} {tail}"
    keywords = graph.keywords[relation]
    return keyword_sentence(head, keywords if graph.kg.directed else shown_keywords(keywords), tail)


def keyword_sentence(head: str, keywords: str, tail: str) -> str:
    """A plain sentence from a relation label alone ("A is in block B", "A excludes B")."""
    return _fill(label_statement(keywords), head=head, tail=tail)


def _fill(template: str, **values: str) -> str:
    """``template`` with {head}/{tail}/{type} replaced (not str.format: names may hold braces)."""
    for key, value in values.items():
        template = template.replace("{" + key + "}", value)
    return template


def _sentence(text: str, *names: str) -> str:
    """The text as a sentence: one space between words, the first letter capitalised unless the text starts
    with one of the entity ``names`` (a name keeps its case: "configparser.ConfigParser", "iPhone")."""
    text = _SPACES.sub(" ", text).strip()
    return text if any(n and text.startswith(n) for n in names) else text[:1].upper() + text[1:]


WRITER_VERSION = 9  # in the QA pairs' fingerprint: a change of the forms rebuilds the template questions
# (3: a question or sentence that starts with a lower-case name keeps it as written; 4: LightRAG/text graphs'
# upper-case names written as their descriptions write them, per-edge statements cut after their second end, at
# most 12 words, verbs in the singular, no possessive slot; 5: no quoted or bracketed slot; 6: a per-edge statement
# starts and ends with its two ends, with a plain verb group between)
MAX_STATEMENTS = 2  # sentences before the question of a 3+-hop question (so at most three in all)
_ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth"]


def indefinite(noun: str) -> str:
    """The noun with its indefinite article: "an isotope", "a country"."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


class _Bridges:
    """How the bridges of a 3+-hop question are introduced and referred to: "a country" / "that country";
    when two bridges share a noun, "an isotope", "a second isotope" / "the first isotope", "the second isotope".
    A bridge in ``names`` (node index -> entity name: a walk has reached it) is named instead, and the others keep
    the words they had (a named first isotope leaves "a second isotope" as it was)."""

    def __init__(self, nouns: list[str], names: dict[int, str] | None = None) -> None:
        self.nouns = nouns  # by node index along the path
        self.names = names or {}
        self.total = Counter(nouns[1:-1])
        self.order: dict[int, int] = {}

    def described(self, node: int) -> None:
        """``node`` is described by a noun phrase, never introduced nor referred to: it does not count."""
        self.total[self.nouns[node]] -= 1

    def introduce(self, node: int) -> str:
        noun = self.nouns[node]
        index = self.order.setdefault(node, sum(self.nouns[n] == noun for n in self.order))
        if node in self.names:
            return self.names[node]
        if index == 0:
            return indefinite(noun)
        return f"a {_ORDINALS[min(index, len(_ORDINALS) - 1)]} {noun}"

    def refer(self, node: int) -> str:
        noun = self.nouns[node]
        if node in self.names:
            return self.names[node]
        if self.total[noun] <= 1:
            return f"that {noun}"
        return f"the {_ORDINALS[min(self.order.get(node, 0), len(_ORDINALS) - 1)]} {noun}"


def _state(phrases: RelationPhrases, forward: bool, here: str, there: str) -> str:
    head, tail = (here, there) if forward else (there, here)
    return _fill(phrases.statement, head=head, tail=tail)


def _ask(phrases: RelationPhrases, forward: bool, here: str, noun: str) -> str | None:
    """The question for the far end of a hop whose near end reads ``here``."""
    form = phrases.ask_tail if forward else phrases.ask_head
    return None if form is None else _fill(form, **{"head" if forward else "tail": here, "type": noun})


def _describe(phrases: RelationPhrases, forward: bool, here: str, noun: str) -> str | None:
    """A noun phrase for the far end of a hop: "the country whose capital is Lima"."""
    form = phrases.tail_noun if forward else phrases.head_noun
    return None if form is None else _fill(form, **{"head" if forward else "tail": here, "type": noun})


def _relative(phrases: RelationPhrases, forward: bool, there: str) -> str | None:
    """A non-restrictive clause about the entity just introduced (this hop's near end), taking the walk on:
    "which is in a subregion" (it is the statement's subject), "to which a second isotope decays" (its last
    word); None when the statement names it elsewhere."""
    statement = phrases.statement
    near, far = ("{head}", "{tail}") if forward else ("{tail}", "{head}")
    if statement.startswith(near + " "):
        return "which " + statement[len(near) + 1:].replace(far, there)
    if not statement.endswith(" " + near):
        return None
    words = drop_article(statement[:-len(near) - 1].split())
    if len(words) > 1 and words[-1].lower() in PREPOSITIONS:
        return f"{words[-1]} which " + " ".join(words[:-1]).replace(far, there)
    return "which " + " ".join(words).replace(far, there)


def write_question(graph: RelationGraph, start: int, steps: list[Step], known: int = 0) -> str | None:
    """The question of a path, in the forms of docs/qa.md: one hop asks directly ("Which currency does
    Peru use?"); two hops describe the bridge in one noun phrase ("Which currency does the country whose
    capital is Lima use?"); three or more are two or three short sentences that name the start once,
    introduce each bridge ("..., which is in a subregion. That subregion ...") and ask one question at the
    end. None when a hop has no phrase that form needs. ``known``: the first ``known`` bridges are named in
    the same sentences (``filled_questions``)."""
    book = graph.phrasebook
    nodes = graph.path_nodes(start, steps)
    hops = [book.relation(step.relation) for step in steps]
    if not steps or any(h is None for h in hops):
        return None
    phrases: list[RelationPhrases] = hops  # type: ignore[assignment]
    nouns = [book.noun(n) for n in nodes]
    forward = [step.forward for step in steps]
    start_name, k = graph.written_name(start), len(steps)
    names = {i: graph.written_name(nodes[i]) for i in range(1, min(known, k - 1) + 1)}
    if k == 1:
        question = _ask(phrases[0], forward[0], start_name, nouns[1])
    elif k == 2 and (bridge := _describe(phrases[0], forward[0], start_name, nouns[1])) is not None:
        question = _ask(phrases[1], forward[1], names.get(1, bridge), nouns[2])
    else:
        question = _bridge_sentences(phrases, forward, start_name, nouns, names)
    if question is None:
        return None
    question = _sentence(question, start_name, *names.values())
    return question if question.endswith("?") else question.rstrip(".") + "?"


def _bridge_sentences(phrases: list[RelationPhrases], forward: list[bool], start_name: str,
                      nouns: list[str], names: dict[int, str] | None = None) -> str | None:
    """Two or three short sentences: the first hop states how the start relates to the first bridge (and,
    when that bridge ends the sentence, a clause takes the second hop), one sentence per further bridge,
    and the question of the last hop; the bridges in ``names`` are named."""
    names = names or {}
    k, bridges = len(phrases), _Bridges(nouns, names)
    first = _state(phrases[0], forward[0], start_name, bridges.introduce(1))
    sentences, middle = [first], 1
    plain = _Bridges(nouns)  # the form is chosen as for the unnamed question, so a named bridge never changes it
    if k > 2 and _state(phrases[0], forward[0], start_name, plain.introduce(1)).endswith(plain.introduce(1)):
        clause = _relative(phrases[1], forward[1], bridges.introduce(2))
        if clause is not None:  # "X is a state or province of a country, which is in a subregion."
            sentences, middle = [f"{first}, {clause}"], 2
    if middle == 1 and k > 2 and (described := _describe(phrases[0], forward[0], start_name, nouns[1])):
        # "An isotope decays to the isotope that decays to Radium-217."
        bridges = _Bridges(nouns, names)
        bridges.described(1)
        sentences, middle = [_state(phrases[1], forward[1], names.get(1, described), bridges.introduce(2))], 2
    for i in range(middle, k - 1):
        sentences.append(_state(phrases[i], forward[i], bridges.refer(i), bridges.introduce(i + 1)))
    final = _ask(phrases[-1], forward[-1], bridges.refer(k - 1), nouns[-1])
    if final is None or len(sentences) > MAX_STATEMENTS:
        return None
    named = (start_name, *names.values())
    return " ".join([*(_sentence(s, *named) + "." for s in sentences), _sentence(final, *names.values())])


def remaining_questions(graph: RelationGraph, start: int, steps: list[Step]) -> list[str]:
    """What is left to ask after each hop but the last: the question this writer gives the rest of the path
    from the entity reached ("Which currency does the country whose capital is Lima use?" leaves "Which
    currency does Peru use?" after one hop), or the next relation's sentence where no question can be written."""
    nodes = graph.path_nodes(start, steps)
    left = []
    for k in range(1, len(steps)):
        question = write_question(graph, nodes[k], steps[k:])
        left.append(question if question is not None else relation_sentence(graph, steps[k].relation) + ".")
    return left


def filled_questions(graph: RelationGraph, start: int, steps: list[Step]) -> list[str] | None:
    """The path's question after each hop but the last, with every bridge reached so far named in the question's
    own sentences ("Yukon Territory is a state or province of Canada, which shares a land border with a second
    country. Which currency does the second country use?"): each is the one before with one name written in, an
    edit a small model copies more reliably than ``remaining_questions``' rewrite. None when the writer cannot
    write the path's question."""
    left = [write_question(graph, start, steps, known=k) for k in range(1, len(steps))]
    return None if any(q is None for q in left) else left  # type: ignore[return-value]


def sample_template_path(graph: RelationGraph, seed: int, hops: int, allowed: set[int],
                         rng: np.random.Generator, tries: int = 20) -> list[Step] | None:
    """A walk of ``hops`` steps inside the seed subgraph whose relation chain has a unique answer."""
    for _ in range(tries):
        steps = graph.random_walk(seed, hops, rng, allowed)
        if steps is None:
            continue
        nodes = graph.path_nodes(seed, steps)
        if graph.follow(seed, graph.chain(steps), cap=1) == {nodes[-1]}:
            return steps
    return None
