"""`python -m training ensemble`: candidate relevance of several trained models and of their mean logit.

    python -m training ensemble --data-dir DATA --model-dirs R0/model R1/model R2/model [--base DIR] [--out FILE] [--cosine]

Each model (a directory's relevance specialist when it has one) judges the held-out LoCoMo relevance pairs of
DATA (`dev.jsonl`, or `calibration.jsonl` with `--split calibration`); the table gives every model's AUROC by kind of negative (`training.relevance_report`) and that of the mean raw logit of all of them, and the same-memory share (how much of the logit depends on the query). It says how
much of a recipe's shortfall is seed noise (averaging removes it) and how much is bias (averaging keeps it).
With `--cosine`, each model's logit is also combined with the base bi-encoder's (query, memory) cosine by a
logistic regression fitted on the calibration split (`training.fusion`). With `--served`, each directory also
answers the `relevant` examples through `LocalBackend`, as a client's request is routed and calibrated, split by
wording (`training.served`). With `--memory-prior K`, each model's logit is also scored with a per-memory prior
subtracted (`training.memory_prior`: the memory's mean logit under K unrelated questions, times lambda), a table
per model; `--query-prior K` does the same with the question's mean logit over K memories that do not answer it.
Nothing is written to the model directories.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from data.paths import write_text_atomic
from training.predict import Prediction
from training.relevance_report import relevance_by_negative

COLUMNS = ("all", "locomo:bm25", "locomo:dense", "locomo:random", "locomo:bridge", "per_query")
SAME_MEMORY = "same_memory"  # the query-dependent share of the logit (training.relevance_report.same_memory_share)


def mean_predictions(runs: Sequence[Sequence[Prediction]]) -> list[Prediction]:
    """The first run's predictions with each logit replaced by its mean over `runs` (aligned label by label)."""
    if not runs:
        raise ValueError("mean_predictions needs at least one run")
    first = runs[0]
    for run in runs[1:]:
        if len(run) != len(first) or any((a.label.example_id, a.label.variant) != (b.label.example_id, b.label.variant) for a, b in zip(first, run)):
            raise ValueError("the runs do not predict the same labels in the same order")
    return [replace(p, logits=np.mean([np.asarray(run[i].logits, dtype=np.float64) for run in runs], axis=0)) for i, p in enumerate(first)]


def ensemble_table(named_runs: dict[str, Sequence[Prediction]], examples: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """{model name | "mean logit": {column: AUROC, "same_memory": share}} over the LoCoMo `relevant` pairs of `examples`."""
    out = {}
    runs = dict(named_runs)
    if len(runs) > 1:
        runs["mean logit"] = mean_predictions(list(named_runs.values()))
    for name, predictions in runs.items():
        table = relevance_by_negative(predictions, examples)
        out[name] = {**{c: table.get(c, {}).get("model") for c in COLUMNS}, SAME_MEMORY: table.get(SAME_MEMORY, {}).get("within_share")}
    return out


def format_table(table: dict[str, dict[str, Any]]) -> str:
    columns = (*COLUMNS, SAME_MEMORY)
    lines = ["| model | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, row in table.items():
        lines.append(f"| {name} | " + " | ".join("-" if row.get(c) is None else f"{row[c]:.3f}" for c in columns) + " |")
    return "\n".join(lines)


def add_parser(sub: Any) -> None:
    from controller.embedding import EMBEDDERS

    p = sub.add_parser("ensemble", help="held-out LoCoMo relevance of several models and of their mean logit")
    p.add_argument("--data-dir", required=True, help="decision data split files (reads the --split file)")
    p.add_argument("--model-dirs", nargs="+", required=True, help="trained model directories (left unchanged)")
    p.add_argument("--base", default=None, help="base model directory the models were trained on (default: the installed package)")
    p.add_argument("--split", choices=("dev", "calibration"), default="dev",
                   help="the split whose LoCoMo relevance pairs are scored (calibration: conv-44, for choosing between recipes "
                        "without looking at the dev pair)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None, help="write the table as JSON here")
    p.add_argument("--cosine", action="store_true",
                   help="also fit logit + bi-encoder cosine on the calibration split and score it on dev (training.fusion)")
    p.add_argument("--embedder", choices=EMBEDDERS, default="minilm",
                   help="the cosine's embedder for --cosine (minilm: the installed base model's mean pooling)")
    p.add_argument("--served", action="store_true",
                   help="also answer the examples through LocalBackend (routing and calibration as served), by wording (training.served)")
    p.add_argument("--memory-prior", type=int, default=0, metavar="K",
                   help="also score logit - lambda * the memory's mean logit under K unrelated questions of its conversation "
                        "(training.memory_prior), per lambda in 0, 0.25, 0.5, 0.75, 1")
    p.add_argument("--query-prior", type=int, default=0, metavar="K",
                   help="the same with the question's mean logit over K memories of its conversation that do not answer it")
    p.set_defaults(handler=run)


def check_args(args: argparse.Namespace) -> dict[str, int]:
    """`TrainingError` for flags the command cannot run on, found before any model is loaded; returns the
    probes asked per side ({"memory": K, "query": K}, sides left off absent)."""
    from training.errors import TrainingError

    asked_sides = (("memory", args.memory_prior), ("query", args.query_prior))
    for side, k in asked_sides:
        if k < 0:
            raise TrainingError(f"--{side}-prior takes K >= 1 probes per {side} (0: off), got {k}")
    if args.split != "dev" and (args.cosine or args.served):
        raise TrainingError("--cosine and --served score the dev split (--cosine fits on the calibration split)")
    problem = _path_problem(args)
    if problem:
        raise TrainingError(problem)
    return {side: k for side, k in asked_sides if k}


def _path_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with `--model-dirs`, `--data-dir` or `--out`, or None."""
    from data.paths import not_a_directory, unwritable

    resolved = [Path(d).resolve() for d in args.model_dirs]  # `/a`, `/./a` and a link to it are one model
    for i, directory in enumerate(args.model_dirs):
        if resolved[i] in resolved[:i]:
            return f"--model-dirs names {resolved[i]} twice (as {directory}); each model is scored once and averaged once"
    for flag, directory in (("--data-dir", Path(args.data_dir)), *(("--model-dirs", Path(d)) for d in args.model_dirs)):
        missing = not_a_directory(directory)
        if missing:
            return f"{flag} {directory} {missing}"
        if flag == "--model-dirs" and not (directory / "config.json").is_file():
            return f"--model-dirs {directory} is not a model directory (no config.json): give one the fit stage wrote"
    for split in dict.fromkeys((args.split, *(("calibration",) if args.cosine else ()))):
        if not (Path(args.data_dir) / f"{split}.jsonl").is_file():
            return f"--data-dir {args.data_dir} has no {split}.jsonl: build the data there first (build-data --out)"
    problem = unwritable(Path(args.out), directory=False) if args.out else None
    return f"cannot write --out {args.out}: {problem}" if problem else None


def run(args: argparse.Namespace) -> int:
    from controller.artifacts import load_artifact
    from controller.specialists import load_specialists
    from controller.template import get_tokenizer
    from data.schema import load_examples
    from training.errors import TrainingError
    from training.pipeline_config import set_torch_threads
    from training.predict import predict
    from training.sampling import prepare_requests

    set_torch_threads(args.threads)  # --threads first: a flag, before the paths
    sides = check_args(args)

    def relevance(split: str) -> list[Any]:
        return [e for e in load_examples(Path(args.data_dir), split) if e.family == "relevance" and e.source == "locomo"]

    examples = relevance(args.split)
    calibration = relevance("calibration") if args.cosine else []
    if not examples or (args.cosine and not calibration):
        raise TrainingError(f"no LoCoMo relevance examples in {Path(args.data_dir) / f'{args.split}.jsonl'}"
                            + (" or calibration.jsonl" if args.cosine else "") + ": build the data with a LoCoMo file (build-data --locomo)")
    tokenizer = get_tokenizer(args.base)
    requests, _ = prepare_requests(examples, tokenizer)
    calibration_requests = prepare_requests(calibration, tokenizer)[0] if args.cosine else []
    named, named_calibration = {}, {}
    priors: dict[str, dict[str, Any]] = {side: {} for side in sides}
    if sides:
        from training.memory_prior import memory_priors, probe_examples, shifted_runs

        probes = {side: probe_examples(examples, k=k, side=side) for side, k in sides.items()}
        probe_requests = {side: prepare_requests(p, tokenizer)[0] for side, p in probes.items()}
    for directory in args.model_dirs:
        # the model that answers relevance requests: the directory's relevance specialist when it has one
        own = load_specialists(directory, base_path=args.base).get("relevance")
        model = (own or load_artifact(directory, base_path=args.base)).model
        named[directory] = predict(model, requests).predictions
        if args.cosine:
            named_calibration[directory] = predict(model, calibration_requests).predictions
        for side in sides:
            prior = memory_priors(predict(model, probe_requests[side]).predictions, probes[side], side=side)
            runs = shifted_runs(named[directory], examples, prior, side=side)
            priors[side][directory] = {lam: ensemble_table({lam: run}, examples)[lam] for lam, run in runs.items()}
    table: dict[str, Any] = ensemble_table(named, examples)
    print(format_table(table))
    for side, by_directory in priors.items():
        for directory, rows in by_directory.items():
            print(f"\n{side} prior, K={sides[side]}: {directory}")
            print(format_table(rows))
    if args.cosine:
        from controller.embedding import create_embedder
        from training.fusion import cosine_fusion, example_cosines, fusion_table

        if len(named) > 1:
            named["mean logit"] = mean_predictions([named[d] for d in args.model_dirs])
            named_calibration["mean logit"] = mean_predictions([named_calibration[d] for d in args.model_dirs])
        cosines = example_cosines([*calibration, *examples], create_embedder(args.embedder))  # once for all models
        fused = {name: cosine_fusion(named_calibration[name], calibration, named[name], examples, cosines=cosines) for name in named}
        print()
        print(fusion_table(fused))
        table = {"models": table, "cosine_fusion": fused}
    if args.served:
        from training.served import format_served, served_relevance

        served = {d: served_relevance(d, examples, base=args.base, threads=args.threads) for d in args.model_dirs}
        print()
        print(format_served(served))
        table = {**(table if args.cosine else {"models": table}), "served": served}
    if priors:
        table = {**(table if args.cosine or args.served else {"models": table}), **{f"{side}_prior": rows for side, rows in priors.items()}}
    if args.out:
        write_text_atomic(args.out, json.dumps(table, indent=1) + "\n")
    return 0


__all__ = ["add_parser", "check_args", "ensemble_table", "format_table", "mean_predictions", "run"]
