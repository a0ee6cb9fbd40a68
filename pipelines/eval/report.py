"""The evaluation report (docs/evaluation.md, "Reports"): artifacts/reports/<run>/ holds

- ``metrics.json``: a flat ``summary`` of the main numbers first, then the whole :class:`EvalMetrics`
  (:func:`read_metrics` reads it back); ``summary.json``: the flat numbers alone (em, f1, hit1,
  em_1_2, em_3_plus, em_hop_ge4, em_domain_<d>, ...), the narrow table for ``dvc metrics show``;
- ``predictions.jsonl``: one line per trajectory (question, gold answers, prediction, correctness,
  valid gold paths and the full trajectory);
- ``plots/*.png``: accuracy by bucket, hop count and domain; tool-call and generated-token
  distributions (what ``dvc plots show`` renders);
- ``report.html``: one self-contained page (inline CSS and JS, plots as base64 PNG, episodes as JSON)
  with the metrics tables, the plots and a trajectory viewer that works from ``file://``;
- ``manifest.json``: kind ``eval_report``, the inputs, params and the flat numbers as metadata.

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
from pathlib import Path
from typing import Any

from pipelines.agent.trajectory import Trajectory
from pipelines.atomic import atomic_directory
from pipelines.eval.schema import EvalMetrics, Scores
from pipelines.manifest import Manifest, new_manifest, sha256_files, write_manifest
from pipelines.qa.models import GoldPath, GoldPathItem

METRICS_FILE = "metrics.json"
SUMMARY_FILE = "summary.json"  # the flat numbers alone: what `dvc metrics show` tabulates best
PREDICTIONS_FILE = "predictions.jsonl"
HTML_FILE = "report.html"
PLOTS_DIR = "plots"
PLOT_NAMES = ("accuracy_by_bucket", "accuracy_by_hops", "accuracy_by_domain", "tool_calls", "generated_tokens")

BUCKET_ORDER = ("1-2", "3+")
HOPS_ORDER = ("1", "2", "3", ">=4")
SCORE_FIELDS = ("em", "norm_em", "f1", "hit1", "answered")
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
                     "retrieval_rate", "gold_triple_coverage", "exploration_efficiency")

# Tags the viewer splits a model turn into (every protocol's call, response and answer tags).
THINK_TAG = "think"
CALL_TAGS = ("tool_call", "kg-query", "search")
RESPONSE_TAGS = ("tool_response", "information", "searched_triples")
ANSWER_TAG = "answer"
_PART_KIND = {THINK_TAG: "think", ANSWER_TAG: "answer", **{t: "call" for t in CALL_TAGS},
              **{t: "response" for t in RESPONSE_TAGS}}
_TAG_RE = re.compile(r"<(/?)(" + "|".join(re.escape(t) for t in _PART_KIND) + r")>")


# --------------------------------------------------------------------------------------------- public

def write_report(folder: Path, metrics: EvalMetrics, trajectories: list[Trajectory], *,
                 gold_paths: dict[str, GoldPath] | None, inputs: dict[str, str], params: dict) -> Path:
    """Write the report of one evaluation run into ``folder`` (artifacts/reports/<run>/), atomically.

    ``gold_paths`` maps a QA id to its gold paths (shown beside each episode; None: none known).
    ``inputs`` (path -> sha256) and ``params`` go into the manifest as they are. Returns ``folder``.
    """
    gold_paths = gold_paths or {}
    summary = flat_metrics(metrics)
    with atomic_directory(folder) as tmp:
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
        (tmp / HTML_FILE).write_text(render_html(metrics, trajectories, gold_paths, plots, summary), encoding="utf-8")
        data_files = sorted(p for p in tmp.rglob("*") if p.is_file())
        correct = sum(t.correct is True for t in trajectories)
        manifest: Manifest = new_manifest(
            "eval_report", files=sha256_files(data_files, tmp), inputs=dict(inputs), params=dict(params),
            rows={"episodes": len(trajectories), "questions": len({t.qa_id for t in trajectories}),
                  "correct": correct, "wrong": len(trajectories) - correct},
            metadata=summary,
        )
        write_manifest(tmp, manifest)
    return folder


def read_metrics(folder: Path) -> EvalMetrics:
    """The :class:`EvalMetrics` of a written report (the flat ``summary`` section is ignored)."""
    data = json.loads((folder / METRICS_FILE).read_text(encoding="utf-8"))
    data.pop("summary", None)
    return EvalMetrics.model_validate(data)


def flat_metrics(metrics: EvalMetrics) -> dict[str, float | int]:
    """The main numbers under flat keys: em, f1, hit1, em_1_2, em_3_plus, em_hop_ge4, em_domain_<d>, ..."""
    flat: dict[str, float | int] = {"n": metrics.overall.n}
    flat.update({f: _num(getattr(metrics.overall, f)) for f in SCORE_FIELDS})
    for prefix, groups, order in (("", metrics.by_bucket, BUCKET_ORDER), ("hop_", metrics.by_hops, HOPS_ORDER),
                                  ("domain_", metrics.by_domain, ())):
        for key in _ordered(groups, order):
            scores, slug = groups[key], prefix + slug_key(key)
            flat.update({f"em_{slug}": _num(scores.em), f"f1_{slug}": _num(scores.f1),
                         f"hit1_{slug}": _num(scores.hit1), f"n_{slug}": scores.n})
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
        "accuracy_by_bucket": _accuracy_plot(metrics.by_bucket, BUCKET_ORDER, "Accuracy by hop bucket"),
        "accuracy_by_hops": _accuracy_plot(metrics.by_hops, HOPS_ORDER, "Accuracy by hop count"),
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
        for offset, (field, label) in enumerate((("em", "EM"), ("f1", "F1"), ("hit1", "Hit@1"))):
            xs = [i + (offset - 1) * width for i in range(len(keys))]
            values = [getattr(groups[k], field) for k in keys]
            bars = axes.bar(xs, values, width, label=label)
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
                plots: dict[str, bytes], summary: dict[str, Any]) -> str:
    systems: dict[str, int] = {}
    episodes = [episode_view(i, t, gold_paths.get(t.qa_id), systems) for i, t in enumerate(trajectories)]
    data = {"run": metrics.run, "episodes": episodes, "systems": list(systems)}
    e = html.escape
    header = [("run", metrics.run), ("model", metrics.model), ("protocol", metrics.protocol),
              ("baseline", metrics.baseline or "—"), ("split", metrics.split), ("samples", str(metrics.samples)),
              ("episodes", str(len(trajectories)))]
    plot_html = "\n".join(
        f'<figure class="plot"><img id="plot-{e(name)}" data-testid="plot-{e(name)}" alt="{e(name)}" '
        f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}"></figure>'
        for name, png in plots.items())
    return _PAGE.format(
        title=e(f"omne eval report: {metrics.run}"),
        css=_CSS,
        header="".join(f'<span class="meta" data-testid="meta-{e(k)}"><b>{e(k)}</b> {e(v)}</span>' for k, v in header),
        headline=_headline(metrics),
        scores=_scores_table(metrics),
        efficiency=_kv_table("efficiency-table", [(label, _fmt(getattr(metrics.efficiency, k)))
                                                  for k, label in EFFICIENCY_LABELS.items()]),
        behaviour=_kv_table("behaviour-table", _behaviour_rows(metrics)),
        repeats=_repeats_table(metrics),
        plots=plot_html,
        data=script_json(data),
        js=_JS,
    )


def _headline(metrics: EvalMetrics) -> str:
    o = metrics.overall
    items = [("EM", o.em), ("F1", o.f1), ("Hit@1", o.hit1), ("answered", o.answered)]
    return "".join(f'<div class="card" data-testid="headline-{html.escape(k.lower().replace("@", ""))}">'
                   f'<div class="big">{_fmt(v)}</div><div>{html.escape(k)}</div></div>' for k, v in items)


def _scores_table(metrics: EvalMetrics) -> str:
    rows = [("overall", "all", metrics.overall)]
    rows += [("bucket", k, metrics.by_bucket[k]) for k in _ordered(metrics.by_bucket, BUCKET_ORDER)]
    rows += [("hops", k, metrics.by_hops[k]) for k in _ordered(metrics.by_hops, HOPS_ORDER)]
    rows += [("domain", k, metrics.by_domain[k]) for k in _ordered(metrics.by_domain, ())]
    e = html.escape
    body = "".join(
        f'<tr data-testid="score-row" data-group="{e(group)}" data-key="{e(key)}"><th>{e(group)}</th><td>{e(key)}</td>'
        f"<td>{s.n}</td>" + "".join(f"<td>{_fmt(getattr(s, f))}</td>" for f in SCORE_FIELDS) + "</tr>"
        for group, key, s in rows)
    head = "".join(f"<th>{h}</th>" for h in ("group", "key", "n", "EM", "norm. EM", "F1", "Hit@1", "answered"))
    return (f'<table id="metrics-table" data-testid="metrics-table"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>")


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


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
<header><h1>Evaluation report</h1><div class="metas">{header}</div></header>
<main>
<section id="metrics" data-testid="metrics">
<div class="cards">{headline}</div>
<h2>Scores</h2>
{scores}
<div class="two">
<div><h3>Efficiency</h3>{efficiency}</div>
<div><h3>Behaviour</h3>{behaviour}</div>
</div>
{repeats}
</section>
<section id="plots" data-testid="plots"><h2>Plots</h2><div class="plots">{plots}</div></section>
<section id="viewer" data-testid="viewer">
<h2>Trajectories</h2>
<div class="filters">
<label>answer <select id="filter-correct" data-testid="filter-correct">
<option value="all">all</option><option value="correct">correct</option><option value="wrong">wrong</option>
</select></label>
<label>bucket <select id="filter-bucket" data-testid="filter-bucket"><option value="">all</option></select></label>
<label>domain <select id="filter-domain" data-testid="filter-domain"><option value="">all</option></select></label>
<label>search <input id="filter-search" data-testid="filter-search" type="search" placeholder="question, answer, any text"></label>
<span id="episode-count" data-testid="episode-count" data-count="0"></span>
</div>
<div class="viewer">
<ol id="episode-list" data-testid="episode-list"></ol>
<div id="episode-detail" data-testid="episode-detail"><p class="hint">Select an episode.</p></div>
</div>
</section>
</main>
<script id="report-data" type="application/json">{data}</script>
<script>{js}</script>
</body>
</html>
"""

_CSS = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d232b;background:#f6f7f9}
header{background:#1f2d3d;color:#fff;padding:12px 20px}
header h1{margin:0 0 6px;font-size:20px}
.metas{display:flex;flex-wrap:wrap;gap:6px 16px;font-size:13px;opacity:.95}
main{padding:12px 20px}
section{background:#fff;border:1px solid #dde1e6;border-radius:6px;padding:10px 16px;margin-bottom:16px}
h2{font-size:17px;margin:6px 0 10px}h3{font-size:15px;margin:12px 0 6px}
.cards{display:flex;gap:12px;flex-wrap:wrap}
.card{border:1px solid #dde1e6;border-radius:6px;padding:8px 16px;text-align:center;min-width:90px}
.big{font-size:22px;font-weight:600}
table{border-collapse:collapse;font-size:13px}
th,td{border-bottom:1px solid #e4e7eb;padding:3px 10px;text-align:left;vertical-align:top}
thead th{background:#eef1f4}
#metrics-table td{text-align:right;font-variant-numeric:tabular-nums}
#metrics-table td:nth-child(2){text-align:left}
.two{display:flex;gap:32px;flex-wrap:wrap}
.kv td{max-width:560px;word-break:break-word}
.plots{display:flex;flex-wrap:wrap;gap:12px}
.plot{margin:0}.plot img{max-width:100%;border:1px solid #e4e7eb}
.filters{display:flex;flex-wrap:wrap;gap:8px 18px;align-items:center;margin-bottom:10px}
.filters input{width:240px}
#episode-count{font-weight:600}
.viewer{display:grid;grid-template-columns:minmax(240px,1fr) 3fr;gap:14px;align-items:start}
#episode-list{list-style:none;margin:0;padding:0;max-height:80vh;overflow:auto;border:1px solid #e4e7eb;border-radius:4px}
#episode-list li{border-bottom:1px solid #eef0f2}
#episode-list button{all:unset;display:block;width:100%;padding:6px 8px;cursor:pointer;box-sizing:border-box}
#episode-list button:hover,#episode-list button:focus{background:#eef4fb}
#episode-list li.selected button{background:#dbe9f8}
.mark{font-weight:700;margin-right:6px}.ok{color:#2e7d32}.bad{color:#c62828}.na{color:#777}
.tag{display:inline-block;font-size:11px;background:#eef1f4;border-radius:3px;padding:0 5px;margin-right:4px;color:#445}
.q{display:block;font-size:13px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.detail{display:grid;grid-template-columns:3fr minmax(220px,1.2fr);gap:14px;align-items:start}
.turn{border:1px solid #e1e5ea;border-left-width:4px;border-radius:4px;margin:0 0 8px;padding:4px 10px}
.turn h4{margin:2px 0 4px;font-size:12px;text-transform:uppercase;letter-spacing:.04em;color:#556}
.part{margin:4px 0}
.part pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
.label{font-size:11px;font-weight:600;color:#556;text-transform:uppercase}
.k-think{background:#fbf8ee}.k-call{background:#eef4fb}.k-response{background:#f3f3f3}
.k-answer{background:#eaf6ec}.k-text{background:#fff}.k-prompt{background:#f7f3fb}
.turn.assistant{border-left-color:#3f6fb5}.turn.environment{border-left-color:#9aa3ad}.turn.prompt{border-left-color:#8a5cc2}
.status-ok{color:#2e7d32}.status-error{color:#c62828}
aside{border:1px solid #e1e5ea;border-radius:4px;padding:6px 10px;background:#fcfcfd;position:sticky;top:8px}
.gold-path{margin:4px 0 8px;font-size:13px;word-break:break-word}
.gold-path.invalid{color:#777}
.rel{color:#3f6fb5;font-size:12px}
.hint{color:#777}
dl{display:grid;grid-template-columns:auto 1fr;gap:2px 10px;margin:6px 0}dt{font-weight:600}dd{margin:0;word-break:break-word}
"""

_JS = r"""
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("report-data").textContent);
  var EPISODES = DATA.episodes;
  var $ = function (id) { return document.getElementById(id); };
  var selected = null;

  // Every piece of model or KG text goes through textContent: nothing from the data becomes HTML.
  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (k === "class") node.className = attrs[k]; else node.setAttribute(k, attrs[k]);
      });
    }
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function fillSelect(select, values) {
    values.forEach(function (v) { select.appendChild(el("option", {value: v}, v)); });
  }
  function uniq(key) {
    var seen = {};
    EPISODES.forEach(function (e) { if (e[key] !== null && e[key] !== undefined) seen[e[key]] = true; });
    return Object.keys(seen).sort();
  }
  fillSelect($("filter-bucket"), uniq("bucket"));
  fillSelect($("filter-domain"), uniq("domain"));

  function haystack(e) {
    if (e._hay === undefined) {
      var bits = [e.qa_id, e.question, e.prediction || "", (e.gold_answers || []).join(" ")];
      e.turns.forEach(function (t) { t.parts.forEach(function (p) { bits.push(p.text); }); });
      e._hay = bits.join("\n").toLowerCase();
    }
    return e._hay;
  }

  function matches(e) {
    var c = $("filter-correct").value, b = $("filter-bucket").value, d = $("filter-domain").value;
    var q = $("filter-search").value.trim().toLowerCase();
    if (c === "correct" && e.correct !== true) return false;
    if (c === "wrong" && e.correct === true) return false;
    if (b && e.bucket !== b) return false;
    if (d && e.domain !== d) return false;
    if (q && haystack(e).indexOf(q) < 0) return false;
    return true;
  }

  function mark(e) {
    if (e.correct === true) return el("span", {"class": "mark ok", title: "correct"}, "\u2713");
    if (e.correct === false) return el("span", {"class": "mark bad", title: "wrong"}, "\u2717");
    return el("span", {"class": "mark na", title: "not scored"}, "?");
  }

  function renderList() {
    var list = $("episode-list"), shown = EPISODES.filter(matches), frag = document.createDocumentFragment();
    list.textContent = "";
    shown.forEach(function (e) {
      var li = el("li", {"data-testid": "episode-item", "data-qa-id": e.qa_id, "data-index": String(e.i),
                         "data-correct": String(e.correct)});
      if (selected === e.i) li.className = "selected";
      var button = el("button", {type: "button", "data-testid": "episode-button"});
      button.appendChild(mark(e));
      button.appendChild(el("span", {"class": "tag"}, e.domain));
      if (e.bucket) button.appendChild(el("span", {"class": "tag"}, e.bucket));
      if (e.sample) button.appendChild(el("span", {"class": "tag"}, "sample " + e.sample));
      button.appendChild(el("span", {"class": "q"}, e.question));
      button.addEventListener("click", function () { select(e.i); });
      li.appendChild(button);
      frag.appendChild(li);
    });
    list.appendChild(frag);
    var count = $("episode-count");
    count.textContent = shown.length + " of " + EPISODES.length + " episodes";
    count.setAttribute("data-count", String(shown.length));
  }

  function part(p) {
    var labels = {think: "think", call: "tool call", response: "tool response", answer: "answer", text: "text",
                  prompt: "user"};
    var box = el("div", {"class": "part k-" + p.kind, "data-testid": "turn-" + p.kind});
    var label = el("div", {"class": "label"}, labels[p.kind] || p.kind);
    if (p.record) {
      var r = p.record, status = r.ok ? "ok" : ("error: " + (r.error_type || "error"));
      label.appendChild(document.createTextNode(" \u00b7 " + (r.name || "unparsed") + " \u00b7 "));
      label.appendChild(el("span", {"class": r.ok ? "status-ok" : "status-error", "data-testid": "call-status"}, status));
    }
    box.appendChild(label);
    box.appendChild(el("pre", null, p.text));
    return box;
  }

  function turn(t, e) {
    var titles = {prompt: "prompt", assistant: "model turn " + ((t.round || 0) + 1), environment: "environment"};
    var box = el("div", {"class": "turn " + t.role, "data-testid": "turn", "data-role": t.role});
    box.appendChild(el("h4", null, titles[t.role] || t.role));
    t.parts.forEach(function (p) { box.appendChild(part(p)); });
    if (!t.parts.length) box.appendChild(el("div", {"class": "hint"}, "(empty)"));
    return box;
  }

  function goldPath(path) {
    var box = el("div", {"class": "gold-path" + (path.valid ? "" : " invalid"), "data-testid": "gold-path",
                         "data-valid": String(path.valid)});
    path.nodes.forEach(function (node, i) {
      if (i > 0) {
        var step = path.steps[i - 1] || {keywords: "", forward: true};
        var rel = step.forward ? " \u2014" + step.keywords + "\u2192 " : " \u2190" + step.keywords + "\u2014 ";
        box.appendChild(el("span", {"class": "rel"}, rel));
      }
      box.appendChild(el("b", {"data-testid": "gold-node"}, node));
    });
    if (!path.valid && path.reason) box.appendChild(el("div", {"class": "hint"}, "rejected: " + path.reason));
    return box;
  }

  function select(index) {
    var e = EPISODES[index];
    selected = index;
    Array.prototype.forEach.call(document.querySelectorAll("#episode-list li"), function (li) {
      li.className = li.getAttribute("data-index") === String(index) ? "selected" : "";
    });
    var detail = $("episode-detail");
    detail.textContent = "";
    detail.setAttribute("data-qa-id", e.qa_id);
    detail.setAttribute("data-index", String(e.i));
    var head = el("div", {"data-testid": "episode-header"});
    head.appendChild(el("h3", {id: "episode-question", "data-testid": "episode-question"}, e.question));
    var dl = el("dl");
    [["QA id", e.qa_id, "episode-qa-id"], ["domain", e.domain, "episode-domain"],
     ["bucket / hops", (e.bucket || "\u2014") + " / " + (e.hops === null ? "\u2014" : e.hops), "episode-bucket"],
     ["prediction", e.prediction === null ? "(no answer)" : e.prediction, "episode-prediction"],
     ["result", e.correct === true ? "correct" : (e.correct === false ? "wrong" : "not scored"), "episode-result"],
     ["finish", e.finish + " after " + e.rounds + " rounds, " + e.tool_calls + " tool calls", "episode-finish"],
     ["tokens / latency", e.generated_tokens + " generated / " + e.latency_s + " s", "episode-cost"],
     ["format errors", e.format_errors.length ? e.format_errors.join(", ") : "none", "episode-format-errors"],
     ["protocol", e.protocol + " (" + e.mode + ")", "episode-protocol"]
    ].forEach(function (row) {
      dl.appendChild(el("dt", null, row[0]));
      dl.appendChild(el("dd", {"data-testid": row[2]}, row[1]));
    });
    head.appendChild(dl);
    detail.appendChild(head);

    var grid = el("div", {"class": "detail"});
    var turns = el("div", {id: "episode-turns", "data-testid": "episode-turns"});
    if (e.system !== null && e.system !== undefined) {
      var sys = el("details", {"class": "turn prompt", "data-testid": "turn-system"});
      sys.appendChild(el("summary", null, "system prompt"));
      sys.appendChild(el("pre", null, DATA.systems[e.system]));
      turns.appendChild(sys);
    }
    e.turns.forEach(function (t) { turns.appendChild(turn(t, e)); });
    grid.appendChild(turns);

    var aside = el("aside", {id: "episode-gold", "data-testid": "episode-gold"});
    aside.appendChild(el("h4", null, "gold answers"));
    var answers = el("ul", {id: "episode-gold-answers", "data-testid": "episode-gold-answers"});
    e.gold_answers.forEach(function (a) { answers.appendChild(el("li", {"data-testid": "gold-answer"}, a)); });
    aside.appendChild(answers);
    aside.appendChild(el("h4", null, "gold paths"));
    var paths = el("div", {id: "episode-gold-paths", "data-testid": "episode-gold-paths"});
    var valid = e.gold_paths.filter(function (p) { return p.valid; });
    var rejected = e.gold_paths.filter(function (p) { return !p.valid; });
    valid.forEach(function (p) { paths.appendChild(goldPath(p)); });
    if (!valid.length) paths.appendChild(el("div", {"class": "hint"}, "no validated gold path"));
    if (rejected.length) {
      var more = el("details");
      more.appendChild(el("summary", null, rejected.length + " rejected path(s)"));
      rejected.forEach(function (p) { more.appendChild(goldPath(p)); });
      paths.appendChild(more);
    }
    if (e.gold_truncated) paths.appendChild(el("div", {"class": "hint"}, "(more paths existed; list truncated)"));
    aside.appendChild(paths);
    grid.appendChild(aside);
    detail.appendChild(grid);
    if (window.history && window.history.replaceState) {
      try { window.history.replaceState(null, "", "#episode=" + e.i); } catch (err) { /* file:// may refuse */ }
    }
  }

  ["filter-correct", "filter-bucket", "filter-domain"].forEach(function (id) {
    $(id).addEventListener("change", renderList);
  });
  $("filter-search").addEventListener("input", renderList);
  renderList();
  var m = /#episode=(\d+)/.exec(window.location.hash);
  if (m && EPISODES[+m[1]]) select(+m[1]);
  document.body.setAttribute("data-ready", "true");
})();
"""
