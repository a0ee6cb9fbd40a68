"""The GPU check (issue 48): the paper profile at reduced steps on one CUDA GPU in bf16, in one command, within
10 minutes of a lent H200 that has no network. Run it through bench/gpu_check.sh, which first unpacks what
bench/gpu_carry.py prepared (the packages the device lacks, the base model's GGUF, the entity encoder).

The sequence, all through the project's own builds (the stage registry's functions, in one process):

1. project: a throw-away project in ``--work`` with one embedded domain (default chemistry): its KG, entity index,
   seed subgraphs, template QA pairs, gold paths, the QA dataset (``--eval-questions`` test questions, half per
   bucket) and the stage-2 SFT conversations;
2. base model: SmolLM2-135M-Instruct converted from the carried GGUF (``agent.base_model: smollm2``);
3. sft: stage 2 for ``--sft-steps`` optimizer steps (the paper profile's LoRA, 6144 tokens, 1 x 4, think weight 0.001,
   bf16);
4. ppo: RL stage 3 from the SFT model for ``--ppo-steps`` batches of rollouts, each ppo_epochs 2 x ppo_minibatches 4
   optimizer steps of the policy and the critic (the paper profile's PPO, full fine-tuning, beta 0.01);
5. eval: the stage-3 model on the ``--eval-questions`` test questions with tools (7 rounds, batches of 32).

What differs from ``--profile paper`` is ``check_overrides`` (written into the project's params.yaml as well):
fewer steps and rollouts, shorter turns (``--max-new-tokens``), the template QA generator (the paper's LLM generator
needs an endpoint), no stage 1 (its rollouts are one of the paper's SFT sources). One JSON (``--out``; default
``$OUT/gpu_check.json`` when ``$OUT`` is set) holds per phase the wall time, tokens/s, step times and the peak GPU
memory (``torch.cuda.max_memory_allocated``, reset between phases), the versions and the device; the script exits 1
when a phase failed or the JSON lacks what it should hold.

``--dry-run`` runs the same sequence on the CPU in well under a minute: the tests' solar graph, a tiny random llama
and encoder built from a config, tiny steps; it also fails when the path imported a distribution that neither the
device has nor bench/gpu_carry.py carries (tests/test_gpu_check.py).
"""

from __future__ import annotations

import os

for _key, _value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"),
                     ("LANCE_LOG", "error"), ("LANCEDB_LOG", "error")):
    os.environ.setdefault(_key, _value)

import argparse  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "bench"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import yaml  # noqa: E402
from gpu_carry import available_on_device, canonical  # noqa: E402

MIB = 1024 * 1024
PHASES = ("project", "base_model", "sft", "ppo", "eval")
REPORT = "gpu-check-stage3"  # the evaluation's report name
VERSIONS = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "pydantic", "polars", "lancedb",
            "sentence-transformers", "numpy", "pyarrow", "tokenizers")
SOLAR = {"description": "A tiny solar-system graph (tests/data/solar).",
         "source": {"kind": "triples", "path": "kg_assets/solar/triples.csv",
                    "entities": "kg_assets/solar/entities.csv"}}


def check_overrides(*, sft_steps: int, ppo_steps: int, eval_questions: int, max_new_tokens: int, generations: int,
                    questions_per_step: int, ppo_epochs: int = 2, ppo_minibatches: int = 4) -> dict[str, Any]:
    """What the check changes in the paper profile (everything else is the paper profile's). ``ppo_steps`` counts
    batches of rollouts: TRL's max_steps is ``ppo_steps x ppo_epochs x ppo_minibatches`` optimizer steps."""
    half = eval_questions // 2
    return {
        "qa": {"generator": "template", "gold_verify": "rules",  # the paper's LLM generator and verifier need an LLM
               "seeds_per_domain": 600, "one_two_hop_per_domain": 150, "three_plus_per_domain": 150,
               "test_per_bucket": {"1-2": half, "3+": eval_questions - half}},
        "sft_data": {"sources": ["template"]},  # the paper's agent source is stage 1's rollouts: no stage 1 here
        "sft": {"max_steps": sft_steps},
        "agent": {"max_new_tokens": max_new_tokens},
        "eval": {"limit": None},  # the whole test split: eval_questions
        "rl": {"stage3": {"max_steps": ppo_steps * ppo_epochs * ppo_minibatches, "ppo_epochs": ppo_epochs,
                          "ppo_minibatches": ppo_minibatches, "num_generations": generations,
                          "questions_per_step": questions_per_step, "max_new_tokens": max_new_tokens,
                          "max_questions": None, "val_questions": 0}},
    }


def dry_overrides(model: Path, encoder: Path) -> dict[str, Any]:
    """On top of ``check_overrides`` for ``--dry-run``: the tiny models on the CPU, tiny turns and batches (the tiny
    BPE tokenizer spells most words in several tokens, hence the long max_length)."""
    return {
        "index": {"encoder": str(encoder), "device": "cpu"},
        # solar has a handful of 1/2-hop questions and no 3+ one: a test share (all its test questions evaluated)
        "qa": {"test_per_bucket": None, "test_share": 0.34, "val_share": 0.0},
        "agent": {"base_model": str(model), "device": "cpu", "max_rounds": 2, "batch_size": 4},
        "sft": {"max_length": 16384, "grad_accumulation": 1},
        "rl": {"stage3": {"max_rounds": 1, "max_length": 16384}},
    }


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        merged[key] = deep_merge(merged[key], value) if isinstance(value, dict) and isinstance(
            merged.get(key), dict) and key != "test_per_bucket" else value
    return merged


def make_project(folder: Path, domain: str, overrides: dict[str, Any]) -> Path:
    """``folder``/params.yaml: the repository's params with ``profile: paper`` and ``overrides`` merged into the
    paper profile; a registry with ``domain`` (an embedded one, or ``solar``, the tests' graph) and its sources."""
    raw = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    raw["profile"] = "paper"
    raw["paths"] = {"registry": "kg_assets/domains.yaml", "artifacts": "artifacts"}
    raw["profiles"]["paper"] = deep_merge(raw["profiles"]["paper"], overrides)
    if domain == "solar":
        source, entry = ROOT / "tests" / "data" / "solar", SOLAR
    else:
        source = ROOT / "kg_assets" / domain
        entry = yaml.safe_load((ROOT / "kg_assets" / "domains.yaml").read_text(encoding="utf-8"))["domains"][domain]
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, folder / "kg_assets" / domain, dirs_exist_ok=True)
    (folder / "kg_assets" / "domains.yaml").write_text(yaml.safe_dump({"domains": {domain: entry}}, sort_keys=False),
                                                       encoding="utf-8")
    (folder / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return folder / "params.yaml"


# ----- measurement ------------------------------------------------------------------------------------------------

def cuda() -> Any:
    """torch.cuda when a GPU is there, else None."""
    import torch

    return torch.cuda if torch.cuda.is_available() else None


@contextmanager
def step_times(record: list[float]) -> Iterator[None]:
    """Every transformers Trainer trained inside the block appends to ``record`` the wall seconds of each optimizer
    step (from the end of the previous one: data, rollouts and all), after a CUDA sync."""
    from transformers import Trainer, TrainerCallback

    class StepClock(TrainerCallback):
        last = 0.0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.last = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if (gpu := cuda()) is not None:
                gpu.synchronize()
            now = time.perf_counter()
            record.append(round(now - self.last, 4))
            self.last = now

    original = Trainer.train

    def train(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.add_callback(StepClock())
        return original(self, *args, **kwargs)

    Trainer.train = train
    try:
        yield
    finally:
        Trainer.train = original


@contextmanager
def phase(results: dict[str, Any], name: str) -> Iterator[dict[str, Any]]:
    """Times the block as phase ``name`` and records its peak GPU memory (the high-water mark reset first); an
    exception is recorded (and raised again)."""
    entry: dict[str, Any] = {}
    results["phases"][name] = entry
    gpu = cuda()
    if gpu is not None:
        gpu.synchronize()
        gpu.reset_peak_memory_stats()
    start = time.perf_counter()
    print(f"gpu_check: {name} ...", flush=True)
    try:
        yield entry
    except BaseException as exc:
        entry["error"] = f"{type(exc).__name__}: {exc}"
        entry["traceback"] = traceback.format_exc()[-4000:]
        raise
    finally:
        if gpu is not None:
            gpu.synchronize()
        entry["wall_s"] = round(time.perf_counter() - start, 4)
        entry["peak_gpu_allocated_mb"] = round(gpu.max_memory_allocated() / MIB, 1) if gpu is not None else None
        entry["peak_gpu_reserved_mb"] = round(gpu.max_memory_reserved() / MIB, 1) if gpu is not None else None
        print(f"gpu_check: {name}: {entry['wall_s']} s, peak GPU {entry['peak_gpu_allocated_mb']} MB", flush=True)


def median(values: list[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else round((ordered[mid - 1] + ordered[mid]) / 2, 4)


def ppo_figures(history: list[dict[str, Any]], rollouts_per_batch: int, wall_s: float) -> dict[str, Any]:
    """From stage 3's log history: the batches of rollouts (each logs rollout/seconds once), their generated tokens
    (rollout/generated_tokens is a mean per rollout), the tokens trained on (TRL's num_tokens, cumulative) and the
    clipped fraction."""
    steps = [h for h in history if "step_time" in h or "loss" in h]
    batches = [h for h in steps if "rollout/seconds" in h]
    rollout_s = [round(float(h["rollout/seconds"]), 3) for h in batches]
    generated = [float(h.get("rollout/generated_tokens", 0.0)) * rollouts_per_batch for h in batches]
    tokens = max((float(h["num_tokens"]) for h in steps if "num_tokens" in h), default=0.0)
    return {
        "optimizer_steps": len(steps), "rollout_batches": len(batches), "rollouts_per_batch": rollouts_per_batch,
        "rollout_s": rollout_s, "generated_tokens": int(sum(generated)),
        "generated_tokens_per_s": round(sum(generated) / sum(rollout_s), 2) if sum(rollout_s) else None,
        "trained_tokens": int(tokens), "tokens_per_s": round(tokens / wall_s, 2) if wall_s else None,
        "clip_region_max": max((float(h.get("clip_ratio/region_mean", 0.0)) for h in steps), default=None),
        "rewards": [round(float(h["reward"]), 4) for h in batches if "reward" in h],
        "trainer_step_time_s": [round(float(h["step_time"]), 3) for h in steps if "step_time" in h],
    }


# ----- the sequence -----------------------------------------------------------------------------------------------

def run_check(params_path: Path, results: dict[str, Any], domain: str) -> None:
    """The five phases on the project of ``params_path``, filling ``results['phases']``."""
    from pipelines.agent.models import BASE, resolve_model_folder
    from pipelines.config import load_params
    from pipelines.domains import load_registry
    from pipelines.eval.runner import evaluate_cached
    from pipelines.kg.build import build_entity_index
    from pipelines.kg.domain_build import build_domain_kg
    from pipelines.qa.build import build_gold_paths, build_qa_dataset, build_qa_pairs, build_seed_subgraphs
    from pipelines.train.rl import train_rl
    from pipelines.train.sft_data import build_sft_conversations
    from pipelines.train.stage2 import build_sft_model

    params = load_params(params_path)
    results["params"]["resolved"] = {"sft": params.sft.model_dump(mode="json"),
                                     "rl.stage3": params.rl.stage3.model_dump(mode="json"),
                                     "agent": params.agent.model_dump(mode="json")}
    with phase(results, "project") as entry:
        build_domain_kg(load_registry(params.registry_path).get(domain), params)
        build_entity_index(domain, params)
        build_seed_subgraphs(domain, params)
        build_qa_pairs(domain, params, progress=False)
        build_gold_paths(domain, params, progress=False)
        dataset = build_qa_dataset(params, [domain])
        conversations = build_sft_conversations(params, progress=False)
        entry["dataset"] = dataset.manifest.rows
        entry["sft_conversations"] = conversations.manifest.rows.get("conversations")
    with phase(results, "base_model") as entry:
        entry["folder"] = str(resolve_model_folder(BASE, params))
    sft_steps: list[float] = []
    with phase(results, "sft") as entry, step_times(sft_steps):
        meta = build_sft_model(params, force=True, progress=False).manifest.metadata
        entry.update(steps=meta.get("steps"), step_s=sft_steps, step_s_median=median(sft_steps[1:] or sft_steps),
                     tokens=meta.get("tokens"), tokens_per_s=meta.get("tokens_per_second"),
                     assistant_tokens_per_s=meta.get("assistant_tokens_per_second"),
                     train_runtime_s=meta.get("train_runtime_s"), final_loss=meta.get("final_loss"),
                     bf16=meta.get("bf16"), device=meta.get("device"))
    ppo_steps: list[float] = []
    settings = params.rl.stage3
    with phase(results, "ppo") as entry, step_times(ppo_steps):
        folder = train_rl(params, 3, force=True, progress=False).folder
        history = json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))["log_history"]
    entry.update(ppo_figures(history, settings.questions_per_step * settings.num_generations, entry["wall_s"]),
                 step_s=ppo_steps, step_s_median=median(ppo_steps), algorithm=settings.algorithm,
                 method=settings.method)
    with phase(results, "eval") as entry:
        report = evaluate_cached(params, str(folder), name=REPORT, force=True, progress=False)
        metrics = report.metrics
        efficiency = metrics.efficiency.model_dump(mode="json")
        entry.update(questions=metrics.overall.n, em=metrics.overall.em,
                     generated_tokens_per_s=efficiency.get("generated_tokens_per_s"),
                     samples_per_s=efficiency.get("samples_per_s"), efficiency=efficiency)


def environment() -> dict[str, Any]:
    """The device and the versions the check ran with."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    versions = {}
    for name in VERSIONS:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    gpu = cuda()
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "cuda": gpu is not None, "torch_cuda": torch.version.cuda,
            "gpu": gpu.get_device_name(0) if gpu is not None else None,
            "gpu_memory_mb": round(gpu.get_device_properties(0).total_memory / MIB) if gpu is not None else None,
            "bf16_supported": bool(gpu.is_bf16_supported()) if gpu is not None else None,
            "versions": versions}


def imported_distributions() -> dict[str, list[str]]:
    """The installed distributions whose modules this process imported (stdlib and the project's own left out),
    with the top-level modules of each."""
    from importlib.metadata import packages_distributions

    owners = packages_distributions()
    found: dict[str, set[str]] = {}
    for name, module in list(sys.modules.items()):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names:
            continue
        path = getattr(module, "__file__", None)
        if path is None:  # a bare namespace (google, backports): its modules with a file say whose they are
            continue
        # by the module's own file, not its top-level name: several distributions share google.*, and setuptools
        # vendors a backports.tarfile that is not the configparser distribution's backports.*
        dists = [d for d in owners.get(top, []) if _owns(d, path)]
        for dist in dists:
            if canonical(dist) != "omne":
                found.setdefault(canonical(dist), set()).add(top)
    return {dist: sorted(tops) for dist, tops in sorted(found.items())}


@functools.cache
def _files_of(dist: str) -> frozenset[str]:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        files = distribution(dist).files or []
    except PackageNotFoundError:
        return frozenset()
    return frozenset(str(Path(f.locate()).resolve()) for f in files if f.suffix in (".py", ".so"))


def _owns(dist: str, path: str) -> bool:
    """Whether ``dist`` installed the file ``path`` (True when the distribution lists no files: counted, not lost)."""
    files = _files_of(dist)
    return not files or str(Path(path).resolve()) in files


def problems(results: dict[str, Any], expected: dict[str, int]) -> list[str]:
    """What the JSON lacks or gets wrong: every phase ran without error; SFT and PPO made the steps asked for with a
    time each and tokens/s above 0; the evaluation covered the questions asked for; peak GPU memory on a GPU; in a
    dry run, no imported distribution missing on the device."""
    found = []
    phases = results.get("phases", {})
    for name in PHASES:
        entry = phases.get(name)
        if entry is None:
            found.append(f"{name}: did not run")
        elif "error" in entry:
            found.append(f"{name}: {entry['error']}")
        elif results["device"]["cuda"] and not entry.get("peak_gpu_allocated_mb"):
            found.append(f"{name}: no peak GPU memory")
    sft, ppo, evaluation = phases.get("sft", {}), phases.get("ppo", {}), phases.get("eval", {})
    if "error" not in sft and "sft" in phases:
        if sft.get("steps") != expected["sft_steps"] or len(sft.get("step_s", [])) != expected["sft_steps"]:
            found.append(f"sft: {sft.get('steps')} steps, {len(sft.get('step_s', []))} timed; "
                         f"{expected['sft_steps']} asked for")
        if not sft.get("tokens_per_s"):
            found.append("sft: no tokens/s")
    if "error" not in ppo and "ppo" in phases:
        if ppo.get("rollout_batches") != expected["ppo_steps"]:
            found.append(f"ppo: {ppo.get('rollout_batches')} batches of rollouts; {expected['ppo_steps']} asked for")
        if ppo.get("optimizer_steps") != expected["ppo_optimizer_steps"] or len(ppo.get("step_s", [])) != \
                expected["ppo_optimizer_steps"]:
            found.append(f"ppo: {ppo.get('optimizer_steps')} optimizer steps, {len(ppo.get('step_s', []))} timed; "
                         f"{expected['ppo_optimizer_steps']} expected")
        if not ppo.get("generated_tokens_per_s") or not ppo.get("tokens_per_s"):
            found.append("ppo: no tokens/s")
    if "error" not in evaluation and "eval" in phases:
        if evaluation.get("questions") != expected["eval_questions"]:
            found.append(f"eval: {evaluation.get('questions')} questions; {expected['eval_questions']} asked for")
        if not evaluation.get("generated_tokens_per_s"):
            found.append("eval: no tokens/s")
    missing = results.get("imports", {}).get("missing_on_device", [])
    if missing and results.get("dry_run", True):  # on the device itself a missing one fails its import instead
        found.append(f"imports: not on the device and not carried by bench/gpu_carry.py: {', '.join(missing)}")
    return found


def out_path(given: Path | None, dry_run: bool) -> Path:
    if given is not None:
        return given / "gpu_check.json" if given.suffix != ".json" else given
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / "gpu_check.json"
    return (Path(tempfile.gettempdir()) if dry_run else ROOT / "bench" / "results") / "gpu_check.json"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bench/gpu_check.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true",
                        help="the same sequence on the CPU: tiny random models, the tests' solar graph, tiny steps")
    parser.add_argument("--out", type=Path, help="the JSON (a folder: FOLDER/gpu_check.json)")
    parser.add_argument("--work", type=Path, help="the throw-away project's folder (default: a temporary one; kept on "
                                                  "a GPU run, removed after a dry run)")
    parser.add_argument("--domain", help="embedded domain of the project (default chemistry; dry run: solar)")
    parser.add_argument("--sft-steps", type=int, help="SFT optimizer steps (default 20; dry run 2)")
    parser.add_argument("--ppo-steps", type=int, help="stage-3 PPO batches of rollouts, each ppo_epochs x "
                                                      "ppo_minibatches optimizer steps (default 2)")
    parser.add_argument("--eval-questions", type=int, help="test questions evaluated (default 64; dry run 2)")
    parser.add_argument("--max-new-tokens", type=int,
                        help="tokens per turn, evaluation and rollouts (default 256, the paper 3000; dry run 8)")
    parser.add_argument("--generations", type=int, help="PPO rollouts per question (default 8; dry run 2)")
    parser.add_argument("--questions-per-step", type=int, help="PPO questions per batch (default 4; dry run 1)")
    return parser


GPU_DEFAULTS = {"domain": "chemistry", "sft_steps": 20, "ppo_steps": 2, "eval_questions": 64, "max_new_tokens": 256,
                "generations": 8, "questions_per_step": 4}
DRY_DEFAULTS = {"domain": "solar", "sft_steps": 2, "ppo_steps": 2, "eval_questions": 2, "max_new_tokens": 8,
                "generations": 2, "questions_per_step": 1}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for key, value in (DRY_DEFAULTS if args.dry_run else GPU_DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    started = time.perf_counter()
    out = out_path(args.out, args.dry_run)
    work = args.work or Path(tempfile.mkdtemp(prefix="omne-gpu-check-"))
    ppo_minibatches = 2 if args.dry_run else 4
    overrides = check_overrides(sft_steps=args.sft_steps, ppo_steps=args.ppo_steps,
                                eval_questions=args.eval_questions, max_new_tokens=args.max_new_tokens,
                                generations=args.generations, questions_per_step=args.questions_per_step,
                                ppo_minibatches=ppo_minibatches)
    expected = {"sft_steps": args.sft_steps, "ppo_steps": args.ppo_steps,
                "ppo_optimizer_steps": overrides["rl"]["stage3"]["max_steps"], "eval_questions": args.eval_questions}
    results: dict[str, Any] = {"check": "omne gpu check (issue 48)", "dry_run": args.dry_run, "work": str(work),
                               "expected": expected, "params": {"profile": "paper"}, "phases": {}}
    try:
        if args.dry_run:
            from _toy import tiny_encoder, tiny_model

            overrides = deep_merge(overrides, dry_overrides(tiny_model(work / "tiny-llama"),
                                                            tiny_encoder(work / "tiny-encoder")))
        results["params"]["overrides"] = overrides
        results["device"] = environment()
        if not args.dry_run and not results["device"]["cuda"]:
            raise SystemExit("gpu_check: no CUDA GPU here (use --dry-run on a CPU)")
        run_check(make_project(work / "project", args.domain, overrides), results, args.domain)
    except Exception:  # noqa: BLE001 - recorded in its phase (or here), the JSON is written regardless
        results["error"] = traceback.format_exc()[-4000:]
        traceback.print_exc()
    finally:
        distributions = imported_distributions()
        results["imports"] = {"distributions": distributions,
                              "missing_on_device": sorted(set(distributions) - available_on_device())}
        results["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        results["total_s"] = round(time.perf_counter() - started, 2)
        results.setdefault("device", None)
        results["problems"] = problems(results, expected) if results["device"] else ["no device facts"]
        if "error" in results and not any("error" in p for p in results["phases"].values()):
            results["problems"].append("error: " + results["error"].strip().splitlines()[-1])
        results["ok"] = not results["problems"]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
        if args.dry_run and args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"gpu_check: {'ok' if results['ok'] else 'FAILED'} in {results['total_s']} s -> {out}")
    for line in results["problems"]:
        print(f"  problem: {line}")
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
