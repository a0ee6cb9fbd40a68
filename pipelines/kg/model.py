"""The knowledge-graph data model: raw records from an importer, and the merged, id-indexed graph.

Entities are identified by a normalised key (NFKC, casefold, collapsed whitespace, stripped
quotes), so that "Carbon", " carbon " and '"CARBON"' are one entity; ids are assigned in key order
so that the same sources always give the same ids.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from scipy import sparse

from pipelines.errors import KGSourceError

_QUOTES = "\"'`\u2018\u2019\u201c\u201d\u00ab\u00bb\u201e\u201a"
_SPACES = re.compile(r"\s+")

ENTITY_SCHEMA = {"id": pl.Int32, "name": pl.String, "key": pl.String, "type": pl.String,
                 "description": pl.String, "source_ids": pl.List(pl.String)}
RELATION_SCHEMA = {"src": pl.Int32, "dst": pl.Int32, "keywords": pl.String, "description": pl.String,
                   "weight": pl.Float64}
RAW_ENTITY_SCHEMA = {"name": pl.String, "type": pl.String, "description": pl.String, "source_id": pl.String,
                     "origin": pl.String}
RAW_RELATION_SCHEMA = {"head": pl.String, "tail": pl.String, "keywords": pl.String, "description": pl.String,
                       "weight": pl.Float64, "origin": pl.String}


def normalise_key(name: str) -> str:
    """The look-up key of an entity name: NFKC, casefold, collapsed whitespace, outer quotes stripped."""
    text = _SPACES.sub(" ", unicodedata.normalize("NFKC", name))
    text = text.strip(_QUOTES + " ")
    return text.casefold()


# an entity named with its type, as node_info lists a neighbour (tools.neighbor_types): "Sun [star]"; square
# brackets, as round ones end many names ("Latakia (subdivision of Syria)") and square ones almost none
TYPED_NAME = re.compile(r"^\s*(?P<name>.*?\S)\s+\[(?P<type>[^\[\]]+)\]\s*$")


def shown_type(entity_type: str | None) -> str | None:
    """The type written beside an entity's name ("Russia [territory]"); None for an untyped one, shown bare."""
    kind = (entity_type or "").strip()
    return kind if kind and kind.lower() not in {"unknown", "none"} else None


def json_records(path: Path, text: str) -> list[tuple[int, dict]]:
    """The objects of a JSON-lines text with their line numbers (blank lines skipped); a line that is not a JSON
    object is an error naming the file and the line."""
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise KGSourceError(f"{path}: line {number} is not valid JSON: {exc.msg}") from None
        if not isinstance(record, dict):
            raise KGSourceError(f"{path}: line {number} is a JSON {type(record).__name__}, expected an object")
        records.append((number, record))
    return records


@dataclass(frozen=True)
class RawGraph:
    """Records as an importer read them; ``origin`` says where each came from (file:line) for errors."""

    entities: pl.DataFrame  # RAW_ENTITY_SCHEMA
    relations: pl.DataFrame  # RAW_RELATION_SCHEMA
    source: str


@dataclass(frozen=True)
class KnowledgeGraph:
    entities: pl.DataFrame  # ENTITY_SCHEMA, row i has id i
    relations: pl.DataFrame  # RELATION_SCHEMA
    directed: bool

    @property
    def num_entities(self) -> int:
        return self.entities.height

    def adjacency(self) -> sparse.csr_matrix:
        """Undirected 0/1 adjacency without self loops: what BFS, components and degrees use.

        Relations whose ends are not entity ids are left out (the dangling-edge check reports them).
        """
        n = self.num_entities
        src = self.relations["src"].fill_null(-1).to_numpy()
        dst = self.relations["dst"].fill_null(-1).to_numpy()
        keep = (src != dst) & (src >= 0) & (src < n) & (dst >= 0) & (dst < n)
        rows = np.concatenate([src[keep], dst[keep]])
        cols = np.concatenate([dst[keep], src[keep]])
        matrix = sparse.csr_matrix((np.ones(rows.size, dtype=np.int8), (rows, cols)), shape=(n, n))
        matrix.data[:] = 1  # duplicates summed by the constructor: back to 0/1
        return matrix


def _keys(names: pl.Series) -> pl.Series:
    """Normalised keys of a name column, computing each distinct name once (names repeat a lot)."""
    distinct = names.unique()
    table = pl.DataFrame({"name": distinct, "key": [normalise_key(n) for n in distinct.to_list()]},
                         schema={"name": pl.String, "key": pl.String})
    return names.to_frame("name").join(table, on="name", how="left", maintain_order="left")["key"]


def assemble_graph(raw: RawGraph, *, directed: bool) -> KnowledgeGraph:
    """Merge raw records into a KG: one entity per key, one relation per (src, dst, keywords)."""
    declared = raw.entities.with_columns(_keys(raw.entities["name"]))
    endpoints = pl.concat([
        raw.relations.select(name=pl.col("head"), origin=pl.col("origin")),
        raw.relations.select(name=pl.col("tail"), origin=pl.col("origin")),
    ])
    implied = endpoints.with_columns(
        type=pl.lit(""), description=pl.lit(""), source_id=pl.lit(None, dtype=pl.String),
    ).select(RAW_ENTITY_SCHEMA.keys())
    implied = implied.with_columns(_keys(implied["name"]))
    records = pl.concat([declared, implied])
    empty = records.filter(pl.col("key") == "")
    if empty.height:
        shown = ", ".join(f"{o} ({n!r})" for n, o in empty.select("name", "origin").head(5).iter_rows())
        raise KGSourceError(f"{raw.source}: {empty.height} record(s) with an empty entity name: {shown}")

    entities = (
        records.group_by("key", maintain_order=True)
        .agg(
            name=pl.col("name").first().str.strip_chars(),
            type=pl.col("type").filter(pl.col("type") != "").first(),
            description=pl.col("description").filter(pl.col("description") != "").unique(maintain_order=True),
            source_ids=pl.col("source_id").drop_nulls().unique(maintain_order=True),
        )
        .sort("key")
        .with_columns(
            id=pl.int_range(pl.len(), dtype=pl.Int32),
            type=pl.col("type").fill_null(""),
            description=pl.col("description").list.join("\n"),
        )
        .select(ENTITY_SCHEMA.keys())
    )
    ids = entities.select("key", "id")
    relations = (
        raw.relations.with_columns(_keys(raw.relations["head"]).alias("hkey"),
                                   _keys(raw.relations["tail"]).alias("tkey"))
        .join(ids.rename({"key": "hkey", "id": "src"}), on="hkey", how="left")
        .join(ids.rename({"key": "tkey", "id": "dst"}), on="tkey", how="left")
    )
    # an undirected edge is stored once, in the orientation it was first written
    pair = (pl.min_horizontal("src", "dst"), pl.max_horizontal("src", "dst")) if not directed else \
        (pl.col("src"), pl.col("dst"))
    relations = (
        relations.with_columns(lo=pair[0], hi=pair[1])
        .group_by("lo", "hi", "keywords", maintain_order=True)
        .agg(src=pl.col("src").first(), dst=pl.col("dst").first(),
             description=pl.col("description").filter(pl.col("description") != "").unique(maintain_order=True),
             weight=pl.col("weight").sum())
        .with_columns(description=pl.col("description").list.join("\n"))
        .sort("src", "dst", "keywords")
        .select(RELATION_SCHEMA.keys())
        .cast(RELATION_SCHEMA)
    )
    return KnowledgeGraph(entities=entities.cast(ENTITY_SCHEMA), relations=relations, directed=directed)
