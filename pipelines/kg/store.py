"""KG storage: artifacts/kg/<domain>/{entities,relations}.parquet + manifest.json."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pipelines.errors import ArtifactMissingError
from pipelines.kg.journal import settle_killed_import
from pipelines.kg.model import ENTITY_SCHEMA, RELATION_SCHEMA, KnowledgeGraph
from pipelines.manifest import read_manifest

ENTITIES_FILE = "entities.parquet"
RELATIONS_FILE = "relations.parquet"


def write_kg(kg: KnowledgeGraph, folder: Path) -> list[Path]:
    """Write the two tables; same graph, same bytes (no timestamps in the files)."""
    entities, relations = folder / ENTITIES_FILE, folder / RELATIONS_FILE
    kg.entities.write_parquet(entities, compression="zstd", statistics=False)
    kg.relations.write_parquet(relations, compression="zstd", statistics=False)
    return [entities, relations]


def read_kg(folder: Path) -> KnowledgeGraph:
    """The KG built in ``folder`` (``artifacts/kg/<domain>``), after replaying an import of that domain killed
    while it swapped its folders into place (pipelines.kg.journal.settle_killed_import): never a half-swapped
    or uncommitted one."""

    settle_killed_import(folder.parent.parent, folder.name)
    manifest = read_manifest(folder)
    if manifest is None or not (folder / ENTITIES_FILE).is_file():
        raise ArtifactMissingError(f"{folder}: no built knowledge graph here (run `omne kg build` first)")
    entities = pl.read_parquet(folder / ENTITIES_FILE).cast(ENTITY_SCHEMA)
    relations = pl.read_parquet(folder / RELATIONS_FILE).cast(RELATION_SCHEMA)
    return KnowledgeGraph(entities=entities, relations=relations,
                          directed=bool(manifest.metadata.get("directed", True)))
