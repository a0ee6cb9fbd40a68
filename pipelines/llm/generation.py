"""The one generation interface every local producer of tokens goes through.

A ``GenerationBackend`` turns a batch of token prompts into each prompt's new tokens: batched, multi-turn
(a prompt that repeats an earlier prompt's tokens, such as the shared system prompt or an episode's
previous rounds, reuses what the backend kept of it), ended by the model's end tokens, a per-row token
limit or a stop string, greedy at temperature 0 or sampled with a seed. ``LocalChatClient``
(``pipelines.llm.local``) renders chat requests into those prompts and turns the tokens back into
replies, so the rollout engine (evaluation, RL rollouts, SFT data collection) and the LLM client see
only ``ChatClient``, whichever backend generates.

Backends (``agent.backend``, ``llm.backend``): ``transformers``, the reference (the model in this
process, ``TransformersChatClient``'s prefix cache and static-cache decoding), and ``onnx``, ONNX
Runtime on the CPU (``pipelines.llm.onnx_backend``, from a folder converted by
``pipelines.llm.onnx_export``). RL rollouts also take ``vllm`` (``rl.<stage>.backend``): TRL's own vLLM engine
on a GPU (``pipelines.llm.trl_vllm``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

TRANSFORMERS = "transformers"
ONNX = "onnx"
VLLM = "vllm"  # RL rollouts only: TRL's vLLM engine, which TRL keeps in sync with the policy
LOCAL_BACKENDS = (TRANSFORMERS, ONNX)


def generation_counters() -> dict[str, float]:
    """A local backend's ``stats``, zeroed: the same keys for every backend, so that an evaluation's record and the
    benchmarks read one set whichever generated. Prompt positions computed (first messages included), reused from
    the prefix store and computed for first messages (``anchor``); seconds of prefill (anchors included), of the
    anchors alone and of decoding; decode steps, and rows times steps (rows still in the batch at each step, so
    ``row_steps / decode_steps`` is how full the batch ran); batches and their rows."""
    return {"computed": 0, "reused": 0, "anchor": 0, "prefill_seconds": 0.0, "anchor_seconds": 0.0,
            "decode_seconds": 0.0, "decode_steps": 0, "row_steps": 0, "batches": 0, "rows": 0}


class GenerationWork(BaseModel):
    """What a local backend did over a span of calls (an evaluation), from the difference of its ``stats``
    (``generation_counters``): where the time of generating went. The decoding figures are None for a backend
    that decoded nothing it could time (transformers without its prefix cache: one ``generate`` call)."""

    backend: str
    prompt_positions_computed: int = 0  # prompt positions run through the model (first messages included)
    prompt_positions_reused: int = 0  # prompt positions taken from the prefix store instead
    prefill_s: float = 0.0
    decode_s: float | None = None
    decode_steps: int | None = None
    mean_live_rows: float | None = None  # rows decoded together per step, on average (of agent.batch_size)

    def summary(self) -> str:
        """``prefill 75 s (35,503 prompt positions computed, 142,362 reused), decoding 131 s (2,841 steps, ...)``."""
        text = (f"prefill {self.prefill_s:.0f} s ({self.prompt_positions_computed:,} prompt positions computed, "
                f"{self.prompt_positions_reused:,} reused)")
        if self.decode_s is not None:
            text += f", decoding {self.decode_s:.0f} s ({self.decode_steps:,} steps"
            text += f", {self.mean_live_rows:.1f} rows a step)" if self.mean_live_rows is not None else ")"
        return text

    def line(self) -> str:
        """The console's line: ``generation (onnx): prefill ...``."""
        return f"generation ({self.backend}): {self.summary()}"


def generation_work(name: str, before: Mapping[str, float], after: Mapping[str, float]) -> GenerationWork:
    """The work between two snapshots of a backend's ``stats`` (``generation_counters``)."""
    done = {key: after[key] - before.get(key, 0) for key in after}
    steps = int(done.get("decode_steps", 0))
    return GenerationWork(
        backend=name, prompt_positions_computed=int(done.get("computed", 0)),
        prompt_positions_reused=int(done.get("reused", 0)), prefill_s=round(float(done.get("prefill_seconds", 0.0)), 3),
        decode_s=round(float(done.get("decode_seconds", 0.0)), 3) if steps else None, decode_steps=steps or None,
        mean_live_rows=round(done.get("row_steps", 0) / steps, 2) if steps else None)


class GenerationBackend(ABC):
    """Batched generation from token prompts.

    ``generate`` returns each prompt's new tokens, at most its ``max_new_tokens``; a row may end with its
    end token, and may run a few tokens past a stop string or its end (the client cuts every reply at its
    limit, its first end token and its first stop string, so such tokens never reach a reply). Greedy
    output (``temperature`` 0) must not depend on how prompts are batched; sampled output is reproducible
    for the same ``seed``. ``boundaries`` (per prompt: token offsets where a chat message ends) tell the
    backend where a prompt's shared prefixes end; reuse itself is checked token by token."""

    name: str = ""
    # True: requests with different seeds may sample in one batch, whose rows draw from one generator seeded by
    # all of theirs (reproducible for the same batch); False: a batch holds one seed (a backend that seeds each
    # row from the request's seed and prompt, so that a row does not depend on its batch)
    mixes_seeds: bool = False

    @abstractmethod
    def generate(self, prompts: Sequence[list[int]], max_new_tokens: Sequence[int], *, temperature: float,
                 seed: int | None, stop: list[str], boundaries: Sequence[list[int]] | None) -> list[list[int]]:
        """Each prompt's new tokens."""

    def clear_cache(self) -> None:  # noqa: B027 - optional: a backend that keeps nothing between calls
        """Forget every kept prompt state (the next call computes its prompts whole)."""

    @property
    def stats(self) -> dict[str, float]:
        """Counters of the work done (prompt positions computed and reused, seconds): for benchmarks."""
        return {}


class TransformersBackend(GenerationBackend):
    """The reference: generation with ``TransformersChatClient``'s model in this process (its prefix cache and
    static-cache decoding, or plain ``generate``). It reads the client's model and tokenizer at every call, so
    a caller that swaps them (an adapter merged in, the RL policy) is followed."""

    name = TRANSFORMERS
    # RL's rollouts of one question (seed + sample each) sample together: one at a time, 4 rollouts took 4 times
    # as many decoding steps (2026-11-26: 15 s of a 20 s GRPO step)
    mixes_seeds = True

    def __init__(self, client: Any) -> None:
        self.client = client

    def generate(self, prompts: Sequence[list[int]], max_new_tokens: Sequence[int], *, temperature: float,
                 seed: int | None, stop: list[str], boundaries: Sequence[list[int]] | None) -> list[list[int]]:
        return self.client._transformers_tokens(prompts, max(max_new_tokens), temperature, seed, stop,  # noqa: SLF001
                                                boundaries)

    def clear_cache(self) -> None:
        self.client.prefix_store.clear()

    @property
    def stats(self) -> dict[str, float]:
        return self.client.prefill_stats
