"""The docs users get with a clone: the README stays a user's page, nothing points outside the repository,
and every relative link in README.md and docs/ resolves to a file (and a heading) that exists."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.conftest import PROJECT_ROOT

LINK = re.compile(r"\]\(([^)\s]+)\)")
DOCS = [PROJECT_ROOT / "README.md", PROJECT_ROOT / "bench" / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes."""
    headings = re.findall(r"^#+\s+(.+)$", path.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_readme_is_a_users_page() -> None:
    text = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 320 and len(text) <= 25_000  # a page a user reads, not a lab notebook (issue 49)
    assert lines[0] == "# omne" and any(line == "## Quick start" for line in lines)


GENERATED_DOCS = {"params.md"}  # written by a command from the code (`omne params docs`), with a budget of their own


def hand_written_lines(text: str) -> int:
    """A page's lines less those of its benchmark tables, which bench/tables.py writes from the committed results
    (tests/test_bench_tables.py checks them); each section's two markers still count."""
    sys.path.insert(0, str(PROJECT_ROOT / "bench"))
    try:
        import tables
    finally:
        sys.path.remove(str(PROJECT_ROOT / "bench"))
    return len(text.splitlines()) - tables.generated_lines(text)


def test_docs_describe_the_present_within_a_line_budget() -> None:
    # hand-written reference pages, not a lab notebook: dated notes go to docs/experiments/ (issue 49)
    pages = sorted((PROJECT_ROOT / "docs").glob("*.md"))
    texts = {p.name: p.read_text(encoding="utf-8") for p in pages}
    assert sum(hand_written_lines(text) for name, text in texts.items() if name not in GENERATED_DOCS) <= 2500
    assert all(len(texts.get(name, "").splitlines()) <= 300 for name in GENERATED_DOCS)  # a row per parameter
    assert len(texts["benchmarks.md"].splitlines()) <= 400  # per benchmark: the method and its current table


def test_generated_benchmark_tables_are_left_out_of_the_budget() -> None:
    page = "Intro.\n<!-- bench-table: demo -->\n| a |\n|---|\n| 1 |\n\n_provenance_\n<!-- /bench-table -->\nEnd.\n"
    assert hand_written_lines(page) == 4  # the intro, the two markers, the end
    assert hand_written_lines("No tables.\nTwo lines.\n") == 2


def test_nothing_refers_outside_the_repository() -> None:
    tracked = [p for p in PROJECT_ROOT.rglob("*") if p.is_file() and p.suffix in {".py", ".md", ".yaml", ".toml"}
               and not any(part.startswith(".") or part in {"artifacts", "__pycache__"}
                           for part in p.relative_to(PROJECT_ROOT).parts)]
    offenders = [str(p.relative_to(PROJECT_ROOT)) for p in tracked
                 if re.search(r"\.\./shared|DESIGN\.md", p.read_text(encoding="utf-8", errors="replace"))
                 and p.name != "test_docs.py"]
    assert offenders == []


def test_relative_links_resolve() -> None:
    broken = []
    for doc in DOCS:
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), file, mailto: not ours to check
            path_part, _, anchor = target.partition("#")
            resolved = (doc.parent / path_part).resolve() if path_part else doc
            if not resolved.exists():
                broken.append(f"{doc.relative_to(PROJECT_ROOT)}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{doc.relative_to(PROJECT_ROOT)}: {target} (no such heading)")
    assert broken == []
