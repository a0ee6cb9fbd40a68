"""bench/ cannot rot: every benchmark script's --toy run (tiny data, tiny random models, a throw-away project)
exits 0 and writes its results file with the expected structure, ratios positive and finite; the shared
command line (bench/_common.py's BenchParser) behaves as bench/README.md says.

The toy runs start together when the first test needs them, a few at a time (each is mostly Python start-up,
imports and waiting), so the whole module takes about as long as its slowest few scripts.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PROJECT_ROOT, cli_env

BENCH = PROJECT_ROOT / "bench"
RESULTS = BENCH / "results"
TIMEOUT_S = 420
WORKERS = 3
# the slowest first, so that the pool ends together
SCRIPTS = ["orchestration", "reliability", "tools", "kg_build", "qa", "rollout", "rl_curve", "transfer", "sft",
           "sft_precision", "sft_packing", "sft_lm_head", "sft_lora_layers", "graph_names", "rl_step", "eval_slots", "node_info_order",
           "onnx_quant", "unseen_graph"]
COMMON_KEYS = {"benchmark", "date", "machine", "args", "table", "total_s", "provenance"}
RATIO_KEY = re.compile(r"(^|_)(ratio|ratios|speedup|speedups)(_|$)")


def _mtime(path: Path) -> float | None:
    return path.stat().st_mtime if path.exists() else None


class ToyRun:
    def __init__(self, name: str, out: Path, future: Future[subprocess.CompletedProcess[str]]) -> None:
        self.name, self.out, self.future = name, out, future

    def result(self) -> dict[str, Any]:
        """The run's JSON, once it exited 0 (its output in the failure message otherwise)."""
        done = self.future.result()
        tail = (done.stdout[-3000:] + "\n" + done.stderr[-5000:]).strip()
        assert done.returncode == 0, f"bench/{self.name}.py --toy exited {done.returncode}:\n{tail}"
        path = self.out / f"{self.name}.json"
        assert path.is_file(), f"bench/{self.name}.py --toy wrote no {path.name}:\n{tail}"
        assert f"results: {path}" in done.stdout
        return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def toy_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ToyRun]]:
    """The selected scripts' `--toy --out <tmp>` runs, started together (WORKERS at a time) in the background."""
    selected = {item.callspec.params["name"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_toy_run_writes_its_results"}
    names = [name for name in SCRIPTS if name in selected]
    root = tmp_path_factory.mktemp("bench")
    before = {name: _mtime(RESULTS / f"{name}.json") for name in names}
    env = cli_env(PYTHONUNBUFFERED="1")

    def run(name: str) -> subprocess.CompletedProcess[str]:
        out = root / name
        try:
            return subprocess.run([sys.executable, str(BENCH / f"{name}.py"), "--toy", "--out", str(out)],
                                  cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            return subprocess.CompletedProcess(exc.cmd, -9, f"{exc.stdout or ''}", f"timed out after {TIMEOUT_S} s")

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        yield {name: ToyRun(name, root / name, pool.submit(run, name)) for name in names}
    after = {name: _mtime(RESULTS / f"{name}.json") for name in names}
    assert after == before, "a --toy run wrote into bench/results/"


def ratios(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every (path, value) under a key named *ratio*, *ratios*, *speedup* or *speedups* (numbers, lists of
    numbers, dicts of them), outside args/machine/params."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("args", "machine", "params", "table"):
                continue
            here = f"{path}.{key}"
            if RATIO_KEY.search(key):
                if isinstance(item, dict):
                    yield from ((f"{here}.{k}", v) for k, v in item.items())
                elif isinstance(item, list):
                    yield from ((f"{here}[{i}]", v) for i, v in enumerate(item))
                else:
                    yield here, item
            else:
                yield from ratios(item, here)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from ratios(item, f"{path}[{index}]")


def positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def get(results: dict[str, Any], dotted: str) -> Any:
    value: Any = results
    for key in dotted.split("."):
        assert isinstance(value, dict) and key in value, f"no {dotted} (stopped at {key})"
        value = value[key]
    return value


def check_common(name: str, results: dict[str, Any], required: list[str]) -> None:
    assert COMMON_KEYS <= results.keys(), COMMON_KEYS - results.keys()
    assert results["benchmark"] == name and results["args"]["toy"] is True
    assert results["provenance"]["toy"] is True  # bench/tables.py refuses it
    assert results["total_s"] > 0 and results["table"] and all(isinstance(line, str) for line in results["table"])
    found = list(ratios(results))
    for path, value in found:  # CPU time is counted in 10 ms ticks: a toy stage's can be 0, its ratio None
        assert positive(value) or (value is None and "cpu" in path), f"{name}: {path} = {value!r}"
    for dotted in required:
        assert positive(get(results, dotted)), f"{name}: {dotted} = {get(results, dotted)!r}"


def markdown_rows(results: dict[str, Any]) -> list[list[str]]:
    """The cells of the Markdown table in results["table"] (what bench/tables.py puts into docs/benchmarks.md): the
    header, then the rows; the separator line checked and left out."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in results["table"]
            if line.startswith("|")]
    assert len(rows) >= 3 and all(cell == "---" for cell in rows[1]), results["table"]
    assert {len(row) for row in rows} == {len(rows[0])}, results["table"]
    return [rows[0], *rows[2:]]


def span(values: list[float], digits: int) -> str:
    """A table cell's one value or lowest-highest, as the scripts write it."""
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}-{high}"


def bench_common() -> Any:
    """bench/_common.py, imported as the scripts import it (no torch: it imports polars and the registry only)."""
    sys.path.insert(0, str(BENCH))
    try:
        import _common
    finally:
        sys.path.remove(str(BENCH))
    return _common


def figure(value: float | None) -> str:
    """A table cell's ratio or time to three significant digits: bench/_common.py's, which kg_build and tools use."""
    return bench_common().figure(value)


def test_figure_keeps_three_significant_digits() -> None:
    assert [figure(v) for v in (0.01374, 0.106, 0.83, 2.449, 13.44, 670.2, 12239.4, 0, None)] == [
        "0.0137", "0.106", "0.830", "2.45", "13.4", "670", "12,239", "0", "-"]


def check_kg_build(results: dict[str, Any]) -> list[str]:
    assert set(results["graphs"]) == {"solar", "synthetic"}
    synthetic = results["graphs"]["synthetic"]
    assert synthetic["generator"]["entities"] == 400 and synthetic["index"]["sampled"] is True
    assert synthetic["index"]["search"]["ann"]["recall_at_1_vs_exact"] >= 0
    assert synthetic["index"]["search"]["batched"]["same_hits"] is True
    # the Markdown table: a row per graph, every ratio and latency the results'; then the batched-query line
    header, *rows = markdown_rows(results)
    assert header == ["graph", "build", "statistics", "index (encode + write)", "warm cache / uncached",
                      "exact search p50"]
    expected, batched = [], []
    for name, g in results["graphs"].items():
        build, stats, index = g["build"], g["stats"], g["index"]
        search, ann = index["search"], index["search"].get("ann")
        expected.append([
            f"{name} ({g['entities']:,} entities / {g['relations']:,} relations)", figure(build["ratio"]),
            f"{figure(stats['ratio'])} ({figure(stats['ours']['wall_s'])} s against "
            f"{figure(stats['baseline']['wall_s'])} s)",
            figure(index["ratio"]) + (f" ({index['embedded']:,} names)" if index["sampled"] else ""),
            figure(index["cache"]["warm_ratio_vs_uncached"]),
            f"{search['exact']['p50_ms']:.1f} ms" + (f", IVF-PQ {ann['p50_ms']:.1f} ms, recall@1 "
                                                     f"{ann['recall_at_1_vs_exact']:.3f}" if ann else "")])
        batched.append(f"{name} {search['queries']} queries, {figure(search['batched']['ratio'])}x (the same hits)")
    assert rows == expected and expected[1][3] == f"{figure(synthetic['index']['ratio'])} (150 names)"
    assert ", IVF-PQ " in expected[1][5] and ", IVF-PQ " not in expected[0][5]
    assert results["table"][-1] == f"Every query in one LanceDB query against one query each: {'; '.join(batched)}."
    return [f"graphs.{g}.{stage}.ratio" for g in ("solar", "synthetic") for stage in ("build", "stats", "index")] + [
        "graphs.synthetic.index.search.exact_ratio_p50", "graphs.synthetic.index.search.ann.ratio_p50_vs_exact",
        "graphs.solar.index.cache.warm_ratio_vs_uncached", "graphs.synthetic.index.search.batched.ratio"]


def check_tools(results: dict[str, Any]) -> list[str]:
    assert set(results["graphs"]) == {"solar", "synthetic"}
    for graph in results["graphs"].values():
        node_info = graph["node_info"]
        assert node_info["failed_calls"] == 0 and node_info["http"]["failed_calls"] == 0
        assert node_info["http"]["content_mismatches_vs_in_process"] == 0
        assert node_info["relation_count_agreement"]["networkx"] == 1.0
        assert positive(node_info["http"]["batch"]["calls_per_s"])
        assert graph["entity_matcher"]["failed_calls"] == 0
    assert {t["target"] for t in results["targets"]} and all(t["pass"] in (True, False, None)
                                                             for t in results["targets"])
    # the Markdown table: a row per graph, every latency, ratio and rate the results', with the verdicts of the
    # node_info and HTTP batch targets; then the exact top-5 line (its target n/a: no graph of 100,000 entities)
    verdicts = {(t["target"].split()[0], t["graph"]): "PASS" if t["pass"] else "MISS" for t in results["targets"]}
    header, *rows = markdown_rows(results)
    assert header == ["graph", "node_info p50", "x linear scan", "x networkx", "entity_matcher cold / warm p50",
                      "HTTP batch16 calls/s"]
    expected, searches = [], []
    for name, g in results["graphs"].items():
        ni, em = g["node_info"], g["entity_matcher"]
        scan, search = ni["linear_scan"], em["search"]
        expected.append([
            f"{name} ({g['entities']:,} entities / {g['relations']:,} relations)",
            f"{figure(ni['in_process']['p50_ms'] * 1000)} µs",
            f"**{figure(ni['speedup_vs_linear_scan']['mean'])}** ({verdicts['node_info', name]}: "
            f"{scan['triples']:,} triples scanned in {figure(scan['p50_ms'])} ms p50)",
            figure(ni["speedup_vs_networkx"]["mean"]),
            f"{figure(em['cold']['p50_ms'])} ms / {figure(em['warm']['p50_ms'])} ms",
            f"{figure(ni['http']['batch']['calls_per_s'])} ({verdicts['HTTP', name]})"])
        searches.append(f"{name} ({search['entities']:,} vectors) {figure(search['nearest']['p50_ms'])} ms p50, "
                        f"{figure(search['speedup_vs_lance_flat']['p50'])}x faster")
    assert rows == expected
    assert results["table"][-1] == (
        f"Exact top-5 (`DomainGraph.nearest`) against LanceDB's flat search: {'; '.join(searches)} (target: exact "
        f"top-5 p50 <= 5 ms over 100,000 entities: n/a, no graph that large).")
    return [f"graphs.{g}.{key}" for g in ("solar", "synthetic") for key in (
        "node_info.speedup_vs_linear_scan.mean", "node_info.speedup_vs_networkx.mean",
        "entity_matcher.search.speedup_vs_lance_flat.p50")]


def check_qa(results: dict[str, Any]) -> list[str]:
    assert set(results["seeds"]) == {"solar", "synthetic"}
    assert all(s["same_results"] is True for s in results["seeds"].values())
    llm = results["llm"]
    assert llm["domain"] == "solar" and llm["seeds"] >= 1 and llm["same_pairs"] is True
    assert llm["cache"]["rerun_server_requests"] == 0
    # the Markdown table: the same speed-ups, requests and verdicts as the results
    header, seeds_row, llm_row, cache_row = markdown_rows(results)
    assert header == ["measurement", "result"]
    passed = {kind: all(t["pass"] for t in results["targets"] if t["kind"] == kind)
              for kind in ("seeds", "concurrency", "cache")}
    missed = [t["where"] for t in results["targets"] if t["kind"] == "seeds" and not t["pass"]]
    solar, synthetic = results["seeds"]["solar"], results["seeds"]["synthetic"]
    assert seeds_row[0].endswith("x faster than networkx: solar / synthetic (400 entities)")
    assert seeds_row[1] == (f"{solar['speedup']:.1f} / {synthetic['speedup']:.1f} "
                            f"({'MISS on ' + ', '.join(missed) if missed else 'PASS'}; the same seeds and balls)")
    assert llm_row[0] == (f"LLM generation on solar ({llm['seeds']} seeds x 2 buckets, fake server in a thread, 10 ms "
                          f"a reply), concurrency 4 against sequential")
    assert llm_row[1] == (f"**{llm['speedup']:.1f}x** ({llm['concurrent']['requests_per_s']:.0f} against "
                          f"{llm['sequential']['requests_per_s']:.0f} requests/s, client CPU "
                          f"{llm['concurrent_cpu_ms_per_request']:.1f} ms a request; "
                          f"{'PASS' if passed['concurrency'] else 'MISS'})")
    assert passed["cache"] and cache_row == [
        "cached rerun", f"0 requests, {llm['cache']['rerun_ratio_vs_cold']:.2f}x the cold run's time (PASS)"]
    return ["seeds.solar.ratio", "seeds.synthetic.ratio", "seeds.synthetic.speedup", "llm.speedup"]


def check_rollout(results: dict[str, Any]) -> list[str]:
    setup = results["setup"]
    assert setup["questions"] == 2 and setup["batch_size"] == 2 and setup["force_tool_call"] is True
    assert results["sequential"]["questions"] == results["batched"]["questions"] == 2
    assert results["sequential"]["turns"] >= 2 and results["batched"]["generated_tokens"] > 0
    assert isinstance(results["comparison"]["same_trajectories"], bool)
    fast = results["fast"]  # the onnx backend: same engines, batch-1 decoding of both backends
    assert fast["backend"] == "onnx" and fast["batched"]["questions"] == 2 and fast["decode"]["fast"]["tokens"] > 1
    assert fast["comparison"]["compared"] == 2 and isinstance(fast["comparison"]["same_trajectories"], bool)
    # the Markdown table: each engine's questions/s and x the transformers sequential loop, with the verdicts;
    # then batch-1 decoding and the trajectories that differ, every figure the results'
    verdicts = ["PASS" if t["pass"] else "n/a" if t["pass"] is None else "MISS" for t in results["targets"]]
    header, *rows = markdown_rows(results)
    assert header == ["engine", "questions/s", "x the transformers sequential loop"]
    name, s, b = f"onnx {fast['precision']}", results["sequential"], results["batched"]
    assert rows == [
        ["transformers, sequential (batch 1)", f"{s['questions_per_s']:.3f}", "1.00"],
        ["transformers, batched (batch 2)", f"{b['questions_per_s']:.3f}",
         f"**{results['speedup']:.2f}** ({verdicts[0]})"],
        [f"{name}, sequential", f"{fast['sequential']['questions_per_s']:.3f}",
         f"{fast['sequential_vs_transformers_sequential']:.2f}"],
        [f"{name}, batched", f"{fast['batched']['questions_per_s']:.3f}",
         f"**{fast['batched_vs_transformers_sequential']:.2f}** ({verdicts[2]})"]]
    d, c, fc = fast["decode"], results["comparison"], fast["comparison"]
    decode_x = "-" if fast["decode_ratio"] is None else f"**{fast['decode_ratio']:.2f}x**"
    assert results["table"][-1] == (
        f"Batch-1 decoding: {name} {d['fast']['tokens_per_s'] or 0:.1f} tokens/s over {d['fast']['tokens']} tokens, "
        f"transformers {d['transformers']['tokens_per_s'] or 0:.1f} over {d['transformers']['tokens']}"
        f"{'' if d['same_reply'] else ' (not the same reply)'}: {decode_x} transformers ({verdicts[1]}). "
        f"Trajectories differing from the transformers sequential loop's: transformers batched {c['differing']} of 2; "
        f"{name} batched {fc['differing']} of 2 (same answer in {fc['same_answers']}).")
    return ["ratio", "speedup", "sequential.questions_per_s", "batched.questions_per_s", "fast.decode_ratio",
            "fast.batched_vs_transformers_sequential"]


def check_rl_curve(results: dict[str, Any]) -> list[str]:
    assert results["stage"] == 1 and results["skipped"] is False
    assert len(results["rewards"]) == 2 and all(math.isfinite(r) for r in results["rewards"])
    assert results["val_em_curve"] and all(0 <= p["val_em"] <= 1 for p in results["val_em_curve"])
    return ["train_s"]


def check_rl_step(results: dict[str, Any]) -> list[str]:
    setup, baseline, ours = results["setup"], results["baseline"], results["ours"]
    assert setup["rollouts"] == 4 and setup["generations"] == 4 and setup["temperature"] == 1.0
    assert baseline["questions"] == ours["questions"] == 4
    # the baseline: one rollout per generate call; ours: a round's live rollouts together (all 4 in the first)
    assert baseline["backend_max_rows"] == 1 and baseline["backend_generate_calls"] == baseline["turns"]
    assert ours["backend_max_rows"] == 4 and ours["backend_generate_calls"] <= setup["max_rounds"]
    assert ours["distinct_rollouts"] > 1  # four samples, not one sample four times
    assert all(isinstance(v, bool) for v in results["same_tokens_every_round"].values())
    return ["speedup", "throughput_ratio", "baseline.generated_tokens_per_s", "ours.generated_tokens_per_s"]


def check_eval_slots(results: dict[str, Any]) -> list[str]:
    setup, comparison = results["setup"], results["comparison"]
    assert setup["split"] == "train" and setup["batch_size"] == 2 and setup["temperature"] == 0.0
    assert setup["questions"] == len(setup["qa_ids"]) >= 2 and comparison["compared"] == setup["questions"]
    for variant in ("baseline", "ours"):
        m = results[variant]
        assert m["questions"] == setup["questions"] and m["runs"] and m["generated_tokens"] > 0
        # one complete_many call per engine round, a request per live episode: rows = model turns
        assert m["model_calls"] > 0 and m["model_rows"] == m["turns"] == sum(m["rows_by_call"])
        assert 1 <= m["max_rows"] <= setup["batch_size"] and m["rows_per_call"] <= setup["batch_size"]
        assert sum(m["rows_histogram"].values()) == m["model_calls"] == len(m["rows_by_call"])
        assert 0 < m["model_share"] <= 1 and m["correct"] <= m["questions"]
    expected = results["baseline"]["wall_s"] / results["ours"]["wall_s"]
    assert math.isclose(results["speedup"], expected, rel_tol=1e-3)
    assert len(results["speedups"]) == setup["repeat"] == len(results["ours"]["runs"])
    assert isinstance(comparison["same_trajectories"], bool)
    assert comparison["same_trajectories"] == (comparison["differing"] == 0 == len(comparison["differing_qa_ids"]))
    assert set(comparison["em"]) == set(results["determinism"]) == {"baseline", "ours"}
    assert len(results["targets"]) == 2 and all(t["pass"] in (True, False, None) for t in results["targets"])
    return ["speedup", "median_speedup", "baseline.questions_per_s", "ours.questions_per_s",
            "ours.generated_tokens_per_s"]


def check_sft(results: dict[str, Any]) -> list[str]:
    assert set(results["models"]) == {"tiny"}
    tiny = results["models"]["tiny"]
    assert tiny["train_examples"] == 4 and len(tiny["runs"]["weighted"]) == len(tiny["runs"]["plain"]) == 1
    assert all(math.isfinite(loss) for loss in tiny["runs"]["weighted"][0]["losses"])
    return ["models.tiny.median_ratio", "models.tiny.summary.weighted.s_per_step",
            "models.tiny.summary.plain.s_per_step"]


def sft_rows(result: dict[str, Any], baseline: str, ours: str, target: float,
             columns: tuple[str, ...] = ("s_per_step", "assistant_tokens_per_s")) -> tuple[list[str], list[str]]:
    """A two-way SFT benchmark's table cells as its script writes them: the baseline's and ours' per-round ``columns``
    (s/step to 2 decimals, tokens/s to 1; one value or lowest-highest), then 1.00 and ours' median speed-up over the
    baseline with the per-round ones and the verdict against ``target``."""
    digits = {"s_per_step": 2, "tokens_per_s": 1, "assistant_tokens_per_s": 1}

    def cells(kind: str) -> list[str]:
        return [span([run[key] for run in result["runs"][kind]], digits[key]) for key in columns]

    median = result["median_speedup"]
    verdict = "PASS" if median >= target else "MISS"
    return ([*cells(baseline), "1.00"], [*cells(ours), f"**{median:.2f}** (per round "
                                         f"{', '.join(f'{x:.2f}' for x in result['speedups'])}; {verdict})"])


def check_sft_precision(results: dict[str, Any]) -> list[str]:
    assert Path(results["model"]).name == "tiny-llama"
    result = results["result"]
    assert set(result["summary"]) == {"bf16", "fp32"}
    # the Markdown table: fp32 then bf16, each one's s/step and tokens/s over the rounds and bf16's median speed-up
    # with its verdict (target 1.3x); then the device, the sizes and the loss gap; every figure the results'
    header, *rows = markdown_rows(results)
    assert header == ["run", "s/step", "tokens/s", "x fp32 (median of the rounds)"]
    fp32, bf16 = sft_rows(result, "fp32", "bf16", 1.3, ("s_per_step", "tokens_per_s"))
    assert rows == [["fp32", *fp32], ["bf16 autocast", *bf16]]
    assert results["table"][-1].startswith(
        f"tiny-llama, LoRA r=8, ThinkWeightedSFTTrainer; device cpu (native bf16: "
        f"{'yes' if result['native_bf16'] else 'no'}), 1 threads; 4 conversations, max length 512, batch 1 x grad "
        f"accumulation 2, 1 warm-up + 2 timed steps per run, runs alternated bf16/fp32 x 1.")
    assert results["table"][-1].endswith(f"losses of the same step: {result['max_relative_loss_gap']:.2%}. "
                                         f"Target: bf16 >= 1.3x fp32.")
    return ["result.median_speedup", "result.summary.bf16.s_per_step", "result.summary.fp32.s_per_step"]


def check_sft_packing(results: dict[str, Any]) -> list[str]:
    result = results["result"]
    assert set(result["summary"]) == {"today", "padding_free"} and results["data"]["conversations"] == 4
    # the same conversations in every optimizer step of both runs: the same assistant tokens
    assert result["same_assistant_tokens_every_step"] and result["runs"]["today"][0]["assistant_tokens"] > 0
    assert result["peak_memory"] == "rss" and all(run["peak_memory_mb"] > 0 for runs in result["runs"].values()
                                                   for run in runs)
    # the Markdown table: today then padding-free, s/step, assistant tokens/s and peak memory over the rounds
    # (padding-free's against today's), padding-free's median speed-up with its verdict (target 1.1x)
    header, *rows = markdown_rows(results)
    assert header == ["run: conversations a step (batch x grad accumulation)", "s/step", "assistant tokens/s",
                      "peak memory MB", "x today's assistant tokens/s (median of the rounds)"]
    today, free = sft_rows(result, "today", "padding_free", 1.1)
    memory = [span([run["peak_memory_mb"] for run in result["runs"][kind]], 0) for kind in ("today", "padding_free")]
    peaks = [result["summary"][kind]["peak_memory_mb"] for kind in ("today", "padding_free")]
    assert result["peak_memory_ratio"] == float(f"{peaks[1] / peaks[0]:.4g}")
    assert rows == [["today: 1 x 2", *today[:2], memory[0], today[2]],
                    ["padding_free: 2 x 1, in one row", *free[:2], f"{memory[1]} ({result['peak_memory_ratio']:.2f}x)",
                     free[2]]]
    assert results["table"][-1] == (
        "tiny-llama, LoRA r=8, ThinkWeightedSFTTrainer; device cpu, 1 threads; 4 conversations of at most 2048 "
        "tokens, 1 warm-up + 2 timed steps per run, runs alternated today/padding_free x 1; peak memory: the peak RSS "
        "over the run's start, the model's copy included. The same assistant tokens in every step: yes. Target: "
        "padding-free >= 1.1x today's assistant tokens/s.")
    return ["result.median_speedup", "result.summary.today.assistant_tokens_per_s",
            "result.summary.padding_free.assistant_tokens_per_s", "result.peak_memory_ratio"]


def check_sft_lm_head(results: dict[str, Any]) -> list[str]:
    result = results["result"]
    assert set(result["summary"]) == {"labelled", "every"} and 0 < result["assistant_token_share"] < 1
    assert result["max_relative_loss_gap"] < 1e-3  # the same losses, step by step
    # the Markdown table: every position then the trained ones only, s/step and assistant tokens/s over the rounds,
    # the trained positions' median speed-up with its verdict (target 1.2x); then the share and the loss gap
    header, *rows = markdown_rows(results)
    assert header == ["run: the fused LM head on", "s/step", "assistant tokens/s", "x every (median of the rounds)"]
    every, labelled = sft_rows(result, "every", "labelled", 1.2)
    assert rows == [["every: TRL's own choice (every position off CUDA)", *every],
                    ["labelled: the trained positions only (train_sft's)", *labelled]]
    assert results["table"][-1].endswith(
        f"Trained (assistant) share of the tokens: {result['assistant_token_share']:.1%}; largest relative gap between "
        f"the two runs' losses of the same step: {result['max_relative_loss_gap']:.4%}. Target: the trained positions "
        f"only >= 1.2x every position.")
    return ["result.median_speedup", "result.summary.labelled.s_per_step", "result.summary.every.s_per_step"]


def check_sft_lora_layers(results: dict[str, Any]) -> list[str]:
    result = results["result"]
    assert set(result["summary"]) == {"last", "every"} and result["blocks"] == {"adapted": 1, "of": 2}
    # both trained: the same conversations, different adapters, so losses that differ after the first step
    assert all(len(v) == results["args"]["warmup_steps"] + results["args"]["steps"] for v in result["losses"].values())
    # the Markdown table: every block then the last one, s/step and assistant tokens/s over the rounds, the last
    # block's median speed-up with its verdict (target 1.3x); then the losses of the first round, not compared
    header, *rows = markdown_rows(results)
    assert header == ["run: LoRA adapters in", "s/step", "assistant tokens/s", "x every (median of the rounds)"]
    every, last = sft_rows(result, "every", "last", 1.3)
    assert rows == [["every: all 2 blocks", *every], ["last: the last 1 of 2 blocks, the graph cut below", *last]]
    losses = "; ".join(f"{kind} {', '.join(f'{x:.3f}' for x in result['losses'][kind])}" for kind in ("every", "last"))
    assert results["table"][-1].endswith(f"Losses of the first round's steps (different adapters: not compared): "
                                         f"{losses}. Target: last >= 1.3x every block.")
    return ["result.median_speedup", "result.summary.last.s_per_step", "result.summary.every.s_per_step"]


def check_onnx_quant(results: dict[str, Any]) -> list[str]:
    assert results["variants"] == ["int8", "fp32", "int8-dynamic", "int8-dynamic-partial"]
    greedy = results["greedy"]
    assert greedy["prompts"] == 4 and greedy["equal"]["fp32"] == 4  # fp32 against itself
    assert all(0 <= greedy["equal"][n] <= 4 for n in results["variants"])
    assert all(row["speedup"]["int8"] == 1.0 for row in results["forwards"].values())  # the baseline against itself
    return [f"forwards.{key}.ms.{n}" for key in results["forwards"] for n in results["variants"]]


def check_orchestration(results: dict[str, Any]) -> list[str]:
    stages = ["knowledge_graph", "entity_index", "seed_subgraphs", "qa_pairs", "gold_paths", "qa_dataset"]
    assert list(results["stages"]) == stages
    for stage in results["stages"].values():
        assert {len(stage["runs"][v]) for v in ("library", "body", "dagster")} == {1}
    # the Markdown table: a row per stage over 10 s with its share and verdict (none: the longest stage's row,
    # without a verdict), the other partitioned stages in one row of ranges, qa_dataset in its own; every cell
    # the results' figures
    header, *rows = markdown_rows(results)
    assert header == ["stage (solar, best of 1)", "library s", "dagster s", "overhead (dagster - library)",
                      "of which Dagster's machinery (dagster - asset body)"]
    cells = {row[0]: row[1:] for row in rows}
    figures = results["stages"]
    alone = [name for name, s in figures.items() if s["target_applies"]] or [
        max(figures, key=lambda name: figures[name]["library_s"])]
    for name in alone:
        s = figures[name]
        label, target = (("over 10 s", "PASS" if s["pass"] else "MISS") if s["target_applies"]
                         else ("the longest, under 10 s", "no target"))
        library, dagster, overhead, machinery = cells.pop(f"{name} ({label})")
        assert (library, dagster) == (f"{s['library_s']:.1f}", f"{s['dagster_s']:.1f}")
        assert overhead.startswith(f"**{100 * s['overhead_share']:.1f}%** ({target}; CPU ")
        assert machinery.startswith(f"{s['machinery_s']:.2f} s")
    rest = [name for name in figures if name not in alone]
    short = [name for name in rest if figures[name]["partitioned"]]
    groups = ([short] if short else []) + [[name] for name in rest if not figures[name]["partitioned"]]
    assert set(cells) == {", ".join(group) for group in groups} and ["qa_dataset"] in groups
    for group in groups:
        measured = [figures[name] for name in group]
        library, dagster, overhead, machinery = cells[", ".join(group)]
        assert library == span([m["library_s"] for m in measured], 2)
        assert dagster == span([m["dagster_s"] for m in measured], 2)
        assert overhead == span([m["overhead_s"] for m in measured], 2) + " s"
        assert machinery.startswith(span([m["machinery_s"] for m in measured], 3) + " s")
    return [f"stages.{s}.ratio_dagster_vs_library" for s in stages] + ["totals.dagster_s"]


def check_reliability(results: dict[str, Any]) -> list[str]:
    assert {"imports", "llm", "server"} <= results.keys() and "dvc" not in results and "project" not in results
    assert results["imports"]["concurrent_imports"] == 4 and results["imports"]["lost_registrations"] == 0
    assert results["llm"]["malformed_replies"] >= 100 and results["llm"]["exceptions"] == 0
    assert results["llm"]["cache_cases"] >= 150 and results["llm"]["cache_exceptions"] == 0
    assert results["llm"]["bad_replies_cached"] == 0
    bad = results["imports"]["bad_files"]
    assert bad["bad_files"] == 26 and bad["tracebacks"] == 0 and bad["multi_line_errors"] == 0
    assert results["server"]["server_5xx"] == 0 and results["server"]["kg"]["entities"] == 200
    return ["server.load_requests_per_s", "server.health_p99_s"]


def check_graph_names(results: dict[str, Any]) -> list[str]:
    assert results["domain"] == "solar" and results["scores"]["n"] >= 1  # the tests' graph, imported renamed
    assert 0 <= results["scores"]["em_wilson95"][0] <= results["scores"]["em"] <= results["scores"]["em_wilson95"][1]
    assert results["calls"] == sum(results["by_kind"].values())
    return ["scores.n"]


def check_unseen_graph(results: dict[str, Any]) -> list[str]:
    assert results["domain"] == "solar_lightrag" and results["in_domain"] is None  # a rendered toy graph, no reference
    unseen, keywords = results["unseen"], results["keywords"]
    assert unseen["n"] == keywords["n"] == results["paired_phrases_keywords"]["overall"]["n"] >= 2
    assert 0 <= unseen["em_wilson95"][0] <= unseen["em"] <= unseen["em_wilson95"][1] <= 1
    assert set(unseen["behaviour"]) >= {"answer_from_tools_share", "missing_entity_call_share",
                                        "repeated_call_finish_share"}
    noted = results["answer_note"]  # --answer-note: the same questions with agent.unshown_answer_note on
    assert noted["n"] == unseen["n"] == results["paired_answer_note"]["overall"]["n"]
    assert 0 <= noted["behaviour"]["unshown_answer_fixed"] <= noted["behaviour"]["unshown_answer_notes"] <= noted["n"]
    trained = results["trained_with"]  # --train-with: an SFT on the toy graph's train split, the same questions
    assert trained["n"] == unseen["n"] == results["paired_trained_with"]["overall"]["n"]
    return ["unseen.n", "keywords.n", "answer_note.n", "trained_with.n"]


def check_transfer(results: dict[str, Any]) -> list[str]:
    assert results["held_out"] == "solar" and results["trained_on"] == ["sun_notes"]
    paired = results["paired"]["overall"]
    assert paired["n"] == results["held_out_model"]["n"] == results["in_domain_model"]["n"] >= 1
    assert paired["both"] + paired["only_a"] + paired["only_b"] + paired["neither"] == paired["n"]
    return ["training_s", "paired.overall.p_value"]


def check_node_info_order(results: dict[str, Any]) -> list[str]:
    setup, positions = results["setup"], results["positions"]
    assert setup["samples"] == ["test", "train"] and set(positions) == {"graph", "question", "question_no_memory"}
    for order in positions:
        for split in setup["samples"]:
            c = positions[order][split]
            assert c["hops"] == setup["hops"][split] >= 1  # a rank (or absent) for every hop of every gold path
            assert 0 <= c["first"] <= c["within_3"] <= c["within_5"] <= c["within_8"] <= c["within_15"]
            assert c["within_15"] + c["absent"] <= c["hops"] and c["absent"] == 0  # every relation is listed
            assert sum(b["pairs"] for b in c["by_bucket"].values()) == c["pairs"]
            assert all(0 <= b["all_first"] <= b["pairs"] for b in c["by_bucket"].values())
    for split in setup["samples"]:  # the same walks in both orders
        assert len({positions[variant][split]["pairs"] for variant in positions}) == 1
    cost = results["cost"]
    assert cost["calls"] == sum(setup["hops"].values()) and cost["cap"] == setup["params_cap"]
    for mode in ("warm", "cold"):
        assert cost[mode]["graph"]["failed_calls"] == cost[mode]["question"]["failed_calls"] == 0
        assert cost[mode]["graph"]["query_vectors_cached"] == 0 < cost[mode]["question"]["query_vectors_cached"]
    return ["cost.warm.ratio", "cost.cold.ratio", "cost.warm.question.mean_us_per_call",
            "cost.cold.graph.mean_us_per_call"]


CHECKS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "graph_names": check_graph_names, "transfer": check_transfer,
    "kg_build": check_kg_build, "tools": check_tools, "qa": check_qa, "rollout": check_rollout,
    "rl_curve": check_rl_curve, "rl_step": check_rl_step, "eval_slots": check_eval_slots, "sft": check_sft,
    "sft_precision": check_sft_precision, "sft_packing": check_sft_packing, "sft_lm_head": check_sft_lm_head, "sft_lora_layers": check_sft_lora_layers,
    "orchestration": check_orchestration, "reliability": check_reliability, "node_info_order": check_node_info_order,
    "onnx_quant": check_onnx_quant, "unseen_graph": check_unseen_graph}


# the GPU check and its carry: tests/test_gpu_check.py; the docs' generated tables: tests/test_bench_tables.py
NOT_BENCHMARKS = {"gpu_check", "gpu_carry", "tables"}


def test_every_bench_script_has_a_toy_check() -> None:
    scripts = {p.stem for p in BENCH.glob("*.py") if not p.name.startswith("_")} - NOT_BENCHMARKS
    assert scripts == set(SCRIPTS) == set(CHECKS)


@pytest.mark.slow
@pytest.mark.parametrize("name", SCRIPTS)
def test_toy_run_writes_its_results(name: str, toy_runs: dict[str, ToyRun]) -> None:
    results = toy_runs[name].result()
    required = CHECKS[name](results)
    check_common(name, results, required)


# --------------------------------------------------------------------------------------------
# The shared command line, in-process (no torch: bench/_common.py imports polars and the registry only)
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def common() -> Any:
    return bench_common()


def _parser(common: Any) -> Any:
    parser = common.BenchParser("demo", description="A demo.", toy={"size": 3}, repeat=5,
                                repeat_aliases=("--rounds",))
    parser.add_argument("--size", type=int, default=1000, help="items")
    return parser


def test_bench_parser_defaults_and_results_file(common: Any) -> None:
    args = _parser(common).parse_args([])
    assert (args.size, args.repeat, args.seed, args.toy, args.verbose) == (1000, 5, 0, False, False)
    assert args.out == common.RESULTS_DIR / "demo.json" and args.params == PROJECT_ROOT / "params.yaml"
    assert _parser(common).parse_args(["--out", "/x/y"]).out == Path("/x/y/demo.json")
    assert _parser(common).parse_args(["--out", "/x/r.json"]).out == Path("/x/r.json")
    assert _parser(common).parse_args(["--rounds", "2"]).repeat == 2


def test_toy_sets_its_defaults_but_explicit_options_win(common: Any) -> None:
    args = _parser(common).parse_args(["--toy"])
    assert (args.size, args.params) == (3, None)  # None: the script builds a throw-away project
    assert args.out.parent == common.TOY_RESULTS_DIR and not args.out.is_relative_to(common.RESULTS_DIR)
    args = _parser(common).parse_args(["--toy", "--size", "7", "--params", "p.yaml"])
    assert (args.size, args.params) == (7, Path("p.yaml"))


def test_help_explains_every_option(common: Any) -> None:
    parser = _parser(common)
    text = parser.format_help()
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its options there
        assert action.help, action.option_strings
    assert "sets --size 3" in text and "--out PATH" in text and "--rounds" in text


def test_node_info_order_ranks_both_line_layouts_alike() -> None:
    """bench/node_info_order.py's rank of the next entity reads node_info's from_entity lines (one end named by the
    response's Entity: line) as it reads the paper's triples."""
    sys.path.insert(0, str(BENCH))
    try:
        from node_info_order import rank_of
    finally:
        sys.path.remove(str(BENCH))
    from_entity = ("Entity: Estonia\nType: country\nRelations (3, closest to the question first):\n"
                   "1. -[in subregion]-> Northern Europe [subregion]\n2. <-[capital of]- Tallinn [city]\n"
                   "3. -[borders]-> Latvia [country]")
    triples = ("Entity: Estonia\nType: country\nRelations (3):\n1. Estonia -[in subregion]-> Northern Europe\n"
               "2. Tallinn -[capital of]-> Estonia\n3. Estonia -[borders]-> Latvia")
    for text in (from_entity, triples):
        assert [rank_of(text, name) for name in ("Northern Europe", "Tallinn", "Latvia", "Russia")] == [0, 1, 2, None]
