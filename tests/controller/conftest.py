"""Tiny-model fixtures for the local controller: a 2-layer, 32-wide BERT over the real tokenizer's vocabulary.

Models are built once per session and copied per test; the ONNX cache lives in a session temp dir.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest

from tests.conftest import TINY


@pytest.fixture(scope="session")
def tiny_config(tokenizer):  # type: ignore[no-untyped-def]
    from transformers import BertConfig

    return BertConfig(vocab_size=tokenizer.vocab_size, **TINY)


@pytest.fixture(scope="session")
def _tiny_model(tiny_config):  # type: ignore[no-untyped-def]
    from controller.torch_model import PackedCrossEncoder

    return PackedCrossEncoder.from_config(tiny_config, seed=0)


@pytest.fixture()
def tiny_model(_tiny_model):  # type: ignore[no-untyped-def]
    return copy.deepcopy(_tiny_model)


@pytest.fixture(scope="session")
def tiny_base_dir(tmp_path_factory: pytest.TempPathFactory, tiny_config) -> Path:  # type: ignore[no-untyped-def]
    """A tiny 'base model' directory laid out like the installed MiniLM (config, weights, tokenizer)."""
    from transformers import BertModel

    from controller.embedding import base_model_path

    path = tmp_path_factory.mktemp("tiny-base")
    import torch

    torch.manual_seed(1)
    BertModel(tiny_config, add_pooling_layer=False).save_pretrained(str(path))
    shutil.copy(base_model_path() / "tokenizer.json", path / "tokenizer.json")
    return path


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory: pytest.TempPathFactory, _tiny_model) -> Path:  # type: ignore[no-untyped-def]
    from controller.artifacts import ArtifactMeta, save_artifact

    path = tmp_path_factory.mktemp("tiny-artifact")
    save_artifact(copy.deepcopy(_tiny_model), path, ArtifactMeta(name="tiny", version="0.0.1", description="tiny test model"))
    return path


def pair_state() -> dict:
    return {
        "memory_a": {"id": "m1", "content": "Caroline went to the LGBTQ support group on 7 May 2023.", "timestamp": "2023-05-08T13:56:00", "entities": ["Caroline"]},
        "memory_b": {"id": "m2", "content": "Caroline is researching adoption agencies.", "timestamp": "2023-05-25T10:12:00", "entities": ["Caroline"]},
    }
