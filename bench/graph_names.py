#!/usr/bin/env python
"""Does a trained agent read the graph's name from its prompt? A domain registered under a new name.

A model that memorised its training graphs' names calls them (or invents one) on a graph it never saw by
name. This benchmark registers one embedded domain's source under a NEW name in a throw-away project
(``omne kg import``, as a user imports a graph), writes that domain's questions (its phrase lexicon
copied, so they read as in training), evaluates the model on them (``omne eval``) and counts, over all
tool calls, the share that name the new graph, a graph no server knows (``unknown_graph`` errors: the
issue's target is <= 5%), or no graph; EM with its Wilson 95% interval.

    .venv/bin/python bench/graph_names.py                               # make run's SFT model, chemistry
    .venv/bin/python bench/graph_names.py --model artifacts/models/rl --domain medicine --name ward_notes
    .venv/bin/python bench/graph_names.py --toy                          # smoke test: the base model, 2 + 2

See docs/benchmarks.md ("Graph names") for the results.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, BenchParser, args_record, load_average, load_line, machine_info, verdict, write_results  # noqa: E402

from pipelines.eval.stats import wilson_interval  # noqa: E402


def parse_args(argv: list[str] | None) -> Any:
    parser = BenchParser("graph_names", description=__doc__, seeded=False, params=False,
                         toy={"model": "base", "limit": 2},
                         toy_note="the tests' solar graph as the imported one, the tiny random llama as the model")
    parser.add_argument("--model", default=str(ROOT / "artifacts" / "models" / "sft"),
                        help="the model to evaluate: a folder (SFT/RL adapter or model) or 'base' "
                             "(default: %(default)s)")
    parser.add_argument("--domain", default="chemistry", help="the embedded domain whose source is imported")
    parser.add_argument("--name", default="lab_archive", help="the new name it is registered under (the graph_type)")
    parser.add_argument("--limit", type=int, default=40, help="test questions per bucket (1/2-hop, 3+)")
    parser.add_argument("--keep", type=Path, default=None, help="build the project here and keep it")
    return parser.parse_args(argv)


@dataclass(frozen=True)
class DomainSource:
    """A domain's source files as `omne kg import` takes them (a triples table, its entity table, phrases)."""

    triples: Path
    entities: Path | None = None
    phrases: Path | None = None


def embedded_source(domain: str) -> DomainSource:
    folder = ROOT / "kg_assets" / domain
    if not (folder / "triples.jsonl").is_file():
        raise SystemExit(f"error: {domain!r} is not an embedded domain (no {folder / 'triples.jsonl'})")
    return DomainSource(folder / "triples.jsonl", folder / "entities.jsonl", folder / "phrases.yaml")


def toy_source() -> DomainSource:
    """The tests' solar graph (tests/data/solar)."""
    from _toy import SOLAR

    return DomainSource(SOLAR / "triples.csv", SOLAR / "entities.csv")


def toy_params() -> Path:
    """params.yaml of a toy project: the tiny random llama as the base model, the tiny encoder (and SFT
    conversations cut at max_length: the tiny tokenizer's 300 tokens make every conversation long)."""
    from _toy import toy_project

    return toy_project(model=True, name="base", overrides={"sft": {"overlong": "truncate"}})


def omne(project: Path, *args: str) -> None:
    """One `omne` command in the throw-away project (its own params.yaml, registry and artifacts)."""
    command = [sys.executable, "-m", "pipelines.cli", "--params", str(project / "params.yaml"), *args]
    subprocess.run(command, cwd=project, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def project_params(project: Path, base: Path = ROOT / "params.yaml", test_share: float | None = None) -> None:
    """The project's params.yaml (``base``'s, with another test share if given) and an empty registry."""
    project.mkdir(parents=True, exist_ok=True)
    params = base.read_text(encoding="utf-8")
    if test_share is not None:
        params = re.sub(r"(?m)^  test_share: [0-9.]+", f"  test_share: {test_share}", params, count=1)
    (project / "params.yaml").write_text(params, encoding="utf-8")
    (project / "kg_assets").mkdir(exist_ok=True)
    (project / "kg_assets" / "domains.yaml").write_text("domains: {}\n", encoding="utf-8")


def renamed_project(project: Path, source: DomainSource, name: str, *, base: Path = ROOT / "params.yaml",
                    test_share: float | None = None) -> None:
    """A project whose only domain is ``source`` registered as ``name`` (``omne kg import``), with its QA dataset
    built (its questions as the main project writes them: the same params and phrase lexicon)."""
    project_params(project, base, test_share)
    entities = ["--entities", str(source.entities)] if source.entities else []
    omne(project, "kg", "import", str(source.triples), *entities, "--name", name, "--format", "triples",
         "--description", f"{source.triples.parent.name} under the name {name}")
    if source.phrases and source.phrases.is_file():  # the same lexicon: the questions read as the training ones
        shutil.copyfile(source.phrases, project / "kg_assets" / name / "phrases.yaml")
    omne(project, "qa", "seeds")
    omne(project, "qa", "generate")
    omne(project, "qa", "build")


def evaluation(project: Path, model: str, name: str, limit: int) -> list[dict[str, Any]]:
    """``omne eval`` of ``model`` on the project's test split: the report's predictions."""
    omne(project, "eval", "--model", model, "--split", "test", "--limit", str(limit), "--name", name, "--force")
    lines = (project / "artifacts" / "reports" / name / "predictions.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in lines.splitlines() if line.strip()]


def scores(predictions: list[dict[str, Any]]) -> dict[str, Any]:
    """EM with its Wilson 95% interval, overall and per bucket (a question right when any sample is)."""
    right = {r["qa_id"]: False for r in predictions}
    bucket = {r["qa_id"]: r["bucket"] for r in predictions}
    for r in predictions:
        right[r["qa_id"]] |= r["correct"] is True

    def group(ids: list[str]) -> dict[str, Any]:
        k = sum(right[q] for q in ids)
        low, high = wilson_interval(k, len(ids))
        return {"n": len(ids), "em": round(k / max(1, len(ids)), 4), "em_wilson95": [round(low, 3), round(high, 3)]}

    return {**group(list(right)), "by_bucket": {b: group([q for q in right if bucket[q] == b])
                                                for b in sorted(set(bucket.values()))}}


def call_lines(label: str, counts: dict[str, Any]) -> list[str]:
    """The calls by graph named, the names written instead, and the verdict on the unknown-graph target."""
    unknown, calls = counts["shares"].get("unknown_graph", 0.0), counts["calls"]
    return [f"  {label} {calls}: " + ", ".join(f"{k} {v:.1%}" for k, v in sorted(counts["shares"].items())),
            f"  unknown-graph calls per question {counts['unknown_graph_calls_per_question']}; names written "
            f"instead: {counts['other_names_written'] or 'none'}",
            f"  target unknown-graph calls <= 5% of calls: {verdict(unknown <= 0.05 if calls else None)} "
            f"({unknown:.1%} of {calls})"]


def score_line(label: str, s: dict[str, Any]) -> str:
    buckets = ", ".join(f"{b} {v['em']:.3f} of {v['n']}" for b, v in s["by_bucket"].items())
    low, high = s["em_wilson95"]
    return f"  {label:<16} EM {s['em']:.3f} [{low:.2f}-{high:.2f}] on {s['n']} ({buckets})"


def graph_of(call: dict[str, Any]) -> str | None:
    value = (call.get("arguments") or {}).get("graph_type")
    return value if isinstance(value, str) else None


def call_counts(predictions: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """Tool calls by the graph they name: the new name, unknown to the tools, none given, or a parse error."""
    kinds: Counter[str] = Counter()
    written: Counter[str] = Counter()
    per_question_unknown = []
    for record in predictions:
        trajectory = record["trajectory"]
        unknown = 0
        for call in trajectory.get("tool_calls", []):
            graph = graph_of(call)
            if call.get("error_type") == "unknown_graph":
                kinds["unknown_graph"] += 1
                unknown += 1
            elif call.get("name") is None:
                kinds["unparsed"] += 1
            elif graph is None:
                kinds["no_graph_named"] += 1
            else:
                kinds["new_name" if graph == name else "other_known_graph"] += 1
            if graph is not None and graph != name:
                written[graph] += 1
        per_question_unknown.append(unknown)
    total = sum(kinds.values())
    shares = {k: round(v / total, 4) for k, v in kinds.items()} if total else {}
    return {"calls": total, "by_kind": dict(kinds), "shares": shares,
            "other_names_written": dict(written.most_common(10)),
            "unknown_graph_calls_per_question": round(sum(per_question_unknown) / max(1, len(predictions)), 3)}


def resolved_model(model: str) -> str | None:
    """``model`` as an absolute folder ('base' as it is); None, with the error printed, when there is none."""
    resolved = model if model == "base" else str(Path(model).resolve())
    if resolved != "base" and not Path(resolved).exists():
        print(f"error: no model at {resolved} (run `make run` first, or pass --model)", file=sys.stderr)
        return None
    return resolved


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    model = resolved_model(args.model)
    if model is None:
        return 2
    results: dict[str, Any] = {"benchmark": "graph_names", "date": datetime.now(UTC).isoformat(timespec="seconds"),
                               "machine": {**machine_info(), "load_average_at_start": load_average()},
                               "args": args_record(args)}
    source = toy_source() if args.toy else embedded_source(args.domain)
    with tempfile.TemporaryDirectory(prefix="omne-graph-names-") as scratch:
        project = args.keep or Path(scratch) / "project"
        renamed_project(project, source, args.name, base=toy_params() if args.toy else ROOT / "params.yaml",
                        test_share=0.5)
        predictions = evaluation(project, model, "renamed", args.limit)
    counts = call_counts(predictions, args.name)
    results.update({"domain": source.triples.parent.name, "scores": scores(predictions), **counts})
    results["machine"]["load_average_at_end"] = load_average()
    table = "\n".join([
        f"graph names: {results['domain']!r} registered as {args.name!r}, model {args.model}",
        score_line("model", results["scores"]),
        *call_lines("tool calls", counts),
        "  " + load_line(results["machine"]),
    ])
    write_results(results, table, args.out, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
