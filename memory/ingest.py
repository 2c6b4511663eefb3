"""Turn input files into observations: JSONL (one observation per line) and LoCoMo conversations.

JSONL fields: `text` (or `content`, required), `speaker`, `id` (kept as provenance), `observed_at` and
`event_time` (ISO 8601), `entities` (list), `metadata` (object). When a speaker is given and the text does not
already start with it, the stored content is `Speaker: text`, the form LoCoMo turns take.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memory.errors import InvalidObservationError
from memory.types import Observation

if TYPE_CHECKING:
    from data.locomo import Conversation


def observation_from_record(record: dict[str, Any], *, where: str = "record") -> Observation:
    text = record.get("text", record.get("content"))
    if not isinstance(text, str) or not text.strip():
        raise InvalidObservationError(f"{where}: needs a non-empty 'text'")
    speaker = record.get("speaker")
    if speaker is not None and not isinstance(speaker, str):
        raise InvalidObservationError(f"{where}: 'speaker' must be a string")
    content = f"{speaker}: {text}" if speaker and not text.startswith(f"{speaker}:") else text
    source = record.get("id", record.get("source_ids", ()))
    source_ids = (str(source),) if isinstance(source, (str, int)) else tuple(str(s) for s in source)
    entities = record.get("entities")
    metadata = record.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise InvalidObservationError(f"{where}: 'metadata' must be an object")
    return Observation(
        content=content,
        observed_at=_time(record.get("observed_at"), where, "observed_at"),
        event_time=_time(record.get("event_time"), where, "event_time"),
        speaker=speaker,
        source_ids=source_ids,
        entities=tuple(str(e) for e in entities) if isinstance(entities, list) else None,
        metadata=metadata,
    )


def read_jsonl(path: str | Path) -> Iterator[Observation]:
    """Observations from a JSONL file, validated line by line (errors name the line)."""
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise InvalidObservationError(f"{path}:{number}: invalid JSON ({error.msg})") from error
            if not isinstance(record, dict):
                raise InvalidObservationError(f"{path}:{number}: each line must be a JSON object")
            yield observation_from_record(record, where=f"{path}:{number}")


def locomo_observations(conversation: Conversation) -> list[Observation]:
    """The LoCoMo protocol: turn by turn, `Speaker: text [shares caption]`, event time = the session date,
    provenance = the turn's dia_id. Questions, observations and summaries are never ingested."""
    return [
        Observation(
            content=turn.memory_text(),
            observed_at=turn.date,
            event_time=turn.date,
            speaker=turn.speaker,
            source_ids=(turn.dia_id,),
        )
        for turn in conversation.turns
    ]


def _time(value: object, where: str, name: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidObservationError(f"{where}: '{name}' must be an ISO 8601 string")
    try:
        return datetime.fromisoformat(value)
    except ValueError as error:
        raise InvalidObservationError(f"{where}: '{name}' is not ISO 8601: {value!r}") from error
