"""The evaluation report (docs/evaluation.md, "Reports"): artifacts/reports/<run>/ holds

- ``metrics.json``: a flat ``summary`` of the main numbers first, then the whole :class:`EvalMetrics`
  (:func:`read_metrics` reads it back); ``summary.json``: the flat numbers alone (em, em_low, em_high, f1,
  hit1, em_1_2, em_1_2_low, em_3_plus, em_hop_ge4, em_domain_<d>, ...), the narrow table for ``dvc metrics
  show``;
- ``predictions.jsonl``: one line per trajectory (question, gold answers, prediction, correctness,
  valid gold paths and the full trajectory);
- ``plots/*.png``: accuracy by bucket, hop count and domain; tool-call and generated-token
  distributions (what ``dvc plots show`` renders);
- ``report.html``: one self-contained page (inline CSS and JS, plots as base64 PNG, episodes as JSON)
  with the metrics tables, the plots and a trajectory viewer that works from ``file://``; its page,
  CSS and JS are package files (``report_assets/``, read with :mod:`importlib.resources`, so an
  installed package has them too) that are inlined into each report;
- ``manifest.json``: kind ``eval_report``, the inputs, params and, as metadata, the flat numbers and the time
  figures (``wall_time_s``), which must not decide whether the report is current.

The folder is written atomically: a failed report never leaves a half-written folder behind.
Model text is data: the page renders it with ``textContent`` only, and the embedded JSON is escaped
so that no ``</script>`` (or any ``<``) written by a model can end the data block.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from collections.abc import Iterable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pipelines.agent.protocols import PROTOCOLS
from pipelines.agent.trajectory import Trajectory
from pipelines.eval.schema import (
    BUCKETS,
    HEADLINE_FIELDS,
    HOP_GROUPS,
    INTERVAL_FIELDS,
    SCORE_FIELDS,
    SCORE_LABELS,
    EvalMetrics,
    Scores,
)
from pipelines.manifest import ArtifactBuild
from pipelines.qa.models import GoldPath, GoldPathItem
from pipelines.qa.report import QAReport

REPORT_KIND = "eval_report"
METRICS_FILE = "metrics.json"
SUMMARY_FILE = "summary.json"  # the flat numbers alone: what `dvc metrics show` tabulates best
PREDICTIONS_FILE = "predictions.jsonl"
HTML_FILE = "report.html"
PLOTS_DIR = "plots"
PLOT_NAMES = ("accuracy_by_bucket", "accuracy_by_hops", "accuracy_by_domain", "tool_calls", "generated_tokens")
ASSETS = "report_assets"  # the page, its CSS and JS: package data of pipelines.eval (pyproject.toml)

EFFICIENCY_LABELS = {
    "generated_tokens_mean": "generated tokens / question",
    "total_tokens_mean": "total tokens / question",
    "latency_mean_s": "latency mean (s)",
    "latency_sd_s": "latency sd (s)",
    "latency_per_turn_mean_s": "latency per turn (s)",
    "turns_mean": "turns / question",
    "samples_per_s": "samples / s",
    "generated_tokens_per_s": "generated tokens / s",
    "kg_calls_per_sample": "KG calls / sample",
}
BEHAVIOUR_SCALARS = ("format_errors_per_sample", "repeated_tool_calls_per_sample", "invalid_tool_calls_per_sample",
                     "unknown_graph_calls_per_sample", "other_graph_calls_per_sample", "retrieval_rate",
                     "gold_triple_coverage", "exploration_efficiency", "answer_from_tools_share",
                     "answer_in_last_thought_share", "missing_entity_calls_per_sample", "repeated_call_finish_share",
                     "unshown_answer_notes", "unshown_answer_fixed")

# Tags the viewer splits a model turn into: think and answer, and every protocol's own call and response tags.
THINK_TAG = "think"
CALL_TAGS = tuple(dict.fromkeys(protocol.call_tag for protocol in PROTOCOLS.values()))
RESPONSE_TAGS = tuple(dict.fromkeys(protocol.response_tag for protocol in PROTOCOLS.values()))
ANSWER_TAG = "answer"
_PART_KIND = {THINK_TAG: "think", ANSWER_TAG: "answer", **{t: "call" for t in CALL_TAGS},
              **{t: "response" for t in RESPONSE_TAGS}}
_TAG_RE = re.compile(r"<(/?)(" + "|".join(re.escape(t) for t in _PART_KIND) + r")>")


# --------------------------------------------------------------------------------------------- public

def write_report(folder: Path, metrics: EvalMetrics, trajectories: list[Trajectory], *,
                 gold_paths: dict[str, GoldPath] | None, inputs: dict[str, str], params: dict,
                 qa_quality: QAReport | None = None, metadata: dict[str, Any] | None = None) -> Path:
    """Write the report of one evaluation run into ``folder`` (artifacts/reports/<run>/), atomically.

    ``gold_paths`` maps a QA id to its gold paths (shown beside each episode; None: none known).
    ``inputs`` (path -> sha256) and ``params`` go into the manifest as they are (its fingerprint: what
    ``evaluate_cached`` compares), ``metadata`` (time figures) beside the flat numbers; ``qa_quality`` (the QA
    dataset's quality report, pipelines.qa.report) becomes the page's "Questions" section. Returns ``folder``.
    """
    gold_paths = gold_paths or {}
    summary = flat_metrics(metrics)
    with ArtifactBuild(folder, REPORT_KIND, inputs, params).writing() as draft:
        tmp = draft.folder
        (tmp / METRICS_FILE).write_text(metrics_json(metrics, summary), encoding="utf-8")
        (tmp / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        with (tmp / PREDICTIONS_FILE).open("w", encoding="utf-8") as handle:
            for trajectory in trajectories:
                handle.write(json.dumps(prediction_record(trajectory, gold_paths.get(trajectory.qa_id)),
                                        ensure_ascii=False) + "\n")
        plots = render_plots(metrics, trajectories)
        (tmp / PLOTS_DIR).mkdir()
        for name, png in plots.items():
            (tmp / PLOTS_DIR / f"{name}.png").write_bytes(png)
        (tmp / HTML_FILE).write_text(render_html(metrics, trajectories, gold_paths, plots, summary, qa_quality),
                                     encoding="utf-8")
        correct = sum(t.correct is True for t in trajectories)
        draft.record(rows={"episodes": len(trajectories), "questions": len({t.qa_id for t in trajectories}),
                           "correct": correct, "wrong": len(trajectories) - correct},  # files: every file written
                     metadata={**summary, **(metadata or {})})
    return folder


def _generation_rows(metrics: EvalMetrics) -> list[tuple[str, str]]:
    """Where a local backend's generating time went (none for an endpoint or a scripted client)."""
    work = metrics.efficiency.generation
    return [] if work is None else [("generation", f"{work.summary()}; {work.backend} backend")]


def read_metrics(folder: Path) -> EvalMetrics:
    """The :class:`EvalMetrics` of a written report (the flat ``summary`` section is ignored)."""
    data = json.loads((folder / METRICS_FILE).read_text(encoding="utf-8"))
    data.pop("summary", None)
    return EvalMetrics.model_validate(data)


def flat_metrics(metrics: EvalMetrics) -> dict[str, float | int]:
    """The main numbers under flat keys: em, em_low, em_high (EM's Wilson 95% interval), f1, hit1, em_1_2,
    em_1_2_low, em_1_2_high, em_3_plus, em_hop_ge4, em_domain_<d>, ..."""
    flat: dict[str, float | int] = {"n": metrics.overall.n}
    for f in SCORE_FIELDS:
        flat[f] = _num(getattr(metrics.overall, f))
        if f == "em":
            flat.update({name: _num(getattr(metrics.overall, name)) for name in INTERVAL_FIELDS})
    for prefix, groups, order in (("", metrics.by_bucket, BUCKETS), ("hop_", metrics.by_hops, HOP_GROUPS),
                                  ("domain_", metrics.by_domain, ())):
        for key in _ordered(groups, order):
            scores, slug = groups[key], prefix + slug_key(key)
            for f in HEADLINE_FIELDS:
                flat[f"{f}_{slug}"] = _num(getattr(scores, f))
                if f == "em":
                    flat[f"em_{slug}_low"], flat[f"em_{slug}_high"] = _num(scores.em_low), _num(scores.em_high)
            flat[f"n_{slug}"] = scores.n
    flat.update({k: _num(getattr(metrics.efficiency, k)) for k in EFFICIENCY_LABELS})
    flat.update({k: _num(getattr(metrics.behaviour, k)) for k in BEHAVIOUR_SCALARS})
    for name, stats in sorted(metrics.repeats.items()):
        for stat, value in sorted(stats.items()):
            flat[f"{slug_key(name)}_{slug_key(stat)}"] = _num(value)
    return flat


def metrics_json(metrics: EvalMetrics, summary: dict[str, Any] | None = None) -> str:
    body = {"summary": summary if summary is not None else flat_metrics(metrics), **metrics.model_dump(mode="json")}
    return json.dumps(body, indent=2, ensure_ascii=False) + "\n"


def slug_key(key: str) -> str:
    """A group key as a metric-name part: '1-2' -> '1_2', '3+' -> '3_plus', '>=4' -> 'ge4'."""
    text = key.replace(">=", "ge").replace("<=", "le").replace("+", "_plus")
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "none"


def prediction_record(trajectory: Trajectory, gold: GoldPath | None) -> dict[str, Any]:
    return {
        "qa_id": trajectory.qa_id, "domain": trajectory.domain, "bucket": trajectory.bucket,
        "hops": trajectory.hops, "sample": trajectory.sample, "question": trajectory.question,
        "gold_answers": trajectory.gold_answers, "prediction": trajectory.answer, "correct": trajectory.correct,
        "gold_paths": [p.nodes for p in gold.paths if p.valid] if gold else [],
        "trajectory": trajectory.model_dump(mode="json"),
    }


def split_turn(text: str) -> list[dict[str, str]]:
    """Split a model turn into ordered parts: think, call, response (inline, search protocol), answer, text.

    A call or response inside an open ``<think>`` (the search protocol reasons around its calls) splits
    the think text around it; an opened and never closed tag keeps the rest of the turn (e.g. an
    unterminated ``<think>``); a stray closing tag stays in the text.
    """
    parts: list[dict[str, str]] = []
    buffer: list[str] = []
    outer = "text"

    def flush(kind: str) -> None:
        _add_part(parts, kind, "".join(buffer))
        buffer.clear()

    pos = 0
    while (match := _TAG_RE.search(text, pos)) is not None:
        closing, tag = match.group(1) == "/", match.group(2)
        buffer.append(text[pos:match.start()])
        pos = match.end()
        if tag == THINK_TAG and not closing:
            flush(outer)
            outer = "think"
        elif tag == THINK_TAG and outer == "think":
            flush("think")
            outer = "text"
        elif closing:
            buffer.append(match.group(0))
        else:
            flush(outer)
            close = text.find(f"</{tag}>", pos)
            end = len(text) if close < 0 else close
            _add_part(parts, _PART_KIND[tag], text[pos:end], keep_empty=tag in (ANSWER_TAG, *CALL_TAGS))
            pos = len(text) if close < 0 else close + len(tag) + 3
    buffer.append(text[pos:])
    flush(outer)
    return parts


def episode_view(index: int, trajectory: Trajectory, gold: GoldPath | None, systems: dict[str, int]) -> dict[str, Any]:
    """What the viewer shows of one episode: its header and its turns, split into parts."""
    turns: list[dict[str, Any]] = []
    records = list(trajectory.tool_calls)
    used = 0
    system = None
    messages = trajectory.messages
    assistant_rounds = 0
    for position, message in enumerate(messages):
        role, content = message.get("role", ""), message.get("content", "")
        if role == "system":
            system = systems.setdefault(content, len(systems))
            continue
        if role == "user" and not any(m.get("role") == "assistant" for m in messages[:position]):
            turns.append({"role": "prompt", "parts": [{"kind": "prompt", "text": content}]})
            continue
        if role == "assistant":
            parts = split_turn(content)
            for part in parts:
                if part["kind"] == "call" and used < len(records):
                    part["record"] = _record_view(records[used])
                    used += 1
            turns.append({"role": "assistant", "round": assistant_rounds, "parts": parts})
            assistant_rounds += 1
            continue
        parts = [p if p["kind"] != "text" else {**p, "kind": "response"} for p in split_turn(content)]
        turns.append({"role": "environment", "parts": parts or [{"kind": "response", "text": ""}]})
    for record in records[used:]:  # calls whose text is missing from the messages (kept for completeness)
        turns.append({"role": "assistant", "round": record.round,
                      "parts": [{"kind": "call", "text": record.text, "record": _record_view(record)}]})
        turns.append({"role": "environment", "parts": [{"kind": "response", "text": record.response}]})
    return {
        "i": index, "qa_id": trajectory.qa_id, "domain": trajectory.domain, "bucket": trajectory.bucket,
        "hops": trajectory.hops, "sample": trajectory.sample, "question": trajectory.question,
        "gold_answers": trajectory.gold_answers, "prediction": trajectory.answer, "correct": trajectory.correct,
        "finish": trajectory.finish, "rounds": trajectory.rounds, "tool_calls": len(trajectory.tool_calls),
        "generated_tokens": trajectory.generated_tokens, "latency_s": round(trajectory.latency_s, 3),
        "format_errors": trajectory.format_errors, "protocol": trajectory.protocol, "mode": trajectory.mode,
        "system": system, "turns": turns,
        "gold_paths": [_gold_view(p) for p in _valid_first(gold.paths)] if gold else [],
        "gold_truncated": gold.truncated if gold else False,
    }


def script_json(data: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: no '<', '>' or '&' survive unescaped."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


# ---------------------------------------------------------------------------------------------- plots

def render_plots(metrics: EvalMetrics, trajectories: list[Trajectory]) -> dict[str, bytes]:
    """The report's PNG plots by name (always the same five, 'no data' when a group is empty)."""
    return {
        "accuracy_by_bucket": _accuracy_plot(metrics.by_bucket, BUCKETS, "Accuracy by hop bucket"),
        "accuracy_by_hops": _accuracy_plot(metrics.by_hops, HOP_GROUPS, "Accuracy by hop count"),
        "accuracy_by_domain": _accuracy_plot(metrics.by_domain, (), "Accuracy by domain"),
        "tool_calls": _distribution_plot([len(t.tool_calls) for t in trajectories], trajectories,
                                         "Tool calls per episode", "tool calls", integer=True),
        "generated_tokens": _distribution_plot([t.generated_tokens for t in trajectories], trajectories,
                                               "Generated tokens per episode", "generated tokens", integer=False),
    }


def _figure(width: float = 6.4, height: float = 3.6):
    from matplotlib.figure import Figure  # no pyplot: no global state, the Agg canvas renders PNG

    figure = Figure(figsize=(width, height), dpi=100)
    return figure, figure.add_subplot(1, 1, 1)


def _png(figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def _accuracy_plot(groups: dict[str, Scores], order: tuple[str, ...], title: str) -> bytes:
    keys = _ordered(groups, order)
    figure, axes = _figure(max(6.4, 1.2 * len(keys) + 2))
    axes.set_title(title)
    if not keys:
        axes.text(0.5, 0.5, "no data", ha="center", va="center", transform=axes.transAxes)
        axes.set_axis_off()
    else:
        width = 0.26
        for offset, field in enumerate(HEADLINE_FIELDS):
            xs = [i + (offset - 1) * width for i in range(len(keys))]
            values = [getattr(groups[k], field) for k in keys]
            errors = ([[v - groups[k].em_low for k, v in zip(keys, values, strict=True)],
                       [groups[k].em_high - v for k, v in zip(keys, values, strict=True)]] if field == "em" else None)
            bars = axes.bar(xs, values, width, label=SCORE_LABELS[field] + (" (95% CI)" if errors else ""),
                            yerr=errors, capsize=3 if errors else 0, error_kw={"elinewidth": 0.8})
            axes.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize=7, padding=1)
        axes.set_xticks(range(len(keys)), [f"{k}\n(n={groups[k].n})" for k in keys],
                        rotation=30 if len(keys) > 6 else 0)
        axes.set_ylim(0, 1.1)
        axes.set_ylabel("score")
        axes.legend(loc="upper right", fontsize=8)
        axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    return _png(figure)


def _distribution_plot(values: list[int], trajectories: list[Trajectory], title: str, xlabel: str, *,
                       integer: bool) -> bytes:
    from matplotlib.ticker import MaxNLocator

    figure, axes = _figure()
    axes.set_title(title)
    if not values:
        axes.text(0.5, 0.5, "no data", ha="center", va="center", transform=axes.transAxes)
        axes.set_axis_off()
    else:
        top = max(values)
        if integer:
            bins = [b - 0.5 for b in range(0, top + 2)]
        else:
            step = max(1, -(-top // 20))
            bins = list(range(0, top + step + 1, step))
        right = [v for v, t in zip(values, trajectories, strict=True) if t.correct is True]
        wrong = [v for v, t in zip(values, trajectories, strict=True) if t.correct is not True]
        axes.hist([right, wrong], bins=bins, stacked=True, label=["correct", "wrong"],
                  color=["#2e7d32", "#c62828"])
        axes.set_xlabel(xlabel)
        axes.set_ylabel("episodes")
        if integer:
            axes.set_xticks(range(0, top + 1, max(1, (top + 1) // 15)))
        axes.yaxis.set_major_locator(MaxNLocator(integer=True))
        axes.legend(fontsize=8)
        axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    return _png(figure)


# ----------------------------------------------------------------------------------------------- HTML

def render_html(metrics: EvalMetrics, trajectories: list[Trajectory], gold_paths: dict[str, GoldPath],
                plots: dict[str, bytes], summary: dict[str, Any], qa_quality: QAReport | None = None) -> str:
    systems: dict[str, int] = {}
    episodes = [episode_view(i, t, gold_paths.get(t.qa_id), systems) for i, t in enumerate(trajectories)]
    data = {"run": metrics.run, "episodes": episodes, "systems": list(systems)}
    e = html.escape
    header = [("run", metrics.run), ("model", metrics.model), ("protocol", metrics.protocol),
              ("baseline", metrics.baseline or "—"), ("split", metrics.split),
              ("domains", ", ".join(metrics.domains) or "—"), ("samples", str(metrics.samples)),
              ("episodes", str(len(trajectories)))]
    plot_html = "\n".join(
        f'<figure class="plot"><img id="plot-{e(name)}" data-testid="plot-{e(name)}" alt="{e(name)}" '
        f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}"></figure>'
        for name, png in plots.items())
    return _asset("report.html").format(
        title=e(f"omne eval report: {metrics.run}"),
        css=_asset("report.css"),
        header="".join(f'<span class="meta" data-testid="meta-{e(k)}"><b>{e(k)}</b> {e(v)}</span>' for k, v in header),
        headline=_headline(metrics),
        scores=_scores_table(metrics),
        efficiency=_kv_table("efficiency-table", [(label, _fmt(getattr(metrics.efficiency, k)))
                                                  for k, label in EFFICIENCY_LABELS.items()]
                             + _generation_rows(metrics)),
        behaviour=_kv_table("behaviour-table", _behaviour_rows(metrics)),
        repeats=_repeats_table(metrics),
        quality=_quality_section(qa_quality),
        plots=plot_html,
        data=script_json(data),
        js=_asset("report.js"),
    )


@cache
def _asset(name: str) -> str:
    """A file of the page (report_assets/), read from the installed package once per process."""
    return (resources.files(__package__) / ASSETS / name).read_text(encoding="utf-8")


def _headline(metrics: EvalMetrics) -> str:
    fields = (*HEADLINE_FIELDS, "answered")
    overall = metrics.overall
    return "".join(f'<div class="card" data-testid="headline-{html.escape(f)}"><div class="big">'
                   f"{_fmt(getattr(overall, f))}</div><div>{html.escape(SCORE_LABELS[f])}</div>"
                   + (f'<div class="ci" data-testid="headline-em-ci">95% CI {_interval(overall)}</div>'
                      if f == "em" else "") + "</div>"
                   for f in fields)


def _scores_table(metrics: EvalMetrics) -> str:
    rows = [("overall", "all", metrics.overall)]
    rows += [("bucket", k, metrics.by_bucket[k]) for k in _ordered(metrics.by_bucket, BUCKETS)]
    rows += [("hops", k, metrics.by_hops[k]) for k in _ordered(metrics.by_hops, HOP_GROUPS)]
    rows += [("domain", k, metrics.by_domain[k]) for k in _ordered(metrics.by_domain, ())]
    e = html.escape
    body = "".join(
        f'<tr data-testid="score-row" data-group="{e(group)}" data-key="{e(key)}"><th>{e(group)}</th><td>{e(key)}</td>'
        f"<td>{s.n}</td>" + "".join(f"<td>{_fmt(getattr(s, f))}</td>" + (
            f'<td data-testid="em-ci">{_interval(s)}</td>' if f == "em" else "") for f in SCORE_FIELDS) + "</tr>"
        for group, key, s in rows)
    labels = [h for f in SCORE_FIELDS for h in ((SCORE_LABELS[f], "EM 95% CI") if f == "em" else (SCORE_LABELS[f],))]
    head = "".join(f"<th>{h}</th>" for h in ("group", "key", "n", *labels))
    return (f'<table id="metrics-table" data-testid="metrics-table"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>"
            '<p class="ci">EM 95% CI: the Wilson score interval of the group\'s n questions (a question with '
            "several samples counts once); two runs are compared question by question with "
            "<code>omne eval compare</code>.</p>")


def _quality_section(report: QAReport | None) -> str:
    """The QA dataset's quality figures per domain and hop count (docs/qa.md, "Quality report"); "" without."""
    if report is None or not report.domains:
        return ""
    e = html.escape
    head = "".join(f"<th>{h}</th>" for h in ("domain", "hops", "questions", "words median", "p95", "max",
                                               "depth max", "depth>=2", "leaks", "form problems", "guessable"))
    body = "".join(
        f'<tr data-testid="quality-row" data-domain="{e(r.domain)}" data-hops="{e(r.hops)}"><th>{e(r.domain)}</th>'
        f"<td>{e(r.hops)}</td><td>{r.questions}</td><td>{r.words_median:g}</td><td>{r.words_p95:g}</td>"
        f"<td>{r.words_max}</td><td>{r.depth_max}</td><td>{r.depth_ge2_share:.1%}</td><td>{r.leaks}</td>"
        f"<td>{r.form_problems}</td><td>{r.guessable_share:.1%}</td></tr>" for r in report.rows())
    return (f'<section id="questions" data-testid="questions"><h2>Questions</h2>'
            f"<p>How the QA dataset's questions of the evaluated domains read (all splits): words per question, "
            f"relative-clause depth, leaked names, form problems; guessable: {e(report.guessable_rule)}.</p>"
            f'<table id="quality-table" data-testid="quality-table"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></section>\n")


def _behaviour_rows(metrics: EvalMetrics) -> list[tuple[str, str]]:
    b = metrics.behaviour
    rows = [(k.replace("_", " "), _fmt(getattr(b, k))) for k in BEHAVIOUR_SCALARS]
    for key in ("outcomes", "format_error_types", "first_tool", "tool_sequences", "tool_calls_histogram", "finish"):
        counts: dict[str, int] = getattr(b, key)
        text = ", ".join(f"{name}: {count}" for name, count in
                         sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))) if counts else "—"
        rows.append((key.replace("_", " "), text))
    return rows


def _kv_table(table_id: str, rows: Iterable[tuple[str, str]]) -> str:
    e = html.escape
    body = "".join(f'<tr data-key="{e(k)}"><th>{e(k)}</th><td>{e(v)}</td></tr>' for k, v in rows)
    return f'<table id="{table_id}" data-testid="{table_id}" class="kv"><tbody>{body}</tbody></table>'


def _repeats_table(metrics: EvalMetrics) -> str:
    if not metrics.repeats:
        return ""
    rows = [(name, " ± ".join(_fmt(stats[s]) for s in ("mean", "sd") if s in stats) or
             ", ".join(f"{k}: {_fmt(v)}" for k, v in stats.items())) for name, stats in sorted(metrics.repeats.items())]
    return "<h3>Repeats over seeds (mean ± sd)</h3>" + _kv_table("repeats-table", rows)


# --------------------------------------------------------------------------------------------- helpers

def _num(value: float | int) -> float | int:
    return round(value, 6) if isinstance(value, float) else value


def _interval(scores: Scores) -> str:
    """EM's Wilson 95% interval as text: '0.254–0.746'."""
    return f"{scores.em_low:.3f}–{scores.em_high:.3f}"


def _fmt(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    return f"{value:.3f}" if abs(value) < 1000 else f"{value:,.0f}"


def _ordered(groups: dict[str, Any], order: tuple[str, ...]) -> list[str]:
    known = [k for k in order if k in groups]
    return known + sorted(k for k in groups if k not in order)


def _add_part(parts: list[dict[str, str]], kind: str, text: str, *, keep_empty: bool = False) -> None:
    stripped = text.strip()
    if stripped or keep_empty:
        parts.append({"kind": kind, "text": stripped})


def _record_view(record) -> dict[str, Any]:
    return {"name": record.name, "arguments": record.arguments, "ok": record.ok, "error_type": record.error_type,
            "latency_s": round(record.latency_s, 4)}


def _valid_first(paths: list[GoldPathItem]) -> list[GoldPathItem]:
    return [p for p in paths if p.valid] + [p for p in paths if not p.valid]


def _gold_view(path: GoldPathItem) -> dict[str, Any]:
    steps = []
    for i, edge in enumerate(path.edges):
        forward = i >= len(path.nodes) - 1 or edge.src == path.nodes[i]
        steps.append({"keywords": edge.keywords, "forward": forward})
    return {"nodes": path.nodes, "steps": steps, "valid": path.valid, "reason": path.reason}

