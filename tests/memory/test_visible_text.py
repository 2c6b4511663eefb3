"""Text with no visible character (zero-width spaces, word joiners, BOMs, soft hyphens, controls, separators)
is as empty as "": refused for observations, speakers, edits and queries; visible text is stored unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory.errors import InvalidObservationError, InvalidQueryError
from memory.types import Observation
from tests.memory.engine_fakes import make_engine, obs

INVISIBLE = ["\u200b\u200b", "\u2060", "\ufeff", "\u00ad", " \u200b\t\u2060\n", "\u200e\u202e\u2066", "\x00\x7f",
             "\u3000\u2028\u2029", "\U000e0020\U000e0001", "\u180e",
             "\u3164", "\u2800\u115f\uffa0", "\ufe0f\U000e0100", "\u034f"]  # these render blank, though not Cf / Z*
VISIBLE = ["a\u200bb", "\ufeffhello", "\u00adx\u00ad", " \u200bMira: hi\u2060 ", "\u0301", "\U0001f600"]


def test_has_visible_text() -> None:
    from memory.types import has_visible_text

    assert not any(has_visible_text(t) for t in [*INVISIBLE, "", "   "])
    assert all(has_visible_text(t) for t in VISIBLE)


@pytest.mark.parametrize("text", INVISIBLE)
def test_an_observation_of_invisible_characters_is_refused(text: str) -> None:
    engine = make_engine(consolidation_every=0)
    with pytest.raises(InvalidObservationError, match="visible character") as info:
        engine.write(Observation(text))
    assert info.value.value == text
    with pytest.raises(InvalidObservationError, match="observation 1"):
        engine.write_many([Observation("Mira: fine"), Observation(text)])
    assert engine.store.count_nodes() == 0


@pytest.mark.parametrize("speaker", ["\u200b", "\ufeff\u2060", "\u00ad "])
def test_a_speaker_of_invisible_characters_is_refused(speaker: str) -> None:
    engine = make_engine(consolidation_every=0)
    with pytest.raises(InvalidObservationError, match="speaker must not be blank"):
        engine.write(Observation("hello there", speaker=speaker))
    assert engine.store.count_nodes() == 0


@pytest.mark.parametrize("text", INVISIBLE)
def test_an_edit_to_invisible_characters_is_refused_and_keeps_the_text(text: str) -> None:
    engine = make_engine(consolidation_every=0)
    node_id = engine.write(obs("Mira: my bicycle broke")).node_id
    with pytest.raises(InvalidObservationError, match="visible character"):
        engine.edit(node_id, text)
    assert engine.get(node_id).node.content == "Mira: my bicycle broke"


@pytest.mark.parametrize("text", INVISIBLE)
def test_a_query_of_invisible_characters_is_refused(text: str) -> None:
    engine = make_engine(consolidation_every=0)
    engine.write(obs("Mira: my bicycle broke"))
    with pytest.raises(InvalidQueryError, match="visible character") as info:
        engine.query(text)
    assert info.value.value == text


@pytest.mark.parametrize("text", VISIBLE)
def test_visible_text_with_invisible_characters_is_stored_byte_for_byte(text: str) -> None:
    engine = make_engine(consolidation_every=0)
    node_id = engine.write(Observation(text, speaker="\u200bMira")).node_id
    node = engine.get(node_id).node
    assert (node.content, node.speaker) == (text, "\u200bMira")
    assert engine.edit(node_id, text + "\u200b").node.content == text + "\u200b"
    assert engine.query(text).query == text


@pytest.mark.parametrize("text", ["\u200b", "\ufeff\u2060", " \u00ad "])
def test_an_ingested_line_of_invisible_text_is_refused_before_the_speaker_prefix(tmp_path: Path, text: str) -> None:
    from memory.ingest import read_jsonl

    path = tmp_path / "notes.jsonl"  # "Mira: \u200b" would be visible: the check is on the text itself
    path.write_text('{"text": "fine", "speaker": "Mira"}\n' + json.dumps({"text": text, "speaker": "Mira"}) + "\n")
    with pytest.raises(InvalidObservationError, match=r"notes\.jsonl:2: needs a non-empty 'content'"):
        list(read_jsonl(path))
