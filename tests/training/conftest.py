"""Tiny-model fixtures for training tests: a 2-layer, 32-wide BERT over the real tokenizer's vocabulary.

Built once per session and copied per test; nothing reads the real MiniLM weights.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest

from tests.conftest import TINY


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> Path:  # type: ignore[no-untyped-def]
    """A tiny 'base model' directory laid out like the installed MiniLM (config, weights, tokenizer)."""
    import torch
    from transformers import BertConfig, BertModel

    from controller.embedding import base_model_path

    path = tmp_path_factory.mktemp("tiny-base")
    torch.manual_seed(1)
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, **TINY), add_pooling_layer=False).save_pretrained(str(path))
    shutil.copy(base_model_path() / "tokenizer.json", path / "tokenizer.json")
    return path


@pytest.fixture(scope="session")
def _tiny_model(tiny_base):  # type: ignore[no-untyped-def]
    from controller.torch_model import PackedCrossEncoder

    return PackedCrossEncoder.from_base(tiny_base, seed=0)


@pytest.fixture()
def tiny_model(_tiny_model):  # type: ignore[no-untyped-def]
    return copy.deepcopy(_tiny_model)


@pytest.fixture(scope="session")
def toy_examples():  # type: ignore[no-untyped-def]
    """A small, learnable decision set: synthetic typing / routing / pair data (all splits)."""
    from data.splits import SplitPlan
    from data.synthetic import SyntheticConfig, generate

    return generate(SyntheticConfig(per_family=40, seed=3), SplitPlan(), names=["typing", "routing", "temporal"])
