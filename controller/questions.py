"""Typed questions: validation of SDK objects or plain dicts into frozen, key-free question values.

Client-side checks are the SDK's own (same messages); the server-side limits of this model follow
(option counts, level counts, text-only content) and raise `InvalidRequestError` subclasses with a `loc`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, Union

from controller.errors import InvalidRequestError, UnsupportedQuestionError

JSON: TypeAlias = Union[str, int, float, bool, None, list[Any], dict[str, Any]]
Content: TypeAlias = Union[str, list[Any], dict[str, Any]]

MAX_OPTIONS = 255
MIN_LEVELS = 2
MAX_LEVELS = 10
# Objects / arrays nested deeper than this are refused (a cycle too), well below Python's recursion limit that
# rendering and hashing would otherwise hit; the server's limit for a whole body (`serving.wire.MAX_NESTING`) is
# the same, so nothing it accepts is refused here.
MAX_DEPTH = 64


def canonical_json(value: object) -> str:
    """Deterministic JSON text (sorted keys, no spaces, UTF-8 kept) used for hashing and dedupe."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True, eq=False)
class NoulQuestion:
    """A yes/no proposition. `true` / `false` describe the outcomes; either may be None."""

    instructions: Content | None
    true: Content | None = None
    false: Content | None = None
    kind: Literal["noul"] = field(default="noul", init=False)

    @property
    def n_options(self) -> int:
        return 1

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "noul"}
        if self.instructions is not None:
            out["instructions"] = self.instructions
        if self.true is not None or self.false is not None:
            out["criteria"] = {"true": self.true, "false": self.false}
        return out


@dataclass(frozen=True, eq=False)
class ChoiceQuestion:
    """Mutually exclusive named options, in request order. Names are echoed byte-exactly."""

    instructions: Content | None
    options: tuple[tuple[str, Content | None], ...]
    kind: Literal["choice"] = field(default="choice", init=False)

    @property
    def n_options(self) -> int:
        return len(self.options)

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.options)

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "choice", "criteria": dict(self.options)}
        if self.instructions is not None:
            out["instructions"] = self.instructions
        return out


@dataclass(frozen=True, eq=False)
class ScoreQuestion:
    """Ordered levels 0..n-1, each with a description; the answer is the expected level."""

    instructions: Content | None
    levels: tuple[Content, ...]
    kind: Literal["score"] = field(default="score", init=False)

    @property
    def n_options(self) -> int:
        return len(self.levels)

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "score", "criteria": list(self.levels)}
        if self.instructions is not None:
            out["instructions"] = self.instructions
        return out


Question: TypeAlias = Union[NoulQuestion, ChoiceQuestion, ScoreQuestion]


def signature(question: Question) -> str:
    """Content identity of a question (keys excluded): equal signatures get identical answers.

    Choice options keep their request order (a list of pairs): a reordered Choice is another question,
    answered with its own option order. Object keys inside content are sorted.
    """
    wire = question.to_wire()
    if isinstance(question, ChoiceQuestion):
        wire["criteria"] = [[name, desc] for name, desc in question.options]
    return canonical_json(wire)


def validate_state(state: object) -> Content:
    """The state must be text, an object or an array (SDK: `State is required.` for None)."""
    if state is None:
        raise InvalidRequestError("State is required.", loc=("state",))
    if isinstance(state, bool) or not isinstance(state, (str, Mapping, list, tuple)):
        raise InvalidRequestError(
            f"state must be a string, object or array, not {type(state).__name__}", loc=("state",)
        )
    plain = _plain(state, ("state",))
    assert isinstance(plain, (str, dict, list))
    return plain


def normalize_questions(questions: Mapping[str, Any]) -> dict[str, Question]:
    """Validate SDK question objects or plain dicts; return them keyed as given, in order."""
    if questions and not isinstance(questions, Mapping):
        raise InvalidRequestError("questions must be an object mapping names to questions", loc=("questions",))
    _sdk_checks(questions)  # also refuses None / empty with the SDK's message
    out: dict[str, Question] = {}
    for key, raw in questions.items():
        if not isinstance(key, str) or not key:
            raise InvalidRequestError("question names must be non-empty strings", loc=("questions",))
        out[key] = _parse_one(key, _as_dict(raw, key))
    return out


def _sdk_checks(questions: Mapping[str, Any]) -> None:
    # The SDK's own validator gives byte-identical client-side messages.
    from typesafe_sdk import TypeSafeError
    from typesafe_sdk._core.questions import normalize_questions as sdk_normalize

    try:
        sdk_normalize(questions)
    except TypeSafeError as error:
        raise InvalidRequestError(str(error), loc=("questions",)) from error


def _as_dict(raw: object, key: str) -> dict[str, Any]:
    if hasattr(raw, "model_dump") and not isinstance(raw, Mapping):
        try:
            raw = raw.model_dump(mode="python")  # SDK question object; omits unset fields
        except Exception as error:  # pydantic serialisation of an asset or exotic value
            raise UnsupportedQuestionError(f'Question "{key}" could not be read: {error}', loc=("questions", key)) from error
    if not isinstance(raw, Mapping):
        raise InvalidRequestError(f'Question "{key}" must be an object', loc=("questions", key))
    return dict(raw)


def _parse_one(key: str, raw: dict[str, Any]) -> Question:
    loc: tuple[str | int, ...] = ("questions", key)
    kind = raw.get("type")
    allowed = {"type", "instructions", "criteria"}
    extra = sorted(set(raw) - allowed)
    if extra:
        raise InvalidRequestError(f'Question "{key}" has unknown fields: {", ".join(map(str, extra))}', loc=loc)
    instructions = _content_or_none(raw.get("instructions"), (*loc, "instructions"))
    criteria = raw.get("criteria")
    if kind == "noul":
        if criteria is not None and not isinstance(criteria, Mapping):
            raise InvalidRequestError(f'Noul question "{key}" criteria must be an object.', loc=(*loc, "criteria"))
        criteria = dict(criteria or {})
        bad = sorted(set(criteria) - {"true", "false"})
        if bad:
            raise InvalidRequestError(f'Noul question "{key}" criteria accepts only "true" and "false", not {bad}', loc=(*loc, "criteria"))
        true = _content_or_none(criteria.get("true"), (*loc, "criteria", "true"))
        false = _content_or_none(criteria.get("false"), (*loc, "criteria", "false"))
        if instructions is None and true is None and false is None:
            raise InvalidRequestError(
                f'Noul question "{key}" has neither instructions nor criteria; at least one is required.', loc=loc
            )
        return NoulQuestion(instructions, true, false)
    if kind == "choice":
        if not criteria:
            raise InvalidRequestError(
                f'Choice question "{key}" has no criteria; at least one choice is required.', loc=(*loc, "criteria")
            )
        if not isinstance(criteria, Mapping):
            raise InvalidRequestError(
                f'Choice question "{key}" criteria must be an object mapping option names to descriptions.',
                loc=(*loc, "criteria"),
            )
        if len(criteria) > MAX_OPTIONS:
            raise UnsupportedQuestionError(
                f'Choice question "{key}" has {len(criteria)} options; at most {MAX_OPTIONS} are allowed.', loc=(*loc, "criteria")
            )
        options = []
        for name, desc in criteria.items():
            if not isinstance(name, str):
                raise InvalidRequestError(f'Choice question "{key}" option names must be strings', loc=(*loc, "criteria"))
            options.append((name, _content_or_none(desc, (*loc, "criteria", name))))
        return ChoiceQuestion(instructions, tuple(options))
    if kind == "score":
        if isinstance(criteria, Mapping) or isinstance(criteria, (str, bytes)) or not isinstance(criteria, (list, tuple)):
            raise InvalidRequestError(
                f'Score question "{key}" criteria must be an ordered list of level descriptions.', loc=(*loc, "criteria")
            )
        if not criteria:
            raise InvalidRequestError(
                f'Score question "{key}" has no criteria; at least one score is required.', loc=(*loc, "criteria")
            )
        if not MIN_LEVELS <= len(criteria) <= MAX_LEVELS:
            raise UnsupportedQuestionError(
                f'Score question "{key}" has {len(criteria)} levels; between {MIN_LEVELS} and {MAX_LEVELS} are allowed.',
                loc=(*loc, "criteria"),
            )
        levels = []
        for i, desc in enumerate(criteria):
            level = _content_or_none(desc, (*loc, "criteria", i))
            if level is None:
                raise InvalidRequestError(f'Score question "{key}" level {i} has no description.', loc=(*loc, "criteria", i))
            levels.append(level)
        return ScoreQuestion(instructions, tuple(levels))
    if kind == "box":
        raise UnsupportedQuestionError(
            f'Question "{key}" is a box question; this text model cannot locate objects in images.', loc=(*loc, "type")
        )
    raise UnsupportedQuestionError(f'Question "{key}" has unsupported type {kind!r}.', loc=(*loc, "type"))


def _content_or_none(value: object, loc: tuple[str | int, ...]) -> Content | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, Mapping, list, tuple)):
        raise InvalidRequestError(f"expected text, an object or an array, not {type(value).__name__}", loc=loc)
    plain = _plain(value, loc)
    assert isinstance(plain, (str, dict, list))
    return plain


def _plain(value: object, loc: tuple[str | int, ...], depth: int = 1, root: tuple[str | int, ...] | None = None) -> JSON:
    """Deep-copy into plain JSON values; assets, non-finite numbers and nesting over `MAX_DEPTH` are refused."""
    root = loc if root is None else root
    if value is None or isinstance(value, (str, bool, int)):
        return value  # type: ignore[return-value]
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidRequestError("NaN and Infinity are not valid JSON values", loc=loc)
        return value
    if isinstance(value, (Mapping, list, tuple)) and depth > MAX_DEPTH:
        where = ".".join(map(str, root))
        raise InvalidRequestError(f"{where} is nested deeper than {MAX_DEPTH} levels (or contains itself)", loc=root)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidRequestError("object keys must be strings", loc=loc)
            out[k] = _plain(v, (*loc, k), depth + 1, root)
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(v, (*loc, i), depth + 1, root) for i, v in enumerate(value)]
    raise UnsupportedQuestionError(
        f"{type(value).__name__} is not a JSON value (text, number, true / false, null, object or array); "
        "this is a text model (images and other assets are refused)",
        loc=loc,
    )
