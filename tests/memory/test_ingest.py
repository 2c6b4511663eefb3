"""Input files -> observations (memory/ingest.py): JSONL validation and its error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory.errors import InvalidObservationError
from memory.ingest import read_jsonl


def test_a_utf8_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = tmp_path / "notes.jsonl"  # what Notepad and PowerShell 5 write as "UTF-8"
    path.write_bytes("\ufeff".encode() + '{"text": "Café at 8", "speaker": "Mira"}\n{"content": "later"}\n'.encode())
    got = list(read_jsonl(path))
    assert [o.content for o in got] == ["Mira: Café at 8", "later"]


def test_bytes_that_are_not_utf8_are_refused_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "notes.jsonl"
    path.write_bytes(b'{"text": "fine"}\n{"text": "caf\xe9 in latin-1"}\n')
    with pytest.raises(InvalidObservationError, match=r"notes\.jsonl:2: not UTF-8"):
        list(read_jsonl(path))


@pytest.mark.parametrize("speaker", ["", "  ", "Mi\u0000ra", "Mira\n"])
def test_a_blank_or_multiline_speaker_is_refused_naming_the_line(tmp_path: Path, speaker: str) -> None:
    path = tmp_path / "notes.jsonl"
    path.write_text('{"text": "fine", "speaker": "Mira"}\n' + json.dumps({"text": "hello", "speaker": speaker}) + "\n")
    with pytest.raises(InvalidObservationError, match=r"notes\.jsonl:2: speaker must"):
        list(read_jsonl(path))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"content": "a", "speaker": "Mira", "speaker": "Tom"}', "'speaker' appears twice"),
        ('{"content": ' + "[" * 50_000, "nested too deeply"),  # unbalanced, too: the depth is met first
        ('{"content": "x", "entities": [' + "1" * 4400 + "]}", "too many digits"),
    ],
)
def test_lines_json_would_read_lossily_or_not_at_all_are_refused(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "obs.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(InvalidObservationError, match=message) as caught:
        list(read_jsonl(path))
    assert str(caught.value).startswith(f"{path}:1: ")
