"""Fit checkpoints: the trainable weights and the AdamW state under `run_dir/checkpoints/step-NNNNNNN.pt`, written
atomically, pruned to the newest few, and refused on resume when the training configuration or data differ.

    path = save_checkpoint(run_dir, step, model, optimizer, config, stats, data_fingerprint(requests))
    path, step, stats = resume_checkpoint(run_dir, model, optimizer, config, data)   # or None: none loads

A file that does not read as a checkpoint (a disk fault, a truncating copy) is set aside as `<name>.unreadable`
and resume falls back to the one before it: pruning keeps `FitConfig.keep_checkpoints` (default 2) so that there
is one. A readable checkpoint of another configuration or other data stays an error: the older ones are too.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from data.paths import fsync_file
from training.errors import CheckpointError, CheckpointUnreadableError

if TYPE_CHECKING:
    from training.sampling import LabeledRequest
    from training.trainer import FitConfig

log = logging.getLogger(__name__)


def trainable_state(model: Any) -> dict[str, Any]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def _checkpoints(run_dir: Path) -> list[Path]:
    return sorted(checkpoint_dir(run_dir).glob("step-*.pt"))  # zero-padded steps: oldest first


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = _checkpoints(Path(run_dir))
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
    for old in _checkpoints(run_dir)[: -config.keep_checkpoints]:
        old.unlink()
    return path


def clear_checkpoints(run_dir: Path) -> None:
    """Remove an earlier run's checkpoints: they would outrank (and prune) the new run's, and `--resume` would load
    them. Files set aside as unreadable are left for a look: nothing counts them."""
    for old in [*checkpoint_dir(run_dir).glob("step-*.pt"), *checkpoint_dir(run_dir).glob("step-*.tmp")]:
        old.unlink()


def resume_checkpoint(run_dir: str | Path, model: Any, optimizer: Any, config: FitConfig, data: str) -> tuple[Path, int, dict[str, int]] | None:
    """Load the newest checkpoint under `run_dir` that reads as one into `model` and `optimizer`: (its path,
    step, stats), or None when none does (the model and optimizer then as they were). Each file skipped on the
    way is renamed to `<name>.unreadable` (out of what pruning and `latest_checkpoint` count), with a warning."""
    for path in reversed(_checkpoints(Path(run_dir))):
        try:
            step, stats = load_checkpoint(path, model, optimizer, config, data)
        except CheckpointUnreadableError as error:
            aside = path.with_name(f"{path.name}.unreadable")
            try:
                os.replace(path, aside)
            except OSError:
                aside = path
            log.warning("--resume: skipping checkpoint %s (kept as %s): %s; trying the one before it", path, aside.name, error)
            continue
        return path, step, stats
    return None


def load_checkpoint(path: Path, model: Any, optimizer: Any, config: FitConfig, data: str) -> tuple[int, dict[str, int]]:
    """Load the checkpoint at `path` into `model` and `optimizer`; returns (step, stats). Raises
    `CheckpointUnreadableError` for a file that is not a whole checkpoint (the model and optimizer then as they
    were) and `CheckpointError` for one of another configuration, other data or another model."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises several types for a torn or foreign file
        raise CheckpointUnreadableError(f"cannot read checkpoint {path}: {error}") from error
    if not isinstance(state, dict) or not isinstance(state.get("trainable"), dict) or not isinstance(state.get("optimizer"), dict) \
            or not isinstance(state.get("step"), int):
        raise CheckpointUnreadableError(f"{path} is not a fit checkpoint (no trainable weights, optimizer state or step); start a new run directory")
    if state.get("fingerprint") != config.fingerprint():
        recorded = recorded_fit_config(path.parent.parent)
        changes = config.changes_from(recorded) if recorded is not None and recorded.fingerprint() == state.get("fingerprint") else ""
        raise CheckpointError(f"{path} was written with another training configuration"
                              + (f": {changes}; rerun with the checkpoints' settings, or" if changes else ";") + " start a new run directory")
    if state.get("data", data) != data:  # checkpoints from before the data fingerprint carry none
        raise CheckpointError(f"{path} was fitted on other training data (rebuilt since?); start a new run directory")
    params = dict(model.named_parameters())
    missing = sorted(set(state["trainable"]) ^ {n for n, p in params.items() if p.requires_grad})
    if missing:
        raise CheckpointError(f"{path} does not match the model's trainable parameters: {missing[:4]}")
    bad = [n for n, v in state["trainable"].items() if not isinstance(v, torch.Tensor) or v.shape != params[n].shape]
    if bad:
        raise CheckpointUnreadableError(f"{path} holds weights of the wrong shape: {bad[:4]}")
    _apply(path, state, params, optimizer)
    return int(state["step"]), dict(state.get("stats", {}))


def recorded_fit_config(run_dir: Path) -> FitConfig | None:
    """The configuration a fit under `run_dir` recorded when it started (`fit_config.json`), which its checkpoints
    were written with; None when there is none that reads as one."""
    import json

    from training.trainer import FitConfig

    try:
        return FitConfig.from_json(json.loads((run_dir / "fit_config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, AttributeError):  # missing, torn, not an object, or a value FitConfig refuses
        return None


def _apply(path: Path, state: dict[str, Any], params: dict[str, Any], optimizer: Any) -> None:
    """Copy the weights and the optimizer state in, or (when the optimizer state does not fit) neither."""
    import torch

    before = {n: params[n].detach().clone() for n in state["trainable"]}
    optimizer_before = copy.deepcopy(optimizer.state_dict())
    try:
        with torch.no_grad():
            for name, value in state["trainable"].items():
                params[name].copy_(value)
        optimizer.load_state_dict(state["optimizer"])
        for group in optimizer.param_groups:  # load_state_dict checks the groups' sizes, not the moments' shapes
            for param in group["params"]:
                moments = optimizer.state.get(param, {})
                if any(isinstance(v, torch.Tensor) and v.dim() and v.shape != param.shape for v in moments.values()):
                    raise ValueError(f"optimizer state of the wrong shape for a {tuple(param.shape)} parameter")
    except Exception as error:
        with torch.no_grad():
            for name, value in before.items():
                params[name].copy_(value)
        optimizer.load_state_dict(optimizer_before)
        raise CheckpointUnreadableError(f"{path} has an optimizer state that does not fit the model: {error}") from error


__all__ = ["checkpoint_dir", "clear_checkpoints", "data_fingerprint", "latest_checkpoint", "load_checkpoint", "recorded_fit_config",
           "resume_checkpoint", "save_checkpoint", "trainable_state"]
