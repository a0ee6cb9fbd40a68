"""`omne paper tables` (pipelines/paper.py): every table and figure of the Omne-R1 paper at toy size (the tiny solar
domain, a tiny random llama, one-step trainings), written in the paper's layout from real reports and models."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from pipelines.config import Params, load_params
from pipelines.eval.stats import wilson_interval
from pipelines.paper import FIGURES, TABLES, build_paper_tables, paper_dir
from tests.conftest import make_project
from tests.model_support import build_tiny_llama, use_tiny_models

# the paper's columns and row labels (Tables 1-8), ours in the same order
COLUMNS = {
    1: ["Graph Type", "1/2 hop", "3+ hop", "Total"],
    2: ["Model/Agent", "1/2 Hop (%)", "3+ Hop (%)", "Evaluation method"],
    3: ["Method", "Train Data", "1/2 Hop (%)", "3+ Hop (%)"],
    4: ["Method", "Deepthink", "1/2 Hop (%)", "3+ Hop (%)"],
    5: ["Weighted Loss Mask", "1/2 Hop (%)", "3+ Hop (%)"],
    6: ["Model", "1/2 Hop (%)", "3+ Hop (%)"],
    7: ["Model/Agent", "1/2 Hop (%)", "3+ Hop (%)", "Evaluation method"],
    8: ["Model/Agent", "1/2 Hop (%)", "3+ Hop (%)", "Evaluation method"],
}
ROWS = {
    1: [["solar"], ["Total"]],
    2: [["Direct answer (w think)"], ["Direct answer (w/o think)"], ["LightRAG (w think)"], ["LightRAG (w/o think)"],
        ["Base model (w think) reasoning with KG tools"]],
    3: [["Rule-based RL", "1/2 Hop"], ["Rule-based RL", "3+ Hop"], ["Rule-based RL", "mix"]],
    4: [["No SFT", "Yes"], ["LoRA", "No"], ["LoRA", "Yes"], ["Full", "No"], ["Full", "Yes"]],
    5: [["1"]],
    6: [["SFT (LoRA)"], ["+ RL (LoRA)"], ["SFT (Full)"], ["+ RL (Full)"]],
    7: [["Direct answer"], ["LightRAG"]],
    8: [["Base model (before training)"], ["Rule-based RL (Stage 1, mix data)"],
        ["SFT (Stage 2, LoRA, loss weight mask=1)"], ["SFT (Stage 2, Full, no think)"], ["Post-SFT RL (Stage 3)"]],
}


@pytest.fixture(scope="module")
def paper(tmp_path_factory: pytest.TempPathFactory) -> Params:
    """A solar project whose seeds reach 3+ questions, every table and figure built once (in this process)."""
    root = make_project(tmp_path_factory.mktemp("paper") / "project")
    path = root / "params.yaml"
    use_tiny_models(path, build_tiny_llama(root.parent / "tiny-llama"),
                    seeds={"min_nodes": 5, "depth": 4}, eval={"limit": 3}, sft_data={"max_per_bucket": 1},
                    qa={"one_two_hop_per_domain": 12, "three_plus_per_domain": 8,
                        "test_per_bucket": {"1-2": 3, "3+": 2}, "val_share": 0.1},
                    agent={"backend": "transformers", "max_new_tokens": 16, "max_rounds": 2})
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    raw["sft"].update(max_steps=1, grad_accumulation=1, sweep_max_steps=None, sweep_weights=[1.0])
    for stage in ("stage1", "stage3"):
        raw["rl"][stage].update(backend="transformers", val_questions=0)
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    params = load_params(path)
    result = build_paper_tables(params, inline=True, progress=False)
    assert [t.number for t in result.tables] == list(TABLES) and [f["number"] for f in result.figures] == list(FIGURES)
    return params


def _table(params: Params, number: int) -> tuple[dict, str]:
    folder = paper_dir(params)
    return (json.loads((folder / f"table{number}.json").read_text()), (folder / f"table{number}.md").read_text())


def test_every_table_is_written_in_the_papers_layout(paper: Params) -> None:
    for number in TABLES:
        table, markdown = _table(paper, number)
        assert table["number"] == number and table["profile"] == "quick"
        assert table["columns"] == COLUMNS[number]
        assert [row["label"] for row in table["rows"]] == ROWS[number]
        lines = markdown.splitlines()
        assert lines[0].startswith(f"# Table {number}: ")
        header = lines.index("| " + " | ".join(COLUMNS[number]) + " |")
        body = lines[header + 2: header + 2 + len(ROWS[number])]
        assert body == ["| " + " | ".join([*row["label"], *row["cells"]]) + " |" for row in table["rows"]]
        assert all(len(row["label"]) + len(row["cells"]) == len(COLUMNS[number]) for row in table["rows"])
    counts = _table(paper, 1)[0]["rows"]
    assert counts[0]["counts"] == counts[1]["counts"] == {"1-2": 12, "3+": 7}


def test_every_accuracy_comes_from_a_real_report_with_its_wilson_interval(paper: Params) -> None:
    reports = set()
    for number in (2, 3, 4, 5, 6, 7, 8):
        table, _ = _table(paper, number)
        for row in table["rows"]:
            metrics = json.loads((paper.root / row["report"] / "metrics.json").read_text())
            for bucket, cell in zip(("1-2", "3+"), row["cells"], strict=False):
                score, wanted = row["scores"][bucket], metrics["by_bucket"][bucket]
                assert (score["n"], score["correct"], score["method"]) == (wanted["n"], round(wanted["em"] * wanted["n"]),
                                                                         "EM")
                assert (score["low"], score["high"]) == pytest.approx(wilson_interval(score["correct"], score["n"]))
                assert cell == f"{100 * score['accuracy']:.1f} [{100 * score['low']:.1f}, {100 * score['high']:.1f}]"
            assert row["paper"].keys() == {"1-2", "3+"}
            reports.add(row["report"])
    # the run's own reports are shared with `omne run`; each variant has a report of its own
    assert {"artifacts/reports/base-tools", "artifacts/reports/sft-tools", "artifacts/reports/rl-stage3-tools"} <= reports
    assert len(reports) == 15
    lightrag = [row["report"] for n in (2, 7) for row in _table(paper, n)[0]["rows"] if row["key"].startswith("lightrag")]
    assert lightrag == ["artifacts/reports/paper-base-lightrag-think", "artifacts/reports/paper-base-lightrag-no-think",
                        "artifacts/reports/paper-base-lightrag-think"]  # the lightrag-hku baseline (Table 7: think)
    assert _table(paper, 3)[0]["rows"][2]["paper"] == {"1-2": 57.5, "3+": 32.1}


def _manifest(params: Params, folder: str) -> dict:
    return json.loads((params.root / folder / "manifest.json").read_text())


def test_each_row_is_the_variant_it_names(paper: Params) -> None:
    stage1 = [row["model"] for row in _table(paper, 3)[0]["rows"]]
    assert stage1 == ["artifacts/models/paper-rl-stage1-1-2hop", "artifacts/models/paper-rl-stage1-3plus",
                      "artifacts/models/rl-stage1"]  # the profile's own mix is the run's stage-1 model
    assert [_manifest(paper, m)["params"]["rl"]["data_mix"] for m in stage1] == ["1-2", "3+", "mixed"]
    sft = [(row["model"], row["report"]) for row in _table(paper, 4)[0]["rows"][1:]]
    settings = [(_manifest(paper, m)["params"]["method"], _manifest(paper, m)["params"]["mode"],
                 _manifest(paper, r)["params"]["agent"]["mode"]) for m, r in sft]
    assert settings == [("lora", "no_think", "no_think"), ("lora", "think", "think"), ("full", "no_think", "no_think"),
                        ("full", "think", "think")]
    assert sft[1] == ("artifacts/models/sft", "artifacts/reports/sft-tools")  # quick: plain SFT is the run's model
    table6 = {row["key"]: row for row in _table(paper, 6)[0]["rows"]}
    assert table6["sft-full"]["model"] == sft[2][0] and table6["rl-lora"]["model"] == "artifacts/models/rl-stage3"
    full_rl = _manifest(paper, table6["rl-full"]["model"])
    assert full_rl["inputs"]["start_model"].startswith("paper-sft-full-no-think")
    assert full_rl["params"]["agent"]["mode"] == "no_think"
    assert _table(paper, 8)[0]["rows"][4]["report"] == table6["rl-full"]["report"]


def test_figures_plot_the_models_logged_history(paper: Params) -> None:
    folder = paper_dir(paper)
    for number in FIGURES:
        assert (folder / f"figure{number}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    figure2 = json.loads((folder / "figure2.json").read_text())
    assert list(figure2["curves"]) == ["LoRA, no think", "LoRA, think", "Full, no think", "Full, think"]
    for curve in figure2["curves"].values():
        history = json.loads((paper.root / curve["model"] / "trainer_state.json").read_text())["log_history"]
        assert curve["loss"] == [[h["step"], h["loss"]] for h in history if "loss" in h] and curve["loss"]
    figure3 = json.loads((folder / "figure3.json").read_text())
    assert [c["model"] for c in figure3["curves"].values()] == ["artifacts/models/sft"]
    figure4 = json.loads((folder / "figure4.json").read_text())
    assert figure4["y"] == "reward" and figure4["curves"]["RL stage 3"]["model"] == "artifacts/models/rl-stage3"


def test_the_command_rebuilds_nothing_current(paper: Params, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.cli import cli

    monkeypatch.setenv("OMNE_STAGES_INLINE", "1")
    models = {p: p.stat().st_mtime_ns for p in (paper.artifacts_dir / "models").glob("*/manifest.json")}
    result = CliRunner().invoke(cli, ["--params", str(paper.root / "params.yaml"), "paper", "tables", "--table", "3",
                                      "--figure", "4"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "| Rule-based RL | mix |" in result.output and "figure4.png" in result.output
    assert "table1" not in result.output
    assert {p: p.stat().st_mtime_ns for p in models} == models
    refused = CliRunner().invoke(cli, ["--params", str(paper.root / "params.yaml"), "paper", "tables", "--table", "9"])
    assert refused.exit_code == 2 and "9 is not in the range 1<=x<=8" in refused.output

