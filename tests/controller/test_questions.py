"""questions.py: SDK objects and dicts become frozen, key-free question values; states become plain JSON."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import typesafe_sdk as sdk

from controller.errors import InvalidRequestError
from controller.questions import (
    ChoiceQuestion,
    NoulQuestion,
    ScoreQuestion,
    canonical_json,
    normalize_questions,
    signature,
    validate_state,
)


def test_parses_each_kind_in_key_order() -> None:
    parsed = normalize_questions({
        "z": {"type": "score", "instructions": "How urgent?", "criteria": ("low", "high")},
        "a": {"type": "noul", "criteria": {"false": "not billing"}},
        "m": {"type": "choice", "criteria": {"calm": None, "angry": {"tone": "loud"}}},
    })
    assert list(parsed) == ["z", "a", "m"]
    z, a, m = parsed["z"], parsed["a"], parsed["m"]
    assert isinstance(z, ScoreQuestion) and z.levels == ("low", "high") and z.n_options == 2
    assert isinstance(a, NoulQuestion) and a.instructions is None and a.true is None and a.false == "not billing"
    assert isinstance(m, ChoiceQuestion) and m.labels == ("calm", "angry") and m.options[1][1] == {"tone": "loud"}


def test_questions_are_frozen() -> None:
    q = normalize_questions({"q": {"type": "noul", "instructions": "x"}})["q"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.instructions = "y"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("sdk_question", "wire"),
    [
        (sdk.Noul(instructions="x", criteria={"true": "yes"}), {"type": "noul", "instructions": "x", "criteria": {"true": "yes"}}),
        (sdk.Noul(criteria={"false": ["no", 1]}), {"type": "noul", "criteria": {"true": None, "false": ["no", 1]}}),
        (sdk.Choice(criteria={"a": None, "b": "bee"}), {"type": "choice", "criteria": {"a": None, "b": "bee"}}),
        (sdk.Score(instructions={"ask": "how"}, criteria=("lo", "hi")), {"type": "score", "instructions": {"ask": "how"}, "criteria": ["lo", "hi"]}),
    ],
)
def test_sdk_objects_equal_their_dicts(sdk_question: Any, wire: dict[str, Any]) -> None:
    from_sdk = normalize_questions({"q": sdk_question})["q"]
    from_dict = normalize_questions({"q": wire})["q"]
    assert signature(from_sdk) == signature(from_dict)
    assert signature(normalize_questions({"again": from_sdk.to_wire()})["again"]) == signature(from_sdk)


def test_signature_is_content() -> None:
    def sig(q: dict[str, Any]) -> str:
        return signature(normalize_questions({"k": q})["k"])

    assert sig({"type": "noul", "instructions": "x", "criteria": {"true": "y"}}) == sig(
        {"type": "noul", "instructions": "x", "criteria": {"true": "y", "false": None}}
    )
    assert sig({"type": "noul", "instructions": "x"}) != sig({"type": "noul", "instructions": "x "})
    assert sig({"type": "noul", "instructions": "x"}) != sig({"type": "choice", "instructions": "x", "criteria": {"true": None}})
    assert sig({"type": "choice", "criteria": {"a": None, "b": None}}) != sig({"type": "choice", "criteria": {"b": None, "a": None}})
    assert sig({"type": "noul", "instructions": {"b": 1, "a": 2}}) == sig({"type": "noul", "instructions": {"a": 2, "b": 1}})


def test_state_becomes_plain_json_copy() -> None:
    source = {"items": ({"x": 1},), "t": "é"}
    state = validate_state(source)
    assert state == {"items": [{"x": 1}], "t": "é"}
    source["t"] = "changed"
    assert state["t"] == "é"  # type: ignore[index]
    assert validate_state("") == ""
    assert validate_state([]) == []


@pytest.mark.parametrize("state", [{1: "int key"}, {"x": float("nan")}, {"x": float("inf")}, {"x": object()}])
def test_bad_state_content(state: Any) -> None:
    with pytest.raises(InvalidRequestError) as info:
        validate_state(state)
    assert info.value.loc[0] == "state"


def test_canonical_json() -> None:
    assert canonical_json({"b": [1, "é"], "a": None}) == '{"a":null,"b":[1,"é"]}'
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_unicode_option_names_and_keys_kept_exactly() -> None:
    parsed = normalize_questions({"ключ \U0001f600": {"type": "choice", "criteria": {"é": None, "e\u0301": None}}})
    (key,) = parsed
    assert key == "ключ \U0001f600"
    assert parsed[key].labels == ("é", "e\u0301")  # type: ignore[union-attr]


@pytest.mark.parametrize("value", [__import__("datetime").datetime(2023, 5, 8), {1, 2}, b"bytes", __import__("decimal").Decimal("1.5")])
def test_a_non_json_value_in_a_state_is_named_as_such(value: Any) -> None:
    # a datetime in a state is an easy mistake; the error must not blame images or assets
    with pytest.raises(InvalidRequestError, match="not a JSON value") as info:
        validate_state({"when": value})
    assert info.value.loc == ("state", "when")
    assert type(value).__name__ in info.value.message
