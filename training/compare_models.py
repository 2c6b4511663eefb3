"""`python -m training compare-models`: raw per-family figures of several trained models on one split.

    python -m training compare-models --data-dir DATA --model-dirs REF M1 [M2 ...] [--split calibration] [--out FILE]

Each model directory answers every example of the split (`calibration` by default: conv-44 and the synthetic
calibration seeds, where recipes are chosen without looking at the dev pair), each family from the model that
serves it (a directory's specialist for its own family), through the same template and packing as serving. The
table gives per family and pooled the raw (uncalibrated) AUROC, NLL and ECE of every model and each one's
difference from the first, the reference. `main` pools the families the reference's main model serves, so a
recipe that changes only the main adapter is judged on what it changes. The figures are raw on purpose: on the
calibration split a calibrated figure would be fitted on the examples it is scored on, and the evaluate stage
already reports calibrated held-out figures. Nothing is written to the model directories.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from data.paths import unwritable, write_text_atomic
from training.predict import Prediction

MAIN = "main"
FIGURES = ("auroc", "nll", "ece")


def family_figures(predictions: Sequence[Prediction], main_families: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """{family | "main" | "all": {n, accuracy, auroc, nll, brier, ece}} of the raw probabilities; `main` pools
    `main_families` (left out when it is None or covers every family present)."""
    from training.evaluate import by, compute_metrics
    from training.predict import probabilities

    probs = probabilities(predictions)
    groups = by(predictions, lambda p: p.family)
    present = set(groups)
    if main_families is not None and present & main_families and not present <= main_families:
        groups[MAIN] = [i for i, p in enumerate(predictions) if p.family in main_families]
    groups["all"] = list(range(len(predictions)))
    out = {}
    for name, idx in groups.items():
        m = compute_metrics([predictions[i].kind for i in idx], [probs[i] for i in idx], [predictions[i].label.target for i in idx])
        out[name] = {k: v for k, v in m.to_json().items() if k != "mce"}
    return out


def comparison(named: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """{row: {model: figures + delta_<figure> against the first model}} from `family_figures` per model; the first
    model's cells and a row missing from it have no deltas."""
    if not named:
        raise ValueError("comparison needs at least one model")
    first = next(iter(named))
    reference = named[first]
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for model, table in named.items():
        for row, figures in table.items():
            cell = dict(figures)
            ref = reference.get(row) if model != first else None
            for f in FIGURES:
                if ref is not None and ref.get(f) is not None and figures.get(f) is not None:
                    cell[f"delta_{f}"] = round(figures[f] - ref[f], 5)
            rows.setdefault(row, {})[model] = cell
    order = [r for r in rows if r not in (MAIN, "all")] + [r for r in (MAIN, "all") if r in rows]
    return {r: rows[r] for r in order}


def format_comparison(table: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Markdown: one row per family, per model `AUROC / NLL / ECE`, with the difference from the first model."""
    models = list(dict.fromkeys(m for cells in table.values() for m in cells))
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    signed = lambda v: "" if v is None else f" ({v:+.3f})"  # noqa: E731
    lines = ["| family | n | " + " | ".join(f"{m}: AUROC / NLL / ECE" for m in models) + " |", "|---" * (len(models) + 2) + "|"]
    for row, cells in table.items():
        n = next(iter(cells.values()))["n"]
        parts = []
        for m in models:
            c = cells.get(m)
            parts.append("-" if c is None else " / ".join(fmt(c.get(f)) + signed(c.get(f"delta_{f}")) for f in FIGURES))
        lines.append(f"| {row} | {n} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def _names(dirs: Sequence[str]) -> list[str]:
    """Short distinct labels for model directories: the last path part, widened where two would clash."""
    parts = [Path(d).resolve().parts for d in dirs]
    for depth in range(1, max(len(p) for p in parts) + 1):
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return [str(d) for d in dirs]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("compare-models", help="raw per-family AUROC / NLL / ECE of several model directories on one split")
    p.add_argument("--data-dir", required=True, help="decision data split files (reads the --split file)")
    p.add_argument("--model-dirs", nargs="+", required=True, help="trained model directories, the reference first (left unchanged)")
    p.add_argument("--split", choices=("calibration", "dev", "test"), default="calibration",
                   help="the split scored (calibration, the default: for choosing between recipes without the dev pair)")
    p.add_argument("--families", default="", help="comma-separated families to score (default: all)")
    p.add_argument("--base", default=None, help="base model directory the models were trained on (default: the installed package)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None, help="write the table as JSON here")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from controller.families import FAMILIES
    from controller.specialists import load_specialists
    from training.errors import PipelineError
    from training.pipeline_config import PipelineConfig, load_model, predict_routed, set_torch_threads, split_examples, tokenizer
    from training.sampling import prepare_requests

    families = {f for f in args.families.split(",") if f}
    unknown = sorted(families - set(FAMILIES))
    if unknown:
        raise PipelineError(f"unknown families in --families: {', '.join(unknown)}; families: {', '.join(FAMILIES)}")
    set_torch_threads(args.threads)
    problem = unwritable(Path(args.out), directory=False) if args.out else None
    if problem:  # found at the write, it cost every model's scoring and was a traceback
        raise PipelineError(f"cannot write --out {args.out}: {problem}")
    configs = [PipelineConfig(model_dir=d, data_dir=args.data_dir, base_path=args.base, progress=False) for d in args.model_dirs]
    examples = [e for e in split_examples(configs[0], args.split) if not families or e.family in families]
    if not examples:
        raise PipelineError(f"the {args.split} split under {args.data_dir} has no examples of {', '.join(sorted(families)) or 'any family'}")
    requests, _ = prepare_requests(examples, tokenizer(configs[0]), max_questions=configs[0].max_questions)
    named: dict[str, dict[str, dict[str, Any]]] = {}
    main_families: set[str] | None = None
    for name, cfg in zip(_names(args.model_dirs), configs):
        loaded, specialists = load_model(cfg), load_specialists(cfg.model, base_path=cfg.base_path)
        if main_families is None:
            main_families = set(FAMILIES) - set(specialists)
        named[name] = family_figures(predict_routed(cfg, loaded, specialists, requests, name).predictions, main_families)
    table = comparison(named)
    print(f"{args.split} split of {args.data_dir}: raw figures, differences from {next(iter(named))}")
    print(format_comparison(table))
    if args.out:
        write_text_atomic(args.out, json.dumps(table, indent=1) + "\n")
    return 0


__all__ = ["comparison", "family_figures", "format_comparison"]
