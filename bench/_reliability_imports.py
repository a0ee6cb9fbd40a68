"""Reliability probe of `omne kg import`: concurrent registrations, and SIGKILLs at named steps.

Counts what a user would lose: registrations that vanish when imports run side by side (the registry's
read-modify-write), half-written files left by a killed import, and reruns that then fail. Each kill
lands at a named pause point ($OMNE_PAUSE_AT, pipelines/crashsafe.py), so the figures are the same on
every run. bench/reliability.py imports ``run_import_probe``; run alone it prints the figures as JSON:

    .venv/bin/python bench/_reliability_imports.py --concurrent 16 --kill-points 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:  # run as a script (bench/ on sys.path), or imported as bench._reliability_imports
    from _common import ROOT
except ImportError:  # pragma: no cover - depends on how the caller put bench/ on sys.path
    from bench._common import ROOT

import yaml  # noqa: E402

# Where a kill lands, and whether that import builds its KG and index (slower: the encoder loads).
KILL_POINTS: list[tuple[str, bool]] = [("copying", False), ("swapped", False), ("kg_written", True),
                                       ("registering", False), ("registered", False), ("copied", False),
                                       ("built", True), ("validated", False)]
AFTER_COMMIT = {"registered"}  # killed once registered: a rerun rightly answers "already exists"
PAUSE_TIMEOUT_S = 300.0


def _omne() -> str:
    beside = Path(sys.executable).parent / "omne"
    return str(beside) if beside.exists() else "omne"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMNE_PARAMS", "OMNE_PROFILE", "OMNE_PAUSE_AT")}
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "LANCE_LOG": "error", **extra}


def _project(root: Path, rows: int = 400) -> Path:
    """A throw-away project: the real params.yaml, an empty registry, and a triples file to import."""
    (root / "kg_assets").mkdir(parents=True)
    shutil.copy(ROOT / "params.yaml", root / "params.yaml")
    (root / "kg_assets" / "domains.yaml").write_text("domains: {}\n", encoding="utf-8")
    lines = ["head,relation,tail,description"]
    lines += [f"Entity {i},links to,Entity {(i * 7 + 1) % rows},Entity {i} links to entity {(i * 7 + 1) % rows}."
              for i in range(rows)]
    (root / "source.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def _registered(project: Path) -> dict:
    return (yaml.safe_load((project / "kg_assets" / "domains.yaml").read_text(encoding="utf-8")) or {}).get(
        "domains") or {}


def _half_written(project: Path, names: list[str]) -> list[str]:
    """Temporary folders, backups, journals and owner markers, and registered sources that differ from the
    file imported: everything a finished import leaves none of."""
    found = [p.name for p in (project / "kg_assets").iterdir() if p.name.startswith(".")]
    artifacts = project / "artifacts"
    if artifacts.exists():
        found += [str(p.relative_to(project)) for p in artifacts.rglob("*")
                  if p.name == ".omne-owner.json" or any(t in p.name for t in (".tmp-", ".old-", ".bak-"))]
    source = (project / "source.csv").read_bytes()
    registered = _registered(project)
    for name in names:
        copy = project / "kg_assets" / name / "source.csv"
        if name in registered and (not copy.is_file() or copy.read_bytes() != source):
            found.append(f"kg_assets/{name}/source.csv (registered, not the imported file)")
        elif name not in registered and copy.parent.exists():
            found.append(f"kg_assets/{name}/ (copied, not registered)")
    return found


def _import_args(name: str, build: bool) -> list[str]:
    return [_omne(), "kg", "import", "source.csv", "--name", name, *([] if build else ["--no-build"])]


def _kill_at(project: Path, point: str, args: list[str]) -> bool:
    """Run until the import pauses at ``point``, SIGKILL it; False when it never got there."""
    proc = subprocess.Popen(args, cwd=project, env=_env(OMNE_PAUSE_AT=point, OMNE_PAUSE_S="600"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + PAUSE_TIMEOUT_S
    assert proc.stderr is not None
    for line in proc.stderr:
        if f"paused at {point}" in line:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
            return True
        if time.monotonic() > deadline:
            break
    proc.kill()
    proc.wait(timeout=60)
    return False


def run_import_probe(concurrent: int = 16, kill_points: int = 5) -> dict:
    """In a temporary project: ``concurrent`` simultaneous `omne kg import --no-build`, then
    ``kill_points`` imports SIGKILLed at named steps and rerun.

    Returns concurrent_imports, lost_registrations (exited 0 yet absent from the registry, or failed),
    kill_points, half_written_after_kill (leftover entries once the reruns are done) and failed_reruns,
    plus details (the points, the leftovers, the wall time).
    """
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="omne-import-probe-") as tmp:
        project = _project(Path(tmp) / "project")
        names = [f"c{i:03d}" for i in range(concurrent)]
        procs = [subprocess.Popen(_import_args(name, build=False), cwd=project, env=_env(),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in names]
        exits = []
        for proc in procs:
            proc.communicate(timeout=600)
            exits.append(proc.returncode)
        registered = _registered(project)
        lost = sum(1 for name in names if name not in registered)
        failed_imports = sum(1 for rc in exits if rc != 0)

        points = [KILL_POINTS[i % len(KILL_POINTS)] for i in range(kill_points)]
        failed_reruns, not_reached, killed_names = 0, [], []
        for i, (point, build) in enumerate(points):
            name = f"k{i:03d}"
            killed_names.append(name)
            args = _import_args(name, build)
            if not _kill_at(project, point, args):
                not_reached.append(point)
                continue
            was_registered = name in _registered(project)
            rerun = subprocess.run(args, cwd=project, env=_env(), capture_output=True, text=True, timeout=600)
            ok = rerun.returncode == 0 or (point in AFTER_COMMIT and was_registered
                                           and "already exists" in rerun.stderr)
            failed_reruns += 0 if ok and name in _registered(project) else 1
        leftovers = _half_written(project, names + killed_names)
    return {"concurrent_imports": concurrent, "lost_registrations": lost, "kill_points": kill_points,
            "half_written_after_kill": len(leftovers), "failed_reruns": failed_reruns,
            "failed_concurrent_imports": failed_imports, "points": [p for p, _ in points],
            "points_not_reached": not_reached, "leftovers": leftovers,
            "wall_s": round(time.monotonic() - started, 1)}


def _bad_files(count: int) -> list[tuple[str, str, str | bytes]]:
    """``count`` broken source files (kind, suffix, content), cycling through the shapes users send: malformed
    CSV/TSV (an unclosed quote, wrong field counts), bad UTF-8, JSONL nested 50,000 deep, 5,000-digit and NaN
    weights, missing columns, over-long names, broken or hostile GraphML, binary junk, empty files."""
    deep = '{"head": ' + "[" * 50_000 + "]" * 50_000 + ', "relation": "r", "tail": "t"}\n'
    shapes: list[tuple[str, str, str | bytes]] = [
        ("unclosed_quote", ".csv", 'head,relation,tail\n"Earth,orbits,Sun\n'),
        ("extra_field", ".csv", "head,relation,tail\nEarth,orbits,Sun,extra\n"),
        ("fewer_fields", ".tsv", "head\trelation\ttail\nEarth\torbits\n"),
        ("bad_utf8", ".csv", b"head,relation,tail\nEar\xffth,orbits,Sun\n"),
        ("deep_jsonl", ".jsonl", deep),
        ("huge_weight", ".jsonl", '{"head": "a", "relation": "r", "tail": "b", "weight": ' + "9" * 5000 + "}\n"),
        ("nan_weight", ".csv", "head,relation,tail,weight\na,r,b,NaN\n"),
        ("no_head", ".csv", "relation,tail\nr,b\n"),
        ("long_name", ".csv", "head,relation,tail\n" + "x" * 20_000 + ",r,b\n"),
        ("cut_graphml", ".graphml", '<?xml version="1.0"?><graphml><graph edgedefault="undirected"><node id='),
        ("entity_bomb", ".graphml", '<?xml version="1.0"?><!DOCTYPE g [<!ENTITY a "aaaaaaaaaa">'
                                    '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]><graphml>&b;</graphml>'),
        ("binary", ".csv", bytes(range(256)) * 4),
        ("empty", ".jsonl", ""),
    ]
    files = []
    for i in range(count):  # each further round adds blank lines: the same shape at other offsets
        kind, suffix, content = shapes[i % len(shapes)]
        pad = i // len(shapes)
        files.append((f"{kind}-{i}", suffix, content + (b"\n" if isinstance(content, bytes) else "\n") * pad))
    return files


def run_bad_file_probe(count: int = 104) -> dict:
    """Import ``count`` broken files the way `omne kg import` validates them (in this process); every one must fail
    with one ``KGSourceError`` line naming the file (exit 2 at the CLI), never another exception (a traceback)."""
    from pipelines.errors import OmneError
    from pipelines.kg.domain_import import ImportRequest, validate_source

    started = time.monotonic()
    tracebacks, multi_line, unnamed, imported, examples = 0, 0, 0, 0, {}
    with tempfile.TemporaryDirectory(prefix="omne-bad-files-") as tmp:
        for name, suffix, content in _bad_files(count):
            path = Path(tmp) / f"{name}{suffix}"
            path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
            try:
                validate_source(ImportRequest(path=path, name="probe"))
                imported += 1
            except OmneError as exc:
                message = str(exc)
                multi_line += len(message.splitlines()) != 1
                unnamed += str(path) not in message
                examples.setdefault(name.rsplit("-", 1)[0], message.replace(tmp, "<tmp>")[:160])
            except Exception as exc:  # noqa: BLE001 - what the probe counts
                tracebacks += 1
                examples.setdefault(name.rsplit("-", 1)[0], f"TRACEBACK {exc.__class__.__name__}")
    return {"bad_files": count, "tracebacks": tracebacks, "multi_line_errors": multi_line,
            "errors_not_naming_the_file": unnamed, "imported_anyway": imported, "examples": examples,
            "wall_s": round(time.monotonic() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrent", type=int, default=16, help="simultaneous `kg import --no-build`")
    parser.add_argument("--kill-points", type=int, default=5, help="imports killed (SIGKILL) at named steps")
    args = parser.parse_args()
    print(json.dumps({**run_import_probe(args.concurrent, args.kill_points), "bad_files": run_bad_file_probe()},
                     indent=2))


if __name__ == "__main__":
    main()
