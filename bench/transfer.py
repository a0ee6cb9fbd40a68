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

import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, BenchParser, args_record, load_average, load_line, machine_info, verdict, write_results  # noqa: E402
from graph_names import (  # noqa: E402
    DomainSource,
    call_counts,
    call_lines,
    embedded_source,
    evaluation,
    omne,
    project_params,
    renamed_project,
    score_line,
    scores,
    toy_params,
    toy_source,
)

from pipelines.eval.compare import compare_reports  # noqa: E402


def parse_args(argv: list[str] | None) -> Any:
    parser = BenchParser("transfer", description=__doc__, seeded=False, params=False,
                         toy={"sft_steps": 2, "limit": 2, "in_domain_model": "base"},
                         toy_note="the tests' solar graph (trained on under another name), the tiny random llama, "
                                  "2 SFT steps, 2 + 2 questions")
    parser.add_argument("--held-out", default="medicine", help="the embedded domain left out of training")
    parser.add_argument("--in-domain-model", default=str(ROOT / "artifacts" / "models" / "sft"),
                        help="the model trained with every domain, or 'base' (default: make run's SFT model, "
                             "%(default)s)")
    parser.add_argument("--limit", type=int, default=1000, help="test questions per bucket (default: all)")
    parser.add_argument("--sft-steps", type=int, default=None, help="override sft.max_steps (default: params)")
    parser.add_argument("--keep", type=Path, default=None, help="build both projects under this folder and keep them")
    return parser.parse_args(argv)


def training_domains(held_out: str) -> dict[str, DomainSource]:
    """Every embedded domain but ``held_out``."""
    registry = yaml.safe_load((ROOT / "kg_assets" / "domains.yaml").read_text(encoding="utf-8"))["domains"]
    if held_out not in registry:
        raise SystemExit(f"error: {held_out!r} is not an embedded domain ({', '.join(registry)})")
    return {name: embedded_source(name) for name in registry if name != held_out}


def training_project(project: Path, domains: dict[str, DomainSource], base: Path, sft_steps: int | None) -> Path:
    """``domains`` imported, their QA data built and the quick SFT model trained on them: the model's folder."""
    project_params(project, base)
    if sft_steps is not None:  # a throw-away project: its params.yaml may lose the comments
        params = yaml.safe_load((project / "params.yaml").read_text(encoding="utf-8"))
        params["sft"]["max_steps"] = sft_steps
        (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    for name, source in domains.items():
        entities = ["--entities", str(source.entities)] if source.entities else []
        omne(project, "kg", "import", str(source.triples), *entities, "--name", name, "--format", "triples")
        if source.phrases and source.phrases.is_file():
            shutil.copyfile(source.phrases, project / "kg_assets" / name / "phrases.yaml")
    for step in (("qa", "seeds"), ("qa", "generate"), ("qa", "build"), ("sft", "data"),
                 ("sft", "train", "--name", "held_out")):
        omne(project, *step)
    return project / "artifacts" / "models" / "held_out"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    in_domain_model = args.in_domain_model if args.in_domain_model == "base" else str(
        Path(args.in_domain_model).resolve())
    if in_domain_model != "base" and not Path(in_domain_model).exists():  # it may still be training elsewhere
        print(f"note: no in-domain model at {in_domain_model} yet (run `make run`, or pass --in-domain-model); "
              "it is needed once the held-out model is trained", file=sys.stderr)
    results: dict[str, Any] = {"benchmark": "transfer", "date": datetime.now(UTC).isoformat(timespec="seconds"),
                               "machine": {**machine_info(), "load_average_at_start": load_average()},
                               "args": args_record(args)}
    base = toy_params() if args.toy else ROOT / "params.yaml"
    held_out, domains = (("solar", {"sun_notes": toy_source()}) if args.toy
                         else (args.held_out, training_domains(args.held_out)))
    source = toy_source() if args.toy else embedded_source(held_out)
    with tempfile.TemporaryDirectory(prefix="omne-transfer-") as scratch:
        folder = args.keep or Path(scratch)
        trained_at = time.perf_counter()
        held_out_model = training_project(folder / "train", domains, base, args.sft_steps)
        results["training_s"] = round(time.perf_counter() - trained_at, 1)
        if in_domain_model != "base" and not Path(in_domain_model).exists():
            print(f"error: no in-domain model at {in_domain_model}", file=sys.stderr)
            return 2
        renamed_project(folder / "eval", source, held_out, base=base)
        held = evaluation(folder / "eval", str(held_out_model), "held_out", args.limit)
        inside = evaluation(folder / "eval", in_domain_model, "in_domain", args.limit)
        reports = folder / "eval" / "artifacts" / "reports"
        comparison = compare_reports(reports / "held_out", reports / "in_domain")
    results.update({"held_out": held_out, "trained_on": sorted(domains), "held_out_model": scores(held),
                    "in_domain_model": scores(inside), "paired": comparison.model_dump(mode="json"),
                    "held_out_calls": call_counts(held, held_out), "in_domain_calls": call_counts(inside, held_out)})
    results["machine"]["load_average_at_end"] = load_average()
    h, i, pair = results["held_out_model"], results["in_domain_model"], comparison.overall
    ratio = h["em"] / i["em"] if i["em"] else None
    table = "\n".join([
        f"transfer: {held_out!r} held out of training (SFT {results['training_s']:.0f} s); its test questions",
        score_line("held-out model", h), score_line("in-domain model", i),
        f"  paired on {pair.n}: both right {pair.both}, only held-out {pair.only_a}, only in-domain {pair.only_b}, "
        f"both wrong {pair.neither}; exact McNemar p = {pair.p_value:.3g}: {comparison.verdict}",
        f"  target held-out EM >= 50% of in-domain EM: {verdict(ratio >= 0.5 if ratio is not None else None)}"
        + (f" ({ratio:.0%})" if ratio is not None else " (in-domain EM 0)"),
        *call_lines("held-out model's calls", results["held_out_calls"]),
        "  " + load_line(results["machine"]),
    ])
    write_results(results, table, args.out, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
