"""Client-side validation: the same messages as the official SDK, and the server-side limits of this model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import typesafe_sdk as sdk

from controller import (
    AsyncSystemOneClient,
    InvalidRequestError,
    SystemOneClient,
    UnknownModelError,
    UnsupportedQuestionError,
)

NOUL = {"type": "noul", "instructions": "Is it about billing?"}

# (state, questions) pairs the SDK refuses before sending anything.
SDK_REFUSED: dict[str, tuple[Any, Any]] = {
    "empty questions": ("s", {}),
    "questions None": ("s", None),
    "questions empty list": ("s", []),
    "state None": (None, {"q": NOUL}),
    "state None and empty questions": (None, {}),
    "Choice without criteria": ("s", {"q": sdk.Choice(criteria={})}),
    "Noul without instructions or criteria": ("s", {"q": sdk.Noul()}),
    "Noul with only null outcomes": ("s", {"q": sdk.Noul(criteria={"true": None, "false": None})}),
    "noul dict with neither": ("s", {"q": {"type": "noul"}}),
    "noul dict with null outcome": ("s", {"q": {"type": "noul", "criteria": {"true": None}}}),
    "noul criteria a string": ("s", {"q": {"type": "noul", "instructions": "x", "criteria": "yes"}}),
    "noul criteria a list": ("s", {"q": {"type": "noul", "criteria": ["a"]}}),
    "score dict with empty criteria": ("s", {"q": {"type": "score", "criteria": []}}),
    "score dict with null criteria": ("s", {"q": {"type": "score", "criteria": None}}),
    "dict without type": ("s", {"q": {"instructions": "x"}}),
    "dict with empty type": ("s", {"q": {"type": "", "instructions": "x"}}),
    "dict with non-string type": ("s", {"q": {"type": 3}}),
    "question a string": ("s", {"q": "hello"}),
    "choice dict without criteria": ("s", {"q": {"type": "choice"}}),
    "score dict without criteria": ("s", {"q": {"type": "score"}}),
    "choice dict with empty criteria": ("s", {"q": {"type": "choice", "criteria": {}}}),
    "choice dict with null criteria": ("s", {"q": {"type": "choice", "criteria": None}}),
    "second question bad": ("s", {"a": NOUL, "b": {"type": "choice", "criteria": {}}}),
}


def _never_called(request: httpx2.Request) -> httpx2.Response:
    raise AssertionError(f"the SDK sent a request it should have refused: {request.url}")


@pytest.fixture(scope="module")
def sdk_client() -> Iterator[sdk.TypeSafeClient]:
    with sdk.TypeSafeClient(api_key="test", base_url="http://local", transport=httpx2.MockTransport(_never_called)) as client:
        yield client


@pytest.fixture(scope="module")
def client() -> Iterator[SystemOneClient]:
    with SystemOneClient("heuristic") as c:
        yield c


def _sdk_message(client: sdk.TypeSafeClient, state: Any, questions: Any) -> str:
    with pytest.raises(sdk.TypeSafeError) as info:
        client.system_one(state, questions)
    assert not isinstance(info.value, sdk.TypeSafeAPIError)  # refused client-side, nothing was sent
    return str(info.value)


@pytest.mark.parametrize("case", sorted(SDK_REFUSED))
def test_same_message_as_sdk(case: str, sdk_client: sdk.TypeSafeClient, client: SystemOneClient) -> None:
    state, questions = SDK_REFUSED[case]
    expected = _sdk_message(sdk_client, state, questions)
    with pytest.raises(InvalidRequestError) as info:
        client.system_one(state, questions)
    assert str(info.value) == expected
    assert info.value.message == expected
    assert isinstance(info.value, sdk.TypeSafeError)  # `except TypeSafeError` written for the SDK still catches it


async def test_async_client_same_messages(sdk_client: sdk.TypeSafeClient) -> None:
    async with AsyncSystemOneClient("heuristic") as client:
        for state, questions in (SDK_REFUSED["empty questions"], SDK_REFUSED["Choice without criteria"]):
            with pytest.raises(sdk.TypeSafeError) as info:
                await client.system_one(state, questions)
            assert str(info.value) == _sdk_message(sdk_client, state, questions)


# Requests the SDK sends but a server must refuse: our local errors are InvalidRequestError subclasses.
def _options(n: int) -> dict[str, None]:
    return {f"o{i}": None for i in range(n)}


@pytest.mark.parametrize(
    ("questions", "error", "fragment"),
    [
        ({"q": {"type": "choice", "criteria": _options(256)}}, UnsupportedQuestionError, "at most 255"),
        ({"q": {"type": "score", "criteria": ["only"]}}, UnsupportedQuestionError, "between 2 and 10"),
        ({"q": {"type": "score", "criteria": [str(i) for i in range(11)]}}, UnsupportedQuestionError, "between 2 and 10"),
        ({"q": {"type": "score", "criteria": {"low": "a", "high": "b"}}}, InvalidRequestError, "ordered list"),
        ({"q": {"type": "score", "criteria": ["a", None]}}, InvalidRequestError, "level 1"),
        ({"q": {"type": "box", "instructions": "the dog"}}, UnsupportedQuestionError, "box question"),
        ({"q": sdk.Box(instructions="the dog")}, UnsupportedQuestionError, "box question"),
        ({"q": {"type": "ranking", "instructions": "x"}}, UnsupportedQuestionError, "unsupported type"),
        ({"q": {"type": "noul", "instructions": "x", "extra": 1}}, InvalidRequestError, "unknown fields"),
        ({"q": {"type": "noul", "instructions": "x", "criteria": {"maybe": "x"}}}, InvalidRequestError, "true"),
        ({"q": {"type": "choice", "criteria": ["a", "b"]}}, InvalidRequestError, "criteria must be an object"),
        ({"q": {"type": "noul", "instructions": 3}}, InvalidRequestError, "expected text"),
        ({"q": {"type": "noul", "instructions": {"x": float("nan")}}}, InvalidRequestError, "NaN"),
    ],
)
def test_server_side_limits(client: SystemOneClient, questions: dict[str, Any], error: type[Exception], fragment: str) -> None:
    with pytest.raises(error) as info:
        client.system_one("state", questions)
    assert fragment in str(info.value)
    assert info.value.loc[0] == "questions"  # type: ignore[attr-defined]


def test_255_options_is_fine(client: SystemOneClient) -> None:
    r = client.system_one("state", {"q": {"type": "choice", "criteria": _options(255)}})
    assert len(r.choices["q"].probabilities) == 255


@pytest.mark.parametrize("levels", [2, 10])
def test_level_bounds_are_fine(client: SystemOneClient, levels: int) -> None:
    r = client.system_one("state", {"q": {"type": "score", "criteria": [f"level {i}" for i in range(levels)]}})
    assert sorted(r.scores["q"].probabilities) == list(range(levels))


@pytest.mark.parametrize("state", [3, 2.5, True, b"bytes"])
def test_bad_state_types(client: SystemOneClient, state: Any) -> None:
    with pytest.raises(InvalidRequestError) as info:
        client.system_one(state, {"q": NOUL})
    assert info.value.loc == ("state",)


def test_assets_are_refused(client: SystemOneClient) -> None:
    with pytest.raises(UnsupportedQuestionError, match="assets"):
        client.system_one("state", {"q": NOUL}, assets={"img": object()})


def test_unknown_model(client: SystemOneClient) -> None:
    with pytest.raises(UnknownModelError) as info:
        client.system_one("state", {"q": NOUL}, model="gpt-unknown")
    assert "gpt-unknown" in str(info.value)
    assert isinstance(info.value, sdk.TypeSafeError)


def test_empty_question_key_refused(client: SystemOneClient) -> None:
    with pytest.raises(InvalidRequestError, match="non-empty"):
        client.system_one("state", {"": NOUL})
