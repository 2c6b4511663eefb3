"""Decision data: one record type for every source (LoCoMo rules, synthetic generators, teachers).

A `DecisionExample` is one labelled question about one JSON state, in wire form:

    state     the request state exactly as the engine sends it (shape from controller/families.py)
    question  the wire question: {"type", "instructions", "criteria"} (possibly a paraphrase, options shuffled)
    target    noul -> probability in [0, 1]; choice -> {option: p} over the criteria's options (sums to 1);
              score -> [p_0, ..., p_{n-1}] over the levels (sums to 1)

Examples that share a state (same split) form a `DecisionGroup`: one packed training request. Files are
JSONL, one per split (`train.jsonl`, `calibration.jsonl`, `dev.jsonl`, `test.jsonl`); `load_decisions`
exposes them as a `datasets.DatasetDict` with state / question / target as JSON strings (a flat schema)
plus a `state_key` column (hash of the canonical state) to group on.

Errors of the data package:

    DataError                root of every data failure
    ├── SchemaError          a record that violates the schema (carries the offending field)
    ├── SplitError           a split plan that is inconsistent, or data that leaks across splits
    ├── LocomoError          a LoCoMo file that cannot be read or is not shaped like LoCoMo (also a ValueError)
    └── TeacherError         a teacher that cannot be used (refused, or failing after retries)

This module imports nothing from the project: any package may use it.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeAlias, Union

from data.errors import DataError
from data.paths import staged

SPLITS: tuple[str, ...] = ("train", "calibration", "dev", "test")
KINDS: tuple[str, ...] = ("noul", "choice", "score")
_TOLERANCE = 1e-4

Target: TypeAlias = Union[float, dict[str, float], list[float]]


class SchemaError(DataError):
    """A record violates the decision-data schema."""

    def __init__(self, message: str, *, field_name: str = "", value: object = None) -> None:
        super().__init__(message)
        self.field_name = field_name
        self.value = value


class SplitError(DataError):
    """An inconsistent split plan, or examples that leak source text across splits."""


def canonical(value: object) -> str:
    """Deterministic JSON (sorted keys, no spaces, Unicode kept): hashing and dedupe only."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def state_key(state: object) -> str:
    """Stable 16-hex id of a state's content (key order ignored)."""
    return hashlib.sha1(canonical(state).encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class DecisionExample:
    """One labelled question about one state. Validated on construction; JSON round-trips exactly."""

    id: str
    family: str
    question_name: str
    state: Any
    question: dict[str, Any]
    target: Target
    source: str
    group: str
    split: str = "train"
    weight: float = 1.0
    notes: str = ""

    def __post_init__(self) -> None:
        for name in ("id", "family", "question_name", "source", "group"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise SchemaError(f"{name} must be a non-empty string, got {value!r}", field_name=name, value=value)
        if self.split not in SPLITS:
            raise SchemaError(f"split must be one of {SPLITS}, got {self.split!r}", field_name="split", value=self.split)
        if not isinstance(self.state, (str, dict, list)) or isinstance(self.state, bool):
            raise SchemaError("state must be a string, object or array", field_name="state", value=self.state)
        for name in ("state", "question"):  # JSON that `to_json` and `state_key` can write back (no NaN, no Infinity)
            try:
                canonical(getattr(self, name))
            except (TypeError, ValueError, RecursionError) as error:
                raise SchemaError(f"{name} must be plain JSON: {error}", field_name=name) from error
        weight = self.weight
        if _number(weight) is None or weight < 0:
            raise SchemaError(f"weight must be a finite number >= 0, got {weight!r}", field_name="weight", value=weight)
        object.__setattr__(self, "weight", float(weight))
        object.__setattr__(self, "target", _check_target(self.question, self.target))

    @property
    def kind(self) -> str:
        return str(self.question["type"])

    @property
    def state_key(self) -> str:
        return state_key(self.state)

    def with_split(self, split: str) -> DecisionExample:
        return replace(self, split=split)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DecisionExample:
        missing = [f for f in ("id", "family", "question_name", "state", "question", "target", "source", "group") if f not in data]
        if missing:
            raise SchemaError(f"record lacks fields {missing}", field_name=missing[0])
        extra = sorted(set(data) - _FIELDS)
        if extra:
            raise SchemaError(f"record has unknown fields {extra}", field_name=extra[0])
        return cls(**dict(data))

    @classmethod
    def from_json(cls, text: str) -> DecisionExample:
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as error:
            raise SchemaError(f"not a JSON record: {error}", value=text[:200]) from error
        if not isinstance(data, dict):
            raise SchemaError("a record must be a JSON object", value=text[:200])
        return cls.from_dict(data)


_FIELDS = frozenset(DecisionExample.__dataclass_fields__)


def _check_target(question: object, target: object) -> Target:
    if not isinstance(question, dict) or question.get("type") not in KINDS:
        raise SchemaError(f"question must be a wire dict with type in {KINDS}", field_name="question", value=question)
    kind = question["type"]
    criteria = question.get("criteria")
    if kind == "noul":
        number = _number(target)
        if number is None or not 0.0 <= number <= 1.0:
            raise SchemaError(f"a noul target is a probability in [0, 1], got {target!r}", field_name="target", value=target)
        if question.get("instructions") is None and not criteria:
            raise SchemaError("a noul needs instructions or criteria", field_name="question", value=question)
        return number
    if kind == "choice":
        if not isinstance(criteria, dict) or not criteria:
            raise SchemaError("a choice needs a criteria map of options", field_name="question", value=question)
        if not isinstance(target, Mapping) or set(target) != set(criteria):
            raise SchemaError(f"a choice target maps exactly the options {sorted(criteria)}", field_name="target", value=target)
        probs = {str(k): _probability(v) for k, v in target.items()}
        _check_sum(probs.values(), target)
        return {name: probs[name] for name in criteria}  # option order follows the question
    if not isinstance(criteria, list) or len(criteria) < 2:
        raise SchemaError("a score needs a list of at least two levels", field_name="question", value=question)
    if not isinstance(target, (list, tuple)) or len(target) != len(criteria):
        raise SchemaError(f"a score target lists {len(criteria)} level probabilities", field_name="target", value=target)
    levels = [_probability(v) for v in target]
    _check_sum(levels, target)
    return levels


def _number(value: object) -> float | None:
    """A finite int or float as a float; None for anything else (bool, NaN, infinities, an int past float range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _probability(value: object) -> float:
    number = _number(value)
    if number is None or not 0.0 <= number <= 1.0:
        raise SchemaError(f"probabilities lie in [0, 1], got {value!r}", field_name="target", value=value)
    return number


def _check_sum(values: Iterable[float], target: object) -> None:
    total = sum(values)
    if abs(total - 1.0) > _TOLERANCE:
        raise SchemaError(f"probabilities must sum to 1, got {total:.6f}", field_name="target", value=target)


# ------------------------------------------------------------------------------------------- grouping
@dataclass(frozen=True)
class DecisionGroup:
    """Examples of one split that share a state: one packed request (questions in first-seen order)."""

    state: Any
    split: str
    group: str
    examples: tuple[DecisionExample, ...] = field(default_factory=tuple)

    @property
    def questions(self) -> dict[str, dict[str, Any]]:
        """Wire questions keyed by example id (keys are bookkeeping; they never reach the model)."""
        return {e.id: e.question for e in self.examples}

    @property
    def targets(self) -> dict[str, Target]:
        return {e.id: e.target for e in self.examples}


def group_examples(examples: Iterable[DecisionExample], *, max_questions: int | None = None) -> list[DecisionGroup]:
    """Group examples by (split, state content); a group larger than `max_questions` is cut into several."""
    if max_questions is not None and max_questions < 1:
        raise DataError(f"max_questions must be >= 1 (None: no limit), got {max_questions}")
    buckets: dict[tuple[str, str], list[DecisionExample]] = {}
    for example in examples:
        buckets.setdefault((example.split, example.state_key), []).append(example)
    out = []
    for items in buckets.values():
        step = max_questions or len(items)
        for start in range(0, len(items), step):
            chunk = tuple(items[start : start + step])
            out.append(DecisionGroup(chunk[0].state, chunk[0].split, chunk[0].group, chunk))
    return out


# ------------------------------------------------------------------------------------------------ files
def write_jsonl(path: str | Path, examples: Iterable[DecisionExample], *, append: bool = False) -> int:
    """Write (or append) one JSON record per line; returns the number written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if append:
        _drop_torn_tail(path)
    n = 0
    with path.open("a" if append else "w", encoding="utf-8") as handle:
        for example in examples:
            handle.write(example.to_json() + "\n")
            n += 1
    return n


def _drop_torn_tail(path: Path) -> None:
    """Make appends start on a fresh line after an interrupted append: a last line without its newline is cut,
    unless it is a whole record (the write stopped just before the newline), which `read_jsonl` reads and
    so keeps; it gets its newline."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as handle:
        data = handle.read()
        if data.endswith(b"\n"):
            return
        start = data.rfind(b"\n") + 1
        try:
            DecisionExample.from_json(data[start:].decode("utf-8"))
        except (SchemaError, UnicodeDecodeError):
            handle.truncate(start)
        else:
            handle.write(b"\n")


def read_jsonl(path: str | Path) -> Iterator[DecisionExample]:
    """Records of one JSONL file; a torn last line (an interrupted append) is skipped, also one cut inside a
    multi-byte character. Any other bytes that are not UTF-8 raise `UnicodeDecodeError`."""
    path = Path(path)
    lines = path.read_bytes().splitlines(keepends=True)
    for number, raw in enumerate(lines, 1):
        torn = number == len(lines) and not raw.endswith(b"\n")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            if torn and _cut_character(raw):
                return
            raise
        if not line.strip():
            continue
        try:
            yield DecisionExample.from_json(line)
        except SchemaError as error:
            if torn:
                return
            raise SchemaError(f"{path}:{number}: {error}", field_name=error.field_name, value=error.value) from error


def _cut_character(raw: bytes) -> bool:
    """Whether `raw` is UTF-8 but for a character cut short at its end (a write stopped inside it)."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(raw, final=False)
    except UnicodeDecodeError:
        return False
    return True


def write_splits(directory: str | Path, examples: Sequence[DecisionExample], *,
                 extra: Callable[[dict[str, int]], Mapping[str, str]] | None = None) -> dict[str, int]:
    """One `<split>.jsonl` per split that has examples (stale split files are removed, other files kept); counts
    per split. `extra` (given the counts, once every split is written) names more files (name -> text) written
    with them: the build's `summary.json`, which must never describe other splits than those beside it. The
    directory is replaced whole (`data.paths.staged`): everything is written into a copy beside it that is
    swapped in at the end, so a write killed at any point leaves the previous files or the new ones, never a
    cut split or new splits beside an old summary."""
    counts: dict[str, int] = {}
    rewritten = {f"{split}.jsonl{suffix}" for split in SPLITS for suffix in ("", ".partial")}  # (.partial: older code's)
    with staged(directory, exclude=rewritten) as stage:
        for split in SPLITS:
            rows = [e for e in examples if e.split == split]
            if rows:
                counts[split] = write_jsonl(stage / f"{split}.jsonl", rows)
        for name, text in (extra(counts) if extra else {}).items():
            (stage / name).write_text(text, encoding="utf-8")
    return counts


def load_examples(directory: str | Path, split: str | None = None) -> list[DecisionExample]:
    """All examples of the split files in `directory` (or of one split)."""
    directory = Path(directory)
    names = [split] if split is not None else list(SPLITS)
    out: list[DecisionExample] = []
    for name in names:
        path = directory / f"{name}.jsonl"
        if path.exists():
            try:
                out.extend(read_jsonl(path))
            except (OSError, UnicodeDecodeError) as error:  # a directory, unreadable, not UTF-8 text
                raise DataError(f"cannot read decision examples {path}: {error}") from error
    return out


def to_row(example: DecisionExample) -> dict[str, Any]:
    """Flat row: nested fields as JSON text (question keeps its option order)."""
    dump = lambda value: json.dumps(value, ensure_ascii=False, separators=(",", ":"))  # noqa: E731
    return {
        "id": example.id,
        "family": example.family,
        "question_name": example.question_name,
        "kind": example.kind,
        "state": dump(example.state),
        "state_key": example.state_key,
        "question": dump(example.question),
        "target": dump(example.target),
        "source": example.source,
        "group": example.group,
        "split": example.split,
        "weight": example.weight,
        "notes": example.notes,
    }


def from_row(row: Mapping[str, Any]) -> DecisionExample:
    """Inverse of `to_row` (extra columns ignored)."""
    data = {k: row[k] for k in _FIELDS if k in row}
    for name in ("state", "question", "target"):
        data[name] = json.loads(row[name])
    return DecisionExample.from_dict(data)


def load_decisions(directory: str | Path) -> Any:
    """The split files as a `datasets.DatasetDict` of flat rows (see `to_row`)."""
    try:
        import datasets
    except ImportError as error:
        raise DataError("load_decisions needs the `datasets` package: pip install datasets") from error
    directory = Path(directory)
    splits = {}
    for split in SPLITS:
        path = directory / f"{split}.jsonl"
        if path.exists():
            splits[split] = datasets.Dataset.from_list([to_row(e) for e in read_jsonl(path)])
    if not splits:
        raise DataError(f"no split files (train.jsonl, ...) under {directory}")
    return datasets.DatasetDict(splits)
