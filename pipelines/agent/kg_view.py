"""An in-memory, read-only view of one domain's KG and entity vectors, laid out for fast tool calls.

Relations are grouped per entity in CSR form (outgoing by src, incoming by dst, each in a fixed
order), names are looked up by normalised key, and the index vectors sit in one normalised matrix
so an exact top-k is a single matrix-vector product.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipelines.errors import ArtifactMissingError
from pipelines.kg.index import TABLE_NAME
from pipelines.kg.model import normalise_key
from pipelines.kg.store import read_kg
from pipelines.layout import index_dir, kg_dir
from pipelines.manifest import MANIFEST_NAME, read_manifest
from pipelines.text.phrases import edge_phrase, shown_keywords


def _grouped(keys: np.ndarray, order: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR pointers and relation indices grouped by ``keys`` (entity ids), keeping ``order`` within groups."""
    ordered = order[np.argsort(keys[order], kind="stable")]
    pointers = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=pointers[1:])
    return pointers, ordered


def manifest_signature(artifacts: Path, domain: str) -> str:
    """What changes when either artifact of a domain is rebuilt (cheap: file stats, no reading)."""
    parts = []
    for folder in (kg_dir(artifacts, domain), index_dir(artifacts, domain)):
        path = folder / MANIFEST_NAME
        stat = path.stat() if path.exists() else None
        parts.append(f"{path}:{stat.st_mtime_ns}:{stat.st_size}" if stat else f"{path}:missing")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


@dataclass
class DomainGraph:
    name: str
    directed: bool
    names: list[str]
    types: list[str]
    descriptions: list[str]
    key_to_id: dict[str, int]
    rel_src: np.ndarray
    rel_dst: np.ndarray
    rel_keywords: list[str]
    rel_keys: list[str]
    relation_key_set: frozenset[str]
    rel_descriptions: list[str]
    rel_phrased: np.ndarray  # bool per relation: its label is a phrase read from src to dst (``phrase_labels``)
    out_ptr: np.ndarray
    out_idx: np.ndarray
    in_ptr: np.ndarray
    in_idx: np.ndarray
    vectors: np.ndarray | None
    signature: str

    @classmethod
    def load(cls, artifacts: Path, domain: str, *, relation_phrases: bool = True) -> DomainGraph:
        """``relation_phrases``: an undirected graph's relations (LightRAG's, text extraction's: no label, a keyword
        list) are labelled with the phrase their description says them with (``phrase_labels``)."""
        signature = manifest_signature(artifacts, domain)
        kg = read_kg(kg_dir(artifacts, domain))
        entities, relations = kg.entities, kg.relations
        n = entities.height
        src = relations["src"].to_numpy().astype(np.int64)
        dst = relations["dst"].to_numpy().astype(np.int64)
        names = entities["name"].to_list()
        keywords = relations["keywords"].to_list()
        phrased = np.zeros(len(keywords), dtype=bool)
        if not kg.directed:  # LightRAG's merged keyword lists, cut to what the training graphs carry
            keywords = [shown_keywords(k) for k in keywords]
        if relation_phrases and not kg.directed:
            keywords, phrased = phrase_labels(names, src, dst, keywords, relations["description"].to_list())
        # within an entity: by relation label, then by the other end's name (deterministic, readable)
        name_rank = np.argsort(np.argsort(np.array(names, dtype=object), kind="stable"))
        label_rank = np.unique(np.array(keywords, dtype=object), return_inverse=True)[1]
        out_order = np.lexsort((name_rank[dst], label_rank))
        in_order = np.lexsort((name_rank[src], label_rank))
        out_ptr, out_idx = _grouped(src, out_order, n)
        in_ptr, in_idx = _grouped(dst, in_order, n)
        return cls(
            name=domain, directed=kg.directed, names=names, types=entities["type"].to_list(),
            descriptions=[d.replace("\n", " ") for d in entities["description"].to_list()],
            key_to_id=dict(zip(entities["key"].to_list(), range(n), strict=True)),
            rel_src=src, rel_dst=dst, rel_keywords=keywords,
            rel_keys=(rel_keys := [normalise_key(k) for k in keywords]),
            relation_key_set=frozenset(rel_keys),
            rel_descriptions=[d.replace("\n", " ") for d in relations["description"].to_list()],
            rel_phrased=phrased,
            out_ptr=out_ptr, out_idx=out_idx, in_ptr=in_ptr, in_idx=in_idx,
            vectors=_load_vectors(artifacts, domain, n) if _index_matches_kg(artifacts, domain) else None,
            signature=signature,
        )

    @property
    def num_entities(self) -> int:
        return len(self.names)

    def lookup(self, name: str) -> int | None:
        return self.key_to_id.get(normalise_key(name))

    def incident(self, entity: int) -> np.ndarray:
        """Every relation touching ``entity``, outgoing first; a self-loop once."""
        out = self.out_idx[self.out_ptr[entity]:self.out_ptr[entity + 1]]
        incoming = self.incoming_only(entity)
        return np.concatenate([out, incoming[self.rel_src[incoming] != entity]])

    def outgoing(self, entity: int) -> np.ndarray:
        """Relation indices with ``entity`` as head (for an undirected graph: every incident relation)."""
        out = self.out_idx[self.out_ptr[entity]:self.out_ptr[entity + 1]]
        return out if self.directed else self.incident(entity)

    def incoming(self, entity: int) -> np.ndarray:
        """Relation indices with ``entity`` as tail (for an undirected graph: every incident relation)."""
        return self.incoming_only(entity) if self.directed else self.incident(entity)

    def incoming_only(self, entity: int) -> np.ndarray:
        return self.in_idx[self.in_ptr[entity]:self.in_ptr[entity + 1]]

    def other_end(self, relation: int, entity: int) -> int:
        src, dst = int(self.rel_src[relation]), int(self.rel_dst[relation])
        return dst if src == entity else src

    def nearest(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Exact top-k entities by cosine similarity (vectors are normalised)."""
        if self.vectors is None:
            raise ArtifactMissingError(f"the entity index of {self.name!r} is missing or older than its KG "
                                       "(run `omne kg index`)")
        scores = self.vectors @ vector.astype(np.float32)
        k = min(k, scores.size)
        top = np.argpartition(-scores, k - 1)[:k] if k < scores.size else np.arange(scores.size)
        top = top[np.lexsort((top, -scores[top]))]  # by score, ties by id: deterministic
        return [(int(i), float(scores[i])) for i in top]


def phrase_labels(names: list[str], src: np.ndarray, dst: np.ndarray, keywords: list[str],
                  descriptions: list[str]) -> tuple[list[str], np.ndarray]:
    """The labels of an unlabelled graph's relations: the phrase each description says its relation with ("is
    defined in"; pipelines.text.phrases.edge_phrase), else the keyword list. A relation whose sentence reads from
    its second end to its first gets its ends swapped in ``src``/``dst`` (in place; the graph is undirected, so
    the swap changes no fact), so that every phrased relation reads from src to dst; the mask says which are."""
    labels, phrased = list(keywords), np.zeros(len(keywords), dtype=bool)
    for r, description in enumerate(descriptions):
        found = edge_phrase(description or "", names[src[r]], names[dst[r]])
        if found is None:
            continue
        labels[r], phrased[r] = found[0], True
        if found[1]:
            src[r], dst[r] = dst[r], src[r]
    return labels, phrased


def _index_matches_kg(artifacts: Path, domain: str) -> bool:
    """The index was built from exactly the KG files on disk (else its row ids may mean other entities)."""
    kg_manifest, index_manifest = read_manifest(kg_dir(artifacts, domain)), read_manifest(index_dir(artifacts, domain))
    if kg_manifest is None or index_manifest is None:
        return False
    return sorted(index_manifest.inputs.values()) == sorted(kg_manifest.files.values())


def _load_vectors(artifacts: Path, domain: str, n: int) -> np.ndarray | None:
    folder = index_dir(artifacts, domain)
    if not (folder / f"{TABLE_NAME}.lance").is_dir():
        return None
    import lancedb  # imported on use (seconds)

    table = lancedb.connect(folder).open_table(TABLE_NAME).to_arrow()
    ids = table.column("id").to_numpy()
    column = table.column("vector").combine_chunks()
    flat = column.flatten().to_numpy(zero_copy_only=False).astype(np.float32)
    vectors = np.zeros((n, column.type.list_size), dtype=np.float32)
    vectors[ids] = flat.reshape(len(ids), -1)
    return vectors
