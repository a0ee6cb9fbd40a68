"""docs/benchmarks.md's generated tables are the committed results files' (bench/tables.py --check passes on the
repository), every committed results file is a real run with its provenance, and bench/tables.py names a stale
section, refuses a missing or toy results file, and rewrites only what lies between the markers."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PROJECT_ROOT, cli_env

BENCH = PROJECT_ROOT / "bench"
DOC = PROJECT_ROOT / "docs" / "benchmarks.md"


@pytest.fixture(scope="module")
def bench() -> tuple[Any, Any]:
    """bench/_common.py (which writes the results files) and bench/tables.py, imported as the scripts import them."""
    sys.path.insert(0, str(BENCH))
    try:
        import _common
        import tables
    finally:
        sys.path.remove(str(BENCH))
    return _common, tables


def _head() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def _write(common: Any, folder: Path, name: str, rows: list[str], *, toy: bool = False) -> dict[str, Any]:
    """A results file as a benchmark writes it (bench/_common.write_results), with a small table."""
    results: dict[str, Any] = {"benchmark": name, "args": {"toy": toy},
                               "machine": {"cpu_cores": 2, "load_average_at_start": [0.25, 0.5, 0.75]}}
    table = "\n".join([f"{name}: a demo table", "", "| variant | ratio |", "|---|---|", *rows])
    common.write_results(results, table, folder / f"{name}.json", 0.0)
    return results


def _doc(path: Path, *names: str) -> str:
    text = "# Benchmarks\n\nIntro, kept.\n" + "".join(
        f"\n## {name}\n\nProse about {name}, kept.\n\n<!-- bench-table: {name} -->\n| old | table |\n"
        f"<!-- /bench-table -->\n\nMore prose.\n" for name in names)
    path.write_text(text, encoding="utf-8")
    return text


def test_the_committed_docs_are_current() -> None:
    run = subprocess.run([sys.executable, str(BENCH / "tables.py"), "--check"], cwd=PROJECT_ROOT, env=cli_env(),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "<!-- bench-table: " in DOC.read_text(encoding="utf-8")  # at least one generated section is checked


def test_committed_results_are_real_runs_with_provenance() -> None:
    listed = subprocess.run(["git", "ls-files", "bench/results"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    assert listed, "no results file is committed"
    shown = re.findall(r"^<!-- bench-table: (\S+) -->$", DOC.read_text(encoding="utf-8"), re.MULTILINE)
    assert {f"bench/results/{name}.json" for name in shown} <= set(listed)  # docs tables from committed files only
    for path in listed:
        results = json.loads((PROJECT_ROOT / path).read_text(encoding="utf-8"))
        provenance = results["provenance"]
        assert provenance["toy"] is False and results["args"]["toy"] is False, path
        assert len(provenance["commit"]) == 40 and provenance["date"] and provenance["command"], path
        assert results["table"], path


def test_write_results_records_where_the_figures_come_from(bench: tuple[Any, Any], tmp_path: Path) -> None:
    common, _ = bench
    results = _write(common, tmp_path, "demo", ["| ours | 0.5 |"])
    written = json.loads((tmp_path / "demo.json").read_text(encoding="utf-8"))
    assert written == results
    provenance = written["provenance"]
    assert provenance["commit"] == _head() and isinstance(provenance["dirty"], bool)
    assert provenance["command"] == sys.argv and provenance["toy"] is False
    assert provenance["load_average"]["start"] == [0.25, 0.5, 0.75] and len(provenance["load_average"]["end"]) == 3
    assert _write(common, tmp_path, "toy", ["| ours | 0.5 |"], toy=True)["provenance"]["toy"] is True


def test_a_stale_section_is_named_then_rewritten(bench: tuple[Any, Any], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    common, tables = bench
    _write(common, tmp_path, "fresh", ["| ours | 0.5 |"])
    _write(common, tmp_path, "stale", ["| ours | 2.0 |"])
    doc = tmp_path / "benchmarks.md"
    _doc(doc, "fresh", "stale")
    argv = ["--doc", str(doc), "--results", str(tmp_path)]
    assert tables.main(argv) == 0
    rendered = doc.read_text(encoding="utf-8")
    assert "| old | table |" not in rendered and "| ours | 2.0 |" in rendered and f"commit {_head()[:7]}" in rendered
    assert tables.main([*argv, "--check"]) == 0

    _write(common, tmp_path, "stale", ["| ours | 3.0 |"])  # a new run of one benchmark
    capsys.readouterr()
    assert tables.main([*argv, "--check"]) == 1
    err = capsys.readouterr().err
    assert "stale" in err and "fresh" not in err
    assert doc.read_text(encoding="utf-8") == rendered  # --check writes nothing

    assert tables.main(argv) == 0 and tables.main([*argv, "--check"]) == 0
    text = doc.read_text(encoding="utf-8")
    assert "| ours | 3.0 |" in text and "| ours | 2.0 |" not in text
    outside = [line for line in text.splitlines() if "Prose" in line or "Intro" in line or line.startswith("#")]
    assert outside == ["# Benchmarks", "Intro, kept.", "## fresh", "Prose about fresh, kept.", "## stale",
                       "Prose about stale, kept."]


def test_a_missing_results_file_is_an_error_naming_it(bench: tuple[Any, Any], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    common, tables = bench
    _write(common, tmp_path, "present", ["| ours | 0.5 |"])
    doc = tmp_path / "benchmarks.md"
    before = _doc(doc, "present", "absent")
    for check in ([], ["--check"]):
        capsys.readouterr()
        assert tables.main(["--doc", str(doc), "--results", str(tmp_path), *check]) == 2
        assert f"{tmp_path / 'absent.json'} is missing" in capsys.readouterr().err
        assert doc.read_text(encoding="utf-8") == before  # nothing rewritten, not even the section that could be


def test_a_toy_results_file_is_refused(bench: tuple[Any, Any], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    common, tables = bench
    _write(common, tmp_path, "smoke", ["| ours | 0.5 |"], toy=True)
    doc = tmp_path / "benchmarks.md"
    before = _doc(doc, "smoke")
    capsys.readouterr()
    assert tables.main(["--doc", str(doc), "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "smoke.json is a --toy run" in err
    assert doc.read_text(encoding="utf-8") == before


def test_an_unclosed_marker_is_an_error(bench: tuple[Any, Any], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    common, tables = bench
    _write(common, tmp_path, "demo", ["| ours | 0.5 |"])
    doc = tmp_path / "benchmarks.md"
    doc.write_text("<!-- bench-table: demo -->\n| old |\n", encoding="utf-8")
    assert tables.main(["--doc", str(doc), "--results", str(tmp_path), "--check"]) == 2
    assert "no '<!-- /bench-table -->'" in capsys.readouterr().err
