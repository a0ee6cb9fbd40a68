"""Build steps of the KG layer: source files -> KG artifact -> entity index artifact.

Each step is one function called alike by the CLI, the Dagster asset and the DVC stage. A step
whose inputs and params did not change since its manifest was written is skipped (idempotent
reruns); every write goes to a temporary folder that replaces the artifact only when complete.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.config import Params
from pipelines.crashsafe import pause_point
from pipelines.domains import Domain
from pipelines.errors import KGSourceError
from pipelines.kg.embed import Encoder
from pipelines.kg.extract import extract_graph, extraction_params
from pipelines.kg.graph import GraphStats, graph_stats
from pipelines.kg.importers import import_source
from pipelines.kg.index import (
    EntityIndex,
    entity_texts,
    index_table,
    self_retrieval_recall,
    table_content_hash,
    write_index,
)
from pipelines.kg.model import assemble_graph
from pipelines.kg.store import read_kg, write_kg
from pipelines.layout import embeddings_cache_dir, index_dir, kg_dir
from pipelines.llm.factory import build_chat_client
from pipelines.manifest import ArtifactBuild, BuildResult, manifest_inputs, relative_path, sha256_files

if TYPE_CHECKING:
    from pipelines.llm.base import ChatClient

log = logging.getLogger(__name__)
MAX_NOTES_KEPT = 20  # importer notes a KG manifest keeps (one per file and field: a handful in practice)


def build_knowledge_graph(domain: Domain, params: Params, *, force: bool = False,
                          client: ChatClient | None = None, source_root: Path | None = None,
                          folder: Path | None = None) -> BuildResult:
    """Import a domain's source, merge entities, write parquet + manifest (with graph statistics).

    A ``text`` source is extracted by an LLM: ``client``, or the one ``params.llm`` describes. Its
    model, prompts and chunking are manifest params, so changing any of them rebuilds the KG. The
    importer's notes (over-long descriptions, types, labels truncated) go in the manifest (``import_notes``).

    An import builds a staged copy: the source under ``source_root`` (same relative paths as under the
    project root), the KG into ``folder``; the manifest reads as if built in place.
    """
    root, folder = source_root or params.root, folder or kg_dir(params.artifacts_dir, domain.name)
    files = domain.source.files(root)
    for path in files:
        if not path.exists():
            raise KGSourceError(f"{path}: source file of domain {domain.name!r} not found")
    inputs = sha256_files(files, root)
    shaping = {"profile": params.profile, "source": domain.source.model_dump(mode="json"),
               "seeds": params.section("seeds")}
    owned = text_client = None
    if domain.source.kind == "text":

        if client is None:

            client = owned = build_chat_client(params)
        text_client = client
        shaping["extraction"] = extraction_params(domain.source, client.model)
    # owned: a killed build's temp folder names its pid
    build = ArtifactBuild(folder, "knowledge_graph", inputs, shaping, domain=domain.name, owned=True)
    try:
        if manifest := build.reusable(force):
            log.info("knowledge_graph[%s] is up to date", domain.name)
            return build.result(manifest, skipped=True)
        metadata: dict[str, Any] = {}
        if text_client is not None:

            raw = extract_graph(domain.source, root, text_client)
            metadata["extraction"] = raw.summary.model_dump()
        else:
            raw = import_source(domain.source, root)
    finally:
        if owned is not None and callable(close := getattr(owned, "close", None)):
            close()  # the disk cache behind the client we built
    if raw.notes:  # paths relative to the (possibly staged) root, as the registry names them
        metadata["import_notes"] = [note.replace(f"{root}/", "") for note in raw.notes[:MAX_NOTES_KEPT]]
    kg = assemble_graph(raw, directed=domain.source.is_directed)
    stats = graph_stats(kg, params.seeds)
    with build.writing() as draft:
        draft.record(files=write_kg(kg, draft.folder),
                     rows={"entities": kg.num_entities, "relations": kg.relations.height},
                     metadata={"directed": kg.directed, "description": domain.description,
                               "stats": stats.model_dump(), **metadata})
        pause_point("kg_written")
    return build.result()


def build_entity_index(domain: str, params: Params, *, force: bool = False, encoder: Encoder | None = None,
                       source: Path | None = None, folder: Path | None = None) -> BuildResult:
    """Embed every entity of a built KG and write the LanceDB table + manifest (``source``, ``folder``: an
    import's staged KG and index; the manifest names the KG's place, as if built there)."""
    final = kg_dir(params.artifacts_dir, domain)
    source, folder = source or final, folder or index_dir(params.artifacts_dir, domain)
    inputs = {relative_path(final / Path(name).name, params.root): sha for name, sha in
              manifest_inputs(source, params.root, f"knowledge graph of {domain!r} (run `omne kg build`)").items()}
    shaping = {"profile": params.profile, **params.index.model_dump(include={"encoder", "text", "ann_min_rows"})}
    build = ArtifactBuild(folder, "entity_index", inputs, shaping, domain=domain, owned=True)
    if manifest := build.reusable(force):
        log.info("entity_index[%s] is up to date", domain)
        return build.result(manifest, skipped=True)

    kg = read_kg(source)
    encoder = encoder or Encoder(params.index, cache_dir=embeddings_cache_dir(params.artifacts_dir))
    texts = entity_texts(kg, params.index)
    vectors = encoder.encode(texts, progress=True)
    table = index_table(kg, texts, vectors)
    with build.writing() as draft:
        ann = write_index(draft.folder, table, params.index)
        recall = self_retrieval_recall(EntityIndex(draft.folder, params.index, encoder), kg,
                                       params.index.self_retrieval_sample)
        draft.record(files={"entities.lance": table_content_hash(table)}, rows={"entities": table.num_rows},
                     metadata={"encoder": encoder.model_id, "dimension": int(vectors.shape[1]), "ann_index": ann,
                               "self_retrieval": recall})
    return build.result()


def knowledge_graph_stats(domain: str, params: Params) -> GraphStats:
    """Statistics of a built KG under the current seed params."""
    return graph_stats(read_kg(kg_dir(params.artifacts_dir, domain)), params.seeds)
