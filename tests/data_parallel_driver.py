"""`omne` commands as a user runs them, keeping each process's PPO critic (the model folder holds the policy only)
in OUT/critic-<process index>.safetensors: tests/test_data_parallel.py runs ``run`` in its own process, and this
file under `accelerate launch` in two (``python tests/data_parallel_driver.py OUT 'JSON list of argument lists'``:
one process start for every command). Stage 1's rollouts come from a scripted policy that answers every other
episode right (tests/test_rl.py's ``half_right_policy``): a tiny random model never does, so every GRPO advantage
would be zero and the policy would not move."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `tests` from the checkout, as pytest imports it

from pipelines.cli import cli  # noqa: E402
from pipelines.config import load_params  # noqa: E402
from pipelines.llm.local import TransformersChatClient  # noqa: E402
from pipelines.llm.scripted import ScriptedChatClient  # noqa: E402
from pipelines.train.rl.trainers import PPOToolTrainer  # noqa: E402
from tests.test_rl import half_right_policy  # noqa: E402


def run(out: Path, commands: list[list[str]]) -> None:
    """Run the commands in this process; write the critic of every PPO trainer they made."""
    made: list[Any] = []
    init = PPOToolTrainer.__init__

    def keep(self: Any, *args: Any, **kwargs: Any) -> None:  # train_rl keeps its trainer to itself
        init(self, *args, **kwargs)
        made.append(self)

    PPOToolTrainer.__init__ = keep  # type: ignore[method-assign]
    from_model = TransformersChatClient.from_model
    try:
        for arguments in commands:
            stage1 = arguments[2:5] == ["rl", "--stage", "1"]
            if stage1:  # (arguments: --params FILE rl --stage 1 ...)
                policy = half_right_policy(load_params(arguments[1]))
                TransformersChatClient.from_model = lambda *a, _policy=policy, **k: ScriptedChatClient(_policy,
                                                                                                model="scripted")
            try:
                cli.main(args=arguments, prog_name="omne", standalone_mode=False)
            finally:
                TransformersChatClient.from_model = from_model  # type: ignore[method-assign]
    finally:
        PPOToolTrainer.__init__ = init  # type: ignore[method-assign]
    out.mkdir(parents=True, exist_ok=True)
    for trainer in made:
        critic = trainer.accelerator.unwrap_model(trainer.value_model)
        weights = {name: value.detach().cpu().contiguous() for name, value in critic.state_dict().items()}
        save_file(weights, out / f"critic-{trainer.accelerator.process_index}.safetensors")


if __name__ == "__main__":
    run(Path(sys.argv[1]), json.loads(sys.argv[2]))
