"""Imports are transactions: concurrent imports all land, a killed or failed import leaves nothing half
done, broken domains do not stop `omne kg build`, and the KG checks' warnings reach the command line.

Real `omne` subprocesses in a throw-away project; kills are SIGKILLs at named pause points
($OMNE_PAUSE_AT, see pipelines/crashsafe.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import networkx as nx
import pytest
import yaml

from pipelines.agent.tools import KGToolbox
from pipelines.config import load_params
from pipelines.crashsafe import OWNER_FILE, LockBusyError, Owner, file_lock
from pipelines.domains import Domain, SourceSpec, add_domain, load_registry
from pipelines.kg.leftovers import clean_leftovers, find_leftovers
from tests.conftest import DATA, cli_env

SOLAR_TRIPLES = DATA / "solar" / "triples.csv"


def omne(project: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["omne", *args], cwd=project, env=env or cli_env(), capture_output=True, text=True,
                          timeout=600)


def registered(project: Path) -> dict:
    return yaml.safe_load((project / "kg_assets" / "domains.yaml").read_text(encoding="utf-8"))["domains"]


def leftovers(project: Path) -> list[str]:
    """Hidden entries of kg_assets/ (journals, staging copies, backups, registry temp files) and
    temporary folders, backups and owner markers under artifacts/."""
    found = [p.name for p in (project / "kg_assets").iterdir() if p.name.startswith(".")]
    artifacts = project / "artifacts"
    if artifacts.exists():
        found += [str(p.relative_to(project)) for p in artifacts.rglob("*")
                  if p.name == OWNER_FILE or ".tmp-" in p.name or ".old-" in p.name or ".bak-" in p.name]
    return found


def kill_at(project: Path, point: str, *args: str) -> str:
    """Run `omne *args` until it pauses at ``point``, then SIGKILL it; its stderr so far."""
    proc = subprocess.Popen(["omne", *args], cwd=project, env=cli_env(OMNE_PAUSE_AT=point, OMNE_PAUSE_S="300"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = []
    assert proc.stderr is not None
    for line in proc.stderr:
        seen.append(line)
        if f"paused at {point}" in line:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            return "".join(seen)
    proc.wait(timeout=30)
    raise AssertionError(f"never paused at {point} (exit {proc.returncode}): {''.join(seen)}")


def sparse_graphml(path: Path, nodes: int = 60, edges: int = 3) -> Path:
    """A LightRAG-style graph where most nodes have no relation (the probe's 11,768-of-12,142 case, small)."""
    graph = nx.Graph()
    for i in range(nodes):
        graph.add_node(f"N{i}", entity_id=f"Node {i}", entity_type="thing", description=f"Node number {i}.",
                       source_id="chunk-1")
    for i in range(edges):
        graph.add_edge(f"N{i}", f"N{i + 1}", weight=1.0, description="linked", keywords="link", source_id="chunk-1")
    nx.write_graphml(graph, path)
    return path


# --------------------------------------------------------------------------------------------- concurrency


def test_sixteen_concurrent_imports_all_register(project: Path, tmp_path: Path) -> None:
    names = [f"d{i:02d}" for i in range(16)]
    args = [("kg", "import", str(SOLAR_TRIPLES), "--name", name, "--no-build") for name in names]
    with ThreadPoolExecutor(len(args)) as pool:
        results = list(pool.map(lambda a: omne(project, *a), args))
    for name, result in zip(names, results, strict=True):
        assert result.returncode == 0, result.stderr
        assert f"registered domain '{name}'" in result.stdout
    domains = registered(project)
    assert set(names) <= set(domains) and "solar" in domains
    for name in names:
        assert (project / "kg_assets" / name / "triples.csv").read_bytes() == SOLAR_TRIPLES.read_bytes()
    assert leftovers(project) == []


def test_registry_lock_serialises_add_domain_and_a_busy_lock_names_its_holder(tmp_path: Path) -> None:
    path = tmp_path / "kg_assets" / "domains.yaml"
    with ThreadPoolExecutor(8) as pool:  # threads: flock is per open file, so they exclude one another too
        list(pool.map(lambda i: add_domain(path, Domain(name=f"t{i}", source=SourceSpec(kind="triples", path="x"))),
                      range(8)))
    assert sorted(load_registry(path).names) == [f"t{i}" for i in range(8)]
    lock = tmp_path / "x.lock"
    with file_lock(lock, what="domain 'x'"):
        with pytest.raises(LockBusyError, match=rf"domain 'x' is locked by another omne process \(pid {os.getpid()}\)"):
            with file_lock(lock, timeout_s=0.1, what="domain 'x'"):
                pass
    with file_lock(lock, timeout_s=0):  # released
        pass


# --------------------------------------------------------------------------------------------- failures


def test_a_failed_import_is_rolled_back_and_the_same_command_then_works(project: Path) -> None:
    text = DATA / "text_domain" / "rivers.txt"
    failed = omne(project, "kg", "import", str(text), "--name", "rivers")  # building needs an LLM: none set
    assert failed.returncode == 2 and "set llm.model" in failed.stderr and "rolled back" in failed.stderr
    assert "Traceback" not in failed.stderr
    assert "rivers" not in registered(project)
    assert not (project / "kg_assets" / "rivers").exists()
    assert leftovers(project) == []
    again = omne(project, "kg", "import", str(text), "--name", "rivers", "--no-build")
    assert again.returncode == 0, again.stderr
    assert "rivers" in registered(project)


@pytest.mark.parametrize("point", ["copying", "copied", "swapped", "registering"])
def test_kill_during_an_import_then_the_rerun_succeeds_and_nothing_half_written_remains(
        project: Path, point: str) -> None:
    args = ("kg", "import", str(SOLAR_TRIPLES), "--name", "moons", "--no-build")
    kill_at(project, point, *args)
    assert "moons" not in registered(project)
    rerun = omne(project, *args)
    assert rerun.returncode == 0, rerun.stderr
    assert "note: removed leftover of a killed run: kg_assets/.moons.import.json" in rerun.stderr
    assert (project / "kg_assets" / "moons" / "triples.csv").read_bytes() == SOLAR_TRIPLES.read_bytes()
    assert registered(project)["moons"]["source"]["path"] == "kg_assets/moons/triples.csv"
    assert leftovers(project) == []


def test_kill_mid_copy_leaves_a_half_file_that_the_next_run_removes(project: Path) -> None:
    kill_at(project, "copying", "kg", "import", str(SOLAR_TRIPLES), "--name", "moons", "--no-build")
    staged = [p for p in (project / "kg_assets").iterdir() if p.name.startswith(".moons.tmp-")]
    half = staged[0] / "kg_assets" / "moons" / "triples.csv"  # the source as the build will see it
    assert len(staged) == 1 and half.stat().st_size < SOLAR_TRIPLES.stat().st_size
    assert not (project / "kg_assets" / "moons").exists()  # the half copy never was where sources live
    rerun = omne(project, "kg", "build")  # any later build replays the killed import's journal
    assert rerun.returncode == 0, rerun.stderr
    assert f"removed leftover of a killed run: kg_assets/{staged[0].name}" in rerun.stderr
    assert leftovers(project) == []


def test_kill_after_registering_keeps_the_import_and_cleans_its_journal(project: Path) -> None:
    kill_at(project, "registered", "kg", "import", str(SOLAR_TRIPLES), "--name", "moons", "--no-build")
    assert "moons" in registered(project) and leftovers(project) == [".moons.import.json"]
    again = omne(project, "kg", "import", str(SOLAR_TRIPLES), "--name", "moons", "--no-build")
    assert again.returncode == 2 and "already exists" in again.stderr  # it did land
    assert (project / "kg_assets" / "moons" / "triples.csv").read_bytes() == SOLAR_TRIPLES.read_bytes()
    assert leftovers(project) == []


@pytest.mark.parametrize("point", ["kg_written", "built"])
def test_kill_during_the_build_of_an_import_then_the_rerun_succeeds(project: Path, point: str) -> None:
    args = ("kg", "import", str(SOLAR_TRIPLES), "--name", "moons")
    kill_at(project, point, *args)
    if point == "kg_written":  # killed inside the atomic write of the staged KG: its temp folder names us
        temps = list((project / "artifacts").glob(".moons.tmp-*/kg/.moons.tmp-*"))
        assert len(temps) == 1 and Owner.model_validate_json((temps[0] / OWNER_FILE).read_text()).alive() is False
        assert not (project / "artifacts" / "kg" / "moons").exists()  # never where readers look
    rerun = omne(project, *args)
    assert rerun.returncode == 0, rerun.stderr
    assert "built moons: 28 entities, 33 relations, 28 vectors" in rerun.stdout
    assert leftovers(project) == []
    assert (project / "artifacts" / "kg" / "moons" / "manifest.json").is_file()
    assert (project / "artifacts" / "index" / "moons" / "manifest.json").is_file()


def test_kill_during_a_replace_puts_the_previous_domain_back(project: Path, tmp_path: Path) -> None:
    before = (project / "kg_assets" / "solar" / "triples.csv").read_bytes()
    registry_before = registered(project)["solar"]
    other = sparse_graphml(tmp_path / "other.graphml")
    kill_at(project, "swapped", "kg", "import", str(other), "--name", "solar", "--replace", "--no-build")
    assert not (project / "kg_assets" / "solar" / "triples.csv").exists()  # killed with the new files in place
    built = omne(project, "kg", "build", "-d", "solar")
    assert built.returncode == 0, built.stderr
    assert "put back after a killed run: kg_assets/solar" in built.stderr
    assert (project / "kg_assets" / "solar" / "triples.csv").read_bytes() == before
    assert registered(project)["solar"] == registry_before
    assert leftovers(project) == []


def kg_stats(project: Path, name: str = "solar") -> dict:
    result = omne(project, "kg", "stats", name, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("point", ["built", "swapped", "registering"])
def test_a_replace_killed_before_its_commit_never_reaches_readers(project: Path, tmp_path: Path, point: str) -> None:
    """Killed after building the new KG (staged: never where readers look) or while swapping it in (the first
    reader replays the journal): `kg stats` and the tool server see the previous domain, whose source the
    registry names, and nothing is left over."""
    assert omne(project, "kg", "build", "-d", "solar").returncode == 0
    before, registry_before = kg_stats(project), registered(project)["solar"]
    source = project / registry_before["source"]["path"]
    other = sparse_graphml(tmp_path / "other.graphml")  # 60 entities, where solar has 28
    kill_at(project, point, "kg", "import", str(other), "--name", "solar", "--replace")
    assert registered(project)["solar"] == registry_before
    marker = project / "artifacts" / ".solar.import.json"
    if point == "built":  # nothing swapped yet: the live folders are the previous domain's
        assert source.is_file() and not marker.exists()
        assert (project / "kg_assets" / ".solar.import.json").is_file()
    else:  # killed with the new files in place: the first read puts the previous ones back
        assert not source.exists() and marker.is_file()
    # the tool server's own read path (KGToolbox -> DomainGraph -> read_kg), in this process
    graph = KGToolbox(load_params(project / "params.yaml")).graph("solar")
    assert graph.num_entities == before["entities"] == 28
    assert source.is_file() and not marker.exists()
    assert kg_stats(project) == before  # and the CLI's (which also removes a killed build's staging)
    assert leftovers(project) == []
    again = omne(project, "kg", "import", str(other), "--name", "solar", "--replace")
    assert again.returncode == 0, again.stderr
    assert kg_stats(project)["entities"] == 60 and leftovers(project) == []


def test_a_running_tool_server_never_serves_a_replace_killed_at_its_swap(project: Path, tmp_path: Path) -> None:
    from tests.tool_support import free_port, wait_for_health

    assert omne(project, "kg", "build", "-d", "solar").returncode == 0
    port = free_port()
    server = subprocess.Popen(["omne", "tools", "serve", "--port", str(port)], cwd=project, env=cli_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_health(url, process=server)
        call = {"call": 'get_tail_relations(entity="Io")', "graph_type": "solar"}
        first = httpx.post(f"{url}/v1/tools/call", json=call, timeout=30).json()
        assert first["ok"], first
        kill_at(project, "swapped", "kg", "import", str(sparse_graphml(tmp_path / "other.graphml")),
                "--name", "solar", "--replace")
        time.sleep(1.5)  # past the server's reload check: the manifest on disk changed
        for _ in range(3):
            assert httpx.post(f"{url}/v1/tools/call", json=call, timeout=30).json() == first
            time.sleep(1.1)
        assert leftovers(project) == []
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_replace_swaps_the_source_and_keeps_the_folder_s_other_files(project: Path, tmp_path: Path) -> None:
    other = sparse_graphml(tmp_path / "other.graphml")
    result = omne(project, "kg", "import", str(other), "--name", "solar", "--replace", "--no-build")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (project / "kg_assets" / "solar").iterdir()) == ["README.md", "other.graphml"]
    assert registered(project)["solar"]["source"] == {"kind": "lightrag_graphml",
                                                      "path": "kg_assets/solar/other.graphml"}
    assert leftovers(project) == []


def test_sigterm_rolls_back_at_once(project: Path) -> None:
    proc = subprocess.Popen(["omne", "kg", "import", str(SOLAR_TRIPLES), "--name", "moons"], cwd=project,
                            env=cli_env(OMNE_PAUSE_AT="kg_written", OMNE_PAUSE_S="300"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "paused at kg_written" in line:
            proc.send_signal(signal.SIGTERM)
            break
    assert proc.wait(timeout=60) != 0
    assert "moons" not in registered(project)
    assert not (project / "kg_assets" / "moons").exists() and not (project / "artifacts" / "kg" / "moons").exists()
    assert leftovers(project) == []


# --------------------------------------------------------------------------------------------- kg build


def test_kg_build_reports_every_broken_domain_and_builds_the_rest(project: Path, tmp_path: Path) -> None:
    broken = project / "kg_assets" / "broken"
    broken.mkdir()
    (broken / "g.graphml").write_text("<graphml><graph><node id='a'></graph>", encoding="utf-8")
    with (project / "kg_assets" / "domains.yaml").open("a", encoding="utf-8") as handle:
        handle.write("  broken:\n    source: {kind: lightrag_graphml, path: kg_assets/broken/g.graphml}\n"
                     "  gone:\n    source: {kind: triples, path: kg_assets/gone/triples.csv}\n"
                     "  later:\n    source: {kind: triples, path: kg_assets/solar/triples.csv}\n")
    result = omne(project, "kg", "build")
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors[0].startswith("error: broken: ") and "malformed XML at line 1" in errors[0]
    assert errors[1].startswith("error: gone: ") and "kg_assets/gone/triples.csv" in errors[1]
    assert errors[2] == "error: 2 domain(s) failed: broken, gone"
    assert "solar: built: " in result.stdout and "later: built: 28 entities, 33 relations" in result.stdout
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------------------------- quality


def test_a_broken_graph_warns_with_counts_and_strict_rolls_it_back(project: Path, tmp_path: Path) -> None:
    graph = sparse_graphml(tmp_path / "sparse.graphml")
    strict = omne(project, "kg", "import", str(graph), "--name", "sparse", "--strict")
    assert strict.returncode == 2, strict.stderr
    assert "isolated_share: 56 of 60 entities (93.3%) have no relation; at most 50.0% allowed" in strict.stderr
    assert "--strict" in strict.stderr and "rolled back" in strict.stderr
    assert "sparse" not in registered(project) and not (project / "kg_assets" / "sparse").exists()
    assert not (project / "artifacts" / "kg" / "sparse").exists() and leftovers(project) == []

    lenient = omne(project, "kg", "import", str(graph), "--name", "sparse")
    assert lenient.returncode == 0, lenient.stderr
    assert ("warning: sparse: isolated_share: 56 of 60 entities (93.3%) have no relation; at most 50.0% "
            "allowed (checks.max_isolated_share)") in lenient.stderr
    assert "built sparse: 60 entities, 3 relations" in lenient.stdout

    build = omne(project, "kg", "build")
    assert build.returncode == 0 and "warning: sparse: isolated_share: 56 of 60" in build.stderr
    assert "warning: solar" not in build.stderr
    strict_build = omne(project, "kg", "build", "--strict")
    assert strict_build.returncode == 2
    assert "error: sparse: domain 'sparse': the KG failed 1 check(s)" in strict_build.stderr
    assert "solar: up to date" in strict_build.stdout


def test_every_entry_point_s_kg_build_cleans_up_locks_and_gates(project: Path, tmp_path: Path) -> None:
    """`omne run`, Dagster and the registry's other users build a KG through ``build_domain_kg``: it removes the
    domain's dead leftovers first, waits for the domain's lock, and refuses a KG that fails its checks."""
    import threading

    from pipelines.kg.domain_build import build_domain_kg
    from pipelines.kg.journal import domain_lock
    from pipelines.kg.quality import QualityError
    from pipelines.stages import STAGES

    assert STAGES.get("knowledge_graph").function is build_domain_kg
    folder = project / "kg_assets" / "sparse"
    folder.mkdir()
    sparse_graphml(folder / "g.graphml")
    with (project / "kg_assets" / "domains.yaml").open("a", encoding="utf-8") as handle:
        handle.write("  sparse:\n    source: {kind: lightrag_graphml, path: kg_assets/sparse/g.graphml}\n")
    params = load_params(project / "params.yaml")
    domain = load_registry(params.registry_path).get("sparse")
    dead = params.artifacts_dir / "kg" / ".sparse.tmp-0000dead"
    dead.mkdir(parents=True)
    (dead / OWNER_FILE).write_text(Owner.current().model_copy(update={"started": 1.0}).model_dump_json())

    with pytest.raises(QualityError, match="isolated_share: 56 of 60 entities"):  # a warning, an error when strict
        build_domain_kg(domain, params, strict=True)
    assert not dead.exists()

    done = threading.Event()
    with domain_lock(params, "sparse"):  # another process importing or building the domain
        worker = threading.Thread(target=lambda: (build_domain_kg(domain, params), done.set()))
        worker.start()
        assert not done.wait(1.0)  # waits for the lock
    worker.join(timeout=60)
    assert done.is_set() and (params.artifacts_dir / "kg" / "sparse" / "manifest.json").is_file()


def test_thresholds_come_from_params_checks(project: Path, tmp_path: Path) -> None:
    params_file = project / "params.yaml"
    raw = yaml.safe_load(params_file.read_text(encoding="utf-8"))
    raw.setdefault("checks", {})["max_isolated_share"] = 0.95
    params_file.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    graph = sparse_graphml(tmp_path / "sparse.graphml")
    result = omne(project, "kg", "import", str(graph), "--name", "sparse", "--strict", "--no-build")
    assert result.returncode == 0, result.stderr
    build = omne(project, "kg", "build", "--strict", "-d", "sparse")
    assert build.returncode == 0 and "isolated_share" not in build.stderr, build.stderr


# --------------------------------------------------------------------------------------------- names


def test_reserved_and_overlong_names_are_refused(project: Path) -> None:
    (project / "kg_assets" / "exporters").mkdir()
    (project / "kg_assets" / "exporters" / "solar.py").write_text("print('exporter')\n", encoding="utf-8")
    (project / "kg_assets" / "notes").mkdir()
    cases = {
        "exporters": "domain name 'exporters' is reserved",
        "notes": "kg_assets/notes already exists and is not the folder of a registered domain 'notes'",
        "x" * 300: "300 characters, at most 64",
    }
    for name, message in cases.items():
        result = omne(project, "kg", "import", str(SOLAR_TRIPLES), "--name", name, "--no-build")
        assert result.returncode == 2 and message in result.stderr, (name[:10], result.stderr)
        assert "Traceback" not in result.stderr
    assert sorted(p.name for p in (project / "kg_assets" / "exporters").iterdir()) == ["solar.py"]
    assert list((project / "kg_assets" / "notes").iterdir()) == []
    assert set(registered(project)) == {"solar"} and leftovers(project) == []


def test_non_finite_weights_are_refused_naming_the_record(project: Path, tmp_path: Path) -> None:
    triples = tmp_path / "t.csv"
    triples.write_text("head,relation,tail,weight\nA,r,B,1\nB,r,C,nan\nC,r,D,inf\n", encoding="utf-8")
    result = omne(project, "kg", "import", str(triples), "--name", "weights", "--no-build")
    assert result.returncode == 2
    assert "t.csv: 2 record(s) with a weight that is not finite (NaN or infinity): t.csv:3 ('nan'), " \
           "t.csv:4 ('inf')" in result.stderr
    assert "weights" not in registered(project)


# --------------------------------------------------------------------------------------------- leftovers


def test_clean_leftovers_removes_dead_writers_and_keeps_live_or_young_ones(project: Path) -> None:
    params = load_params(project / "params.yaml")
    kg = params.artifacts_dir / "kg"
    dead, live, young, stale = (kg / f".solar.tmp-{tag}" for tag in ("0000dead", "0000a11e", "00001234", "0000cafe"))
    for folder in (dead, live, young, stale):
        folder.mkdir(parents=True)
    # a pid whose start time differs is another (dead) process, as after pid reuse
    (dead / OWNER_FILE).write_text(Owner.current().model_copy(update={"started": 1.0}).model_dump_json())
    (live / OWNER_FILE).write_text(Owner.current().model_dump_json())
    old = time.time() - 3600
    os.utime(stale, (old, old))
    found = clean_leftovers(params, ["solar"])
    assert sorted(found.removed) == sorted(str(p.relative_to(project)) for p in (dead, stale))
    assert any(f"being written by pid {os.getpid()}" in k for k in found.kept)
    assert any("no owner recorded" in k for k in found.kept)
    assert live.exists() and young.exists() and not dead.exists() and not stale.exists()
    assert find_leftovers(params) == sorted([live, young])
    previous = kg / ".solar.old-0000beef"  # killed between the two renames of an atomic write
    previous.mkdir()
    (previous / "manifest.json").write_text("{}")
    assert clean_leftovers(params, ["solar"]).restored == ["artifacts/kg/solar"]
    assert json.loads((kg / "solar" / "manifest.json").read_text()) == {}


def test_the_importer_s_truncations_are_in_the_manifest_and_kg_stats(project: Path, tmp_path: Path) -> None:
    triples = tmp_path / "long.csv"
    triples.write_text("head,relation,tail\nHub,links,Spoke\n", encoding="utf-8")
    entities = tmp_path / "long_entities.csv"
    entities.write_text(f"name,type,description\nHub,node,{'x' * 12_000}\n", encoding="utf-8")
    result = omne(project, "kg", "import", str(triples), "--name", "long", "--entities", str(entities))
    assert result.returncode == 0, result.stderr
    note = ("kg_assets/long/long_entities.csv: 1 entity description(s) longer than 10,000 characters truncated")
    assert "warning: long: " in result.stderr and "long_entities.csv: 1 entity description(s)" in result.stderr
    manifest = json.loads((project / "artifacts" / "kg" / "long" / "manifest.json").read_text(encoding="utf-8"))
    notes = manifest["metadata"]["import_notes"]
    assert len(notes) == 1 and notes[0].startswith(note), notes  # named as the registry names it, not the staging
    assert kg_stats(project, "long")["import_notes"] == notes
    text = omne(project, "kg", "stats", "long")
    assert text.returncode == 0 and f"import_note          {notes[0]}" in text.stdout
    assert omne(project, "kg", "build", "-d", "solar").returncode == 0
    assert kg_stats(project)["import_notes"] == []  # solar: nothing cut
