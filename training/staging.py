"""Directories replaced whole: a stage writes into a copy of a model (or embedder) directory and swaps the copy in,
so a stage that dies mid-write (a kill, a full disk, Ctrl-C, a bug) leaves the directory as it was.

    with staged(cfg.model) as stage:          # a copy of cfg.model (empty when there is none yet)
        save_artifact(model, stage, ...)      # ... every write of the stage goes to the copy
    # here cfg.model is what `stage` held; after an exception it is untouched and the copy is gone

Why whole directories: `save_artifact` writes the adapter, heads, config and calibration one file after another,
and `states.json`, `specialists.json` and the specialists beside them are not covered by the artifact hash, so a
crash between two files left a directory that either no longer loaded (the old model lost) or loaded new weights
with the old model's state conventions.

The helpers live in `data.paths` (the data build swaps its output directory the same way, and `data` imports
nothing of `training`): the swap is one atomic exchange where the system has one, else two renames that
`recover`, run first by every `staged` call, completes or undoes.
"""

from __future__ import annotations

from data.paths import recover, staged

__all__ = ["recover", "staged"]
