"""A longer RL run on CPU than make run's: does the mean reward rise? (the stage-3 CPU result in docs/results.md)

Trains one RL stage with the project's params, some sizes overridden here, into
artifacts/models/<name>/ (the same function as `omne rl`), then prints the reward per step, the
first-half vs second-half mean and the validation EM curve. Stage 3 starts from artifacts/models/sft.

    .venv/bin/python bench/rl_curve.py --stage 3 --steps 16
"""

from __future__ import annotations

import argparse
import json
import time

from pipelines.config import load_params
from pipelines.train.rl import train_rl


def reward_options(pairs: list[str]) -> dict[str, float]:
    """``KEY=VALUE`` strings as numbers (RewardOptions validates the keys when the rewards are built)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--reward-option {pair!r}: expected KEY=VALUE")
        out[key.strip()] = float(value) if "." in value or "e" in value.lower() else int(value)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", type=int, choices=(1, 3), default=3)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--generations", type=int, default=4, help="rollouts per question")
    parser.add_argument("--questions", type=int, default=1, help="questions per step")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=64, help="per round")
    parser.add_argument("--lr", type=float, default=1e-4, help="LoRA learning rate")
    parser.add_argument("--distinct", type=int, default=None,
                        help="distinct training questions, cycled (default: steps x questions, a new one every "
                             "step); a few, seen again and again, show whether the policy can learn at all")
    parser.add_argument("--rewards", nargs="+", default=None,
                        help="reward names (default: the stage's rewards), e.g. omne_stage3 eog")
    parser.add_argument("--reward-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a RewardOptions constant, repeatable, e.g. eog_path_start_step=0")
    parser.add_argument("--val", type=int, default=4, help="validation questions")
    parser.add_argument("--data-mix", choices=("1-2", "3+", "mixed"), default=None,
                        help="training questions by bucket (default: the stage's data_mix)")
    parser.add_argument("--start", default=None,
                        help="model to start from (default: the base model for stage 1, artifacts/models/sft for 3)")
    parser.add_argument("--name", default=None, help="model folder (default rl-stage<N>-curve)")
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()

    params = load_params()
    base = getattr(params.rl, f"stage{args.stage}")
    stage = base.model_copy(update={
        "max_steps": args.steps, "num_generations": args.generations, "questions_per_step": args.questions,
        "max_rounds": args.rounds, "max_new_tokens": args.new_tokens, "learning_rate": args.lr,
        "val_questions": args.val, "eval_every": max(1, args.steps // 4), "max_questions": args.distinct or args.steps * args.questions,
        **({"data_mix": args.data_mix} if args.data_mix else {}),
        **({"rewards": args.rewards, "reward_weights": None} if args.rewards else {}),
        **({"reward_options": {**base.reward_options, **reward_options(args.reward_option)}}
           if args.reward_option else {})})
    params = params.model_copy(update={"rl": params.rl.model_copy(update={f"stage{args.stage}": stage})})
    start = time.perf_counter()
    result = train_rl(params, args.stage, start=args.start, name=args.name or f"rl-stage{args.stage}-curve",
                      force=args.force)
    seconds = time.perf_counter() - start
    history = json.loads((result.folder / "trainer_state.json").read_text())["log_history"]
    rewards = [h["reward"] for h in history if "reward" in h]
    for step, value in enumerate(rewards, start=1):
        print(f"step {step:3d}  reward {value:.3f}")
    meta = result.manifest.metadata
    print(f"mean reward first half {meta['reward_first_half_mean']:.3f} -> second half "
          f"{meta['reward_second_half_mean']:.3f}; validation EM {meta['val_em']}; "
          f"{seconds / 60:.1f} min ({'reused' if result.skipped else 'trained'}) -> {result.folder}")


if __name__ == "__main__":
    main()
