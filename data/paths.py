"""Output paths checked before the work that fills them: a build or a teacher run that can only fail at its
first write loses what it computed (minutes of building, a teacher's answers) and ends in a traceback.

    problem = unwritable(Path(args.out), directory=True)   # None, or why nothing could be written there
"""

from __future__ import annotations

import os
from pathlib import Path


def unwritable(path: Path, *, directory: bool) -> str | None:
    """Why `path` (a directory to create or fill, or a file to create or append to) cannot be written, or
    None; nothing is created. A missing path needs its nearest existing ancestor to be a writable directory."""
    if path.exists():
        if directory != path.is_dir():
            return f"{path} is {'a file' if directory else 'a directory'}, not {'a directory' if directory else 'a file'}"
        return None if os.access(path, os.W_OK) else f"{path} is not writable"
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is a file, so {path} cannot be created"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"{parent} is not writable, so {path} cannot be created"


__all__ = ["unwritable"]
