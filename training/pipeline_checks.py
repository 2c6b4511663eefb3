"""What `training.pipeline` checks before a stage works, so that a command given a wrong path or flag stops with a
message, before it costs a fit or overwrites a directory it was never meant to write:

    check_specialist_flags(specialist, given, stage)  # --specialist-* flags typed without --specialist
    check_stage(cfg, stage)                    # directories that clash, a model directory that is something else,
                                               # a --base that is no model, LoRA layers it lacks, outputs in the way
    check_resume(cfg, skip_data=False)         # `--resume` with other settings than its checkpoints'
    data_changes(cfg)                          # the data flags that differ from the run's recipe

Each raises `PipelineError` (or the `TrainingError` of `training.embedder.check_base`) naming the flag. The first
needs the flags as typed (`given`, `training.cli` records them): a PipelineConfig cannot tell a default from a
value typed equal to it.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from training.errors import PipelineError
from training.pipeline_config import DATA_SETTINGS, PipelineConfig

log = logging.getLogger(__name__)

# What a model directory of this pipeline holds (`controller.artifacts.save_artifact`, the specialists, the
# retrieval embedder, the report); a directory holding anything else (but the files of `KEPT_FILES`) is not one,
# and a stage swapping in a model would mix the model's files into it (a base model's config.json overwritten).
MODEL_NAMES = frozenset({"config.json", "adapter", "encoder.safetensors", "heads.safetensors", "calibration.json", "metrics.json",
                         "MODEL_CARD.md", "reliability.png", "states.json", "specialists", "specialists.json", "embedder"})
# What users keep beside a model (its documentation and licence; version control's and the desktop's hidden files,
# .gitignore, .gitattributes, .DS_Store, pass as every hidden name does): no stage reads or writes them, and each
# stage's staged copy of the directory carries them over into the directory it swaps in (`data.paths.staged`).
KEPT_FILES: tuple[str, ...] = ("readme*", "*.md", "license*", "notice*")  # file names, matched case-insensitively
_HF_KEYS = ("model_type", "architectures", "num_hidden_layers")  # top-level keys of a transformers config.json
_MODEL_WRITERS = ("fit_embedder", "fit", "fit_specialist", "calibrate")
_BASE_READERS = ("fit_embedder", "fit", "fit_specialist", "calibrate", "evaluate", "export")
_OUTPUTS = {"evaluate": ("evaluation.json",), "export": ("model.onnx",)}  # files the stage writes last, into the run directory


def check_stage(cfg: PipelineConfig, stage: str) -> None:
    """Everything `stage` needs of its directories and flags that can be known before it runs."""
    from data.paths import unwritable

    check_directories(cfg)
    problem = unwritable(cfg.run, directory=True)
    if problem:  # first: every path checked below is inside it
        raise PipelineError(f"cannot use the run directory {cfg.run}: {problem}")
    if stage in _MODEL_WRITERS:
        problem = foreign_model_dir(cfg.model)
        if problem:
            raise PipelineError(f"--model-dir {cfg.model} {problem}; give an empty or new directory, or a model directory")
    if stage in _BASE_READERS:
        from training.embedder import check_base

        check_base(Path(cfg.base_path) if cfg.base_path else None)
    if stage == "fit" or (stage == "fit_specialist" and cfg.specialist):
        _check_lora_layers(cfg, stage)
        _check_fit_dir(cfg, stage)
    for name in _OUTPUTS.get(stage, ()):
        problem = unwritable(cfg.run / name, directory=False)
        if problem:
            raise PipelineError(f"cannot write the {stage} stage's {name}: {problem}")


# The flags of the specialist's fit (`PipelineConfig.specialist_*`), which no stage reads without `--specialist`.
SPECIALIST_FLAGS: tuple[str, ...] = ("--specialist-steps", "--specialist-lora-layers", "--specialist-max-minutes", "--specialist-sources")


def check_specialist_flags(specialist: str, given: Collection[str], stage: str) -> None:
    """`PipelineError` naming every flag of `SPECIALIST_FLAGS` in `given` (the flags typed on the command line,
    whatever their value) when there is no `specialist`: no stage reads them then, and they were ignored without
    a word (fit-specialist went on to remove the model directory's specialist). An explicit `--specialist ''` in
    `given` says no specialist on purpose (the Makefile passes the flags, TRAIN_ARGS may turn it off): logged only."""
    stray = [flag for flag in SPECIALIST_FLAGS if flag in given]
    if not stray or specialist:
        return
    if "--specialist" in given:  # `--specialist ''` typed: no specialist on purpose (`make train TRAIN_ARGS=...`)
        log.info("no specialist (--specialist ''): %s not used", ", ".join(stray))
        return
    what = "it has" if len(stray) == 1 else "they have"
    removes = "; without --specialist, fit-specialist removes the model directory's specialist" if stage == "fit_specialist" else ""
    raise PipelineError(f"{', '.join(stray)} given without --specialist: {what} no effect{removes}; "
                        f"add --specialist relevance or drop {'it' if len(stray) == 1 else 'them'}")


def check_directories(cfg: PipelineConfig) -> None:
    """`PipelineError` when two of --run-dir, --data-dir, --model-dir and --base name one directory."""
    named = [("--run-dir", cfg.run), ("--data-dir", cfg.data), ("--model-dir", cfg.model)]
    if cfg.base_path:
        named.append(("--base", Path(cfg.base_path)))
    seen: dict[str, str] = {}
    for flag, path in named:
        real = os.path.realpath(path)
        if real in seen:
            raise PipelineError(f"{seen[real]} and {flag} name the same directory {path}: each needs its own")
        seen[real] = flag


def foreign_model_dir(model: Path) -> str | None:
    """Why the existing directory `model` is not a model directory of this pipeline (nor empty, nor one with only
    some of its files), or None."""
    if not model.is_dir():
        return None
    try:
        names = sorted(p.name for p in model.iterdir())
    except OSError as error:
        return f"cannot be listed: {error}"
    other = [n for n in names if n not in MODEL_NAMES and not _kept_beside(model / n)]
    if other:
        shown = ", ".join(other[:3]) + (f" and {len(other) - 3} more" if len(other) > 3 else "")
        return f"holds {shown}, which no model directory of this pipeline does (a base model, a run or a data directory?)"
    config = _json_object(model / "config.json")
    if config is not None:
        from controller.artifacts import FORMAT

        if config.get("format") not in (None, FORMAT) or (config.get("format") is None and any(k in config for k in _HF_KEYS)):
            return f"holds the config.json of another kind of model (format {config.get('format')!r}, expected {FORMAT!r})"
    return None


def _kept_beside(path: Path) -> bool:
    """Whether `path`, in a model directory, is a hidden name or a file of `KEPT_FILES` (a base model's README.md
    passes here: its config.json, weights and tokenizer files are what refuse it)."""
    name = path.name
    if name.startswith("."):
        return True
    return any(fnmatch.fnmatchcase(name.lower(), pattern) for pattern in KEPT_FILES) and path.is_file()


def _json_object(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing, or torn by an older crash: the stage replaces it
        return None
    return value if isinstance(value, dict) else None


def _check_lora_layers(cfg: PipelineConfig, stage: str) -> None:
    """LoRA on more top layers than the base has was the peft wrapper's ValueError, a traceback after the data
    was prepared."""
    from training.embedder import base_layers

    flag, wanted = ("--lora-layers", cfg.fit.lora_layers) if stage == "fit" else ("--specialist-lora-layers", cfg.specialist_lora_layers)
    if not wanted:
        return
    layers = base_layers(Path(cfg.base_path) if cfg.base_path else None)
    if wanted > layers:
        raise PipelineError(f"{flag} {wanted}: the base model has {layers} encoder layers (0 adapts every layer)")


def _check_fit_dir(cfg: PipelineConfig, stage: str) -> None:
    from data.paths import unwritable
    from training.checkpoints import checkpoint_dir
    from training.pipeline_stages import fit_dir

    run = fit_dir(cfg, stage)
    for path, directory in ((run, True), (checkpoint_dir(run), True), (run / "train_log.jsonl", False)):
        problem = unwritable(path, directory=directory)
        if problem:
            raise PipelineError(f"cannot use the {stage} stage's run directory {run}: {problem}")


def check_resume(cfg: PipelineConfig, *, skip_data: bool = False, stages: tuple[str, ...] = ("fit", "fit_specialist")) -> None:
    """`--resume` continues fits whose checkpoints were written with the run's settings. Under `all`, other fit
    settings were refused at the fit, after the data build had replaced the run's data (and the recipe had been
    rewritten), and other data settings rebuilt data the checkpoints were not fitted on; a fit stage alone
    refused them after preparing its data. All are refused here, before anything is written (`skip_data`: no
    data build follows). A run without a checkpoint has nothing to keep."""
    from training.checkpoints import latest_checkpoint, recorded_fit_config
    from training.pipeline_stages import fit_dir
    from training.specialist import specialist_fit_config

    fits = [("fit", cfg.fit)] if "fit" in stages else []
    if cfg.specialist and "fit_specialist" in stages:
        fits.append(("fit_specialist", specialist_fit_config(cfg.fit, steps=cfg.specialist_steps, lora_layers=cfg.specialist_lora_layers,
                                                             max_minutes=cfg.specialist_max_minutes)))
    resumable = [(stage, config) for stage, config in fits if latest_checkpoint(fit_dir(cfg, stage)) is not None]
    for stage, config in resumable:
        recorded = recorded_fit_config(fit_dir(cfg, stage))
        changes = config.changes_from(recorded) if recorded is not None else ""
        if changes:
            if stage == "fit_specialist":  # the specialist's own flags for the fields its fit sets
                changes = changes.replace("FitConfig.steps ", "--specialist-steps ").replace("FitConfig.lora_layers ", "--specialist-lora-layers ")
            raise PipelineError(f"--resume: the checkpoints under {fit_dir(cfg, stage)} were written with other settings: {changes}; "
                                "rerun with the run's settings, or without --resume to start over")
    if resumable and not skip_data:
        changed = data_changes(cfg)
        if changed:
            raise PipelineError(f"--resume would rebuild the data the checkpoints were fitted on with other settings: {changed}; "
                                "rerun with the run's settings, add --skip-data to keep its data, or drop --resume")


def data_changes(cfg: PipelineConfig) -> str:
    """The data settings (their `all` flags) that differ from the run's recipe (`pipeline_config.json`), paths
    compared as files; "" without a recipe."""
    from training.report import read_json

    recorded = read_json(cfg.run / "pipeline_config.json", None)
    if not recorded:
        return ""
    current = json.loads(json.dumps(cfg.to_json()))  # as the file holds it: tuples as lists
    out = []
    for name in DATA_SETTINGS:
        if name not in recorded:  # a setting added since the run: its default was what the run used
            continue
        old, new = recorded[name], current[name]
        if name in ("locomo", "audit", "include"):
            old, new = _real(old), _real(new)
        if old != new:
            out.append(f"--{name.replace('_', '-')} {current[name]!r} (was {recorded[name]!r})")
    return ", ".join(out)


def _real(value: Any) -> Any:
    if isinstance(value, str):
        return os.path.realpath(value)
    if isinstance(value, list):
        return [_real(v) for v in value]
    return value


__all__ = ["KEPT_FILES", "MODEL_NAMES", "SPECIALIST_FLAGS", "check_directories", "check_resume", "check_specialist_flags", "check_stage",
           "data_changes", "foreign_model_dir"]
