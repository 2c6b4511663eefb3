"""`python -m controller.bench`: latency and throughput of the local controller on the Jev-Mem request mix.

Request mix (EVALUATION.md section 3): typing (4 Nouls on one observation), pair (two memories, 5 Nouls and
a 7-option Choice), routing (6 Nouls on a query), stopping (query + 5 evidence items, 4 Nouls). Every variant
shares one loaded model and runs in the same process, interleaved request by request, so the shared,
noisy cores affect all of them alike; the table reports medians and ratios against N-pair torch.
It also checks invariance on the real model (keys renamed, questions reordered / duplicated / alone,
requests batched with others) and prints the largest probability change.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from controller.backend import BackendRequest
from controller.families import family_questions
from controller.questions import normalize_questions

# Pair states as the engine builds them (`memory.control.memory_state`): the dated memory text.
_MEMORY_A = "[8 May 2023] Caroline: I went to the LGBTQ support group yesterday and it was so powerful, the stories really inspired me."
_MEMORY_B = "[25 May 2023] Caroline: I'm researching adoption agencies, I want to give a child a loving home."
_EVIDENCE = [
    "[8 May 2023] Caroline: I went to the LGBTQ support group yesterday.",
    "[25 May 2023] Caroline: I'm researching adoption agencies.",
    "[9 June 2023] Melanie: We took the kids camping at the lake last weekend.",
    "[20 June 2023] Caroline: I gave a talk at a school about my transition journey.",
    "[2 July 2023] Melanie: I signed up for a pottery class, it's so calming.",
]


def request_mix() -> dict[str, BackendRequest]:
    def req(state: Any, family: str) -> BackendRequest:
        return BackendRequest(state, tuple(normalize_questions(family_questions(family)).values()))

    return {
        "typing": req({"observation": "Melanie: I signed up for a pottery class last week, it's so calming and I love it."}, "typing"),
        "pair": req({"memory_a": _MEMORY_A, "memory_b": _MEMORY_B}, "pair"),
        "routing": req({"query": "When did Caroline go to the LGBTQ support group, and what did she decide afterwards?"}, "routing"),
        "stopping": req({"query": "What did Caroline research after the support group?", "evidence": _EVIDENCE, "depth": 2}, "stopping"),
    }


def _time_interleaved(variants: dict[str, Any], mix: dict[str, BackendRequest], repeats: int) -> dict[str, dict[str, list[float]]]:
    """Seconds per `answer([request])`, variants interleaved request by request after one warm-up round."""
    times: dict[str, dict[str, list[float]]] = {v: {r: [] for r in mix} for v in variants}
    for backend in variants.values():  # warm-up: first runs allocate
        for request in mix.values():
            backend.answer([request])
    for _ in range(repeats):
        for rname, request in mix.items():
            for vname, backend in variants.items():
                started = time.perf_counter()
                backend.answer([request])
                times[vname][rname].append(time.perf_counter() - started)
    return times


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q)) * 1000.0


def run_bench(
    model_dir: str | None = None,
    *,
    threads: int = 2,
    repeats: int = 15,
    int8: bool = False,
    export_methods: tuple[str, ...] = ("fused",),
    printer: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Measure every variant; returns the raw numbers (and prints the table through `printer`)."""
    import torch

    from controller.artifacts import DEFAULT_MODEL_DIR, load_artifact, load_untrained
    from controller.local import LocalBackend
    from controller.template import count_input_tokens

    torch.set_num_threads(threads)
    if model_dir is None and (DEFAULT_MODEL_DIR / "config.json").exists():
        model_dir = str(DEFAULT_MODEL_DIR)
    loaded = load_artifact(model_dir) if model_dir else load_untrained()
    mix = request_mix()
    variants: dict[str, LocalBackend] = {}
    for method in export_methods:
        tag = "" if method == "fused" else f" ({method} export)"
        variants[f"packed-ONNX{tag}"] = LocalBackend(loaded, runtime="onnx", encoding="packed", threads=threads, export_method=method, spinning=False)
    variants["packed-torch"] = LocalBackend(loaded, runtime="torch", encoding="packed", threads=threads)
    # N-pair as the plain cross-encoder runs it: one forward pass per question / option (max_batch_tokens=1
    # puts every row in its own batch); the ratios are against this one, "npair-torch". The batched variant
    # (every row of a request padded into one pass) is a stronger baseline, shown beside it.
    variants["npair-ONNX"] = LocalBackend(loaded, runtime="onnx", encoding="npair", threads=threads, spinning=False, max_batch_tokens=1)
    variants["npair-torch"] = LocalBackend(loaded, runtime="torch", encoding="npair", threads=threads, max_batch_tokens=1)
    variants["npair-torch batched"] = LocalBackend(loaded, runtime="torch", encoding="npair", threads=threads)
    drift: dict[str, float] = {}
    if int8:
        for encoding in ("packed", "npair"):
            name, backend, drift[f"{encoding}-ONNX-int8"] = _int8_variant(loaded, encoding, threads)
            variants[name] = backend

    times = _time_interleaved(variants, mix, repeats)
    # The served configuration (ORT threads spin between kernels, the LocalBackend default) cannot be
    # interleaved with the others without starving them, so it runs alone, after them.
    served = "packed-ONNX served, alone"
    variants[served] = LocalBackend(loaded, runtime="onnx", encoding="packed", threads=threads, spinning=True)
    times.update(_time_interleaved({served: variants[served]}, mix, repeats))

    n_questions = {r: sum(q.n_options if q.kind != "noul" else 1 for q in req.questions) for r, req in mix.items()}
    n_keys = {r: len(req.questions) for r, req in mix.items()}
    tokens = {r: count_input_tokens(req) for r, req in mix.items()}
    printer(f"controller bench: model {loaded.info.name} ({loaded.model_hash[:12]}), {threads} threads, {repeats} repeats, "
            f"torch {torch.__version__}, CPU count {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}; "
            "idle threads sleep (ORT no spinning, OMP_WAIT_POLICY=PASSIVE) so variants do not starve each other")
    printer("request mix: " + ", ".join(f"{r} {n_keys[r]} questions / {n_questions[r]} readouts / {tokens[r]} packed tokens" for r in mix))
    header = f"{'variant':<30}" + "".join(f"{r + ' p50/p95':>22}" for r in mix) + f"{'questions/s':>13}{'x npair-torch':>15}{'x batched':>11}"
    printer(header + "   (milliseconds per request)")
    qps: dict[str, float] = {}
    for vname in variants:
        total = sum(sum(times[vname][r]) for r in mix)
        qps[vname] = repeats * sum(n_keys[r] for r in mix) / total
    base = qps.get("npair-torch", 1.0)
    batched = qps.get("npair-torch batched", 1.0)
    summary: dict[str, Any] = {"threads": threads, "repeats": repeats, "tokens": tokens, "variants": {}, "int8_drift": drift}
    for vname in variants:
        cells = "".join(f"{_percentile(times[vname][r], 50):>12.1f} /{_percentile(times[vname][r], 95):>7.1f}" for r in mix)
        printer(f"{vname:<30}{cells}{qps[vname]:>13.1f}{qps[vname] / base:>14.2f}x{qps[vname] / batched:>10.2f}x")
        summary["variants"][vname] = {
            "p50_ms": {r: _percentile(times[vname][r], 50) for r in mix},
            "p95_ms": {r: _percentile(times[vname][r], 95) for r in mix},
            "questions_per_s": qps[vname],
        }
    # Per request: answered questions/s of each variant over npair-torch on that request alone (p50 ratio).
    ratios = {v: {r: _percentile(times["npair-torch"][r], 50) / _percentile(times[v][r], 50) for r in mix} for v in variants}
    summary["ratio_by_request"] = ratios
    printer("x npair-torch by request (p50 / p50): " + "; ".join(
        f"{v}: " + ", ".join(f"{r} {ratios[v][r]:.2f}x" for r in mix) for v in variants if v.startswith("packed")))
    for name, value in drift.items():
        printer(f"{name}: max |logit change| from packing / batching = {value:.3g} (fp32: ~1e-6); not safe to serve unchecked")
    # Invariance on padded batches too: these copies put requests of every length in one batch.
    padded = {
        "packed-ONNX": LocalBackend(loaded, runtime="onnx", encoding="packed", threads=threads, spinning=False, max_padding=1.0),
        "packed-torch": LocalBackend(loaded, runtime="torch", encoding="packed", threads=threads, max_padding=1.0),
    }
    summary["invariance"] = check_invariance(padded, mix)
    for vname, diff in summary["invariance"].items():
        printer(f"invariance {vname}: max |probability diff| (reordered, duplicated, alone, batched; keys never reach the model) = {diff:.2e}")
    if not loaded.trained:
        printer("NOTE: no trained model found; timings use the UNTRAINED base encoder (same cost as a trained one).")
    return summary


def _int8_variant(loaded: Any, encoding: str, threads: int) -> tuple[str, Any, float]:
    """An int8 backend built from the unchecked quantised graph (timing only) and its measured drift."""
    from controller.local import LocalBackend
    from controller.onnx_runtime import create_session, parity_requests, quantize_unchecked
    from controller.packing import invariance_max_diff
    from controller.template import get_tokenizer

    backend = LocalBackend(loaded, runtime="onnx", encoding=encoding, threads=threads, spinning=False)  # type: ignore[arg-type]
    path = quantize_unchecked(loaded.model_hash, "fused")
    session = create_session(path, threads=threads, spinning=False)
    backend._run = lambda b: session.run(["logits"], b.arrays())[0]  # noqa: SLF001 - benchmark-only swap
    drift = invariance_max_diff(backend._run, parity_requests(get_tokenizer(loaded.tokenizer_dir)), encoding)  # type: ignore[arg-type]  # noqa: SLF001
    return f"{encoding}-ONNX-int8 (unchecked)", backend, drift


def check_invariance(variants: dict[str, Any], mix: dict[str, BackendRequest]) -> dict[str, float]:
    """Max |probability diff| of every question across rewritten / rebatched versions of the mix."""
    out: dict[str, float] = {}
    requests = list(mix.values())
    for vname, backend in variants.items():
        if not vname.startswith("packed"):
            continue
        alone = [backend.answer([r])[0].probabilities for r in requests]
        worst = 0.0

        def compare(got: tuple[tuple[float, ...], ...], want: tuple[tuple[float, ...], ...]) -> None:
            nonlocal worst
            for a, b in zip(got, want):
                worst = max(worst, max(abs(x - y) for x, y in zip(a, b)))

        for got, want in zip(backend.answer(requests), alone):  # batched with requests of other lengths
            compare(got.probabilities, want)
        for r, want in zip(requests, alone):
            reordered = backend.answer([BackendRequest(r.state, r.questions[::-1])])[0].probabilities[::-1]
            compare(reordered, want)
            doubled = backend.answer([BackendRequest(r.state, r.questions + r.questions[:1])])[0].probabilities
            compare(doubled[: len(want)], want)
            compare(doubled[-1:], want[:1])
            for k, q in enumerate(r.questions):
                compare(backend.answer([BackendRequest(r.state, (q,))])[0].probabilities, want[k : k + 1])
        out[vname] = worst
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m controller.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads for torch and onnxruntime (default 2)")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds over the request mix (default 15)")
    parser.add_argument("--int8", action="store_true", help="also time dynamic int8 graphs (and report their drift)")
    parser.add_argument("--model-dir", default=None, help="model directory (default: the committed model, else untrained base)")
    parser.add_argument("--torch-export", action="store_true", help="also time the torch.onnx (legacy exporter) graph")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its OpenMP pool
    methods = ("fused", "torch") if args.torch_export else ("fused",)
    run_bench(args.model_dir, threads=args.threads, repeats=args.repeats, int8=args.int8, export_methods=methods)


if __name__ == "__main__":
    main()
