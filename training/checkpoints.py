"""Fit checkpoints: the trainable weights and the AdamW state under `run_dir/checkpoints/step-NNNNNNN.pt`, written
atomically, pruned to the newest few, and refused on resume when the training configuration or data differ.

    path = save_checkpoint(run_dir, step, model, optimizer, config, stats, data_fingerprint(requests))
    step, stats = load_checkpoint(latest_checkpoint(run_dir), model, optimizer, config, data)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from data.paths import fsync_file
from training.errors import CheckpointError

if TYPE_CHECKING:
    from training.sampling import LabeledRequest
    from training.trainer import FitConfig


def trainable_state(model: Any) -> dict[str, Any]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = sorted(checkpoint_dir(Path(run_dir)).glob("step-*.pt"))
    return found[-1] if found else None


def data_fingerprint(requests: Sequence[LabeledRequest]) -> str:
    """What a checkpoint must agree on about the training data: every request's tokens and labels, in order."""
    digest = hashlib.sha256()
    for request in requests:
        digest.update(repr((request.tokenized, request.labels, request.list_key)).encode())
    return digest.hexdigest()[:16]


def save_checkpoint(run_dir: Path, step: int, model: Any, optimizer: Any, config: FitConfig, stats: dict[str, int], data: str) -> Path:
    import torch

    folder = checkpoint_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step-{step:07d}.pt"
    tmp = path.with_suffix(".tmp")
    try:
        torch.save({"step": step, "fingerprint": config.fingerprint(), "data": data, "trainable": trainable_state(model),
                    "optimizer": optimizer.state_dict(), "stats": stats}, tmp)
        fsync_file(tmp)  # on disk before it outranks the previous checkpoint
    except BaseException:  # Ctrl-C or a full disk mid-save: the previous checkpoint stays the latest
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
    for old in sorted(folder.glob("step-*.pt"))[: -config.keep_checkpoints]:
        old.unlink()
    return path


def clear_checkpoints(run_dir: Path) -> None:
    """Remove an earlier run's checkpoints: they would outrank (and prune) the new run's, and `--resume` would load them."""
    for old in [*checkpoint_dir(run_dir).glob("step-*.pt"), *checkpoint_dir(run_dir).glob("step-*.tmp")]:
        old.unlink()


def load_checkpoint(path: Path, model: Any, optimizer: Any, config: FitConfig, data: str) -> tuple[int, dict[str, int]]:
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises several types for a torn or foreign file
        raise CheckpointError(f"cannot read checkpoint {path}: {error}") from error
    if not isinstance(state, dict) or not isinstance(state.get("trainable"), dict):
        raise CheckpointError(f"{path} is not a fit checkpoint (no trainable weights); start a new run directory")
    if state.get("fingerprint") != config.fingerprint():
        raise CheckpointError(f"{path} was written with another training configuration; start a new run directory")
    if state.get("data", data) != data:  # checkpoints from before the data fingerprint carry none
        raise CheckpointError(f"{path} was fitted on other training data (rebuilt since?); start a new run directory")
    params = dict(model.named_parameters())
    missing = sorted(set(state["trainable"]) ^ {n for n, p in params.items() if p.requires_grad})
    if missing:
        raise CheckpointError(f"{path} does not match the model's trainable parameters: {missing[:4]}")
    with torch.no_grad():
        for name, value in state["trainable"].items():
            params[name].copy_(value)
    optimizer.load_state_dict(state["optimizer"])
    return int(state["step"]), dict(state.get("stats", {}))


__all__ = ["checkpoint_dir", "clear_checkpoints", "data_fingerprint", "latest_checkpoint", "load_checkpoint", "save_checkpoint",
           "trainable_state"]
