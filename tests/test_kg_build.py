"""Building the KG artifact (parquet + manifest), its idempotence and atomicity, graph stats and KG checks."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import networkx as nx
import numpy as np
import polars as pl
import pytest

from pipelines.atomic import atomic_directory
from pipelines.config import CheckParams, Params, SeedParams, load_params
from pipelines.domains import Domain, SourceSpec, add_domain, load_registry
from pipelines.errors import ArtifactMissingError, KGSourceError
from pipelines.kg.build import build_knowledge_graph, knowledge_graph_stats
from pipelines.kg.checks import check_no_dangling_edges, check_no_empty_names, check_unique_keys, run_kg_checks
from pipelines.kg.graph import ball_sizes, eligible_seeds, graph_stats
from pipelines.kg.model import ENTITY_SCHEMA, RELATION_SCHEMA, KnowledgeGraph
from pipelines.kg.store import read_kg
from tests.conftest import make_project


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def solar(params: Params) -> Domain:
    return load_registry(params.registry_path).get("solar")


def leftovers(params: Params) -> list[str]:
    return sorted(p.name for p in (params.artifacts_dir / "kg").iterdir() if p.name.startswith("."))


# --------------------------------------------------------------------------------------------- artifact


def test_build_writes_parquet_and_manifest(project: Path, params: Params) -> None:
    result = build_knowledge_graph(solar(params), params)
    folder = project / "artifacts" / "kg" / "solar"
    assert not result.skipped and result.folder == folder and result.domain == "solar"
    assert sorted(p.name for p in folder.iterdir()) == ["entities.parquet", "manifest.json", "relations.parquet"]
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["kind"] == "knowledge_graph" and manifest["domain"] == "solar"
    assert manifest["files"] == {"entities.parquet": sha256(folder / "entities.parquet"),
                                 "relations.parquet": sha256(folder / "relations.parquet")}
    source = project / "kg_assets" / "solar"
    assert manifest["inputs"] == {"kg_assets/solar/triples.csv": sha256(source / "triples.csv"),
                                  "kg_assets/solar/entities.csv": sha256(source / "entities.csv")}
    assert manifest["params"] == {
        "profile": "quick",
        "source": {"kind": "triples", "path": "kg_assets/solar/triples.csv",
                   "entities": "kg_assets/solar/entities.csv", "directed": None},
        "seeds": {"depth": 3, "min_nodes": 20, "max_nodes": 400},
    }
    assert manifest["rows"] == {"entities": 28, "relations": 33}
    assert manifest["metadata"]["directed"] is True
    assert manifest["metadata"]["description"] == "A tiny solar-system graph."
    stats = manifest["metadata"]["stats"]
    assert stats["entities"] == 28 and stats["relations"] == 33
    assert stats["components"] == 1 and stats["largest_component"] == 28 and stats["isolated"] == 0
    assert stats["described_share"] == round(24 / 28, 4)
    assert stats["seed_depth"] == 3 and stats["seed_min_nodes"] == 20 and stats["seed_max_nodes"] == 400
    assert manifest["code_version"]

    kg = read_kg(folder)
    assert kg.directed and kg.num_entities == 28 and kg.relations.height == 33
    assert kg.entities.schema == pl.Schema(ENTITY_SCHEMA) and kg.relations.schema == pl.Schema(RELATION_SCHEMA)
    assert pl.read_parquet(folder / "entities.parquet")["id"].to_list() == list(range(28))
    assert knowledge_graph_stats("solar", params).model_dump() == stats


def test_second_build_is_skipped_force_rebuilds(params: Params) -> None:
    first = build_knowledge_graph(solar(params), params)
    files = sorted(first.folder.iterdir())
    before = {p.name: p.stat().st_mtime_ns for p in files}
    second = build_knowledge_graph(solar(params), params)
    assert second.skipped
    assert second.manifest == first.manifest
    assert {p.name: p.stat().st_mtime_ns for p in sorted(first.folder.iterdir())} == before
    forced = build_knowledge_graph(solar(params), params, force=True)
    assert not forced.skipped
    assert forced.manifest.created_at > first.manifest.created_at
    assert forced.manifest.files == first.manifest.files  # same sources, same bytes
    assert (first.folder / "manifest.json").stat().st_mtime_ns != before["manifest.json"]
    assert leftovers(params) == []


def test_changed_source_or_seed_params_trigger_a_rebuild(project: Path, params: Params) -> None:
    first = build_knowledge_graph(solar(params), params)
    entities = project / "kg_assets" / "solar" / "entities.csv"
    entities.write_text(entities.read_text(encoding="utf-8").replace(
        "Icy moon with geysers.", "Icy moon with water geysers."), encoding="utf-8")
    second = build_knowledge_graph(solar(params), params)
    assert not second.skipped
    assert second.manifest.inputs["kg_assets/solar/entities.csv"] == sha256(entities)
    assert second.manifest.inputs["kg_assets/solar/entities.csv"] != first.manifest.inputs[
        "kg_assets/solar/entities.csv"]
    assert second.manifest.inputs["kg_assets/solar/triples.csv"] == first.manifest.inputs[
        "kg_assets/solar/triples.csv"]
    assert second.manifest.files["entities.parquet"] != first.manifest.files["entities.parquet"]
    assert second.manifest.files["relations.parquet"] == first.manifest.files["relations.parquet"]
    kg = read_kg(second.folder)
    assert kg.entities.filter(pl.col("name") == "Enceladus")["description"].item() == "Icy moon with water geysers."
    assert build_knowledge_graph(solar(params), params).skipped

    wider = params.model_copy(update={"seeds": SeedParams(depth=2, min_nodes=5, max_nodes=400)})
    third = build_knowledge_graph(solar(wider), wider)
    assert not third.skipped
    assert third.manifest.metadata["stats"]["seed_depth"] == 2
    assert third.manifest.files == second.manifest.files


def test_rebuild_elsewhere_gives_byte_identical_files(params: Params, tmp_path: Path) -> None:
    first = build_knowledge_graph(solar(params), params)
    other_root = make_project(tmp_path / "elsewhere" / "clone")
    other_params = load_params(other_root / "params.yaml")
    second = build_knowledge_graph(solar(other_params), other_params)
    assert not second.skipped and second.folder != first.folder
    for name in ("entities.parquet", "relations.parquet"):
        assert (first.folder / name).read_bytes() == (second.folder / name).read_bytes()
        assert sha256(second.folder / name) == first.manifest.files[name]
    assert second.manifest.files == first.manifest.files
    assert second.manifest.inputs == first.manifest.inputs  # relative keys: stable across clones
    assert second.manifest.input_fingerprint == first.manifest.input_fingerprint


def test_broken_source_leaves_previous_artifact_untouched(project: Path, params: Params) -> None:
    first = build_knowledge_graph(solar(params), params)
    snapshot = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in first.folder.iterdir()}
    triples = project / "kg_assets" / "solar" / "triples.csv"
    triples.write_bytes(b"head,relation,tail\nEarth,orbits,Sun\nZ\xfcrich,in,Switzerland\n")
    with pytest.raises(KGSourceError, match=r"line 3 is not valid UTF-8"):
        build_knowledge_graph(solar(params), params)
    with pytest.raises(KGSourceError, match="line 3"):
        build_knowledge_graph(solar(params), params, force=True)
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in first.folder.iterdir()} == snapshot
    assert sorted(p.name for p in (params.artifacts_dir / "kg").iterdir()) == ["solar"]
    assert read_kg(first.folder).num_entities == 28

    triples.unlink()
    with pytest.raises(KGSourceError, match="not found"):
        build_knowledge_graph(solar(params), params)
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in first.folder.iterdir()} == snapshot
    assert leftovers(params) == []


def test_atomic_directory_keeps_old_content_on_error(tmp_path: Path) -> None:
    final = tmp_path / "kg" / "solar"
    with atomic_directory(final) as tmp:
        assert tmp.parent == final.parent and tmp.name.startswith(".solar.tmp-")
        (tmp / "a.txt").write_text("first", encoding="utf-8")
    assert (final / "a.txt").read_text(encoding="utf-8") == "first"
    with pytest.raises(RuntimeError, match="boom"), atomic_directory(final) as tmp:
        (tmp / "a.txt").write_text("second", encoding="utf-8")
        (tmp / "b.txt").write_text("half", encoding="utf-8")
        raise RuntimeError("boom")
    assert sorted(p.name for p in final.iterdir()) == ["a.txt"]
    assert (final / "a.txt").read_text(encoding="utf-8") == "first"
    assert sorted(p.name for p in final.parent.iterdir()) == ["solar"]
    with atomic_directory(final) as tmp:
        (tmp / "c.txt").write_text("third", encoding="utf-8")
    assert sorted(p.name for p in final.iterdir()) == ["c.txt"]  # replaced whole, not merged
    assert sorted(p.name for p in final.parent.iterdir()) == ["solar"]


def test_read_kg_of_unbuilt_domain(params: Params) -> None:
    with pytest.raises(ArtifactMissingError, match="omne kg build"):
        read_kg(params.artifacts_dir / "kg" / "solar")


def test_lightrag_workdir_domain_builds_undirected(project: Path, params: Params) -> None:
    workdir = project / "kg_assets" / "rag" / "rag_storage"
    workdir.mkdir(parents=True)
    graph = nx.Graph()
    for name in ("ZETA", "ALPHA", "BETA"):
        graph.add_node(name, entity_id=name, entity_type="star", description=f"{name.title()} star.",
                       source_id="chunk-1")
    graph.add_edge("ZETA", "ALPHA", weight=2.0, description="pair", keywords="pair", source_id="chunk-1")
    graph.add_edge("BETA", "ZETA", weight=1.0, description="near", keywords="near", source_id="chunk-1")
    nx.write_graphml(graph, workdir / "graph_chunk_entity_relation.graphml")
    source = SourceSpec(kind="lightrag_workdir", path="kg_assets/rag/rag_storage")
    add_domain(params.registry_path, Domain(name="rag", description="stars", source=source))
    result = build_knowledge_graph(load_registry(params.registry_path).get("rag"), params)
    assert result.manifest.metadata["directed"] is False
    assert list(result.manifest.inputs) == ["kg_assets/rag/rag_storage/graph_chunk_entity_relation.graphml"]
    kg = read_kg(result.folder)
    assert not kg.directed
    assert kg.relations.select("src", "dst").rows() == [(2, 0), (2, 1)]  # alpha=0, beta=1, zeta=2; as written
    assert build_knowledge_graph(load_registry(params.registry_path).get("rag"), params).skipped


# --------------------------------------------------------------------------------------------- graph stats


def reference_ball_sizes(graph: nx.Graph, depth: int, cap: int) -> np.ndarray:
    return np.array([min(len(nx.single_source_shortest_path_length(graph, node, cutoff=depth)), cap + 1)
                     for node in range(graph.number_of_nodes())])


def simple_undirected(kg: KnowledgeGraph) -> nx.Graph:
    graph = nx.Graph()
    graph.add_nodes_from(range(kg.num_entities))
    graph.add_edges_from((s, d) for s, d in kg.relations.select("src", "dst").iter_rows() if s != d)
    return graph


def kg_from_networkx(graph: nx.Graph, extra_edges: list[tuple[int, int]]) -> KnowledgeGraph:
    """A directed KG whose relations are the graph's edges (random direction) plus some extra edges."""
    n = graph.number_of_nodes()
    rng = np.random.default_rng(3)
    edges = [(v, u) if rng.random() < 0.5 else (u, v) for u, v in graph.edges()] + extra_edges
    entities = pl.DataFrame({"id": list(range(n)), "name": [f"n{i:04d}" for i in range(n)],
                             "key": [f"n{i:04d}" for i in range(n)], "type": [""] * n,
                             "description": ["" if i % 3 else f"node {i}" for i in range(n)],
                             "source_ids": [[] for _ in range(n)]}, schema=ENTITY_SCHEMA)
    relations = pl.DataFrame({"src": [s for s, _ in edges], "dst": [d for _, d in edges],
                              "keywords": [f"k{i % 2}" for i in range(len(edges))],
                              "description": [""] * len(edges), "weight": [1.0] * len(edges)},
                             schema=RELATION_SCHEMA)
    return KnowledgeGraph(entities=entities, relations=relations, directed=True)


@pytest.mark.parametrize(("depth", "cap"), [(1, 3), (1, 400), (2, 5), (2, 10), (3, 12), (3, 400), (4, 20)])
def test_ball_sizes_match_networkx_on_solar(params: Params, depth: int, cap: int) -> None:
    kg = read_kg(build_knowledge_graph(solar(params), params).folder)
    reference = simple_undirected(kg)
    expected = reference_ball_sizes(reference, depth, cap)
    assert np.array_equal(ball_sizes(kg.adjacency(), depth, cap), expected)
    assert np.array_equal(ball_sizes(kg.adjacency(), depth, cap, batch=5), expected)
    seeds = SeedParams(depth=depth, min_nodes=min(cap, 4), max_nodes=cap)
    expected_seeds = np.flatnonzero((expected >= seeds.min_nodes) & (expected <= seeds.max_nodes))
    assert np.array_equal(eligible_seeds(kg.adjacency(), seeds), expected_seeds)


def test_solar_stats_match_networkx(params: Params) -> None:
    kg = read_kg(build_knowledge_graph(solar(params), params).folder)
    reference = simple_undirected(kg)
    stats = graph_stats(kg, params.seeds)
    sizes = reference_ball_sizes(reference, 3, 400)
    assert stats.eligible_seeds == int(((sizes >= 20) & (sizes <= 400)).sum()) == 7
    assert stats.components == nx.number_connected_components(reference)
    assert stats.largest_component == max(len(c) for c in nx.connected_components(reference))
    assert stats.isolated == nx.number_of_isolates(reference)
    assert stats.mean_degree == round(2 * reference.number_of_edges() / reference.number_of_nodes(), 3)


@pytest.mark.parametrize("seed", [11, 12])
def test_ball_sizes_and_components_match_networkx_on_random_graph(seed: int) -> None:
    graph = nx.gnm_random_graph(300, 330, seed=seed)
    # self loops, the reverse of an existing edge and a parallel edge with another keyword change nothing
    u, v = next(iter(graph.edges()))
    kg = kg_from_networkx(graph, [(5, 5), (17, 17), (v, u), (u, v)])
    adjacency = kg.adjacency()
    assert adjacency.nnz == 2 * graph.number_of_edges()
    assert set(np.unique(adjacency.data)) == {1}
    for depth in (1, 2, 3, 4):
        for cap in (1, 8, 25, 60, 400):
            expected = reference_ball_sizes(graph, depth, cap)
            assert np.array_equal(ball_sizes(adjacency, depth, cap, batch=64), expected), (depth, cap)
            assert np.array_equal(ball_sizes(adjacency, depth, cap), expected), (depth, cap)
    for depth, low, high in ((2, 3, 10), (3, 20, 80), (4, 10, 400)):
        expected = reference_ball_sizes(graph, depth, high)
        seeds = SeedParams(depth=depth, min_nodes=low, max_nodes=high)
        assert np.array_equal(eligible_seeds(adjacency, seeds),
                              np.flatnonzero((expected >= low) & (expected <= high)))
    stats = graph_stats(kg, SeedParams(depth=3, min_nodes=20, max_nodes=80))
    expected = reference_ball_sizes(graph, 3, 80)
    assert stats.eligible_seeds == int(((expected >= 20) & (expected <= 80)).sum())
    assert stats.entities == 300 and stats.relations == kg.relations.height
    assert stats.components == nx.number_connected_components(graph)
    assert stats.largest_component == max(len(c) for c in nx.connected_components(graph))
    assert stats.isolated == nx.number_of_isolates(graph) > 0
    assert stats.mean_degree == round(2 * graph.number_of_edges() / 300, 3)
    assert stats.described_share == round(100 / 300, 4)


# --------------------------------------------------------------------------------------------- KG checks


def test_kg_checks_pass_on_solar(params: Params) -> None:
    kg = read_kg(build_knowledge_graph(solar(params), params).folder)
    outcomes = run_kg_checks(kg, params.checks)
    assert [o.spec.name for o in outcomes] == ["no_dangling_edges", "unique_normalised_keys", "no_empty_names",
                                               "description_share", "isolated_share"]
    assert all(o.passed for o in outcomes), [o for o in outcomes if not o.passed]
    by_name = {o.spec.name: o.metadata for o in outcomes}
    assert by_name["no_dangling_edges"] == {"dangling_endpoints": 0, "relations": 33}
    assert by_name["description_share"]["described"] == 24
    assert by_name["isolated_share"]["isolated"] == 0


def corrupted(kg: KnowledgeGraph, *, dangling: bool) -> KnowledgeGraph:
    """Solar with entity 1 sharing entity 0's key, entity 2 named '   ' and (optionally) relation 0's dst
    pointing past the last entity."""
    relations = kg.relations
    if dangling:
        relations = relations.with_columns(dst=pl.when(pl.int_range(pl.len()) == 0)
                                           .then(pl.lit(kg.num_entities, dtype=pl.Int32)).otherwise(pl.col("dst")))
    entities = kg.entities.with_columns(
        key=pl.when(pl.col("id") == 1).then(pl.lit(kg.entities["key"][0])).otherwise(pl.col("key")),
        name=pl.when(pl.col("id") == 2).then(pl.lit("   ")).otherwise(pl.col("name")),
    )
    return KnowledgeGraph(entities=entities, relations=relations, directed=True)


def test_kg_checks_fail_with_counts_on_corrupted_graph(params: Params) -> None:
    kg = read_kg(build_knowledge_graph(solar(params), params).folder)
    key0 = kg.entities["key"][0]
    broken = corrupted(kg, dangling=True)
    dangling = check_no_dangling_edges(broken)
    assert not dangling.passed and dangling.metadata == {"dangling_endpoints": 1, "relations": 33}
    unique = check_unique_keys(broken)
    assert not unique.passed and unique.metadata == {"duplicated_rows": 2, "examples": key0}
    names = check_no_empty_names(broken)
    assert not names.passed and names.metadata == {"empty_names": 1}
    assert all(o.spec.blocking for o in (dangling, unique, names))

    negative = KnowledgeGraph(entities=kg.entities, directed=True, relations=kg.relations.with_columns(
        src=pl.when(pl.int_range(pl.len()) < 3).then(pl.lit(-1, dtype=pl.Int32)).otherwise(pl.col("src"))))
    outcome = check_no_dangling_edges(negative)
    assert not outcome.passed and outcome.metadata["dangling_endpoints"] == 3

    # the whole suite on a graph without dangling edges: the two blocking failures, the rest pass
    outcomes = {o.spec.name: o for o in run_kg_checks(corrupted(kg, dangling=False), CheckParams())}
    assert [name for name, o in outcomes.items() if not o.passed] == ["unique_normalised_keys", "no_empty_names"]
    assert outcomes["unique_normalised_keys"].metadata == {"duplicated_rows": 2, "examples": key0}
    assert outcomes["no_empty_names"].metadata == {"empty_names": 1}


def test_run_kg_checks_reports_dangling_edges_instead_of_crashing(params: Params) -> None:
    """A KG with a dangling edge must come back as failed check outcomes (what Dagster shows), not raise."""
    kg = read_kg(build_knowledge_graph(solar(params), params).folder)
    outcomes = {o.spec.name: o for o in run_kg_checks(corrupted(kg, dangling=True), CheckParams())}
    assert not outcomes["no_dangling_edges"].passed
    assert outcomes["no_dangling_edges"].metadata == {"dangling_endpoints": 1, "relations": 33}
    assert not outcomes["unique_normalised_keys"].passed and not outcomes["no_empty_names"].passed


def test_checks_on_a_kg_without_relations(params: Params) -> None:
    kg = read_kg(build_knowledge_graph(solar(params), params).folder)
    bare = KnowledgeGraph(entities=kg.entities, relations=kg.relations.clear(), directed=True)
    outcomes = {o.spec.name: o for o in run_kg_checks(bare, CheckParams())}
    assert not outcomes["isolated_share"].passed
    assert outcomes["isolated_share"].metadata["isolated"] == 28
    assert outcomes["no_dangling_edges"].passed
    assert graph_stats(bare, SeedParams()).components == 28
    assert os.path.isdir(params.artifacts_dir / "kg" / "solar")
