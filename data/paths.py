"""Output paths checked before the work that fills them: a build or a teacher run that can only fail at its
first write loses what it computed (minutes of building, a teacher's answers) and ends in a traceback. And files
and directories written whole or not at all, so that a kill mid-write never leaves a cut file, or a directory of
old and new files, that a later reader takes as valid.

    problem = unwritable(Path(args.out), directory=True)   # None, or why nothing could be written there
    write_text_atomic(out / "summary.json", text)          # the old file, or the new one: never half of it
    with replacing(out / "loss.png") as tmp:               # any writer (savefig, torch.save) into a path beside it
        fig.savefig(tmp)
    with staged(out) as stage:                             # a copy of the directory, swapped in whole at the end
        ...

Directories are swapped in one step where the system can (Linux `renameat2(RENAME_EXCHANGE)`): the target holds
the old directory or the new one at every instant. Elsewhere the swap is two renames (old aside, copy in); a kill
between them leaves no directory at the target (never a mix), and `recover`, which every `staged` call runs
first, moves the old one back. `training.staging` uses this for model directories, `data.schema.write_splits`
for the decision data.

One `staged` block at a time per directory, across processes: each holds an exclusive POSIX `flock` on a lock
file named by the directory's real path (in `<tmp>/jevmem-locks-<uid>`, so no file is left in or beside the
trees it guards) from before its copy is made until the swap. Two commands writing one model directory take
turns (the second copies what the first swapped in, instead of swapping its own older copy over it), and
`recover` never removes the copy of a block that is still running.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

from controller.files import fsync_file
from data.errors import BusyError, StagingError

log = logging.getLogger(__name__)


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


def not_a_directory(path: Path) -> str | None:
    """Why `path`, an input directory, cannot be read as one ("does not exist" / "is not a directory"), or None."""
    if path.is_dir():
        return None
    return "is not a directory" if path.exists() else "does not exist"


def unreplaceable(directory: Path) -> str | None:
    """Why `directory` cannot be replaced whole by `staged` (its copy is made, and swapped in, beside it), or None."""
    target = Path(os.path.realpath(directory))  # a link: the directory it names; `.` and `..`: the one they mean
    if target.is_dir() and os.path.ismount(target):
        return f"{target} is a mount point, which cannot be replaced whole; write into a directory inside it"
    return _holds_cwd(target) or unwritable(target, directory=True) or unwritable(target.parent, directory=True)


def _holds_cwd(target: Path) -> str | None:
    cwd = Path(os.path.realpath(os.getcwd()))
    if cwd == target or target in cwd.parents:  # replaced, it would leave this process (and a shell) in a deleted directory
        return f"{target} is or holds the working directory, which cannot be replaced whole; give a directory beside it"
    return None


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path`, with its suffix (writers that go by it, like `savefig`, pick the same
    format), that is flushed to disk and renamed over `path` when the block ends; after an exception it is
    removed and `path` is as it was."""
    path = Path(path)
    # its name and pid in it (a leftover says whose), and a token: two threads writing one path never share it
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial{path.suffix}")
    try:
        yield tmp
        fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) beside `path`, flush it to disk and rename it over `path`: a crash leaves the old
    file (or none), never a cut one. The temporary file is removed when the write fails."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _staging(target: Path) -> Path:
    return target.parent / f".{target.name}.staging-{os.getpid()}"


def _leftovers(target: Path, kind: str) -> list[Path]:
    return sorted(target.parent.glob(f".{target.name}.{kind}-*")) if target.parent.is_dir() else []


def recover(directory: str | Path) -> None:
    """Undo what an interrupted `staged` block left beside `directory`: a swap cut between its two renames gets
    the old directory back; unfinished copies and old directories of finished swaps are removed. Waits for a
    `staged` block of another process on the same directory to end first."""
    target = Path(os.path.realpath(directory))
    with exclusive(target):
        _recover(target)


def _recover(target: Path) -> None:  # under the directory's lock: every leftover is of a block that has ended
    olds = _leftovers(target, "old")
    if olds and not target.exists():
        log.warning("%s: an earlier write was interrupted while swapping it in; the directory before it is restored", target)
        os.rename(olds.pop(), target)
    for leftover in [*olds, *_leftovers(target, "staging")]:
        shutil.rmtree(leftover, ignore_errors=True)


_held: set[tuple[str, int]] = set()  # (path, thread) holding its lock: a nested block there would deadlock
_held_guard = threading.Lock()


def _lock_file(real_path: str) -> Path:
    folder = Path(tempfile.gettempdir()) / f"jevmem-locks-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder / f"{hashlib.sha256(os.fsencode(real_path)).hexdigest()[:24]}.lock"


@contextmanager
def exclusive(path: str | Path, *, wait: bool = True) -> Iterator[None]:
    """An exclusive lock on `path` (a file or directory, by its real path) across processes and threads, held
    with `flock`, which the system releases when the process dies, so a killed writer never leaves it taken.
    `wait`: block until the holder ends (logged once), else raise `BusyError` at once. A nested hold by the same
    thread is a `BusyError` too (it would wait for itself). Where there is no `fcntl` (Windows) or no lock file
    can be made (an unwritable temporary directory), writers are not serialised (logged)."""
    target = Path(path)
    key = os.path.realpath(target)
    mine = (key, threading.get_ident())  # another thread of this process waits at the flock like another process
    with _held_guard:
        if mine in _held:
            raise BusyError(f"{target} is already held by this thread: a nested writer of it would wait for itself")
        _held.add(mine)
    try:
        try:
            import fcntl

            handle = open(_lock_file(key), "a+b")  # noqa: SIM115 - closed below
        except (ImportError, OSError) as error:
            log.warning("%s: writers are not serialised here (%s)", target, error)
            yield
            return
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as busy:
                if not wait:
                    raise BusyError(f"another process is writing {target}; wait for it to end, or write elsewhere") from busy
                log.warning("%s: another process is writing it; waiting for it to finish", target)
                fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        with _held_guard:
            _held.discard(mine)


@contextmanager
def staged(directory: str | Path, *, copy: bool = True, exclude: Collection[str] = ()) -> Iterator[Path]:
    """A copy of `directory` (its current files when `copy`, but for the top-level names in `exclude`; else
    empty) that replaces it when the block ends without an exception; with one, the copy is removed and
    `directory` stays as it was. Raises `StagingError` (an `OSError`) when the swap itself fails, with
    `directory` as it was and the copy removed."""
    target = Path(os.path.realpath(directory))  # a link: the directory it names; `x/..`: never a copy inside itself
    problem = _holds_cwd(target)
    if problem:
        raise StagingError(problem)
    with exclusive(target):
        _recover(target)
        stage = _staging(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        if copy and target.is_dir():
            skip = set(exclude)
            shutil.copytree(target, stage, symlinks=True,
                            ignore=lambda folder, names: [n for n in names if n in skip] if Path(folder) == target else [])
        else:
            stage.mkdir()
        try:
            yield stage
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
        try:
            for path in sorted(stage.rglob("*")):  # the copy's bytes on disk before its name replaces the old directory's
                if path.is_file() and not path.is_symlink():
                    fsync_file(path)
            _swap(stage, target)
        except OSError as error:  # a mount point, a full disk at fsync, a file system that refuses the rename
            shutil.rmtree(stage, ignore_errors=True)
            raise StagingError(f"{target} could not be replaced with its new contents ({error}); it is as it was") from error


def _swap(stage: Path, target: Path) -> None:
    if target.exists() and _exchange(stage, target):  # one step: `stage` now names the old directory
        shutil.rmtree(stage, ignore_errors=True)
        return
    old = target.parent / f".{target.name}.old-{os.getpid()}"
    if target.exists():
        os.rename(target, old)
    try:
        os.rename(stage, target)
    except OSError:  # not a crash: put the old directory back before reporting
        if old.exists() and not target.exists():
            os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap the names of `a` and `b` atomically (Linux `renameat2` with RENAME_EXCHANGE); False, with nothing
    changed, where the system or the file system has no such call."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    import errno

    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)  # glibc >= 2.28
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(a), None, str(b))


__all__ = ["BusyError", "StagingError", "exclusive", "fsync_file", "not_a_directory", "recover", "replacing", "staged", "unreplaceable", "unwritable", "write_text_atomic"]
