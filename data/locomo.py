"""LoCoMo loader: turns in order with session dates, questions with cleaned gold evidence.

The file is read from a path the user gives (CC BY-NC 4.0: never bundled). Evidence ids are normalised
(`D8:6; D9:17` split, `D:11:26` -> `D11:26`, unknown ids dropped); the audit file, when given, replaces the
cited evidence of the questions it corrects. Audit entries are matched by conversation and question text
(their `qa` numbers are 0-based, whatever the audit's README says); an entry that matches no question of a loaded
conversation is refused, since it would leave the evidence it corrects unchanged. A dia_id must name one turn.
Every session needs its `session_<n>_date_time` in LoCoMo's format; a turn's text may be empty or absent only when
it has a `blip_caption` (an image-only turn); any other value of the wrong type is refused, naming the record.
Categories: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial. The category is a label for evaluation and training only.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
import sys
import unicodedata
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from data.schema import DataError

CATEGORY_NAMES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_DATE_FORMAT = "%I:%M %p on %d %B, %Y"
_DATE_EXAMPLE = "1:56 pm on 8 May, 2023"
_DIA = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_LOCOMO = "LoCoMo file"  # how messages name the two files a load reads
_AUDIT = "the --audit file"
_INVISIBLE = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})  # controls, zero-width / format characters, separators
_SHOWN = reprlib.Repr()  # values in messages: short, and safe for deeply nested lists
_SHOWN.maxstring = _SHOWN.maxother = 80


class LocomoError(DataError, ValueError):
    """A LoCoMo file that cannot be read or is not shaped like LoCoMo (names the file and the record)."""


@dataclass(frozen=True)
class Turn:
    dia_id: str
    session: int
    index: int  # position in the whole conversation
    speaker: str
    text: str
    caption: str | None
    date: datetime | None  # the session's date

    def memory_text(self) -> str:
        """The text ingested as one observation: `Speaker: text` plus `[shares caption]`."""
        base = f"{self.speaker}: {self.text}"
        return f"{base} [shares {self.caption}]" if self.caption else base


@dataclass(frozen=True)
class Question:
    qid: str  # locomo_<sample index in locomo10.json>_qa<0-based index> (the audit's numbering)
    question: str
    answer: str
    category: int
    evidence: tuple[str, ...]  # cleaned, existing dia_ids


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]
    observations: dict[str, list[tuple[str, str]]]  # session key -> [(fact, dia_id)] (training labels only)

    def turn_by_id(self) -> dict[str, Turn]:
        return {t.dia_id: t for t in self.turns}


def parse_date(text: str) -> datetime | None:
    try:
        return datetime.strptime(text.strip(), _DATE_FORMAT)
    except (ValueError, AttributeError):
        return None


def normalise_evidence(raw: object, known: set[str]) -> tuple[str, ...]:
    items = raw if isinstance(raw, list) else [raw]
    out: list[str] = []
    for item in items:
        for m in _DIA.finditer(str(item)):
            dia = f"D{int(m.group(1))}:{int(m.group(2))}"
            if dia in known and dia not in out:
                out.append(dia)
    return tuple(out)


# Sample ids of locomo10.json in file order; the audit names questions by this index.
LOCOMO10_ORDER: tuple[str, ...] = tuple(
    f"conv-{n}" for n in (26, 30, 41, 42, 43, 44, 47, 48, 49, 50)
)


def load_locomo(path: str | Path, *, audit: str | Path | None = None, conversations: tuple[str, ...] | None = None) -> list[Conversation]:
    """Read a LoCoMo JSON file (optionally a subset of sample ids), applying audit corrections.
    `LocomoError` names a file (the LoCoMo file or the audit file) that cannot be read or a record that is not
    shaped like LoCoMo."""
    samples = _read_json(path)
    corrections = _read_corrections(audit) if audit is not None else {}
    records = _records(samples, path)
    if not records:
        raise LocomoError(f"{path} holds no conversations")
    out: list[Conversation] = []
    for i, sample in enumerate(records):
        sid = _sample_id(sample, path, i)
        if conversations is not None and sid not in conversations:
            continue
        try:
            if any(c.sample_id == sid for c in out):  # its examples would repeat the first one's ids
                raise ValueError(f"sample_id {sid} appears more than once")
            out.append(_conversation(sample, corrections))
        except (KeyError, TypeError, AttributeError, ValueError, IndexError) as error:
            raise _shape_error(path, f"sample {i} ({sid})", error) from error
    _check_corrections_used(corrections, out, audit)
    return out


def _sample_id(sample: dict, path: str | Path, index: int) -> str:
    """A sample's `sample_id`: it names the conversation's examples, groups and splits, so it must be text."""
    sid = sample.get("sample_id")
    if not isinstance(sid, str) or not sid.strip():
        raise LocomoError(f"{path} does not look like LoCoMo data: sample {index}: sample_id must be a non-empty string, got {sid!r}")
    return sid


def _read_corrections(audit: str | Path) -> dict[tuple[str, str], list[str]]:
    """The audit file's corrected evidence by (sample id, question text); `LocomoError` names the audit file."""
    corrections: dict[tuple[str, str], list[str]] = {}
    for i, entry in enumerate(_records(_read_json(audit, _AUDIT), audit, _AUDIT)):
        try:
            fixed = _evidence_list(entry)
            conv_index = _audit_conversation(entry)
            question = _text(entry, "question")
        except (KeyError, TypeError, AttributeError, ValueError, IndexError) as error:
            raise _shape_error(audit, f"audit entry {i}", error, _AUDIT) from error
        if fixed:
            corrections[(LOCOMO10_ORDER[conv_index], question)] = fixed
    return corrections


def _audit_conversation(entry: dict) -> int:
    """The locomo10.json index an audit entry's `question_id` (`locomo_<index>_qa<n>`) names."""
    qid = _text(entry, "question_id")
    parts = qid.split("_")
    number = parts[1] if len(parts) > 1 else ""
    # -1 would name the last conversation of locomo10.json; past its end, the correction would be dropped
    if not (number.isascii() and number.isdigit()) or int(number) >= len(LOCOMO10_ORDER):
        raise ValueError(f"question_id {qid!r} names no conversation (expected locomo_<0-{len(LOCOMO10_ORDER) - 1}>_qa<n>)")
    return int(number)


def _evidence_list(entry: dict) -> list[str] | None:
    """An audit entry's `correct_evidence` (None when it has none): anything but a list of dia_id strings would
    replace the question's evidence with nothing."""
    fixed = entry.get("correct_evidence")
    if fixed is not None and (not isinstance(fixed, list) or not all(isinstance(item, str) for item in fixed)):
        raise ValueError(f"correct_evidence must be a list of dia_id strings, got {fixed!r}")
    return fixed


def _check_corrections_used(corrections: dict[tuple[str, str], list[str]], loaded: list[Conversation],
                            audit: str | Path | None) -> None:
    """A correction for a loaded conversation that names none of its questions is an audit of other data (another
    LoCoMo release, edited question text): ignoring it would keep the evidence it was meant to fix."""
    asked = {(c.sample_id, q.question) for c in loaded for q in c.questions}
    loaded_ids = {c.sample_id for c in loaded}
    stray = [key for key in corrections if key[0] in loaded_ids and key not in asked]
    if stray:
        shown = "; ".join(f"{sid}: {question!r}" for sid, question in stray[:3])
        more = f" (and {len(stray) - 3} more)" if len(stray) > 3 else ""
        raise LocomoError(f"{_AUDIT} {audit} corrects {len(stray)} question(s) the LoCoMo file does not ask: {shown}{more}")


def _read_json(path: str | Path, what: str = _LOCOMO) -> object:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except RecursionError as error:  # json.loads recurses once per nested array or object
        raise LocomoError(f"cannot read {what} {path}: nested too deeply (arrays or objects more than about "
                          f"{sys.getrecursionlimit()} levels deep)") from error
    except (OSError, ValueError) as error:  # ValueError: undecodable text, bad JSON, an integer of 4,300+ digits
        raise LocomoError(f"cannot read {what} {path}: {error}") from error


def _records(data: object, path: str | Path, what: str = _LOCOMO) -> list[dict]:
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise LocomoError(f"{_not_shaped(path, what)}: expected a JSON list of objects")
    return data


def _not_shaped(path: str | Path, what: str) -> str:
    return f"{path} does not look like LoCoMo data" if what == _LOCOMO else f"{what} {path} is not a LoCoMo audit"


def _shape_error(path: str | Path, where: str, error: Exception, what: str = _LOCOMO) -> LocomoError:
    detail = f"missing {error}" if isinstance(error, KeyError) else str(error)
    return LocomoError(f"{_not_shaped(path, what)}: {where}: {detail}")


def _kind(value: object) -> str:
    """A JSON value's type in plain words, for messages about the shape of a record."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    kinds = ((str, "a string"), ((int, float), "a number"), (list, "a list"), (dict, "an object"))
    return next((name for types, name in kinds if isinstance(value, types)), type(value).__name__)


def _text(record: dict, key: str, where: str = "") -> str:
    """`record[key]`, which the rules treat as text (KeyError when absent, ValueError when not a string)."""
    value = record[key]
    if not isinstance(value, str):
        raise ValueError(f"{where}{key} must be a string, got {_SHOWN.repr(value)}")
    return value


def _optional_text(record: dict, key: str, where: str) -> str | None:
    """`record[key]` as text, None when absent or null (ValueError when another type)."""
    value = record.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{where}: {key} must be a string, got {_SHOWN.repr(value)}")
    return value


def _visible(text: str | None) -> bool:
    """Whether `text` shows something: a character that is not whitespace, a control or a zero-width character."""
    return any(not char.isspace() and unicodedata.category(char) not in _INVISIBLE for char in text or "")


def _list_of_objects(value: object, what: str, item: str, entry: str) -> list[dict]:
    """`value` as a list of JSON `item` objects; ValueError naming `what`, or the entry (`entry` and its index),
    when it is of another shape."""
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a list of {item} objects, got {_kind(value)}")
    for index, element in enumerate(value):
        if not isinstance(element, dict):
            raise ValueError(f"{entry} {index} must be a {item} object, got {_kind(element)}")
    return value


def _category(qa: dict, index: int) -> int:
    """A question's category (1-5); anything else (missing, another numbering) would misfile its scores."""
    value = qa.get("category")
    try:
        number = float(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else math.nan
    except ValueError:
        number = math.nan
    if not number.is_integer() or int(number) not in CATEGORY_NAMES:
        raise ValueError(f"qa {index}: category must be one of {sorted(CATEGORY_NAMES)}, got {value!r}")
    return int(number)


def _conversation(sample: dict, corrections: dict[tuple[str, str], list[str]]) -> Conversation:
    conv = sample["conversation"]
    if not isinstance(conv, dict):
        raise ValueError(f"conversation must be an object (speakers, sessions and their dates), got {_kind(conv)}")
    sid = sample["sample_id"]
    turns = _turns(conv)
    if not turns:  # the rules sample turns of every conversation
        raise ValueError("no session turns (session_1, session_2, ... lists of turns)")
    known = {t.dia_id for t in turns}
    if len(known) < len(turns):  # evidence names turns by dia_id: a repeated one would point at two turns
        seen: set[str] = set()
        repeated = next(t.dia_id for t in turns if t.dia_id in seen or seen.add(t.dia_id))
        raise ValueError(f"dia_id {repeated!r} names more than one turn")
    questions = _questions(sample, known, corrections)
    observations = _observations(sample.get("observation"))
    return Conversation(sid, (_text(conv, "speaker_a"), _text(conv, "speaker_b")), tuple(turns), tuple(questions), observations)


def _turns(conv: dict) -> list[Turn]:
    """The turns of every `session_<n>` in session order, each with its session's date."""
    sessions = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))
    turns: list[Turn] = []
    for s in sessions:
        date = _session_date(conv, s)
        for j, raw in enumerate(_list_of_objects(conv[f"session_{s}"], f"session_{s}", "turn", f"session_{s} turn")):
            turns.append(_turn(raw, s, j, len(turns), date))
    return turns


def _session_date(conv: dict, session: int) -> datetime:
    """A session's `session_<n>_date_time`: every turn's date, so a missing or unreadable one is refused."""
    key = f"session_{session}_date_time"
    if key not in conv:
        raise ValueError(f"{key} is missing (session_{session} needs its date, like {_DATE_EXAMPLE!r})")
    value = conv[key]
    date = parse_date(value) if isinstance(value, str) else None
    if date is None:
        raise ValueError(f"{key} must be a date like {_DATE_EXAMPLE!r} (format {_DATE_FORMAT}), got {_SHOWN.repr(value)}")
    return date


def _turn(raw: dict, session: int, position: int, index: int, date: datetime) -> Turn:
    """One turn; its text may be empty or absent only when a caption carries it (an image-only turn)."""
    where = f"session_{session} turn {position}"
    dia_id = _text(raw, "dia_id", f"{where}: ")
    speaker = _text(raw, "speaker", f"{where}: ")
    where = f"{where} ({dia_id})"
    text = _optional_text(raw, "text", where)
    caption = _optional_text(raw, "blip_caption", where)
    if not _visible(text) and not _visible(caption):  # it would be stored as an empty memory, "Speaker: "
        shown = "absent" if "text" not in raw else "null" if text is None else _SHOWN.repr(text)
        raise ValueError(f"{where}: has neither visible text nor a blip_caption (text: {shown}); "
                         "only an image-only turn may lack text, and its caption carries it")
    return Turn(dia_id=dia_id, session=session, index=index, speaker=speaker, text=text or "", caption=caption or None, date=date)


def _questions(sample: dict, known: set[str], corrections: dict[tuple[str, str], list[str]]) -> list[Question]:
    """The `qa` questions with cleaned evidence (the audit's, when it corrects the question)."""
    sid = sample["sample_id"]
    conv_index = LOCOMO10_ORDER.index(sid) if sid in LOCOMO10_ORDER else None
    questions = []
    for i, qa in enumerate(_list_of_objects(sample["qa"], "qa", "question", "qa")):
        qid = f"locomo_{conv_index}_qa{i}" if conv_index is not None else f"{sid}_qa{i}"
        question = _text(qa, "question", f"qa {i}: ")
        evidence = corrections.get((sid, question), qa.get("evidence", []))
        answer = qa.get("answer", qa.get("adversarial_answer", ""))
        questions.append(
            Question(qid, question, str(answer), _category(qa, i), normalise_evidence(evidence, known))
        )
    return questions


def _observations(raw: object) -> dict[str, list[tuple[str, str]]]:
    """The `observation` facts by session key (none when absent or null)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"observation must be an object (session key -> facts by speaker), got {_kind(raw)}")
    return {k: _facts(v) for k, v in raw.items()}


def _facts(by_speaker: object) -> list[tuple[str, str]]:
    """A session's `observation` facts as (fact, cited dia_ids as text); entries of another shape are skipped
    (facts are training labels only, so a malformed one must not stop a conversation from loading)."""
    out = []
    for facts in by_speaker.values() if isinstance(by_speaker, dict) else ():
        for entry in facts if isinstance(facts, list) else ():
            if isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], str):
                out.append((entry[0], str(entry[1])))
    return out
