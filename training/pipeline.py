"""`make train`: build data -> fit -> calibrate -> evaluate -> export, each stage timed into the run record.

    cfg = PipelineConfig(locomo=..., audit=..., run_dir="runs/jevmem-minilm", model_dir=DEFAULT_MODEL_DIR)
    run_all(cfg)

Stages read and write files only, so each also runs alone (`python -m training fit|calibrate|evaluate|export`):
data -> `run_dir/data/*.jsonl`; fit -> the model directory (adapter + heads + config, identity calibration)
with checkpoints and loss logs under `run_dir`; fit_specialist -> the configured family's specialist under
the model directory (or removes a stale one); fit_embedder -> the retrieval embedder's adapter under
`model_dir/embedder` (`training.embedder`, LoCoMo train conversations only); calibrate -> `model_dir/calibration.json`; evaluate ->
`run_dir/evaluation.json` + reliability diagrams; export -> `run_dir/model.onnx` + a parity check.
After each stage `metrics.json` and `MODEL_CARD.md` in the model directory are rewritten from the records.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from data.splits import DEV_CONVERSATIONS
from training.errors import PipelineError
from training.report import record_stage, write_json, write_report
from training.trainer import FitConfig

log = logging.getLogger(__name__)
STAGES: tuple[str, ...] = ("build_data", "fit", "fit_specialist", "fit_embedder", "calibrate", "evaluate", "export")
CALIBRATION_PRIORS: tuple[str, ...] = ("pooled", "fitted", "calibration")


@dataclass(frozen=True)
class PipelineConfig:
    run_dir: str = "runs/jevmem-minilm"
    model_dir: str = ""  # default: controller/models/jevmem-minilm
    data_dir: str = ""  # default: <run_dir>/data
    locomo: str | None = None  # LoCoMo JSON (never bundled); None builds synthetic data only
    audit: str | None = None
    synthetic_per_family: int = 1500
    dense: str = "minilm"  # dense hard negatives for the LoCoMo rules: minilm | hashing | none
    query_swaps: int = 0  # LoCoMo swapped-query relevance negatives per gold turn (`LocomoRules.query_swaps`)
    observation_queries: int = 0  # LoCoMo observation facts per conversation used as relevance queries (`LocomoRules`)
    train_hard_negatives: int = 0  # more top BM25 / dense relevance negatives per LoCoMo train question (`LocomoRules`)
    train_bm25_negatives: int | None = None  # LoCoMo train split: top BM25 relevance negatives (None: as every split)
    train_dense_negatives: int | None = None  # LoCoMo train split: top dense relevance negatives (None: as every split)
    relevance_context: bool = False  # LoCoMo relevance states carry the turn before the memory (`LocomoRules`)
    relevance_dated: bool = False  # LoCoMo relevance memories carry their session date (`LocomoRules`)
    train_conversations: tuple[str, ...] = ()  # LoCoMo conversations the train split may use (empty: all it would)
    include: tuple[str, ...] = ()  # decision-example files added as training data (`data.builders.dataset.included_examples`)
    calibration_conversations: tuple[str, ...] = ("conv-44",)  # LoCoMo conversations held out for calibration
    dev_conversations: tuple[str, ...] = DEV_CONVERSATIONS  # LoCoMo conversations held out for evaluation
    base_path: str | None = None  # default: the installed MiniLM package
    fit: FitConfig = field(default_factory=FitConfig)
    # A family answered by its own adapter (`training.specialist`); "" for none. It is fitted on that family's
    # training examples alone with the main fit's settings, except these three.
    specialist: str = ""
    specialist_steps: int = 1000
    specialist_lora_layers: int = 0  # 0: every layer
    specialist_max_minutes: float = 0.0
    max_questions: int = 8  # questions per packed training request
    noul_as_choice_rate: float = 0.05  # training Nouls also asked as the equivalent yes/no Choice
    calibration_states: int = 0  # calibration-split states per family (0: all)
    eval_states: int = 0  # held-out states per source and family (0: all; a sample of 200 flattered the model)
    robust_states: int = 120  # held-out states for the robustness checks
    npair_states: int = 120  # held-out states for packed vs N-pair
    # A Noul bias (Platt) beside the temperature, at each calibration level where it survives cross-validation
    # across data sources. On every held-out state of the shipped model it lowered the NLL (0.4062 -> 0.4025,
    # temperature-only hierarchy against the same with biases) and every family's ECE but relevance's.
    calibration_bias: bool = True
    # The folds of that cross-validation (`training.calibrate.FOLDS`): "source" (LoCoMo against synthetic) or
    # "group" (conversations and generator shards, the lone calibration conversation split by state).
    # And whether a level must also beat the raw logits out of fold (else it stays at T = 1). On the held-out
    # states of artifact c1838dd6 + 44f0e529 (`python -m training compare-calibration`, docs/EXPERIMENTS.md row "calibration
    # kept where it beats raw"): 3 of 6 families meet the ECE target without the raw check, 4 of 6 with it.
    calibration_folds: str = "source"
    calibration_keep_raw: bool = True
    calibration_prior: str = "fitted"  # Noul prior shifts to the train + calibration label rates at the levels
    # calibration changed (T != 1 or a bias); "pooled": at every level; "calibration": none
    prior_min_examples: int = 100  # calibration Nouls a catalogue key needs for a prior shift
    export_method: str = "fused"
    progress: bool = True
    command: str = "make train"

    def __post_init__(self) -> None:
        if not 0.0 <= self.noul_as_choice_rate <= 1.0:
            raise PipelineError(f"noul_as_choice_rate must lie in [0, 1], got {self.noul_as_choice_rate}")
        for name in ("specialist_steps", "max_questions"):
            if getattr(self, name) < 1:
                raise PipelineError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("specialist_lora_layers", "specialist_max_minutes", "prior_min_examples", "synthetic_per_family"):
            if getattr(self, name) < 0:
                raise PipelineError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.calibration_prior not in CALIBRATION_PRIORS:
            raise PipelineError(f"unknown calibration prior {self.calibration_prior!r}; choose {', '.join(CALIBRATION_PRIORS)}")

    @property
    def run(self) -> Path:
        return Path(self.run_dir)

    @property
    def model(self) -> Path:
        if self.model_dir:
            return Path(self.model_dir)
        from controller.artifacts import DEFAULT_MODEL_DIR

        return DEFAULT_MODEL_DIR

    @property
    def data(self) -> Path:
        return Path(self.data_dir) if self.data_dir else self.run / "data"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "fit": self.fit.to_json()}


def split_examples(cfg: PipelineConfig, split: str) -> list[Any]:
    """The decision examples of one split file under the run's data directory."""
    from data.schema import load_examples

    if not (cfg.data / f"{split}.jsonl").exists():
        raise PipelineError(f"no {split}.jsonl under {cfg.data}: run `python -m training build-data --out {cfg.data}` first")
    return load_examples(cfg.data, split)


def heldout_examples(cfg: PipelineConfig) -> list[Any]:
    """Every held-out example: the dev split (LoCoMo dev pair) and the test split (synthetic test shard)."""
    return [e for split in ("dev", "test") if (cfg.data / f"{split}.jsonl").exists() for e in split_examples(cfg, split)]


def tokenizer(cfg: PipelineConfig) -> Any:
    """The template tokenizer of the run's base model."""
    from controller.template import get_tokenizer

    return get_tokenizer(cfg.base_path)


def record_states(cfg: PipelineConfig) -> dict[str, bool]:
    """Write the model directory's `states.json` (`controller.states`) from the rules of the data build it is
    fitted on, so the engine renders relevance states as that data did; the defaults for a build without rules."""
    from controller.states import StateConventions, write_states
    from training.report import read_json

    rules = read_json(cfg.data / "summary.json", {}).get("config", {}).get("rules", {})
    if not rules:
        log.warning("%s records no build rules; %s declares the default state conventions", cfg.data / "summary.json", cfg.model)
    states = StateConventions.from_rules(rules)
    write_states(cfg.model, states)
    return asdict(states)


def stage_build_data(cfg: PipelineConfig) -> dict[str, Any]:
    from data.builders.dataset import BuildConfig, build_dataset, write_build

    from data.builders.locomo import LocomoRules
    from data.splits import SplitPlan

    result = build_dataset(BuildConfig(locomo=cfg.locomo, audit=cfg.audit, synthetic_per_family=cfg.synthetic_per_family,
                                       seed=cfg.fit.seed, dense=cfg.dense, rules=LocomoRules(query_swaps=cfg.query_swaps, observation_queries=cfg.observation_queries,
                                                                         train_hard_negatives=cfg.train_hard_negatives,
                                                                         train_bm25_negatives=cfg.train_bm25_negatives,
                                                                         train_dense_negatives=cfg.train_dense_negatives,
                                                                         relevance_context=cfg.relevance_context,
                                                                         relevance_dated=cfg.relevance_dated),
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
    from controller.artifacts import save_artifact
    from controller.torch_model import PackedCrossEncoder
    from training.sampling import prepare_requests

    # a family with a specialist of its own is left to it: the main adapter's steps go to the others
    examples = [e for e in split_examples(cfg, "train") if e.family != cfg.specialist]
    requests, report = prepare_requests(examples, tokenizer(cfg), max_questions=cfg.max_questions,
                                        noul_as_choice_rate=cfg.noul_as_choice_rate, seed=cfg.fit.seed)
    from training.trainer import fit

    model = PackedCrossEncoder.from_base(cfg.base_path, seed=cfg.fit.seed)
    model, result = fit(model, requests, cfg.fit, cfg.run / "fit", resume=resume, progress=cfg.progress)
    digest = save_artifact(model, cfg.model, base_path=cfg.base_path)
    for stale in ("reliability.png",):
        (cfg.model / stale).unlink(missing_ok=True)
    return {"config": cfg.fit.to_json(), **asdict(result), "artifact_hash": digest, "requests": asdict(report),
            "states": record_states(cfg)}


def stage_fit_specialist(cfg: PipelineConfig, *, resume: bool = False) -> dict[str, Any]:
    """Fit the configured family's specialist; with none configured, remove any the model directory holds."""
    import shutil

    from controller.specialists import write_index
    from training.sampling import prepare_requests
    from training.specialist import SPECIALIST_DIR, fit_specialist, specialist_fit_config

    if not cfg.specialist:
        write_index(cfg.model, {})
        shutil.rmtree(cfg.model / SPECIALIST_DIR, ignore_errors=True)
        return {"family": None}
    from controller.families import FAMILIES

    if cfg.specialist not in FAMILIES:
        raise PipelineError(f"unknown specialist family {cfg.specialist!r}; families: {', '.join(FAMILIES)}")
    require_model(cfg)
    examples = [e for e in split_examples(cfg, "train") if e.family == cfg.specialist]
    requests, _ = prepare_requests(examples, tokenizer(cfg), max_questions=cfg.max_questions,
                                   noul_as_choice_rate=cfg.noul_as_choice_rate, seed=cfg.fit.seed)
    config = specialist_fit_config(cfg.fit, steps=cfg.specialist_steps, lora_layers=cfg.specialist_lora_layers,
                                   max_minutes=cfg.specialist_max_minutes)
    return fit_specialist(requests, config, cfg.run / f"fit-{cfg.specialist}", cfg.model, cfg.specialist,
                          base_path=cfg.base_path, resume=resume, progress=cfg.progress)


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


def load_specialists(cfg: PipelineConfig) -> dict[str, Any]:
    """The model directory's specialists by family, on the fit's device."""
    from controller.specialists import load_specialists as load
    from training.trainer import resolve_device

    loaded = load(cfg.model, base_path=cfg.base_path)
    for sub in loaded.values():
        sub.model.to(resolve_device(cfg.fit.device))
    return loaded


def predict_routed(cfg: PipelineConfig, loaded: Any, specialists: dict[str, Any], requests: list[Any], desc: str) -> Any:
    """Predictions for `requests`, each from the model that serves it (a specialist for its family's requests),
    in one `PredictRun` (predictions grouped by model)."""
    from training.predict import PredictRun, predict
    from training.specialist import split_requests

    runs, rest = [], list(requests)
    for family, sub in specialists.items():
        rest, own = split_requests(rest, family)
        runs.append(predict(sub.model, own, progress=cfg.progress, desc=f"{desc} ({family})"))
    runs.append(predict(loaded.model, rest, progress=cfg.progress, desc=desc))
    return PredictRun([p for r in runs for p in r.predictions], sum(r.seconds for r in runs), sum(r.requests for r in runs),
                      sum(r.tokens for r in runs))


def require_model(cfg: PipelineConfig) -> None:
    """Raise `PipelineError` unless the model directory holds a fitted model."""
    if not (cfg.model / "config.json").exists():
        raise PipelineError(f"no model directory at {cfg.model}: run the fit stage first")


def load_model(cfg: PipelineConfig) -> Any:
    """The model directory loaded (base + adapter + heads + calibration)."""
    from controller.artifacts import load_artifact

    require_model(cfg)
    return load_artifact(cfg.model, base_path=cfg.base_path)


def load_model_for_inference(cfg: PipelineConfig) -> Any:
    """`load_model`, its torch model moved to the fit's device (a GPU when present and `device` is auto)."""
    from training.trainer import resolve_device

    loaded = load_model(cfg)
    loaded.model.to(resolve_device(cfg.fit.device))
    return loaded


def stage_calibrate(cfg: PipelineConfig) -> dict[str, Any]:
    """Temperatures (and biases, and prior shifts) for the main model on the calibration requests it serves,
    and for each specialist on its family's."""
    import torch

    from controller.calibration import save_calibration
    from controller.specialists import read_index
    from training.calibrate import calibrate_predictions
    from training.predict import predict
    from training.sampling import cap_states, prepare_requests
    from training.specialist import split_requests

    torch.set_num_threads(cfg.fit.threads)
    require_model(cfg)  # the inputs first: a stage that cannot run leaves the model's calibration as it was
    calibration_examples = split_examples(cfg, "calibration")
    reference = split_examples(cfg, "train") + calibration_examples if cfg.calibration_prior != "calibration" else None
    index = read_index(cfg.model)
    for target in (cfg.model, *(cfg.model / e["path"] for e in index.values())):  # refitting: old ones may be of other hashes
        (target / "calibration.json").unlink(missing_ok=True)
    loaded, specialists = load_model_for_inference(cfg), load_specialists(cfg)
    examples = cap_states(calibration_examples, cfg.calibration_states, seed=cfg.fit.seed, by_source=False)
    requests, _ = prepare_requests(examples, tokenizer(cfg), max_questions=cfg.max_questions)
    summary: dict[str, Any] = {}

    def fit(predictions: list[Any], model_hash: str | None) -> Any:  # one calibration recipe for every model
        return calibrate_predictions(predictions, model_hash, bias=cfg.calibration_bias, folds=cfg.calibration_folds,
                                     keep_raw=cfg.calibration_keep_raw, reference=reference,
                                     prior_min_examples=cfg.prior_min_examples, shift_fitted_only=cfg.calibration_prior == "fitted")

    for family, sub in specialists.items():
        requests, own = split_requests(requests, family)
        run = predict(sub.model, own, progress=cfg.progress, desc=f"calibrate ({family})")
        result = fit(run.predictions, sub.model_hash)
        save_calibration(result.calibration, cfg.model / index[family]["path"] / "calibration.json")
        summary[f"specialist:{family}"] = {"examples": len(run.predictions), "nll_before": result.nll_before,
                                           "nll_after": result.nll_after, "predict_seconds": round(run.seconds, 2),
                                           **_shifts(result.calibration)}
    run = predict(loaded.model, requests, progress=cfg.progress, desc="calibrate")
    result = fit(run.predictions, loaded.model_hash)
    save_calibration(result.calibration, cfg.model / "calibration.json")
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

    from controller.onnx_export import export_onnx
    from controller.packing import make_batches
    from training.sampling import prepare_requests

    torch.set_num_threads(cfg.fit.threads)
    loaded = load_model(cfg)
    split = "dev" if (cfg.data / "dev.jsonl").exists() else "test"
    requests, _ = prepare_requests(split_examples(cfg, split)[:400], tokenizer(cfg), max_questions=cfg.max_questions)
    batches, _ = make_batches([r.tokenized for r in requests[:48]], max_batch_tokens=4096)
    report = export_onnx(loaded.model, cfg.run / "model.onnx", batches, method=cfg.export_method)  # type: ignore[arg-type]
    size = (cfg.run / "model.onnx").stat().st_size
    summary: dict[str, Any] = {"path": report.path, "method": report.method, "parity_max_abs_diff": report.max_abs_diff, "atol": report.atol,
                               "parity_batches": len(batches), "bytes": size}
    for family, sub in load_specialists(cfg).items():  # the same check for every specialist's graph
        sub.model.cpu()
        path = cfg.run / f"model-{family}.onnx"
        own = export_onnx(sub.model, path, batches, method=cfg.export_method)  # type: ignore[arg-type]
        summary[f"specialist:{family}"] = {"path": own.path, "parity_max_abs_diff": own.max_abs_diff, "bytes": path.stat().st_size}
    return summary


_RUNNERS: dict[str, Callable[..., dict[str, Any]]] = {
    "build_data": stage_build_data, "fit": stage_fit, "fit_specialist": stage_fit_specialist, "fit_embedder": stage_fit_embedder, "calibrate": stage_calibrate, "evaluate": stage_evaluate, "export": stage_export,
}


# PipelineConfig fields only the data build reads (`make train` / `python -m training all` set them).
DATA_SETTINGS: tuple[str, ...] = ("locomo", "audit", "synthetic_per_family", "dense", "query_swaps", "observation_queries",
                                  "train_hard_negatives", "train_bm25_negatives", "train_dense_negatives",
                                  "relevance_context", "relevance_dated", "train_conversations", "calibration_conversations",
                                  "dev_conversations", "include")


def run_stage(cfg: PipelineConfig, stage: str, **options: Any) -> dict[str, Any]:
    """Run one stage, record its wall-clock and summary, and refresh metrics.json / MODEL_CARD.md."""
    if stage not in _RUNNERS:
        raise PipelineError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
    cfg.run.mkdir(parents=True, exist_ok=True)
    changes = _config_changes(cfg)
    began = time.perf_counter()
    log.info("stage %s ...", stage)
    summary = _RUNNERS[stage](cfg, **options)
    if stage in ("fit", "fit_specialist"):  # a new model invalidates everything measured on the old one (not a fit that failed)
        _forget(cfg, ("calibrate", "evaluate", "export"))
    if changes:
        summary = {**summary, "config_changes": changes}
    seconds = time.perf_counter() - began
    record_stage(cfg.run, stage, seconds, summary)
    log.info("stage %s done in %.1fs", stage, seconds)
    if (cfg.model / "config.json").exists():  # the card's "reproduce" line names the recipe's command, not this stage's
        write_report(cfg.run, cfg.model, _recipe_command(cfg))
    return summary


def _recipe_command(cfg: PipelineConfig) -> str:
    from training.report import read_json

    recorded = read_json(cfg.run / "pipeline_config.json", None) or {}
    return str(recorded.get("command") or cfg.command)


def _config_changes(cfg: PipelineConfig) -> dict[str, Any]:
    """The run's recipe is `pipeline_config.json`, written by `run_all` (or by the first stage run into an
    empty run directory); a stage run on its own with other settings leaves it as it is and returns its
    differences (`fit.steps`, `calibration_folds`, ...), which its record in stages.json keeps. The data build's
    settings (`DATA_SETTINGS`) are left out: a stage subcommand has no flags for them and reads the data as built."""
    from training.report import read_json

    path, current = cfg.run / "pipeline_config.json", json.loads(json.dumps(cfg.to_json()))  # as the file holds it
    recorded = read_json(path, None)
    if recorded is None:
        write_json(path, current)
        return {}
    out: dict[str, Any] = {}
    for key, value in current.items():
        old = recorded.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            out.update({f"{key}.{k}": v for k, v in value.items() if old.get(k) != v})
        elif key not in ("progress", *DATA_SETTINGS) and old != value:
            out[key] = value
    return out


def _forget(cfg: PipelineConfig, stages: tuple[str, ...]) -> None:
    from training.report import read_json

    path = cfg.run / "stages.json"
    records = read_json(path, {})
    if any(s in records for s in stages):
        write_json(path, {k: v for k, v in records.items() if k not in stages})
    if "evaluate" in stages:
        (cfg.run / "evaluation.json").unlink(missing_ok=True)


def run_all(cfg: PipelineConfig, *, skip_data: bool = False, resume: bool = False) -> dict[str, Any]:
    """Every stage in order; returns the final metrics. The run's recipe (`pipeline_config.json`) is this one."""
    cfg.run.mkdir(parents=True, exist_ok=True)
    write_json(cfg.run / "pipeline_config.json", cfg.to_json())
    for stage in STAGES:
        if stage == "build_data" and skip_data:
            continue
        run_stage(cfg, stage, **({"resume": resume} if stage in ("fit", "fit_specialist") else {}))
    from training.report import read_json

    return read_json(cfg.model / "metrics.json", {})
