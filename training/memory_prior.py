"""A per-memory or per-query prior for candidate relevance: how relevant a memory looks to questions it does not
answer, or how relevant a question finds memories that do not answer it.

    probes = probe_examples(examples, k=4, seed=0)          # each memory under k unrelated questions
    priors = memory_priors(probe_predictions, probes)        # memory text -> mean raw logit
    runs = shifted_runs(predictions, examples, priors)       # logit - lam * prior, per lam

With `side="query"` the roles swap: each question is asked about k memories of its conversation that are neither
its evidence nor a bridge to it, and the prior is keyed by the question. `python -m training ensemble ...
--memory-prior K` (or `--query-prior K`) prints the table per model (docs/EXPERIMENTS.md, rows "a per-memory
prior subtracted from the relevance logit" and "a per-query prior"). A memory (a question) the judge scores high
whatever it is paired with is discounted by lam times that score; lam 0 is the model as it is.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from controller.families import FAMILIES
from data.schema import DecisionExample
from training.predict import Prediction
from training.relevance_report import relevance_rows

LAMBDAS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
SIDES: tuple[str, ...] = ("memory", "query")


def _side(side: str) -> str:
    if side not in SIDES:
        raise ValueError(f"a relevance prior is keyed by one of {', '.join(SIDES)}, got {side!r}")
    return side


def probe_examples(examples: Sequence[DecisionExample], *, k: int = 4, seed: int = 0,
                   side: str = "memory") -> list[DecisionExample]:
    """Each distinct memory of the LoCoMo `relevant` pairs under up to `k` questions (seeded draw) from its
    conversation for which it is neither gold nor a bridge, asked in the canonical wording; targets 0 (they are not
    read). With `side="query"`, each distinct question with up to `k` such memories of its conversation."""
    other = "query" if _side(side) == "memory" else "memory"
    if k < 1:
        raise ValueError(f"a {side} prior needs k >= 1 probes, got {k}")
    labelled = [e for e in examples if e.family == "relevance" and e.source == "locomo"]
    gold = {(e.state["query"], e.state["memory"]) for e in labelled if float(e.target) >= 0.5}  # evidence or a bridge to it
    pairs = [e for e in labelled if e.question_name == "relevant"]
    partners: dict[str, set[str]] = {}
    for e in pairs:
        partners.setdefault(e.group, set()).add(e.state[other])
    by_group = {g: sorted(texts) for g, texts in partners.items()}
    first: dict[str, DecisionExample] = {}
    for e in pairs:
        first.setdefault(e.state[side], e)
    asked = copy.deepcopy(FAMILIES["relevance"].questions["relevant"])
    rng = random.Random(seed)
    probes = []
    for key, e in first.items():
        pool = [t for t in by_group[e.group] if ((t, key) if side == "memory" else (key, t)) not in gold]
        for j, partner in enumerate(rng.sample(pool, min(k, len(pool)))):
            probes.append(replace(e, id=f"{e.id}:probe{j}", state={**e.state, other: partner}, question=copy.deepcopy(asked),
                                  target=0.0, notes="probe"))
    return probes


def memory_priors(predictions: Sequence[Prediction], probes: Sequence[DecisionExample], *,
                  side: str = "memory") -> dict[str, float]:
    """Memory text (question text with `side="query"`) -> the mean raw logit of its probes."""
    key = _side(side)
    logits: dict[str, list[float]] = {}
    for p, e in relevance_rows(predictions, probes):
        logits.setdefault(e.state[key], []).append(float(p.logits[0]))
    return {key: float(np.mean(v)) for key, v in logits.items()}


def shifted(predictions: Sequence[Prediction], examples: Sequence[DecisionExample], priors: dict[str, float],
            lam: float, *, side: str = "memory") -> list[Prediction]:
    """The `relevant` predictions with logit - lam * prior(memory, or query) (a key without probes keeps its logit)."""
    key = _side(side)
    return [replace(p, logits=np.array([float(p.logits[0]) - lam * priors.get(e.state[key], 0.0)]))
            for p, e in relevance_rows(predictions, examples)]


def shifted_runs(predictions: Sequence[Prediction], examples: Sequence[DecisionExample], priors: dict[str, float],
                 lambdas: Sequence[float] = LAMBDAS, *, side: str = "memory") -> dict[str, list[Prediction]]:
    """{"lam=L": shifted predictions} for each lam in `lambdas`."""
    return {f"lam={lam:g}": shifted(predictions, examples, priors, lam, side=side) for lam in lambdas}


__all__ = ["LAMBDAS", "SIDES", "memory_priors", "probe_examples", "shifted", "shifted_runs"]
