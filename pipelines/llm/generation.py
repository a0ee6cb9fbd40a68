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
from collections.abc import Sequence
from typing import Any

TRANSFORMERS = "transformers"
ONNX = "onnx"
VLLM = "vllm"  # RL rollouts only: TRL's vLLM engine, which TRL keeps in sync with the policy
LOCAL_BACKENDS = (TRANSFORMERS, ONNX)


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
