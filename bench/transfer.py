#!/usr/bin/env python
"""Leave one domain out: does the quick SFT recipe transfer to a knowledge graph it never saw?

1. A throw-away training project holds every embedded domain but the held-out one; its KGs, indexes and QA
   data are built and the quick SFT model is trained there (``omne sft data`` + ``omne sft train``: the
   params of params.yaml, so the same recipe and size as ``make run``'s SFT model).
2. A throw-away evaluation project holds only the held-out domain, imported under its own name
   (``omne kg import``), with its questions written as the main project writes them (same params, phrase
   lexicon and split): its test split is the one ``make run``'s model was tested on.
3. Both models answer the same test questions there: the held-out model and the in-domain model (``make
   run``'s SFT model, trained with that domain). EM with Wilson 95% intervals, the paired counts and the exact
   McNemar p-value, and how the held-out model names the graph it calls (the issue's target: calls to an
   unknown graph <= 5% of calls).

    .venv/bin/python bench/transfer.py --held-out medicine          # ~25 min training on 2 cores, then eval
    .venv/bin/python bench/transfer.py --toy                         # smoke: 2 SFT steps, 2 + 2 questions

See docs/benchmarks.md ("Transfer") for the results.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, BenchParser, args_record, load_average, load_line, machine_info, verdict, write_results  # noqa: E402
from graph_names import call_counts, omne, project_params, renamed_project, wilson  # noqa: E402


def parse_args(argv: list[str] | None) -> Any:
    parser = BenchParser("transfer", description=__doc__, seeded=False, params=False,
                         toy={"sft_steps": 2, "limit": 2, "in_domain_model": "base"},
                         toy_note="2 SFT steps, 2 + 2 questions, the base model as the in-domain one")
    parser.add_argument("--held-out", default="medicine", help="the embedded domain left out of training")
    parser.add_argument("--in-domain-model", default=str(ROOT / "artifacts" / "models" / "sft"),
                        help="the model trained with every domain, or 'base' (default: make run's SFT model, "
                             "%(default)s)")
    parser.add_argument("--limit", type=int, default=1000, help="test questions per bucket (default: all)")
    parser.add_argument("--sft-steps", type=int, default=None, help="override sft.max_steps (default: params)")
    parser.add_argument("--keep", type=Path, default=None, help="build both projects under this folder and keep them")
    return parser.parse_args(argv)


def training_project(project: Path, held_out: str, sft_steps: int | None) -> Path:
    """Every embedded domain but ``held_out``, built and the quick SFT model trained: the model's folder."""
    project_params(project)
    if sft_steps is not None:  # a throw-away project: its params.yaml may lose the comments
        params = yaml.safe_load((project / "params.yaml").read_text(encoding="utf-8"))
        params["sft"]["max_steps"] = sft_steps
        (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    registry = yaml.safe_load((ROOT / "kg_assets" / "domains.yaml").read_text(encoding="utf-8"))
    kept = {name: body for name, body in registry["domains"].items() if name != held_out}
    if len(kept) == len(registry["domains"]):
        raise SystemExit(f"error: {held_out!r} is not an embedded domain ({', '.join(registry['domains'])})")
    for name in kept:
        shutil.copytree(ROOT / "kg_assets" / name, project / "kg_assets" / name)
    (project / "kg_assets" / "domains.yaml").write_text(yaml.safe_dump({"domains": kept}, sort_keys=False),
                                                        encoding="utf-8")
    for step in (("kg", "build"), ("kg", "index"), ("qa", "seeds"), ("qa", "generate"), ("qa", "build"),
                 ("sft", "data"), ("sft", "train", "--name", "held_out")):
        omne(project, *step)
    return project / "artifacts" / "models" / "held_out"


def evaluation(project: Path, model: str, name: str, limit: int) -> list[dict[str, Any]]:
    omne(project, "eval", "--model", model, "--split", "test", "--limit", str(limit), "--name", name, "--force")
    lines = (project / "artifacts" / "reports" / name / "predictions.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in lines.splitlines() if line.strip()]


def scores(predictions: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(predictions)
    right = sum(r["correct"] is True for r in predictions)
    buckets = Counter(r["bucket"] for r in predictions)
    return {"questions": n, "em": round(right / max(1, n), 4), "em_wilson95": wilson(right, n),
            "by_bucket": {b: {"n": c, "em": round(sum(r["correct"] is True for r in predictions
                                                       if r["bucket"] == b) / c, 4)}
                          for b, c in sorted(buckets.items())}}


def paired(held_out: list[dict[str, Any]], in_domain: list[dict[str, Any]]) -> dict[str, Any]:
    """Both right / only held-out / only in-domain / both wrong on the shared questions, and the exact McNemar
    p-value (two-sided binomial test on the discordant pairs)."""
    from scipy.stats import binomtest

    a = {r["qa_id"]: r["correct"] is True for r in held_out}
    b = {r["qa_id"]: r["correct"] is True for r in in_domain}
    shared = sorted(set(a) & set(b))
    counts = Counter((a[q], b[q]) for q in shared)
    only_a, only_b = counts[(True, False)], counts[(False, True)]
    p = binomtest(only_a, only_a + only_b).pvalue if only_a + only_b else 1.0
    return {"shared": len(shared), "both_right": counts[(True, True)], "only_held_out": only_a,
            "only_in_domain": only_b, "both_wrong": counts[(False, False)], "mcnemar_exact_p": round(p, 4)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    in_domain_model = args.in_domain_model if args.in_domain_model == "base" else Path(args.in_domain_model).resolve()
    if in_domain_model != "base" and not Path(in_domain_model).exists():  # it may still be training elsewhere
        print(f"note: no in-domain model at {in_domain_model} yet (run `make run`, or pass --in-domain-model); "
              "it is needed once the held-out model is trained", file=sys.stderr)
    results: dict[str, Any] = {"benchmark": "transfer", "date": datetime.now(UTC).isoformat(timespec="seconds"),
                               "machine": {**machine_info(), "load_average_at_start": load_average()},
                               "args": args_record(args)}
    with tempfile.TemporaryDirectory(prefix="omne-transfer-") as scratch:
        base = args.keep or Path(scratch)
        trained_at = time.perf_counter()
        held_out_model = training_project(base / "train", args.held_out, args.sft_steps)
        results["training_s"] = round(time.perf_counter() - trained_at, 1)
        if in_domain_model != "base" and not Path(in_domain_model).exists():
            print(f"error: no in-domain model at {in_domain_model}", file=sys.stderr)
            return 2
        renamed_project(base / "eval", args.held_out, args.held_out, test_share=None)
        held = evaluation(base / "eval", str(held_out_model), "held_out", args.limit)
        inside = evaluation(base / "eval", str(in_domain_model), "in_domain", args.limit)
    results.update({"held_out_model": scores(held), "in_domain_model": scores(inside), "paired": paired(held, inside),
                    "held_out_calls": call_counts(held, args.held_out),
                    "in_domain_calls": call_counts(inside, args.held_out)})
    results["machine"]["load_average_at_end"] = load_average()
    h, i, pair = results["held_out_model"], results["in_domain_model"], results["paired"]
    ratio = h["em"] / i["em"] if i["em"] else None
    unknown = results["held_out_calls"]["shares"].get("unknown_graph", 0.0)
    calls = results["held_out_calls"]["calls"]

    def row(label: str, s: dict[str, Any]) -> str:
        buckets = ", ".join(f"{b} {v['em']:.3f} of {v['n']}" for b, v in s["by_bucket"].items())
        return (f"  {label:<22} EM {s['em']:.3f} [{s['em_wilson95'][0]:.2f}-{s['em_wilson95'][1]:.2f}] on "
                f"{s['questions']} ({buckets})")

    table = "\n".join([
        f"transfer: {args.held_out!r} held out of training (SFT {results['training_s']:.0f} s); its test questions",
        row("held-out model", h), row("in-domain model", i),
        f"  paired on {pair['shared']}: both right {pair['both_right']}, only held-out {pair['only_held_out']}, "
        f"only in-domain {pair['only_in_domain']}, both wrong {pair['both_wrong']}; exact McNemar p = "
        f"{pair['mcnemar_exact_p']}",
        f"  target held-out EM >= 50% of in-domain EM: {verdict(ratio >= 0.5 if ratio is not None else None)}"
        + (f" ({ratio:.0%})" if ratio is not None else " (in-domain EM 0)"),
        f"  held-out model's calls {calls}: " + ", ".join(
            f"{k} {v:.1%}" for k, v in sorted(results["held_out_calls"]["shares"].items())),
        f"  target unknown-graph calls <= 5% of calls: {verdict(unknown <= 0.05 if calls else None)} ({unknown:.1%})",
        "  " + load_line(results["machine"]),
    ])
    write_results(results, table, args.out, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
