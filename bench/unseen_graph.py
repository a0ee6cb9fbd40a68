#!/usr/bin/env python
"""The agent on a LightRAG graph it never saw: EM with Wilson intervals against its in-domain EM, and how it
copes with names it did not train on.

1. A throw-away project holds only the unseen graph (a LightRAG GraphML that others built from text, imported
   with ``omne kg import --format graphml``), its questions written as the main project writes them (the same
   params; ``--test-share`` of its pairs in the test split, so that there are enough to tell models apart).
2. The model (default: ``make run``'s SFT model, which never saw that graph: it is not in the registry) answers
   its test questions: EM per bucket and per hop count with Wilson 95% intervals, and the behaviour figures of
   docs/evaluation.md: answers the tools showed, calls naming a missing entity, episodes ended by a repeated call.
3. The in-domain reference is the same model's evaluation in the main project (``--report``, default
   ``make run``'s ``artifacts/reports/sft-tools``): the target is unseen 1-hop EM >= 50% of in-domain 1-hop EM.
4. ``--ablate-phrases`` answers the same questions again with ``tools.unlabelled_relations: keywords``
   (node_info's LightRAG keyword lists instead of the phrases its descriptions say) and pairs the two runs
   (exact McNemar): what the phrases are worth on a graph nobody here made.
5. ``--train-with`` trains a second SFT model with the graph: ``make run``'s SFT conversations plus those of the
   graph's train split (``omne sft data`` in the throw-away project; its test questions are never trained on), the
   params' SFT recipe and steps. It answers the same test questions and is paired with ``--model`` (exact McNemar):
   transfer against a model trained with the graph (pass ``make run``'s SFT model as ``--model`` for SFT against
   SFT). About 50 minutes of training on 2 cores.

    .venv/bin/python bench/unseen_graph.py                                  # kg_assets/<held-out graph>
    .venv/bin/python bench/unseen_graph.py --graph g.graphml --model artifacts/models/rl-stage3 --ablate-phrases
    .venv/bin/python bench/unseen_graph.py --train-with --limit 20          # and a model trained with it
    .venv/bin/python bench/unseen_graph.py --toy                            # smoke: a rendered toy graph

See docs/benchmarks.md ("An unseen LightRAG graph") for the results.
"""

from __future__ import annotations

import json
import re
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
from graph_names import evaluation, omne, project_params, resolved_model, toy_params  # noqa: E402

from pipelines.eval.compare import compare_reports  # noqa: E402
from pipelines.eval.stats import wilson_interval  # noqa: E402

# the project's own transfer test: a LightRAG graph others built from text, kept out of the registry (never trained on)
HELD_OUT = ROOT / "kg_assets" / "nist_csf_lightrag" / "graph.graphml"


def parse_args(argv: list[str] | None) -> Any:
    parser = BenchParser("unseen_graph", description=__doc__, seeded=False, params=False,
                         toy={"model": "base", "limit": 3, "ablate_phrases": True, "answer_note": True,
                              "train_with": True, "sft_steps": 2},
                         toy_note="a LightRAG rendering of a tiny triples graph, the tiny random llama, 3 + 3 "
                                  "questions, a 2-step SFT on the toy graph alone")
    parser.add_argument("--graph", type=Path, default=HELD_OUT, help="the unseen LightRAG GraphML file")
    parser.add_argument("--name", default=None, help="the domain name it gets (default: its folder's name)")
    parser.add_argument("--model", default=str(ROOT / "artifacts" / "models" / "sft"),
                        help="the model to test, or 'base' (default: make run's SFT model)")
    parser.add_argument("--report", type=Path, default=ROOT / "artifacts" / "reports" / "sft-tools",
                        help="the model's in-domain report (metrics.json) in the main project")
    parser.add_argument("--limit", type=int, default=1000, help="test questions per bucket (default: all)")
    parser.add_argument("--test-share", type=float, default=0.5, help="share of the unseen graph's pairs tested")
    parser.add_argument("--ablate-phrases", action="store_true",
                        help="also answer with tools.unlabelled_relations: keywords and pair the runs")
    parser.add_argument("--answer-note", action="store_true",
                        help="also answer with agent.unshown_answer_note: true (an answer no tool showed is sent "
                             "back once) and pair the runs")
    parser.add_argument("--train-with", action="store_true",
                        help="also train an SFT model on make run's conversations plus the graph's train split and "
                             "pair it with --model on the same questions (~50 min on 2 cores)")
    parser.add_argument("--sft-steps", type=int, default=None,
                        help="sft.max_steps of the --train-with model (default: params)")
    parser.add_argument("--keep", type=Path, default=None, help="build the project under this folder and keep it")
    return parser.parse_args(argv)


def trained_with_graph(project: Path, main_project: Path | None, steps: int | None) -> Path:
    """An SFT model trained as make run's, on its conversations (``main_project``'s; None: none, for the toy) plus
    those of the graph's train split: the model folder."""
    from pipelines.agent.models import BASE, resolve_model_folder
    from pipelines.config import load_params
    from pipelines.layout import model_dir
    from pipelines.train.sft import train_sft
    from pipelines.train.sft_data import read_sft_conversations

    omne(project, "sft", "data")
    params = load_params(project / "params.yaml")
    main = []
    if main_project is not None:
        conversations = main_project / "artifacts" / "sft" / "conversations"
        if not conversations.is_dir():
            raise SystemExit(f"error: no SFT conversations at {conversations}: run `make run` first")
        main = read_sft_conversations(load_params(main_project / "params.yaml"))
    graph = read_sft_conversations(params)
    sft = params.sft if steps is None else params.sft.model_copy(update={"max_steps": steps})
    folder = model_dir(params.artifacts_dir, "trained_with")
    print(f"training an SFT model on {len(main)} + {len(graph)} conversations (the graph's train split)", flush=True)
    train_sft([*main, *graph], resolve_model_folder(BASE, params), folder, sft, progress=True)
    return folder


def toy_graph(folder: Path) -> Path:
    """A LightRAG rendering of a tiny triples graph (the tests' solar facts), written as GraphML."""
    from _toy import SOLAR

    from pipelines.kg.importers import read_table
    from pipelines.kg.lightrag_render import render_lightrag, write_lightrag_graphml

    source = folder / "solar"
    source.mkdir(parents=True, exist_ok=True)
    triples = read_table(SOLAR / "triples.csv")
    entities = read_table(SOLAR / "entities.csv")
    with (source / "triples.jsonl").open("w", encoding="utf-8") as out:
        for row in triples.iter_rows(named=True):
            out.write(json.dumps({"head": row["head"], "relation": row["relation"], "tail": row["tail"]}) + "\n")
    with (source / "entities.jsonl").open("w", encoding="utf-8") as out:
        for row in entities.iter_rows(named=True):
            out.write(json.dumps({k: row.get(k) for k in ("name", "type", "description")}) + "\n")
    path = folder / "solar_lightrag.graphml"
    write_lightrag_graphml(render_lightrag(source), path)
    return path


def unseen_project(project: Path, graph: Path, name: str, base: Path, test_share: float) -> None:
    """A project whose only domain is ``graph`` (imported as ``name``) with its QA dataset built."""
    project_params(project, base, test_share)
    omne(project, "kg", "import", str(graph), "--name", name, "--format", "graphml",
         "--description", f"{graph.name}, never trained on")
    for step in (("qa", "seeds"), ("qa", "generate"), ("qa", "build")):
        omne(project, *step)


def variant_evaluation(project: Path, model: str, name: str, limit: int, section: str, key: str, value: Any) -> None:
    """``evaluation`` with one setting of the project's params.yaml changed (``section.key: value``), then put back."""
    params = project / "params.yaml"
    text = params.read_text(encoding="utf-8")
    raw = yaml.safe_load(text)
    raw.setdefault(section, {})[key] = value
    params.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    try:
        evaluation(project, model, name, limit)
    finally:
        params.write_text(text, encoding="utf-8")


def behaviour(project: Path, run: str) -> dict[str, Any]:
    metrics = json.loads((project / "artifacts" / "reports" / run / "metrics.json").read_text(encoding="utf-8"))
    b = metrics["behaviour"]
    keys = ("answered_episodes", "answer_from_tools_share", "answer_in_last_thought_share",
            "missing_entity_calls_per_sample", "missing_entity_call_share", "repeated_call_finish_share", "finish",
            "unshown_answer_notes", "unshown_answer_fixed")
    by_hops = {h: {"n": s["n"], "em": round(s["em"], 4), "em_wilson95": [round(s["em_low"], 3), round(s["em_high"], 3)]}
               for h, s in metrics["by_hops"].items()}
    overall = metrics["overall"]
    return {"n": overall["n"], "em": round(overall["em"], 4),
            "em_wilson95": [round(overall["em_low"], 3), round(overall["em_high"], 3)],
            "norm_em": round(overall["norm_em"], 4), "answered": round(overall["answered"], 4),
            "by_bucket": {k: {"n": v["n"], "em": round(v["em"], 4)} for k, v in metrics["by_bucket"].items()},
            "by_hops": by_hops, "behaviour": {k: b.get(k) for k in keys}}


def in_domain(report: Path) -> dict[str, Any] | None:
    """The model's in-domain figures from its main-project report (None when there is none)."""
    path = report / "metrics.json"
    if not path.is_file():
        return None
    metrics = json.loads(path.read_text(encoding="utf-8"))
    one = metrics["by_hops"].get("1")
    return {"report": str(report), "em": round(metrics["overall"]["em"], 4), "n": metrics["overall"]["n"],
            "one_hop_em": round(one["em"], 4) if one else None, "one_hop_n": one["n"] if one else 0}


def figures_line(label: str, s: dict[str, Any]) -> list[str]:
    one = s["by_hops"].get("1")
    b = s["behaviour"]
    return [f"  {label:<18} EM {s['em']:.3f} [{s['em_wilson95'][0]:.2f}-{s['em_wilson95'][1]:.2f}] on {s['n']}, "
            + (f"1-hop {one['em']:.3f} [{one['em_wilson95'][0]:.2f}-{one['em_wilson95'][1]:.2f}] on {one['n']}, "
               if one else "") + f"normalised EM {s['norm_em']:.3f}, answered {s['answered']:.0%}",
            f"  {'':<18} answers the tools showed {b['answer_from_tools_share']:.0%} of {b['answered_episodes']} "
            f"({(b.get('answer_in_last_thought_share') or 0):.0%} as the last thought wrote them), "
            f"calls naming a missing entity {b['missing_entity_calls_per_sample']:.2f}/q "
            f"({b['missing_entity_call_share']:.0%} of calls), ended by a repeated call "
            f"{b['repeated_call_finish_share']:.0%}"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    model = resolved_model(args.model)
    if model is None:
        return 2
    results: dict[str, Any] = {"benchmark": "unseen_graph", "date": datetime.now(UTC).isoformat(timespec="seconds"),
                               "machine": {**machine_info(), "load_average_at_start": load_average()},
                               "args": args_record(args)}
    with tempfile.TemporaryDirectory(prefix="omne-unseen-") as scratch:
        folder = args.keep or Path(scratch)
        graph = toy_graph(folder) if args.toy else args.graph.resolve()
        if not graph.is_file():
            print(f"error: no GraphML at {graph}", file=sys.stderr)
            return 2
        name = args.name or re.sub(r"[^a-z0-9_]", "_", (graph.stem if args.toy else graph.parent.name).lower())
        base = toy_params() if args.toy else ROOT / "params.yaml"
        project = folder / "project"
        unseen_project(project, graph, name, base, args.test_share)
        phrased = evaluation(project, model, "phrases", args.limit)
        results.update({"graph": str(graph.relative_to(ROOT)) if graph.is_relative_to(ROOT) else graph.name,
                        "domain": name, "model": args.model, "unseen": behaviour(project, "phrases")})
        reports = project / "artifacts" / "reports"
        if args.ablate_phrases:
            variant_evaluation(project, model, "keywords", args.limit, "tools", "unlabelled_relations", "keywords")
            results["keywords"] = behaviour(project, "keywords")
            comparison = compare_reports(reports / "phrases", reports / "keywords")
            results["paired_phrases_keywords"] = comparison.model_dump(mode="json")
        if args.answer_note:
            variant_evaluation(project, model, "answer_note", args.limit, "agent", "unshown_answer_note", True)
            results["answer_note"] = behaviour(project, "answer_note")
            comparison = compare_reports(reports / "phrases", reports / "answer_note")
            results["paired_answer_note"] = comparison.model_dump(mode="json")
        if args.train_with:
            trained = trained_with_graph(project, None if args.toy else ROOT, args.sft_steps)
            evaluation(project, str(trained), "trained_with", args.limit)
            results["trained_with"] = behaviour(project, "trained_with")
            results["paired_trained_with"] = compare_reports(reports / "phrases", reports / "trained_with").model_dump(
                mode="json")
        del phrased
    reference = None if args.toy else in_domain(args.report.resolve())
    results["in_domain"] = reference
    unseen_one = results["unseen"]["by_hops"].get("1")
    ratio = (unseen_one["em"] / reference["one_hop_em"] if reference and reference["one_hop_em"] and unseen_one
             else None)
    results["one_hop_share_of_in_domain"] = round(ratio, 4) if ratio else None
    results["machine"]["load_average_at_end"] = load_average()
    b = results["unseen"]["behaviour"]
    lines = [f"unseen LightRAG graph {results['graph']!r} as {name!r}, model {args.model}; its test questions",
             *figures_line("node_info phrases", results["unseen"])]
    if "keywords" in results:
        pair = results["paired_phrases_keywords"]["overall"]
        lines += [*figures_line("keyword labels", results["keywords"]),
                  f"  paired on {pair['n']}: only phrases {pair['only_a']}, only keywords {pair['only_b']}, exact "
                  f"McNemar p = {pair['p_value']:.3g}"]
    if "answer_note" in results:
        pair = results["paired_answer_note"]["overall"]
        noted = results["answer_note"]["behaviour"]
        lines += [*figures_line("unshown answer note", results["answer_note"]),
                  f"  {'':<18} unshown answers sent back {noted['unshown_answer_notes']}, "
                  f"then shown {noted['unshown_answer_fixed']}",
                  f"  paired on {pair['n']}: only without the note {pair['only_a']}, only with it {pair['only_b']}, "
                  f"exact McNemar p = {pair['p_value']:.3g}"]
    if "trained_with" in results:
        pair = results["paired_trained_with"]["overall"]
        lines += [*figures_line("trained with it", results["trained_with"]),
                  f"  paired on {pair['n']}: only the model tested {pair['only_a']}, only trained with it "
                  f"{pair['only_b']}, exact McNemar p = {pair['p_value']:.3g}"]
    if reference:
        low, high = wilson_interval(round(reference["one_hop_em"] * reference["one_hop_n"]), reference["one_hop_n"])
        lines.append(f"  in-domain (its report {Path(reference['report']).name}): EM {reference['em']:.3f} on "
                     f"{reference['n']}, 1-hop {reference['one_hop_em']:.3f} [{low:.2f}-{high:.2f}] on "
                     f"{reference['one_hop_n']}")
    lines += [f"  target unseen 1-hop EM >= 50% of in-domain 1-hop EM: {verdict(ratio >= 0.5 if ratio else None)}"
              + (f" ({ratio:.0%})" if ratio else ""),
              f"  target answers the tools never showed <= 5%: "
              f"{verdict(1 - b['answer_from_tools_share'] <= 0.05 if b['answered_episodes'] else None)}",
              f"  target episodes ended by a repeated call <= 10%: {verdict(b['repeated_call_finish_share'] <= 0.10)}",
              "  " + load_line(results["machine"])]
    write_results(results, "\n".join(lines), args.out, started)
    if args.keep is None and args.toy:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
