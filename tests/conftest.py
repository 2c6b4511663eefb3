"""Shared test settings: offline always; nothing may reach a hub."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# A 2-layer, 32-wide BERT over the real tokenizer's vocabulary: the tiny model every model test builds.
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37)


@pytest.fixture(scope="session")
def tokenizer():  # type: ignore[no-untyped-def]
    from controller.template import get_tokenizer

    return get_tokenizer()


@pytest.fixture(scope="session", autouse=True)
def jevmem_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Graphs and embeddings built by tests go to a temp cache, never to ~/.cache or the repo."""
    path = tmp_path_factory.mktemp("jevmem-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("JEVMEM_CACHE", str(path))
    yield path
    mp.undo()
