#!/usr/bin/env python
"""A longer RL run on CPU than make run's: does the mean reward rise? (the stage-3 CPU result in docs/results.md)

Trains one RL stage with the project's params, some sizes overridden here, into
artifacts/models/<name>/ (the same function as `omne rl`), then prints the reward per step, the
first-half vs second-half mean and the validation EM curve, and writes them to --out. Stage 3 starts
from artifacts/models/sft. Not a speed benchmark: there is no baseline, hence no ratio.

    .venv/bin/python bench/rl_curve.py --stage 3 --steps 16
    .venv/bin/python bench/rl_curve.py --toy --out /tmp/bench   # smoke test: stage 1 of a tiny random llama
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

# first: sets the offline environment and puts the project root on sys.path
from _common import BenchParser, args_record, load_average, machine_info, setup_logging, write_results
from _toy import toy_project

from pipelines.config import load_params
from pipelines.train.rl import train_rl

TOY = {"stage": 1, "steps": 2, "generations": 2, "questions": 1, "max_rounds": 1, "max_new_tokens": 8, "val": 1}


def reward_options(pairs: list[str]) -> dict[str, float]:
    """``KEY=VALUE`` strings as numbers (RewardOptions validates the keys when the rewards are built)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--reward-option {pair!r}: expected KEY=VALUE")
        out[key.strip()] = float(value) if "." in value or "e" in value.lower() else int(value)
    return out


def build_parser() -> BenchParser:
    parser = BenchParser(
        "rl_curve", description=__doc__.split("\n\n")[0],
        toy=TOY, toy_note="the throw-away project's solar QA dataset (built in-process) and a tiny random llama as "
                          "the base model; the model folder goes into that project, not artifacts/",
        seed=None, seed_help="the RL stage's training seed (default: params rl.stage<N>.seed)",
        params_help="params.yaml to read (the model goes into its artifacts/models/)")
    parser.add_argument("--stage", type=int, choices=(1, 3), default=3, help="RL stage to train")
    parser.add_argument("--steps", type=int, default=16, metavar="N", help="optimizer steps")
    parser.add_argument("--generations", type=int, default=4, metavar="N", help="rollouts per question")
    parser.add_argument("--questions", type=int, default=1, metavar="N", help="questions per step")
    parser.add_argument("--max-rounds", "--rounds", dest="max_rounds", type=int, default=3, metavar="N",
                        help="model turns per episode (--rounds: the same, its former name)")
    parser.add_argument("--max-new-tokens", "--new-tokens", dest="max_new_tokens", type=int, default=64, metavar="N",
                        help="generated tokens per round (--new-tokens: the same, its former name)")
    parser.add_argument("--lr", type=float, default=1e-4, help="LoRA learning rate")
    parser.add_argument("--distinct", type=int, default=None, metavar="N",
                        help="distinct training questions, cycled (default: steps x questions, a new one every "
                             "step); a few, seen again and again, show whether the policy can learn at all")
    parser.add_argument("--rewards", nargs="+", default=None,
                        help="reward names (default: the stage's rewards), e.g. omne_stage3 eog")
    parser.add_argument("--reward-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a RewardOptions constant, repeatable, e.g. eog_path_start_step=0")
    parser.add_argument("--val", type=int, default=4, metavar="N", help="validation questions")
    parser.add_argument("--data-mix", choices=("1-2", "3+", "mixed"), default=None,
                        help="training questions by bucket (default: the stage's data_mix)")
    parser.add_argument("--start", default=None,
                        help="model to start from (default: the base model for stage 1, artifacts/models/sft for 3)")
    parser.add_argument("--name", default=None, help="model folder (default rl-stage<N>-curve)")
    parser.add_argument("--force", action="store_true", help="train again even when the model folder is up to date")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose, ("httpx", "filelock", "sentence_transformers", "transformers"))
    started = time.perf_counter()
    if args.params is None:  # --toy: a throw-away project (solar QA dataset, tiny llama), built in-process
        # six solar questions: a larger val share keeps a val split for the validation EM curve
        args.params = toy_project(build="qa", model=True, overrides={"qa": {"val_share": 0.3}})
    params = load_params(args.params, args.profile)
    base = getattr(params.rl, f"stage{args.stage}")
    stage = base.model_copy(update={
        "max_steps": args.steps, "num_generations": args.generations, "questions_per_step": args.questions,
        "max_rounds": args.max_rounds, "max_new_tokens": args.max_new_tokens, "learning_rate": args.lr,
        "val_questions": args.val, "eval_every": max(1, args.steps // 4),
        "max_questions": args.distinct or args.steps * args.questions,
        **({"seed": args.seed} if args.seed is not None else {}),
        **({"data_mix": args.data_mix} if args.data_mix else {}),
        **({"rewards": args.rewards, "reward_weights": None} if args.rewards else {}),
        **({"reward_options": {**base.reward_options, **reward_options(args.reward_option)}}
           if args.reward_option else {})})
    params = params.model_copy(update={"rl": params.rl.model_copy(update={f"stage{args.stage}": stage})})
    load_start = load_average()
    t0 = time.perf_counter()
    result = train_rl(params, args.stage, start=args.start, name=args.name or f"rl-stage{args.stage}-curve",
                      force=args.force, progress=sys.stderr.isatty())
    seconds = time.perf_counter() - t0
    history = json.loads((result.folder / "trainer_state.json").read_text())["log_history"]
    rewards = [h["reward"] for h in history if "reward" in h]
    meta = result.manifest.metadata
    results: dict[str, Any] = {
        "benchmark": "rl_curve",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {**machine_info(), "load_average_at_start": load_start, "load_average_at_end": load_average()},
        "args": args_record(args),
        "params": {"profile": params.profile, "stage": stage.model_dump(mode="json")},
        "stage": args.stage, "folder": str(result.folder), "skipped": result.skipped,
        "train_s": round(seconds, 1), "rewards": rewards,
        "reward_first_third_mean": meta.get("reward_first_third_mean"),
        "reward_last_third_mean": meta.get("reward_last_third_mean"),
        "val_em": meta.get("val_em"),
        "val_em_curve": [{"step": h["step"], "val_em": h["val_em"]} for h in history if "val_em" in h],
    }
    lines = [f"step {step:3d}  reward {value:.3f}" for step, value in enumerate(rewards, start=1)]
    lines.append(f"mean reward first third {results['reward_first_third_mean']:.3f} -> last third "
                 f"{results['reward_last_third_mean']:.3f}; validation EM {results['val_em']}; "
                 f"{seconds / 60:.1f} min ({'reused' if result.skipped else 'trained'}) -> {result.folder}")
    write_results(results, "\n".join(lines), args.out, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
