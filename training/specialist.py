"""Family specialists in training: one family's own adapter and heads, fitted on that family alone, calibrated
on it, and consulted for its family's requests as the serving backend consults it (`controller.specialists`).

    cfg = specialist_fit_config(main_fit, steps=1000, lora_layers=3, max_minutes=20)
    summary = fit_specialist(requests, cfg, run_dir / "fit-relevance", model_dir, "relevance")
    main_part, specialist_part = split_requests(requests, "relevance")
    calibration = RoutedCalibration.of(main_calibration, {"relevance": specialist_calibration})

Why: in the six-family mix the relevance judge plateaus (pair AUROC ~0.77 at 850 or 1,150 steps, any number
of adapted layers) while a relevance-only fit of the same size reaches ~0.81; the families interfere through
the shared LoRA weights. A specialist costs one more fit in `make train` and one more graph in memory, and
nothing per request: every relevance request is answered by exactly one model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from controller.calibration import Calibration
from training.sampling import LabeledRequest
from training.trainer import FitConfig

SPECIALIST_DIR = "specialists"


def specialist_path(family: str) -> str:
    """Where a family's specialist lives, relative to the main model directory."""
    return f"{SPECIALIST_DIR}/{family}"


def specialist_fit_config(main: FitConfig, *, steps: int, lora_layers: int, max_minutes: float) -> FitConfig:
    """The main fit's settings with the specialist's own length, adapted layers and time cap (no family boost:
    there is one family)."""
    return replace(main, steps=steps, lora_layers=lora_layers, max_minutes=max_minutes, family_boost="")


def specialist_examples(examples: Sequence[Any], family: str, sources: Sequence[str] = ()) -> list[Any]:
    """The training examples of `family`'s specialist: that family's, and with `sources` only those whose source up
    to its first ":" is one of them ("synthetic" keeps "synthetic:typing", "locomo" keeps "locomo").
    `PipelineError` when nothing is left."""
    from training.errors import PipelineError

    chosen = [e for e in examples if e.family == family and (not sources or e.source.partition(":")[0] in sources)]
    if not chosen:
        where = f" from the sources {', '.join(sources)}" if sources else ""
        raise PipelineError(f"no training examples of family {family!r}{where} for its specialist")
    return chosen


def routed_to(request: LabeledRequest, family: str) -> bool:
    """Whether `family`'s specialist answers this request in training, calibration and evaluation: all its
    labels are of that family. Serving routes on the catalogue and, for other wordings, on the state's shape
    (`controller.specialists.request_family`); the two agree on every request of the decision data, paraphrases
    included, because each family's states have a shape of their own (test)."""
    return bool(request.labels) and all(label.family == family for label in request.labels)


def split_requests(requests: Sequence[LabeledRequest], family: str) -> tuple[list[LabeledRequest], list[LabeledRequest]]:
    """(requests for the main model, requests for `family`'s specialist)."""
    main, special = [], []
    for request in requests:
        (special if routed_to(request, family) else main).append(request)
    return main, special


def fit_specialist(
    requests: Sequence[LabeledRequest],
    config: FitConfig,
    run_dir: Path,
    model_dir: Path,
    family: str,
    *,
    base_path: str | None = None,
    resume: bool = False,
    progress: bool = True,
    before_swap: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Fit a fresh adapter and heads on `requests` (one family's) and write it as `family`'s specialist of
    `model_dir`, recorded in its index; both are written into a copy of `model_dir` that replaces it whole
    (`training.staging`), after `before_swap` runs. Returns the stage summary."""
    from controller.artifacts import ArtifactMeta, save_artifact
    from controller.specialists import read_index, write_index
    from controller.torch_model import PackedCrossEncoder
    from training.errors import PipelineError
    from training.staging import staged
    from training.trainer import fit

    if not requests:
        raise PipelineError(f"no training requests of family {family!r} for its specialist")
    model = PackedCrossEncoder.from_base(base_path, seed=config.seed)
    model, result = fit(model, requests, config, run_dir, resume=resume, progress=progress)
    meta = ArtifactMeta(name=f"jevmem-minilm-{family}", description=f"Local System One controller: {family} specialist (LoRA).")
    with staged(model_dir) as stage:  # the specialist and the index entry that pins its hash change together
        out = stage / specialist_path(family)
        digest = save_artifact(model, out, meta, base_path=base_path)
        for extra in ("metrics.json", "MODEL_CARD.md"):  # the main model's card and metrics describe the pair
            (out / extra).unlink(missing_ok=True)
        paths = {f: e["path"] for f, e in read_index(stage).items()}
        write_index(stage, {**paths, family: specialist_path(family)})
        if before_swap is not None:
            before_swap()
    labels = sum(len(r.labels) for r in requests)
    return {"family": family, "config": config.to_json(), **asdict(result), "artifact_hash": digest,
            "requests": len(requests), "labels": labels}


@dataclass(frozen=True)
class RoutedCalibration(Calibration):
    """The main calibration, whose `for_family` gives each specialist's own for the questions of its family
    (`training.predict.probabilities` asks it per prediction).

    Build it with `RoutedCalibration.of(main, {"relevance": specialist_calibration})`."""

    specialists: dict[str, Calibration] = field(default_factory=dict)

    @classmethod
    def of(cls, main: Calibration, specialists: Mapping[str, Calibration]) -> RoutedCalibration:
        return cls(main.temperatures, main.model_hash, main.fitted_on, main.family_temperatures, main.family_biases,
                   main.prior_shifts, dict(specialists))

    def for_family(self, family: str) -> Calibration:
        return self.specialists.get(family, self)
