"""Directories replaced whole: a stage writes into a copy of a model (or embedder) directory and swaps the copy in,
so a stage that dies mid-write (a kill, a full disk, Ctrl-C, a bug) leaves the directory as it was.

    with staged(cfg.model) as stage:          # a copy of cfg.model (empty when there is none yet)
        save_artifact(model, stage, ...)      # ... every write of the stage goes to the copy
    # here cfg.model is what `stage` held; after an exception it is untouched and the copy is gone

Why whole directories: `save_artifact` writes the adapter, heads, config and calibration one file after another,
and `states.json`, `specialists.json` and the specialists beside them are not covered by the artifact hash, so a
crash between two files left a directory that either no longer loaded (the old model lost) or loaded new weights
with the old model's state conventions. The swap is two renames: the old directory moves aside, the copy moves in.
A crash between them leaves no directory at the target (a clear "no model directory" to any reader, never a mix);
`recover`, which every `staged` call runs first, moves the old one back.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from data.paths import fsync_file

log = logging.getLogger(__name__)


def _staging(target: Path) -> Path:
    return target.parent / f".{target.name}.staging-{os.getpid()}"


def _leftovers(target: Path, kind: str) -> list[Path]:
    return sorted(target.parent.glob(f".{target.name}.{kind}-*")) if target.parent.is_dir() else []


def recover(directory: str | Path) -> None:
    """Undo what an interrupted stage left beside `directory`: a swap cut between its two renames gets the old
    directory back; unfinished copies and old directories of finished swaps are removed."""
    target = Path(directory)
    olds = _leftovers(target, "old")
    if olds and not target.exists():
        log.warning("%s: an earlier stage was interrupted while swapping it in; the directory before it is restored", target)
        os.rename(olds.pop(), target)
    for leftover in [*olds, *_leftovers(target, "staging")]:
        shutil.rmtree(leftover, ignore_errors=True)


@contextmanager
def staged(directory: str | Path, *, copy: bool = True) -> Iterator[Path]:
    """A copy of `directory` (its current files when `copy`, else empty) that replaces it when the block ends
    without an exception; with one, the copy is removed and `directory` stays as it was."""
    target = Path(directory)
    if target.is_symlink():  # replace the directory it names, not the link
        target = target.resolve()
    recover(target)
    stage = _staging(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if copy and target.is_dir():
        shutil.copytree(target, stage, symlinks=True)
    else:
        stage.mkdir()
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    for path in sorted(stage.rglob("*")):  # the copy's bytes on disk before its name replaces the old directory's
        if path.is_file() and not path.is_symlink():
            fsync_file(path)
    _swap(stage, target)


def _swap(stage: Path, target: Path) -> None:
    old = target.parent / f".{target.name}.old-{os.getpid()}"
    if target.exists():
        os.rename(target, old)
    try:
        os.rename(stage, target)
    except OSError:  # not a crash: put the old directory back before reporting
        if old.exists() and not target.exists():
            os.rename(old, target)
        shutil.rmtree(stage, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)


__all__ = ["recover", "staged"]
