"""A LightRAG rendering of a triples domain: the graph LightRAG would have written for the same facts.

The agent is trained on clean exports of structured data (short relation labels, specific types), but the
graphs users bring are built by LightRAG from text (docs/kg.md, "LightRAG renderings"). A rendering keeps
the facts and changes only their shape, the way LightRAG writes them:

- names in upper case (LightRAG's entity ids), types reduced to LightRAG's generic ones
  (``ORGANIZATION``, ``PERSON``, ``GEO``, ``EVENT``, ``CATEGORY``);
- relations without a label: each edge carries a description sentence that names both ends in the text's
  own casing, a comma-joined keyword list and a weight (LightRAG's strength, summed over merged records);
- undirected edges: two facts between the same pair merge into one edge, their descriptions joined with
  ``<SEP>``, as LightRAG merges what several chunks said;
- entity descriptions joined with ``<SEP>``: the entity's own description and a sentence from a second
  "chunk" (its first relation's sentence).

The rendering is a networkx graph with LightRAG's attribute names, read back by the same importer as a
GraphML file (``pipelines.kg.importers.lightrag_records``); ``omne kg render-lightrag`` writes it as one.
"""

from __future__ import annotations

import hashlib
import zlib
from pathlib import Path

import networkx as nx

from pipelines.errors import KGSourceError
from pipelines.kg.model import json_records
from pipelines.text.names import STOPWORDS
from pipelines.text.phrases import PHRASES_FILE, label_statement, read_lexicon

LIGHTRAG_SEP = "<SEP>"
TRIPLES_FILE = "triples.jsonl"
ENTITIES_FILE = "entities.jsonl"

# LightRAG's default entity types (its extraction prompt's list), and which specific types fall into each;
# every other type is a CATEGORY, as LightRAG's extraction files whatever is not a person, place,
# organisation or event.
GENERIC_TYPES = ("ORGANIZATION", "PERSON", "GEO", "EVENT", "CATEGORY")
_TYPE_WORDS = {
    "PERSON": {"person", "people", "discoverer", "scientist", "author", "researcher", "human"},
    "ORGANIZATION": {"organization", "organisation", "company", "supplier", "agency", "institution",
                     "university", "department", "vendor", "manufacturer"},
    "GEO": {"country", "city", "subdivision", "region", "subregion", "continent", "territory", "airport",
            "state", "province", "place", "location", "area", "zone"},
    "EVENT": {"event", "decay", "war", "battle", "election", "conference"},
}


def generic_type(entity_type: str) -> str:
    """The LightRAG type an extraction would give an entity of ``entity_type`` ("time zone" -> GEO)."""
    words = set(entity_type.lower().replace("_", " ").split())
    for generic, members in _TYPE_WORDS.items():
        if words & members:
            return generic
    return "CATEGORY"


def lightrag_name(name: str) -> str:
    """An entity id as LightRAG writes it: the extracted name in upper case."""
    return " ".join(name.split()).upper()


def _stable(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def _keywords(label: str, tail_type: str) -> str:
    """LightRAG's keyword list of a relation: its content words, then what kind of thing it leads to."""
    words = [w for w in label.replace("_", " ").lower().split() if w not in STOPWORDS]
    words += [tail_type.lower()] if tail_type else []
    return ", ".join(dict.fromkeys(w for w in words if w)) or "related"


def _sentence(statement: str, head: str, tail: str) -> str:
    text = statement.replace("{head}", head).replace("{tail}", tail).strip()  # names keep their case
    return text if text.endswith((".", "!", "?")) else text + "."


def _read_jsonl(path: Path) -> list[dict]:
    return [record for _, record in json_records(path, path.read_text(encoding="utf-8"))]


def render_lightrag(folder: Path) -> nx.Graph:
    """The LightRAG graph of the triples domain whose files are in ``folder``: ``triples.jsonl`` (head,
    relation, tail, optional description), optional ``entities.jsonl`` (name, type, description) and
    ``phrases.yaml`` (the statement each relation label is said with; else the label's own statement)."""
    triples_path = folder / TRIPLES_FILE
    if not folder.is_dir():
        raise KGSourceError(f"{folder}: the folder of the domain to render is not found")
    if not triples_path.is_file():
        raise KGSourceError(f"{folder}: no {TRIPLES_FILE} in it (a LightRAG rendering reads a triples domain's "
                            "folder: triples.jsonl, optional entities.jsonl and phrases.yaml)")
    lexicon = read_lexicon(folder / PHRASES_FILE)
    entities_path = folder / ENTITIES_FILE
    entities = {str(row.get("name", "")).strip(): row for row in
                (_read_jsonl(entities_path) if entities_path.is_file() else [])}
    triples = _read_jsonl(triples_path)
    graph = nx.Graph()
    chunk = folder.name

    def node(name: str) -> str:
        node_id = lightrag_name(name)
        if node_id not in graph:
            row = entities.get(name, {})
            own = " ".join(str(row.get("description") or "").split())
            graph.add_node(node_id, entity_id=node_id, entity_type=generic_type(str(row.get("type") or "")),
                           description=own or f"{name} is an entity of the {chunk} text.",
                           source_id=f"chunk-{hashlib.md5(f'{chunk}/{name}'.encode()).hexdigest()}",
                           _first_sentence="")
        return node_id

    for number, row in enumerate(triples, start=1):
        head, label, tail = (str(row.get(k) or "").strip() for k in ("head", "relation", "tail"))
        if not head or not label or not tail:
            raise KGSourceError(f"{triples_path}: line {number} has an empty head, relation or tail")
        if head == tail:
            continue
        u, v = node(head), node(tail)
        phrases = lexicon.relations.get(label)
        sentence = _sentence(phrases.statement if phrases else label_statement(label), head, tail)
        descriptions = [sentence]
        original = " ".join(str(row.get("description") or "").split())
        if original and original != sentence and _stable(f"{head}|{label}|{tail}") % 2 == 0:
            descriptions.append(original)  # a second chunk saying the same fact in other words
        tail_type = str(entities.get(tail, {}).get("type") or "")
        keywords = _keywords(label, tail_type)
        weight = float(5 + _stable(f"{label}|{head}|{tail}") % 6)
        if graph.has_edge(u, v):  # LightRAG merges what several chunks said of the same pair
            edge = graph.edges[u, v]
            edge["description"] += LIGHTRAG_SEP + LIGHTRAG_SEP.join(descriptions)
            edge["keywords"] = ", ".join(dict.fromkeys([*edge["keywords"].split(", "), *keywords.split(", ")]))
            edge["weight"] += weight
        else:
            graph.add_edge(u, v, description=LIGHTRAG_SEP.join(descriptions), keywords=keywords, weight=weight,
                           source_id=graph.nodes[u]["source_id"])
        for end in (u, v):
            if not graph.nodes[end]["_first_sentence"]:
                graph.nodes[end]["_first_sentence"] = sentence
    if graph.number_of_nodes() == 0:
        raise KGSourceError(f"{triples_path}: no triples to render")
    for _, attrs in graph.nodes(data=True):
        extra = attrs.pop("_first_sentence")
        if extra:
            attrs["description"] += LIGHTRAG_SEP + extra
    return graph


def write_lightrag_graphml(graph: nx.Graph, path: Path) -> None:
    """The rendering as the GraphML file LightRAG keeps in its working directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    nx.write_graphml(graph, path)
