"""Candidate relevance as served: the held-out `relevant` examples answered through `LocalBackend`, the way a
client's request is (the backend's own routing to a specialist, then its calibration), split by wording.

    python -m training ensemble --data-dir DATA --model-dirs M --served

The evaluate stage routes each example by its labels' family; serving routes on the catalogue wording and, for
any other wording, on the state's shape (`controller.specialists.request_family`). This table checks that the
two agree where it matters: `main model, other wording` is what the main model alone gives the questions in
other wordings, which is where they went before serving learnt the state-shape fallback.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

SERVED_COLUMNS = ("all", "catalogue wording", "other wording", "main model, other wording")


def served_relevance(model_dir: str | Path, examples: Sequence[Any], *, base: str | None = None, threads: int = 2,
                     chunk: int = 64) -> dict[str, float | None]:
    """AUROC of the calibrated P(relevant) served for `examples` (their `relevant` questions), by column."""
    from controller.backend import BackendRequest
    from controller.families import lookup
    from controller.local import LocalBackend
    from controller.questions import normalize_questions
    from training.evaluate import auroc

    rows = [e for e in examples if e.family == "relevance" and e.question_name == "relevant"]
    requests = [BackendRequest(e.state, tuple(normalize_questions({"q": e.question}).values())) for e in rows]
    labels = [int(float(e.target) >= 0.5) for e in rows]
    catalogue = [lookup(e.question["instructions"]) is not None for e in rows]
    other = [i for i, known in enumerate(catalogue) if not known]

    def answers(backend: LocalBackend, which: Sequence[int]) -> list[float]:
        out: list[float] = []
        for start in range(0, len(which), chunk):
            out += [r.probabilities[0][0] for r in backend.answer([requests[i] for i in which[start : start + chunk]])]
        backend.close()
        return out

    served = answers(LocalBackend.load(model_dir, runtime="torch", threads=threads, base_path=base), range(len(rows)))
    alone = answers(LocalBackend.load(model_dir, runtime="torch", threads=threads, base_path=base, specialists={}), other)

    def score(which: Sequence[int], probs: Sequence[float] | None = None) -> float | None:
        values = probs if probs is not None else [served[i] for i in which]
        return auroc(values, [labels[i] for i in which])

    return {"all": score(range(len(rows))), "catalogue wording": score([i for i, known in enumerate(catalogue) if known]),
            "other wording": score(other), "main model, other wording": score(other, alone)}


def format_served(table: dict[str, dict[str, float | None]]) -> str:
    lines = ["| model (as served) | " + " | ".join(SERVED_COLUMNS) + " |", "|---" * (len(SERVED_COLUMNS) + 1) + "|"]
    for name, row in table.items():
        lines.append(f"| {name} | " + " | ".join("-" if row[c] is None else f"{row[c]:.3f}" for c in SERVED_COLUMNS) + " |")
    return "\n".join(lines)


__all__ = ["SERVED_COLUMNS", "format_served", "served_relevance"]
