"""`data.locomo.load_locomo` on malformed LoCoMo and audit files: a `LocomoError` naming the file and the place
(sample, session, turn, qa entry), never a Python internal or silently wrong data (tiny fixtures written here;
the real data is never read by tests)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from data.locomo import LocomoError, load_locomo
from tests.training.test_data_locomo import write_locomo_fixture
from training.__main__ import main

Change = Callable[[list], object]


def _broken(tmp_path: Path, change: Change) -> Path:
    """The fixture with `change` applied to its samples, written to bad.json."""
    path, _ = write_locomo_fixture(tmp_path)
    samples = json.loads(path.read_text(encoding="utf-8"))
    change(samples)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(samples), encoding="utf-8")
    return bad


def _refused(path: Path, where: str, message: str, **kwargs: object) -> LocomoError:
    """Loading `path` raises a LocomoError `<file> does not look like LoCoMo data: <where>: <message>`."""
    expected = rf"^{re.escape(str(path))} does not look like LoCoMo data: {re.escape(where)}: {message}$"
    with pytest.raises(LocomoError, match=expected) as info:
        load_locomo(path, **kwargs)  # type: ignore[arg-type]
    assert info.value.__cause__ is not None  # chained to the check that failed
    return info.value


def _turn(samples: list, session: int, position: int) -> dict:
    return samples[0]["conversation"][f"session_{session}"][position]


@pytest.mark.parametrize("what", ["LoCoMo file", "the --audit file"])
def test_json_nested_too_deeply_is_refused_not_a_recursion_error(tmp_path: Path, what: str) -> None:
    path, audit = write_locomo_fixture(tmp_path)
    deep = path if what == "LoCoMo file" else audit
    deep.write_text("[" * 100_000, encoding="utf-8")
    with pytest.raises(LocomoError, match=rf"^cannot read {what} {re.escape(str(deep))}: nested too deeply \(") as info:
        load_locomo(path, audit=audit)
    assert isinstance(info.value.__cause__, RecursionError)


def test_json_the_decoder_refuses_for_another_reason_is_a_locomo_error(tmp_path: Path) -> None:
    path = tmp_path / "digits.json"
    path.write_text("[" + "7" * 5000 + "]", encoding="utf-8")  # over Python's 4,300-digit integer limit
    with pytest.raises(LocomoError, match=rf"^cannot read LoCoMo file {re.escape(str(path))}: "):
        load_locomo(path)


def test_a_nested_too_deeply_file_is_a_one_line_error_on_the_command_line(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000, encoding="utf-8")
    out = tmp_path / "out"
    code = main(["build-data", "--locomo", str(path), "--out", str(out), "--synthetic-per-family", "4", "--dense", "none"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: cannot read LoCoMo file {path}: nested too deeply")
    assert err.count("\n") == 1 and "Traceback" not in err and not out.exists()


NO_TEXT = r"has neither visible text nor a blip_caption \(text: {}\); only an image-only turn may lack text, and its caption carries it"


@pytest.mark.parametrize(("position", "change", "message"), [
    # each was stored as an empty memory, "Alma: " (session_1 turn 2 is D1:3; turn 3, D1:4, has a caption)
    (2, lambda s: _turn(s, 1, 2).update(text=None), NO_TEXT.format("null")),
    (2, lambda s: _turn(s, 1, 2).pop("text"), NO_TEXT.format("absent")),
    (2, lambda s: _turn(s, 1, 2).update(text=""), NO_TEXT.format("''")),
    (2, lambda s: _turn(s, 1, 2).update(text=" \u200b\t"), NO_TEXT.format(re.escape(repr(" \u200b\t")))),
    (3, lambda s: _turn(s, 1, 3).update(text="", blip_caption=""), NO_TEXT.format("''")),
    (3, lambda s: _turn(s, 1, 3).update(text=None, blip_caption=None), NO_TEXT.format("null")),
    # a text of another type was str()-ed ("Alma: 7") or dropped (false, [], {})
    (2, lambda s: _turn(s, 1, 2).update(text=7), "text must be a string, got 7"),
    (2, lambda s: _turn(s, 1, 2).update(text=False), "text must be a string, got False"),
    (2, lambda s: _turn(s, 1, 2).update(text=["hi", "there"]), r"text must be a string, got \['hi', 'there'\]"),
    # a caption of another type was stored as it came ("[shares {'a': 1}]")
    (3, lambda s: _turn(s, 1, 3).update(blip_caption=5), "blip_caption must be a string, got 5"),
    (3, lambda s: _turn(s, 1, 3).update(blip_caption={"a": 1}), r"blip_caption must be a string, got \{'a': 1\}"),
])
def test_a_turn_without_usable_text_is_refused_naming_session_and_dia_id(tmp_path: Path, position: int, change: Change,
                                                                         message: str) -> None:
    _refused(_broken(tmp_path, change), f"sample 0 (conv-26): session_1 turn {position} (D1:{position + 1})", message)


@pytest.mark.parametrize("text", [None, "", "absent"])
def test_an_image_only_turn_keeps_loading_with_its_caption(tmp_path: Path, text: str | None) -> None:
    def image_only(samples: list) -> None:
        turn = _turn(samples, 1, 3)  # D1:4, with a caption
        if text == "absent":
            del turn["text"]
        else:
            turn["text"] = text

    conversation = load_locomo(_broken(tmp_path, image_only))[0]
    turn = conversation.turn_by_id()["D1:4"]
    assert turn.text == "" and turn.caption and turn.memory_text() == f"{turn.speaker}:  [shares {turn.caption}]"


@pytest.mark.parametrize(("value", "shown"), [
    ("yesterday", "'yesterday'"), ("2023-05-15", "'2023-05-15'"), ("13:56 pm on 15 May, 2023", "'13:56 pm on 15 May, 2023'"),
    (20230515, "20230515"), (None, "None"), (["1:56 pm on 15 May, 2023"], r"\['1:56 pm on 15 May, 2023'\]"),
])
def test_an_unreadable_session_date_is_refused_showing_the_value_and_the_format(tmp_path: Path, value: object, shown: str) -> None:
    # each was dropped without a word: the session's turns had no date
    bad = _broken(tmp_path, lambda s: s[1]["conversation"].update(session_3_date_time=value))
    message = rf"session_3_date_time must be a date like '1:56 pm on 8 May, 2023' \(format %I:%M %p on %d %B, %Y\), got {shown}"
    _refused(bad, "sample 1 (conv-30)", message)


def test_a_missing_session_date_is_refused(tmp_path: Path) -> None:
    bad = _broken(tmp_path, lambda s: s[2]["conversation"].pop("session_2_date_time"))
    _refused(bad, "sample 2 (conv-41)", r"session_2_date_time is missing \(session_2 needs its date, like '1:56 pm on 8 May, 2023'\)")


def test_a_date_of_a_session_the_file_lacks_is_not_read(tmp_path: Path) -> None:
    # locomo10.json's conv-26 has dates for sessions it has no turns for: they date nothing, so they are not checked
    bad = _broken(tmp_path, lambda s: s[0]["conversation"].update(session_9_date_time="not a date"))
    assert len(load_locomo(bad)) == 4


@pytest.mark.parametrize(("change", "where", "message"), [
    (lambda s: s[0]["conversation"].update(session_1="hello"), "sample 0 (conv-26)",
     "session_1 must be a list of turn objects, got a string"),
    (lambda s: s[0]["conversation"].update(session_2={"D2:1": "hi"}), "sample 0 (conv-26)",
     "session_2 must be a list of turn objects, got an object"),
    (lambda s: s[1]["conversation"].update(session_1=None), "sample 1 (conv-30)",
     "session_1 must be a list of turn objects, got null"),
    (lambda s: s[0]["conversation"].update(session_2=["hi", "there"]), "sample 0 (conv-26)",
     "session_2 turn 0 must be a turn object, got a string"),
    (lambda s: s[0]["conversation"]["session_3"].__setitem__(5, 3), "sample 0 (conv-26)",
     "session_3 turn 5 must be a turn object, got a number"),
    (lambda s: s[3]["conversation"]["session_1"].__setitem__(0, ["D1:1", "Greta", "hi"]), "sample 3 (conv-44)",
     "session_1 turn 0 must be a turn object, got a list"),
    (lambda s: s[0].update(conversation="Alma and Berit talk"), "sample 0 (conv-26)",
     r"conversation must be an object \(speakers, sessions and their dates\), got a string"),
    (lambda s: s[1].update(conversation=[]), "sample 1 (conv-30)",
     r"conversation must be an object \(speakers, sessions and their dates\), got a list"),
    (lambda s: s[1].update(conversation=None), "sample 1 (conv-30)",
     r"conversation must be an object \(speakers, sessions and their dates\), got null"),
    (lambda s: s[0].update(qa=None), "sample 0 (conv-26)", "qa must be a list of question objects, got null"),
    (lambda s: s[2].update(qa={"0": {"question": "q"}}), "sample 2 (conv-41)", "qa must be a list of question objects, got an object"),
    (lambda s: s[2].update(qa="What?"), "sample 2 (conv-41)", "qa must be a list of question objects, got a string"),
    (lambda s: s[0]["qa"].__setitem__(2, "What did Berit say?"), "sample 0 (conv-26)", "qa 2 must be a question object, got a string"),
    (lambda s: s[1]["qa"].__setitem__(0, None), "sample 1 (conv-30)", "qa 0 must be a question object, got null"),
    (lambda s: s[0].pop("qa"), "sample 0 (conv-26)", "missing 'qa'"),  # refused before this change too
    (lambda s: s[0].update(observation=["a fact"]), "sample 0 (conv-26)",
     r"observation must be an object \(session key -> facts by speaker\), got a list"),
    (lambda s: s[3].update(observation="facts"), "sample 3 (conv-44)",
     r"observation must be an object \(session key -> facts by speaker\), got a string"),
])
def test_a_record_of_the_wrong_shape_is_refused_in_plain_words(tmp_path: Path, change: Change, where: str, message: str) -> None:
    error = _refused(_broken(tmp_path, change), where, message)
    assert "attribute" not in str(error) and "indices" not in str(error) and "iterable" not in str(error)


def test_observations_absent_or_null_are_none(tmp_path: Path) -> None:
    def drop(samples: list) -> None:
        del samples[0]["observation"]
        samples[1]["observation"] = None

    conversations = load_locomo(_broken(tmp_path, drop))
    assert conversations[0].observations == {} and conversations[1].observations == {}
    assert conversations[2].observations  # the others keep theirs


@pytest.mark.parametrize(("question_id", "message"), [
    (7, "question_id must be a string, got 7"),
    (None, "question_id must be a string, got None"),
    ("locomo_x_qa3", r"question_id 'locomo_x_qa3' names no conversation \(expected locomo_<0-9>_qa<n>\)"),
    ("conv26", r"question_id 'conv26' names no conversation \(expected locomo_<0-9>_qa<n>\)"),
    ("locomo_\u0663_qa3", "question_id 'locomo_\u0663_qa3' names no conversation \\(expected locomo_<0-9>_qa<n>\\)"),  # Arabic-Indic 3
])
def test_an_audit_question_id_that_is_not_locomo_n_qa_m_is_refused(tmp_path: Path, question_id: object, message: str) -> None:
    path, audit = write_locomo_fixture(tmp_path)
    question = json.loads(path.read_text(encoding="utf-8"))[0]["qa"][2]["question"]
    audit.write_text(json.dumps([{"question_id": question_id, "question": question, "correct_evidence": ["D2:6"]}]), encoding="utf-8")
    expected = rf"^the --audit file {re.escape(str(audit))} is not a LoCoMo audit: audit entry 0: {message}$"
    with pytest.raises(LocomoError, match=expected):
        load_locomo(path, audit=audit)


def test_the_fixture_loads_unchanged_after_every_refusal_test(tmp_path: Path) -> None:
    path, audit = write_locomo_fixture(tmp_path)
    conversations = load_locomo(path, audit=audit)
    assert [c.sample_id for c in conversations] == ["conv-26", "conv-30", "conv-41", "conv-44"]
    assert all(t.date is not None and t.text for c in conversations for t in c.turns)
