"""The pipeline's stages (`training.pipeline` runs them in order and records them). Each reads and writes files
only, so each also runs alone (`python -m training fit|calibrate|evaluate|export`):

data -> `run_dir/data/*.jsonl` (the directory replaced whole); fit_embedder -> the retrieval embedder's adapter
under `model_dir/embedder` (`training.embedder`, LoCoMo train conversations only); fit -> the model directory
(adapter + heads + config, identity calibration) with checkpoints and loss logs under `run_dir`; fit_specialist
-> the configured family's specialist under the model directory (or removes a stale one); calibrate ->
`model_dir/calibration.json`; evaluate -> `run_dir/evaluation.json` + reliability diagrams; export ->
`run_dir/model.onnx` + a parity check. Each returns the summary its record in stages.json keeps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training.errors import PipelineError
from training.pipeline_config import (
    DATA_SETTINGS,
    PipelineConfig,
    heldout_examples,
    load_model,
    load_model_for_inference,
    load_specialists,
    predict_routed,
    record_states,
    require_model,
    split_examples,
    tokenizer,
)
from training.report import read_json, write_json
from training.staging import staged

if TYPE_CHECKING:
    from data.builders.locomo import LocomoRules


def locomo_rules(cfg: PipelineConfig) -> LocomoRules:
    """The LoCoMo labelling rules of a run: every data setting that names a `LocomoRules` field, the rest at defaults."""
    from data.builders.locomo import LocomoRules

    names = {f.name for f in fields(LocomoRules)}
    return LocomoRules(**{k: getattr(cfg, k) for k in DATA_SETTINGS if k in names})


def stage_build_data(cfg: PipelineConfig) -> dict[str, Any]:
    from data.builders.dataset import BuildConfig, build_dataset, write_build
    from data.paths import unreplaceable
    from data.splits import SplitPlan

    problem = unreplaceable(cfg.data)  # replaced whole: a copy is written beside it
    if problem:  # found at the write, it would cost the whole build
        raise PipelineError(f"cannot write the decision data to {cfg.data}: {problem}")
    result = build_dataset(BuildConfig(locomo=cfg.locomo, audit=cfg.audit, synthetic_per_family=cfg.synthetic_per_family,
                                       seed=cfg.fit.seed, dense=cfg.dense, rules=locomo_rules(cfg),
                                       train_conversations=tuple(cfg.train_conversations), include=tuple(cfg.include),
                                       plan=SplitPlan(dev_groups=tuple(f"locomo:{c}" for c in cfg.dev_conversations),
                                                     calibration_groups=tuple(f"locomo:{c}" for c in cfg.calibration_conversations))))
    counts = write_build(result, cfg.data)
    conversations: dict[str, set[str]] = {}
    for e in result.examples:
        if e.group.startswith("locomo:"):
            conversations.setdefault(e.split, set()).add(e.group.partition(":")[2])
    return {"counts": counts, "too_long": result.too_long, "dropped_for_leakage": result.disjoint.dropped,
            **({"included": result.included} if result.included else {}),
            "locomo": bool(cfg.locomo), "locomo_conversations": {k: sorted(v) for k, v in sorted(conversations.items())},
            "steps_seconds": {k: round(v, 2) for k, v in result.seconds.items()}}


def stage_fit(cfg: PipelineConfig, *, resume: bool = False) -> dict[str, Any]:
    from controller.artifacts import ArtifactMeta, save_artifact
    from controller.torch_model import PackedCrossEncoder
    from training.sampling import prepare_requests

    # a family with a specialist of its own is left to it: the main adapter's steps go to the others
    examples = [e for e in split_examples(cfg, "train") if e.family != cfg.specialist]
    if not examples:
        left = f" but those of the {cfg.specialist} specialist's family" if cfg.specialist else ""
        raise PipelineError(f"{cfg.data / 'train.jsonl'} holds no training examples{left}: rebuild the data (build-data)")
    requests, report = prepare_requests(examples, tokenizer(cfg), max_questions=cfg.max_questions,
                                        noul_as_choice_rate=cfg.noul_as_choice_rate, seed=cfg.fit.seed)
    from training.trainer import fit

    model = PackedCrossEncoder.from_base(cfg.base_path, seed=cfg.fit.seed)
    model, result = fit(model, requests, cfg.fit, fit_dir(cfg, "fit"), resume=resume, progress=cfg.progress)
    with staged(cfg.model) as stage:  # the new directory whole, or the old one: never a mix (`training.staging`)
        digest = save_artifact(model, stage, ArtifactMeta(name=cfg.model_name, version=cfg.model_version), base_path=cfg.base_path)
        (stage / "reliability.png").unlink(missing_ok=True)
        states = record_states(cfg, into=stage)
        forget_records(cfg, ("fit", *MEASURED))  # the records of the model about to be replaced
    return {"config": cfg.fit.to_json(), **asdict(result), "artifact_hash": digest, "requests": asdict(report), "states": states}


def stage_fit_specialist(cfg: PipelineConfig, *, resume: bool = False) -> dict[str, Any]:
    """Fit the configured family's specialist; with none configured, remove any the model directory holds."""
    import shutil

    from controller.specialists import INDEX, write_index
    from training.sampling import prepare_requests
    from training.specialist import SPECIALIST_DIR, fit_specialist, specialist_examples, specialist_fit_config

    forget = lambda: forget_records(cfg, ("fit_specialist", *MEASURED))  # noqa: E731  (just before the directory changes)
    require_model(cfg)  # a specialist sits beside a main model; without --specialist the stage removes the model's own
    if not cfg.specialist:
        if (cfg.model / INDEX).exists() or (cfg.model / SPECIALIST_DIR).exists():
            with staged(cfg.model) as stage:
                write_index(stage, {})
                shutil.rmtree(stage / SPECIALIST_DIR, ignore_errors=True)
                forget()
        return {"family": None}
    from controller.families import FAMILIES

    if cfg.specialist not in FAMILIES:
        raise PipelineError(f"unknown specialist family {cfg.specialist!r}; families: {', '.join(FAMILIES)}")
    examples = specialist_examples(split_examples(cfg, "train"), cfg.specialist, cfg.specialist_sources)
    requests, _ = prepare_requests(examples, tokenizer(cfg), max_questions=cfg.max_questions,
                                   noul_as_choice_rate=cfg.noul_as_choice_rate, seed=cfg.fit.seed)
    config = specialist_fit_config(cfg.fit, steps=cfg.specialist_steps, lora_layers=cfg.specialist_lora_layers,
                                   max_minutes=cfg.specialist_max_minutes)
    summary = fit_specialist(requests, config, fit_dir(cfg, "fit_specialist"), cfg.model, cfg.specialist,
                             base_path=cfg.base_path, resume=resume, progress=cfg.progress, before_swap=forget)
    return {**summary, "examples_by_source": dict(sorted(Counter(e.source for e in examples).items()))}


def stage_fit_embedder(cfg: PipelineConfig) -> dict[str, Any]:
    """Fit the retrieval embedder's LoRA adapter (`training.embedder`) on the LoCoMo train conversations (never
    the dev or calibration ones) into `model_dir/embedder`, which `create_embedder("minilm-tuned")` loads. Without
    a LoCoMo file there is nothing to fit on, and the model directory's adapter is left as it is."""
    from data.locomo import load_locomo
    from training.embedder import EMBEDDER_DIR, EmbedderFitConfig, fit_on_conversations

    if not cfg.locomo:
        return {"skipped": f"no LoCoMo file; {cfg.model / EMBEDDER_DIR} left as it was"}
    held = {*cfg.dev_conversations, *cfg.calibration_conversations}
    train = [c for c in load_locomo(cfg.locomo, audit=cfg.audit)
             if c.sample_id not in held and (not cfg.train_conversations or c.sample_id in cfg.train_conversations)]
    if not train:
        raise PipelineError(f"{cfg.locomo} has no conversation outside the dev and calibration splits to fit the embedder on")
    base = Path(cfg.base_path) if cfg.base_path else None
    return fit_on_conversations(train, cfg.model / EMBEDDER_DIR, EmbedderFitConfig(), base=base)


def stage_calibrate(cfg: PipelineConfig) -> dict[str, Any]:
    """Temperatures (and biases, and prior shifts) for the main model on the calibration requests it serves,
    and for each specialist on its family's."""
    import torch

    from controller.calibration import save_calibration
    from controller.errors import ArtifactError
    from controller.specialists import read_index
    from controller.states import read_states
    from training.calibrate import calibrate_predictions
    from training.predict import predict
    from training.sampling import cap_states, prepare_requests
    from training.specialist import split_requests

    torch.set_num_threads(cfg.fit.threads)
    require_model(cfg)  # the inputs first: a stage that cannot run leaves the model's calibration as it was
    calibration_examples = split_examples(cfg, "calibration")
    reference = split_examples(cfg, "train") + calibration_examples if cfg.calibration_prior != "calibration" else None
    summary: dict[str, Any] = {}

    def fit(predictions: list[Any], model_hash: str | None) -> Any:  # one calibration recipe for every model
        return calibrate_predictions(predictions, model_hash, bias=cfg.calibration_bias, folds=cfg.calibration_folds,
                                     keep_raw=cfg.calibration_keep_raw, reference=reference,
                                     prior_min_examples=cfg.prior_min_examples, shift_fitted_only=cfg.calibration_prior == "fitted")

    # every write goes to a copy of the model directory, swapped in once all are written: a calibrate that dies
    # leaves the old calibration (not a model served uncalibrated); the copy's model hashes as the original
    with staged(cfg.model) as stage:
        index = read_index(stage)
        for target in (stage, *(stage / e["path"] for e in index.values())):  # refitting: old ones may be of other hashes
            (target / "calibration.json").unlink(missing_ok=True)
        local = replace(cfg, model_dir=str(stage))
        try:
            loaded = load_model_for_inference(local, allow_uncalibrated=True)  # the calibrations were removed above
            specialists = load_specialists(local, allow_uncalibrated=True)
        except ArtifactError as error:  # named as the command was given it, not as the copy being calibrated
            raise ArtifactError(str(error).replace(str(stage), str(cfg.model))) from error
        examples = cap_states(calibration_examples, cfg.calibration_states, seed=cfg.fit.seed, by_source=False)
        requests, _ = prepare_requests(examples, tokenizer(cfg), max_questions=cfg.max_questions)
        for family, sub in specialists.items():
            requests, own = split_requests(requests, family)
            run = predict(sub.model, own, progress=cfg.progress, desc=f"calibrate ({family})")
            result = fit(run.predictions, sub.model_hash)
            save_calibration(result.calibration, stage / index[family]["path"] / "calibration.json",
                             states=read_states(stage))  # rendered with the parent's conventions
            summary[f"specialist:{family}"] = {"examples": len(run.predictions), "nll_before": result.nll_before,
                                               "nll_after": result.nll_after, "predict_seconds": round(run.seconds, 2),
                                               **_shifts(result.calibration)}
        run = predict(loaded.model, requests, progress=cfg.progress, desc="calibrate")
        result = fit(run.predictions, loaded.model_hash)
        save_calibration(result.calibration, stage / "calibration.json")
        forget_records(cfg, ("calibrate", "evaluate"))  # a new calibration: the old one's evaluation no longer holds
    return {"examples": len(run.predictions), "folds": cfg.calibration_folds, "keep_raw": cfg.calibration_keep_raw,
            "prior": cfg.calibration_prior, "nll_before": result.nll_before, "nll_after": result.nll_after,
            "predict_seconds": round(run.seconds, 2), **_shifts(result.calibration), **summary}


def _shifts(calibration: Any) -> dict[str, Any]:
    return {"prior_shifts": calibration.prior_shifts} if calibration.prior_shifts else {}


def heldout_intervals(preds: Sequence[Any], cal: Any, source: Callable[[Any], str]) -> dict[str, Any]:
    """Cluster-bootstrap intervals (`training.intervals`) for what the acceptance checks read: each family's
    ECE change from raw to calibrated, and the relevance AUROC on all held-out data, LoCoMo dev, synthetic test."""
    from training.intervals import auroc_interval, ece_change_intervals

    relevant = [p for p in preds if (p.family, p.label.question_name) == ("relevance", "relevant")]
    auroc = {"heldout": auroc_interval(relevant, cal), "locomo_dev": auroc_interval([p for p in relevant if source(p) == "locomo"], cal),
             "synthetic_test": auroc_interval([p for p in relevant if source(p) == "synthetic"], cal)}
    return {"method": "cluster bootstrap (a relevance query's candidates, else a state), 1000 draws, 95% percentile",
            "ece_change": ece_change_intervals(preds, cal), "relevance_auroc": {k: v for k, v in auroc.items() if v is not None}}


def stage_evaluate(cfg: PipelineConfig) -> dict[str, Any]:
    import torch

    from controller.embedding import create_embedder
    from training.evaluate import base_rates, metric_table, plot_reliability
    from training.relevance_report import relevance_by_negative
    from training.robustness import npair_check, robustness_checks, sample_states
    from training.sampling import cap_states, prepare_requests
    from training.specialist import RoutedCalibration

    torch.set_num_threads(cfg.fit.threads)
    loaded, specialists = load_model_for_inference(cfg), load_specialists(cfg)
    tok = tokenizer(cfg)
    held = cap_states(heldout_examples(cfg), cfg.eval_states, seed=cfg.fit.seed)
    if not held:
        raise PipelineError(f"no held-out examples (dev.jsonl / test.jsonl) under {cfg.data}")
    requests, _ = prepare_requests(held, tok, max_questions=cfg.max_questions)
    train_requests, _ = prepare_requests(split_examples(cfg, "train"), tok, max_questions=cfg.max_questions)
    rates = base_rates(train_requests)
    run = predict_routed(cfg, loaded, specialists, requests, "evaluate")
    preds = run.predictions
    cal = RoutedCalibration.of(loaded.calibration, {f: sub.calibration for f, sub in specialists.items()})
    source = lambda p: "locomo" if p.group.startswith("locomo:") else "synthetic"  # noqa: E731
    heldout = {
        "by_family": metric_table(preds, cal, rates),
        "by_source_family": metric_table(preds, cal, rates, key=lambda p: f"{source(p)}:{p.family}"),
        "per_question": {**metric_table(preds, cal, rates, key=lambda p: f"{p.family}/{p.label.question_name}"),
                         **metric_table(preds, cal, rates, key=lambda p: f"{source(p)}:{p.family}/{p.label.question_name}")},
        "examples": len(preds), "requests": run.requests, "predict_seconds": round(run.seconds, 2), "tokens": run.tokens,
    }
    heldout["per_question"].pop("all", None)
    heldout["intervals"] = heldout_intervals(preds, cal, source)
    # robustness and packed vs N-pair: each model on the sampled states of the families it serves
    robust = sample_states(held, cfg.robust_states, seed=cfg.fit.seed)
    paired = sample_states(held, cfg.npair_states, seed=cfg.fit.seed + 1)
    robustness = robustness_checks(loaded.model, [e for e in robust if e.family not in specialists], tok, loaded.calibration, cfg.fit.seed)
    npair = npair_check(loaded.model, [e for e in paired if e.family not in specialists], tok)
    for family, sub in specialists.items():
        robustness[f"specialist:{family}"] = robustness_checks(sub.model, [e for e in robust if e.family == family], tok, sub.calibration, cfg.fit.seed)
        npair[f"specialist:{family}"] = npair_check(sub.model, [e for e in paired if e.family == family], tok)
    # the embedder that mined the dense negatives, as the zero-shot reference
    relevance = relevance_by_negative(preds, held, None if cfg.dense == "none" else create_embedder(cfg.dense))
    cfg.run.mkdir(parents=True, exist_ok=True)
    plot = plot_reliability(preds, cal, cfg.model / "reliability.png", title="held-out reliability (LoCoMo dev + synthetic test)")
    evaluation = {"specialists": {f: sub.model_hash for f, sub in specialists.items()}, "heldout": heldout, "robustness": robustness, "packed_vs_npair": npair, "relevance_by_negative": relevance,
                  "reliability_png": plot}
    write_json(cfg.run / "evaluation.json", evaluation)
    return {"examples": len(preds), "robust_examples": len(robust)}


def stage_export(cfg: PipelineConfig) -> dict[str, Any]:
    import torch

    from controller.packing import make_batches
    from training.sampling import prepare_requests

    torch.set_num_threads(cfg.fit.threads)
    loaded = load_model(cfg)
    split = "dev" if (cfg.data / "dev.jsonl").exists() else "test"
    requests, _ = prepare_requests(split_examples(cfg, split)[:400], tokenizer(cfg), max_questions=cfg.max_questions)
    batches, _ = make_batches([r.tokenized for r in requests[:48]], max_batch_tokens=4096)
    report = _export(loaded.model, cfg.run / "model.onnx", batches, cfg.export_method)
    size = (cfg.run / "model.onnx").stat().st_size
    summary: dict[str, Any] = {"path": report.path, "method": report.method, "parity_max_abs_diff": report.max_abs_diff, "atol": report.atol,
                               "parity_batches": len(batches), "bytes": size}
    for family, sub in load_specialists(cfg).items():  # the same check for every specialist's graph
        sub.model.cpu()
        path = cfg.run / f"model-{family}.onnx"
        own = _export(sub.model, path, batches, cfg.export_method)
        summary[f"specialist:{family}"] = {"path": own.path, "parity_max_abs_diff": own.max_abs_diff, "bytes": path.stat().st_size}
    return summary


def _export(model: Any, path: Path, batches: Any, method: str) -> Any:
    """`export_onnx` into a file beside `path`, moved onto it once the graph passed its parity check: a failed
    or killed export leaves no graph that failed it (or half a graph) under the name a deployment copies."""
    from controller.onnx_export import export_onnx
    from data.paths import replacing

    with replacing(path) as partial:
        report = export_onnx(model, partial, batches, method=method)  # type: ignore[arg-type]
    return replace(report, path=str(path))


# What is measured on a model, which refitting forgets (just before its directory changes, and after the stage).
MEASURED: tuple[str, ...] = ("calibrate", "evaluate", "export")


def fit_dir(cfg: PipelineConfig, stage: str) -> Path:
    """A fit stage's run directory (checkpoints, step log): `run/fit`, `run/fit-<specialist family>`."""
    return cfg.run / ("fit" if stage == "fit" else f"fit-{cfg.specialist}")


def forget_records(cfg: PipelineConfig, stages: tuple[str, ...]) -> None:
    """Drop `stages`' records from stages.json (and, with "evaluate", the evaluation itself): what they measured
    no longer holds."""
    path = cfg.run / "stages.json"
    records = read_json(path, {})
    if any(s in records for s in stages):
        write_json(path, {k: v for k, v in records.items() if k not in stages})
    if "evaluate" in stages:
        (cfg.run / "evaluation.json").unlink(missing_ok=True)


__all__ = ["MEASURED", "fit_dir", "forget_records", "heldout_intervals", "locomo_rules", "stage_build_data", "stage_calibrate",
           "stage_evaluate", "stage_export", "stage_fit", "stage_fit_embedder", "stage_fit_specialist"]
