from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from controller.errors import ParityError
from controller.onnx_export import check_parity, export_onnx
from controller.onnx_runtime import create_session, ensure_graph, graph_path, parity_batches, parity_requests
from controller.packing import answer_logits, invariance_max_diff, make_batches


@pytest.mark.parametrize("method", ["fused", "torch"])
def test_export_matches_torch_on_dynamic_shapes(tiny_model, tokenizer, tmp_path, method) -> None:  # type: ignore[no-untyped-def]
    inputs = parity_batches(tokenizer)
    assert len({b.shape for b in inputs}) > 1  # different batch sizes and lengths through one graph
    report = export_onnx(tiny_model, tmp_path / "m.onnx", inputs, method=method)
    assert report.max_abs_diff < 1e-4
    session = create_session(report.path, threads=1, device="cpu")
    run = lambda b: session.run(["logits"], b.arrays())[0]  # noqa: E731
    assert invariance_max_diff(run, parity_requests(tokenizer)) < 1e-5


def test_parity_failure_raises(tiny_model, tokenizer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    inputs = parity_batches(tokenizer)
    report = export_onnx(tiny_model, tmp_path / "m.onnx", inputs)
    with torch.no_grad():
        tiny_model.heads.bias.add_(0.01)  # the graph no longer matches these weights
    with pytest.raises(ParityError) as info:
        check_parity(report.path, tiny_model, inputs, atol=1e-4)
    assert info.value.max_abs_diff == pytest.approx(0.01, rel=1e-3)


def test_an_export_that_fails_parity_leaves_no_graph_and_keeps_an_old_one(tiny_model, tokenizer, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import controller.onnx_export

    target = tmp_path / "m.onnx"
    target.write_bytes(b"the old graph")

    def fails(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise ParityError("differs", max_abs_diff=1.0, atol=1e-4)

    monkeypatch.setattr(controller.onnx_export, "check_parity", fails)
    with pytest.raises(ParityError):
        export_onnx(tiny_model, target, parity_batches(tokenizer))
    assert target.read_bytes() == b"the old graph" and [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def test_graph_is_cached_by_hash_outside_the_repo(tiny_model, tokenizer, jevmem_cache) -> None:  # type: ignore[no-untyped-def]
    first = ensure_graph(tiny_model, "hash-cache-test", tokenizer)
    assert first.path == str(graph_path("hash-cache-test", "fused", "fp32"))
    assert first.path.startswith(str(jevmem_cache))
    stamp = os.stat(first.path).st_mtime_ns
    again = ensure_graph(tiny_model, "hash-cache-test", tokenizer)
    assert again == first and os.stat(first.path).st_mtime_ns == stamp


def test_int8_is_checked_before_use(tiny_model, tokenizer) -> None:  # type: ignore[no-untyped-def]
    # Per-tensor dynamic activation scales mix tokens of different questions: refused by default ...
    with pytest.raises(ParityError, match="int8 graph refused") as info:
        ensure_graph(tiny_model, "hash-int8", tokenizer, precision="int8")
    assert info.value.max_abs_diff > 1e-5
    assert not graph_path("hash-int8", "fused", "int8").exists()
    # ... and accepted only when the caller explicitly tolerates the measured drift.
    loose = ensure_graph(tiny_model, "hash-int8-loose", tokenizer, precision="int8", int8_atol=1.0, invariance_atol=1.0)
    assert loose.precision == "int8" and loose.invariance_diff is not None and loose.invariance_diff > 0


def test_onnx_answers_equal_torch_answers(tiny_model, tokenizer) -> None:  # type: ignore[no-untyped-def]
    from controller.torch_model import to_tensors

    info = ensure_graph(tiny_model, "hash-answers", tokenizer)
    session = create_session(info.path, threads=1, device="cpu")
    requests = parity_requests(tokenizer)
    for encoding in ("packed", "npair"):
        onnx_logits = answer_logits(lambda b: session.run(["logits"], b.arrays())[0], requests, encoding)  # type: ignore[arg-type]
        with torch.inference_mode():
            torch_logits = answer_logits(lambda b: tiny_model(**to_tensors(b.arrays())).numpy(), requests, encoding)  # type: ignore[arg-type]
        worst = max(float(np.abs(a - b).max()) for ra, rb in zip(onnx_logits, torch_logits) for a, b in zip(ra, rb))
        assert worst < 1e-5
    batches, _ = make_batches(requests)
    assert all(b.arrays()["input_ids"].dtype == np.int64 for b in batches)
