"""Encoding an episode for the trainer: the token ids the model saw, and which of them it wrote.

Each episode becomes prompt ids (system + user) and completion ids (every later turn), with ``env_mask`` 0 on
everything the environment wrote — tool responses, chat-template wrappers, forced prefixes — so that only the
model's own tokens carry policy gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from pipelines.agent.trajectory import Trajectory


class EncodedRollout(BaseModel):
    """One episode as the trainer sees it: ids, which completion tokens the model wrote, where each turn is."""

    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]  # 1: written by the model (policy loss), 0: written by the environment or the template
    turn_spans: list[tuple[int, int]]  # [start, end) in completion_ids of each assistant turn's model tokens
    # (empty for a turn in which the model wrote nothing)
    truncated: bool = False


def chat_token_ids(tokenizer: Any, messages: list[dict[str, str]], *, generation_prompt: bool) -> list[int]:
    """``messages`` rendered by the tokenizer's chat template and tokenised as the model reads them."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _model_char_spans(content: str, injected: Sequence[str], prefix: str) -> list[tuple[int, int]]:
    """Character spans of an assistant message that the model generated: everything except the forced
    prefix and the environment's injected responses (search protocol: responses inside the reasoning)."""
    taken = [(0, len(prefix))] if prefix and content.startswith(prefix) else []
    cursor = 0
    for text in injected:
        at = content.find(text, cursor)
        if at >= 0:
            taken.append((at, at + len(text)))
            cursor = at + len(text)
    spans, start = [], 0
    for begin, end in sorted(taken):
        if begin > start:
            spans.append((start, begin))
        start = max(start, end)
    if start < len(content):
        spans.append((start, len(content)))
    return spans


def encode_trajectory(trajectory: Trajectory, tokenizer: Any, *, assistant_prefix: str = "",
                      inline_response: Any = None, max_length: int | None = None) -> EncodedRollout:
    """Tokenise an episode the way the model saw it, turn by turn, marking the model's own tokens.

    Each message boundary comes from rendering ``messages[:k]`` with the chat template, so the template's
    wrappers (``<|im_start|>assistant``, ``<|im_end|>``) are environment tokens; inside an assistant
    message the model's tokens are found through the tokenizer's character offsets.
    """
    messages = trajectory.messages
    prompt_ids = chat_token_ids(tokenizer, messages[:2], generation_prompt=True)
    ids: list[int] = []
    mask: list[int] = []
    spans: list[tuple[int, int]] = []
    previous = prompt_ids
    injected = [inline_response(call.response) for call in trajectory.tool_calls] if inline_response else []
    for k in range(2, len(messages)):
        message = messages[k]
        following = k + 1 < len(messages) and messages[k + 1]["role"] == "assistant"
        rendered = chat_token_ids(tokenizer, messages[:k + 1],
                                  generation_prompt=message["role"] != "assistant" or following)
        if rendered[:len(previous)] != previous:  # a template that re-renders earlier turns: fall back to the tail
            common = next((i for i, (a, b) in enumerate(zip(rendered, previous, strict=False)) if a != b),
                          min(len(rendered), len(previous)))
            del ids[max(0, common - len(prompt_ids)):], mask[max(0, common - len(prompt_ids)):]
        else:
            common = len(previous)
        segment = rendered[common:]
        segment_mask = [0] * len(segment)
        if message["role"] == "assistant":
            segment_mask = _assistant_mask(tokenizer, segment, message["content"], injected, assistant_prefix)
            model_positions = [i for i, m in enumerate(segment_mask) if m]
            offset = len(ids)
            # one span per assistant turn, empty when the model wrote nothing in it: span t is the turn that
            # per-turn rewards call t (credit: turn)
            spans.append((offset + model_positions[0], offset + model_positions[-1] + 1) if model_positions
                         else (offset + len(segment), offset + len(segment)))
        ids += segment
        mask += segment_mask
        previous = rendered
    truncated = False
    if max_length is not None and len(prompt_ids) + len(ids) > max_length:
        keep = max(0, max_length - len(prompt_ids))
        ids, mask, truncated = ids[:keep], mask[:keep], True
        spans = [(a, min(b, keep)) for a, b in spans if a < keep]
    return EncodedRollout(prompt_ids=prompt_ids, completion_ids=ids, env_mask=mask, turn_spans=spans,
                          truncated=truncated)


def _assistant_mask(tokenizer: Any, segment: list[int], content: str, injected: Sequence[str],
                    prefix: str) -> list[int]:
    """1 on the segment's tokens that fall inside the model-written characters of ``content``."""
    text = tokenizer.decode(segment, skip_special_tokens=False)
    at = text.find(content)
    if at < 0:  # the template changed the content (e.g. stripped it): credit the whole segment but the wrappers
        return [0 if t in tokenizer.all_special_ids else 1 for t in segment]
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if encoded["input_ids"] != segment:
        return [0 if t in tokenizer.all_special_ids else 1 for t in segment]
    model_spans = [(at + a, at + b) for a, b in _model_char_spans(content, injected, prefix)]
    return [int(any(a < end and start < b for a, b in model_spans) and end > start)
            for start, end in encoded["offset_mapping"]]
