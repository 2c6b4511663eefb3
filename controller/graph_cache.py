"""The graph cache's file system, shared by the controller's graphs (`controller.onnx_runtime`) and the
embedder's (`controller.embedding_onnx`).

Cache: `$JEVMEM_CACHE` (default `~/.cache/jevmem`) / `onnx/`. Each graph has a `.json` sidecar with its parity
result, the full model hash and the graph file's sha256 (`write_cached_record`, `read_cached_record`); a graph
is only cached after it passed parity. Writes go to a temporary file beside the entry (`temp_beside`), flushed
and renamed into place, so concurrent builders never leave a half-written file; temporaries older than
`STALE_TMP_AGE_S` (left by a process killed mid-build) are removed whenever the entry is looked up.

A cache that cannot be written (`CacheWriteError`: a read-only directory, a file in the way, a full disk) and
lacks the graph gets it built into this process's private temporary directory instead (`with_fallback_cache`;
removed at exit, a warning naming the cache logged once); only when that cannot be written either is it
`BackendUnavailableError` naming the cache.
"""

from __future__ import annotations

import atexit
import glob
import json
import logging
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from controller.artifacts import file_sha256
from controller.errors import ArtifactError, BackendUnavailableError
from controller.files import fsync_file, new_temp
from controller.once import FirstTime

log = logging.getLogger(__name__)

T = TypeVar("T")

# No live build leaves its temporary untouched this long (an export or a quantisation writes it, the parity
# checks that follow take minutes at most), so an older one was left by a killed process.
STALE_TMP_AGE_S = 3600.0


def cache_root() -> Path:
    return Path(os.environ.get("JEVMEM_CACHE") or Path.home() / ".cache" / "jevmem")


def read_cached_record(path: Path, model_hash: str, required: Sequence[str] = ()) -> dict[str, Any] | None:
    """The sidecar record of the cached graph `path`, or None when it is missing or cannot be trusted.

    Not trusted (logged as a warning; the caller rebuilds): a graph without a sidecar, a sidecar that is
    unreadable or lacks `required` keys, one written for another model, a graph whose sha256 changed.
    """
    sidecar = path.with_suffix(".json")
    if not path.exists():
        return None
    warn_if_world_writable(path.parent)
    if not sidecar.exists():
        log.warning("rebuilding the cached graph %s: it has no sidecar (an interrupted build or an older version)", path)
        return None
    try:
        record = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        log.warning("rebuilding the cached graph %s: its sidecar is unreadable (%s)", path, error)
        return None
    if not isinstance(record, dict) or not all(key in record for key in ("model_hash", "sha256", *required)):
        log.warning("rebuilding the cached graph %s: its sidecar lacks the model hash, the graph's sha256 or %s", path, ", ".join(required) or "-")
        return None
    if record["model_hash"] != model_hash:
        log.warning("rebuilding the cached graph %s: it was built for model %s", path, str(record["model_hash"])[:12])
        return None
    try:
        actual = file_sha256(path)
    except ArtifactError as error:  # a directory in its place, a file this account cannot read
        log.warning("rebuilding the cached graph %s: it cannot be read (%s)", path, error.__cause__ or error)
        return None
    if record["sha256"] != actual:
        log.warning("rebuilding the cached graph %s: the file changed since it passed parity", path)
        return None
    return record


_OPEN_WARNED = FirstTime()  # cache directories already reported as writable by every account


def warn_if_world_writable(directory: Path) -> bool:
    """Log once per directory (and return True) when every account may write `directory`: the sidecar checks catch
    a damaged, stale or foreign graph, not one replaced together with its sidecar, so such a cache lets any local
    account change what the controller serves. A group-writable cache (shared on purpose) is not reported."""
    try:
        mode = directory.stat().st_mode
    except OSError:
        return False
    if not mode & stat.S_IWOTH:
        return False
    if _OPEN_WARNED(str(directory)):
        log.warning("the ONNX graph cache %s is writable by every account, so any of them can replace the graphs served "
                    "from it; make it private (chmod o-w) or point JEVMEM_CACHE elsewhere", directory)
    return True


def write_cached_record(path: Path, record: Mapping[str, Any]) -> None:
    """Write the sidecar of the graph `path` (just renamed into place): `record` plus the graph's sha256, atomically."""
    sidecar = path.with_suffix(".json")
    tmp = temp_beside(sidecar)
    try:
        tmp.write_text(json.dumps({**record, "sha256": file_sha256(path)}) + "\n", encoding="utf-8")
        fsync_file(tmp)
        os.replace(tmp, sidecar)
    except OSError as error:
        raise cache_write_error(sidecar, error) from error
    finally:
        tmp.unlink(missing_ok=True)


def remove_stale_temps(path: Path, max_age_s: float = STALE_TMP_AGE_S) -> None:
    """Delete temporaries of this cache entry (`temp_beside` names) not modified for `max_age_s` seconds."""
    if not path.parent.is_dir():
        return
    cutoff = time.time() - max_age_s
    for tmp in path.parent.glob(f"{glob.escape(path.stem)}.*.tmp"):
        try:
            if tmp.stat().st_mtime < cutoff:
                tmp.unlink()
                log.info("removed %s, left by an interrupted build", tmp)
        except OSError:  # another process removed it first, or it is not ours to delete
            continue


class CacheWriteError(BackendUnavailableError):
    """A graph cache directory cannot be written (`with_fallback_cache` then tries a private one)."""


def cache_write_error(path: Path, error: OSError) -> CacheWriteError:
    """The error for a cache entry that cannot be written (`path`'s directory is named)."""
    return CacheWriteError(
        f"cannot write the ONNX graph cache in {path.parent}: {error}. Point JEVMEM_CACHE at a writable directory "
        "(graphs are built there once and reused)"
    )


_PRIVATE: dict[str, Path] = {}  # "cache" -> this process's private fallback cache, once made
_WARNED = FirstTime()  # caches whose fallback was already logged
_PRIVATE_LOCK = threading.Lock()


def with_fallback_cache(cache: Path, build: Callable[[Path], T]) -> T:
    """`build(cache)`; when that cache cannot be written (`CacheWriteError`), `build` on this process's private
    temporary cache (`private_cache`), with a warning naming `cache` logged once. Raises `BackendUnavailableError`
    naming `cache` when the private one cannot be made or written either."""
    try:
        return build(cache)
    except CacheWriteError as error:
        try:
            private = private_cache()
        except OSError as tmp_error:
            raise BackendUnavailableError(f"{error}; no private temporary directory to build in instead: {tmp_error}") from tmp_error
        if private == cache:
            raise
        if _WARNED(str(cache)):
            log.warning("the ONNX graph cache %s cannot be written (%s); building graphs in the private temporary directory %s "
                        "for this process instead (removed at exit)", cache, error.__cause__ or error, private)
        try:
            return build(private)
        except CacheWriteError as again:
            raise BackendUnavailableError(f"{error}; the private temporary directory {private} cannot be written either: "
                                          f"{again.__cause__ or again}") from again


def private_cache() -> Path:
    """This process's private graph cache (`tempfile.mkdtemp`, made on first use, removed at exit)."""
    with _PRIVATE_LOCK:
        if "cache" not in _PRIVATE:
            path = Path(tempfile.mkdtemp(prefix="jevmem-cache-"))
            atexit.register(shutil.rmtree, path, ignore_errors=True)
            _PRIVATE["cache"] = path
        return _PRIVATE["cache"]


def temp_beside(path: Path) -> Path:
    """A new empty temporary beside `path` (`<stem>.<random>.tmp`), its directory created if needed.

    Not `tempfile.mkstemp`: that makes the file 0600 whatever the umask, and the temporary becomes the cached
    file, which another account sharing the cache then cannot read (and, in a directory it cannot write, cannot
    rebuild either)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return new_temp(path, prefix=path.stem)
    except OSError as error:
        raise cache_write_error(path, error) from error


__all__ = ["STALE_TMP_AGE_S", "CacheWriteError", "cache_root", "cache_write_error", "private_cache", "read_cached_record",
           "remove_stale_temps", "temp_beside", "warn_if_world_writable", "with_fallback_cache", "write_cached_record"]
