"""Hostile or careless input to the controller: every failure is a domain error, never a raw traceback or a
silently wrong answer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from controller import SystemOneClient
from controller.backend import BackendRequest
from controller.errors import ArtifactError, BackendError, InvalidRequestError
from controller.questions import MAX_DEPTH, normalize_questions, validate_state

NOUL = {"q": {"type": "noul", "instructions": "Is it?"}}


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def _cyclic() -> dict[str, Any]:
    value: dict[str, Any] = {"a": []}
    value["a"].append(value)
    return value


@pytest.fixture(scope="module")
def client():  # type: ignore[no-untyped-def]
    with SystemOneClient("heuristic") as c:
        yield c


def test_nesting_up_to_the_limit_is_accepted() -> None:
    assert validate_state(_nested(MAX_DEPTH)) == _nested(MAX_DEPTH)
    assert MAX_DEPTH >= 64  # never stricter than the server's JSON body limit (serving.wire.MAX_NESTING)


@pytest.mark.parametrize("make", [lambda: _nested(MAX_DEPTH + 1), lambda: _nested(5000), _cyclic], ids=["limit+1", "5000", "cycle"])
def test_a_too_deep_or_cyclic_state_is_an_invalid_request(client, make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidRequestError, match=f"nested deeper than {MAX_DEPTH}") as info:
        client.system_one(make(), NOUL)
    assert info.value.loc[0] == "state"


@pytest.mark.parametrize("make", [lambda: _nested(5000), _cyclic], ids=["5000", "cycle"])
@pytest.mark.parametrize("where", ["instructions", "criteria"])
def test_too_deep_or_cyclic_question_content_is_an_invalid_request(client, make, where) -> None:  # type: ignore[no-untyped-def]
    question = {"type": "noul", "instructions": make()} if where == "instructions" else {"type": "choice", "criteria": {"a": make(), "b": None}}
    with pytest.raises(InvalidRequestError, match=f"nested deeper than {MAX_DEPTH}") as info:
        client.system_one("state", {"q": question})
    assert info.value.loc[:2] == ("questions", "q")


async def test_the_async_client_refuses_a_cycle_the_same_way() -> None:
    from controller import AsyncSystemOneClient

    async with AsyncSystemOneClient("heuristic") as c:
        with pytest.raises(InvalidRequestError, match="nested deeper"):
            await c.system_one(_cyclic(), NOUL)


# ------------------------------------------------------------------------------- non-finite model output
def _request() -> BackendRequest:
    wire = {
        "n": {"type": "noul", "instructions": "Is it?"},
        "c": {"type": "choice", "criteria": {"a": None, "b": None}},
        "s": {"type": "score", "criteria": ["lo", "mid", "hi"]},
    }
    return BackendRequest("hello", tuple(normalize_questions(wire).values()))


def _nan_heads(model):  # type: ignore[no-untyped-def]
    import torch

    with torch.no_grad():
        model.heads.weight.fill_(float("nan"))
    return model


def test_a_torch_model_with_non_finite_weights_is_refused_at_load(tiny_model) -> None:  # type: ignore[no-untyped-def]
    from controller.local import LocalBackend

    # Damaged heads in an artifact without calibration.json (so no hash check stops it first): the ONNX path
    # refuses them in its parity run; the torch path must not serve 0.5 for every Noul instead.
    with pytest.raises(ArtifactError, match="non-finite"):
        LocalBackend(_loaded(_nan_heads(tiny_model)), runtime="torch")


def test_non_finite_logits_at_answer_time_are_a_backend_error_not_a_coin_flip(tiny_artifact, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from controller.local import LocalBackend

    backend = LocalBackend.load(tiny_artifact, runtime="torch", threads=1)
    try:
        good = backend.answer([_request()])[0]
        assert all(np.isfinite(p).all() for p in good.probabilities)
        real = backend._run
        monkeypatch.setattr(backend, "_run", lambda batch: np.full_like(real(batch), np.nan))
        with pytest.raises(BackendError, match="non-finite"):
            backend.answer([_request()])
    finally:
        backend.close()


def _loaded(model):  # type: ignore[no-untyped-def]
    """A `LoadedModel` around `model` with the real tokenizer."""
    from controller.artifacts import LoadedModel
    from controller.backend import ModelInfo
    from controller.calibration import identity
    from controller.embedding import base_model_path

    return LoadedModel(model, "hash-nan", identity("hash-nan"), ModelInfo("nan", "nan heads", "2025-01-01"), base_model_path(), {}, trained=True)
