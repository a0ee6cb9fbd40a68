"""Importers: turn a user's KG file into raw records (``RawGraph``), with errors that name the record.

Supported sources: triple tables (CSV, TSV, parquet, JSON lines) with optional entity tables,
LightRAG GraphML files, LightRAG working directories (which hold such a GraphML file), and LightRAG
renderings of a triples domain (pipelines.kg.lightrag_render). Plain
text (kind ``text``) needs an LLM and is read by pipelines.kg.extract instead.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import networkx as nx
import polars as pl

from pipelines.domains import SourceSpec
from pipelines.errors import KGSourceError
from pipelines.kg.lightrag_render import LIGHTRAG_SEP, render_lightrag
from pipelines.kg.model import RAW_ENTITY_SCHEMA, RAW_RELATION_SCHEMA, RawGraph, json_records

LIGHTRAG_GRAPHML = "graph_chunk_entity_relation.graphml"
TEXT_SUFFIXES = {".csv", ".tsv", ".txt", ".jsonl", ".ndjson"}
TABLE_SUFFIXES = TEXT_SUFFIXES | {".parquet"}

# Accepted column names, first is canonical.
TRIPLE_COLUMNS = {
    "head": ("head", "subject", "source", "src", "h"),
    "relation": ("relation", "predicate", "rel", "r", "keywords"),
    "tail": ("tail", "object", "target", "dst", "t"),
    "description": ("description", "relation_description"),
    "weight": ("weight",),
    "head_type": ("head_type",),
    "tail_type": ("tail_type",),
    "head_description": ("head_description",),
    "tail_description": ("tail_description",),
}
ENTITY_COLUMNS = {
    "name": ("name", "entity", "entity_id", "entity_name"),
    "type": ("type", "entity_type"),
    "description": ("description",),
}


def _require_file(path: Path, what: str) -> None:
    if not path.exists():
        raise KGSourceError(f"{path}: {what} not found")
    if not path.is_file():
        raise KGSourceError(f"{path}: {what} is not a file")
    if path.stat().st_size == 0:
        raise KGSourceError(f"{path}: {what} is empty")


def _check_utf8(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise KGSourceError(
            f"{path}: line {line} is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "re-encode the file as UTF-8") from None


def _read_jsonl(path: Path, text: str) -> pl.DataFrame:
    rows, origins = [], []
    for number, record in json_records(path, text):
        rows.append({k: (v if v is None or isinstance(v, (str, int, float)) else json.dumps(v))
                     for k, v in record.items()})
        origins.append(f"{path.name}:{number}")
    if not rows:
        raise KGSourceError(f"{path}: no records")
    columns = sorted({k for row in rows for k in row})
    frame = pl.DataFrame({c: [row.get(c) for row in rows] for c in columns}, strict=False)
    return frame.cast(pl.String).with_columns(pl.Series("origin", origins))


def _csv_origins(path: Path, text: str, height: int) -> pl.Series:
    """file:line per row when every record is one line, else file:row N (quoted multi-line fields)."""
    lines = text.rstrip("\r\n").count("\n") + 1
    if lines == height + 1:
        return pl.Series("origin", [f"{path.name}:{i + 2}" for i in range(height)])
    return pl.Series("origin", [f"{path.name}:row {i + 1}" for i in range(height)])


def read_table(path: Path, what: str = "table") -> pl.DataFrame:
    """Read a CSV/TSV/parquet/JSON-lines table as strings, plus an ``origin`` column (file:line)."""
    _require_file(path, what)
    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise KGSourceError(f"{path}: unsupported {what} format {suffix!r}; use one of {sorted(TABLE_SUFFIXES)}")
    if suffix == ".parquet":
        try:
            frame = pl.read_parquet(path)
        except Exception as exc:  # polars raises several error types for corrupt files
            raise KGSourceError(f"{path}: not a readable parquet file: {exc}") from None
        origins = pl.Series("origin", [f"{path.name}:row {i + 1}" for i in range(frame.height)])
    else:
        text = _check_utf8(path)
        if suffix in {".jsonl", ".ndjson"}:
            return _read_jsonl(path, text)
        separator = "," if suffix == ".csv" else "\t"
        try:
            frame = pl.read_csv(path, separator=separator, infer_schema=False,
                                quote_char='"' if separator == "," else None)
        except Exception as exc:
            raise KGSourceError(f"{path}: not a readable {'CSV' if separator == ',' else 'TSV'} file: {exc}") from None
        origins = _csv_origins(path, text, frame.height)
    if frame.height == 0:
        raise KGSourceError(f"{path}: no records (only a header?)")
    return frame.cast(pl.String).with_columns(origins)


def _canonical_columns(frame: pl.DataFrame, spec: dict[str, tuple[str, ...]], path: Path,
                       required: tuple[str, ...]) -> pl.DataFrame:
    lower = {c.lower().strip(): c for c in frame.columns}
    chosen: dict[str, str] = {}
    for canonical, aliases in spec.items():
        for alias in aliases:
            if alias in lower:
                chosen[canonical] = lower[alias]
                break
    missing = [c for c in required if c not in chosen]
    if missing:
        found = [c for c in frame.columns if c != "origin"]
        raise KGSourceError(f"{path}: missing column(s) {missing}; found {found}; "
                            f"accepted names: { {c: spec[c] for c in missing} }")
    return frame.select(*(pl.col(src).alias(dst) for dst, src in chosen.items()), pl.col("origin"))


def _reject_blank(frame: pl.DataFrame, columns: tuple[str, ...], path: Path) -> None:
    for column in columns:
        blank = frame.filter(pl.col(column).is_null() | (pl.col(column).str.strip_chars() == ""))
        if blank.height:
            where = ", ".join(blank["origin"].head(5).to_list())
            raise KGSourceError(f"{path}: {blank.height} record(s) with an empty '{column}': {where}")


def _weights(frame: pl.DataFrame, path: Path) -> pl.Series:
    """The weight column as floats (empty -> 1.0); a value that is not a finite number is an error
    (a NaN or infinite weight would poison every weighted path and score computed from it)."""
    raw = frame["weight"].str.strip_chars()
    weights = raw.cast(pl.Float64, strict=False)
    bad = frame.filter(weights.is_null() & raw.is_not_null() & (raw != ""))
    if bad.height:
        shown = ", ".join(f"{o} ({w!r})" for w, o in bad.select("weight", "origin").head(5).iter_rows())
        raise KGSourceError(f"{path}: {bad.height} record(s) with a non-numeric weight: {shown}")
    infinite = frame.filter(weights.is_nan() | weights.is_infinite())
    if infinite.height:
        shown = ", ".join(f"{o} ({w!r})" for w, o in infinite.select("weight", "origin").head(5).iter_rows())
        raise KGSourceError(f"{path}: {infinite.height} record(s) with a weight that is not finite "
                            f"(NaN or infinity): {shown}")
    return weights.fill_null(1.0)


def read_triples(path: Path, entities_path: Path | None = None) -> RawGraph:
    """Triples (head, relation, tail, optional descriptions/types/weight) and an optional entity table."""
    frame = _canonical_columns(read_table(path, "triples file"), TRIPLE_COLUMNS, path, ("head", "relation", "tail"))
    _reject_blank(frame, ("head", "relation", "tail"), path)
    weight = _weights(frame, path) if "weight" in frame.columns else pl.lit(1.0)
    relations = frame.select(
        head=pl.col("head"), tail=pl.col("tail"), keywords=pl.col("relation").str.strip_chars(),
        description=pl.col("description").fill_null("") if "description" in frame.columns else pl.lit(""),
        weight=weight, origin=pl.col("origin"),
    )
    endpoint_entities = [
        frame.select(name=pl.col(side),
                     type=pl.col(f"{side}_type").fill_null("") if f"{side}_type" in frame.columns else pl.lit(""),
                     description=(pl.col(f"{side}_description").fill_null("")
                                  if f"{side}_description" in frame.columns else pl.lit("")),
                     source_id=pl.lit(path.name), origin=pl.col("origin"))
        for side in ("head", "tail")
    ]
    tables = [read_entities(entities_path)] if entities_path else []
    entities = pl.concat([*tables, *(e.cast(RAW_ENTITY_SCHEMA) for e in endpoint_entities)])
    return RawGraph(entities=entities.cast(RAW_ENTITY_SCHEMA), relations=relations.cast(RAW_RELATION_SCHEMA),
                    source=str(path))


def read_entities(path: Path) -> pl.DataFrame:
    frame = _canonical_columns(read_table(path, "entities file"), ENTITY_COLUMNS, path, ("name",))
    _reject_blank(frame, ("name",), path)
    return frame.select(
        name=pl.col("name"),
        type=pl.col("type").fill_null("") if "type" in frame.columns else pl.lit(""),
        description=pl.col("description").fill_null("") if "description" in frame.columns else pl.lit(""),
        source_id=pl.lit(path.name), origin=pl.col("origin"),
    ).cast(RAW_ENTITY_SCHEMA)


def _split_sep(value: object) -> list[str]:
    return [part for part in (_unquoted(p) for p in str(value or "").split(LIGHTRAG_SEP)) if part]


def _unquoted(text: str) -> str:
    """A LightRAG value without the literal quotes its legacy format (2024) wrapped ids, types, descriptions and
    keywords in (``"SCROOGE"``, ``"PERSON"``; a malformed ``("GEO"`` too): quotes are LightRAG's, not the name's."""
    text = text.strip()
    stripped = text.lstrip('(').strip('"').strip()
    if text.startswith(('"', '("')) and (text.endswith('"') or text.startswith('("')) and stripped:
        return stripped
    return text


def read_lightrag_graphml(path: Path) -> RawGraph:
    """A LightRAG GraphML graph: node ids/entity_id are names; ``<SEP>`` joins multiple values."""
    _require_file(path, "GraphML file")
    _check_utf8(path)
    try:
        graph = nx.read_graphml(path)
    except ET.ParseError as exc:
        line, column = exc.position
        raise KGSourceError(f"{path}: malformed XML at line {line}, column {column}: {exc}") from None
    except (nx.NetworkXError, KeyError, ValueError) as exc:
        raise KGSourceError(f"{path}: not a valid GraphML graph: {exc}") from None
    return lightrag_records(graph, path)


def lightrag_records(graph: nx.Graph, path: Path) -> RawGraph:
    """The records of a graph in LightRAG's layout (node ids/entity_id are names; ``<SEP>`` joins multiple
    values): what a LightRAG GraphML file at ``path`` holds, or a LightRAG rendering of a domain there."""
    if graph.number_of_nodes() == 0:
        raise KGSourceError(f"{path}: the graph has no nodes")
    names: dict[object, str] = {}
    entity_rows = []
    for node, attrs in graph.nodes(data=True):
        name = _unquoted(str(attrs.get("entity_id") or node))
        if not name:
            raise KGSourceError(f"{path}: node {node!r} has an empty entity_id")
        names[node] = name
        types = _split_sep(attrs.get("entity_type"))
        sources = _split_sep(attrs.get("source_id"))
        entity_rows.append({"name": name, "type": types[0] if types else "",
                            "description": "\n".join(dict.fromkeys(_split_sep(attrs.get("description")))),
                            "source_id": sources, "origin": f"{path.name}:node {node}"})
    relation_rows = []
    for u, v, attrs in graph.edges(data=True):
        keywords = ",".join(dict.fromkeys(k.strip() for part in _split_sep(attrs.get("keywords"))
                                          for k in part.split(",") if k.strip()))
        try:
            weight = float(attrs.get("weight", 1.0))
        except (TypeError, ValueError):
            raise KGSourceError(f"{path}: edge {u!r}-{v!r} has a non-numeric weight {attrs.get('weight')!r}") from None
        if not math.isfinite(weight):
            raise KGSourceError(f"{path}: edge {u!r}-{v!r} has a weight that is not finite: {attrs.get('weight')!r}")
        relation_rows.append({"head": names[u], "tail": names[v], "keywords": keywords,
                              "description": "\n".join(dict.fromkeys(_split_sep(attrs.get("description")))),
                              "weight": weight, "origin": f"{path.name}:edge {u}-{v}"})
    entities = pl.DataFrame(entity_rows).explode("source_id") if entity_rows else pl.DataFrame()
    relations = pl.DataFrame(relation_rows, schema=RAW_RELATION_SCHEMA)
    return RawGraph(entities=entities.cast(RAW_ENTITY_SCHEMA).select(RAW_ENTITY_SCHEMA.keys()),
                    relations=relations, source=str(path))


def read_lightrag_workdir(path: Path) -> RawGraph:
    """A LightRAG working directory: its GraphML file holds the graph."""
    if not path.is_dir():
        raise KGSourceError(f"{path}: LightRAG working directory not found")
    graphml = path / LIGHTRAG_GRAPHML
    if not graphml.is_file():
        raise KGSourceError(f"{path}: no {LIGHTRAG_GRAPHML} in it (is this a LightRAG working directory?)")
    return read_lightrag_graphml(graphml)


def import_source(source: SourceSpec, root: Path) -> RawGraph:
    """Read a registry source with the importer of its kind."""
    path = root / source.path
    if source.kind == "triples":
        return read_triples(path, root / source.entities if source.entities else None)
    if source.kind == "lightrag_graphml":
        return read_lightrag_graphml(path)
    if source.kind == "lightrag_rendering":
        return lightrag_records(render_lightrag(path), path)
    if source.kind == "text":
        raise KGSourceError(f"{path}: a source of kind 'text' needs an LLM to become a graph: use "
                            "pipelines.kg.extract.extract_graph with a ChatClient (build_knowledge_graph does this)")
    return read_lightrag_workdir(path)
