"""Counts and label rates of a decision data set: per family / split / source, and per question."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from data.schema import SPLITS, DecisionExample


def source_kind(source: str) -> str:
    """`locomo`, `synthetic` or `teacher` (the part before the first colon)."""
    return source.split(":", 1)[0]


@dataclass(frozen=True)
class CountRow:
    family: str
    split: str
    source: str
    examples: int
    states: int
    noul_positive_rate: float | None  # weighted mean Noul target (None when the row has no Nouls)


@dataclass(frozen=True)
class QuestionRow:
    family: str
    question: str
    split: str
    examples: int
    mean_target: float | None  # Nouls: mean target (the positive rate of hard labels)
    labels: dict[str, int]  # Choices: counts of the argmax option


@dataclass(frozen=True)
class Summary:
    rows: tuple[CountRow, ...]
    questions: tuple[QuestionRow, ...]
    totals: dict[str, dict[str, int]]  # split -> {"examples", "states"}

    def to_dict(self) -> dict[str, Any]:
        return {"totals": self.totals, "rows": [asdict(r) for r in self.rows], "questions": [asdict(q) for q in self.questions]}


def summarize(examples: Iterable[DecisionExample]) -> Summary:
    items = list(examples)
    groups: dict[tuple[str, str, str], list[DecisionExample]] = defaultdict(list)
    per_question: dict[tuple[str, str, str], list[DecisionExample]] = defaultdict(list)
    for e in items:
        groups[(e.family, e.split, source_kind(e.source))].append(e)
        per_question[(e.family, e.question_name, e.split)].append(e)
    rows = []
    for (family, split, source), group in sorted(groups.items(), key=lambda kv: (kv[0][0], SPLITS.index(kv[0][1]), kv[0][2])):
        nouls = [e for e in group if e.kind == "noul"]
        weight = sum(e.weight for e in nouls)
        rate = sum(e.weight * float(e.target) for e in nouls) / weight if weight else None  # type: ignore[arg-type]
        rows.append(CountRow(family, split, source, len(group), len({e.state_key for e in group}), None if rate is None else round(rate, 4)))
    questions = []
    for (family, name, split), group in sorted(per_question.items(), key=lambda kv: (kv[0][0], kv[0][1], SPLITS.index(kv[0][2]))):
        nouls = [float(e.target) for e in group if e.kind == "noul"]  # type: ignore[arg-type]
        labels = Counter(max(e.target, key=e.target.get) for e in group if e.kind == "choice")  # type: ignore[union-attr, arg-type]
        mean = round(sum(nouls) / len(nouls), 4) if nouls else None
        questions.append(QuestionRow(family, name, split, len(group), mean, dict(sorted(labels.items()))))
    totals = {}
    for split in SPLITS:
        chosen = [e for e in items if e.split == split]
        if chosen:
            totals[split] = {"examples": len(chosen), "states": len({(e.state_key) for e in chosen})}
    return Summary(tuple(rows), tuple(questions), totals)


def format_table(summary: Summary) -> str:
    """A plain-text table: one line per family / split / source, then totals."""
    lines = [f"{'family':<14}{'split':<13}{'source':<11}{'examples':>9}{'states':>8}{'pos.rate':>10}"]
    for r in summary.rows:
        rate = "-" if r.noul_positive_rate is None else f"{r.noul_positive_rate:.3f}"
        lines.append(f"{r.family:<14}{r.split:<13}{r.source:<11}{r.examples:>9}{r.states:>8}{rate:>10}")
    lines.append("")
    for split, t in summary.totals.items():
        lines.append(f"{'total':<14}{split:<13}{'':<11}{t['examples']:>9}{t['states']:>8}")
    return "\n".join(lines)


def format_questions(summary: Summary, split: str = "train") -> str:
    """Per-question label balance of one split (Noul mean target, Choice argmax counts)."""
    lines = [f"{'family':<14}{'question':<22}{'examples':>9}  labels"]
    for q in summary.questions:
        if q.split != split:
            continue
        label = f"mean {q.mean_target:.3f}" if q.mean_target is not None else ", ".join(f"{k} {v}" for k, v in q.labels.items())
        lines.append(f"{q.family:<14}{q.question:<22}{q.examples:>9}  {label}")
    return "\n".join(lines)
