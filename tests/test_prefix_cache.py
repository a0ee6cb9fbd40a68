"""The local backend's prefix cache: prompts that share a system prompt, or repeat an earlier
round's conversation, reuse its key/value states instead of recomputing them, and generate the same
tokens as without the cache. A tiny random llama (tests/model_support.py): no files, no hub."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipelines.llm.base import ChatRequest
from tests.model_support import TEXT, build_tiny_llama, same_replies

SYSTEM = TEXT[:600]  # ~330 tokens of the tiny tokenizer: the shared prefix
USERS = ["Mars?", "Which moon orbits the planet that orbits the Sun? " * 3, "Phobos and Deimos", "The Sun " * 9,
         "Deimos"]


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Any:
    """One torch thread: a 64-wide model gains nothing from more, and on a busy machine OpenMP threads
    that lose their time slice make every matmul wait (10x slower here)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama")


def client(folder: Path, **options: Any) -> Any:
    from pipelines.llm.local import TransformersChatClient

    return TransformersChatClient(folder, device="cpu", **{"batch_size": 4, **options})


def requests(stop: list[str], max_tokens: int = 20, users: list[str] = USERS) -> list[ChatRequest]:
    return [ChatRequest(messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": u}],
                        max_tokens=max_tokens, stop=stop, prefix="<think>") for u in users]


@pytest.fixture(scope="module")
def stop(tiny_llama: Path) -> list[str]:
    """Stop strings cut from the middle of two plain replies, so that some rows stop early (at different
    steps) and the others run to their token limit."""
    plain = client(tiny_llama, prefix_cache=False).complete_many(requests([]))
    texts = [r.text for r in plain]
    chosen = [texts[0][6:9], texts[1][10:12]]
    assert all(chosen), texts
    return chosen


def test_cached_generation_equals_plain_token_for_token(tiny_llama: Path, stop: list[str]) -> None:
    batch = requests(stop)
    plain = client(tiny_llama, prefix_cache=False).complete_many(batch)
    cached = client(tiny_llama)
    first = cached.complete_many(batch)
    same_replies(first, plain)
    reasons = {r.finish_reason for r in plain}
    assert reasons == {"stop", "length"}, [(r.text, r.finish_reason) for r in plain]  # both kinds of row
    assert len({r.completion_tokens for r in plain}) > 1  # rows of different lengths in one batch

    # the system prompt was computed once (an anchor of its own), and every prompt reused it
    ids = [cached.prompt_ids(r) for r in batch]
    system = cached.message_boundaries(batch[0])[0]
    assert all(cached.message_boundaries(r)[0] == system for r in batch)
    assert cached.prefill_stats["anchor"] == system
    assert cached.prefill_stats["reused"] == system * len(batch)
    assert cached.prefill_stats["computed"] == system + sum(len(p) - 1 - system for p in ids)

    # a second call with the same prompts reuses each whole conversation (system + user message)
    before = dict(cached.prefill_stats)
    same_replies(cached.complete_many(batch), plain)
    users = [cached.message_boundaries(r)[-1] for r in batch]
    assert cached.prefill_stats["reused"] - before["reused"] == sum(users)
    assert cached.prefill_stats["anchor"] == before["anchor"]

    # one at a time (batch 1, the cache as well) gives the same tokens
    same_replies(client(tiny_llama, batch_size=1).complete_many(batch), plain)


def test_two_rounds_reuse_the_first_round_and_equal_plain(tiny_llama: Path, stop: list[str]) -> None:
    first_round = requests(stop, max_tokens=12)
    cached, plain = client(tiny_llama, batch_size=8), client(tiny_llama, batch_size=8, prefix_cache=False)
    replies = cached.complete_many(first_round)
    same_replies(replies, plain.complete_many(first_round))
    second_round = []
    for index, (request, reply) in enumerate(zip(first_round, replies, strict=True)):
        messages = [*request.messages, {"role": "assistant", "content": request.prefix + reply.text},
                    {"role": "user", "content": "<tool_response>" + "Phobos orbits Mars. " * (index + 1)
                                                + "</tool_response>"}]
        second_round.append(request.model_copy(update={"messages": messages}))
    before = dict(cached.prefill_stats)
    again = cached.complete_many(second_round)
    same_replies(again, plain.complete_many(second_round))
    # round 2 starts from each episode's round-1 conversation (system + user), not from the system prompt
    reused = [cached.message_boundaries(r)[-1] for r in first_round]
    assert cached.prefill_stats["reused"] - before["reused"] == sum(reused)
    assert cached.prefill_stats["anchor"] == before["anchor"]


def test_rows_that_end_leave_the_batch_between_decode_chunks(tiny_llama: Path, stop: list[str]) -> None:
    batch = requests(stop, max_tokens=24)
    chunked = client(tiny_llama, batch_size=8, decode_chunk=2)
    rows: list[int] = []
    inner = chunked.lm.generate

    def recording(*args: Any, **kwargs: Any) -> Any:
        rows.append(kwargs["input_ids"].shape[0])
        return inner(*args, **kwargs)

    chunked.lm.generate = recording
    same_replies(chunked.complete_many(batch), client(tiny_llama, batch_size=8, prefix_cache=False).complete_many(batch))
    assert rows[0] == len(batch) and min(rows) < len(batch)  # the batch shrank once rows had stopped
    # its counters: one decode step per generated position of the widest row left, the rows decoded at each
    stats = chunked.prefill_stats
    assert stats["decode_steps"] > 0 < stats["decode_seconds"]
    assert stats["decode_steps"] * min(rows) <= stats["row_steps"] < stats["decode_steps"] * len(batch)


def test_sampling_with_the_cache_is_seeded(tiny_llama: Path) -> None:
    batch = [r.model_copy(update={"temperature": 1.0, "seed": 5}) for r in requests([], max_tokens=8)]
    cached = client(tiny_llama)
    assert [r.text for r in cached.complete_many(batch)] == [r.text for r in cached.complete_many(batch)]


def test_rollouts_with_their_own_seeds_sample_in_one_batch(tiny_llama: Path) -> None:
    """RL's rollouts of a question carry seed + sample each: the transformers backend samples them together
    (one generator seeded by all their seeds), reproducibly, and the rows still differ."""
    from pipelines.llm.local import batch_seed

    cached = client(tiny_llama, batch_size=8)
    sizes: list[int] = []
    generate = cached.backend.generate
    cached.backend.generate = lambda prompts, *a, **k: sizes.append(len(prompts)) or generate(prompts, *a, **k)
    same = requests([], max_tokens=12, users=["Which moon orbits Mars?"] * 4)
    rollouts = [r.model_copy(update={"temperature": 1.0, "seed": 11 + k}) for k, r in enumerate(same)]
    first = [r.text for r in cached.complete_many(rollouts)]
    assert sizes == [4]  # one batch, not one per seed
    assert first == [r.text for r in cached.complete_many(rollouts)]
    assert len(set(first)) > 1  # four samples, not one sample four times
    assert batch_seed([5, 5]) == 5 and batch_seed([5, None]) is None
    assert batch_seed([11, 12]) == batch_seed([11, 12]) != batch_seed([12, 11])


def test_a_weight_update_drops_the_stored_states(tiny_llama: Path, stop: list[str]) -> None:
    import torch

    cached = client(tiny_llama)
    batch = requests(stop)
    cached.complete_many(batch)
    assert len(cached.prefix_store) > 0
    with torch.no_grad():
        next(cached.lm.parameters()).mul_(1.5)  # an optimizer step would do the same (in place)
    after = cached.complete_many(batch)
    assert cached.prefill_stats["anchor"] == 2 * cached.message_boundaries(batch[0])[0]
    cached.prefix_cache = False
    same_replies(after, cached.complete_many(batch))
    cached.prefix_cache = True
    cached.clear_prefix_cache()
    assert len(cached.prefix_store) == 0


def test_the_store_keeps_the_longest_sequences_within_its_budget() -> None:
    import torch

    from pipelines.llm.prefix_store import PrefixStore

    def kv(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(torch.zeros(1, 1, n, 4), torch.zeros(1, 1, n, 4))]  # 2 x 16 bytes a token

    store = PrefixStore(max_bytes=32 * 10)
    store.add(np.array([1, 2, 3]), kv(3))
    store.add(np.array([1, 2, 3, 4, 5]), kv(5))  # the first is a prefix of it: dropped
    assert len(store) == 1 and store.nbytes == 32 * 5
    assert store.match(np.array([1, 2, 3, 9]))[0] == 3 and store.match(np.array([7]))[0] == 0
    store.add(np.array([1, 2, 7, 7]), kv(4))
    assert len(store) == 2 and store.match(np.array([1, 2, 7, 7, 7]))[0] == 4
    store.add(np.array([9, 9, 9]), kv(3))  # over the budget: the least recently used goes
    assert len(store) == 2 and store.match(np.array([1, 2, 3, 4, 5]))[0] == 2 and store.nbytes <= 32 * 10


def test_stop_criteria_are_built_once(tiny_llama: Path) -> None:
    cached = client(tiny_llama)
    assert cached._stopping(["</answer>"]) is cached._stopping(["</answer>"])  # noqa: SLF001
    assert cached._stopping(["</answer>"]) is not cached._stopping(["</tool_call>"])  # noqa: SLF001
    # a client made around the same tokenizer (RL: one per rollout call) reuses them
    from pipelines.llm.local import TransformersChatClient

    again = TransformersChatClient.from_model(cached.lm, cached.tokenizer, name="policy")
    assert again._stopping(["</answer>"]) is cached._stopping(["</answer>"])  # noqa: SLF001
