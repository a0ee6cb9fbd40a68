"""The knowledge-graph data model: raw records from an importer, and the merged, id-indexed graph.

Entities are identified by a normalised key (NFKC, casefold, collapsed whitespace, stripped
quotes), so that "Carbon", " carbon " and '"CARBON"' are one entity; ids are assigned in key order
so that the same sources always give the same ids.
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
from scipy import sparse

from pipelines.errors import KGSourceError

_QUOTES = "\"'`\u2018\u2019\u201c\u201d\u00ab\u00bb\u201e\u201a"
_SPACES = re.compile(r"\s+")
_LINE_ENDS = re.compile(r"\r\n?|\n")

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
    object is an error naming the file and the line.

    Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` (which JSON never allows inside a string), not at the other breaks
    of ``str.splitlines``: a raw U+2028 or U+0085, which JSON allows inside a string, does not split a record.
    A line nested too deeply for Python's JSON reader, a number with more digits than Python converts, or a
    lone surrogate escape (``"\\ud800"``, not UTF-8 text) is an error naming the line too.
    """
    records = []
    for number, line in enumerate(_LINE_ENDS.split(text), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise KGSourceError(f"{path}: line {number} is not valid JSON: {exc.msg} (column {exc.colno})") from None
        except RecursionError:
            raise KGSourceError(f"{path}: line {number} nests arrays or objects too deeply to be read "
                                "(a record holds names, types, descriptions and a weight)") from None
        except ValueError as exc:  # int("1" * 5000): Python refuses to convert integer strings of over 4300 digits
            if "integer string conversion" not in str(exc):
                raise
            raise KGSourceError(f"{path}: line {number} holds a number of more than {sys.get_int_max_str_digits()} "
                                "digits, more than Python converts; write it as a string or a shorter number") from None
        if not isinstance(record, dict):
            raise KGSourceError(f"{path}: line {number} is a JSON {type(record).__name__}, expected an object")
        if "\\u" in line and _lone_surrogate(record):
            raise KGSourceError(f"{path}: line {number} holds a lone surrogate escape (such as \\ud800), which is "
                                "not a character and cannot be stored as UTF-8 text")
        records.append((number, record))
    return records


def _lone_surrogate(record: dict) -> bool:
    """Whether a decoded JSON value holds a lone UTF-16 surrogate (from an escape like ``\\udc80``)."""
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    except (RecursionError, ValueError):  # too deep to re-encode: the importer reports the nesting itself
        return False
    return False


@dataclass(frozen=True)
class RawGraph:
    """Records as an importer read them; ``origin`` says where each came from (file:line) for errors.

    ``notes``: what the importer changed to fit the limits (over-long descriptions, types and labels truncated),
    one line each naming the file and the records; `omne kg import` prints them as warnings.
    """

    entities: pl.DataFrame  # RAW_ENTITY_SCHEMA
    relations: pl.DataFrame  # RAW_RELATION_SCHEMA
    source: str
    notes: tuple[str, ...] = field(default=(), kw_only=True)


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
    # an undirected edge is stored once, in the orientation it was first written (when/then, not min_horizontal:
    # polars 1.44 gives min_horizontal of the one-value columns a join with a one-entity table makes one row)
    src, dst = pl.col("src"), pl.col("dst")
    swap = src.is_null() | (dst.is_not_null() & (dst < src))
    pair = (pl.when(swap).then(dst).otherwise(src), pl.when(swap).then(src).otherwise(dst)) if not directed else \
        (src, dst)
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
