"""Generation from explicit key/value states: prompts prefilled from stored prefixes, then decoded from
a static cache. The local client's fast path (``TransformersChatClient`` with ``prefix_cache``).

Why not plain ``generate``: it runs every prompt whole, although agent prompts share a system prompt and
each round repeats the last one (``PrefixStore`` keeps those states), and its ``DynamicCache`` copies
itself whole at every step (two thirds of a decoding step at batch 32 on a CPU). So a batch is prefilled
here, reusing stored states up to the last message boundary a prompt shares with one of them, and
``generate`` then continues from a ``StaticCache`` holding every prompt's states but its last token's, in
chunks of steps between which rows that ended leave the batch.

``KVGeneration`` is built per batch around the client's model as it is then (a caller may swap the model
or tokenizer between batches); what it keeps across batches lives in the store and the stats it is given.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from pipelines.llm.prefix_store import ANCHOR_MIN_TOKENS, KV, PrefixStore

Row = tuple[list[int], KV | None, int]  # tokens still to compute, the stored states before them, their count


def fits_static_cache(config: Any) -> bool:
    """Whether a plain static cache fits a model of this config (full attention in every layer, decoder only)."""
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer

    if getattr(config, "is_encoder_decoder", False):
        return False
    try:
        probe = StaticCache(config=config, max_cache_len=1)
        return all(type(layer) is StaticLayer for layer in probe.layers)
    except Exception:  # noqa: BLE001 - an architecture the generic cache does not know
        return False


def prefill_groups(lengths: list[int], max_rows: int) -> list[list[int]]:
    """Rows to run together (their indices), by length: at most ``max_rows`` rows, and at most a quarter of
    a group's positions padding."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    for index in order:
        group = groups[-1] if groups else None
        if group is not None and len(group) < max_rows:
            total = sum(lengths[i] for i in group) + lengths[index]
            if lengths[group[0]] * (len(group) + 1) <= 1.25 * total:
                group.append(index)
                continue
        groups.append([index])
    return groups


class KVGeneration:
    """Prefill and decoding of one batch with ``lm`` (eval mode, under ``inference_mode``).

    ``stats`` (the client's ``prefill_stats``, ``generation_counters``) counts the prefill's prompt positions
    (computed, anchors included; reused from the store; anchors) and seconds, batches and rows, then the
    decoding's seconds, steps and rows x steps. Split points depend only on the prompts and the store, not on
    the batch."""

    def __init__(self, lm: Any, pad_token_id: int, device: str, stats: dict[str, float]) -> None:
        self.lm = lm
        self.pad = pad_token_id
        self.device = device
        self.stats = stats

    def extend(self, tokens: list[int], kv: KV | None, start: int) -> KV:
        """The states of ``tokens`` placed after the first ``start`` positions of ``kv``: one forward at
        batch 1 through a ``DynamicCache`` holding those positions. Returns all ``start + len(tokens)``."""
        import torch
        from transformers import DynamicCache

        cache = (DynamicCache(ddp_cache_data=[(k[:, :, :start], v[:, :, :start]) for k, v in kv])
                 if kv is not None and start else DynamicCache())
        if tokens:
            self.lm(input_ids=torch.tensor([tokens], device=self.device), past_key_values=cache, use_cache=True,
                    position_ids=torch.arange(start, start + len(tokens), device=self.device)[None],
                    logits_to_keep=1)
            self.stats["computed"] += len(tokens)
        return [(layer.keys, layer.values) for layer in cache.layers]

    def extend_group(self, items: list[Row]) -> list[KV]:
        """``extend`` for several rows in one forward: their stored states right-aligned before a
        common column, their tokens right-aligned after it, the gaps masked out, and each row's
        positions numbered on from its own states."""
        import torch
        from transformers import DynamicCache

        if len(items) == 1:
            return [self.extend(*items[0])]
        pad = self.pad
        width = max(start for _, _, start in items)
        length = max(len(tokens) for tokens, _, _ in items)
        input_ids = [[pad] * (length - len(tokens)) + tokens for tokens, _, _ in items]
        mask = [[0] * (width - start) + [1] * start + [0] * (length - len(tokens)) + [1] * len(tokens)
                for tokens, _, start in items]
        positions = [[0] * (length - len(tokens)) + list(range(start, start + len(tokens)))
                     for tokens, _, start in items]
        cache = DynamicCache()
        if width:
            some = next(kv for _, kv, start in items if kv is not None and start)
            sample = some[0][0]
            data = []
            for layer in range(len(some)):
                keys = sample.new_zeros((len(items), sample.shape[1], width, sample.shape[3]))
                values = torch.zeros_like(keys)
                for index, (_, kv, start) in enumerate(items):
                    if kv is not None and start:
                        keys[index, :, width - start:] = kv[layer][0][0, :, :start]
                        values[index, :, width - start:] = kv[layer][1][0, :, :start]
                data.append((keys, values))
            cache = DynamicCache(ddp_cache_data=data)
        device = self.device
        self.lm(input_ids=torch.tensor(input_ids, device=device), attention_mask=torch.tensor(mask, device=device),
                position_ids=torch.tensor(positions, device=device), past_key_values=cache, use_cache=True,
                logits_to_keep=1)
        self.stats["computed"] += sum(len(tokens) for tokens, _, _ in items)
        out = []
        for index, (tokens, kv, start) in enumerate(items):
            row = []
            for layer, cached in enumerate(cache.layers):
                keys = cached.keys[index:index + 1, :, width + length - len(tokens):]
                values = cached.values[index:index + 1, :, width + length - len(tokens):]
                if kv is not None and start:
                    keys = torch.cat([kv[layer][0][:, :, :start], keys], dim=2)
                    values = torch.cat([kv[layer][1][:, :, :start], values], dim=2)
                else:
                    keys, values = keys.clone(), values.clone()
                row.append((keys, values))
            out.append(row)
        return out

    def prefill(self, prompts: Sequence[list[int]], boundaries: Sequence[list[int]], max_new: int,
                store: PrefixStore, *, group: int) -> Any:
        """A ``StaticCache`` for the batch (left-padded to the longest prompt, room for ``max_new`` more
        tokens) holding every prompt's states but its last token's, which ``generate`` then runs.

        Each prompt reuses the store up to its last message boundary within the longest stored common
        prefix; a first message (``ANCHOR_MIN_TOKENS`` or more) with no stored match is computed and
        stored on its own first, so that every later prompt shares it. The remaining tokens run in
        groups of similar length (``group`` rows at most), and each conversation up to its last
        boundary is stored for its next round."""
        import torch
        from transformers import StaticCache

        start = time.perf_counter()
        self.stats["batches"] += 1
        self.stats["rows"] += len(prompts)
        todo: list[Row] = []
        for ids, bounds in zip(prompts, boundaries, strict=True):
            tokens = np.asarray(ids, dtype=np.int64)
            common, entry = store.match(tokens)
            limit = min(common, len(ids) - 1)
            cached = max((b for b in bounds if b <= limit), default=0)
            kv = entry.kv if cached and entry is not None else None
            first = next((b for b in bounds if b >= ANCHOR_MIN_TOKENS), None)
            if first is not None and cached < first < len(ids):
                # the first message (the system prompt) on its own, for every later prompt to share
                anchor_start = time.perf_counter()
                kv, cached = self.extend(ids[:first], None, 0), first
                store.add(tokens[:first], kv)
                self.stats["anchor"] += first
                self.stats["anchor_seconds"] += time.perf_counter() - anchor_start
            self.stats["reused"] += cached
            todo.append((ids[cached:len(ids) - 1], kv, cached))
        rows: list[KV] = [[] for _ in prompts]
        for index, (tokens, kv, cached) in enumerate(todo):
            if not tokens:
                rows[index] = self.extend([], kv, cached)
        for members in prefill_groups([len(tokens) for tokens, _, _ in todo], group):
            members = [i for i in members if todo[i][0]]
            if members:
                for index, row in zip(members, self.extend_group([todo[i] for i in members]), strict=True):
                    rows[index] = row
        for ids, bounds, row, (_, _, cached) in zip(prompts, boundaries, rows, todo, strict=True):
            last = max((b for b in bounds if b < len(ids)), default=0)
            if last > cached:  # this conversation so far, for its next round
                store.add(np.asarray(ids[:last], dtype=np.int64), [(k[:, :, :last], v[:, :, :last]) for k, v in row])
        width = max(len(p) for p in prompts)
        cache = StaticCache(config=self.lm.config, max_cache_len=width + max_new)
        sample = next(row for row in rows if row)[0][0]
        for layer in range(len(cache.layers)):
            keys = sample.new_zeros((len(prompts), sample.shape[1], width - 1, sample.shape[3]))
            values = torch.zeros_like(keys)
            for index, (ids, row) in enumerate(zip(prompts, rows, strict=True)):
                if len(ids) > 1:
                    keys[index, :, width - len(ids):] = row[layer][0][0]
                    values[index, :, width - len(ids):] = row[layer][1][0]
                    row[layer] = None  # copied: freed now unless the store keeps it (the batch's states exist once)
            cache.update(keys, values, layer)
            del keys, values
        self.stats["prefill_seconds"] += time.perf_counter() - start
        return cache

    def decode(self, input_ids: Any, attention: Any, cache: Any, options: dict[str, Any], *,
               ends: Collection[int], criteria: Any, chunk: int) -> list[list[int]]:
        """``_decode_chunks``, timed into ``stats["decode_seconds"]``."""
        start = time.perf_counter()
        try:
            return self._decode_chunks(input_ids, attention, cache, options, ends=ends, criteria=criteria,
                                       chunk=chunk)
        finally:
            self.stats["decode_seconds"] += time.perf_counter() - start

    def _decode_chunks(self, input_ids: Any, attention: Any, cache: Any, options: dict[str, Any], *,
                       ends: Collection[int], criteria: Any, chunk: int) -> list[list[int]]:
        """``generate`` from a filled cache, ``chunk`` steps at a time: between chunks, rows that have
        ended (a token of ``ends``, or ``criteria``: a stop string) are left out of the cache and the batch
        (when the steps that saves outweigh copying the cache, about two steps' worth), so that the
        batch does not run on at full width for its longest row. A row's tokens after it ended are
        dropped (``generate`` would have padded them)."""
        import torch
        from transformers import StaticCache

        total = options["max_new_tokens"]
        rows = input_ids.shape[0]
        chunk = total if rows == 1 or chunk <= 0 else chunk
        out: list[list[int]] = [[] for _ in range(rows)]
        ended = [False] * rows
        active = list(range(rows))  # the batch row of each row of ``ids``
        end_ids = torch.tensor(sorted(ends), device=input_ids.device)
        ids, mask, done = input_ids, attention, 0
        while True:
            steps = min(chunk, total - done)
            output = self.lm.generate(input_ids=ids, attention_mask=mask, past_key_values=cache, disable_compile=True,
                                      **{**options, "max_new_tokens": steps})
            new = output[:, ids.shape[1]:]
            self.stats["decode_steps"] += new.shape[1]
            self.stats["row_steps"] += new.shape[0] * new.shape[1]  # ended rows still in the batch included
            for row, tokens in zip(active, new.tolist(), strict=True):
                if not ended[row]:
                    out[row].extend(tokens)
            done += new.shape[1]
            if done >= total or new.shape[1] < steps:  # generate stops early when every row has ended
                return out
            finished = torch.isin(output[:, -1], end_ids)
            if criteria is not None:
                finished |= criteria(output, None).to(finished.device)
            for j, row in enumerate(active):
                ended[row] = ended[row] or bool(finished[j])
            keep = [j for j, row in enumerate(active) if not ended[row]]
            if not keep:
                return out
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], new.shape[1]))], dim=-1)
            if (len(active) - len(keep)) * (total - done) >= 2 * len(active):  # saves more than its copy costs
                index = torch.tensor(keep, device=output.device)
                length = output.shape[1] - 1  # every token's states but the last one's
                smaller = StaticCache(config=self.lm.config, max_cache_len=cache.layers[0].max_cache_len)
                for layer_index, layer in enumerate(cache.layers):
                    smaller.update(layer.keys[index, :, :length], layer.values[index, :, :length], layer_index)
                    layer.keys = layer.values = None  # copied: the batch's states exist once, not twice
                cache, ids, mask = smaller, output[index], mask[index]
                active = [active[j] for j in keep]
            else:
                ids = output
