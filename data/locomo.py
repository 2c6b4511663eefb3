"""LoCoMo loader: turns in order with session dates, questions with cleaned gold evidence.

The file is read from a path the user gives (CC BY-NC 4.0: never bundled). Evidence ids are normalised
(`D8:6; D9:17` split, `D:11:26` -> `D11:26`, unknown ids dropped); the audit file, when given, replaces the
cited evidence of the questions it corrects. Audit entries are matched by conversation and question text
(their `qa` numbers are 0-based, whatever the audit's README says); an entry that matches no question of a loaded
conversation is refused, since it would leave the evidence it corrects unchanged. A dia_id must name one turn.
Categories: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial. The category is a label for evaluation and training only.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from data.schema import DataError

CATEGORY_NAMES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_DATE_FORMAT = "%I:%M %p on %d %B, %Y"
_DIA = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_LOCOMO = "LoCoMo file"  # how messages name the two files a load reads
_AUDIT = "the --audit file"


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
            conv_index = int(entry["question_id"].split("_")[1])
            if not 0 <= conv_index < len(LOCOMO10_ORDER):  # -1 would name the last conversation of locomo10.json
                raise ValueError(f"question_id {entry['question_id']!r} names no conversation")
            question = _text(entry, "question")
        except (KeyError, TypeError, AttributeError, ValueError, IndexError) as error:
            raise _shape_error(audit, f"audit entry {i}", error, _AUDIT) from error
        if fixed:
            corrections[(LOCOMO10_ORDER[conv_index], question)] = fixed
    return corrections


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
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
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


def _text(record: dict, key: str, where: str = "") -> str:
    """`record[key]`, which the rules treat as text (KeyError when absent, ValueError when not a string)."""
    value = record[key]
    if not isinstance(value, str):
        raise ValueError(f"{where}{key} must be a string, got {value!r}")
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
    sid = sample["sample_id"]
    sessions = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))
    turns: list[Turn] = []
    for s in sessions:
        date = parse_date(conv.get(f"session_{s}_date_time", ""))
        for j, t in enumerate(conv[f"session_{s}"]):
            turns.append(
                Turn(
                    dia_id=_text(t, "dia_id", f"session_{s} turn {j}: "),
                    session=s,
                    index=len(turns),
                    speaker=_text(t, "speaker", f"session_{s} turn {j}: "),
                    text=str(t.get("text") or ""),  # an image-only turn: its caption carries it
                    caption=t.get("blip_caption") or None,
                    date=date,
                )
            )
    if not turns:  # the rules sample turns of every conversation
        raise ValueError("no session turns (session_1, session_2, ... lists of turns)")
    known = {t.dia_id for t in turns}
    if len(known) < len(turns):  # evidence names turns by dia_id: a repeated one would point at two turns
        seen: set[str] = set()
        repeated = next(t.dia_id for t in turns if t.dia_id in seen or seen.add(t.dia_id))
        raise ValueError(f"dia_id {repeated!r} names more than one turn")
    conv_index = LOCOMO10_ORDER.index(sid) if sid in LOCOMO10_ORDER else None
    questions = []
    for i, qa in enumerate(sample["qa"]):
        qid = f"locomo_{conv_index}_qa{i}" if conv_index is not None else f"{sid}_qa{i}"
        question = _text(qa, "question", f"qa {i}: ")
        evidence = corrections.get((sid, question), qa.get("evidence", []))
        answer = qa.get("answer", qa.get("adversarial_answer", ""))
        questions.append(
            Question(qid, question, str(answer), _category(qa, i), normalise_evidence(evidence, known))
        )
    observations = {k: _facts(v) for k, v in (sample.get("observation") or {}).items()}
    return Conversation(sid, (_text(conv, "speaker_a"), _text(conv, "speaker_b")), tuple(turns), tuple(questions), observations)


def _facts(by_speaker: object) -> list[tuple[str, str]]:
    """A session's `observation` facts as (fact, cited dia_ids as text); entries of another shape are skipped
    (facts are training labels only, so a malformed one must not stop a conversation from loading)."""
    out = []
    for facts in by_speaker.values() if isinstance(by_speaker, dict) else ():
        for entry in facts if isinstance(facts, list) else ():
            if isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], str):
                out.append((entry[0], str(entry[1])))
    return out
