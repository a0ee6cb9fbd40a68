"""Real Dagster materializations of the partitioned KG assets, in-process and from the CLI; the
definitions' jobs, schedule and sensors (the KG-source sensor ticked with build_sensor_context)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from pipelines.stages import KG, QA, STAGES
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


def test_kill_during_a_materialization_then_resume(project: Path) -> None:
    """kill -9 of `dagster asset materialize` while qa_pairs is writing: the KG and seeds it finished are
    complete, the pairs absent; materializing again reuses the finished ones and completes the rest."""
    env = cli_env(OMNE_PARAMS=str(project / "params.yaml"), DAGSTER_HOME=str(project / ".dagster_home"),
                  OMNE_PAUSE_AT="replace:pairs/solar", OMNE_PAUSE_S="120")
    (project / ".dagster_home").mkdir(exist_ok=True)
    command = ["dagster", "asset", "materialize", "-m", "dagster_project.definitions", "--partition", "solar",
               "--select", "knowledge_graph,seed_subgraphs,qa_pairs,gold_paths"]
    process = subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line)
        if "paused at replace:pairs/solar" in line:
            break
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert any("paused at" in line for line in seen), "".join(seen)[-3000:]
    artifacts = project / "artifacts"
    kg_manifest = json.loads((artifacts / "kg" / "solar" / "manifest.json").read_text())
    assert (artifacts / "qa" / "seeds" / "solar" / "manifest.json").is_file()
    assert not (artifacts / "qa" / "pairs" / "solar").exists()  # its finished files were still in a temp folder
    assert list((artifacts / "qa" / "pairs").glob(".solar.tmp-*"))

    env.pop("OMNE_PAUSE_AT")
    again = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((artifacts / "kg" / "solar" / "manifest.json").read_text()) == kg_manifest  # reused
    assert json.loads((artifacts / "qa" / "gold" / "solar" / "manifest.json").read_text())["rows"]


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
    assert kg_meta["params"]["profile"] == "quick" and kg_meta["created_at"] and len(kg_meta["input_fingerprint"]) == 16
    assert set(kg_meta["inputs"]) == {"kg_assets/solar/triples.csv", "kg_assets/solar/entities.csv"}
    assert index_meta["rows_entities"] == 28 and "kg/solar/entities.parquet" in "".join(index_meta["inputs"])
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
    from tests.conftest import CHEMISTRY_REGISTRY

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
    quality = out["metadata"]["qa_dataset"]  # the QA quality report (docs/qa.md, "Quality report")
    assert quality["quality_leaks"] == 0 and quality["quality_form_problems"] == 0
    assert "| chemistry | all | 20 |" in quality["quality"] and 0 < quality["quality_words_max"] <= 45
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
    # how each episode ended, counted against the gold paths: one outcome per test question
    assert sum(meta["outcomes"].values()) == out["checks"]["eval_report.report_complete"]["metadata"]["questions"]
    assert (Path(meta["path"]) / "report.html").is_file()


# --- definitions: jobs, schedule, sensors -------------------------------------------------------------

@pytest.fixture()
def defs(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """The code location as `dagster dev` loads it, reading the test project, with a throw-away DAGSTER_HOME."""
    monkeypatch.setenv("OMNE_PARAMS", str(project / "params.yaml"))
    monkeypatch.delenv("OMNE_PROFILE", raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir()
    from dagster_project.definitions import defs as load

    return load()


def _context(defs, project: Path, instance, cursor: str | None = None):  # noqa: ANN001, ANN202
    import dagster as dg

    from dagster_project.defs.resources import OmneResource

    return dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                   resources={"omne": OmneResource(params_path=str(project / "params.yaml"))})


def _keys(keys) -> list[str]:  # noqa: ANN001
    return sorted(k.to_user_string() for k in keys)


KG_DOWNSTREAM = sorted(STAGES.downstream("knowledge_graph"))


def test_jobs_schedule_and_loading_prepare_the_instance(defs) -> None:  # noqa: ANN001
    import dagster as dg

    from dagster_project.defs.partitions import DOMAIN_PARTITIONS
    from dagster_project.defs.resources import GPU_POOL

    jobs = {name: _keys(defs.resolve_job_def(name).asset_layer.executable_asset_keys)
            for name in ("build_data", "build_domains", "train", "evaluate", "train_and_evaluate")}
    assert jobs["build_data"] == sorted(s.name for s in STAGES if s.group in (KG, QA))
    # a backfill's per-domain runs: every domain's data stage, and not the dataset that merges them all
    assert jobs["build_domains"] == sorted(set(jobs["build_data"]) - {"qa_dataset"})
    assert {"sft_conversations", "sft_model"} <= set(jobs["train"]) and "eval_report" not in jobs["train"]
    assert "eval_report" in jobs["evaluate"] and "sft_model" not in jobs["evaluate"]
    assert set(jobs["train_and_evaluate"]) == set(jobs["train"]) | set(jobs["evaluate"])
    schedule = defs.resolve_schedule_def("weekly_train_and_evaluate")
    assert schedule.cron_schedule == "0 3 * * 1" and schedule.job_name == "train_and_evaluate"
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert defs.resolve_sensor_def("kg_source_sensor").default_status == dg.DefaultSensorStatus.STOPPED
    assert defs.resolve_sensor_def("domain_partitions_sensor").default_status == dg.DefaultSensorStatus.RUNNING
    graph = defs.resolve_asset_graph()
    gpu_steps = {k.to_user_string() for k in graph.get_all_asset_keys() if graph.get(k).pools == {GPU_POOL}}
    assert {"sft_model", "eval_report"} <= gpu_steps and "knowledge_graph" not in gpu_steps
    # RL stage 1 (from the base model) comes before the SFT data, which may mix in its correct rollouts
    assert dg.AssetKey("stage1_rl_model") in graph.get(dg.AssetKey("sft_conversations")).parent_keys
    assert dg.AssetKey("sft_model") not in graph.get_ancestor_asset_keys(dg.AssetKey("stage1_rl_model"))
    with dg.DagsterInstance.get() as instance:  # loading the code location added the partitions and pool
        assert instance.get_dynamic_partitions(DOMAIN_PARTITIONS) == ["solar"]
        assert instance.event_log_storage.get_concurrency_info(GPU_POOL).slot_count == 1


def test_domain_partitions_sensor_follows_the_registry(defs, project: Path) -> None:  # noqa: ANN001
    import dagster as dg

    from dagster_project.defs.automation import domain_partitions_sensor
    from dagster_project.defs.partitions import DOMAIN_PARTITIONS

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(DOMAIN_PARTITIONS, ["solar", "gone"])
    (project / "kg_assets" / "domains.yaml").write_text(
        TINY_REGISTRY + "  moon:\n    source:\n      kind: triples\n      path: kg_assets/solar/triples.csv\n")
    result = domain_partitions_sensor(_context(defs, project, instance))
    requests = {type(r).__name__: list(r.partition_keys) for r in result.dynamic_partitions_requests}
    assert requests == {"AddDynamicPartitionsRequest": ["moon"], "DeleteDynamicPartitionsRequest": ["gone"]}
    assert not result.run_requests


def test_kg_source_sensor_requests_the_changed_domain_once(defs, project: Path) -> None:  # noqa: ANN001
    import dagster as dg

    from dagster_project.defs.automation import kg_source_sensor

    instance = dg.DagsterInstance.ephemeral()

    def tick(cursor: str | None) -> dg.SensorResult:
        return kg_source_sensor(_context(defs, project, instance, cursor))

    first = tick(None)  # baseline: hashes recorded, nothing launched, the missing partition added
    assert not first.run_requests and json.loads(first.cursor)["solar"]["hash"]
    assert [list(r.partition_keys) for r in first.dynamic_partitions_requests] == [["solar"]]
    instance.add_dynamic_partitions("domain", ["solar"])
    unchanged = tick(first.cursor)
    assert not unchanged.run_requests and unchanged.cursor == first.cursor and not unchanged.dynamic_partitions_requests

    triples = project / "kg_assets" / "solar" / "triples.csv"
    original = triples.read_bytes()
    triples.write_bytes(original + b"\n")  # one byte more
    changed = tick(first.cursor)
    assert len(changed.run_requests) == 1
    request = changed.run_requests[0]
    assert request.partition_key == "solar" and _keys(request.asset_selection) == KG_DOWNSTREAM
    assert request.run_key.startswith("solar:1:") and request.tags["omne/trigger"] == "kg_source_changed"
    assert tick(first.cursor).run_requests[0].run_key == request.run_key  # a retried tick asks for the same run
    assert not tick(changed.cursor).run_requests

    triples.write_bytes(original)  # changing back is a change too, with a new run key
    reverted = tick(changed.cursor)
    assert [r.run_key.split(":")[:2] for r in reverted.run_requests] == [["solar", "2"]]
    assert json.loads(reverted.cursor)["solar"]["hash"] == json.loads(first.cursor)["solar"]["hash"]


def test_kg_source_sensor_survives_a_missing_source_and_sees_new_domains(defs, project: Path) -> None:  # noqa: ANN001
    import dagster as dg

    from dagster_project.defs.automation import kg_source_sensor

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("domain", ["solar"])
    first = kg_source_sensor(_context(defs, project, instance))
    shutil.copytree(project / "kg_assets" / "solar", project / "kg_assets" / "moon")
    (project / "kg_assets" / "domains.yaml").write_text(
        TINY_REGISTRY + "  moon:\n    source:\n      kind: triples\n      path: kg_assets/moon/triples.csv\n")
    (project / "kg_assets" / "solar" / "triples.csv").unlink()
    result = kg_source_sensor(_context(defs, project, instance, first.cursor))
    assert [r.partition_key for r in result.run_requests] == ["moon"]  # solar: unreadable, left as it was
    assert json.loads(result.cursor)["solar"] == json.loads(first.cursor)["solar"]
    assert [list(r.partition_keys) for r in result.dynamic_partitions_requests] == [["moon"]]
