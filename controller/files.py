"""Atomic file writes for everything the controller package saves (model directories, calibration, indexes).

    write_bytes_atomic(path, data)      # temporary beside `path`, fsync, rename over it
    write_text_atomic(path, text)       # the same, UTF-8
    write_json_atomic(path, value)      # indented, sorted keys (or not), newline-terminated
    with atomic_file(path) as tmp: ...  # for writers that want a file name (exporters)
    atomic_directory(path)              # a directory built beside `path` and renamed into place whole

A write goes to `<name>.<random>.tmp` in the same directory (the same file system, so the rename is atomic),
is flushed to disk, and only then replaces `path`: a process killed mid-write leaves the old file (or none)
and possibly a `.tmp` that nothing reads, never a truncated file under the real name. A failed write removes
its temporary. Temporaries get the permissions of any new file (the umask's), unlike `tempfile.mkstemp`'s
0600: model directories are shared between the account that trains and the one that serves.

(`data.paths` builds on these for data builds and whole-directory swaps: the controller depends on nothing of ours.)
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TMP_SUFFIX = ".tmp"


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` atomically (see the module docstring)."""
    with atomic_file(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)


@contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """A new, empty temporary beside `path` for a writer that needs a file name (an exporter, a serializer);
    when the block succeeds it is flushed to disk and renamed over `path`, when it fails it is removed."""
    target = Path(path)
    tmp = new_temp(target)
    try:
        yield tmp
        fsync_file(tmp)
        os.replace(tmp, target)
    except BaseException:  # KeyboardInterrupt too: no temporary left behind by a handled interruption
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(target.parent)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | Path, value: Any, *, sort_keys: bool = True) -> None:
    """`value` as indented JSON plus a newline, written atomically."""
    write_text_atomic(path, json.dumps(value, indent=2, sort_keys=sort_keys) + "\n")


def fsync_file(path: str | Path) -> None:
    """Flush a written file's data to disk, so that a rename over an older file never outlives the data."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(path: str | Path) -> None:
    """Flush a directory entry (a rename into it) to disk, where the platform allows it (best effort)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a directory; the data itself is already flushed
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """A fresh directory beside `path` to fill; on success its files are flushed and it is renamed to `path`
    (which must not exist, or be empty). On failure it is removed and `path` is left as it was."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        tmp = target.with_name(f"{target.name}.{secrets.token_hex(6)}{TMP_SUFFIX}")
        try:
            os.mkdir(tmp, 0o777)  # the umask's permissions (`tempfile.mkdtemp` would give 0700)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name beside {target}")
    try:
        yield tmp
        for file in sorted(p for p in tmp.rglob("*") if p.is_file()):
            fsync_file(file)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_directory(target.parent)


def new_temp(target: Path, *, prefix: str | None = None) -> Path:
    """A new, empty temporary beside `target` (`<prefix>.<random>.tmp`, the prefix by default `target`'s name;
    the umask's permissions, not `tempfile.mkstemp`'s 0600)."""
    for _ in range(100):
        tmp = target.with_name(f"{target.name if prefix is None else prefix}.{secrets.token_hex(6)}{TMP_SUFFIX}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"no free temporary name beside {target}")


__all__ = ["atomic_directory", "atomic_file", "fsync_directory", "fsync_file", "new_temp", "write_bytes_atomic", "write_json_atomic", "write_text_atomic"]
