"""Reliability figures (crash safety, hostile input, concurrency, memory), reprinted in one table against their targets.

Sections (``--sections``, default all):

- **imports**: concurrent `omne kg import --no-build` (lost registrations) and imports SIGKILLed at named
  steps then rerun (half-written leftovers, failed reruns), and broken source files (tracebacks, errors that
  are not one line naming the file): bench/_reliability_imports.py.
- **llm**: malformed replies served by the scripted OpenAI-compatible server through the real client
  (exceptions that escape it): bench/_reliability_llm.py.
- **server**: `omne tools serve` under hostile requests, thread load with /health polled, and large-scope
  requests (60 real names a scope, new episodes, then ended: 5xx, /health p99, RSS growth over the requests and
  after deleting their episodes): bench/_reliability_server.py.
- **dvc**: in a temporary git + DVC copy of the project on a generated domain, `dvc repro` SIGKILLed at
  each data stage's final rename ($OMNE_PAUSE_AT ``replace:<folder>``) and resumed (half-written
  artifacts, failed resumes); then `omne run --skip-eval` followed by `dvc repro qa_dataset` (the stages
  it built: how many rerun, seconds).
- **project**: this checkout after `make run`: seconds of `dvc repro` (what it reruns) and the peak RSS
  per stage that `omne run` wrote to artifacts/reports/run_timings.json. "n/a" until `make run` ran.

    .venv/bin/python bench/reliability.py                    # everything, full sizes (~6 min on 2 cores)
    .venv/bin/python bench/reliability.py --toy --out /tmp/bench   # small sizes, 3 sections (tests/test_bench.py)
    .venv/bin/python bench/reliability.py --sections server --server-seconds 60
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

# first: sets the offline environment and puts the project root on sys.path
from _common import (
    ROOT,
    BenchParser,
    args_record,
    load_average,
    load_line,
    machine_info,
    make_synthetic,
    verdict,
    write_results,
)

SECTIONS = ("imports", "llm", "server", "dvc", "project")
PEAK_RSS_TARGET_MB = 6 * 1024
DVC_REPRO_TARGET_S = 60.0
# the per-domain DVC stages, in order, with the artifact folder each writes (its pause point)
DATA_STAGES = {"knowledge_graph": "kg", "entity_index": "index", "seed_subgraphs": "seeds", "qa_pairs": "pairs",
               "gold_paths": "gold"}
PAUSE_TIMEOUT_S = 600.0


def _venv_tool(name: str) -> str:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else name


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMNE_PARAMS", "OMNE_PROFILE", "OMNE_PAUSE_AT",
                                                            "DAGSTER_HOME")}
    return {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", **extra}


def _run(cwd: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def _ran_stages(output: str) -> list[str]:
    return re.findall(r"Running stage '([^']+)'", output)


# --------------------------------------------------------------------------------------------
# dvc: kill -9 at each data stage, resume; omne run then dvc repro
# --------------------------------------------------------------------------------------------

def _dvc_project(root: Path, entities: int, relations: int, seed: int = 0) -> Path:
    """A git + DVC copy of the project (code, dvc.yaml, params.yaml) with one generated domain `synth`."""
    root.mkdir(parents=True)
    for name in ("params.yaml", "dvc.yaml"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "pipelines", root / "pipelines", ignore=shutil.ignore_patterns("__pycache__"))
    source = make_synthetic(root / "kg_assets" / "synth", entities, relations, seed=seed)
    registry = {"domains": {"synth": {"description": "A generated graph (bench/reliability.py).",
                                      "source": {"kind": "triples", "path": f"kg_assets/synth/{source.path}",
                                                 "entities": f"kg_assets/synth/{source.entities}"}}}}
    (root / "kg_assets" / "domains.yaml").write_text(yaml.safe_dump(registry, sort_keys=False), encoding="utf-8")
    (root / ".gitignore").write_text("/artifacts/\n/.dagster_home/\n", encoding="utf-8")
    for command in (["git", "init", "-q"], ["git", "config", "user.email", "bench@example.com"],
                    ["git", "config", "user.name", "bench"], [_venv_tool("dvc"), "init", "-q"],
                    ["dvc", "config", "core.analytics", "false"], ["git", "add", "-A"],
                    ["git", "commit", "-qm", "bench"]):
        done = _run(root, *command)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: {done.stderr[-500:]}")
    return root


def _half_written(root: Path) -> list[str]:
    """Artifact folders under their real names whose manifest is missing or lists a file that is absent or
    differs from its recorded hash (a LanceDB table folder is only checked to exist)."""
    from pipelines.manifest import MANIFEST_NAME, read_manifest, sha256_file

    bad = []
    artifacts = root / "artifacts"
    for kind, folder in (("kg", artifacts / "kg" / "synth"), ("index", artifacts / "index" / "synth"),
                         *((stage, artifacts / "qa" / stage / "synth") for stage in ("seeds", "pairs", "gold"))):
        if not folder.exists():
            continue
        manifest = read_manifest(folder) if (folder / MANIFEST_NAME).is_file() else None
        if manifest is None:
            bad.append(f"{kind}: no manifest")
            continue
        for name, digest in manifest.files.items():
            path = folder / name
            if not path.exists() or (path.is_file() and sha256_file(path) != digest):
                bad.append(f"{kind}/{name}")
    return bad


def _kill_dvc_at(root: Path, stage: str, point: str) -> bool:
    """Start `dvc repro STAGE` paused at ``point``; SIGKILL its process group there. False if never reached."""
    process = subprocess.Popen([_venv_tool("dvc"), "repro", stage], cwd=root,
                               env=_env(OMNE_PAUSE_AT=point, OMNE_PAUSE_S="600"), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    reached = False
    deadline = time.monotonic() + PAUSE_TIMEOUT_S
    assert process.stdout is not None
    for line in process.stdout:
        if f"paused at {point}" in line:
            reached = True
            break
        if time.monotonic() > deadline:
            break
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    return reached


def run_dvc_probe(entities: int = 2000, relations: int = 8000, seed: int = 0) -> dict[str, Any]:
    """SIGKILL `dvc repro` at the final rename of each data stage in turn, resuming each time; then `omne run
    --skip-eval` in a fresh copy and `dvc repro qa_dataset` (the same stages) after it."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="omne-dvc-probe-") as tmp:
        root = _dvc_project(Path(tmp) / "killed", entities, relations, seed)
        points = {f"{stage}@synth": f"replace:{folder}/synth" for stage, folder in DATA_STAGES.items()}
        not_reached, half_written = [], 0
        for stage, point in points.items():  # each kill lands in the stage after the last one killed
            if not _kill_dvc_at(root, stage, point):
                not_reached.append(point)
            half_written += len(_half_written(root))
        resumed = _run(root, _venv_tool("dvc"), "repro", "qa_dataset", "entity_index@synth")
        failed_resume = int(resumed.returncode != 0 or bool(_half_written(root))
                            or not (root / "artifacts" / "qa" / "dataset" / "manifest.json").is_file())

        fresh = _dvc_project(Path(tmp) / "fresh", entities, relations, seed)
        built = _run(fresh, _venv_tool("omne"), "run", "--skip-eval")
        if built.returncode != 0:
            raise RuntimeError(f"omne run --skip-eval: {built.stderr[-1500:]}")
        repro_start = time.perf_counter()
        repro = _run(fresh, _venv_tool("dvc"), "repro", "qa_dataset")  # the stages `--skip-eval` builds
        repro_s = time.perf_counter() - repro_start
    return {"kill_points": len(points), "points": list(points.values()), "points_not_reached": not_reached,
            "half_written_after_kill": half_written, "failed_resumes": failed_resume,
            "resumed_stages": _ran_stages(resumed.stdout), "repro_after_run_s": round(repro_s, 1),
            "repro_after_run_reran": _ran_stages(repro.stdout), "repro_after_run_exit": repro.returncode,
            "entities": entities, "relations": relations, "wall_s": round(time.monotonic() - started, 1)}


# --------------------------------------------------------------------------------------------
# project: this checkout after make run
# --------------------------------------------------------------------------------------------

def run_project_probe(root: Path = ROOT, dry: bool = False) -> dict[str, Any]:
    """`dvc repro` seconds and reruns in this checkout, and the peak RSS per stage of its last `omne run`;
    ``dry`` (--toy): only what `dvc repro --dry` would rerun, nothing run."""
    figures: dict[str, Any] = {}
    timings = root / "artifacts" / "reports" / "run_timings.json"
    if timings.is_file():
        peaks = json.loads(timings.read_text(encoding="utf-8")).get("peak_rss_mb") or {}
        figures["peak_rss_mb"] = peaks
        figures["peak_rss_max_mb"] = max(peaks.values(), default=None)
    if (root / "dvc.lock").is_file() and (root / "artifacts").is_dir():
        dry = _run(root, _venv_tool("dvc"), "repro", "--dry")
        would = _ran_stages(dry.stdout)
        if would or dry:  # never start a rebuild of the project from a benchmark, nor anything from a toy run
            figures["repro_would_rerun"] = would
            return figures
        start = time.perf_counter()
        repro = _run(root, _venv_tool("dvc"), "repro")
        figures["repro_s"] = round(time.perf_counter() - start, 1)
        figures["repro_reran"] = _ran_stages(repro.stdout)
        figures["repro_exit"] = repro.returncode
    return figures


# --------------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------------

def _row(figure: str, target: str, measured: Any, passed: bool | None) -> str:
    return f"| {figure} | {target} | {measured} | {verdict(passed)} |"


def table(results: dict[str, Any]) -> str:
    rows = ["| figure | target | measured | verdict |", "|---|---|---|---|"]
    if (r := results.get("imports")) is not None:
        rows.append(_row(f"lost registrations, {r['concurrent_imports']} concurrent imports", "0",
                         r["lost_registrations"], r["lost_registrations"] == 0))
        rows.append(_row(f"import killed at {r['kill_points']} points: half-written / failed reruns", "0 / 0",
                         f"{r['half_written_after_kill']} / {r['failed_reruns']}",
                         r["half_written_after_kill"] == 0 and r["failed_reruns"] == 0))
    if (r := results.get("imports")) is not None and (b := r.get("bad_files")) is not None:
        rows.append(_row(f"importer tracebacks / multi-line errors, {b['bad_files']} broken files", "0 / 0",
                         f"{b['tracebacks']} / {b['multi_line_errors'] + b['errors_not_naming_the_file']}",
                         b["tracebacks"] == 0 and b["multi_line_errors"] == 0 and b["errors_not_naming_the_file"] == 0
                         and b["bad_files"] >= 100))
    if (r := results.get("llm")) is not None:
        rows.append(_row(f"exceptions out of the LLM client, {r['malformed_replies']} malformed replies", "0",
                         r["exceptions"], r["exceptions"] == 0 and r["malformed_replies"] >= 100))
        if "cache_cases" in r:
            rows.append(_row(f"LLM cache: exceptions / bad replies cached, {r['cache_cases']} JSON cases "
                             f"({r['cache_rounds']} rounds)", "0 / 0",
                             f"{r['cache_exceptions']} / {r['bad_replies_cached']}",
                             r["cache_exceptions"] == 0 and r["bad_replies_cached"] == 0 and r["cache_cases"] >= 150))
    if (r := results.get("server")) is not None:
        rows.append(_row(f"server 5xx, {r['hostile_requests']:,} hostile + {r['load_requests']:,} load requests",
                         "0", r["server_5xx"], r["server_5xx"] == 0))
        rows.append(_row(f"/health p99 under {r['load_seconds']:.0f} s of load", "< 1 s",
                         f"{r['health_p99_s']:.3f} s", r["health_p99_s"] < 1.0))
        scoped = (f"{r['large_scope_requests']:,} large-scope requests ({r['large_scope_seeds']} real names a scope, "
                  "new episodes)")
        rows.append(_row(f"server RSS growth over {scoped}", "within +-50 MB", f"{r['rss_growth_mb']:+.1f} MB",
                         abs(r["rss_growth_mb"]) <= 50))
        rows.append(_row(f"server RSS after ending those {r['large_scope_deleted']:,} episodes, against the start",
                         "within +-50 MB", f"{r['rss_after_delete_growth_mb']:+.1f} MB "
                         f"({r['rss_freed_by_delete_mb']:+.1f} MB given back)",
                         abs(r["rss_after_delete_growth_mb"]) <= 50))
    if (r := results.get("dvc")) is not None:
        rows.append(_row(f"dvc repro killed at {r['kill_points']} stages: half-written / failed resumes", "0 / 0",
                         f"{r['half_written_after_kill']} / {r['failed_resumes']}",
                         r["half_written_after_kill"] == 0 and r["failed_resumes"] == 0
                         and not r["points_not_reached"]))
        rows.append(_row("stages `dvc repro qa_dataset` reruns after `omne run --skip-eval` (generated domain)", "none",
                         ", ".join(r["repro_after_run_reran"]) or "none",
                         not r["repro_after_run_reran"] and r["repro_after_run_exit"] == 0))
    if (r := results.get("project")) is not None:
        if "repro_would_rerun" in r and not r["repro_would_rerun"]:
            rows.append(_row("`dvc repro` after `make run` (this checkout)", f"<= {DVC_REPRO_TARGET_S:.0f} s",
                             "n/a (--toy: `dvc repro --dry` only; nothing would rerun)", None))
        elif "repro_would_rerun" in r:
            rows.append(_row("`dvc repro` after `make run` (this checkout)", f"<= {DVC_REPRO_TARGET_S:.0f} s",
                             f"n/a (stale: {len(r['repro_would_rerun'])} stages would run; run make run first)", None))
        elif "repro_s" in r:
            rows.append(_row("`dvc repro` after `make run` (this checkout)", f"<= {DVC_REPRO_TARGET_S:.0f} s",
                             f"{r['repro_s']:.1f} s, reran: {', '.join(r['repro_reran']) or 'none'}",
                             r["repro_s"] <= DVC_REPRO_TARGET_S and not r["repro_reran"]))
        else:
            rows.append(_row("`dvc repro` after `make run` (this checkout)", f"<= {DVC_REPRO_TARGET_S:.0f} s",
                             "n/a (no dvc.lock: run make run first)", None))
        peak = r.get("peak_rss_max_mb")
        worst = max(r.get("peak_rss_mb", {}).items(), key=lambda kv: kv[1], default=("", 0))[0]
        rows.append(_row("peak RSS of the largest `make run` stage", f"<= {PEAK_RSS_TARGET_MB / 1024:.0f} GB",
                         f"{peak / 1024:.2f} GB ({worst})" if peak else "n/a (no run_timings.json)",
                         None if peak is None else peak <= PEAK_RSS_TARGET_MB))
    return "\n".join(rows)


TOY = {"sections": ["imports", "llm", "server"], "concurrent": 4, "import_kill_points": 2, "llm_replies": 100,
       "bad_files": 26,
       "server_seconds": 3.0, "threads": 8, "hostile": 100, "large_scope": 100, "server_entities": 200,
       "dvc_entities": 300}


def build_parser() -> BenchParser:
    parser = BenchParser("reliability", description=__doc__, toy=TOY,
                         toy_note="the server's KG embedded with a tiny random encoder; the dvc section (dozens of "
                                  "`dvc repro` and `omne` processes: minutes) and the project section (this "
                                  "checkout) only when --sections names them, the project one then without running "
                                  "`dvc repro` here",
                         seed_help="seed of the generated KGs (the server's and the DVC domain's)", params=False)
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="what to probe")
    parser.add_argument("--concurrent", type=int, default=16, help="simultaneous `omne kg import --no-build`")
    parser.add_argument("--import-kill-points", type=int, default=5, help="imports SIGKILLed at named steps")
    parser.add_argument("--bad-files", type=int, default=104, help="broken source files given to the importers")
    parser.add_argument("--llm-replies", type=int, default=120, help="malformed replies sent to the LLM client")
    parser.add_argument("--server-seconds", type=float, default=60.0, help="seconds of thread load on the server")
    parser.add_argument("--threads", type=int, default=32, help="client threads of the load phase")
    parser.add_argument("--hostile", type=int, default=1000, help="hostile requests")
    parser.add_argument("--large-scope", type=int, default=1000, help="large-scope requests (memory phase)")
    parser.add_argument("--server-entities", type=int, default=2000,
                        help="entities of the server's generated KG (5 relations per entity)")
    parser.add_argument("--dvc-entities", type=int, default=2000, help="entities of the generated DVC domain")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.perf_counter()
    machine = {**machine_info(), "load_average_at_start": load_average()}
    results: dict[str, Any] = {"benchmark": "reliability", "date": datetime.now(UTC).isoformat(timespec="seconds"),
                               "args": args_record(args)}
    if "imports" in args.sections:
        from _reliability_imports import run_bad_file_probe, run_import_probe

        print("imports: concurrent registrations, kills, broken files ...", flush=True)
        results["imports"] = run_import_probe(args.concurrent, args.import_kill_points)
        results["imports"]["bad_files"] = run_bad_file_probe(args.bad_files)
    if "llm" in args.sections:
        from _reliability_llm import run_llm_probe

        print("llm: malformed replies ...", flush=True)
        results["llm"] = run_llm_probe(args.llm_replies)
    if "server" in args.sections:
        from _reliability_server import run_server_probe

        print("server: hostile requests, load, large scopes ...", flush=True)
        encoder = None
        if args.toy:
            from _toy import tiny_encoder

            encoder = str(tiny_encoder())
        results["server"] = run_server_probe(args.server_seconds, args.threads, args.hostile, args.large_scope,
                                             entities=args.server_entities, relations=args.server_entities * 5,
                                             seed=args.seed, encoder=encoder)
    if "dvc" in args.sections:
        print("dvc: kills at each data stage, then omne run + dvc repro ...", flush=True)
        results["dvc"] = run_dvc_probe(args.dvc_entities, args.dvc_entities * 4, seed=args.seed)
    if "project" in args.sections:
        print("project: dvc repro after make run, peak RSS per stage ...", flush=True)
        results["project"] = run_project_probe(dry=args.toy)
    machine["load_average_at_end"] = load_average()
    results["machine"] = machine
    write_results(results, table(results) + "\n\n" + load_line(machine), args.out, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
