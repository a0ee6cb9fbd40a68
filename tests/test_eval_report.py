"""The evaluation report: files, manifest, metrics for DVC, and the HTML viewer driven in headless Chromium."""

from __future__ import annotations

import json
import time
import tomllib
from fnmatch import fnmatch
from importlib import resources
from pathlib import Path

import pytest

from pipelines.agent.trajectory import ToolCallRecord, Trajectory
from pipelines.eval import report as report_module
from pipelines.eval.report import (
    PLOT_NAMES,
    flat_metrics,
    read_metrics,
    script_json,
    slug_key,
    split_turn,
    write_report,
)
from pipelines.eval.schema import Behaviour, Efficiency, EvalMetrics, Scores
from pipelines.manifest import read_manifest, sha256_file
from pipelines.qa.models import GoldPath, GoldPathItem, PathEdge
from tests.conftest import PROJECT_ROOT

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
SYSTEM = "1. You answer questions about a knowledge graph by calling tools.\n<tools>\n{...}\n</tools>"
XSS_THINK = 'I must check <script>alert(1)</script> and <img src=x onerror="window.__pwned=1"> first.'
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _record(round_: int, text: str, name: str, node: str, response: str, *, ok: bool = True,
            error: str | None = None) -> ToolCallRecord:
    return ToolCallRecord(round=round_, text=text, name=name, arguments={"node_name": node, "graph_type": "solar"},
                          ok=ok, error_type=error, response=response, latency_s=0.01)


def _omne(qa_id: str, domain: str, bucket: str, hops: int, question: str, gold: list[str],
          turns: list[tuple[str, ToolCallRecord | None]], answer: str | None, correct: bool,
          finish: str = "answer") -> Trajectory:
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"Knowledge graph: {domain}\nQuestion: {question}"}]
    records = []
    for text, record in turns:
        messages.append({"role": "assistant", "content": text})
        if record is not None:
            records.append(record)
            messages.append({"role": "user", "content": f"<tool_response>\n{record.response}\n</tool_response>"})
    return Trajectory(qa_id=qa_id, domain=domain, question=question, gold_answers=gold, bucket=bucket, hops=hops,
                      protocol="omne", model="tiny-test", messages=messages, tool_calls=records, answer=answer,
                      finish=finish, rounds=len(turns), generated_tokens=40 * len(turns) + len(qa_id),
                      prompt_tokens=300 * len(turns), latency_s=0.5 * len(turns),
                      turn_latency_s=[0.5] * len(turns), think_text="", correct=correct)


def trajectories() -> list[Trajectory]:
    moon = _omne(
        "qa-moon", "solar", "1-2", 2, "Which moon orbits the planet that is third from the Sun?", ["Moon"],
        [("<think>Find the Sun first.</think>\n<tool_call>entity_matcher(node_name=\"Sun\", "
          "graph_type=\"solar\")</tool_call>",
          _record(0, 'entity_matcher(node_name="Sun", graph_type="solar")', "entity_matcher", "Sun",
                  "Found 1 entities matching 'Sun':\n1. Entity: Sun Description: the star")),
         ("<think>Earth is third from the Sun.</think>\n<tool_call>node_info(node_name=\"Earth\", "
          "graph_type=\"solar\")</tool_call>",
          _record(1, 'node_info(node_name="Earth", graph_type="solar")', "node_info", "Earth",
                  "Entity: Earth\nNeighbours: Moon (natural satellite of Earth)")),
         ("<think>The Moon orbits Earth.</think>\n<answer>Moon</answer>", None)],
        "Moon", True)
    xss = _omne(
        "qa-xss", "chem", "3+", 3, "Which element is named after the planet that Io orbits?", ["Uranium"],
        [(f"<think>{XSS_THINK}</think>\n<tool_call>node_info(node_name=\"Io\")</tool_call>",
          _record(0, 'node_info(node_name="Io")', "node_info", "Io",
                  "<error>missing field graph_type</error> </script><b>bold?</b>", ok=False, error="missing_fields")),
         ("<think>Jupiter, so Jovium?</think>\n<answer><b>Jovium</b></script></answer>", None)],
        "<b>Jovium</b></script>", False)
    lost = _omne(
        "qa-lost", "solar", "3+", 4, "Which spacecraft visited the moon of the largest planet's neighbour?",
        ["Galileo"],
        [("<think>Look up Jupiter.</think>\n<tool_call>node_info(node_name=\"Jupiter\", graph_type=\"solar\")"
          "</tool_call>",
          _record(0, 'node_info(node_name="Jupiter", graph_type="solar")', "node_info", "Jupiter",
                  "Entity: Jupiter\nNeighbours: Io, Europa")),
         ("<think>Still searching", None)],
        None, False, finish="max_rounds")
    iron = _omne(
        "qa-iron", "chem", "1-2", 1, "What is the chemical symbol of iron?", ["Fe"],
        [("<think>Iron is Fe.</think><answer>Fe</answer>", None)], "Fe", True)
    return [moon, xss, lost, iron]


def gold_paths() -> dict[str, GoldPath]:
    return {
        "qa-moon": GoldPath(qa_id="qa-moon", domain="solar", paths=[
            GoldPathItem(nodes=["Sun", "Earth", "Moon"], valid=True,
                         edges=[PathEdge(src="Earth", keywords="orbits", dst="Sun"),
                                PathEdge(src="Moon", keywords="orbits", dst="Earth")]),
            GoldPathItem(nodes=["Sun", "Mars", "Moon"], valid=False, reason="does not match the question",
                         edges=[PathEdge(src="Mars", keywords="orbits", dst="Sun"),
                                PathEdge(src="Mars", keywords="near", dst="Moon")])]),
        "qa-xss": GoldPath(qa_id="qa-xss", domain="chem", paths=[
            GoldPathItem(nodes=["Io", "Jupiter", "Uranus", "Uranium"], valid=True,
                         edges=[PathEdge(src="Io", keywords="orbits", dst="Jupiter"),
                                PathEdge(src="Jupiter", keywords="neighbour of", dst="Uranus"),
                                PathEdge(src="Uranium", keywords="named after", dst="Uranus")])]),
    }


def metrics() -> EvalMetrics:
    return EvalMetrics(
        run="tiny-test-omne-test", model="tiny-test", protocol="omne", split="test",
        overall=Scores(n=4, em=0.5, norm_em=0.5, f1=0.5, hit1=0.5, answered=0.75),
        by_bucket={"3+": Scores(n=2, em=0.0, norm_em=0.0, f1=0.0, hit1=0.0, answered=0.5),
                   "1-2": Scores(n=2, em=1.0, norm_em=1.0, f1=1.0, hit1=1.0, answered=1.0)},
        by_hops={"1": Scores(n=1, em=1.0, norm_em=1.0, f1=1.0, hit1=1.0, answered=1.0),
                 "2": Scores(n=1, em=1.0, norm_em=1.0, f1=1.0, hit1=1.0, answered=1.0),
                 "3": Scores(n=1, answered=1.0), ">=4": Scores(n=1)},
        by_domain={"solar": Scores(n=2, em=0.5, norm_em=0.5, f1=0.5, hit1=0.5, answered=0.5),
                   "chem": Scores(n=2, em=0.5, norm_em=0.5, f1=0.5, hit1=0.5, answered=1.0)},
        efficiency=Efficiency(generated_tokens_mean=97.5, total_tokens_mean=697.5, latency_mean_s=1.0,
                              latency_sd_s=0.4, latency_per_turn_mean_s=0.5, turns_mean=2.0, samples_per_s=3.2,
                              generated_tokens_per_s=312.0, kg_calls_per_sample=1.0),
        behaviour=Behaviour(format_errors_per_sample=0.25, format_error_types={"unterminated_think": 1},
                            invalid_tool_calls_per_sample=0.25, first_tool={"entity_matcher": 1, "node_info": 2},
                            tool_sequences={"entity_matcher>node_info": 1, "node_info": 2},
                            tool_calls_histogram={"0": 1, "1": 2, "2": 1},
                            finish={"answer": 3, "max_rounds": 1}, retrieval_rate=0.5,
                            outcomes={"correct": 2, "stopped_on_path": 1, "no_answer": 1}),
        repeats={"em": {"mean": 0.5, "sd": 0.05}},
    )


INPUTS = {"artifacts/qa/dataset/test.jsonl": "ab" * 32}
PARAMS = {"model": "tiny-test", "protocol": "omne", "split": "test", "limit": 4}


def write_sample(root: Path) -> Path:
    return write_report(root / "reports" / "tiny-test-omne-test", metrics(), trajectories(),
                        gold_paths=gold_paths(), inputs=INPUTS, params=PARAMS)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One report shared by the read-only tests (writing it costs ~0.7 s of plotting)."""
    return write_sample(tmp_path_factory.mktemp("report"))


def test_report_files_and_manifest(report: Path) -> None:
    assert report.name == "tiny-test-omne-test"
    names = {p.relative_to(report).as_posix() for p in report.rglob("*") if p.is_file()}
    plots = {f"plots/{name}.png" for name in PLOT_NAMES}
    assert names == {"metrics.json", "summary.json", "predictions.jsonl", "report.html", "manifest.json", *plots}
    for plot in plots:
        assert (report / plot).read_bytes().startswith(PNG_MAGIC)
    assert not [p for p in report.parent.iterdir() if p.name.startswith(".")], "temporary folders left behind"

    data = json.loads((report / "metrics.json").read_text(encoding="utf-8"))
    assert next(iter(data)) == "summary"
    summary = data["summary"]
    assert {"em": 0.5, "f1": 0.5, "hit1": 0.5, "em_1_2": 1.0, "em_3_plus": 0.0, "em_hop_ge4": 0.0,
            "em_domain_chem": 0.5, "n_3_plus": 2, "generated_tokens_mean": 97.5, "retrieval_rate": 0.5,
            "em_mean": 0.5, "em_sd": 0.05}.items() <= summary.items()
    assert all(isinstance(v, int | float) for v in summary.values())
    assert read_metrics(report) == metrics()
    assert json.loads((report / "summary.json").read_text(encoding="utf-8")) == summary

    lines = [json.loads(line) for line in (report / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["qa_id"] for r in lines] == ["qa-moon", "qa-xss", "qa-lost", "qa-iron"]
    moon = lines[0]
    assert {k: moon[k] for k in ("domain", "bucket", "hops", "gold_answers", "prediction", "correct")} == {
        "domain": "solar", "bucket": "1-2", "hops": 2, "gold_answers": ["Moon"], "prediction": "Moon", "correct": True}
    assert moon["gold_paths"] == [["Sun", "Earth", "Moon"]]
    assert Trajectory.model_validate(moon["trajectory"]) == trajectories()[0]
    assert lines[2]["prediction"] is None and lines[2]["correct"] is False

    manifest = read_manifest(report)
    assert manifest is not None and manifest.kind == "eval_report"
    assert manifest.inputs == INPUTS and manifest.params == PARAMS
    assert manifest.rows == {"episodes": 4, "questions": 4, "correct": 2, "wrong": 2}
    assert manifest.metadata == summary
    assert set(manifest.files) == names - {"manifest.json"}
    assert all(sha256_file(report / name) == sha for name, sha in manifest.files.items())


def test_the_em_interval_is_in_every_file_and_the_table(report: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Wilson 95% intervals beside EM: metrics.json, summary.json (em_low, em_<group>_low, ...), report.html and
    the `omne evaluation` table; 2 of 4 right is 0.150-0.850, 2 of 2 0.342-1, 0 of 1 0-0.793."""
    data = json.loads((report / "metrics.json").read_text(encoding="utf-8"))
    assert (data["overall"]["em_low"], data["overall"]["em_high"]) == (pytest.approx(0.15004, abs=1e-5),
                                                                       pytest.approx(0.84996, abs=1e-5))
    assert data["by_bucket"]["1-2"]["em_low"] == pytest.approx(0.34238, abs=1e-5)
    summary = json.loads((report / "summary.json").read_text(encoding="utf-8"))
    assert list(summary)[:4] == ["n", "em", "em_low", "em_high"]
    expected = {"em_low": 0.150039, "em_high": 0.849961, "em_1_2_low": 0.34238, "em_1_2_high": 1.0,
                "em_3_plus_low": 0.0, "em_3_plus_high": 0.65762, "em_hop_ge4_high": 0.793451,
                "em_domain_chem_low": 0.094531, "em_domain_solar_high": 0.905469}
    assert {k: summary[k] for k in expected} == expected
    assert all(f"em_{slug}_{side}" in summary for slug in ("1_2", "3_plus", "hop_1", "hop_2", "hop_3", "hop_ge4",
                                                         "domain_chem", "domain_solar") for side in ("low", "high"))

    page = (report / "report.html").read_text(encoding="utf-8")
    assert "<th>EM</th><th>EM 95% CI</th><th>norm. EM</th>" in page
    assert ('data-key="all"><th>overall</th><td>all</td><td>4</td><td>0.500</td>'
            '<td data-testid="em-ci">0.150–0.850</td>') in page
    assert '<td data-testid="em-ci">0.000–0.658</td>' in page  # bucket 3+: 0 of 2
    assert '<div class="ci" data-testid="headline-em-ci">95% CI 0.150–0.850</div>' in page

    from pipelines.tables import print_eval_table

    print_eval_table([read_metrics(report)])
    lines = capsys.readouterr().out.splitlines()
    assert any("EM 95% CI" in line for line in lines)
    rows = {line.split("│")[2].strip(): [c.strip() for c in line.split("│")[3:6]] for line in lines
            if line.count("│") > 5 and "tiny-test" in line}
    assert rows == {"all": ["4", "0.500", "0.15-0.85"], "bucket 1-2": ["2", "1.000", "0.34-1.00"],
                    "bucket 3+": ["2", "0.000", "0.00-0.66"]}


def test_html_is_self_contained_and_escaped(report: Path) -> None:
    page = (report / "report.html").read_text(encoding="utf-8")
    assert page.count("</script>") == 2  # the data block and the viewer's code: none from model text
    assert "<script>alert(1)" not in page and "<img src=x" not in page and "<b>Jovium" not in page
    assert "http://" not in page and "https://" not in page  # no CDN, no remote resource
    assert page.count('src="data:image/png;base64,') == len(PLOT_NAMES)
    start = page.index('<script id="report-data" type="application/json">') + len(
        '<script id="report-data" type="application/json">')
    block = page[start:page.index("</script>", start)]
    assert "<" not in block and ">" not in block and "&" not in block
    data = json.loads(block)
    assert [e["qa_id"] for e in data["episodes"]] == ["qa-moon", "qa-xss", "qa-lost", "qa-iron"]
    assert data["systems"] == [SYSTEM]
    think = [p for t in data["episodes"][1]["turns"] for p in t["parts"] if p["kind"] == "think"]
    assert think[0]["text"] == XSS_THINK
    assert json.loads(script_json({"x": "</script><!--&\u2028"})) == {"x": "</script><!--&\u2028"}


def test_the_page_css_and_js_are_package_data_inlined_into_the_report(report: Path) -> None:
    assets = resources.files("pipelines.eval") / report_module.ASSETS
    names = sorted(f.name for f in assets.iterdir() if f.is_file())
    assert names == ["report.css", "report.html", "report.js"]
    page = (report / "report.html").read_text(encoding="utf-8")
    template = (assets / "report.html").read_text(encoding="utf-8")
    assert page.startswith(template.split("{title}")[0]) and page.endswith(template.rsplit("{js}", 1)[1])
    for name in ("report.css", "report.js"):
        assert (assets / name).read_text(encoding="utf-8") in page
    # an installed (non-editable) package has them only when pyproject.toml declares them
    declared = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = declared["tool"]["setuptools"]["package-data"]["pipelines.eval"]
    assert all(any(fnmatch(f"{report_module.ASSETS}/{name}", pattern) for pattern in patterns) for name in names)


def test_split_turn_shapes() -> None:
    assert split_turn("<think>a</think>\n<tool_call>f(x=1)</tool_call>") == [
        {"kind": "think", "text": "a"}, {"kind": "call", "text": "f(x=1)"}]
    assert split_turn("<think>still going") == [{"kind": "think", "text": "still going"}]
    assert split_turn("<answer></answer>") == [{"kind": "answer", "text": ""}]
    assert split_turn("plain words <answer>X</answer> tail") == [
        {"kind": "text", "text": "plain words"}, {"kind": "answer", "text": "X"}, {"kind": "text", "text": "tail"}]
    # search protocol: the environment's triples are injected inside the same assistant message
    inline = ("<think>Need Io. <search>Io</search>\n<searched_triples>\n(Io, orbits, Jupiter)\n</searched_triples>\n"
              "So Jupiter.</think><answer>Jupiter</answer>")
    assert split_turn(inline) == [
        {"kind": "think", "text": "Need Io."}, {"kind": "call", "text": "Io"},
        {"kind": "response", "text": "(Io, orbits, Jupiter)"}, {"kind": "think", "text": "So Jupiter."},
        {"kind": "answer", "text": "Jupiter"}]
    flat = ("<think>Need Io.</think><search>Io</search>\n<searched_triples>\n(Io, orbits, Jupiter)\n"
            "</searched_triples>\n<think>So Jupiter.</think><answer>Jupiter</answer>")
    assert split_turn(flat) == split_turn(inline)
    assert split_turn("a </answer> b") == [{"kind": "text", "text": "a </answer> b"}]
    assert [slug_key(k) for k in ("1-2", "3+", ">=4", "Solar System")] == ["1_2", "3_plus", "ge4", "solar_system"]


def test_tool_call_records_attach_to_calls() -> None:
    view = report_module.episode_view(0, trajectories()[1], None, {})
    calls = [p for t in view["turns"] for p in t["parts"] if p["kind"] == "call"]
    assert calls[0]["record"]["ok"] is False and calls[0]["record"]["error_type"] == "missing_fields"
    assert [t["role"] for t in view["turns"]] == ["prompt", "assistant", "environment", "assistant"]
    bare = trajectories()[0].model_copy(update={"messages": []})
    view = report_module.episode_view(0, bare, None, {})
    assert [p["kind"] for t in view["turns"] for p in t["parts"]] == ["call", "response", "call", "response"]


def test_rewrite_is_atomic_and_empty_runs_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = write_sample(tmp_path)
    before = (report / "report.html").read_bytes()

    def broken(*args, **kwargs):
        raise RuntimeError("plotting failed")

    monkeypatch.setattr(report_module, "render_html", broken)
    with pytest.raises(RuntimeError):
        write_report(report, metrics(), [], gold_paths=None, inputs={}, params={})
    assert (report / "report.html").read_bytes() == before
    assert not [p for p in report.parent.iterdir() if p.name.startswith(".")]
    monkeypatch.undo()

    empty = EvalMetrics(run="empty", model="m", protocol="omne", split="test", overall=Scores())
    folder = write_report(report, empty, [], gold_paths=None, inputs={}, params={})
    assert read_manifest(folder).rows["episodes"] == 0
    assert (folder / "predictions.jsonl").read_text(encoding="utf-8") == ""
    assert flat_metrics(empty)["n"] == 0 and "em_1_2" not in flat_metrics(empty)
    assert all((folder / "plots" / f"{n}.png").read_bytes().startswith(PNG_MAGIC) for n in PLOT_NAMES)


def launch_chromium(playwright):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make browser` (as root it installs Debian's chromium; "
                    "CI does this before the tests)", pytrace=False)
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


@pytest.mark.slow
def test_report_html_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        pytest.fail("the playwright package is missing: run `make setup` (it is in the dev extra)", pytrace=False)
    started = time.perf_counter()
    dialogs: list[str] = []
    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("request", lambda request: requests.append(request.url))
            page.goto((report / "report.html").as_uri())
            expect(page.locator("body")).to_have_attribute("data-ready", "true")

            # metrics table: overall, 2 buckets, 4 hop counts, 2 domains
            table = page.get_by_test_id("metrics-table")
            expect(table).to_be_visible()
            expect(page.get_by_test_id("score-row")).to_have_count(9)
            overall = page.locator('[data-testid="score-row"][data-group="overall"] td')
            assert overall.all_inner_texts()[:3] == ["all", "4", "0.500"]
            expect(page.locator('[data-testid="score-row"][data-key="3+"]')).to_contain_text("0.000")
            expect(page.get_by_test_id("efficiency-table")).to_contain_text("generated tokens / question")
            expect(page.get_by_test_id("behaviour-table")).to_contain_text("entity_matcher>node_info: 1")
            expect(page.locator('[data-testid="behaviour-table"] tr[data-key="outcomes"]')).to_contain_text(
                "correct: 2, no_answer: 1, stopped_on_path: 1")
            for name in PLOT_NAMES:
                assert page.get_by_test_id(f"plot-{name}").evaluate("img => img.naturalWidth") > 100

            # filters
            items = page.get_by_test_id("episode-item")
            expect(items).to_have_count(4)
            page.get_by_test_id("filter-correct").select_option("wrong")
            expect(page.get_by_test_id("episode-count")).to_have_attribute("data-count", "2")
            expect(items).to_have_count(2)
            assert sorted(items.evaluate_all("els => els.map(e => e.dataset.qaId)")) == ["qa-lost", "qa-xss"]
            page.get_by_test_id("filter-domain").select_option("chem")
            expect(items).to_have_count(1)
            page.get_by_test_id("filter-correct").select_option("all")
            page.get_by_test_id("filter-bucket").select_option("1-2")
            expect(items).to_have_count(1)
            expect(items.first).to_have_attribute("data-qa-id", "qa-iron")
            page.get_by_test_id("filter-bucket").select_option("")
            page.get_by_test_id("filter-domain").select_option("")
            page.get_by_test_id("filter-search").fill("earth is third")  # text inside a think block
            expect(items).to_have_count(1)
            expect(items.first).to_have_attribute("data-qa-id", "qa-moon")

            # one episode: each turn's parts and the gold path beside them
            items.first.get_by_test_id("episode-button").click()
            detail = page.get_by_test_id("episode-detail")
            expect(detail).to_have_attribute("data-qa-id", "qa-moon")
            expect(page.get_by_test_id("episode-question")).to_have_text(
                "Which moon orbits the planet that is third from the Sun?")
            expect(detail.get_by_test_id("turn-think")).to_have_count(3)
            expect(detail.get_by_test_id("turn-call")).to_have_count(2)
            expect(detail.get_by_test_id("turn-response")).to_have_count(2)
            expect(detail.get_by_test_id("turn-answer")).to_have_count(1)
            expect(detail.get_by_test_id("turn-think").nth(1)).to_contain_text("Earth is third from the Sun.")
            expect(detail.get_by_test_id("turn-call").first).to_contain_text(
                'entity_matcher(node_name="Sun", graph_type="solar")')
            expect(detail.get_by_test_id("turn-response").nth(1)).to_contain_text("Moon (natural satellite of Earth)")
            expect(detail.get_by_test_id("turn-answer")).to_contain_text("Moon")
            expect(detail.get_by_test_id("call-status").first).to_have_text("ok")
            expect(page.get_by_test_id("gold-answer")).to_have_text(["Moon"])
            valid = page.locator('[data-testid="gold-path"][data-valid="true"]')
            expect(valid).to_have_count(1)
            assert valid.get_by_test_id("gold-node").all_inner_texts() == ["Sun", "Earth", "Moon"]
            expect(valid).to_contain_text("orbits")
            expect(page.locator('[data-testid="gold-path"][data-valid="false"]')).to_have_count(1)

            # the episode whose model text carries markup: shown literally, never run
            page.get_by_test_id("filter-search").fill("")
            page.locator('[data-testid="episode-item"][data-qa-id="qa-xss"] button').click()
            expect(detail).to_have_attribute("data-qa-id", "qa-xss")
            think = detail.get_by_test_id("turn-think").first
            expect(think).to_contain_text("<script>alert(1)</script>")
            expect(think).to_contain_text('<img src=x onerror="window.__pwned=1">')
            expect(page.get_by_test_id("episode-prediction")).to_have_text("<b>Jovium</b></script>")
            expect(detail.get_by_test_id("turn-response")).to_contain_text("</script><b>bold?</b>")
            expect(detail.get_by_test_id("call-status")).to_have_text("error: missing_fields")
            assert detail.locator("script, img, b:text('bold?')").count() == 0
            assert page.evaluate("window.__pwned") is None
            page.wait_for_timeout(200)  # give an injected handler the chance to fire if it existed
            assert dialogs == [] and errors == []
            assert all(url.startswith(("file://", "data:")) for url in requests), requests

            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.read_bytes().startswith(PNG_MAGIC)
        finally:
            browser.close()
    assert time.perf_counter() - started < 60


def test_missing_chromium_fails_with_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(globals(), "CHROMIUM", str(tmp_path / "no-chromium"))
    with pytest.raises(pytest.fail.Exception, match="make browser"):
        launch_chromium(None)
