"""Reward functions of the RL stages, as TRL's ``GRPOTrainer`` calls them:
``reward(completions, **kwargs) -> list[float]``, one float per completion.

A completion is a conversational completion (a list of ``{"role", "content"}`` messages), a plain
string (one assistant message) or a :class:`~pipelines.agent.trajectory.Trajectory` (through
:func:`trajectory_messages`). Dataset columns arrive as kwargs lists aligned with the completions
(``answers``: gold answers, ``gold_triples``: validated gold-path triples, ``question``); a Trajectory
brings its own question and gold answers when those columns are absent.

What counts as a tool response: only a message the environment wrote, i.e. a ``tool`` message, or a
``user`` message holding the protocol's response tag (the omne protocol returns results as user
messages). Anything inside an assistant message is model-written: a ``<tool_response>`` the model
typed earns nothing (no search or retrieval credit) and breaks format. The search protocol's inline
responses are therefore split out of the assistant text into tool messages by
:func:`trajectory_messages` (from the trajectory's own tool-call records), so score search-protocol
rollouts through it, not as raw strings.

Rewards (``REWARDS`` holds them by name; :func:`build_reward_functions` selects and weights them):

- ``omne_stage1`` (Omne-R1 stage 1): ``R_format × (0.1 + 0.9·EM)``, ``R_format`` the mean of three
  tag-discipline checks (:func:`omne_format_checks`);
- ``omne_stage3`` (Omne-R1 stage 3): ``(r_format + r_answer)/2 − 0.1·n_repetition``;
- ``kg_r1`` (KG-R1): per-turn ``r_t = w_fmt·format_t + w_kg·kg_t + w_ans·answer_T`` and global
  ``R = w_F1·F1 + w_ret·retrieval``; GRPO gets the mean turn return ``mean_t(r_t + λ·R)``
  (:func:`kg_r1_scores` keeps the parts for turn-level credit assignment);
- ``kg_reasoner`` (KG-Reasoner): ``min(0.5·n_valid_searches, 0.8) + 0.5·format + 1·answer``;
- ``kg_hopper`` (KG-Hopper): ``R_search + R_format + R_reason + R_answer``, R_reason from an LLM
  judge, R_answer exact or judged;
- ``eog`` (EoG): answer-set F1, then from step K ``(1−λ)·F1 + λ·R_path``.

Each reward reads one protocol's tags (``REWARD_PROTOCOLS``; :func:`check_reward_protocols` refuses the others).
For turn-level credit (``rl.<stage>.credit: turn``) a reward is split into :class:`TurnRewards`: per-turn
rewards ``r_t`` where it defines them (``TURN_SCORES``: KG-R1's) and a global reward (KG-R1's ``R_global``;
the whole reward for the others); :func:`weighted_turn_rewards` sums the configured rewards' parts with their
weights, and each turn's return is ``G_t = r_t + λ·R_global``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipelines.agent.calls import ToolCall, ToolSpec, parse_call
from pipelines.agent.protocols import PROTOCOLS, KGR1Protocol, OmneProtocol, SearchProtocol, _blocks
from pipelines.agent.tools import KG_R1_TOOLS, OMNE_TOOLS, TOOL_SPECS
from pipelines.agent.trajectory import Trajectory, exact_name
from pipelines.errors import ConfigError
from pipelines.eval.answers import answer_set, exact_match, normalise_answer, normalised_em, set_f1
from pipelines.eval.behaviour import _call_key
from pipelines.eval.judge import judge_messages
from pipelines.eval.triples import exploration_scores, gold_triples
from pipelines.llm.base import ChatClient, ChatRequest
from pipelines.llm.structured import complete_json_many
from pipelines.qa.models import GoldPath
from pipelines.text.names import mentions

log = logging.getLogger(__name__)

Completion = str | Sequence[Mapping[str, Any]] | Trajectory
RewardFunction = Callable[..., list[float]]
Triple = tuple[str, str, str]

THINK, ANSWER = "think", "answer"
ERROR_MARK = "<error>"  # how a failed tool call renders (calls.ToolError.render)

__all__ = [
    "JUDGED_REWARDS", "REWARDS", "REWARD_PROTOCOLS", "TURN_SCORES", "Episode", "FormatChecks", "KGR1Score",
    "RewardOptions", "Step", "TurnRewards", "build_reward_functions", "check_reward_protocols",
    "completion_messages", "eog_reward", "grounding_reward", "kg_hopper_reward", "kg_r1_reward", "kg_r1_scores",
    "kg_reasoner_reward",
    "omne_format_checks", "omne_stage1_reward", "omne_stage3_reward", "parse_episode", "prediction",
    "repetitions", "search_format_ok", "think_text", "trajectory_messages", "training_step", "valid_searches",
    "weighted_turn_rewards",
]


class RewardOptions(BaseModel):
    """The tunable constants of every reward, with the papers' defaults (params select and override)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    answer_match: Literal["exact", "normalised"] = "exact"  # EM as the Omne-R1 paper (strip) or SQuAD-normalised
    # Omne-R1 (000)
    result_floor: float = Field(0.1, ge=0.0, le=1.0)  # stage 1: R_format × (floor + (1 − floor)·EM)
    repetition_penalty: float = Field(0.1, ge=0.0)  # stage 3: per repeated tool call
    # KG-R1 (003)
    kg_r1_format_weight: float = 0.5
    kg_r1_kg_weight: float = 0.5
    kg_r1_answer_weight: float = 0.5
    kg_r1_f1_weight: float = 1.0
    kg_r1_retrieval_weight: float = 1.0
    kg_r1_lambda: float = 1.0  # G_t = r_t + λ·R_global (credit: turn, whatever the rewards)
    # KG-Reasoner (001) / KG-Hopper (002)
    search_step: float = 0.5  # R_search = min(step·n_valid_searches, cap)
    search_cap: float = 0.8
    search_format_weight: float = 0.5
    search_answer_weight: float = 1.0
    # EoG (004)
    eog_path_start_step: int = Field(75, ge=0)  # K: outcome only before it
    eog_path_weight: float = Field(0.2, ge=0.0, le=1.0)  # λ
    # grounding (the graphs users bring)
    grounding_unseen_penalty: float = Field(0.5, ge=0.0)  # an answer no successful tool response showed as written
    grounding_missing_penalty: float = Field(0.25, ge=0.0)  # per call naming an entity not in the graph
    grounding_retry_penalty: float = Field(0.5, ge=0.0)  # per call repeating a failed call
    # LLM judge (KG-Hopper)
    judge_max_tokens: int = Field(512, ge=1)
    judge_repair_rounds: int = Field(1, ge=0)
    judge_max_chars: int = Field(12000, ge=100)  # reasoning shown to the judge is clipped to this


# ----- completions -> episodes ------------------------------------------------------------------------------
def _response_markers(response: str) -> list[str]:
    """How the environment writes ``response`` into a conversation, for every protocol's tag."""
    return [f"<{cls.response_tag}>\n{response}\n</{cls.response_tag}>" for cls in PROTOCOLS.values()]


def trajectory_messages(trajectory: Trajectory) -> list[dict[str, str]]:
    """A rollout's completion as messages: everything from the first assistant turn on (the prompt
    is not part of a completion), with the search protocol's inline tool responses split out of the
    assistant text into ``tool`` messages, located exactly through the trajectory's call records."""
    messages = trajectory.messages
    start = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    pending = [call.response for call in trajectory.tool_calls]
    out: list[dict[str, str]] = []
    for message in messages[start:]:
        content = message.get("content") or ""
        if message.get("role") != "assistant":
            out.append({"role": message.get("role", "user"), "content": content})
            continue
        position = 0
        while pending:
            hits = [(content.find(m, position), m) for m in _response_markers(pending[0])]
            hits = [(i, m) for i, m in hits if i >= 0]
            if not hits:
                break
            index, marker = min(hits)
            out.append({"role": "assistant", "content": content[position:index]})
            out.append({"role": "tool", "content": marker})
            position = index + len(marker)
            pending.pop(0)
        out.append({"role": "assistant", "content": content[position:]})
    return out


def completion_messages(completion: Completion) -> list[dict[str, str]]:
    """Any accepted completion form as a list of ``{"role", "content"}`` messages."""
    if isinstance(completion, str):
        return [{"role": "assistant", "content": completion}]
    if isinstance(completion, Trajectory):
        return trajectory_messages(completion)
    if isinstance(completion, Mapping):
        completion = [completion]
    out = []
    for message in completion:
        content = message.get("content")
        out.append({"role": str(message.get("role", "")), "content": content if isinstance(content, str) else ""})
    return out


@dataclass(frozen=True)
class Step:
    """One assistant message and the real tool response that followed it (None: nothing followed)."""

    text: str
    response: str | None = None


@dataclass(frozen=True)
class Episode:
    steps: tuple[Step, ...]

    @property
    def text(self) -> str:
        """Everything the model wrote, in order (tool responses left out)."""
        return "\n".join(step.text for step in self.steps)


def _unwrap(content: str, tag: str) -> str:
    blocks = _blocks(content, tag)
    return "\n".join(b.strip() for b in blocks) if blocks else content.strip()


def parse_episode(completion: Completion, response_tag: str) -> Episode:
    """Pair each assistant message with the environment's response to it. A ``tool`` message, or a
    ``user`` message holding ``<response_tag>``, is a response; the rest is ignored."""
    steps: list[Step] = []
    for message in completion_messages(completion):
        role, content = message["role"], message["content"]
        if role == "assistant":
            steps.append(Step(content))
        elif steps and (role == "tool" or (role == "user" and f"<{response_tag}>" in content)):
            body, last = _unwrap(content, response_tag), steps[-1]
            steps[-1] = Step(last.text, body if last.response is None else f"{last.response}\n{body}")
    return Episode(tuple(steps))


# ----- shared pieces ----------------------------------------------------------------------------------------
def prediction(episode: Episode) -> str | None:
    """The last ``<answer>`` block, whitespace-stripped (docs/architecture.md, "The agent protocol"); None when the
    model never answered."""
    answers = _blocks(episode.text, ANSWER)
    return answers[-1].strip() if answers else None


def think_text(episode: Episode) -> str:
    """Every closed ``<think>`` block of the episode joined (what EoG and the reasoning judge read)."""
    return "\n".join(block.strip() for block in _blocks(episode.text, THINK))


def _answer_correct(predicted: str | None, golds: Sequence[str], options: RewardOptions) -> bool:
    if options.answer_match == "normalised":
        return normalised_em(predicted, golds)
    return exact_match(predicted, golds)


def _response_ok(response: str | None) -> bool:
    """A real response that brought something back (not empty, not a typed tool error)."""
    return response is not None and bool(response.strip()) and ERROR_MARK not in response


def _retrieved(episode: Episode, golds: Sequence[str]) -> bool:
    """A gold entity is named in a successful real tool response (an error only echoes what the model typed)."""
    names = [g for g in golds if g.strip()]
    return any(mentions(step.response or "", g) for step in episode.steps if _response_ok(step.response)
               for g in names)


def _think_before(text: str, end: int) -> bool:
    """A closed, non-empty ``<think>`` block ends before position ``end`` of ``text``."""
    return any(block.strip() for block in _blocks(text[:end], THINK))


def _fake_response(text: str, protocol: type) -> bool:
    return any(marker in text for marker in protocol.fake_markers)


@lru_cache(maxsize=8)
def _specs(names: tuple[str, ...]) -> dict[str, ToolSpec]:

    return {name: TOOL_SPECS[name] for name in names}


def _omne_specs() -> dict[str, ToolSpec]:

    return _specs(OMNE_TOOLS)


def _kg_r1_specs() -> dict[str, ToolSpec]:

    return _specs(KG_R1_TOOLS)


# ----- kwargs columns ---------------------------------------------------------------------------------------
def _row(kwargs: Mapping[str, Any], key: str, index: int) -> Any:
    column = kwargs.get(key)
    if column is None or isinstance(column, str) or not isinstance(column, Sequence) or index >= len(column):
        return None
    return column[index]


def _golds(kwargs: Mapping[str, Any], index: int, completion: Completion) -> list[str]:
    """The gold answers of row ``index``: the ``answers`` column (else ``gold_answers`` or ``golden_answer``),
    else the trajectory's own."""
    for key in ("answers", "gold_answers", "golden_answer"):
        value = _row(kwargs, key, index)
        if value is not None:
            return [value] if isinstance(value, str) else [str(v) for v in value]
    return list(completion.gold_answers) if isinstance(completion, Trajectory) else []


def _question(kwargs: Mapping[str, Any], index: int, completion: Completion) -> str:
    value = _row(kwargs, "question", index)
    if isinstance(value, str):
        return value
    if isinstance(completion, Trajectory):
        return completion.question
    prompt = _row(kwargs, "prompts", index)
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        users = [m.get("content", "") for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
        return str(users[-1]) if users else ""
    return ""


def _gold_triples(value: Any) -> list[Triple]:
    """A ``gold_triples`` cell: a list of [head, relation, tail], or a GoldPath (its validated paths)."""
    if value is None:
        return []
    if isinstance(value, GoldPath | Mapping):
        return gold_triples(GoldPath.model_validate(value))
    return [(str(t[0]), str(t[1]), str(t[2])) for t in value if isinstance(t, Sequence) and len(t) == 3]


def training_step(kwargs: Mapping[str, Any]) -> int:
    """The optimizer step: TRL passes ``trainer_state`` (its ``global_step``); ``step`` works too."""
    state = kwargs.get("trainer_state")
    step = getattr(state, "global_step", None)
    if step is None:
        step = kwargs.get("step", 0)
    return int(step or 0)


# ----- Omne-R1 (000) ----------------------------------------------------------------------------------------
class FormatChecks(BaseModel):
    """The three tag-discipline checks of Omne-R1's format reward; the grade is their mean."""

    think_before_actions: bool  # every turn with a call or answer has a closed, non-empty <think> before it
    calls_well_formed: bool  # every call: one per turn, parses against the tools, ends the turn; no fake response
    one_answer: bool  # exactly one non-empty <answer>, in the last turn, and that turn makes no call

    @property
    def score(self) -> float:
        return (self.think_before_actions + self.calls_well_formed + self.one_answer) / 3

    @property
    def all_ok(self) -> bool:
        return self.think_before_actions and self.calls_well_formed and self.one_answer


def _first_action(text: str, call_tag: str) -> int:
    """Position of the turn's first action tag (call or answer), -1 when it has none."""
    found = [i for i in (text.find(f"<{call_tag}>"), text.find(f"<{ANSWER}>")) if i >= 0]
    return min(found) if found else -1


def _call_well_formed(text: str, protocol: type, specs: dict[str, ToolSpec]) -> bool:
    call_tag = protocol.call_tag
    opened, closed = text.count(f"<{call_tag}>"), text.count(f"</{call_tag}>")
    calls = _blocks(text, call_tag)
    if _fake_response(text, protocol) or opened != closed or opened != len(calls) or len(calls) > 1:
        return False
    if not calls:
        return True
    end = text.find(f"</{call_tag}>") + len(f"</{call_tag}>")
    return not text[end:].strip() and isinstance(parse_call(calls[0], specs), ToolCall)


def omne_format_checks(episode: Episode) -> FormatChecks:
    """Grade the omne protocol's tag discipline (see :class:`FormatChecks`).

    An episode without any action fails ``think_before_actions``; one without calls passes
    ``calls_well_formed`` (answering without tools is legal).
    """
    call_tag, specs = OmneProtocol.call_tag, _omne_specs()
    actions = [(step.text, _first_action(step.text, call_tag)) for step in episode.steps]
    actions = [(text, at) for text, at in actions if at >= 0]
    think_first = bool(actions) and all(_think_before(text, at) for text, at in actions)
    calls_ok = all(_call_well_formed(step.text, OmneProtocol, specs) for step in episode.steps)
    answers = [step.text.count(f"<{ANSWER}>") for step in episode.steps]
    last = episode.steps[-1].text if episode.steps else ""
    one_answer = (sum(answers) == 1 and answers[-1] == 1 and len(_blocks(last, ANSWER)) == 1
                  and bool(_blocks(last, ANSWER)[0].strip()) and f"<{call_tag}>" not in last)
    return FormatChecks(think_before_actions=think_first, calls_well_formed=calls_ok, one_answer=one_answer)


def omne_stage1_reward(completions: Sequence[Completion], *, options: RewardOptions | None = None,
                       **kwargs: Any) -> list[float]:
    """Omne-R1 stage 1: ``R_format × (0.1 + 0.9·EM)`` — format gates everything, correctness dominates."""
    options = options or RewardOptions()
    out = []
    for i, completion in enumerate(completions):
        episode = parse_episode(completion, OmneProtocol.response_tag)
        em = _answer_correct(prediction(episode), _golds(kwargs, i, completion), options)
        floor = options.result_floor
        out.append(omne_format_checks(episode).score * (floor + (1.0 - floor) * em))
    return out


def repetitions(episode: Episode, protocol: type = OmneProtocol, specs: dict[str, ToolSpec] | None = None) -> int:
    """Tool calls with the same name and arguments as an earlier call of the episode (the same key as
    the evaluation's repeated-call metric: string arguments compared up to case and spacing; a call
    that does not parse repeats when its text does)."""
    specs = specs if specs is not None else _omne_specs()
    seen: set[tuple] = set()
    repeats = 0
    for step in episode.steps:
        calls = _blocks(step.text, protocol.call_tag)
        if not calls:
            continue
        parsed = parse_call(calls[0], specs)
        key = (_call_key(parsed.name, parsed.arguments, calls[0]) if isinstance(parsed, ToolCall)
               else _call_key(None, {}, calls[0]))
        repeats += key in seen
        seen.add(key)
    return repeats


def omne_stage3_reward(completions: Sequence[Completion], *, options: RewardOptions | None = None,
                       **kwargs: Any) -> list[float]:
    """Omne-R1 stage 3: ``(r_format + r_answer)/2 − 0.1·n_repetition``, r_format = all format checks pass."""
    options = options or RewardOptions()
    out = []
    for i, completion in enumerate(completions):
        episode = parse_episode(completion, OmneProtocol.response_tag)
        r_format = float(omne_format_checks(episode).all_ok)
        r_answer = float(_answer_correct(prediction(episode), _golds(kwargs, i, completion), options))
        out.append((r_format + r_answer) / 2 - options.repetition_penalty * repetitions(episode))
    return out


def grounding_reward(completions: Sequence[Completion], *, options: RewardOptions | None = None,
                     **kwargs: Any) -> list[float]:
    """What transfers to the graphs users bring (LightRAG's upper-case names; docs/rl.md, "Grounding"), as
    penalties only, so that nothing is paid for an answer that is merely well copied (a policy would learn to answer
    the start entity): ``− grounding_unseen_penalty`` for an answer that no successful tool response showed exactly
    as written, ``− grounding_missing_penalty`` for each call that named an entity the graph does not have, and
    ``− grounding_retry_penalty`` for each call that repeats a call which had failed (the loop that ended a quarter
    of the episodes on an unseen LightRAG graph). 0 at best, at least −1."""
    options = options or RewardOptions()
    out = []
    for completion in completions:
        episode = parse_episode(completion, OmneProtocol.response_tag)
        answer = (prediction(episode) or "").strip()
        copied = bool(answer) and any(exact_name(answer).search(step.response or "") for step in episode.steps
                                      if _response_ok(step.response))
        missing = retried = 0
        failed: set[str] = set()
        for step in episode.steps:
            calls = _blocks(step.text, OmneProtocol.call_tag)
            if not calls or step.response is None:
                continue
            key = " ".join(calls[0].split()).casefold()
            retried += key in failed
            if not _response_ok(step.response):
                failed.add(key)
                missing += "not found in KG" in step.response and "Entity" in step.response
        unseen = bool(answer) and not copied
        out.append(max(-1.0, -options.grounding_unseen_penalty * unseen - options.grounding_missing_penalty * missing
                       - options.grounding_retry_penalty * retried))
    return out


# ----- turn-level credit -------------------------------------------------------------------------------------
class TurnRewards(BaseModel):
    """A completion's reward as turn-level credit sees it: ``r_t`` per assistant turn (empty for a reward
    without a per-turn form) and the global reward ``R`` that every turn shares through ``λ``."""

    turn_rewards: list[float] = Field(default_factory=list)
    global_reward: float

    def returns(self, lam: float) -> list[float]:
        """Turn-level credit assignment: ``G_t = r_t + λ·R_global``."""
        return [r + lam * self.global_reward for r in self.turn_rewards]

    def scalar(self, lam: float) -> float:
        """One number for GRPO: the mean turn return (``λ·R_global`` when there is no turn)."""
        returns = self.returns(lam)
        return sum(returns) / len(returns) if returns else lam * self.global_reward


def weighted_turn_rewards(parts: Sequence[TurnRewards], weights: Sequence[float], turns: int) -> TurnRewards:
    """The configured rewards of one completion as one :class:`TurnRewards` over its ``turns`` turns:
    ``r_t = Σ_k w_k·r_t^k`` (a reward without turn t, or without a per-turn form, adds 0 there) and
    ``R = Σ_k w_k·R^k``. So ``G_t = r_t + λ·R`` is KG-R1's return for ``rewards: [kg_r1]``, and for rewards
    without per-turn parts every turn gets ``λ`` times the episode's weighted reward."""
    turn_rewards = [0.0] * turns
    for part, weight in zip(parts, weights, strict=True):
        for t, reward in enumerate(part.turn_rewards[:turns]):
            turn_rewards[t] += weight * reward
    total = sum(weight * part.global_reward for part, weight in zip(parts, weights, strict=True))
    return TurnRewards(turn_rewards=turn_rewards, global_reward=total)


# ----- KG-R1 (003) ------------------------------------------------------------------------------------------
class KGR1Score(TurnRewards):
    """KG-R1's rewards of one completion: one per assistant turn, plus the episode's global reward."""

    f1: float = 0.0
    retrieved: bool = False


def _kg_r1_turn_format(text: str) -> bool:
    """Exactly one action (one <kg-query> or one <answer>), a non-empty <think> before it, nothing after."""
    call_tag = KGR1Protocol.call_tag
    opened = text.count(f"<{call_tag}>") + text.count(f"<{ANSWER}>")
    blocks = [(m.start(), m.end()) for tag in (call_tag, ANSWER)
              for m in re.finditer(rf"<{tag}>.*?</{tag}>", text, flags=re.S)]
    if opened != 1 or len(blocks) != 1 or _fake_response(text, KGR1Protocol):
        return False
    start, end = blocks[0]
    return _think_before(text, start) and not text[end:].strip()


def _kg_r1_turn_kg(step: Step, specs: dict[str, ToolSpec]) -> bool:
    """The turn's query is schema-valid (parses against the KG-R1 actions) and got a non-empty, non-error reply."""
    calls = _blocks(step.text, KGR1Protocol.call_tag)
    return bool(calls) and isinstance(parse_call(calls[0], specs), ToolCall) and _response_ok(step.response)


def kg_r1_scores(completions: Sequence[Completion], *, options: RewardOptions | None = None,
                 **kwargs: Any) -> list[KGR1Score]:
    """KG-R1's per-turn and global rewards of every completion.

    Turn t: ``w_fmt·format_t + w_kg·kg_t`` (+ ``w_ans·answer`` on the final turn, answer = some item of
    the final turn's answer set is a gold answer, normalised). Global: ``w_F1·F1(answer set, gold) +
    w_ret·retrieval``, retrieval = a gold answer is named in a successful real tool response.
    """
    options = options or RewardOptions()
    specs = _kg_r1_specs()
    out = []
    for i, completion in enumerate(completions):
        episode = parse_episode(completion, KGR1Protocol.response_tag)
        golds = _golds(kwargs, i, completion)
        gold_set = {normalise_answer(g) for g in golds} - {""}
        turns = []
        for t, step in enumerate(episode.steps):
            reward = (options.kg_r1_format_weight * _kg_r1_turn_format(step.text)
                      + options.kg_r1_kg_weight * _kg_r1_turn_kg(step, specs))
            if t == len(episode.steps) - 1:
                final = _blocks(step.text, ANSWER)
                hit = bool(final) and bool(set(answer_set(final[-1].strip())) & gold_set)
                reward += options.kg_r1_answer_weight * hit
            turns.append(reward)
        f1 = set_f1(answer_set(prediction(episode)), golds)
        retrieved = _retrieved(episode, golds)
        total = options.kg_r1_f1_weight * f1 + options.kg_r1_retrieval_weight * retrieved
        out.append(KGR1Score(turn_rewards=turns, global_reward=total, f1=f1, retrieved=retrieved))
    return out


def kg_r1_reward(completions: Sequence[Completion], *, options: RewardOptions | None = None,
                 **kwargs: Any) -> list[float]:
    """KG-R1 as one GRPO scalar per completion: ``mean_t(r_t + λ·R_global)``."""
    options = options or RewardOptions()
    return [score.scalar(options.kg_r1_lambda) for score in kg_r1_scores(completions, options=options, **kwargs)]


# ----- KG-Reasoner (001) / KG-Hopper (002) ------------------------------------------------------------------
_SEARCH_TAGS = re.compile(rf"</?(?:{THINK}|{SearchProtocol.call_tag}|{ANSWER})>")
_SEARCH_LETTERS = {f"<{THINK}>": "T", f"</{THINK}>": "t", f"<{SearchProtocol.call_tag}>": "S",
                   f"</{SearchProtocol.call_tag}>": "s", f"<{ANSWER}>": "A", f"</{ANSWER}>": "a"}
# think blocks (searches inside or right after them), then exactly one answer at the end
_SEARCH_GRAMMAR = re.compile(r"(?:T(?:Ss)*t(?:Ss)*)+Aa")


def search_format_ok(episode: Episode) -> bool:
    """All tags in the right order: ``<think>`` blocks (each ``<search>`` inside or right after one),
    then one non-empty ``<answer>`` last; every search names something; no typed tool response."""
    text = episode.text
    if _fake_response(text, SearchProtocol):
        return False
    order = "".join(_SEARCH_LETTERS[tag] for tag in _SEARCH_TAGS.findall(text))
    if not _SEARCH_GRAMMAR.fullmatch(order):
        return False
    searches = _blocks(text, SearchProtocol.call_tag)
    return bool(_blocks(text, ANSWER)[0].strip()) and all(s.strip() for s in searches)


def valid_searches(episode: Episode) -> int:
    """Searches the environment answered with triples (a real, non-empty, non-error response)."""
    return sum(1 for step in episode.steps
               if _blocks(step.text, SearchProtocol.call_tag) and _response_ok(step.response))


def _search_reward(episode: Episode, options: RewardOptions) -> float:
    return min(options.search_step * valid_searches(episode), options.search_cap)


def kg_reasoner_reward(completions: Sequence[Completion], *, options: RewardOptions | None = None,
                       **kwargs: Any) -> list[float]:
    """KG-Reasoner: ``min(0.5·n_valid_searches, 0.8) + 0.5·format + 1·answer`` (answer = EM)."""
    options = options or RewardOptions()
    out = []
    for i, completion in enumerate(completions):
        episode = parse_episode(completion, SearchProtocol.response_tag)
        correct = _answer_correct(prediction(episode), _golds(kwargs, i, completion), options)
        out.append(_search_reward(episode, options) + options.search_format_weight * search_format_ok(episode)
                   + options.search_answer_weight * correct)
    return out


REASONING_SYSTEM = "You grade the reasoning of an agent that answers questions over a knowledge graph. " \
                   "You reply with JSON only."


def reasoning_messages(question: str, reasoning: str, evidence: str) -> list[dict[str, str]]:
    """The reasoning judge's prompt: the question, the triples the agent retrieved, its reasoning."""
    content = "\n".join([
        f"Question: {question}",
        "Knowledge-graph triples the agent retrieved:",
        evidence or "(none)",
        "The agent's reasoning:",
        reasoning,
        "",
        "Score the reasoning from 0 to 1: is each step supported by the retrieved triples, are the hops "
        "chained logically towards the question's answer, and is it free of invented facts?",
        'Reply with JSON only: {"reasoning": "<one or two sentences>", "score": <number between 0 and 1>}.',
    ])
    return [{"role": "system", "content": REASONING_SYSTEM}, {"role": "user", "content": content}]


def _score_field(value: dict[str, Any]) -> None:
    score = value.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0.0 <= score <= 1.0:
        raise ValueError('"score" must be a number between 0 and 1')


def _verdict_field(value: dict[str, Any]) -> None:
    if not isinstance(value.get("verdict"), bool):
        raise ValueError('"verdict" must be true or false')


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " …"


def judge_reasoning(judge: ChatClient, items: Sequence[tuple[str, str, str]], options: RewardOptions) -> list[float]:
    """R_reason of (question, reasoning, evidence) items, one batch of judge requests; empty reasoning
    scores 0 without asking; a reply that is not the JSON asked for scores 0 with a warning."""
    asked = [i for i, (_, reasoning, _) in enumerate(items) if reasoning.strip()]
    requests = [ChatRequest(messages=reasoning_messages(items[i][0], _clip(items[i][1], options.judge_max_chars),
                                                        _clip(items[i][2], options.judge_max_chars)),
                            temperature=0.0, max_tokens=options.judge_max_tokens, json_mode=True,
                            tag="reward.reasoning") for i in asked]
    results = complete_json_many(judge, requests, repair_rounds=options.judge_repair_rounds,
                                 validate=_score_field, desc="reasoning judge") if requests else []
    scores = [0.0] * len(items)
    for index, result in zip(asked, results, strict=True):
        if result.value is None:
            log.warning("reasoning judge gave no usable score for completion %d (R_reason = 0): %s", index,
                        result.error)
            continue
        scores[index] = float(result.value["score"])
    return scores


def judge_answers(judge: ChatClient, items: Sequence[tuple[str, list[str], str]],
                  options: RewardOptions) -> list[bool]:
    """Semantic answer match of (question, golds, prediction) items by the evaluation's judge prompt;
    a failed or non-JSON verdict counts as wrong, with a warning."""
    requests = [ChatRequest(messages=judge_messages(q, golds, pred), temperature=0.0,
                            max_tokens=options.judge_max_tokens, json_mode=True, tag="reward.answer")
                for q, golds, pred in items]
    results = complete_json_many(judge, requests, repair_rounds=options.judge_repair_rounds,
                                 validate=_verdict_field, desc="answer judge") if requests else []
    verdicts = []
    for index, result in enumerate(results):
        if result.value is None:
            log.warning("answer judge gave no verdict for item %d (counted wrong): %s", index, result.error)
        verdicts.append(bool(result.value and result.value["verdict"]))
    return verdicts


def kg_hopper_reward(completions: Sequence[Completion], *, options: RewardOptions | None = None,
                     judge: ChatClient | None = None, **kwargs: Any) -> list[float]:
    """KG-Hopper: ``R_search + R_format + R_reason + R_answer``.

    R_format is 0.5 only when every tag is in order (:func:`search_format_ok`); R_reason is the
    judge's score of the think text against the retrieved triples (0 without a judge); R_answer is 1
    for an exact match, else the judge's semantic verdict when a judge is given.
    """
    options = options or RewardOptions()
    episodes = [parse_episode(c, SearchProtocol.response_tag) for c in completions]
    golds = [_golds(kwargs, i, c) for i, c in enumerate(completions)]
    questions = [_question(kwargs, i, c) for i, c in enumerate(completions)]
    predicted = [prediction(e) for e in episodes]
    correct = [_answer_correct(p, g, options) for p, g in zip(predicted, golds, strict=True)]
    reason = [0.0] * len(episodes)
    if judge is not None:
        evidence = ["\n".join(s.response for s in e.steps if _response_ok(s.response)) for e in episodes]
        reason = judge_reasoning(judge, [(q, think_text(e), ev) for q, e, ev in
                                         zip(questions, episodes, evidence, strict=True)], options)
        unsure = [i for i, (p, ok) in enumerate(zip(predicted, correct, strict=True)) if p and not ok]
        verdicts = judge_answers(judge, [(questions[i], golds[i], predicted[i] or "") for i in unsure], options)
        for i, verdict in zip(unsure, verdicts, strict=True):
            correct[i] = verdict
    return [_search_reward(e, options) + options.search_format_weight * search_format_ok(e) + r
            + options.search_answer_weight * ok for e, r, ok in zip(episodes, reason, correct, strict=True)]


# ----- EoG (004) ---------------------------------------------------------------------------------------------
def eog_outcome(episode: Episode, golds: Sequence[str]) -> float:
    """Answer-set F1 of the last answer (0 with no answer tags or an empty set)."""
    return set_f1(answer_set(prediction(episode)), golds)


def eog_path(episode: Episode, gold: Sequence[Triple]) -> float | None:
    """Share of the (direction-free, distinct) gold triples whose head, relation and tail are all
    named in the think text, whole names in any case; None when the question has no gold triples."""
    if not gold:
        return None
    return exploration_scores(think_text(episode), gold, [])[0]


def eog_reward(completions: Sequence[Completion], *, options: RewardOptions | None = None,
               **kwargs: Any) -> list[float]:
    """EoG: outcome only before step K, then ``(1−λ)·R_outcome + λ·R_path`` (outcome only for a
    question without validated gold triples, so it is not pulled towards 0)."""
    options = options or RewardOptions()
    path_phase = training_step(kwargs) >= options.eog_path_start_step
    lam = options.eog_path_weight
    out = []
    for i, completion in enumerate(completions):
        episode = parse_episode(completion, OmneProtocol.response_tag)
        outcome = eog_outcome(episode, _golds(kwargs, i, completion))
        path = eog_path(episode, _gold_triples(_row(kwargs, "gold_triples", i))) if path_phase else None
        out.append(outcome if path is None else (1.0 - lam) * outcome + lam * path)
    return out


# ----- registry ------------------------------------------------------------------------------------------------
REWARDS: dict[str, RewardFunction] = {
    "omne_stage1": omne_stage1_reward,
    "omne_stage3": omne_stage3_reward,
    "kg_r1": kg_r1_reward,
    "kg_reasoner": kg_reasoner_reward,
    "kg_hopper": kg_hopper_reward,
    "eog": eog_reward,
    "grounding": grounding_reward,
}

# the protocols whose tags each reward parses (tag discipline, calls, responses); EoG reads only the <think> and
# <answer> blocks that every protocol has
REWARD_PROTOCOLS: dict[str, tuple[str, ...]] = {
    "omne_stage1": ("omne",),
    "omne_stage3": ("omne",),
    "kg_r1": ("kg_r1",),
    "kg_reasoner": ("search",),
    "kg_hopper": ("search",),
    "eog": ("omne", "kg_r1", "search"),
    "grounding": ("omne",),
}
# rewards with a per-turn form for ``credit: turn`` (the others contribute only their global reward)
TURN_SCORES: dict[str, Callable[..., Sequence[TurnRewards]]] = {"kg_r1": kg_r1_scores}
JUDGED_REWARDS = frozenset({"kg_hopper"})  # scored with the LLM judge of ``llm:`` (R_reason, semantic answers)


def check_reward_protocols(names: Sequence[str], protocol: str, *, where: str = "rewards") -> None:
    """Refuse a reward that cannot score ``protocol``'s episodes: it would parse tags the agent never writes and
    train on a constant or misleading signal (``where`` names the setting in the message)."""

    for name in names:
        supported = REWARD_PROTOCOLS.get(name)
        if supported is not None and protocol not in supported:
            raise ConfigError(f"{where}: reward {name!r} cannot score the {protocol!r} protocol (agent.protocol); "
                              f"{name} scores the {' | '.join(supported)} protocol(s)")


def build_reward_functions(names: list[str], weights: list[float] | None = None, judge: ChatClient | None = None,
                           **options: Any) -> list[RewardFunction]:
    """The named rewards as TRL reward functions (``__name__`` = the name, for TRL's logs), each bound
    to the validated ``RewardOptions(**options)`` and the judge, and scaled by its weight. Give the
    weights here or as GRPOConfig.reward_weights, not both: TRL sums the functions itself. A reward with a
    per-turn form (``TURN_SCORES``) also has ``turn_scores(completions, **kwargs) -> list[TurnRewards]``."""
    unknown = [name for name in names if name not in REWARDS]
    if unknown:
        raise ValueError(f"unknown reward(s) {unknown}; available: {', '.join(REWARDS)}")
    if weights is not None and len(weights) != len(names):
        raise ValueError(f"{len(weights)} weight(s) for {len(names)} reward(s)")
    bound = RewardOptions(**options)
    if JUDGED_REWARDS & set(names) and judge is None:
        log.warning("kg_hopper without a judge: R_reason is 0 and answers are matched exactly")

    def make(name: str, weight: float) -> RewardFunction:
        base = REWARDS[name]

        def reward(completions: Sequence[Completion], **kwargs: Any) -> list[float]:
            kwargs.pop("options", None)
            kwargs.pop("judge", None)
            extra = {"judge": judge} if name in JUDGED_REWARDS else {}
            return [weight * r for r in base(completions, options=bound, **extra, **kwargs)]

        reward.__name__ = reward.__qualname__ = name
        reward.__doc__ = base.__doc__
        if name in TURN_SCORES:  # the per-turn form, for credit: turn (same options and weight)
            def turn_scores(completions: Sequence[Completion], **kwargs: Any) -> list[TurnRewards]:
                kwargs.pop("options", None)
                return [TurnRewards(turn_rewards=[weight * r for r in s.turn_rewards],
                                    global_reward=weight * s.global_reward)
                        for s in TURN_SCORES[name](completions, options=bound, **kwargs)]

            reward.turn_scores = turn_scores  # type: ignore[attr-defined]
        return reward

    return [make(name, w) for name, w in zip(names, weights or [1.0] * len(names), strict=True)]
