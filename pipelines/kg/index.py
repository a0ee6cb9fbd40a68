"""Entity index: a LanceDB table (id, name, description, text, vector) per domain.

It backs ``entity_matcher`` (cosine similarity of name embeddings, as the Omne-R1 paper) and the
fallback look-up of the other tools. Search is exact below ``ann_min_rows`` entities; above, an
IVF-PQ index is built and queries re-rank ``refine_factor`` x k candidates with exact distances.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
from pydantic import BaseModel

from pipelines.config import IndexParams
from pipelines.errors import ArtifactMissingError
from pipelines.kg.embed import Encoder
from pipelines.kg.model import KnowledgeGraph

os.environ.setdefault("LANCEDB_LOG", "error")  # lancedb logs a warning for every new table otherwise
os.environ.setdefault("LANCE_LOG", "error")

TABLE_NAME = "entities"


class EntityHit(BaseModel):
    id: int
    name: str
    description: str
    score: float  # cosine similarity


def entity_texts(kg: KnowledgeGraph, params: IndexParams) -> list[str]:
    """What is embedded per entity: its name (the Omne-R1 paper), or name and description."""
    names = kg.entities["name"].to_list()
    if params.text == "name":
        return names
    descriptions = kg.entities["description"].to_list()
    return [f"{n}: {d}" if d else n for n, d in zip(names, descriptions, strict=True)]


def index_table(kg: KnowledgeGraph, texts: list[str], vectors: np.ndarray) -> pa.Table:
    dim = vectors.shape[1]
    return pa.table({
        "id": pa.array(kg.entities["id"].to_numpy(), pa.int32()),
        "name": pa.array(kg.entities["name"].to_list(), pa.string()),
        "description": pa.array(kg.entities["description"].to_list(), pa.string()),
        "text": pa.array(texts, pa.string()),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()), dim),
    })


def table_content_hash(table: pa.Table) -> str:
    """A content hash of the index rows (Lance file names are random, so the folder bytes are not)."""
    digest = hashlib.sha256()
    for column in ("id", "name", "text"):
        digest.update("\x1f".join(map(str, table.column(column).to_pylist())).encode())
    vectors = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    digest.update(np.ascontiguousarray(vectors, dtype=np.float32).tobytes())
    return digest.hexdigest()


def write_index(folder: Path, table: pa.Table, params: IndexParams) -> bool:
    """Create the LanceDB table; returns whether an ANN index was built."""
    import lancedb  # imported on use: it costs seconds, and Dagster loads this module in every process

    db = lancedb.connect(folder)
    lance_table = db.create_table(TABLE_NAME, data=table, mode="overwrite")
    if table.num_rows < params.ann_min_rows:
        return False
    dim = table.schema.field("vector").type.list_size
    lance_table.create_index(metric="cosine", index_type="IVF_PQ",
                             num_partitions=max(1, int(np.sqrt(table.num_rows))),
                             num_sub_vectors=max(1, dim // 16), vector_column_name="vector")
    return True


class EntityIndex:
    """Read side of the index: nearest entities to a text or a vector."""

    def __init__(self, folder: Path, params: IndexParams, encoder: Encoder | None = None) -> None:
        if not (folder / f"{TABLE_NAME}.lance").is_dir():
            raise ArtifactMissingError(f"{folder}: no entity index here (run `omne kg index` first)")
        self.params = params
        import lancedb

        self.table = lancedb.connect(folder).open_table(TABLE_NAME)
        self.encoder = encoder or Encoder(params)
        self.has_ann = bool(self.table.list_indices())

    def search_vector(self, vector: np.ndarray, k: int = 5) -> list[EntityHit]:
        return self.search_vectors(vector[None, :], k)[0]

    def search_vectors(self, vectors: np.ndarray, k: int = 5) -> list[list[EntityHit]]:
        """The ``k`` nearest entities of each row of ``vectors``, in one LanceDB query (a flat search scans the
        table once for all of them: 500 lookups in 0.14 s instead of 2.6 s one by one)."""
        query = self.table.search(vectors.astype(np.float32), vector_column_name="vector").distance_type("cosine")
        if self.has_ann:
            query = query.nprobes(self.params.ann_nprobes).refine_factor(self.params.ann_refine_factor)
        rows = query.select(["id", "name", "description", "_distance"]).limit(k).to_list()
        hits: list[list[EntityHit]] = [[] for _ in range(len(vectors))]
        for r in sorted(rows, key=lambda r: (r.get("query_index", 0), r["_distance"])):
            hits[r.get("query_index", 0)].append(EntityHit(id=r["id"], name=r["name"], description=r["description"],
                                                           score=round(1.0 - float(r["_distance"]), 6)))
        return hits

    def search(self, text: str, k: int = 5) -> list[EntityHit]:
        return self.search_vector(self.encoder.encode([text])[0], k)


def self_retrieval_recall(index: EntityIndex, kg: KnowledgeGraph, sample: int, seed: int = 0) -> dict[str, float]:
    """Recall@1 of looking up sampled entities by their name: the index must find what the KG holds."""
    n = kg.num_entities
    if n == 0:
        return {"recall_at_1": 0.0, "sampled": 0}
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.choice(n, size=min(sample, n), replace=False))
    names = kg.entities["name"].gather(ids).to_list()
    found = index.search_vectors(index.encoder.encode(names), k=1)
    hits = sum(int(bool(top) and top[0].id == int(entity_id)) for entity_id, top in zip(ids, found, strict=True))
    return {"recall_at_1": round(hits / len(ids), 4), "sampled": int(len(ids))}
