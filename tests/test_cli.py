"""The `omne` command line, run as a user runs it (a subprocess in a project folder)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import networkx as nx
import yaml

from pipelines.stages import STAGES
from tests.conftest import BuiltRun, cli_env


def omne(project: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["omne", *args], cwd=project, env=cli_env(), capture_output=True, text=True,
                            timeout=600)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_help_explains_every_command(project: Path) -> None:
    out = omne(project, "--help").stdout
    for command in ("domains", "kg", "params", "run"):
        assert command in out
    kg_help = omne(project, "kg", "--help").stdout
    for command in ("build", "import", "index", "stats", "search"):
        assert command in kg_help
    qa_help = omne(project, "qa", "--help").stdout
    for command in ("seeds", "generate", "gold", "build", "stats"):
        assert command in qa_help
    assert "--generator" in omne(project, "qa", "generate", "--help").stdout


def test_import_text_registers_a_text_domain_that_needs_an_llm(project: Path) -> None:
    text = Path(__file__).parent / "data" / "text_domain" / "rivers.txt"
    out = omne(project, "kg", "import", str(text), "--name", "rivers", "--no-build").stdout
    assert "registered domain 'rivers': text kg_assets/rivers/rivers.txt" in out
    registry = yaml.safe_load((project / "kg_assets" / "domains.yaml").read_text())
    assert registry["domains"]["rivers"]["source"]["kind"] == "text"
    failed = omne(project, "kg", "build", "--domain", "rivers", check=False)
    assert failed.returncode == 2 and "set llm.model in params.yaml or OMNE_LLM_MODEL" in failed.stderr
    bad = project / "latin1.txt"
    bad.write_bytes("Caf\xe9 on the Seine.".encode("latin-1"))
    refused = omne(project, "kg", "import", str(bad), "--name", "cafe", check=False)
    assert refused.returncode == 2 and "latin1.txt" in refused.stderr and "UTF-8" in refused.stderr


def test_domains_lists_the_registry(project: Path) -> None:
    assert omne(project, "domains").stdout.startswith("solar ")
    listed = json.loads(omne(project, "domains", "--json").stdout)
    assert listed[0]["name"] == "solar" and listed[0]["source"]["kind"] == "triples"


def test_run_builds_everything_prints_the_table_and_is_idempotent(built_run: BuiltRun, tmp_path: Path) -> None:
    first, project = built_run.output, built_run.copy_to(tmp_path / "project")
    assert "solar" in first and "built / built / built" in first
    assert "sft model: trained, 2 steps" in first and "base-tools" in first and "sft-tools" in first
    assert "rl stage 1: trained, 1 steps" in first and "rl stage 3: trained" in first and "rl-stage3-tools" in first
    assert (project / "artifacts" / "models" / "sft" / "adapter_config.json").is_file()
    assert "omne QA dataset" in first and "check qa_table_expectations: passed" in first
    assert (project / "artifacts" / "qa" / "dataset" / "qa.parquet").is_file()
    assert (project / "artifacts" / "kg" / "solar" / "entities.parquet").is_file()
    assert (project / "artifacts" / "index" / "solar" / "manifest.json").is_file()
    assert "omne run: wall time and peak memory per stage" in first
    timings = json.loads((project / "artifacts" / "reports" / "run_timings.json").read_text())
    run_stages = STAGES.run_stages()
    assert list(timings["stages_s"]) == [s.label for s in run_stages] + ["record (Dagster, DVC)"]
    assert timings["stages_s"]["SFT model"] > 0 and timings["total_s"] >= sum(timings["stages_s"].values())
    # peak RSS per stage (the kernel's high-water mark, reset before each stage): training peaks above the KG build
    assert set(timings["peak_rss_mb"]) == set(timings["stages_s"])
    assert 100 < timings["peak_rss_mb"]["knowledge graphs"] < timings["peak_rss_mb"]["SFT model"] < 6 * 1024
    # the evaluations and training stages each ran in a process of their own, whose peak is the stage's
    own = [s.label for s in run_stages if s.process == "child"]
    assert len(own) == 7
    assert {stage for stage, where in timings["process"].items() if where == "child"} == set(own)
    assert len({timings["pid"][stage] for stage in own} | {timings["main_pid"]}) == len(own) + 1
    assert timings["pid"]["knowledge graphs"] == timings["pid"]["record (Dagster, DVC)"] == timings["main_pid"]
    assert all(timings["peak_rss_mb"][stage] > 100 for stage in own)
    # what the run built is in the project's Dagster instance: 13 assets, their manifests and their checks
    assert f"record dagster: {len(run_stages)} new materializations" in first
    assert f"record dvc: {len(STAGES.dvc_addresses(['solar']))} stages in dvc.lock" in first
    recorded = _recorded_in_dagster(project / ".dagster_home")
    assert recorded["knowledge_graph[solar]"]["rows_entities"] == 28 and recorded["sft_model"]["path"].endswith("sft")
    assert set(recorded) - {"checks"} == {s.name + ("[solar]" if s.per_domain else "") for s in run_stages}
    assert recorded["checks"] == {"qa_dataset.split_leakage": True, "qa_dataset.qa_table_expectations": True,
                                  "sft_conversations.conversation_format": True,
                                  **{f"{s.name}.report_complete": True for s in run_stages if s.report}}
    manifest_before = (project / "artifacts" / "kg" / "solar" / "manifest.json").read_text()
    second = omne(project, "run").stdout
    assert "cached / cached / cached" in second and "sft model: up to date" in second
    assert "rl stage 3: up to date" in second
    assert "record dagster: 0 new materializations" in second and f"({len(run_stages)} already current)" in second
    assert (project / "artifacts" / "kg" / "solar" / "manifest.json").read_text() == manifest_before
    stats = json.loads(omne(project, "kg", "stats", "solar", "--json").stdout)
    assert stats["entities"] == 28 and stats["relations"] == 33 and stats["components"] == 1
    # the sweep point with the stage-2 model's own weight and steps is that model, not a retrain
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["sft"]["sweep_max_steps"] = None
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    sft_manifest = (project / "artifacts" / "models" / "sft" / "manifest.json").read_text()
    omne(project, "sft", "sweep", "--weight", "1.0", "--weight", "0.5")
    sweep = json.loads((project / "artifacts" / "reports" / "think_sweep" / "sweep.json").read_text())
    assert [(p["think_weight"], p["model"], p["report"], p["steps"]) for p in sweep] == [
        (1.0, "artifacts/models/sft", "artifacts/reports/think-sweep-w1", 2),
        (0.5, "artifacts/models/sft-w0.5", "artifacts/reports/think-sweep-w0.5", 2)]
    assert (project / "artifacts" / "models" / "sft" / "manifest.json").read_text() == sft_manifest
    assert not (project / "artifacts" / "models" / "sft-w1").exists()


def _recorded_in_dagster(home: Path) -> dict:
    """The latest materialization's metadata of every asset (partition) in the instance, and unpartitioned checks."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home)) as instance:
        recorded: dict = {}
        for key in instance.get_asset_keys():
            partitions = instance.get_materialized_partitions(key) or [None]
            for partition in partitions:
                records = instance.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None), limit=1)
                name = key.to_user_string() + (f"[{partition}]" if partition else "")
                recorded[name] = {k: v.value for k, v in records.records[0].asset_materialization.metadata.items()}
        checks = {}
        wanted = {"qa_dataset": ("split_leakage", "qa_table_expectations"), "sft_conversations": ("conversation_format",),
                  **{s.name: ("report_complete",) for s in STAGES.run_stages() if s.report}}
        for asset, names in wanted.items():
            for check in names:
                history = instance.event_log_storage.get_asset_check_execution_history(
                    dg.AssetCheckKey(dg.AssetKey(asset), check), limit=1)
                checks[f"{asset}.{check}"] = bool(history) and history[0].event.dagster_event.event_specific_data.passed
        recorded["checks"] = checks
    return recorded


def test_profile_is_selectable_from_the_cli(project: Path) -> None:
    assert json.loads(omne(project, "--profile", "paper", "params").stdout)["index"]["batch_size"] == 256
    assert json.loads(omne(project, "params").stdout)["index"]["batch_size"] == 64
    bad = omne(project, "--profile", "nope", "params", check=False)
    assert bad.returncode == 2 and "unknown profile 'nope'" in bad.stderr


def _lightrag_graphml(path: Path) -> None:
    graph = nx.Graph()
    for name, kind, desc in [("NOSEMA", "organism", "A microsporidian parasite of honey bees."),
                             ("FUMAGILLIN-B", "drug", "An antibiotic used against nosema disease.<SEP>Fed in syrup."),
                             ("HONEY BEE", "organism", "Apis mellifera.")]:
        graph.add_node(name, entity_id=name, entity_type=kind, description=desc, source_id="chunk-1<SEP>chunk-2")
    graph.add_edge("NOSEMA", "FUMAGILLIN-B", weight=2.0, description="Fumagillin-B treats nosema.",
                   keywords="treatment,control", source_id="chunk-1")
    graph.add_edge("NOSEMA", "HONEY BEE", weight=1.0, description="Nosema infects honey bees.",
                   keywords="infection", source_id="chunk-2")
    nx.write_graphml(graph, path)


def test_import_graphml_registers_builds_and_reports(project: Path, tmp_path: Path) -> None:
    source = tmp_path / "agri.graphml"
    _lightrag_graphml(source)
    out = omne(project, "kg", "import", str(source), "--name", "agriculture", "--description", "bees").stdout
    assert "registered domain 'agriculture'" in out and "3 entities, 2 relations" in out
    registry = yaml.safe_load((project / "kg_assets" / "domains.yaml").read_text())
    assert registry["domains"]["agriculture"]["source"] == {"kind": "lightrag_graphml",
                                                            "path": "kg_assets/agriculture/agri.graphml"}
    assert (project / "kg_assets" / "agriculture" / "agri.graphml").is_file()
    stats = json.loads(omne(project, "kg", "stats", "agriculture", "--json").stdout)
    assert stats["entities"] == 3 and stats["relations"] == 2
    hits = omne(project, "kg", "search", "agriculture", "fumagillin").stdout.splitlines()
    assert "FUMAGILLIN-B" in hits[0]
    again = omne(project, "kg", "import", str(source), "--name", "agriculture", check=False)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_import_and_build_offer_strict_and_say_they_are_all_or_nothing(project: Path, tmp_path: Path) -> None:
    assert "--strict" in omne(project, "kg", "build", "--help").stdout
    help_text = omne(project, "kg", "import", "--help").stdout
    assert "--strict" in help_text and "All or nothing" in help_text
    broken = tmp_path / "broken.graphml"
    broken.write_text("<graphml><graph><node id='a'></graph>", encoding="utf-8")
    refused = omne(project, "kg", "import", str(broken), "--name", "broken", "--strict", check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1  # one line
    assert sorted(p.name for p in (project / "kg_assets").iterdir()) == ["domains.yaml", "solar"]


def test_import_triples_with_entities_file(project: Path, tmp_path: Path) -> None:
    triples = tmp_path / "t.tsv"
    triples.write_text("subject\tpredicate\tobject\nAda Lovelace\twrote notes on\tAnalytical Engine\n"
                       "Charles Babbage\tdesigned\tAnalytical Engine\n", encoding="utf-8")
    entities = tmp_path / "e.csv"
    entities.write_text("name,type,description\nAda Lovelace,person,English mathematician.\n", encoding="utf-8")
    omne(project, "kg", "import", str(triples), "--name", "computing", "--entities", str(entities), "--no-build")
    omne(project, "kg", "build", "--domain", "computing")
    stats = json.loads(omne(project, "kg", "stats", "computing", "--json").stdout)
    assert stats["entities"] == 3 and stats["relations"] == 2


def test_bad_input_gives_one_clear_line_and_exit_code_2(project: Path, tmp_path: Path) -> None:
    cases = {
        ("kg", "build", "--domain", "nope"): "unknown domain 'nope'; known domains: solar",
        ("kg", "build", "--domain", "../x"): "invalid domain name '../x'",
        ("kg", "stats", "solar"): "no built knowledge graph",
    }
    broken = tmp_path / "broken.graphml"
    broken.write_text("<graphml><graph><node id='a'></graph>", encoding="utf-8")
    cases[("kg", "import", str(broken), "--name", "broken")] = "malformed XML at line 1"
    cases[("kg", "import", str(broken), "--name", "../evil")] = "invalid domain name '../evil'"
    for args, message in cases.items():
        result = omne(project, *args, check=False)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert not (project / "kg_assets" / "broken").exists()
    assert "broken" not in (project / "kg_assets" / "domains.yaml").read_text()
