"""The ONNX graph cache under $JEVMEM_CACHE: a damaged, foreign or half-written entry is rebuilt, never served."""

from __future__ import annotations

import shutil

import pytest

from controller.onnx_runtime import create_session, ensure_graph, graph_path, verify_session


def _sidecar(model_hash: str):  # type: ignore[no-untyped-def]
    return graph_path(model_hash, "fused", "fp32").with_suffix(".json")


def test_a_truncated_cached_graph_is_rebuilt(tiny_model, tokenizer) -> None:  # type: ignore[no-untyped-def]
    info = ensure_graph(tiny_model, "hash-truncated", tokenizer)
    path = graph_path("hash-truncated", "fused", "fp32")
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])  # a disk-full write or a copy cut short
    again = ensure_graph(tiny_model, "hash-truncated", tokenizer)
    assert again.path == info.path and path.read_bytes() == whole
    assert verify_session(create_session(again.path, threads=1, device="cpu"), tiny_model, tokenizer) < 1e-4


@pytest.mark.parametrize("copy_sidecar", [False, True])
def test_another_models_graph_under_this_name_is_rebuilt(tiny_model, tiny_config, tokenizer, copy_sidecar) -> None:  # type: ignore[no-untyped-def]
    from controller.torch_model import PackedCrossEncoder

    name = f"hash-foreign-{copy_sidecar}"
    ensure_graph(tiny_model, name, tokenizer)
    other = ensure_graph(PackedCrossEncoder.from_config(tiny_config, seed=7), f"hash-other-{copy_sidecar}", tokenizer)
    path = graph_path(name, "fused", "fp32")
    shutil.copyfile(other.path, path)  # a stale or swapped file: it loads fine but is another model
    if copy_sidecar:
        shutil.copyfile(_sidecar(f"hash-other-{copy_sidecar}"), _sidecar(name))
    again = ensure_graph(tiny_model, name, tokenizer)
    assert verify_session(create_session(again.path, threads=1, device="cpu"), tiny_model, tokenizer) < 1e-4


@pytest.mark.parametrize("text", ["", '{"path": "x", "meth', "[]", '{"unexpected": 1}'])
def test_an_unreadable_sidecar_is_rebuilt(tiny_model, tokenizer, text) -> None:  # type: ignore[no-untyped-def]
    name = f"hash-sidecar-{len(text)}"
    first = ensure_graph(tiny_model, name, tokenizer)
    _sidecar(name).write_text(text, encoding="utf-8")  # e.g. read while another process was still writing it
    again = ensure_graph(tiny_model, name, tokenizer)
    assert again == first


def test_the_local_backend_recovers_from_a_damaged_cache(tiny_artifact) -> None:  # type: ignore[no-untyped-def]
    from controller.backend import BackendRequest
    from controller.families import family_questions
    from controller.local import LocalBackend
    from controller.questions import normalize_questions
    from tests.controller.conftest import pair_state

    request = BackendRequest(pair_state(), tuple(normalize_questions(family_questions("pair")).values()))
    first = LocalBackend.load(tiny_artifact, threads=1)
    expected, graph = first.answer([request]), first.graph.path
    first.close()
    with open(graph, "r+b") as fh:
        fh.truncate(1000)
    again = LocalBackend.load(tiny_artifact, threads=1)
    try:
        assert again.answer([request]) == expected
    finally:
        again.close()


def test_a_graph_onnxruntime_cannot_load_is_an_artifact_error(tiny_artifact) -> None:  # type: ignore[no-untyped-def]
    import hashlib
    import json
    from pathlib import Path

    from controller.errors import ArtifactError
    from controller.local import LocalBackend

    first = LocalBackend.load(tiny_artifact, threads=1)
    graph = Path(first.graph.path)
    first.close()
    garbage = b"not an onnx graph"
    graph.write_bytes(garbage)  # what an onnxruntime of another version may make of a graph it cannot read
    sidecar = graph.with_suffix(".json")
    record = json.loads(sidecar.read_text(encoding="utf-8"))
    sidecar.write_text(json.dumps({**record, "sha256": hashlib.sha256(garbage).hexdigest()}), encoding="utf-8")
    try:
        with pytest.raises(ArtifactError, match="delete it to rebuild"):
            LocalBackend.load(tiny_artifact, threads=1)
    finally:
        graph.unlink()  # the shared session cache must not keep it for later tests


def test_stale_temporaries_of_a_killed_build_are_removed(tiny_model, tokenizer) -> None:  # type: ignore[no-untyped-def]
    import os
    import time

    path = graph_path("hash-killed", "fused", "fp32")
    path.parent.mkdir(parents=True, exist_ok=True)
    stale = path.with_name(path.stem + ".k1ll3d.tmp")  # a ~90 MB export cut short by a kill
    live = path.with_name(path.stem + ".l1ve.tmp")  # another process's build in progress
    other = graph_path("hash-other-entry", "fused", "fp32").with_suffix(".0ther.tmp")
    for file in (stale, live, other):
        file.write_bytes(b"half an export")
    old = time.time() - 2 * 24 * 3600
    for file in (stale, other):
        os.utime(file, (old, old))
    ensure_graph(tiny_model, "hash-killed", tokenizer)
    assert not stale.exists() and live.exists() and other.exists()
    os.utime(live, (old, old))  # days later the entry is cached: the sweep still runs
    ensure_graph(tiny_model, "hash-killed", tokenizer)
    assert not live.exists() and other.exists()
