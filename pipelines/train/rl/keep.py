"""An RL stage's exactly-correct training rollouts, kept for the stage-2 SFT data.

Omne-R1's stage 2 trains on template conversations mixed with stage 1's own correct rollouts, so that SFT does
not teach a single reasoning pattern (``sft_data.sources: [template, agent]``, ``pipelines.train.sft_data``).
While the stage trains, every rollout of a generation batch whose answer is an exact match (the evaluation's
``exact_match``) is appended, with its question id, training step and reward, to a working file beside the
stage's model folder (a dot-name, flushed and fsynced per batch). When training ends the file moves into the
model folder inside the same atomic replace as the weights (``pipelines.atomic.atomic_directory``): the folder
never holds a partial file, and a killed run leaves only the working file, which the next run starts afresh.
Validation rollouts (val split) never pass through here: only the trainer's generation batches do.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from pipelines.agent.trajectory import Trajectory
from pipelines.eval.answers import exact_match
from pipelines.layout import CORRECT_ROLLOUTS_FILE
from pipelines.qa.build import read_jsonl


class KeptRollout(BaseModel):
    """One exactly-correct training rollout: the episode and where in training it came from."""

    model_config = ConfigDict(extra="forbid")
    qa_id: str
    step: int  # the optimizer step the rollout was generated for (1-based)
    reward: float  # its weighted reward, as the trainer scored it for that step
    trajectory: Trajectory


class CorrectRollouts:
    """Appends the exactly-correct rollouts of each generation batch to ``working`` (emptied at the start)."""

    def __init__(self, working: Path) -> None:
        self.working = working
        self.kept = 0
        working.parent.mkdir(parents=True, exist_ok=True)
        working.write_text("", encoding="utf-8")

    @classmethod
    def beside(cls, model_folder: Path) -> CorrectRollouts:
        """The keeper of the stage that will save its model to ``model_folder``."""
        return cls(model_folder.parent / f".{model_folder.name}.{CORRECT_ROLLOUTS_FILE}.partial")

    def keep(self, trajectories: Sequence[Trajectory], rewards: Sequence[float], step: int) -> int:
        """Append the rollouts whose answer is exactly right; how many were kept."""
        rows = [KeptRollout(qa_id=t.qa_id, step=step, reward=float(r), trajectory=t)
                for t, r in zip(trajectories, rewards, strict=True) if exact_match(t.answer, t.gold_answers)]
        if rows:
            with self.working.open("a", encoding="utf-8") as handle:
                handle.write("".join(row.model_dump_json() + "\n" for row in rows))
                handle.flush()
                os.fsync(handle.fileno())
        self.kept += len(rows)
        return len(rows)

    def move_into(self, folder: Path) -> Path:
        """Move the finished file into ``folder`` (the model's temporary folder, which replaces the old one)."""
        final = folder / CORRECT_ROLLOUTS_FILE
        os.replace(self.working, final)
        return final


def read_kept_rollouts(path: Path) -> list[KeptRollout]:
    """The kept rollouts of a stage (``pipelines.layout.correct_rollouts_file``); the error names the line."""

    return read_jsonl(path, KeptRollout)
