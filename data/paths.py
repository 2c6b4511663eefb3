"""Output paths checked before the work that fills them: a build or a teacher run that can only fail at its
first write loses what it computed (minutes of building, a teacher's answers) and ends in a traceback. And files
written whole or not at all, so that a kill mid-write never leaves a cut file that a later reader takes as valid.

    problem = unwritable(Path(args.out), directory=True)   # None, or why nothing could be written there
    write_text_atomic(out / "summary.json", text)          # the old file, or the new one: never half of it
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


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) beside `path`, flush it to disk and rename it over `path`: a crash leaves the old
    file (or none), never a cut one. The temporary file is removed when the write fails."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        tmp.write_text(text, encoding="utf-8")
        fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def fsync_file(path: str | Path) -> None:
    """Flush a written file's data to disk, so that a rename over an older file never outlives the data."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["fsync_file", "unwritable", "write_text_atomic"]
