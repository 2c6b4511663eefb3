"""The ONNX cache's file system: a cache that cannot be written is a named domain error (never a raw OSError),
a read-only cache that holds a valid graph still serves, and cached files are readable by whoever shares the cache."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from controller.errors import BackendUnavailableError
from controller.onnx_runtime import ensure_graph, graph_path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("blocker", ["cache", "cache/onnx"])
def test_a_file_where_the_cache_directory_should_be_is_named(tiny_model, tokenizer, tmp_path, monkeypatch, blocker) -> None:  # type: ignore[no-untyped-def]
    cache = tmp_path / "cache"
    (tmp_path / blocker).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / blocker).write_text("not a directory")
    monkeypatch.setenv("JEVMEM_CACHE", str(cache))
    with pytest.raises(BackendUnavailableError, match="JEVMEM_CACHE") as info:
        ensure_graph(tiny_model, "hash-blocked", tokenizer)
    assert str(cache / "onnx") in str(info.value) and isinstance(info.value.__cause__, OSError)


def test_the_local_backend_names_an_unwritable_cache(tiny_artifact, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from controller.local import LocalBackend

    (tmp_path / "cache").write_text("a file")
    monkeypatch.setenv("JEVMEM_CACHE", str(tmp_path / "cache"))
    with pytest.raises(BackendUnavailableError, match="cannot write the ONNX graph cache"):
        LocalBackend.load(tiny_artifact, threads=1)


def _refuse_writes(monkeypatch, code: int) -> None:  # type: ignore[no-untyped-def]
    """New files in the cache fail as on a read-only mount (EROFS / EACCES) or a full disk (ENOSPC)."""
    real_open = os.open

    def refusing(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if flags & os.O_CREAT and str(path).endswith(".tmp"):
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_a_read_only_cache_is_named_and_one_that_holds_the_graph_still_serves(tiny_model, tokenizer, tmp_path, monkeypatch, code) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("JEVMEM_CACHE", str(tmp_path / "empty"))
    with monkeypatch.context() as mp:
        _refuse_writes(mp, code)
        with pytest.raises(BackendUnavailableError, match="cannot write the ONNX graph cache"):
            ensure_graph(tiny_model, "hash-ro", tokenizer)
    monkeypatch.setenv("JEVMEM_CACHE", str(tmp_path / "built"))
    built = ensure_graph(tiny_model, "hash-ro", tokenizer)
    _refuse_writes(monkeypatch, code)
    assert ensure_graph(tiny_model, "hash-ro", tokenizer) == built


def test_a_disk_full_during_the_export_is_named_and_leaves_nothing_behind(tiny_model, tokenizer, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import onnx

    def full(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setenv("JEVMEM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(onnx, "save", full)
    with pytest.raises(BackendUnavailableError, match="No space left"):
        ensure_graph(tiny_model, "hash-full", tokenizer)
    assert list((tmp_path / "cache" / "onnx").iterdir()) == []


def test_cached_files_get_the_umask_permissions_not_0600(tiny_model, tokenizer, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # A cache built by one account (say an image build) must be readable by the service account that runs it.
    monkeypatch.setenv("JEVMEM_CACHE", str(tmp_path / "cache"))
    info = ensure_graph(tiny_model, "hash-mode", tokenizer)
    want = 0o666 & ~_umask()
    for file in (Path(info.path), graph_path("hash-mode", "fused", "fp32").with_suffix(".json")):
        assert file.stat().st_mode & 0o777 == want, file


def test_the_embedder_names_an_unwritable_cache_too(tiny_base_dir, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from controller.embedding import MiniLMEmbedder

    (tmp_path / "cache").write_text("a file")
    monkeypatch.setenv("JEVMEM_CACHE", str(tmp_path / "cache"))
    with pytest.raises(BackendUnavailableError, match="cannot write the ONNX graph cache"):
        MiniLMEmbedder(tiny_base_dir, runtime="onnx", threads=1, device="cpu").embed(["build the graph"])
