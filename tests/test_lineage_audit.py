"""The lineage audit (`omne lineage`): real artifacts of a two-domain project, traced back to the KG sources;
editing one domain's source must make exactly the artifacts downstream of it stale."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines.cli import cli
from pipelines.config import load_params
from pipelines.domains import load_registry
from pipelines.errors import LineageError
from pipelines.kg.build import build_entity_index, build_knowledge_graph
from pipelines.lineage import audit_lineage, find_artifact
from pipelines.qa.build import build_gold_paths, build_qa_dataset, build_qa_pairs, build_seed_subgraphs
from tests.conftest import DATA, make_project

DOMAINS = ("solar", "orbits")
REGISTRY = "domains:\n" + "".join(f"""  {name}:
    description: The tiny solar-system graph ({name}).
    source:
      kind: triples
      path: kg_assets/{name}/triples.csv
      entities: kg_assets/{name}/entities.csv
""" for name in DOMAINS)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with two domains built end to end: KG, index, seeds, pairs, gold paths, merged dataset."""
    root = make_project(tmp_path_factory.mktemp("lineage") / "project", REGISTRY)
    shutil.copytree(DATA / "solar", root / "kg_assets" / "orbits")
    params = load_params(root / "params.yaml")
    registry = load_registry(params.registry_path)
    for name in DOMAINS:
        build_knowledge_graph(registry.get(name), params)
        build_entity_index(name, params)
        build_seed_subgraphs(name, params)
        build_qa_pairs(name, params, progress=False)
        build_gold_paths(name, params, progress=False)
    build_qa_dataset(params, list(DOMAINS))
    return root


@pytest.fixture()
def project(built: Path, tmp_path: Path) -> Path:
    """A private copy of the built project that a test may edit (recorded paths are relative, so it stays valid)."""
    return Path(shutil.copytree(built, tmp_path / "project"))


def artifact_folders(root: Path) -> list[str]:
    return sorted(p.parent.relative_to(root).as_posix() for p in (root / "artifacts").rglob("manifest.json"))


def stale_everywhere(root: Path) -> set[str]:
    """Every artifact of the project audited on its own: which ones are stale."""
    return {folder for folder in artifact_folders(root) if audit_lineage(root / folder).stale}


def downstream_of(domain: str) -> set[str]:
    return {f"artifacts/kg/{domain}", f"artifacts/index/{domain}", f"artifacts/qa/seeds/{domain}",
            f"artifacts/qa/pairs/{domain}", f"artifacts/qa/gold/{domain}", "artifacts/qa/dataset"}


def test_fresh_dataset_traces_back_to_every_kg_source(built: Path) -> None:
    report = audit_lineage(built / "artifacts" / "qa" / "dataset" / "train.jsonl")  # a file: its folder is audited
    assert report.target == "artifacts/qa/dataset" and not report.stale and report.stale_artifacts == []
    assert set(report.sources) == {f"kg_assets/{d}/{f}" for d in DOMAINS for f in ("triples.csv", "entities.csv")}
    kinds = {node.kind for node in report.nodes.values()}
    assert kinds == {"qa_dataset", "qa_pairs", "gold_paths", "seed_subgraphs", "knowledge_graph"}
    kg = report.nodes["artifacts/kg/solar"]
    assert kg.upstream == [] and {i.status for i in kg.inputs} == {"ok"}
    assert kg.code_version and kg.created_at and kg.params["source"]["kind"] == "triples"
    assert report.nodes["artifacts/qa/seeds/solar"].upstream == ["artifacts/kg/solar"]
    assert all(i.current == i.recorded for node in report.nodes.values() for i in node.inputs)
    assert all(f.status == "ok" for node in report.nodes.values() for f in node.files)
    index = audit_lineage(built / "artifacts" / "index" / "orbits")
    assert not index.stale and index.nodes["artifacts/index/orbits"].upstream == ["artifacts/kg/orbits"]
    assert {f.status for f in index.nodes["artifacts/index/orbits"].files} == {"unchecked"}  # a LanceDB folder
    assert stale_everywhere(built) == set()


def test_cli_prints_the_chain_and_exits_0_when_fresh(built: Path) -> None:
    result = CliRunner().invoke(cli, ["lineage", str(built / "artifacts" / "qa" / "dataset")])
    assert result.exit_code == 0, result.output
    for text in ("qa_dataset", "knowledge_graph[orbits]", "source kg_assets/solar/triples.csv", "seed_subgraphs"):
        assert text in result.output
    assert "STALE" not in result.output


def test_changed_kg_source_makes_exactly_its_downstream_stale(project: Path) -> None:
    source = project / "kg_assets" / "solar" / "triples.csv"
    with source.open("a", encoding="utf-8") as handle:
        handle.write("Phobos,orbits,Mars,Phobos is the larger moon of Mars.\n")

    assert stale_everywhere(project) == downstream_of("solar")
    report = audit_lineage(project / "artifacts" / "qa" / "dataset")
    assert set(report.stale_artifacts) == downstream_of("solar") - {"artifacts/index/solar"}  # not an input of it
    kg = report.nodes["artifacts/kg/solar"]
    assert [r for r in kg.reasons if r.startswith("input kg_assets/solar/triples.csv changed since")]
    assert next(i for i in kg.inputs if i.key == "kg_assets/solar/triples.csv").status == "changed"
    assert report.nodes["artifacts/qa/seeds/solar"].reasons == ["upstream artifacts/kg/solar is stale"]
    assert "upstream artifacts/qa/pairs/solar is stale" in report.nodes["artifacts/qa/dataset"].reasons
    assert not report.nodes["artifacts/kg/orbits"].stale and not report.nodes["artifacts/qa/gold/orbits"].stale

    runner = CliRunner()
    result = runner.invoke(cli, ["lineage", str(project / "artifacts" / "qa" / "gold" / "solar")])
    assert result.exit_code == 1 and "STALE" in result.output and "CHANGED" in result.output, result.output
    result = runner.invoke(cli, ["lineage", str(project / "artifacts" / "qa" / "dataset"), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["stale"] is True and data["target"] == "artifacts/qa/dataset"
    assert set(data["stale_artifacts"]) == set(report.stale_artifacts)
    assert data["nodes"]["artifacts/kg/solar"]["inputs"][0]["recorded"] != data["nodes"]["artifacts/kg/solar"][
        "inputs"][0]["current"]


def test_edited_data_file_and_missing_source_are_stale(project: Path) -> None:
    gold = project / "artifacts" / "qa" / "gold" / "orbits" / "gold_paths.jsonl"
    gold.write_text(gold.read_text(encoding="utf-8") + "\n", encoding="utf-8")  # edited by hand
    node = audit_lineage(gold).nodes["artifacts/qa/gold/orbits"]
    assert node.stale and node.reasons == ["file gold_paths.jsonl modified since written"]
    assert stale_everywhere(project) == {"artifacts/qa/gold/orbits", "artifacts/qa/dataset"}

    (project / "kg_assets" / "solar" / "entities.csv").unlink()
    kg = audit_lineage(project / "artifacts" / "kg" / "solar").nodes["artifacts/kg/solar"]
    assert kg.reasons == ["input kg_assets/solar/entities.csv missing"]


def test_a_path_no_artifact_owns_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    with pytest.raises(LineageError, match="no manifest.json"):
        find_artifact(tmp_path / "notes.txt")
    result = CliRunner().invoke(cli, ["lineage", str(tmp_path / "notes.txt")])
    assert result.exit_code == 2 and str(tmp_path / "notes.txt") in result.output
    assert "no manifest.json" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["lineage", str(tmp_path / "absent")])
    assert result.exit_code == 2 and "no such file or folder" in result.output

