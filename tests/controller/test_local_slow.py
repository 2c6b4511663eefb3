"""The real MiniLM weights (deselected by default: `pytest -m slow tests/controller`)."""

from __future__ import annotations

import logging
import time

import pytest

from controller.client import SystemOneClient
from controller.families import family_questions
from controller.local import LocalBackend
from tests.controller.conftest import pair_state

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_backend():  # type: ignore[no-untyped-def]
    b = LocalBackend.load(runtime="onnx", threads=2)
    yield b
    b.close()


def test_default_load_without_trained_model_is_untrained_and_loud(monkeypatch, caplog, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import controller.local

    monkeypatch.setattr(controller.local, "DEFAULT_MODEL_DIR", tmp_path / "missing")
    with caplog.at_level(logging.WARNING, logger="controller.local"):
        b = LocalBackend.load(runtime="torch")
    assert "UNTRAINED" in caplog.text and b.info.name == "jevmem-minilm-untrained"


def test_real_model_answers_are_invariant(real_backend) -> None:  # type: ignore[no-untyped-def]
    client = SystemOneClient(real_backend)
    questions = family_questions("pair")
    base = client.system_one(pair_state(), questions)
    reordered = client.system_one(pair_state(), dict(reversed(list(questions.items()))))
    alone = client.system_one(pair_state(), {"other_name": questions["temporal"]})
    batched = client.system_one_batch([({"observation": "hello"}, family_questions("typing")), (pair_state(), questions)])[1]
    for key in questions:
        for other in (reordered.answers[key], batched.answers[key]):
            a, b = base.answers[key].model_dump(), other.model_dump()
            for field in ("noul", "confidence"):
                if field in a:
                    assert abs(a[field] - b[field]) <= 1e-5
    for name, p in base.answers["temporal"].probabilities.items():
        assert abs(p - alone.answers["other_name"].probabilities[name]) <= 1e-5


def test_real_model_answers_255_options_well_under_10_s(real_backend) -> None:  # type: ignore[no-untyped-def]
    criteria = {f"option_{i}": f"the description of option number {i}, a short phrase" for i in range(255)}
    started = time.perf_counter()
    r = SystemOneClient(real_backend).system_one(pair_state(), {"q": {"type": "choice", "instructions": "Which fits?", "criteria": criteria}})
    elapsed = time.perf_counter() - started
    assert len(r.answers["q"].probabilities) == 255 and elapsed < 10.0, elapsed
    print(f"255 options: {elapsed:.2f} s")
