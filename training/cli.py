"""`python -m training fit | calibrate | evaluate | export | all`: the training pipeline's stages.

    python -m training all --locomo PATH --audit PATH            # the pipeline on its defaults; `make train` adds
                                                                 # the shipped recipe's flags (see the Makefile)
    python -m training fit --steps 1500 [--resume]
    python -m training fit-specialist --specialist relevance --specialist-steps 1000 [--resume]
    python -m training evaluate --model-dir DIR

Every command takes the same run / model / data directories (see `training.pipeline_config.PipelineConfig`);
the logic lives in `training.pipeline`, this module parses arguments and prints.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import fields
from typing import Any

from controller.families import FAMILIES
from training.data_cli import add_include, add_train_negatives, conversation_ids
from training.errors import PipelineError
from training.pipeline import run_all, run_stage
from training.pipeline_checks import check_specialist_flags
from training.pipeline_config import CALIBRATION_PRIORS, DATA_SETTINGS, STAGES, PipelineConfig
from training.trainer import DROPOUT_KINDS, PRECISIONS, FitConfig, boost_factors

_FIT_FLAGS = ("steps", "tokens_per_step", "max_batch_tokens", "lr", "head_lr", "weight_decay", "warmup", "grad_clip", "family_power", "family_boost",
              "npair_fraction", "attention_dropout", "dropout", "precision", "lora_r", "lora_alpha", "lora_dropout", "lora_layers", "listwise_weight", "seed", "threads", "checkpoint_every", "max_minutes", "device")


# What a FitConfig field means where its name alone does not say it.
_FIT_HELP: dict[str, str] = {
    "lora_layers": "LoRA on the top N encoder layers only, 0 for every layer",
    "family_boost": 'extra draw factors per family, e.g. "relevance=1.7,pair=1.2"',
}


class _Given(argparse.Action):
    """argparse's `store`, also noting the flag in `args.given_flags`: a check can then tell a value typed on the
    command line from the default, even one equal to it."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, "given_flags", (*getattr(namespace, "given_flags", ()), self.option_strings[0]))


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-dir", default="runs/jevmem-minilm", help="checkpoints, logs, data and evaluation records (gitignored)")
    p.add_argument("--model-dir", default="", help="model directory (default controller/models/jevmem-minilm)")
    p.add_argument("--data-dir", default="", help="decision data split files (default <run-dir>/data)")
    p.add_argument("--base", default=None, help="base model directory (default: the installed MiniLM package)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    defaults = FitConfig()
    for name in _FIT_FLAGS:
        value = getattr(defaults, name)
        choices = {"dropout": DROPOUT_KINDS, "precision": PRECISIONS}.get(name)
        p.add_argument("--" + name.replace("_", "-"), type=type(value), default=value, choices=choices,
                       help=f"fit: {_FIT_HELP.get(name, name)} (default {value if value != '' else 'none'})")
    p.add_argument("--noul-as-choice-rate", type=float, default=PipelineConfig.noul_as_choice_rate)
    p.add_argument("--calibration-states", type=int, default=PipelineConfig.calibration_states, help="calibration states per family (0: all)")
    p.add_argument("--eval-states", type=int, default=PipelineConfig.eval_states, help="held-out states per source and family (0: all)")
    p.add_argument("--robust-states", type=int, default=PipelineConfig.robust_states)
    p.add_argument("--npair-states", type=int, default=PipelineConfig.npair_states)
    p.add_argument("--specialist", default=PipelineConfig.specialist, choices=("", *FAMILIES), action=_Given,
                   help="a family answered by its own adapter, fitted on that family alone (default none; "
                        "--specialist '' says none explicitly, so the specialist flags may stay, as make train passes them)")
    # the specialist's own flags: refused without --specialist (`check_specialist_flags`), so their action notes them
    p.add_argument("--specialist-steps", type=int, default=PipelineConfig.specialist_steps, action=_Given,
                   help="the specialist's fit steps (with --specialist)")
    p.add_argument("--specialist-lora-layers", type=int, default=PipelineConfig.specialist_lora_layers, action=_Given,
                   help="LoRA on the specialist's top N encoder layers only (0: all)")
    p.add_argument("--specialist-max-minutes", type=float, default=PipelineConfig.specialist_max_minutes, action=_Given,
                   help="stop the specialist's fit after this many minutes (0: no limit)")
    p.add_argument("--specialist-sources", type=conversation_ids, default=PipelineConfig.specialist_sources, action=_Given,
                   help="comma-separated data sources the specialist is fitted on (locomo, synthetic, teacher; default: all)")
    p.add_argument("--calibration-bias", action=argparse.BooleanOptionalAction, default=PipelineConfig.calibration_bias,
                   help="fit a Noul bias beside each temperature where it survives cross-validation (default on)")
    p.add_argument("--calibration-folds", choices=("source", "group"), default=PipelineConfig.calibration_folds,
                   help="that cross-validation's folds: data sources, or groups (conversations, generator shards)")
    p.add_argument("--calibration-keep-raw", action=argparse.BooleanOptionalAction, default=PipelineConfig.calibration_keep_raw,
                   help="keep a group's, family's or question's calibration only where it beats the raw logits out of fold (else T = 1)")
    p.add_argument("--calibration-prior", choices=CALIBRATION_PRIORS, default=PipelineConfig.calibration_prior,
                   help="the Noul label rates calibration matches: each question's rate over the training and calibration "
                        "splits where a level was fitted (fitted, the default: a level left at the raw logits keeps the "
                        "model's own rate), the same at every level (pooled), or the calibration split's (calibration)")


def _naming(p: argparse.ArgumentParser) -> None:
    """The fit stage's model name and version (config.json; served as NAME-VERSION in /v1/models)."""
    p.add_argument("--model-name", default=PipelineConfig.model_name,
                   help="the model's name in config.json, served as NAME-VERSION (default jevmem-minilm, as the committed model)")
    p.add_argument("--model-version", default=PipelineConfig.model_version, help="the model's version (default 1.0.0)")


def add_parser(sub: Any) -> None:
    for stage in ("fit", "fit_specialist", "calibrate", "evaluate", "export"):
        p = sub.add_parser(stage.replace("_", "-"), help=f"pipeline stage: {stage}")
        _common(p)
        if stage in ("fit", "fit_specialist"):
            p.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
        if stage == "fit":
            _naming(p)
        p.set_defaults(handler=run, stage=stage)
    p = sub.add_parser("all", help="build data -> fit -> calibrate -> evaluate -> export (make train)")
    _common(p)
    p.add_argument("--locomo", default=None, help="LoCoMo JSON (not bundled); omit for synthetic data only")
    p.add_argument("--audit", default=None)
    p.add_argument("--synthetic-per-family", type=int, default=PipelineConfig.synthetic_per_family)
    p.add_argument("--dense", default=PipelineConfig.dense, choices=("minilm", "hashing", "none"))
    p.add_argument("--query-swaps", type=int, default=PipelineConfig.query_swaps,
                   help="LoCoMo swapped-query relevance negatives per gold turn (train split; default off, see data/README.md)")
    p.add_argument("--random-swaps", action=argparse.BooleanOptionalAction, default=PipelineConfig.random_swaps,
                   help="with --query-swaps: draw every swapped question at random (default: the question nearest the turn first)")
    p.add_argument("--observation-queries", type=int, default=PipelineConfig.observation_queries,
                   help="LoCoMo observation facts per conversation used as relevance queries (train split; see data/README.md)")
    add_train_negatives(p)
    p.add_argument("--relevance-context", action=argparse.BooleanOptionalAction, default=PipelineConfig.relevance_context,
                   help="LoCoMo relevance states carry the turn before the memory as state.previous (recorded in the "
                        "model directory's states.json, which the engine follows)")
    p.add_argument("--relevance-dated", action=argparse.BooleanOptionalAction, default=PipelineConfig.relevance_dated,
                   help="LoCoMo relevance memories carry their session date (recorded in the model directory's states.json, which the engine follows)")
    p.add_argument("--rename-speakers", type=float, default=PipelineConfig.rename_speakers,
                   help="share of LoCoMo train questions whose relevance states rename the two speakers (train split; see data/README.md)")
    p.add_argument("--train-conversations", type=conversation_ids, default=PipelineConfig.train_conversations,
                   help="comma-separated LoCoMo sample ids the train split may use (default: every one not held out)")
    p.add_argument("--dev-conversations", type=conversation_ids, default=PipelineConfig.dev_conversations,
                   help="comma-separated LoCoMo sample ids held out as the dev split (default conv-26,conv-30; empty: "
                        "none, so every LoCoMo figure of the run is on data it was trained or calibrated on)")
    p.add_argument("--calibration-conversations", type=conversation_ids, default=PipelineConfig.calibration_conversations,
                   help="comma-separated LoCoMo sample ids held out for calibration (default conv-44; empty: none, so "
                        "the LoCoMo questions are calibrated on synthetic data alone)")
    add_include(p)
    p.add_argument("--total-minutes", type=float, default=PipelineConfig.total_minutes,
                   help="the whole run's time budget: the specialist's fit is cut short to end within it (0: none)")
    p.add_argument("--finish-minutes", type=float, default=PipelineConfig.finish_minutes,
                   help="minutes of the budget kept for calibrate, evaluate and export")
    _naming(p)
    p.add_argument("--skip-data", action="store_true", help="reuse the data already under --data-dir")
    p.add_argument("--resume", action="store_true", help="resume the fit stage from its latest checkpoint")
    p.set_defaults(handler=run, stage="all")


def config_from_args(args: argparse.Namespace) -> PipelineConfig:
    """The pipeline configuration of parsed arguments; `PipelineError` names a flag value it cannot take, or a
    specialist flag given without `--specialist`."""
    check_specialist_flags(args.specialist, getattr(args, "given_flags", ()), getattr(args, "stage", ""))
    try:
        fit = FitConfig(**{name: getattr(args, name) for name in _FIT_FLAGS})
    except ValueError as error:  # refused before any stage runs: a message, not a traceback, naming the flag
        raise PipelineError(str(error)) from error
    unknown = sorted(set(boost_factors(fit.family_boost)) - set(FAMILIES))
    if unknown:
        raise PipelineError(f"unknown families in --family-boost: {', '.join(unknown)}; families: {', '.join(FAMILIES)}")
    known = {f.name for f in fields(PipelineConfig)}
    extra = {k: getattr(args, k) for k in DATA_SETTINGS if hasattr(args, k) and k in known}
    if "include" in extra:
        extra["include"] = tuple(extra["include"])
    command = "python -m training " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else "make train"
    return PipelineConfig(
        run_dir=args.run_dir, model_dir=args.model_dir, data_dir=args.data_dir, base_path=args.base, fit=fit,
        noul_as_choice_rate=args.noul_as_choice_rate, calibration_states=args.calibration_states, eval_states=args.eval_states,
        robust_states=args.robust_states, npair_states=args.npair_states, calibration_bias=args.calibration_bias,
        calibration_folds=args.calibration_folds, calibration_keep_raw=args.calibration_keep_raw,
        calibration_prior=args.calibration_prior,
        specialist=args.specialist, specialist_steps=args.specialist_steps, specialist_lora_layers=args.specialist_lora_layers,
        specialist_max_minutes=args.specialist_max_minutes, specialist_sources=tuple(args.specialist_sources),
        progress=not args.no_progress, command=command, **extra,
        **{k: getattr(args, k) for k in ("total_minutes", "finish_minutes", "model_name", "model_version") if hasattr(args, k)},
    )


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    if args.stage == "all":
        from training.pipeline_stages import locomo_rules

        locomo_rules(cfg)  # refuses a bad labelling flag now, before the run directory is made
        metrics = run_all(cfg, skip_data=args.skip_data, resume=args.resume)
        print(json.dumps({"stages_seconds": metrics.get("stages_seconds"), "acceptance": metrics.get("acceptance")}, indent=1))
        return 0
    summary = run_stage(cfg, args.stage, **({"resume": args.resume} if args.stage in ("fit", "fit_specialist") else {}))
    print(json.dumps(summary, indent=1, default=str)[:4000])
    return 0


__all__ = ["STAGES", "add_parser", "config_from_args", "run"]
