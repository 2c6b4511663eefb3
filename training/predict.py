"""Raw logits of a trained model on labelled requests, through the same template and packing as serving.

    preds = predict(model, requests)                       # one Prediction per label, packed encoding
    preds = predict(model, requests, encoding="npair")     # the same weights as a plain cross-encoder
    probs = probabilities(preds, calibration)              # temperatures applied (None: T = 1)
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from controller.calibration import Calibration
from controller.packing import Encoding, make_batches
from training.sampling import Label, LabeledRequest


@dataclass(frozen=True)
class Prediction:
    """One labelled question with the model's raw logits (1 for a Noul, one per option otherwise)."""

    label: Label
    logits: np.ndarray
    split: str
    group: str
    list_key: str = ""  # the ranking list of its request (`LabeledRequest.list_key`): a relevance query's candidates

    @property
    def cluster(self) -> str:
        """The unit held-out figures are resampled by (`training.intervals`): the ranking list, else the state."""
        return self.list_key or f"{self.group}\x1f{self.label.example_id.rpartition(':')[0] or self.label.example_id}"

    @property
    def kind(self) -> str:
        return self.label.kind

    @property
    def family(self) -> str:
        return self.label.family


@dataclass(frozen=True)
class PredictRun:
    predictions: list[Prediction]
    seconds: float
    requests: int
    tokens: int  # real tokens the model read (padding excluded)


def predict(
    model: Any,
    requests: Sequence[LabeledRequest],
    *,
    encoding: Encoding = "packed",
    chunk: int = 64,
    max_batch_tokens: int = 8192,
    progress: bool = False,
    desc: str = "predict",
) -> PredictRun:
    """Run `model` (a `PackedCrossEncoder`) in inference mode over `requests`, `chunk` requests at a time."""
    import torch

    from controller.torch_model import to_tensors

    model.eval()
    device = next(model.parameters()).device  # the model's own: CPU, or the GPU the pipeline moved it to
    out: list[Prediction] = []
    tokens = 0
    began = time.perf_counter()
    starts = range(0, len(requests), chunk)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc=desc, unit="chunk", dynamic_ncols=True)
    for start in starts:
        part = requests[start : start + chunk]
        batches, readout = make_batches([r.tokenized for r in part], encoding=encoding, max_batch_tokens=max_batch_tokens)
        with torch.inference_mode():
            logits = [model(**to_tensors(b.arrays(), device)).float().cpu().numpy() for b in batches]
        tokens += sum(int((b.question_ids >= 0).sum()) for b in batches)
        for request, values in zip(part, readout.gather(logits)):
            out.extend(Prediction(label, z, request.split, request.group, request.list_key) for label, z in zip(request.labels, values))
    return PredictRun(out, time.perf_counter() - began, len(requests), tokens)


def probabilities(predictions: Sequence[Prediction], calibration: Calibration | None = None) -> list[np.ndarray]:
    """Per prediction: (p_true,) for a Noul, a distribution otherwise (temperature from `calibration`, as it
    applies to the prediction's family)."""
    cal = calibration or Calibration()
    return [np.asarray(cal.for_family(p.family).probabilities(p.kind, p.logits, p.label.catalogue), dtype=np.float64) for p in predictions]


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))
