"""Helpers shared by the store implementations: validation, normalisation and the FTS query builder."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np

from controller.families import memory_text
from controller.lexical import index_tokens
from memory.store.errors import EmbeddingError
from memory.types import Node


def as_embedding(vector: np.ndarray, dim: int) -> np.ndarray:
    """A float32 copy of `vector`, checked to be finite and of shape (dim,)."""
    arr = np.asarray(vector, dtype=np.float32)
    if arr.ndim == 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.shape != (dim,):
        raise EmbeddingError(f"embedding must have shape ({dim},), got {arr.shape}", tuple(arr.shape))
    if not np.all(np.isfinite(arr)):
        raise EmbeddingError("embedding has non-finite values", tuple(arr.shape))
    return arr.copy()


def normalised_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, computed in float64 and returned as float32; zero rows stay zero.

    Every path (one vector at a time or a bulk rebuild) goes through here, so rebuilt indexes are bit-identical.
    """
    m = np.asarray(matrix, dtype=np.float64)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return np.divide(m, norms, out=np.zeros_like(m), where=norms > 0).astype(np.float32)


def normalised(vector: np.ndarray) -> np.ndarray:
    """Unit-length float32 copy (a zero vector stays zero, so its cosine with anything is 0)."""
    return normalised_rows(np.asarray(vector).reshape(1, -1))[0]


def entity_key(entity: str) -> str:
    """The entity channel matches case-insensitively and ignores surrounding blanks."""
    return entity.strip().casefold()


def entity_keys(node: Node) -> list[str]:
    return sorted({entity_key(e) for e in node.entities if entity_key(e)})


def index_text(content: str, when: datetime | None = None) -> str:
    """What the lexical index holds for a node: the stemmed tokens (`index_tokens`) of its dated text
    (`[8 May 2023] Speaker: text`, as the controller sees it), so questions naming a month or a year match."""
    return " ".join(index_tokens(memory_text(content, when)))


def node_time(node: Node) -> datetime | None:
    return node.event_time or node.observed_at


def time_key(when: datetime | None) -> str | None:
    """A text key that sorts like the time: UTC for an aware time, naive times taken as they are (as
    `write_path.time_of` compares them), microseconds always written so every key has the same width."""
    if when is None:
        return None
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc).replace(tzinfo=None)
    return when.isoformat(timespec="microseconds")


def query_tokens(query: str) -> list[str]:
    """Distinct query terms (`index_tokens`, as the index holds them) in first-seen order."""
    return list(dict.fromkeys(index_tokens(query)))


def fts_query(query: str) -> str:
    """An FTS5 MATCH expression built only from quoted `index_tokens` terms joined by OR.

    Tokens are `[a-z0-9]+` runs, so quoting makes every one a plain phrase: no FTS5 operator, column filter,
    prefix or NEAR group in the user's text is ever interpreted. Empty string means "no query".
    """
    return " OR ".join(f'"{t}"' for t in query_tokens(query))
