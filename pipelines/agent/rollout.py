"""The rollout engine: batched multi-turn episodes of a model calling KG tools, for every protocol.

All live episodes of a batch generate together in one backend call per round (the local
transformers backend left-pads them into one ``generate``; an OpenAI-compatible endpoint gets them
as concurrent requests); an episode that answers, runs out of rounds or produces nothing usable
drops out. Generation stops at the end of a call, the call runs through the tool client, and the
result comes back in the protocol's response tags. The same engine serves evaluation, RL rollouts
and SFT data collection.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from tqdm.auto import tqdm

from pipelines.agent.calls import ErrorType
from pipelines.agent.client import ToolClient
from pipelines.agent.protocols import Protocol, SearchProtocol
from pipelines.agent.requests import CallRequest
from pipelines.agent.trajectory import ToolCallRecord, Trajectory, shown_by_tools
from pipelines.llm.base import ChatClient, ChatReply, ChatRequest, LLMError

if TYPE_CHECKING:
    from pipelines.config import AgentParams


class Task(BaseModel):
    """One question to roll out."""

    qa_id: str
    domain: str
    question: str
    gold_answers: list[str]
    bucket: str | None = None
    hops: int | None = None
    topic_entities: list[str] | None = None
    context: str = ""  # extra user-prompt text (retrieval / graph baselines)
    sample: int = 0


class RolloutParams(BaseModel):
    max_new_tokens: int = 3000  # per round
    temperature: float = 0.0
    batch_size: int = 32
    seed: int | None = None
    # an episode making the same call (same text) more than this many times in a row ends there, finish
    # "repeated_call": with the same tools the answer cannot change, and a looping model would spend its
    # remaining rounds on it (agent.max_same_call); before that, a call repeating the one just made is not run and
    # gets REPEAT_NOTE instead of the same response (``_repeat_note``); None: never
    max_same_call: int | None = None
    # an answer that no successful tool response shows, exactly as written, is sent back once with
    # UNSHOWN_ANSWER_NOTE and the episode goes on; the next answer stands as written (agent.unshown_answer_note)
    unshown_answer_note: bool = False

    @classmethod
    def of_agent(cls, agent: AgentParams, **overrides: Any) -> RolloutParams:
        """What ``params.agent`` sets (tokens a round, temperature, batch, the episode rules), with ``overrides`` (a
        seed, a benchmark's sizes): every engine built from the params follows the same episode rules."""
        return cls(**{"max_new_tokens": agent.max_new_tokens, "temperature": agent.temperature,
                      "batch_size": agent.batch_size, "max_same_call": agent.max_same_call,
                      "unshown_answer_note": agent.unshown_answer_note, **overrides})


# what a call repeating the one just made gets instead of the same response: greedy decoding over the same context
# writes the same call again, and on NIST CSF 2.0 38% of the episodes ended so (docs/sft.md, "Repeated calls")
REPEAT_NOTE = ("<error>The same call as the last one: its response above is all it gives. Call node_info on a name "
               "that response lists, entity_matcher on another name, or answer.</error>")

# what an answer no tool response showed gets instead of ending the episode: on NIST CSF 2.0 15% of the answers were
# names spliced from two listed ones ("Header.2.0"), which exact match can never count (docs/evaluation.md)
UNSHOWN_ANSWER_NOTE = ("<error>{answer} is not a name any response above shows. Answer with a name copied exactly "
                       "as a response writes it, or call a tool.</error>")


@dataclass
class _Episode:
    task: Task
    messages: list[dict[str, str]]
    trajectory: Trajectory
    episode_id: str
    partial: str = ""  # search protocol: the assistant text so far (responses injected inline)
    started: float = field(default_factory=time.perf_counter)
    ended: float | None = None
    done: bool = False


class RolloutEngine:
    """Runs tasks through a model (``ChatClient``) and the KG tools with one protocol."""

    def __init__(self, client: ChatClient, protocol: Protocol, tools: ToolClient | None, params: RolloutParams,
                 *, name: str | None = None) -> None:
        if protocol.uses_tools and tools is None:
            raise ValueError(f"protocol {protocol.name!r} needs a tool client")
        self.client, self.protocol, self.tools, self.params = client, protocol, tools, params
        self.name = name or protocol.name

    def _start(self, task: Task) -> _Episode:
        user = self.protocol.user_prompt(task.question, task.domain, task.topic_entities)
        if task.context:
            user = f"{task.context}\n\n{user}"
        messages = [{"role": "system", "content": self.protocol.system_prompt()}, {"role": "user", "content": user}]
        trajectory = Trajectory(qa_id=task.qa_id, domain=task.domain, question=task.question,
                                gold_answers=task.gold_answers, bucket=task.bucket, hops=task.hops,
                                protocol=self.name, mode=self.protocol.mode, model=self.client.model, messages=[],
                                sample=task.sample)
        return _Episode(task=task, messages=messages, trajectory=trajectory, episode_id=uuid.uuid4().hex)

    def _request(self, episode: _Episode) -> ChatRequest:
        seed = None if self.params.seed is None else self.params.seed + episode.task.sample
        return ChatRequest(messages=episode.messages, temperature=self.params.temperature,
                           max_tokens=self.params.max_new_tokens, seed=seed, stop=self.protocol.stop,
                           prefix=self.protocol.assistant_prefix() + episode.partial, tag=f"rollout.{self.name}")

    def run(self, tasks: list[Task], *, progress: bool = True) -> list[Trajectory]:
        """Every task's trajectory, in task order: ``batch_size`` tasks at a time, rounds until all of them end.
        (Refilling an ended episode's slot with the next task was no faster on a 2-core CPU, where decoding is
        compute-bound, and mixed long and short contexts in every batch: bench/eval_slots.py.)"""
        results: list[Trajectory] = []
        with tqdm(total=len(tasks), desc=f"rollouts {self.name}", unit="q", disable=not progress) as bar:
            for first in range(0, len(tasks), self.params.batch_size):
                episodes = [self._start(task) for task in tasks[first:first + self.params.batch_size]]
                while live := [episode for episode in episodes if not episode.done]:
                    self._round(live)
                results.extend(self._finish(episode) for episode in episodes)
                bar.update(len(episodes))
        return results

    def _round(self, episodes: list[_Episode]) -> None:
        """One model turn of each live episode, then their tool calls in one batch; an episode at the round cap
        ends ``max_rounds``."""
        replies = self.client.complete_many([self._request(e) for e in episodes])
        calls: list[tuple[_Episode, str, str]] = []
        for episode, reply in zip(episodes, replies, strict=True):
            action_call = self._step(episode, reply)
            if action_call is not None:
                calls.append((episode, *action_call))
        self._execute(calls)
        now = time.perf_counter()
        for episode in episodes:
            if not episode.done and episode.trajectory.rounds >= self.protocol.max_rounds:
                episode.done, episode.trajectory.finish = True, "max_rounds"
                self._close_partial(episode)
            if episode.done and episode.ended is None:
                episode.ended = now

    def _step(self, episode: _Episode, reply: ChatReply | LLMError) -> tuple[str, str] | None:
        """Record one model turn; return (call text as written, call for the tool client) to execute."""
        traj = episode.trajectory
        traj.rounds += 1
        if isinstance(reply, LLMError):
            traj.format_errors.append("generation_failed")
            episode.done, traj.finish = True, "no_action"
            self._close_partial(episode)
            return None
        traj.generated_tokens += reply.completion_tokens
        traj.prompt_tokens += reply.prompt_tokens
        traj.turn_latency_s.append(reply.latency_s)
        action = self.protocol.parse(reply.text)
        traj.format_errors.extend(action.errors)
        if action.think:
            traj.think_text = f"{traj.think_text}\n{action.think}".strip()
        if action.kind == "tool_call":
            self._add_turn(episode, action.text)
            if self._repeats_itself(traj, action.call):
                traj.finish, episode.done = "repeated_call", True
                self._close_partial(episode)
                return None
            if self._repeat_note(episode, action.call):
                return None
            call = action.call
            if isinstance(self.protocol, SearchProtocol):
                call = self.protocol.search_call(action.call, episode.task.question)
            return action.call, call
        if action.kind == "answer":
            if self._unshown_answer_note(episode, action.answer, action.text):
                return None
            traj.answer = action.answer
            traj.finish = "answer"
        else:
            traj.finish = "max_tokens" if reply.finish_reason == "length" else "no_action"
        episode.done = True
        self._add_turn(episode, action.text)
        self._close_partial(episode)
        return None

    def _repeats_itself(self, traj: Trajectory, call: str) -> bool:
        """True when ``call`` would be the same call made more than ``max_same_call`` times in a row."""
        limit = self.params.max_same_call
        if limit is None or len(traj.tool_calls) < limit:
            return False
        return all(record.text.strip() == call.strip() for record in traj.tool_calls[-limit:])

    def _repeat_note(self, episode: _Episode, call: str) -> bool:
        """Answer a call that repeats the one just made with REPEAT_NOTE, unrun (True); only with a
        ``max_same_call``, which ends the episode if the model repeats it still."""
        traj = episode.trajectory
        if self.params.max_same_call is None or not traj.tool_calls or traj.tool_calls[-1].text.strip() != call.strip():
            return False
        last = traj.tool_calls[-1]
        traj.tool_calls.append(ToolCallRecord(round=traj.rounds - 1, text=call, name=last.name,
                                              arguments=dict(last.arguments), ok=False,
                                              error_type=ErrorType.REPEATED_CALL.value, response=REPEAT_NOTE))
        self._respond(episode, REPEAT_NOTE)
        return True

    def _unshown_answer_note(self, episode: _Episode, answer: str, text: str) -> bool:
        """Send an answer (``TurnAction.answer``: stripped) that no successful tool response shows back with
        UNSHOWN_ANSWER_NOTE (True), once per episode and only with ``unshown_answer_note``: the model may copy the
        name it meant or call again."""
        traj = episode.trajectory
        if (not self.params.unshown_answer_note or not self.protocol.uses_tools or traj.unshown_answers
                or not answer or shown_by_tools(answer, traj.tool_calls)):
            return False
        traj.unshown_answers.append(answer)
        self._add_turn(episode, text)
        self._respond(episode, UNSHOWN_ANSWER_NOTE.format(answer=answer))
        return True

    def _add_turn(self, episode: _Episode, text: str) -> None:
        """A model turn into the episode's context: the assistant text so far (inline protocols) or a message."""
        if self.protocol.inline_responses:
            episode.partial += text
        else:
            episode.messages.append({"role": "assistant", "content": self.protocol.assistant_prefix() + text})

    def _respond(self, episode: _Episode, content: str) -> None:
        """A tool response into the episode's context, as the protocol carries it."""
        message = self.protocol.response_message(content)
        if self.protocol.inline_responses:
            episode.partial += f"\n{message}\n"
        else:
            episode.messages.append({"role": "user", "content": message})

    def _execute(self, calls: list[tuple[_Episode, str, str]]) -> None:
        """Run the round's calls in one batch (one HTTP request when the tools are remote)."""
        if not calls:
            return
        start = time.perf_counter()
        results = self.tools.batch([CallRequest(call=call, graph_type=episode.task.domain,  # type: ignore[union-attr]
                                                episode_id=episode.episode_id, question=episode.task.question)
                                    for episode, _, call in calls])
        latency = (time.perf_counter() - start) / len(calls)
        for (episode, written, _), result in zip(calls, results, strict=True):
            episode.trajectory.tool_calls.append(ToolCallRecord(
                round=episode.trajectory.rounds - 1, text=written, name=result.name or None, arguments=result.arguments,
                ok=result.ok, error_type=result.error_type.value if result.error_type else None,
                response=result.content, latency_s=latency))
            self._respond(episode, result.content)

    def _close_partial(self, episode: _Episode) -> None:
        if self.protocol.inline_responses and episode.partial:
            reply = self.protocol.assistant_prefix() + episode.partial
            episode.messages.append({"role": "assistant", "content": reply})
            episode.partial = ""

    def _finish(self, episode: _Episode) -> Trajectory:
        traj = episode.trajectory
        traj.messages = episode.messages
        traj.latency_s = (episode.ended or time.perf_counter()) - episode.started
        return traj
