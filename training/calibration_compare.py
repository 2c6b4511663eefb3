"""Calibration variants of one trained model, each fitted on the calibration split and judged on every held-out
state: the model runs once per split, the variants are refitted from its logits in seconds.

    python -m training compare-calibration --run-dir R --model-dir M --data-dir D [--specialist FAMILY] [--out FILE]

Variants: the calibration level (`family`: a temperature per catalogue family; `question`: also one per
catalogue question where it beats its family out of fold), with or without the cross-validated Noul bias,
fitted on every calibration state or on the pipeline's old sample of 300 states per family, and the folds of
that cross-validation (data sources or groups, `training.calibrate.FOLDS`), and whether a level's fit must beat the
raw logits out of fold to be kept (`keep_raw`), and whether Nouls move to each question's label rate over the
training and calibration splits (`prior`, `training.calibrate.prior_shifts`). The main model is judged on the
families it serves; `--specialist FAMILY` judges the directory's specialist on its family. Nothing in the
model directory changes. The table gives held-out NLL and ECE (raw -> calibrated) per family; a family
meets the issue's target when it has >= 200 held-out examples, ECE <= 0.05 and no worse than raw.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from data.paths import write_text_atomic
from training.predict import Prediction

if TYPE_CHECKING:
    from training.pipeline_config import PipelineConfig

VARIANTS: dict[str, dict[str, Any]] = {
    "family T, 300 states": {"level": "family", "bias": False, "states": 300},
    "family T": {"level": "family", "bias": False, "states": 0},
    "family T+b": {"level": "family", "bias": True, "states": 0},
    "question T": {"level": "question", "bias": False, "states": 0},
    "question T+b": {"level": "question", "bias": True, "states": 0},
    "question T+b, group folds": {"level": "question", "bias": True, "states": 0, "folds": "group"},
    "question T+b, kept where it beats raw": {"level": "question", "bias": True, "states": 0, "keep_raw": True},
    "question T+b, group folds, kept where it beats raw": {"level": "question", "bias": True, "states": 0, "folds": "group", "keep_raw": True},
    "question T+b, kept where it beats raw, pooled prior": {"level": "question", "bias": True, "states": 0, "keep_raw": True, "prior": True},
    "question T+b, kept where it beats raw, pooled prior at fitted levels": {"level": "question", "bias": True, "states": 0,
                                                                           "keep_raw": True, "prior": "fitted"},
}


def at_level(predictions: Sequence[Prediction], level: str) -> list[Prediction]:
    """Predictions whose catalogue key is cut to its family (`pair.semantic` -> `pair`) for `level="family"`."""
    if level == "question":
        return list(predictions)
    return [dataclasses.replace(p, label=dataclasses.replace(p.label, catalogue=p.label.catalogue.partition(".")[0]))
            if p.label.catalogue else p for p in predictions]


def compare(calibration: Sequence[Prediction], sampled: Sequence[Prediction], heldout: Sequence[Prediction],
            variants: dict[str, dict[str, Any]] = VARIANTS, reference: Sequence[Any] = ()) -> dict[str, dict[str, Any]]:
    """Per variant: held-out {family: {n, nll_raw, nll, ece_raw, ece, meets}} (and `all`) plus the fitted levels.
    `reference` (the training and calibration examples) serves the variants with a pooled prior."""
    from controller.calibration import fit_temperatures
    from training.calibrate import FOLDS, at_fitted_levels, calibration_inputs, prior_shifts
    from training.evaluate import compute_metrics
    from training.predict import probabilities
    from training.report import ECE_MIN_EXAMPLES, ece_passes

    out: dict[str, dict[str, Any]] = {}
    for name, spec in variants.items():
        fit_on = at_level(sampled if spec["states"] else calibration, spec["level"])
        logits, targets, groups = calibration_inputs(fit_on)
        cal = fit_temperatures(logits, targets, groups, families=[p.label.catalogue for p in fit_on], bias=spec["bias"],
                               folds=FOLDS[spec.get("folds", "source")](fit_on), keep_raw=spec.get("keep_raw", False))
        if spec.get("prior"):
            if not reference:
                raise ValueError(f"variant {name!r} needs the training and calibration examples (reference)")
            shifts = prior_shifts(fit_on, reference)
            cal = dataclasses.replace(cal, prior_shifts=at_fitted_levels(shifts, cal) if spec["prior"] == "fitted" else shifts)
        held = at_level(heldout, spec["level"])
        raw, calibrated = probabilities(held), probabilities(held, cal)
        families: dict[str, list[int]] = {"all": list(range(len(held)))}
        for i, p in enumerate(held):
            families.setdefault(p.family, []).append(i)
        table = {}
        for family, idx in sorted(families.items()):
            kinds, targets_ = [held[i].kind for i in idx], [held[i].label.target for i in idx]
            before = compute_metrics(kinds, [raw[i] for i in idx], targets_)
            after = compute_metrics(kinds, [calibrated[i] for i in idx], targets_)
            table[family] = {"n": len(idx), "nll_raw": round(before.nll, 4), "nll": round(after.nll, 4), "ece_raw": round(before.ece, 4),
                             "ece": round(after.ece, 4), "meets": len(idx) < ECE_MIN_EXAMPLES or ece_passes(before.ece, after.ece)}
        out[name] = {"spec": spec, "heldout": table, "levels": sorted(cal.family_temperatures), "biases": sorted(cal.family_biases)}
    return out


def compare_table(result: dict[str, dict[str, Any]]) -> str:
    families = [f for f in next(iter(result.values()))["heldout"] if f != "all"]
    head = "| variant | held-out NLL | " + " | ".join(f"ECE {f}" for f in families) + " | families meeting ECE target |"
    lines = [head, "|" + "---|" * (len(families) + 3)]
    for name, row in result.items():
        t = row["heldout"]
        cells = [f"{t[f]['ece_raw']:.3f} -> {t[f]['ece']:.3f}" + ("" if t[f]["meets"] else " (miss)") for f in families]
        lines.append(f"| {name} | {t['all']['nll']:.4f} | " + " | ".join(cells) + f" | {sum(t[f]['meets'] for f in families)} of {len(families)} |")
    return "\n".join(lines)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("compare-calibration", help="fit calibration variants on the calibration split, judge each on all held-out data")
    p.add_argument("--run-dir", default="runs/jevmem-minilm")
    p.add_argument("--model-dir", default="", help="model directory (default controller/models/jevmem-minilm); left unchanged")
    p.add_argument("--data-dir", default="", help="decision data split files (default <run-dir>/data)")
    p.add_argument("--base", default=None)
    p.add_argument("--specialist", default="", help="judge the directory's specialist for this family instead of the main model")
    p.add_argument("--out", default=None, help="write the full result as JSON here")
    p.set_defaults(handler=run)


def check_inputs(cfg: PipelineConfig, out: str | None) -> None:
    """`TrainingError` for a model directory, data directory or `--out` the command cannot use, before any model
    is loaded."""
    from data.paths import not_a_directory, unwritable
    from training.errors import TrainingError
    from training.pipeline_config import require_model

    for flag, given, directory in (("--model-dir", cfg.model_dir, cfg.model), ("--data-dir", cfg.data_dir, cfg.data)):
        missing = not_a_directory(directory)
        if missing:
            raise TrainingError(f"{flag if given else f'{flag} (default)'} {directory} {missing}")
    require_model(cfg)  # a directory without a fitted model
    problem = unwritable(Path(out), directory=False) if out else None
    if problem:
        raise TrainingError(f"cannot write --out {out}: {problem}")


def run(args: argparse.Namespace) -> int:
    from controller.specialists import load_specialists
    from training.errors import TrainingError
    from training.pipeline_config import PipelineConfig, heldout_examples, load_model, split_examples, tokenizer
    from training.predict import predict
    from training.sampling import cap_states, prepare_requests

    cfg = PipelineConfig(run_dir=args.run_dir, model_dir=args.model_dir, data_dir=args.data_dir, base_path=args.base, progress=False)
    check_inputs(cfg, args.out)
    import torch

    torch.set_num_threads(cfg.fit.threads)
    specialists = load_specialists(cfg.model, base_path=cfg.base_path)
    if args.specialist and args.specialist not in specialists:
        raise TrainingError(f"--model-dir {cfg.model} has no {args.specialist!r} specialist (it has: {', '.join(specialists) or 'none'})")
    model, tok = (specialists[args.specialist] if args.specialist else load_model(cfg)).model, tokenizer(cfg)

    def served(e: Any) -> bool:  # the families this model answers
        return e.family == args.specialist if args.specialist else e.family not in specialists

    def logits(examples: list[Any]) -> list[Prediction]:
        return predict(model, prepare_requests([e for e in examples if served(e)], tok, max_questions=cfg.max_questions)[0]).predictions

    calibration_examples = [e for e in split_examples(cfg, "calibration") if served(e)]
    full = logits(calibration_examples)
    sampled_ids = {e.id for e in cap_states(calibration_examples, 300, seed=cfg.fit.seed, by_source=False)}
    sampled = [p for p in full if p.label.example_id in sampled_ids]
    held = logits(heldout_examples(cfg))
    reference = [e for e in split_examples(cfg, "train") if served(e)] + calibration_examples
    result = compare(full, sampled, held, reference=reference)
    print(compare_table(result))
    if args.out:
        write_text_atomic(args.out, json.dumps(result, indent=1) + "\n")
    return 0
