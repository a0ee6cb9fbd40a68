#!/usr/bin/env python
"""Benchmark: ONNX Runtime's ways to 8-bit weights for the agent's model: forward time and greedy answers.

Why: ``agent.onnx_precision: int8`` runs the model builder's ``MatMulNBits`` (8-bit weights in blocks of 32,
activations quantised per block, int8 products). ONNX Runtime has a second way to 8 bits, its own dynamic
quantisation (``onnxruntime.quantization.quantize_dynamic``: weights int8 per output channel, activations uint8 per
tensor at run time, ``MatMulInteger`` fused to ``DynamicQuantizeMatMul``), whose int8 GEMM may be faster on a CPU.
This measures both, and the fp32 graph, on the forwards an evaluation runs, as RATIOS against the builder's int8
measured in the same process (the variants in turn, best of N), and how often each variant's greedy continuation
equals fp32's (the reference's numbers):

* ``int8`` (baseline): ``onnx_agent_folder`` at ``int8``, the artifact evaluation uses;
* ``fp32``: the same at ``fp32``;
* ``int8-dynamic``: ``quantize_dynamic`` of the fp32 graph, every MatMul;
* ``int8-dynamic-partial``: the same with each block's ``down_proj`` and the LM head kept in fp32 (the inputs with
  the largest activation outliers in llama-style models).

Forwards (``OnnxBackend._forward`` on zeroed caches): batch-1 decoding, 8 and 16 rows decoding together, and a
150-token prompt chunk (a tool response) at batch 1, at the context lengths given. Greedy answers: ``--prompts``
prompts from the SFT conversations (each conversation up to its second assistant turn), ``--tokens`` new tokens.

    .venv/bin/python bench/onnx_quant.py                      # the base model, 3 rounds, 30 prompts
    .venv/bin/python bench/onnx_quant.py --model artifacts/models/sft
    .venv/bin/python bench/onnx_quant.py --toy --out /tmp/bench   # smoke test: a tiny random llama, seconds

Target (printed as PASS/MISS, never asserted): a variant is worth adopting at >= 1.2x the baseline's speed on every
shape with at least as many greedy continuations equal to fp32's as the baseline.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _common import (
    BenchParser,
    args_record,
    load_average,
    load_line,
    machine_info,
    ratio,
    setup_logging,
    verdict,
    write_results,
)
from _toy import scratch, tiny_model, toy_conversations

BASELINE = "int8"
VARIANTS = ("int8", "fp32", "int8-dynamic", "int8-dynamic-partial")
TARGET_SPEEDUP = 1.2
TOY = {"contexts": [16, 32], "prompts": 4, "tokens": 8, "repeat": 1, "prefill": 8}


def build_parser() -> BenchParser:
    parser = BenchParser(
        "onnx_quant", description=__doc__.split("\n\n")[1], toy=TOY,
        toy_note="a tiny random llama and toy conversations", repeat=3,
        repeat_help="rounds of the variants, in turn; the fastest forward of each kept", seeded=False)
    parser.add_argument("--model", default="base", metavar="PATH",
                        help="'base' (params agent.base_model), a transformers folder or a PEFT adapter folder")
    parser.add_argument("--contexts", type=int, nargs="+", default=[100, 500, 1000], metavar="N",
                        help="cached positions before each timed forward")
    parser.add_argument("--prefill", type=int, default=150, metavar="N", help="tokens of the timed prompt chunk")
    parser.add_argument("--conversations", type=Path, default=None, metavar="PATH",
                        help="SFT conversations (ShareGPT JSONL) the prompts come from (default: artifacts/sft/"
                             "conversations/conversations.jsonl)")
    parser.add_argument("--prompts", type=int, default=30, metavar="N", help="prompts of the greedy comparison")
    parser.add_argument("--tokens", type=int, default=48, metavar="N", help="greedy tokens per prompt")
    parser.add_argument("--threads", type=int, default=0, metavar="N",
                        help="ONNX Runtime's intra-op threads (0: one per core, as evaluation)")
    return parser


def quantize_dynamic_folder(fp32: Path, out: Path, *, partial: bool) -> Path:
    """``fp32``'s folder with its graph quantised by ONNX Runtime's dynamic quantisation into ``out``."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    if (out / "model.onnx").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    for path in fp32.iterdir():
        if path.is_file() and not path.name.startswith("model.onnx") and path.name != "manifest.json":
            shutil.copy2(path, out / path.name)
    graph = onnx.load(str(fp32 / "model.onnx"), load_external_data=False).graph
    logging.disable(logging.INFO)  # the quantiser logs every tensor it leaves alone on the root logger
    kept = [n.name for n in graph.node if n.op_type == "MatMul" and ("down_proj" in n.name or "lm_head" in n.name)]
    quantize_dynamic(fp32 / "model.onnx", out / "model.onnx", weight_type=QuantType.QInt8, per_channel=True,
                     op_types_to_quantize=["MatMul"], use_external_data_format=True,
                     nodes_to_exclude=kept if partial else [], extra_options={"MatMulConstBOnly": True})
    logging.disable(logging.NOTSET)
    return out


def variant_folders(model: Path, params: Any, work: Path) -> dict[str, Path]:
    from pipelines.agent.models import onnx_agent_folder

    def converted(precision: str) -> Path:
        return onnx_agent_folder(model, params.model_copy(update={
            "agent": params.agent.model_copy(update={"onnx_precision": precision})}))

    fp32 = converted("fp32")
    return {"int8": converted("int8"), "fp32": fp32,
            "int8-dynamic": quantize_dynamic_folder(fp32, work / "int8-dynamic", partial=False),
            "int8-dynamic-partial": quantize_dynamic_folder(fp32, work / "int8-dynamic-partial", partial=True)}


def shapes(contexts: list[int], prefill: int) -> list[tuple[int, int, int]]:
    """(rows, cached positions, new tokens) of each timed forward."""
    out = []
    for context in contexts:
        out += [(1, context, 1), (8, context, 1), (16, context, 1)]
    return out + [(1, contexts[len(contexts) // 2], prefill)]


def forward_ms(backend: Any, rows: int, context: int, new: int, calls: int = 5) -> float:
    import numpy as np

    kv = np.zeros((backend.layers, 2, rows, backend.kv_heads, context + new + calls, backend.head_size),
                  dtype=backend.dtype)
    ids = np.full((rows, new), 100, dtype=np.int64)
    backend._forward(kv, ids, [context] * rows)  # noqa: SLF001 - warm-up of this shape
    start = time.perf_counter()
    for _ in range(calls):
        backend._forward(kv, ids, [context] * rows)  # noqa: SLF001
    return 1000 * (time.perf_counter() - start) / calls


def comparison_prompts(path: Path, tokenizer: Any, count: int) -> list[list[int]]:
    """Each conversation up to its second assistant turn (a tool response read), rendered for generation."""
    roles = {"human": "user", "gpt": "assistant", "observation": "user"}
    prompts = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        messages = [{"role": "system", "content": row["system"]}]
        for turn in row["conversations"]:
            if roles[turn["from"]] == "assistant" and len(messages) >= 4:
                ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
                prompts.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
                break
            messages.append({"role": roles[turn["from"]], "content": turn["value"]})
        if len(prompts) >= count:
            break
    return prompts


def render(results: dict[str, Any]) -> str:
    """A Markdown table (bench/tables.py puts it into docs/benchmarks.md): forward ms and baseline/variant ratios per
    shape, then the greedy continuations equal to fp32's, then the verdicts."""
    a, forwards = results["args"], results["forwards"]
    names = list(results["variants"])
    agree = results["greedy"]
    lines = [f"ONNX Runtime 8-bit variants of {results['model']} ({results['threads']} threads): forward ms (best of "
             f"{a['repeat']}) and the ratio baseline/variant; greedy continuations equal to fp32's ({agree['prompts']} "
             f"prompts x {a['tokens']} tokens, mean tokens before the first difference)",
             "", "| rows x context + new | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for key, row in forwards.items():
        lines.append(f"| {key} | " + " | ".join(f"{row['ms'][n]:.1f} ({row['speedup'][n] or 0:.2f}x)" for n in names)
                     + " |")
    equal = (f"{agree['equal'][n]}/{agree['prompts']} ({agree['common_prefix'][n]:.1f})" for n in names)
    lines.append("| greedy continuations equal to fp32's | " + " | ".join(equal) + " |")
    lines += ["", f"Target: >= {TARGET_SPEEDUP}x the baseline on every shape and at least its equal continuations: "
                  + ", ".join(f"{n} {verdict(results['adopt'][n])}" for n in names if n != BASELINE) + ". "
                  + load_line(results["machine"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started, load_start = time.perf_counter(), load_average()
    setup_logging(args.verbose, ("pipelines", "transformers", "onnxruntime"))
    from transformers import AutoTokenizer

    from pipelines.agent.models import resolve_model_folder
    from pipelines.config import load_params
    from pipelines.llm.onnx_backend import OnnxBackend, _threads

    if args.toy:
        from _toy import toy_project

        params = load_params(toy_project(model=True))
        model = tiny_model()
        conversations = args.conversations or toy_conversations()
    else:
        params = load_params(args.params, args.profile)
        model = resolve_model_folder(args.model, params)
        conversations = args.conversations or params.artifacts_dir / "sft/conversations/conversations.jsonl"
    if not conversations.is_file():
        raise SystemExit(f"{conversations}: no SFT conversations (run `omne run` or give --conversations)")
    folders = variant_folders(model, params, scratch() / "onnx-quant")
    tokenizer = AutoTokenizer.from_pretrained(folders[BASELINE])
    ends = {t for t in (tokenizer.eos_token_id, tokenizer.pad_token_id) if t is not None}
    backends = {name: OnnxBackend(folder, ends=ends, tokenizer=tokenizer, prefix_cache_mb=0, threads=args.threads)
                for name, folder in folders.items()}

    timings: dict[str, dict[str, list[float]]] = {}
    for _ in range(args.repeat):
        for rows, context, new in shapes(args.contexts, args.prefill):
            key = f"{rows} x {context} + {new}"
            for name, backend in backends.items():
                timings.setdefault(key, {}).setdefault(name, []).append(forward_ms(backend, rows, context, new))
    best = {key: {name: round(min(runs), 2) for name, runs in row.items()} for key, row in timings.items()}

    prompts = comparison_prompts(conversations, tokenizer, args.prompts)
    outputs = {name: backend.generate(prompts, [args.tokens] * len(prompts), temperature=0.0, seed=0, stop=[],
                                      boundaries=None) for name, backend in backends.items()}
    reference = outputs["fp32"]

    def common(a: list[int], b: list[int]) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))

    equal = {n: sum(a == b for a, b in zip(reference, o, strict=True)) for n, o in outputs.items()}
    prefix = {n: round(sum(common(a, b) for a, b in zip(reference, o, strict=True)) / max(1, len(prompts)), 1)
              for n, o in outputs.items()}
    forwards = {key: {"ms": row, "speedup": {n: ratio(row[BASELINE], row[n]) for n in row}}
                for key, row in best.items()}
    adopt = {n: all(row[BASELINE] / row[n] >= TARGET_SPEEDUP for row in best.values()) and equal[n] >= equal[BASELINE]
             for n in backends}
    machine = machine_info() | {"load_average_at_start": load_start, "load_average_at_end": load_average()}
    results = {"benchmark": "onnx_quant", "date": datetime.now(UTC).isoformat(timespec="seconds"),
               "model": str(model), "variants": list(folders), "args": args_record(args),
        "threads": _threads(args.threads), "forwards": forwards, "forward_ms_runs": timings,
        "greedy": {"prompts": len(prompts), "equal": equal, "common_prefix": prefix}, "adopt": adopt,
        "machine": machine}
    write_results(results, render(results), args.out, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
