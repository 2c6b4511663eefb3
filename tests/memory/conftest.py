"""Fixtures shared by the LoCoMo evaluation tests: the tiny LoCoMo-shaped file and its parsed conversations."""

from __future__ import annotations

from pathlib import Path

import pytest

from data.locomo import Conversation, load_locomo
from tests.memory.eval_fixtures import write_locomo


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_locomo(tmp_path_factory.mktemp("locomo"))


@pytest.fixture(scope="module")
def convs(files: tuple[Path, Path]) -> list[Conversation]:
    return load_locomo(files[0])
