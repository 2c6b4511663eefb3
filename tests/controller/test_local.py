from __future__ import annotations

import logging
import time

import pytest

from controller.backend import Backend, BackendRequest, create_backend
from controller.client import SystemOneClient
from controller.errors import InputTooLongError
from controller.families import family_questions
from controller.local import LocalBackend
from controller.questions import normalize_questions
from controller.template import count_input_tokens
from tests.controller.conftest import pair_state

MIXED = {
    **family_questions("pair"),
    "urgency": {"type": "score", "instructions": "How soon should this be linked?", "criteria": ["never", "later", "now"]},
}


@pytest.fixture(scope="module", params=["onnx", "torch"])
def backend(request, tiny_artifact):  # type: ignore[no-untyped-def]
    b = LocalBackend.load(tiny_artifact, runtime=request.param, threads=1)
    yield b
    b.close()


def _flat(response) -> dict:  # type: ignore[no-untyped-def]
    return {k: a.model_dump(mode="json") for k, a in response.answers.items()}


def _close(a: dict, b: dict, tol: float = 1e-5) -> bool:
    def walk(x, y) -> bool:  # type: ignore[no-untyped-def]
        if isinstance(x, dict):
            return x.keys() == y.keys() and all(walk(x[k], y[k]) for k in x)
        if isinstance(x, float):
            return abs(x - y) <= tol
        return x == y

    return walk(a, b)


def test_backend_protocol_and_answers(backend) -> None:  # type: ignore[no-untyped-def]
    assert isinstance(backend, Backend)
    assert backend.info.name == "tiny-0.0.1"
    client = SystemOneClient(backend)
    r = client.system_one(pair_state(), MIXED)
    assert r.model == "tiny-0.0.1"
    assert set(r.answers) == set(MIXED)
    assert r.answers["temporal"].choice in family_questions("pair")["temporal"]["criteria"]
    assert abs(sum(r.answers["temporal"].probabilities.values()) - 1) < 1e-9
    assert 0 <= r.answers["urgency"].score <= 2
    request = BackendRequest(pair_state(), tuple(normalize_questions(MIXED).values()))
    assert r.usage.input_tokens == count_input_tokens(request)  # same count as the heuristic backend reports


def test_answers_do_not_depend_on_keys_order_duplicates_or_batch(backend) -> None:  # type: ignore[no-untyped-def]
    client = SystemOneClient(backend)
    base = _flat(client.system_one(pair_state(), MIXED))
    renamed = {f"x_{k}": v for k, v in MIXED.items()}
    got = _flat(client.system_one(pair_state(), renamed))
    assert _close({k[2:]: v for k, v in got.items()}, base)
    reordered = dict(reversed(list(MIXED.items())))
    assert _close(_flat(client.system_one(pair_state(), reordered)), base)
    duplicated = {**MIXED, "semantic_again": MIXED["semantic"]}
    dup = _flat(client.system_one(pair_state(), duplicated))
    assert _close(dup["semantic_again"], base["semantic"])
    subset = _flat(client.system_one(pair_state(), {"temporal": MIXED["temporal"]}))
    assert _close(subset["temporal"], base["temporal"])
    others = [({"observation": "short"}, family_questions("typing")), ("a much longer state " * 20, family_questions("routing"))]
    batch = client.system_one_batch([others[0], (pair_state(), MIXED), others[1]])
    assert _close(_flat(batch[1]), base)
    assert _close(_flat(client.system_one(pair_state(), MIXED)), base, tol=0.0)  # deterministic


def test_npair_encoding_answers_and_counts_more_tokens(tiny_artifact) -> None:  # type: ignore[no-untyped-def]
    packed = LocalBackend.load(tiny_artifact, runtime="torch")
    npair = LocalBackend.load(tiny_artifact, runtime="torch", encoding="npair")
    request = BackendRequest(pair_state(), tuple(normalize_questions(MIXED).values()))
    (p,), (n,) = packed.answer([request]), npair.answer([request])
    assert len(n.probabilities) == len(p.probabilities) and n.input_tokens > 2 * p.input_tokens
    assert "npair" in npair.info.description


def test_too_long_input_is_refused(backend) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputTooLongError):
        backend.answer([BackendRequest("word " * 600, tuple(normalize_questions(family_questions("typing")).values()))])


def test_truncate_state_policy_answers_an_over_long_state_and_reports_the_cut(tiny_artifact) -> None:  # type: ignore[no-untyped-def]
    questions = tuple(normalize_questions(family_questions("typing")).values())
    b = LocalBackend.load(tiny_artifact, runtime="torch", threads=1, overflow="truncate_state")
    try:
        (long,), (short,) = b.answer([BackendRequest("word " * 600, questions)]), b.answer([BackendRequest("word " * 10, questions)])
        assert long.truncated_tokens > 0 and short.truncated_tokens == 0
        assert all(0.0 <= p[0] <= 1.0 for p in long.probabilities)
    finally:
        b.close()
    with pytest.raises(ValueError, match="overflow"):
        LocalBackend.load(tiny_artifact, runtime="torch", overflow="drop")


def test_255_option_choice_answers_quickly(backend) -> None:  # type: ignore[no-untyped-def]
    criteria = {f"option_{i}": f"the description of option number {i}" for i in range(255)}
    started = time.perf_counter()
    r = SystemOneClient(backend).system_one(pair_state(), {"q": {"type": "choice", "instructions": "Which?", "criteria": criteria}})
    assert time.perf_counter() - started < 10
    assert len(r.answers["q"].probabilities) == 255


def test_quantize_falls_back_to_fp32_with_a_warning(tiny_artifact, caplog) -> None:  # type: ignore[no-untyped-def]
    with caplog.at_level(logging.WARNING, logger="controller.local"):
        b = LocalBackend.load(tiny_artifact, quantize=True)
    assert not b.quantized and "int8 quantisation refused" in caplog.text
    assert b.graph.precision == "fp32"


def test_without_a_model_dir_the_untrained_base_is_loud(tiny_base_dir, monkeypatch, caplog, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import controller.local

    monkeypatch.setattr(controller.local, "DEFAULT_MODEL_DIR", tmp_path / "missing")
    with caplog.at_level(logging.WARNING, logger="controller.local"):
        b = create_backend("local", runtime="torch", base_path=tiny_base_dir)
    assert "UNTRAINED" in caplog.text
    assert b.info.name == "jevmem-minilm-untrained" and not b.trained
    assert "UNTRAINED" in b.info.description


def test_closed_backend_refuses(tiny_artifact) -> None:  # type: ignore[no-untyped-def]
    from controller.errors import BackendUnavailableError

    b = LocalBackend.load(tiny_artifact, runtime="torch")
    b.close()
    with pytest.raises(BackendUnavailableError):
        b.answer([BackendRequest("x", tuple(normalize_questions(family_questions("typing")).values()))])


def test_other_wording_is_calibrated_as_the_family_of_its_state(tiny_artifact, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import math
    import shutil

    from controller.artifacts import artifact_hash
    from controller.calibration import Calibration, save_calibration

    model = tmp_path / "model"
    shutil.copytree(tiny_artifact, model)
    save_calibration(Calibration({"noul": 1.0}, artifact_hash(model), family_temperatures={"relevance:noul": 1.0},
                                 family_biases={"relevance:noul": 3.0}), model / "calibration.json")
    custom = {"helps": {"type": "noul", "instructions": "Would state.memory help a reader answer state.query?"}}
    relevance = {"query": "When did Caroline go to the support group?", "memory": "Caroline: I went yesterday."}
    pooled = {"note": "Caroline went to a support group."}  # no family has this shape: the kind's pooled level

    def p_yes(backend: LocalBackend, state: dict) -> float:
        return SystemOneClient(backend).system_one(state, custom).answers["helps"].noul

    plain, biased = LocalBackend.load(tiny_artifact, threads=1), LocalBackend.load(model, threads=1)
    try:
        logit = lambda p: math.log(p / (1 - p))  # noqa: E731
        assert logit(p_yes(biased, relevance)) == pytest.approx(logit(p_yes(plain, relevance)) + 3.0, abs=1e-3)
        assert p_yes(biased, pooled) == pytest.approx(p_yes(plain, pooled), abs=1e-6)
    finally:
        plain.close()
        biased.close()


def test_served_nouls_take_the_prior_shift_of_their_catalogue_key(tiny_artifact, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import math
    import shutil

    from controller.artifacts import artifact_hash
    from controller.calibration import Calibration, save_calibration

    model = tmp_path / "model"
    shutil.copytree(tiny_artifact, model)
    save_calibration(Calibration({"noul": 1.0}, artifact_hash(model), prior_shifts={"relevance.relevant": -1.0, "relevance": 0.5}),
                     model / "calibration.json")
    questions = {**family_questions("relevance"),
                 "helps": {"type": "noul", "instructions": "Would state.memory help a reader answer state.query?"}}
    state = {"query": "When did Caroline go to the support group?", "memory": "Caroline: I went yesterday."}
    plain, shifted = LocalBackend.load(tiny_artifact, threads=1), LocalBackend.load(model, threads=1)
    try:
        before = SystemOneClient(plain).system_one(state, questions).answers
        after = SystemOneClient(shifted).system_one(state, questions).answers
        logit = lambda p: math.log(p / (1 - p))  # noqa: E731
        assert logit(after["relevant"].noul) == pytest.approx(logit(before["relevant"].noul) - 1.0, abs=1e-3)
        assert logit(after["helps"].noul) == pytest.approx(logit(before["helps"].noul) + 0.5, abs=1e-3)  # other wording: the family's
        assert after["bridge"].noul == pytest.approx(before["bridge"].noul, abs=1e-6)  # no shift of its own, none applied
    finally:
        plain.close()
        shifted.close()


@pytest.mark.parametrize("runtime", ["torch", "onnx"])
def test_a_model_with_fewer_positions_refuses_or_truncates_by_its_own_limit(tiny_config, tmp_path, runtime) -> None:  # type: ignore[no-untyped-def]
    import copy

    from controller.artifacts import save_artifact
    from controller.torch_model import PackedCrossEncoder

    config = copy.deepcopy(tiny_config)
    config.max_position_embeddings = 128  # a base encoder with fewer positions than the template's 512
    save_artifact(PackedCrossEncoder.from_config(config, seed=0), tmp_path / "m")
    questions = tuple(normalize_questions(family_questions("typing")).values())
    b = LocalBackend.load(tmp_path / "m", runtime=runtime, threads=1)
    cut = LocalBackend.load(tmp_path / "m", runtime=runtime, threads=1, overflow="truncate_state")
    try:
        with pytest.raises(InputTooLongError) as info:
            b.answer([BackendRequest("word " * 200, questions)])
        assert info.value.limit == 128
        (long,) = cut.answer([BackendRequest("word " * 200, questions)])
        assert long.truncated_tokens > 0 and all(0.0 <= p[0] <= 1.0 for p in long.probabilities)
    finally:
        b.close()
        cut.close()
