"""The `/v1/systemone` wire format: body reading, the envelope check, and the schemas shown in OpenAPI.

Validation happens in two places with one owner each: the *envelope* (`model`, `state`, `questions`,
`assets`) is checked here with pydantic, so its failures are FastAPI's own 422 entries; everything inside
a question is checked by the controller (`controller.questions`), whose `InvalidRequestError`s carry a
`loc` and become 422 entries at the edge. The question / answer models below document the protocol in
OpenAPI; they mirror what the controller accepts and are not a second validator.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from email.message import Message
from typing import Annotated, Any, Literal, Union

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from pydantic_core import PydanticCustomError
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException, MultiPartParser

from controller.strict_json import number_too_long, unique_object
from serving.errors import UnsupportedMediaTypeError

MAX_NESTING = 64  # JSON depth accepted in a request body (state and question content included)
INLINE_BODY_BYTES = 16 * 1024  # bodies up to this size are parsed and planned on the event loop (about a millisecond)

Text = Union[str, dict[str, Any], list[Any]]


# ----------------------------------------------------------------------------------- the envelope (validated)
def _text_value(value: Any) -> Any:
    if isinstance(value, (str, dict, list)):
        return value
    raise PydanticCustomError("state_type", "Input should be a string, an object or an array")


class Envelope(BaseModel):
    """The top level of a System One request. Unknown top-level fields are ignored."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    model: str = Field(description="A served model name or an alias (`jev-latest`, `jev-preview`).", examples=["jev-latest"])
    state: Annotated[Any, AfterValidator(_text_value)] = Field(description="The content every question refers to: text, an object or an array.")
    questions: dict[str, Any] = Field(min_length=1, description="Questions keyed by caller-chosen names.")
    assets: dict[str, Any] | None = Field(default=None, description="Image assets; this text model refuses them.")


# ------------------------------------------------------------------------------ documentation models (OpenAPI)
Key = Annotated[str, StringConstraints(min_length=1)]


class NoulCriteria(BaseModel):
    model_config = ConfigDict(extra="forbid")
    true: Text | None = Field(default=None, description="What counts as yes.")
    false: Text | None = Field(default=None, description="What counts as no.")


_NOT_NULL = {"not": {"type": "null"}}
_NOUL_NEEDS = {  # instructions, or at least one described side (what the controller requires)
    "anyOf": [
        {"required": ["instructions"], "properties": {"instructions": _NOT_NULL}},
        {
            "required": ["criteria"],
            "properties": {
                "criteria": {
                    "anyOf": [
                        {"type": "object", "required": ["true"], "properties": {"true": _NOT_NULL}},
                        {"type": "object", "required": ["false"], "properties": {"false": _NOT_NULL}},
                    ]
                }
            },
        },
    ]
}


class NoulQuestion(BaseModel):
    """A yes/no proposition. Instructions, or at least one described side of `criteria`, are required."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_NOUL_NEEDS)
    type: Literal["noul"]
    instructions: Text | None = None
    criteria: NoulCriteria | None = None


class ChoiceQuestion(BaseModel):
    """Mutually exclusive named options (1..255); a description may be null."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["choice"]
    instructions: Text | None = None
    criteria: dict[str, Text | None] = Field(min_length=1, max_length=255)


class ScoreQuestion(BaseModel):
    """Ordered levels 0..n-1 (2..10), each described; the answer is the expected level."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["score"]
    instructions: Text | None = None
    criteria: list[Text] = Field(min_length=2, max_length=10)


Question = Annotated[Union[NoulQuestion, ChoiceQuestion, ScoreQuestion], Field(discriminator="type")]


class SystemOneRequest(BaseModel):
    """POST /v1/systemone (JSON, optionally `Content-Encoding: zstd`; multipart with a `request` part)."""

    model: str = Field(examples=["jev-latest"])
    state: Text = Field(examples=["I was charged twice. Please help."])
    questions: dict[Key, Question] = Field(
        min_length=1, examples=[{"billing": {"type": "noul", "instructions": "Is this message about billing?"}}]
    )


class NoulAnswer(BaseModel):
    type: Literal["noul"]
    noul: float = Field(ge=0, le=1)


class ChoiceAnswer(BaseModel):
    type: Literal["choice"]
    choice: str
    confidence: float = Field(ge=0, le=1)
    probabilities: dict[str, float]


class ScoreAnswer(BaseModel):
    type: Literal["score"]
    score: float = Field(ge=0)
    confidence: float = Field(ge=0, le=1)
    legend: dict[str, Text]
    probabilities: dict[str, float]


Answer = Annotated[Union[NoulAnswer, ChoiceAnswer, ScoreAnswer], Field(discriminator="type")]


class Usage(BaseModel):
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)


class SystemOneResponse(BaseModel):
    model: str = Field(description="The concrete model that answered (an alias resolves to it).")
    answers: dict[str, Answer]
    usage: Usage


class ModelEntry(BaseModel):
    name: str
    description: str
    release_date: str = Field(description="YYYY-MM-DD")


class ModelList(BaseModel):
    models: list[ModelEntry]


class ErrorDetail(BaseModel):
    error_type: str
    message: str


class ErrorResponse(BaseModel):
    """Every non-validation error: `{"detail": {"error_type", "message"}}`."""

    detail: ErrorDetail


class ValidationIssue(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorResponse(BaseModel):
    """422: FastAPI's shape, `{"detail": [{"loc": ["body", ...], "msg", "type"}]}`."""

    detail: list[ValidationIssue]


# ---------------------------------------------------------------------------------------------- body reading
@dataclass(frozen=True)
class ParsedBody:
    envelope: Envelope
    payload: dict[str, Any]  # the raw JSON object, handed to the controller as sent
    asset_parts: tuple[str, ...]  # names of multipart parts other than `request`
    size: int  # bytes of the JSON text: bodies of megabytes take seconds to parse and plan


def is_json_media(media: str) -> bool:
    """Whether a request body of this media type (`media_type`) is read as JSON: none given, application/json, its
    older name text/json, or any +json type. /v1/systemone and the memory API take the same ones."""
    return media in ("", "application/json", "text/json") or media.endswith("+json")


def media_type(request: Request) -> str:
    """The request's media type, lower case and without parameters ("" when there is no Content-Type). A value
    that is not `type/subtype` comes back as sent (at most 100 characters), for the 415 to name; `email` would read
    it as text/plain."""
    header = request.headers.get("content-type")
    if not header:
        return ""
    message = Message()
    message["content-type"] = header
    parsed = message.get_content_type()
    sent = header.split(";", 1)[0].strip().lower()
    if parsed == "text/plain" and sent != "text/plain":
        return sent[:100] or header.strip()[:100]
    return parsed


class _RawFieldParser(MultiPartParser):
    """Starlette's multipart parser, but a part without a filename keeps its bytes. Starlette decodes such a
    part itself and, when it is not valid in the declared charset, falls back to latin-1 without a word, so a
    `request` part of invalid UTF-8 would be read as mojibake instead of being refused like a JSON body.
    Part names are decoded in the declared charset; Starlette falls back to latin-1 on UnicodeDecodeError only,
    and codecs such as punycode or undefined raise a bare UnicodeError, which is a bad request here."""

    def on_headers_finished(self) -> None:
        try:
            super().on_headers_finished()
        except UnicodeError as error:
            raise MultiPartException(f"multipart part names cannot be decoded in the charset {self._charset!r}") from error

    def on_part_end(self) -> None:
        if self._current_part.file is not None:
            super().on_part_end()
            return
        self.items.append((self._current_part.field_name, bytes(self._current_part.data)))  # type: ignore[arg-type]


async def _read_form(request: Request, max_bytes: int) -> FormData:
    parser = _RawFieldParser(request.headers, request.stream(), max_files=64, max_fields=64, max_part_size=max_bytes)
    try:
        return await parser.parse()
    except MultiPartException as error:
        raise HTTPException(status_code=400, detail=error.message) from error


async def read_systemone_body(request: Request, max_bytes: int) -> ParsedBody:
    """Read a JSON or multipart body (already size-limited and decompressed by the middleware)."""
    media = media_type(request)
    asset_parts: tuple[str, ...] = ()
    if media == "multipart/form-data":
        form = await _read_form(request, max_bytes)
        try:
            part: Any = form.get("request")
            if part is None:
                raise RequestValidationError([_issue(("body", "request"), "the multipart body has no `request` part", "missing")])
            raw: bytes | str = await part.read() if isinstance(part, UploadFile) else part
            asset_parts = tuple(name for name in form.keys() if name != "request")
        finally:
            await form.close()
    elif is_json_media(media):
        raw = await request.body()
    else:
        raise UnsupportedMediaTypeError(f"content type {media!r} is not supported; send application/json (or multipart/form-data)")
    payload = await parse_json_off_loop(raw)
    if not isinstance(payload, dict):
        raise RequestValidationError([_issue(("body",), "Input should be a valid dictionary or object to extract fields from", "model_attributes_type")])
    try:
        envelope = Envelope.model_validate(payload)
    except ValidationError as error:
        raise RequestValidationError(
            [_issue(("body", *e["loc"]), e["msg"], e["type"]) for e in error.errors(include_url=False)]
        ) from error
    return ParsedBody(envelope, payload, asset_parts, len(raw))


async def parse_json_off_loop(raw: bytes | str) -> Any:
    """`parse_json`, in a worker thread for bodies big enough (megabytes: seconds) to stall the event loop."""
    if len(raw) <= INLINE_BODY_BYTES:
        return parse_json(raw)
    return await asyncio.to_thread(parse_json, raw)


def parse_json(raw: bytes | str) -> Any:
    """Strict JSON: UTF-8, no NaN / Infinity, no key twice in one object, bounded nesting. Failures are 422
    `json_invalid`."""

    def refuse_constant(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        value = json.loads(text, parse_constant=refuse_constant, object_pairs_hook=unique_object)
    except json.JSONDecodeError as error:
        raise RequestValidationError([_issue(("body", error.pos), f"JSON decode error: {error.msg}", "json_invalid")]) from error
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise RequestValidationError([_issue(("body", 0), f"JSON decode error: {_reason(error)}", "json_invalid")]) from error
    problem = check_tree(value)
    if problem:
        raise RequestValidationError([_issue(("body",), problem, "json_invalid")])
    return value


def _reason(error: Exception) -> str:
    """Why strict JSON parsing failed, in the caller's terms (no advice about Python settings)."""
    if isinstance(error, RecursionError):
        return "nested too deeply"
    if isinstance(error, ValueError) and not isinstance(error, UnicodeDecodeError) and number_too_long(error):
        return "a number has more than 4,300 digits (send it as a string)"
    return str(error)


def check_tree(value: Any) -> str | None:
    """Why a parsed JSON value is unusable (too deep, or a string that is not valid Unicode), or None."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not _valid_unicode(item):
                return "JSON string contains a lone surrogate (not valid Unicode)"
        elif isinstance(item, (dict, list)):
            if depth > MAX_NESTING:
                return f"JSON is nested deeper than {MAX_NESTING} levels"
            if isinstance(item, dict):
                for k, v in item.items():
                    if not _valid_unicode(k):
                        return "JSON key contains a lone surrogate (not valid Unicode)"
                    stack.append((v, depth + 1))
            else:
                stack.extend((v, depth + 1) for v in item)
    return None


def _valid_unicode(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _issue(loc: tuple[str | int, ...], msg: str, kind: str) -> dict[str, Any]:
    return {"loc": list(loc), "msg": msg, "type": kind}
