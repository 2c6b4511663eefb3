"""The ONNX cache's file system: a cache that cannot be written gets the graph built in a private temporary
directory (a warning names the cache once), an error names the cache only when that cannot be written either
(never a raw OSError), a read-only cache that holds a valid graph still serves, and cached files are readable by
whoever shares the cache."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from controller import graph_cache
from controller.errors import BackendUnavailableError
from controller.once import FirstTime
from controller.onnx_runtime import ensure_graph, graph_path


@pytest.fixture(autouse=True)
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list:  # type: ignore[type-arg]
    """A fresh per-test private fallback under `tmp_path/tmp`; returns what it registered to run at exit."""
    import tempfile

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(graph_cache, "_PRIVATE", {})
    monkeypatch.setattr(graph_cache, "_WARNED", FirstTime())
    at_exit: list = []  # type: ignore[type-arg]
    register = lambda fn, *args, **kwargs: at_exit.append((fn, args, kwargs))  # noqa: E731
    monkeypatch.setattr(graph_cache, "atexit", SimpleNamespace(register=register))
    return at_exit


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("blocker", ["cache", "cache/onnx"])
def test_a_file_where_the_cache_directory_should_be_falls_back_to_a_private_directory(  # type: ignore[no-untyped-def]
    tiny_model, tokenizer, tmp_path, monkeypatch, caplog, private_tmp, blocker
) -> None:
    cache = tmp_path / "cache"
    (tmp_path / blocker).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / blocker).write_text("not a directory")
    monkeypatch.setenv("JEVMEM_CACHE", str(cache))
    with caplog.at_level(logging.WARNING, logger="controller.graph_cache"):
        first = ensure_graph(tiny_model, "hash-blocked", tokenizer)
        again = ensure_graph(tiny_model, "hash-blocked", tokenizer)
    private = graph_cache.private_cache()
    assert Path(first.path).is_relative_to(private) and private.is_relative_to(tmp_path / "tmp") and again == first
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(cache) in warnings[0] and str(private) in warnings[0]  # once, naming both
    assert (tmp_path / blocker).read_text() == "not a directory"
    (fn, args, kwargs), = private_tmp  # removed at exit
    fn(*args, **kwargs)
    assert not private.exists()


def test_the_local_backend_serves_from_the_private_directory(tiny_artifact, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from controller.backend import BackendRequest
    from controller.local import LocalBackend
    from controller.questions import normalize_questions

    request = BackendRequest("hello", tuple(normalize_questions({"n": {"type": "noul", "instructions": "Is it?"}}).values()))
    (tmp_path / "cache").write_text("a file")
    monkeypatch.setenv("JEVMEM_CACHE", str(tmp_path / "cache"))
    backend = LocalBackend.load(tiny_artifact, threads=1)
    try:
        assert Path(backend.graph.path).is_relative_to(graph_cache.private_cache())
        assert 0.0 < backend.answer([request])[0].probabilities[0][0] < 1.0
    finally:
        backend.close()


def test_no_writable_directory_at_all_is_named(tiny_model, tokenizer, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import tempfile

    cache = tmp_path / "cache"
    cache.write_text("a file")
    monkeypatch.setenv("JEVMEM_CACHE", str(cache))
    monkeypatch.setattr(tempfile, "tempdir", str(cache))  # no private directory can be made either
    with pytest.raises(BackendUnavailableError, match="cannot write the ONNX graph cache") as info:
        ensure_graph(tiny_model, "hash-nowhere", tokenizer)
    assert str(cache / "onnx") in str(info.value) and isinstance(info.value.__cause__, OSError)


def _refuse_writes(monkeypatch, code: int, under: Path | None = None) -> None:  # type: ignore[no-untyped-def]
    """New files (under `under`, or anywhere) fail as on a read-only mount (EROFS / EACCES) or a full disk (ENOSPC)."""
    real_open = os.open

    def refusing(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if flags & os.O_CREAT and str(path).endswith(".tmp") and (under is None or Path(path).is_relative_to(under)):
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_a_read_only_cache_falls_back_and_one_that_holds_the_graph_still_serves(tiny_model, tokenizer, tmp_path, monkeypatch, code) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("JEVMEM_CACHE", str(tmp_path / "empty"))
    with monkeypatch.context() as mp:
        _refuse_writes(mp, code, under=tmp_path / "empty")
        info = ensure_graph(tiny_model, "hash-ro", tokenizer)
        assert Path(info.path).is_relative_to(graph_cache.private_cache())
        _refuse_writes(mp, code)  # the private directory refuses too: now it is an error naming the cache
        with pytest.raises(BackendUnavailableError, match="cannot write the ONNX graph cache") as error:
            ensure_graph(tiny_model, "hash-ro-2", tokenizer)
        assert str(tmp_path / "empty" / "onnx") in str(error.value) and "either" in str(error.value)
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
        ensure_graph(tiny_model, "hash-full", tokenizer)  # in the cache, then in the private directory
    assert list((tmp_path / "cache" / "onnx").iterdir()) == list((graph_cache.private_cache() / "onnx").iterdir()) == []


def test_cached_files_get_the_umask_permissions_not_0600(tiny_model, tokenizer, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # A cache built by one account (say an image build) must be readable by the service account that runs it.
    monkeypatch.setenv("JEVMEM_CACHE", str(tmp_path / "cache"))
    info = ensure_graph(tiny_model, "hash-mode", tokenizer)
    want = 0o666 & ~_umask()
    for file in (Path(info.path), graph_path("hash-mode", "fused", "fp32").with_suffix(".json")):
        assert file.stat().st_mode & 0o777 == want, file


def test_a_cache_every_account_can_write_is_reported_once(tiny_model, tokenizer, tmp_path, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    # The sidecar checks catch a damaged or foreign graph, not one replaced together with its sidecar, so a cache
    # any account can write lets any of them change what is served: said once, and the graph is still served.
    monkeypatch.setenv("JEVMEM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(graph_cache, "_OPEN_WARNED", FirstTime())
    built = ensure_graph(tiny_model, "hash-open", tokenizer)
    onnx_dir = Path(built.path).parent
    onnx_dir.chmod(0o755)
    with caplog.at_level(logging.WARNING, logger="controller.graph_cache"):
        assert ensure_graph(tiny_model, "hash-open", tokenizer) == built
    assert not [r for r in caplog.records if "every account" in r.getMessage()]  # private: quiet
    onnx_dir.chmod(0o775)  # shared with a group on purpose: quiet too
    assert ensure_graph(tiny_model, "hash-open", tokenizer) == built
    assert not [r for r in caplog.records if "every account" in r.getMessage()]
    onnx_dir.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="controller.graph_cache"):
        assert ensure_graph(tiny_model, "hash-open", tokenizer) == built
        assert ensure_graph(tiny_model, "hash-open", tokenizer) == built
    said = [r for r in caplog.records if "every account" in r.getMessage()]
    assert len(said) == 1 and str(onnx_dir) in said[0].getMessage() and "chmod o-w" in said[0].getMessage()


def test_the_embedder_falls_back_to_the_private_directory_too(tiny_base_dir, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from controller.embedding import MiniLMEmbedder

    (tmp_path / "cache").write_text("a file")
    monkeypatch.setenv("JEVMEM_CACHE", str(tmp_path / "cache"))
    vectors = MiniLMEmbedder(tiny_base_dir, runtime="onnx", threads=1, device="cpu").embed(["build the graph"])
    assert vectors.shape[0] == 1 and list((graph_cache.private_cache() / "onnx").glob("embedder-*.onnx"))
