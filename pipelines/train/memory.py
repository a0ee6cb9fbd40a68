"""Memory bounds of training (SFT and RL stages 1/3): the fused LM head's tile and what is left behind.

TRL's fused LM head (``ChunkedLogProbFunction``, used by ``ThinkWeightedSFTTrainer`` and ``GRPOTrainer``)
never materialises the ``(tokens, 49k vocabulary)`` logits: it projects ``TOKEN_CHUNK_SIZE`` tokens x
32,768 vocabulary columns at a time. On a GPU the tile is folded in place by Triton kernels, but on a CPU
each tile goes through ~4 (forward) and ~9 (backward) temporaries in float32: with TRL's 4,096 tokens per
tile, 4096 x 32768 x 4 B = 512 MiB each, 2-4.5 GiB at the peak of a step. ``fused_logprob_tokens`` sets
the tile's token count for a block of code (params ``sft.logprob_chunk_tokens``,
``rl.<stage>.logprob_chunk_tokens``). Tokens are independent rows of the tile, so the per-token values
are the same computation; only the accumulation order of an LM-head weight gradient changes (fp32).

``release_memory`` ends a training stage: a model patched by TRL (``model.forward`` bound to the model,
PEFT wrappers, the trainer's callbacks holding the trainer) sits in reference cycles, which only the cyclic
garbage collector frees, and glibc keeps freed heap pages mapped until ``malloc_trim``; in one ``omne run``
process the next stage would otherwise start on top of the previous one's memory.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
from collections.abc import Iterator

TRL_TOKEN_CHUNK_SIZE = 4096  # TRL's own value of trl.kernels.chunked_logprob.TOKEN_CHUNK_SIZE


def logprob_tile_bytes(tokens: int, vocab_chunk: int = 32768, copies: int = 9) -> int:
    """Bytes of the float32 temporaries of one fused-LM-head tile on a CPU (``copies`` of tokens x vocab_chunk;
    ~9 in the backward pass, the peak)."""
    return tokens * vocab_chunk * 4 * copies


@contextlib.contextmanager
def fused_logprob_tokens(tokens: int | None) -> Iterator[None]:
    """Within the block, TRL's fused LM head projects at most ``tokens`` tokens per tile (None: TRL's default)."""
    if tokens is None:
        yield
        return
    from trl.kernels import chunked_logprob

    before = chunked_logprob.TOKEN_CHUNK_SIZE
    chunked_logprob.TOKEN_CHUNK_SIZE = int(tokens)
    try:
        yield
    finally:
        chunked_logprob.TOKEN_CHUNK_SIZE = before


def release_memory() -> None:
    """Collect reference cycles (trainers, patched models) and hand freed heap pages back to the OS."""
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    name = ctypes.util.find_library("c")
    if name:
        try:
            libc = ctypes.CDLL(name)
            trim = getattr(libc, "malloc_trim", None)  # glibc only
            if trim is not None:
                trim(0)
        except OSError:  # pragma: no cover - no libc to load
            pass
