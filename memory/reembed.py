"""Convert a SQLite memory store to another embedder: every node's text is embedded again and the store records
the new embedder's name, in one transaction (a crash leaves the old vectors and name; nothing is half converted).

    result = reembed(Path("mem.db"), create_embedder("minilm-tuned"))

    jevmem reembed --db mem.db --embedder minilm-tuned

Only the vectors change: node texts, edges, link states and the text index are untouched, so the graph the write
path built stays as it was. The embedding dimension must stay the same (a store records its dimension).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from controller.embedding import Embedder
from memory.store import SQLiteStore, StoreError


@dataclass(frozen=True)
class ReembedResult:
    path: str
    nodes: int
    before: str | None  # the embedder the store recorded (None: an old store that recorded none)
    after: str
    seconds: float
    changed: bool  # False: the store already had this embedder and `force` was off


def reembed(path: str | Path, embedder: Embedder, *, batch_size: int = 256, force: bool = False) -> ReembedResult:
    """Re-embed every node of the store at `path` with `embedder`. A store already on `embedder` is left as it is
    unless `force`. Raises `StoreError` when there is no store file and `StoreConfigError` on another dimension."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    path = Path(path)
    if not path.is_file():
        raise StoreError(f"no memory store at {path}")
    started = time.perf_counter()
    with SQLiteStore(path, dim=embedder.dim, embedder=None) as store:
        before = store.embedder  # opened without a name, the store reports the one it recorded
        nodes = store.count_nodes()
        if before == embedder.name and not force:
            return ReembedResult(str(path), nodes, before, embedder.name, round(time.perf_counter() - started, 3), False)
        seqs, texts = [], []
        for node in store.iter_nodes():
            seqs.append(node.seq)
            texts.append(node.content)
        chunks = [embedder.embed(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]
        matrix = np.concatenate(chunks) if chunks else np.zeros((0, embedder.dim), np.float32)
        store.replace_embeddings(seqs, matrix, embedder.name)
    return ReembedResult(str(path), len(seqs), before, embedder.name, round(time.perf_counter() - started, 3), True)
