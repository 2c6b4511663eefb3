"""Robustness checks on held-out examples: wording, option order, Noul vs 2-option Choice, packed vs N-pair.

Each check rewrites held-out `DecisionExample`s into variants whose correct answer is unchanged, runs the
variants through the model, and compares them with the original question on the same state:

- `wording`: every data wording of the question (canonical + the paraphrases training also saw) and a few
  wordings written here that training never saw (`UNSEEN_WORDINGS`);
- `option_order`: a Choice with its options reversed and shuffled (probabilities aligned by option name);
- `noul_vs_choice`: a Noul against the equivalent Choice {yes: criteria.true, no: criteria.false};
- `npair`: the same questions encoded as plain (state, question[, option]) pairs on the same weights.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from controller.calibration import Calibration
from data.schema import DecisionExample
from training.evaluate import compute_metrics
from training.predict import Prediction, predict, probabilities
from training.sampling import prepare_requests

# Wordings no training example uses: the same polarity and state fields as the canonical question.
UNSEEN_WORDINGS: dict[tuple[str, str], str] = {
    ("relevance", "relevant"): "Would state.memory be useful to someone trying to answer state.query?",
    ("routing", "temporal"): "Is state.query mainly about dates, durations or the order in which things happened?",
    ("routing", "causal"): "Is state.query asking for the reason behind something or its consequences?",
    ("typing", "preference"): "Does state.observation tell us about someone's likes, dislikes or wishes?",
    ("typing", "episodic"): "Does state.observation report a particular happening at a specific time?",
    ("pair", "same_episode"): "Are state.memory_a and state.memory_b pieces of one and the same event or activity?",
    ("stopping", "evidence_sufficient"): "Could state.query be fully answered using only the items of state.evidence?",
    ("consolidation", "redundant"): "Is everything in state.memory_a already said by state.memory_b?",
}


def _variant(example: DecisionExample, suffix: str, question: dict[str, Any], target: Any = None) -> DecisionExample:
    return replace(example, id=f"{example.id}#{suffix}", question=question, target=example.target if target is None else target)


def _run(model: Any, examples: Sequence[DecisionExample], tokenizer: Any, encoding: str = "packed") -> dict[str, Prediction]:
    requests, _ = prepare_requests(examples, tokenizer)
    return {p.label.example_id: p for p in predict(model, requests, encoding=encoding).predictions}  # type: ignore[arg-type]


def _summary(preds: Sequence[Prediction], calibration: Calibration) -> dict[str, Any]:
    probs = probabilities(preds, calibration)
    return compute_metrics([p.kind for p in preds], probs, [p.label.target for p in preds]).to_json()


def wording_check(model: Any, examples: Sequence[DecisionExample], tokenizer: Any, calibration: Calibration) -> dict[str, Any]:
    from data.synthetic.paraphrases import wordings

    variants: list[DecisionExample] = []
    kinds: dict[str, str] = {}
    for e in examples:
        if e.kind != "noul":
            continue
        texts = list(wordings(e.family, e.question_name))
        for i, text in enumerate(texts):
            variants.append(_variant(e, f"w{i}", {**e.question, "instructions": text}))
            kinds[f"{e.id}#w{i}"] = "canonical" if i == 0 else "seen_paraphrase"
        unseen = UNSEEN_WORDINGS.get((e.family, e.question_name))
        if unseen:
            variants.append(_variant(e, "unseen", {**e.question, "instructions": unseen}))
            kinds[f"{e.id}#unseen"] = "unseen_paraphrase"
    preds = _run(model, variants, tokenizer)
    canonical = {k.split("#")[0]: p for k, p in preds.items() if kinds.get(k) == "canonical"}
    out: dict[str, Any] = {}
    for kind in ("canonical", "seen_paraphrase", "unseen_paraphrase"):
        chosen = [(k, p) for k, p in preds.items() if kinds.get(k) == kind]
        if not chosen:
            continue
        shifts = [abs(_p1(p, calibration) - _p1(canonical[k.split("#")[0]], calibration)) for k, p in chosen if k.split("#")[0] in canonical]
        out[kind] = {**_summary([p for _, p in chosen], calibration), "mean_abs_shift_vs_canonical": round(float(np.mean(shifts)), 5) if shifts else None}
    return out


def _p1(p: Prediction, calibration: Calibration) -> float:
    return float(probabilities([p], calibration)[0][0])


def option_order_check(model: Any, examples: Sequence[DecisionExample], tokenizer: Any, calibration: Calibration, seed: int = 0) -> dict[str, Any]:
    rng = random.Random(seed)
    variants = []
    for e in examples:
        if e.kind != "choice":
            continue
        items = list(e.question["criteria"].items())
        shuffled = items[:]
        rng.shuffle(shuffled)
        for suffix, order in (("orig", items), ("rev", items[::-1]), ("shuf", shuffled)):
            variants.append(_variant(e, suffix, {**e.question, "criteria": dict(order)}))
    if not variants:
        return {}
    preds = _run(model, variants, tokenizer)
    out: dict[str, Any] = {}
    base = {k.split("#")[0]: p for k, p in preds.items() if k.endswith("#orig")}
    for suffix in ("orig", "rev", "shuf"):
        chosen = [(k.split("#")[0], p) for k, p in preds.items() if k.endswith(f"#{suffix}")]
        tv, agree = [], []
        for eid, p in chosen:
            a, b = _by_name(base[eid], calibration), _by_name(p, calibration)
            tv.append(0.5 * sum(abs(a[n] - b[n]) for n in a))
            agree.append(max(a, key=a.get) == max(b, key=b.get))
        out[suffix] = {**_summary([p for _, p in chosen], calibration), "mean_total_variation_vs_orig": round(float(np.mean(tv)), 5),
                       "argmax_agreement": round(float(np.mean(agree)), 5)}
    return out


def _by_name(p: Prediction, calibration: Calibration) -> dict[str, float]:
    return dict(zip(p.label.options, probabilities([p], calibration)[0]))


def noul_choice_check(model: Any, examples: Sequence[DecisionExample], tokenizer: Any, calibration: Calibration) -> dict[str, Any]:
    variants = []
    for e in examples:
        if e.kind != "noul":
            continue
        criteria = e.question.get("criteria") or {}
        p = float(e.target)  # type: ignore[arg-type]
        variants.append(_variant(e, "noul", e.question))
        for suffix, names in (("yes_first", ("yes", "no")), ("no_first", ("no", "yes"))):
            desc = {"yes": criteria.get("true"), "no": criteria.get("false")}
            question = {"type": "choice", "instructions": e.question.get("instructions"), "criteria": {n: desc[n] for n in names}}
            variants.append(_variant(e, suffix, question, {"yes": p, "no": 1.0 - p}))
    if not variants:
        return {}
    preds = _run(model, variants, tokenizer)
    nouls = {k.split("#")[0]: p for k, p in preds.items() if k.endswith("#noul")}
    out: dict[str, Any] = {"noul": _summary(list(nouls.values()), calibration)}
    for suffix in ("yes_first", "no_first"):
        chosen = [(k.split("#")[0], p) for k, p in preds.items() if k.endswith(f"#{suffix}")]
        shifts, agree = [], []
        for eid, p in chosen:
            p_yes = _by_name(p, calibration)["yes"]
            p_noul = _p1(nouls[eid], calibration)
            shifts.append(abs(p_yes - p_noul))
            agree.append((p_yes >= 0.5) == (p_noul >= 0.5))
        scored = [_yes_as_noul(p) for _, p in chosen]
        out[suffix] = {**_summary(scored, Calibration()), "mean_abs_diff_p_yes_vs_noul": round(float(np.mean(shifts)), 5),
                       "decision_agreement": round(float(np.mean(agree)), 5), "temperature": "raw (choice:2 softmax)"}
    return out


def _yes_as_noul(p: Prediction) -> Prediction:
    """A yes/no Choice scored as a Noul: logit = z_yes - z_no (softmax over two = sigmoid of the gap)."""
    names = list(p.label.options)
    z = p.logits[names.index("yes")] - p.logits[names.index("no")]
    target = p.label.target[names.index("yes")]
    return Prediction(replace(p.label, kind="noul", target=(target,), options=()), np.array([z]), p.split, p.group, p.list_key)


def robustness_checks(model: Any, examples: Sequence[DecisionExample], tokenizer: Any, calibration: Calibration, seed: int = 0) -> dict[str, Any]:
    """Wording, option order and Noul vs Choice on `examples`, each with its wall-clock."""
    checks: dict[str, Callable[[], dict[str, Any]]] = {
        "wording": lambda: wording_check(model, examples, tokenizer, calibration),
        "option_order": lambda: option_order_check(model, examples, tokenizer, calibration, seed=seed),
        "noul_vs_choice": lambda: noul_choice_check(model, examples, tokenizer, calibration),
    }
    out: dict[str, Any] = {"states": len({e.state_key for e in examples}), "examples": len(examples)}
    for name, check in checks.items():
        began = time.perf_counter()
        out[name] = {**check(), "seconds": round(time.perf_counter() - began, 2)}
    return out


def npair_check(model: Any, examples: Sequence[DecisionExample], tokenizer: Any) -> dict[str, Any]:
    """Packed vs N-pair on the same examples and weights (raw probabilities: T was fitted for packed)."""
    requests, _ = prepare_requests(examples, tokenizer)
    out: dict[str, Any] = {}
    for encoding in ("packed", "npair"):
        run = predict(model, requests, encoding=encoding)  # type: ignore[arg-type]
        preds = run.predictions
        fams: dict[str, Any] = {}
        for family in sorted({p.family for p in preds}) + ["all"]:
            chosen = [p for p in preds if family in ("all", p.family)]
            fams[family] = _summary(chosen, Calibration())
        out[encoding] = {"metrics": fams, "seconds": round(run.seconds, 2), "tokens": run.tokens, "requests": run.requests}
    return out


def sample_states(examples: Sequence[DecisionExample], max_states: int, seed: int = 0) -> list[DecisionExample]:
    """Every example of up to `max_states` states, drawn evenly across families."""
    by_family: dict[str, dict[str, list[DecisionExample]]] = {}
    for e in examples:
        by_family.setdefault(e.family, {}).setdefault(e.state_key, []).append(e)
    rng = random.Random(seed)
    per_family = max(1, max_states // max(1, len(by_family)))
    out: list[DecisionExample] = []
    for family in sorted(by_family):
        keys = sorted(by_family[family])
        rng.shuffle(keys)
        for key in keys[:per_family]:
            out.extend(by_family[family][key])
    return out
