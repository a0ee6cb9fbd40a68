"""Helpers the kg_assets exporters share.

Why this exists: every exporter writes the same committed file formats (JSONL rows, SOURCE.md with
package versions, licences and data-file hashes) and runs the same graph check (unique names,
known endpoints, components, eligible seeds: entities whose SEED_HOPS-hop ball holds
SEED_MIN..SEED_MAX entities).  One copy keeps those rules the same in every domain.  The exporters
are run as scripts (``python kg_assets/exporters/<domain>.py``), so their folder is on sys.path and
``from _shared import ...`` finds this module.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import networkx as nx

# Ball-size window for "eligible seeds" in the final check: the same in every domain.
SEED_HOPS, SEED_MIN, SEED_MAX = 3, 20, 400


def normalize_name(name: str) -> str:
    """Key under which entity names must be unique: NFKC, casefold, collapsed spaces, no quotes."""
    text = unicodedata.normalize("NFKC", name).casefold()
    text = re.sub(r"[\"'`‘’“”]", "", text)
    return re.sub(r"\s+", " ", text).strip()


def normalize_name_ends(name: str) -> str:
    """The uniqueness key of the ICD-10-CM and ISIC exporters: like normalize_name, but quotes are
    stripped only at the ends (their names carry meaningful inner quotes and apostrophes)."""
    text = unicodedata.normalize("NFKC", name).casefold()
    text = re.sub(r"\s+", " ", text).strip()
    return text.strip("\"'`‘’“”").strip()


def clean(text: Any) -> str:
    """Collapse whitespace of a source field (None and non-strings allowed, None reads as "")."""
    return re.sub(r"\s+", " ", str(text or "")).strip()


def join_list(items: list[str], limit: int | None = None) -> str:
    """'a', 'a and b', 'a, b and c'; past ``limit`` items, 'a, b and N more' (descriptions stay short)."""
    if limit is not None and len(items) > limit:
        return ", ".join(items[:limit]) + f" and {len(items) - limit} more"
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> None:
    """One JSON object a line, UTF-8 without escaping, ``\\n`` endings: the committed byte format."""
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def package_dir(module: ModuleType) -> Path:
    """The folder of an installed package, where its data files lie."""
    return Path(module.__file__ or "").resolve().parent


def file_sha256(path: Path) -> str:
    """SHA-256 of one file's bytes, recorded in SOURCE.md so a regenerated graph can be traced to its data."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files_sha256(paths: list[Path]) -> str:
    """One SHA-256 over several files (file name, a NUL byte, then the content, file after file), for
    data spread over many files that SOURCE.md lists as one row."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def licence(package: str) -> str:
    """The licence an installed distribution declares (newer License-Expression first)."""
    meta = metadata.metadata(package)
    return meta.get("License-Expression") or meta.get("License") or "unknown"


def tally(values: Iterable[str]) -> dict[str, int]:
    """Counts by value, sorted by value: the order the printed report and SOURCE.md tables use."""
    return dict(sorted(Counter(values).items()))


def check_names_and_endpoints(entities: list[dict[str, str]], triples: list[dict[str, str]],
                              key: Any = normalize_name) -> None:
    """The integrity rules of every graph: names unique under ``key``, every triple endpoint an entity."""
    names = [e["name"] for e in entities]
    clashes = sorted(k for k, c in Counter(key(n) for n in names).items() if c > 1)
    assert not clashes, f"entity names collide after normalisation: {clashes[:5]}"
    known = set(names)
    missing = sorted({x for t in triples for x in (t["head"], t["tail"]) if x not in known})
    assert not missing, f"triple endpoints without entity: {missing[:5]}"


def seed_balls(entities: list[dict[str, str]], triples: list[dict[str, str]]
               ) -> tuple[nx.Graph, dict[str, int], list[int]]:
    """The undirected graph of the triples, the SEED_HOPS-hop ball size of each entity (by name, in
    name order) and the component sizes, largest first: what the seed-eligibility report counts."""
    names = sorted({e["name"] for e in entities})
    graph = nx.Graph()
    graph.add_nodes_from(names)
    graph.add_edges_from((t["head"], t["tail"]) for t in triples)
    ball = {n: len(nx.single_source_shortest_path_length(graph, n, cutoff=SEED_HOPS)) for n in names}
    components = sorted((len(c) for c in nx.connected_components(graph)), reverse=True)
    return graph, ball, components


def eligible(ball: dict[str, int]) -> list[str]:
    """Entities whose ball size lies in the seed window SEED_MIN..SEED_MAX."""
    return [n for n, s in ball.items() if SEED_MIN <= s <= SEED_MAX]


def count_tables(numbers: dict[str, Any], type_meaning: dict[str, str], relation_meaning: dict[str, str],
                 source: str) -> list[str]:
    """SOURCE.md's two tables: entities by type and triples by relation, each with its meaning;
    ``source`` names what the head -> tail column cites (e.g. "source field")."""
    lines = ["| entity type | count | what |", "|---|---:|---|"]
    lines += [f"| {t} | {c:,} | {type_meaning[t]} |" for t, c in numbers["entities_by_type"].items()]
    lines += ["", f"| relation | count | head -> tail ({source}) |", "|---|---:|---|"]
    lines += [f"| {r} | {c:,} | {relation_meaning[r]} |" for r, c in numbers["triples_by_relation"].items()]
    return lines


# Nodes before naming (geography, aviation): every entity has a stable key; names are assigned once all are known.


@dataclass
class Node:
    """One entity: a stable key, its plain name, type and description, and qualifiers for clashes."""

    key: str
    name: str
    etype: str
    description: str
    # Tried in order when the plain name clashes (see assign_names).
    qualified: list[str] = field(default_factory=list)
    # Larger wins a clash among nodes of the same type (e.g. population).
    weight: float = 0.0


@dataclass
class Graph:
    """Nodes keyed by their stable key; edges (head key, relation, tail key) -> sentence template."""

    nodes: dict[str, Node] = field(default_factory=dict)
    edges: dict[tuple[str, str, str], str] = field(default_factory=dict)
    # Data observations for SOURCE.md, by topic.
    notes: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def note(self, topic: str, text: str) -> None:
        self.notes[topic].append(text)

    def add_node(self, node: Node) -> None:
        if node.key in self.nodes:
            raise ValueError(f"duplicate node key {node.key!r}")
        node.description = clean(node.description)
        self.nodes[node.key] = node

    def add_edge(self, head: str, relation: str, tail: str, template: str) -> None:
        """``template`` may use {head} and {tail}; they are filled with the final entity names."""
        if head == tail:
            raise ValueError(f"self loop on {head!r}")
        self.edges.setdefault((head, relation, tail), template)
