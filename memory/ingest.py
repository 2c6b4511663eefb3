"""Turn input files into observations: JSONL (one observation per line) and LoCoMo conversations.

JSONL fields: `text` or `content` (required, non-empty), `speaker` (one line, not blank), `id` (one provenance id) or
`source_ids` (a string or a list), `observed_at` and `event_time` (ISO 8601), `entities` (list),
`metadata` (object). Unknown fields are refused, and so are both spellings of one field and a key given twice, so a
typo never silently drops data; ids and entities are strings (or whole numbers), never objects or nulls turned into text. When a speaker
is given and the text does not already start with it, the stored content is `Speaker: text`, the form LoCoMo turns
take. Every record is also checked as the engine checks a write (`check_observation`), so whatever `read_jsonl`
yields can be written: a bad record is refused while the file is read, naming its line, before anything is stored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.strict_json import DuplicateKeyError, number_too_long, unique_object
from memory.errors import InvalidObservationError
from memory.types import Observation, has_visible_text
from memory.write_path import check_observation, check_speaker

if TYPE_CHECKING:
    from data.locomo import Conversation, Turn

FIELDS = frozenset({"text", "content", "speaker", "id", "source_ids", "observed_at", "event_time", "entities", "metadata"})


def observation_from_record(record: dict[str, Any], *, where: str = "record") -> Observation:
    """Validate one JSON object into an Observation (errors name `where`)."""
    unknown = sorted(set(record) - FIELDS)
    if unknown:
        raise InvalidObservationError(f"{where}: unknown field(s) {', '.join(unknown)}")
    for one, other in (("content", "text"), ("id", "source_ids")):
        if one in record and other in record:
            raise InvalidObservationError(f"{where}: give '{one}' or '{other}', not both")
    text = record.get("text", record.get("content"))
    if not isinstance(text, str) or not has_visible_text(text):  # checked before the speaker prefix makes it visible
        raise InvalidObservationError(f"{where}: needs a non-empty 'content' (or 'text') with a visible character")
    speaker = _typed(record, "speaker", (str, type(None)), where)
    if speaker is not None:
        try:
            check_speaker(speaker)  # before it is written into the content below
        except InvalidObservationError as error:
            raise InvalidObservationError(f"{where}: {error}", speaker) from error
    sources = record["id"] if "id" in record else record.get("source_ids", ())
    if isinstance(sources, int) and not isinstance(sources, bool):
        sources = str(sources)
    if not isinstance(sources, (str, list, tuple)):
        raise InvalidObservationError(f"{where}: 'id' / 'source_ids' must be a string or a list")
    entities = _typed(record, "entities", (list, type(None)), where)
    metadata = _typed(record, "metadata", (dict, type(None)), where) or {}
    content = f"{speaker}: {text}" if speaker and not text.startswith(f"{speaker}:") else text
    obs = Observation(
        content=content,
        observed_at=_time(record.get("observed_at"), where, "observed_at"),
        event_time=_time(record.get("event_time"), where, "event_time"),
        speaker=speaker,
        source_ids=(sources,) if isinstance(sources, str) else _texts(sources, "source_ids", where),
        entities=None if entities is None else _texts(entities, "entities", where),
        metadata=dict(metadata),
    )
    try:  # what a write would refuse (text that is not Unicode, NaN in metadata, a reserved key): refused here
        check_observation(obs)
    except InvalidObservationError as error:
        raise InvalidObservationError(f"{where}: {error}", error.value) from error
    return obs


def read_jsonl(path: str | Path) -> Iterator[Observation]:
    """Observations from a JSONL file, validated line by line (blank lines skipped; errors name the line).

    UTF-8, with or without a byte order mark; lines are decoded one by one so a bad byte names its line. Line numbers
    are 1-based and count blank lines (a CRLF file numbers as an editor does). A file holding one JSON array is
    refused with a hint: JSONL is one object per line."""
    for _, obs in read_jsonl_lines(path):
        yield obs


def read_jsonl_lines(path: str | Path) -> Iterator[tuple[int, Observation]]:
    """`read_jsonl` with the line number of each observation: (line, observation)."""
    first = True  # the first record line, where a JSON array would start
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise InvalidObservationError(f"{path}:{number}: not UTF-8 ({error.reason} at byte {error.start})") from error
            if not line.strip():
                continue
            array = first and line.lstrip().startswith("[")
            first = False
            if array:
                raise InvalidObservationError(f"{path}:{number}: this is a JSON array; JSONL is one JSON object per line "
                                              '(e.g. {"content": "..."}), without the enclosing [ ]')
            record = _parse_line(line, f"{path}:{number}")
            if not isinstance(record, dict):
                raise InvalidObservationError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
            yield number, observation_from_record(record, where=f"{path}:{number}")


def _parse_line(line: str, where: str) -> object:
    """One JSONL line as JSON. Refused, naming `where`: invalid JSON, a key given twice in one object (the parser
    would keep the last value and drop the first without a word), nesting too deep for the parser, and a number
    too long for Python to read (over 4,300 digits)."""
    try:
        return json.loads(line, object_pairs_hook=unique_object)
    except json.JSONDecodeError as error:
        raise InvalidObservationError(f"{where}: not valid JSON ({error.msg} at column {error.colno})") from error
    except DuplicateKeyError as error:
        raise InvalidObservationError(f"{where}: {error}; give each field once") from error
    except RecursionError as error:
        raise InvalidObservationError(f"{where}: nested too deeply to read (arrays or objects inside each other "
                                      "thousands of levels deep)") from error
    except ValueError as error:
        if not number_too_long(error):
            raise
        raise InvalidObservationError(f"{where}: a number with too many digits to read (the limit is 4,300 digits); "
                                      "store it as a string") from error


def turn_observation(turn: Turn) -> Observation:
    """The LoCoMo protocol for one turn: `Speaker: text [shares caption]`, event time = the session date,
    provenance = the turn's dia_id."""
    return Observation(
        content=turn.memory_text(),
        observed_at=turn.date,
        event_time=turn.date,
        speaker=turn.speaker,
        source_ids=(turn.dia_id,),
    )


def locomo_observations(conversation: Conversation) -> list[Observation]:
    """Every turn in order, each checked as a write checks it (an error names the sample and the turn's dia_id).
    Questions, observations and summaries are never ingested."""
    out = []
    for turn in conversation.turns:
        obs = turn_observation(turn)
        try:
            check_observation(obs)
        except InvalidObservationError as error:
            raise InvalidObservationError(f"{conversation.sample_id} turn {turn.dia_id}: {error}", error.value) from error
        out.append(obs)
    return out


def _typed(record: dict[str, Any], name: str, allowed: tuple[type, ...], where: str) -> Any:
    value = record.get(name)
    if not isinstance(value, allowed):
        raise InvalidObservationError(f"{where}: '{name}' has the wrong type ({type(value).__name__})")
    return value


def _texts(values: list[Any] | tuple[Any, ...], name: str, where: str) -> tuple[str, ...]:
    """Strings (whole numbers read as their digits); a null, a bool, a float or an object is refused, not turned into
    the text 'None' or "{'a': 1}"."""
    for value in values:
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise InvalidObservationError(f"{where}: '{name}' items must be strings, got {type(value).__name__} ({value!r:.40})")
    return tuple(str(v) for v in values)


def _time(value: object, where: str, name: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidObservationError(f"{where}: '{name}' must be an ISO 8601 string")
    try:
        return datetime.fromisoformat(value)
    except ValueError as error:
        raise InvalidObservationError(f"{where}: '{name}' is not an ISO 8601 time: {value!r}") from error
