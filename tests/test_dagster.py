"""Real Dagster materializations of the partitioned KG assets, in-process and from the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import networkx as nx

from tests.conftest import PROJECT_ROOT, TINY_REGISTRY, cli_env, make_project

SCRIPT = Path(__file__).with_name("dagster_materialize.py")


def materialize(project: Path, partition: str, profile: str = "", stage: str = "kg") -> dict:
    env = cli_env(OMNE_PARAMS=str(project / "params.yaml"), DAGSTER_HOME=str(project / ".dagster_home"),
                  PYTHONPATH=str(PROJECT_ROOT))
    (project / ".dagster_home").mkdir(exist_ok=True)
    result = subprocess.run([sys.executable, str(SCRIPT), partition, profile, stage], cwd=project, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_partitions_come_from_the_registry_and_checks_pass(project: Path) -> None:
    out = materialize(project, "solar")
    assert out["success"] and out["partitions"] == ["solar"]
    assert {name: c["passed"] for name, c in out["checks"].items()} == {
        "knowledge_graph.no_dangling_edges": True, "knowledge_graph.unique_normalised_keys": True,
        "knowledge_graph.no_empty_names": True, "knowledge_graph.description_share": True,
        "knowledge_graph.isolated_share": True, "entity_index.self_retrieval": True}
    kg_meta, index_meta = out["metadata"]["knowledge_graph"], out["metadata"]["entity_index"]
    assert kg_meta["rows_entities"] == 28 and kg_meta["stat_components"] == 1
    assert len(kg_meta["sha256_entities.parquet"]) == 16 and kg_meta["code_version"]
    assert index_meta["rows_entities"] == 28
    assert (project / "artifacts" / "index" / "solar" / "entities.lance").is_dir()


def test_run_config_selects_the_profile(project: Path) -> None:
    materialize(project, "solar", "paper")
    manifest = json.loads((project / "artifacts" / "kg" / "solar" / "manifest.json").read_text())
    assert manifest["params"]["profile"] == "paper"


def test_failed_checks_report_counts(project: Path) -> None:
    graph = nx.Graph()
    for i in range(10):
        graph.add_node(f"N{i}", entity_id=f"N{i}", entity_type="thing", description="" if i else "only one")
    graph.add_edge("N0", "N1", keywords="linked", description="", weight=1.0)
    (project / "kg_assets" / "sparse").mkdir()
    nx.write_graphml(graph, project / "kg_assets" / "sparse" / "g.graphml")
    (project / "kg_assets" / "domains.yaml").write_text(
        TINY_REGISTRY + "  sparse:\n    source:\n      kind: lightrag_graphml\n      path: kg_assets/sparse/g.graphml\n")
    out = materialize(project, "sparse")
    assert out["success"]  # warnings do not block
    isolated, described = out["checks"]["knowledge_graph.isolated_share"], out["checks"]["knowledge_graph.description_share"]
    assert not isolated["passed"] and isolated["severity"] == "WARN" and isolated["metadata"]["isolated"] == 8
    assert not described["passed"] and described["metadata"]["described"] == 1


def test_dagster_cli_materializes_a_partition(project: Path) -> None:
    env = cli_env(OMNE_PARAMS=str(project / "params.yaml"), DAGSTER_HOME=str(project / ".dagster_home"))
    (project / ".dagster_home").mkdir(exist_ok=True)
    result = subprocess.run(["dagster", "asset", "materialize", "-m", "dagster_project.definitions",
                             "--select", "knowledge_graph", "--partition", "solar"],
                            cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RUN_SUCCESS" in result.stderr + result.stdout
    assert "Asset check 'no_dangling_edges' on 'knowledge_graph' passed" in result.stderr + result.stdout
    assert (project / "artifacts" / "kg" / "solar" / "manifest.json").is_file()


def test_qa_assets_materialize_with_their_checks(tmp_path: Path) -> None:
    from tests.test_qa import CHEMISTRY_REGISTRY

    project = make_project(tmp_path / "project", CHEMISTRY_REGISTRY)
    shutil.copytree(PROJECT_ROOT / "kg_assets" / "chemistry", project / "kg_assets" / "chemistry")
    text = (project / "params.yaml").read_text().replace("one_two_hop_per_domain: 150", "one_two_hop_per_domain: 12")
    (project / "params.yaml").write_text(text.replace("three_plus_per_domain: 150", "three_plus_per_domain: 8"))
    out = materialize(project, "chemistry", "", "qa")
    assert out["success"], out["failures"] or out["checks"]
    checks = {name: c["passed"] for name, c in out["checks"].items()}
    for name in ("seed_subgraphs.subgraph_size_bounds", "qa_pairs.pairs_pass_rules", "qa_pairs.bucket_targets",
                 "gold_paths.every_pair_has_valid_path", "qa_dataset.split_leakage"):
        assert checks[name], out["checks"][name]
    assert all(checks.values()), out["checks"]
    assert out["metadata"]["qa_pairs"]["stat_pairs"] == 20 and out["metadata"]["qa_dataset"]["rows_pairs"] == 20
    assert (project / "artifacts" / "qa" / "dataset" / "qa.parquet").is_file()


def test_eval_report_asset_evaluates_a_model_from_run_config(project: Path, tmp_path: Path) -> None:
    from tests.model_support import build_tiny_llama

    built = subprocess.run(["omne", "run", "--skip-eval"], cwd=project, env=cli_env(), capture_output=True, text=True,
                           timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    model = build_tiny_llama(tmp_path / "tiny-llama")
    env = cli_env(OMNE_PARAMS=str(project / "params.yaml"), DAGSTER_HOME=str(project / ".dagster_home"),
                  PYTHONPATH=str(PROJECT_ROOT))
    (project / ".dagster_home").mkdir(exist_ok=True)
    result = subprocess.run([sys.executable, str(SCRIPT), "--eval", str(model)], cwd=project, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["success"], out["failures"]
    assert out["checks"]["eval_report.report_complete"]["passed"]
    meta = out["metadata"]["eval_report"]
    assert meta["model"].startswith("tiny-llama-") and "| all |" in meta["metrics_table"]
    assert (Path(meta["path"]) / "report.html").is_file()
