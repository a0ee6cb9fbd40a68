"""Where the questions of an evaluation come from: the project's QA split
(:class:`~pipelines.eval.runner.SplitSource`) or an external KGQA file (:class:`~pipelines.eval.kgqa.KGQASet`).

``evaluate`` rolls out, scores and reports any :class:`QuestionSource` the same way; what differs
between the two (the tasks and their prompt context, the rollout engine, gold paths, what the report
records as inputs and params) is asked of the source, so ``evaluate`` never branches on where the
questions came from. This module depends on neither source, so both can import it without a cycle.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.agent.client import ToolClient
from pipelines.agent.protocols import Protocol
from pipelines.agent.rollout import RolloutEngine, RolloutParams, Task
from pipelines.agent.tools import KGToolbox
from pipelines.config import Params
from pipelines.llm.base import ChatClient
from pipelines.qa.models import GoldPath

if TYPE_CHECKING:
    from pipelines.qa.report import QAReport


class QuestionSource(ABC):
    """Questions to evaluate on, with the KG they are asked about and what the report says of them."""

    split: str  # the label that stands for the split in metrics, the report name and its params
    limit: int | None  # the limit the questions were sampled with (the report's params record it)
    toolbox: KGToolbox  # the tools' KG: the domains of the questions, loaded

    @abstractmethod
    def tasks(self, params: Params, baseline: str | None, samples: int) -> list[Task]:
        """One task per question and sample, with the ``baseline``'s KG context in the prompt."""

    @abstractmethod
    def inputs(self, root: Path) -> dict[str, str]:
        """path (relative to ``root``) -> sha256 of what the evaluation read: the report manifest's inputs."""

    def gold_paths(self) -> dict[str, GoldPath]:
        """QA id -> validated gold paths (exploration metrics, the report's viewer); none by default."""
        return {}

    def summary(self, root: Path) -> dict[str, Any] | None:
        """What the source tells the caller about its questions beside the metrics (None: nothing)."""
        return None

    def report_params(self, root: Path) -> dict[str, Any]:
        """Entries the report's params gain beside the model, protocol and settings (none by default)."""
        return {}

    def qa_quality(self) -> QAReport | None:
        """The QA quality report of the questions' dataset, shown in report.html (None: not a built QA dataset)."""
        return None

    def engine(self, client: ChatClient, protocol: Protocol, tools: ToolClient | None, params: RolloutParams,
               *, name: str | None = None) -> RolloutEngine:
        """The rollout engine for these questions: the ordinary one unless the source restricts the tools."""
        return RolloutEngine(client, protocol, tools, params, name=name)
