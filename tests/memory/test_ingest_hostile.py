"""memory/ingest.py against careless files: every record the engine would refuse is refused while the file is read,
naming its 1-based line (blank lines counted), so a file is never half written by `jevmem ingest`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory.errors import InvalidObservationError
from memory.ingest import read_jsonl


def _file(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "notes.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"content": "x", "metadata": {"score": NaN}}', "metadata must be a JSON object"),  # json.loads reads NaN
        ('{"content": "caf\\ud800"}', "not valid Unicode"),  # a lone surrogate escape
        ('{"content": "x", "observed_at": "0001-01-01T00:00:00+05:00"}', "out of range in UTC"),
        ('{"content": "x", "metadata": {"summary_of": ["a"]}}', "reserved by the engine"),
    ],
)
def test_what_the_engine_refuses_is_refused_while_reading(tmp_path: Path, line: str, message: str) -> None:
    path = _file(tmp_path, '{"content": "fine"}', "", line)  # the blank line counts: the bad record is line 3
    with pytest.raises(InvalidObservationError, match=rf"notes\.jsonl:3: .*{message}"):
        list(read_jsonl(path))


@pytest.mark.parametrize(
    "record",
    [
        {"content": "x", "source_ids": [None]},
        {"content": "x", "source_ids": [{"a": 1}]},
        {"content": "x", "source_ids": [True]},
        {"content": "x", "entities": [None, "Mira"]},
        {"content": "x", "entities": [["Mira"]]},
    ],
)
def test_ids_and_entities_that_are_not_text_are_refused_not_stringified(tmp_path: Path, record: dict[str, object]) -> None:
    with pytest.raises(InvalidObservationError, match=r"notes\.jsonl:1: '(source_ids|entities)' items must be"):
        list(read_jsonl(_file(tmp_path, json.dumps(record))))


def test_numeric_source_ids_are_still_read_as_text(tmp_path: Path) -> None:
    [obs] = read_jsonl(_file(tmp_path, json.dumps({"content": "x", "source_ids": [7, "d2"], "entities": ["Mira"]})))
    assert obs.source_ids == ("7", "d2") and obs.entities == ("Mira",)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"text": "one", "content": "two"}, "give 'content' or 'text', not both"),
        ({"content": "x", "id": "d1", "source_ids": ["d2"]}, "give 'id' or 'source_ids', not both"),
    ],
)
def test_two_spellings_of_one_field_are_refused_instead_of_dropping_one(tmp_path: Path, record: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidObservationError, match=message):
        list(read_jsonl(_file(tmp_path, json.dumps(record))))


@pytest.mark.parametrize("text", ['[{"content": "a"}, {"content": "b"}]', '[\n  {"content": "a"}\n]'])
def test_a_json_array_file_says_jsonl_wants_one_object_per_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "notes.json"
    path.write_text(text + "\n", encoding="utf-8")
    with pytest.raises(InvalidObservationError, match=r"notes\.json:1: .*JSON array.*one JSON object per line"):
        list(read_jsonl(path))


def test_crlf_line_ends_and_blank_lines_keep_line_numbers_right(tmp_path: Path) -> None:
    path = tmp_path / "notes.jsonl"
    path.write_bytes(b'{"content": "a"}\r\n\r\n{"content": "b"}\r\n{"content": ""}\r\n')
    with pytest.raises(InvalidObservationError, match=r"notes\.jsonl:4: "):
        list(read_jsonl(path))


def test_a_truncated_last_line_names_its_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "notes.jsonl"
    path.write_bytes(b'{"content": "a"}\n{"content": "b')
    with pytest.raises(InvalidObservationError, match=r"notes\.jsonl:2: not valid JSON \(Unterminated string .* column 13\)"):
        list(read_jsonl(path))
