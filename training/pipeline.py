"""`make train`: build data -> fit -> calibrate -> evaluate -> export, each stage timed into the run record.

    cfg = PipelineConfig(locomo=..., audit=..., run_dir="runs/jevmem-minilm", model_dir=DEFAULT_MODEL_DIR)
    run_all(cfg)

The stages themselves (what each reads and writes) are in `training.pipeline_stages`; this module runs them,
times them into `run_dir/stages.json`, keeps the run's recipe (`pipeline_config.json`) and, after each stage,
rewrites `metrics.json` and `MODEL_CARD.md` in the model directory from the records.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from training.errors import PipelineError
from training.pipeline_checks import check_resume, check_stage, data_changes
from training.pipeline_config import DATA_SETTINGS, STAGES, PipelineConfig
from training.pipeline_stages import (
    MEASURED,
    fit_dir,
    forget_records,
    heldout_intervals,
    locomo_rules,
    stage_build_data,
    stage_calibrate,
    stage_evaluate,
    stage_export,
    stage_fit,
    stage_fit_embedder,
    stage_fit_specialist,
)
from training.report import read_json, record_stage, write_json, write_report

log = logging.getLogger(__name__)


_MODEL_WRITERS = ("fit_embedder", "fit", "fit_specialist", "calibrate")  # the stages that swap in a new model directory
_RUNNERS: dict[str, Callable[..., dict[str, Any]]] = {
    "build_data": stage_build_data, "fit": stage_fit, "fit_specialist": stage_fit_specialist, "fit_embedder": stage_fit_embedder, "calibrate": stage_calibrate, "evaluate": stage_evaluate, "export": stage_export,
}


def run_stage(cfg: PipelineConfig, stage: str, **options: Any) -> dict[str, Any]:
    """Run one stage, record its wall-clock and summary, and refresh metrics.json / MODEL_CARD.md."""
    if stage not in _RUNNERS:
        raise PipelineError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
    check_stage(cfg, stage)  # clashing directories, a model directory that is something else, a bad --base, ...
    if options.get("resume"):
        check_resume(cfg, skip_data=True, stages=(stage,))
    make_run_dir(cfg)
    changes = _config_changes(cfg, stage)
    read_json(cfg.run / "stages.json", {})  # a record it cannot update fails here, not after the stage's work
    if stage in _MODEL_WRITERS:
        from data.paths import unreplaceable

        problem = unreplaceable(cfg.model)  # replaced whole at the stage's end: found there, it would cost the fit
        if problem:
            raise PipelineError(f"cannot write the model directory {cfg.model}: {problem}")
    began = time.perf_counter()
    log.info("stage %s ...", stage)
    summary = _RUNNERS[stage](cfg, **options)
    if stage in ("fit", "fit_specialist"):  # a new model invalidates everything measured on the old one (not a fit that failed)
        forget_records(cfg, MEASURED)
    if changes:
        summary = {**summary, "config_changes": changes}
    seconds = time.perf_counter() - began
    record_stage(cfg.run, stage, seconds, summary)
    log.info("stage %s done in %.1fs", stage, seconds)
    if (cfg.model / "config.json").exists():  # the card's "reproduce" line names the recipe's command, not this stage's
        write_report(cfg.run, cfg.model, _recipe_command(cfg))
    return summary


def make_run_dir(cfg: PipelineConfig) -> None:
    """Create the run directory; `PipelineError` when it cannot be (a file, under a file, not writable)."""
    from data.paths import unwritable

    problem = unwritable(cfg.run, directory=True)
    if problem:
        raise PipelineError(f"cannot use the run directory {cfg.run}: {problem}")
    cfg.run.mkdir(parents=True, exist_ok=True)


def _recipe_command(cfg: PipelineConfig) -> str:
    recorded = read_json(cfg.run / "pipeline_config.json", None) or {}
    return str(recorded.get("command") or cfg.command)


_FIT_ONLY = ("model_name", "model_version")  # what only the fit stage reads (and only `fit` and `all` have flags for)


def _config_changes(cfg: PipelineConfig, stage: str = "fit") -> dict[str, Any]:
    """The run's recipe is `pipeline_config.json`, written by `run_all` (or by the first stage run into an
    empty run directory); a stage run on its own with other settings leaves it as it is and returns its
    differences (`fit.steps`, `calibration_folds`, ...), which its record in stages.json keeps. The data build's
    settings (`DATA_SETTINGS`) are left out: a stage subcommand has no flags for them and reads the data as built;
    so are the model's name and version (`_FIT_ONLY`) for every stage but `fit`."""
    path, current = cfg.run / "pipeline_config.json", json.loads(json.dumps(cfg.to_json()))  # as the file holds it
    recorded = read_json(path, None)
    if recorded is None:
        write_json(path, current)
        return {}
    out: dict[str, Any] = {}
    defaults = PipelineConfig().to_json()  # a setting newer than the recorded recipe: its default is what that ran with
    for key, value in current.items():
        old = recorded.get(key, defaults.get(key))
        if isinstance(value, dict) and isinstance(old, dict):
            out.update({f"{key}.{k}": v for k, v in value.items() if old.get(k) != v})
        elif key not in ("progress", *DATA_SETTINGS, *(_FIT_ONLY if stage != "fit" else ())) and old != value:
            out[key] = value
    return out


def within_budget(cfg: PipelineConfig, elapsed_minutes: float) -> PipelineConfig:
    """`cfg` with the specialist's fit capped so the run ends within `cfg.total_minutes`: at most what is left
    after `elapsed_minutes` and the `finish_minutes` kept for the stages after it (never under one minute, with a
    warning), and never above its own cap. Unchanged without a budget or a specialist."""
    if not cfg.total_minutes or not cfg.specialist:
        return cfg
    left = cfg.total_minutes - elapsed_minutes - cfg.finish_minutes
    own = cfg.specialist_max_minutes or float("inf")
    if left >= own:
        return cfg
    if left < 1.0:
        log.warning("the %.1f-minute budget is spent after %.1f minutes; the specialist's fit gets one minute", cfg.total_minutes, elapsed_minutes)
    cap = round(max(left, 1.0), 2)
    log.info("time budget: the specialist's fit is capped at %.2f minutes (its own cap %s)", cap, cfg.specialist_max_minutes or "none")
    return replace(cfg, specialist_max_minutes=cap)


def run_all(cfg: PipelineConfig, *, skip_data: bool = False, resume: bool = False) -> dict[str, Any]:
    """Every stage in order; returns the final metrics. The run's recipe (`pipeline_config.json`) is this one;
    a stage that the time budget shortened records the change (`config_changes` in stages.json)."""
    began = time.perf_counter()
    for stage in STAGES:  # a bad --base, --model-dir, ... stops the run before the data build, not at its stage
        check_stage(cfg, stage)
    if not skip_data and not cfg.locomo and not cfg.include and not cfg.synthetic_per_family:
        raise PipelineError("--synthetic-per-family 0 without --locomo or --include: the data build has nothing to build")
    if resume:
        check_resume(cfg, skip_data=skip_data)
    make_run_dir(cfg)
    read_json(cfg.run / "stages.json", {})  # every stage records into it: a file that is no record stops the run first
    recipe = cfg.to_json()
    if skip_data:  # the data stay as built: the recipe keeps the settings they were built with, not flags without effect
        changed = data_changes(cfg)
        if changed:
            log.warning("--skip-data: the data under %s stay as built; these flags do not change them: %s", cfg.data, changed)
        recorded = read_json(cfg.run / "pipeline_config.json", None) or {}
        recipe.update({k: recorded[k] for k in DATA_SETTINGS if k in recorded})
    write_json(cfg.run / "pipeline_config.json", recipe)
    for stage in STAGES:
        if stage == "build_data" and skip_data:
            continue
        stage_cfg = within_budget(cfg, (time.perf_counter() - began) / 60) if stage == "fit_specialist" else cfg
        run_stage(stage_cfg, stage, **({"resume": _resumable(cfg, stage)} if resume and stage in ("fit", "fit_specialist") else {}))
    return read_json(cfg.model / "metrics.json", {})


def _resumable(cfg: PipelineConfig, stage: str) -> bool:
    """`run_all(resume=True)` resumes a fit stage that has a checkpoint and starts one that has none (the run was
    killed before that fit began: the specialist's after a kill in the main fit)."""
    from training.checkpoints import checkpoint_dir, latest_checkpoint

    if latest_checkpoint(fit_dir(cfg, stage)) is not None:
        return True
    if stage == "fit" or cfg.specialist:
        log.warning("--resume: no checkpoint under %s; the %s stage starts from step 0", checkpoint_dir(fit_dir(cfg, stage)), stage)
    return False


__all__ = ["fit_dir", "heldout_intervals", "locomo_rules", "run_all", "run_stage", "within_budget", "stage_build_data", "stage_calibrate",
           "stage_evaluate", "stage_export", "stage_fit", "stage_fit_embedder", "stage_fit_specialist"]
