"""Errors of the training package.

    TrainingError            root of every training failure
    ├── LossInputError       a loss got tensors that break its contract (shape, range, normalisation)
    ├── CheckpointError      a checkpoint that cannot be resumed (missing, another config, other data)
    │   └── CheckpointUnreadableError  a file that does not read as a checkpoint (torn, truncated, foreign):
    │                                  resume skips it for the one before it
    ├── DeviceError          a device that is asked for and absent (also a ValueError)
    └── PipelineError        a pipeline stage that cannot run (missing data, missing model directory)

    FitInterrupted           Ctrl-C during a fit (a KeyboardInterrupt, not a failure): says which checkpoint
                             `--resume` continues from; the command line prints it and exits with 130
"""

from __future__ import annotations


class TrainingError(Exception):
    """Root of all training errors."""


class LossInputError(TrainingError, ValueError):
    """A loss was built or called against its contract."""


class CheckpointError(TrainingError):
    """A checkpoint cannot be resumed."""


class CheckpointUnreadableError(CheckpointError):
    """A checkpoint file that cannot be read as one; `resume_checkpoint` falls back to the one before it."""


class DeviceError(TrainingError, ValueError):
    """The configured device is not available (`--device cuda` where torch sees no GPU)."""


class PipelineError(TrainingError):
    """A pipeline stage cannot run."""


class FitInterrupted(KeyboardInterrupt):
    """A fit stopped by Ctrl-C; the message names the checkpoint a `--resume` continues from."""
