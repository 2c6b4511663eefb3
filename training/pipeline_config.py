"""The training pipeline's settings and what its stages share: reading the run's split files, the tokenizer, the
model directory loaded for inference, predictions routed to the family specialists. `training.pipeline` runs the
stages; `training.calibration_compare` and the tests read the same split files and models through these.

    cfg = PipelineConfig(locomo=..., audit=..., run_dir="runs/jevmem-minilm")
    examples = split_examples(cfg, "dev")
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from data.splits import DEV_CONVERSATIONS
from training.errors import PipelineError
from training.trainer import FitConfig

log = logging.getLogger(__name__)
# The time-capped fits run last before the finishing stages, so a run's time budget (`total_minutes`) can shorten
# the last of them by what the earlier stages overran.
STAGES: tuple[str, ...] = ("build_data", "fit_embedder", "fit", "fit_specialist", "calibrate", "evaluate", "export")
CALIBRATION_PRIORS: tuple[str, ...] = ("pooled", "fitted", "calibration")


_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # a model name or version as the wire names it


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
    random_swaps: bool = False  # draw every swapped question at random, not the nearest first (`LocomoRules.random_swaps`)
    observation_queries: int = 0  # LoCoMo observation facts per conversation used as relevance queries (`LocomoRules`)
    train_hard_negatives: int = 0  # more top BM25 / dense relevance negatives per LoCoMo train question (`LocomoRules`)
    train_bm25_negatives: int | None = None  # LoCoMo train split: top BM25 relevance negatives (None: as every split)
    train_dense_negatives: int | None = None  # LoCoMo train split: top dense relevance negatives (None: as every split)
    relevance_context: bool = False  # LoCoMo relevance states carry the turn before the memory (`LocomoRules`)
    relevance_dated: bool = False  # LoCoMo relevance memories carry their session date (`LocomoRules`)
    rename_speakers: float = 0.0  # LoCoMo train split: share of questions whose relevance states rename the speakers
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
    # The data sources the specialist is fitted on ("locomo", "synthetic", "teacher", ...: an example's source up
    # to its first ":"); empty: every source. The main fit is not affected. docs/EXPERIMENTS.md row "a LoCoMo-only
    # relevance specialist": dropping the synthetic relevance examples raised conv-44 AUROC in two seeds.
    specialist_sources: tuple[str, ...] = ()
    # `run_all`'s time budget for the whole run (0: none): the specialist's fit is capped at what is left of it
    # after the stages before it, less `finish_minutes` kept for calibrate, evaluate and export (7.1-7.7 min on
    # slow days of the 2-core machine, 6.2 on a normal one), so a slower machine shortens that fit, not the budget.
    total_minutes: float = 0.0
    finish_minutes: float = 8.0
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
    # The fit stage's config.json name and version: the model is served as NAME-VERSION (/v1/models, /readyz), so
    # a model of one's own can be told from the committed one. Neither changes a weight.
    model_name: str = "jevmem-minilm"
    model_version: str = "1.0.0"
    progress: bool = True
    command: str = "make train"

    def __post_init__(self) -> None:
        for name in ("specialist_max_minutes", "total_minutes", "finish_minutes", "rename_speakers"):
            if not math.isfinite(getattr(self, name)):  # NaN passes the range checks below and turns a budget off
                raise PipelineError(f"PipelineConfig.{name} must be a finite number, got {getattr(self, name)}")
        if not 0.0 <= self.noul_as_choice_rate <= 1.0:
            raise PipelineError(f"PipelineConfig.noul_as_choice_rate must lie in [0, 1], got {self.noul_as_choice_rate}")
        for name in ("specialist_steps", "max_questions"):
            if getattr(self, name) < 1:
                raise PipelineError(f"PipelineConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("specialist_lora_layers", "specialist_max_minutes", "prior_min_examples", "synthetic_per_family", "total_minutes", "finish_minutes",
                     "calibration_states", "eval_states", "robust_states", "npair_states"):  # the state counts: 0 is all (or none)
            if getattr(self, name) < 0:
                raise PipelineError(f"PipelineConfig.{name} must be >= 0, got {getattr(self, name)}")
        if any(not source or ":" in source for source in self.specialist_sources):
            raise PipelineError(f"PipelineConfig.specialist_sources takes source names without ':' (locomo, synthetic, teacher), got {list(self.specialist_sources)}")
        for name in ("model_name", "model_version"):
            if not isinstance(getattr(self, name), str) or not _MODEL_ID.fullmatch(getattr(self, name)):
                raise PipelineError(f"--{name.replace('_', '-')} must be 1-64 letters, digits, '.', '_' or '-' starting with a "
                                    f"letter or digit (it names the model on the wire), got {getattr(self, name)!r}")
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

    path = cfg.data / f"{split}.jsonl"
    if not path.exists():
        raise PipelineError(f"no {split}.jsonl under {cfg.data}: run `python -m training build-data --out {cfg.data}` first")
    if _cut_short(path):  # the build writes whole lines (and swaps the directory in whole): a copy was cut short
        raise PipelineError(f"{path} ends inside a record: the file is cut short (a copy or a disk that stopped); "
                            f"rebuild the data (`python -m training build-data --out {cfg.data}`) or copy it again")
    return load_examples(cfg.data, split)


def _cut_short(path: Path) -> bool:
    """Whether a split file does not end with a line end (reading it would drop its last, torn, record)."""
    try:
        with path.open("rb") as handle:
            if handle.seek(0, 2) == 0:
                return False
            handle.seek(-1, 2)
            return handle.read(1) != b"\n"
    except OSError:  # a directory, unreadable: `load_examples` names it
        return False


def heldout_examples(cfg: PipelineConfig) -> list[Any]:
    """Every held-out example: the dev split (LoCoMo dev pair) and the test split (synthetic test shard)."""
    return [e for split in ("dev", "test") if (cfg.data / f"{split}.jsonl").exists() for e in split_examples(cfg, split)]


def tokenizer(cfg: PipelineConfig) -> Any:
    """The template tokenizer of the run's base model."""
    from controller.template import get_tokenizer

    return get_tokenizer(cfg.base_path)


def record_states(cfg: PipelineConfig, into: Path | None = None) -> dict[str, bool]:
    """Write the model directory's `states.json` (`controller.states`; into `into`, the directory being staged to
    replace it, when given) from the rules of the data build it is fitted on, so the engine renders relevance
    states as that data did; the defaults for a build without rules."""
    from controller.states import StateConventions, write_states
    from training.report import read_json

    rules = read_json(cfg.data / "summary.json", {}).get("config", {}).get("rules", {})
    if not rules:
        log.warning("%s records no build rules; %s declares the default state conventions", cfg.data / "summary.json", cfg.model)
    states = StateConventions.from_rules(rules)
    write_states(into or cfg.model, states)
    return asdict(states)


# PipelineConfig fields only the data build reads (`make train` / `python -m training all` set them).
DATA_SETTINGS: tuple[str, ...] = ("locomo", "audit", "synthetic_per_family", "dense", "query_swaps", "random_swaps", "observation_queries",
                                  "train_hard_negatives", "train_bm25_negatives", "train_dense_negatives",
                                  "relevance_context", "relevance_dated", "rename_speakers", "train_conversations", "calibration_conversations",
                                  "dev_conversations", "include")


def load_specialists(cfg: PipelineConfig, *, allow_uncalibrated: bool = False) -> dict[str, Any]:
    """The model directory's specialists by family, on the fit's device (`allow_uncalibrated`: for the calibrate
    stage, which loads them before their calibrations exist)."""
    from controller.specialists import load_specialists as load
    from training.trainer import resolve_device

    loaded = load(cfg.model, base_path=cfg.base_path, allow_uncalibrated=allow_uncalibrated)
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


def load_model(cfg: PipelineConfig, *, allow_uncalibrated: bool = False) -> Any:
    """The model directory loaded (base + adapter + heads + calibration; `allow_uncalibrated`: as for
    `load_specialists`)."""
    from controller.artifacts import load_artifact

    require_model(cfg)
    return load_artifact(cfg.model, base_path=cfg.base_path, allow_uncalibrated=allow_uncalibrated)


def load_model_for_inference(cfg: PipelineConfig, *, allow_uncalibrated: bool = False) -> Any:
    """`load_model`, its torch model moved to the fit's device (a GPU when present and `device` is auto)."""
    from training.trainer import resolve_device

    loaded = load_model(cfg, allow_uncalibrated=allow_uncalibrated)
    loaded.model.to(resolve_device(cfg.fit.device))
    return loaded


def set_torch_threads(threads: int) -> None:
    """torch's intra-op threads for a scoring command's `--threads`; `PipelineError` below 1 (torch's own refusal
    is a RuntimeError traceback). Fits check theirs in `FitConfig`."""
    if threads < 1:
        raise PipelineError(f"--threads must be >= 1, got {threads}")
    import torch

    torch.set_num_threads(threads)


__all__ = ["CALIBRATION_PRIORS", "DATA_SETTINGS", "STAGES", "PipelineConfig", "heldout_examples", "load_model", "load_model_for_inference", "load_specialists", "predict_routed", "record_states", "require_model", "set_torch_threads", "split_examples", "tokenizer"]
