"""An on-disk embedding cache keyed by model and text hash, so reruns of the harness skip MiniLM.

Vectors live in `$JEVMEM_CACHE/embeddings/<model key>.npz` (default `~/.cache/jevmem`); the file is rewritten
atomically once `autosave` new vectors are pending and on `flush()`. The wrapper is itself an `Embedder`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from controller.embedding import Embedder, is_minilm
from controller.errors import BackendUnavailableError

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    return Path(os.environ.get("JEVMEM_CACHE") or Path.home() / ".cache" / "jevmem")


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def model_key(embedder: Embedder) -> str:
    """A file-safe name for the embedder; MiniLM is keyed by its weight file's size and mtime too."""
    parts = [getattr(embedder, "name", type(embedder).__name__), str(getattr(embedder, "dim", ""))]
    if is_minilm(parts[0]):
        try:
            from controller.embedding import base_model_path

            path = getattr(embedder, "_path", None) or base_model_path()
            weights = Path(path) / "model.safetensors"
            stat = weights.stat()
            parts.append(hashlib.sha256(f"{weights}:{stat.st_size}:{int(stat.st_mtime)}".encode()).hexdigest()[:12])
        except (OSError, BackendUnavailableError) as error:
            log.debug("no weight identity for the cache key: %s", error)
            parts.append("unknown")
    return re.sub(r"[^A-Za-z0-9_.-]", "_", "-".join(parts))


class CachedEmbedder:
    """Wraps an embedder; equal texts are embedded once per model, across processes."""

    def __init__(
        self, inner: Embedder, directory: str | Path | None = None, *, key: str | None = None, autosave: int = 256
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self._key = key or model_key(inner)
        self._file = Path(directory or cache_dir()) / "embeddings" / f"{self._key}.npz"
        self._lock = threading.Lock()
        self._vectors: dict[str, np.ndarray] | None = None
        self._autosave = autosave
        self._pending = 0
        self.hits = 0
        self.misses = 0

    @property
    def path(self) -> Path:
        return self._file

    def _load(self) -> dict[str, np.ndarray]:
        if self._vectors is None:
            self._vectors = {}
            if self._file.exists():
                try:
                    with np.load(self._file) as data:
                        keys, vecs = data["keys"], data["vectors"]
                    self._vectors = {str(k): v for k, v in zip(keys, vecs)}
                except (OSError, KeyError, ValueError) as error:
                    log.warning("ignoring unreadable embedding cache %s: %s", self._file, error)
        return self._vectors

    def flush(self) -> None:
        """Write pending vectors to disk."""
        with self._lock:
            if self._pending:
                self._save()

    def _save(self) -> None:
        vectors = self._load()
        self._file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._file.with_suffix(f".{os.getpid()}.tmp.npz")
        keys = np.array(list(vectors), dtype="U32")
        mat = np.stack(list(vectors.values())).astype(np.float32) if vectors else np.zeros((0, self.dim), np.float32)
        np.savez(tmp, keys=keys, vectors=mat)
        os.replace(tmp, self._file)
        self._pending = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            vectors = self._load()
            keys = [text_key(t) for t in texts]
            missing = sorted({k: t for k, t in zip(keys, texts) if k not in vectors}.items())
            self.hits += len(texts) - len(missing)
            self.misses += len(missing)
            if missing:
                fresh = self.inner.embed([t for _, t in missing])
                self.dim = int(fresh.shape[1])
                for (k, _), v in zip(missing, fresh):
                    vectors[k] = v
                self._pending += len(missing)
                if self._pending >= self._autosave:
                    self._save()
            if not texts:
                return np.zeros((0, self.dim), dtype=np.float32)
            return np.stack([vectors[k] for k in keys]).astype(np.float32)
