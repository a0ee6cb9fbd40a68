"""KG triples (docs/evaluation.md, "Behaviour"): the triples a tool response lists (omne node_info, KG-R1
entity lists, search's "(head, relation, tail)" lines, JSON lists), a question's gold triples, and which of them an
episode names in its ``<think>`` text (EoG's gold-triple coverage and exploration efficiency).

Apart from :mod:`pipelines.eval.behaviour`, which averages these over a run, because RL rewards and the benches
parse tool responses and gold paths the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from itertools import combinations

from pipelines.eval.answers import _LIST_MARKER, _QUOTES
from pipelines.kg.model import TYPED_NAME, normalise_key
from pipelines.qa.models import GoldPath
from pipelines.text.names import mentions

Triple = tuple[str, str, str]

__all__ = ["Triple", "exploration_scores", "gold_triples", "parse_triples", "triple_named"]


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
