"""`omne` commands as a user runs them, keeping each process's PPO critic (the model folder holds the policy only)
in OUT/critic-<process index>.safetensors: tests/test_data_parallel.py runs ``run`` in its own process, and this
file under `accelerate launch` in two (``python tests/data_parallel_driver.py OUT 'JSON list of argument lists'``:
one process start for every command)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from pipelines.cli import cli
from pipelines.train.rl.trainers import PPOToolTrainer


def run(out: Path, commands: list[list[str]]) -> None:
    """Run the commands in this process; write the critic of every PPO trainer they made."""
    made: list[Any] = []
    init = PPOToolTrainer.__init__

    def keep(self: Any, *args: Any, **kwargs: Any) -> None:  # train_rl keeps its trainer to itself
        init(self, *args, **kwargs)
        made.append(self)

    PPOToolTrainer.__init__ = keep  # type: ignore[method-assign]
    try:
        for arguments in commands:
            cli.main(args=arguments, prog_name="omne", standalone_mode=False)
    finally:
        PPOToolTrainer.__init__ = init  # type: ignore[method-assign]
    out.mkdir(parents=True, exist_ok=True)
    for trainer in made:
        critic = trainer.accelerator.unwrap_model(trainer.value_model)
        weights = {name: value.detach().cpu().contiguous() for name, value in critic.state_dict().items()}
        save_file(weights, out / f"critic-{trainer.accelerator.process_index}.safetensors")


if __name__ == "__main__":
    run(Path(sys.argv[1]), json.loads(sys.argv[2]))
