from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from controller.backend import BackendRequest
from controller.errors import ArtifactError
from controller.families import family_questions
from controller.local import LocalBackend
from controller.questions import normalize_questions
from controller.specialists import INDEX, combined_hash, directory_hash, read_index, request_family, write_index
from tests.controller.conftest import pair_state

RELEVANCE_STATE = {"query": "When did Caroline go to the support group?", "memory": "[8 May 2023] Caroline: I went to the LGBTQ support group yesterday."}


def _request(state: dict, questions: dict) -> BackendRequest:
    return BackendRequest(state, tuple(normalize_questions(questions).values()))


@pytest.fixture()
def with_specialist(tmp_path: Path, tiny_artifact: Path, tiny_config) -> Path:  # type: ignore[no-untyped-def]
    """The tiny artifact plus a differently seeded tiny model as its relevance specialist."""
    from controller.artifacts import ArtifactMeta, save_artifact
    from controller.torch_model import PackedCrossEncoder

    root = tmp_path / "model"
    shutil.copytree(tiny_artifact, root)
    other = PackedCrossEncoder.from_config(tiny_config, seed=7)
    save_artifact(other, root / "specialists" / "relevance", ArtifactMeta(name="tiny-rel", version="0.0.1"))
    write_index(root, {"relevance": "specialists/relevance"})
    return root


def _probs(backend: LocalBackend, requests: list[BackendRequest]) -> list[tuple]:
    return [r.probabilities for r in backend.answer(requests)]


def _same(a: list[tuple], b: list[tuple]) -> bool:
    flat = lambda xs: np.array([float(v) for probs in xs for p in probs for v in (p if isinstance(p, tuple) else (p,))])  # noqa: E731
    return bool(np.allclose(flat(a), flat(b), atol=1e-6))


def test_requests_of_the_family_go_to_the_specialist_the_rest_to_the_main_model(with_specialist: Path, tiny_artifact: Path) -> None:
    combo = LocalBackend.load(with_specialist, runtime="torch", threads=1)
    main = LocalBackend.load(tiny_artifact, runtime="torch", threads=1)
    alone = LocalBackend.load(with_specialist / "specialists" / "relevance", runtime="torch", threads=1)
    relevance = _request(RELEVANCE_STATE, family_questions("relevance"))
    pair = _request(pair_state(), family_questions("pair"))
    mixed = _request({**RELEVANCE_STATE, **pair_state()}, {**family_questions("relevance"), **family_questions("pair", ("semantic",))})
    assert combo.specialists == ("relevance",)
    assert "+relevance specialist" in combo.info.description
    # order of results follows the order of requests, whatever the routing
    got = _probs(combo, [pair, relevance, mixed, relevance])
    assert _same(got[1:2] + got[3:4], _probs(alone, [relevance, relevance]))
    assert _same([got[0], got[2]], _probs(main, [pair, mixed]))  # a request mixing families stays with the main model
    assert not _same(got[1:2], _probs(main, [relevance]))  # the two models really differ, so the routing is observable


def test_combined_hash_names_both_models(with_specialist: Path, tiny_artifact: Path) -> None:
    combined = LocalBackend.load(with_specialist, runtime="torch", threads=1)
    main = LocalBackend.load(tiny_artifact, runtime="torch", threads=1)
    assert combined.model_hash != main.model_hash
    assert combined.model_hash == LocalBackend.load(with_specialist, runtime="torch", threads=1).model_hash
    assert combined_hash(main.model_hash, {}) == main.model_hash
    assert directory_hash(with_specialist) == combined.model_hash and directory_hash(tiny_artifact) == main.model_hash


def test_onnx_runtime_routes_like_torch(with_specialist: Path) -> None:
    requests = [_request(RELEVANCE_STATE, family_questions("relevance")), _request(pair_state(), family_questions("pair"))]
    onnx = LocalBackend.load(with_specialist, runtime="onnx", threads=1)
    torch = LocalBackend.load(with_specialist, runtime="torch", threads=1)
    assert _same(_probs(onnx, requests), _probs(torch, requests))
    onnx.close()
    with pytest.raises(Exception, match="closed"):
        onnx.answer(requests[:1])


def test_a_changed_specialist_is_refused(with_specialist: Path) -> None:
    config = with_specialist / "specialists" / "relevance" / "config.json"
    data = json.loads(config.read_text())
    data["description"] = "edited"
    config.write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match="records"):
        LocalBackend.load(with_specialist, runtime="torch")


def test_a_specialist_with_edited_weights_is_refused_by_its_pinned_hash(with_specialist: Path) -> None:
    from controller.artifacts import artifact_hash
    from controller.calibration import Calibration, save_calibration
    from controller.specialists import load_specialists

    sub = with_specialist / "specialists" / "relevance"
    weights = bytearray((sub / "encoder.safetensors").read_bytes())
    weights[-1] ^= 1
    (sub / "encoder.safetensors").write_bytes(bytes(weights))
    # a calibration refitted to the edited weights: only the index's pin can tell
    save_calibration(Calibration({}, artifact_hash(sub)), sub / "calibration.json")
    with pytest.raises(ArtifactError, match="records"):
        load_specialists(with_specialist)
    with pytest.raises(ArtifactError, match="records"):
        LocalBackend.load(with_specialist, runtime="torch")


def test_a_specialist_without_calibration_is_refused_unless_asked(with_specialist: Path) -> None:
    from controller.specialists import load_specialists

    (with_specialist / "specialists" / "relevance" / "calibration.json").unlink()
    with pytest.raises(ArtifactError, match="calibration.json is missing"):
        load_specialists(with_specialist)
    assert set(load_specialists(with_specialist, allow_uncalibrated=True)) == {"relevance"}


@pytest.mark.parametrize(
    ("families", "message"),
    [
        ({"nonsense": {"path": "specialists/relevance", "artifact_hash": "x"}}, "unknown family"),
        ({"relevance": {"path": "../elsewhere", "artifact_hash": "x"}}, "under"),
        ({"relevance": {"path": "."}}, "artifact_hash"),
    ],
)
def test_bad_index_entries_are_refused(with_specialist: Path, families: dict, message: str) -> None:
    (with_specialist / INDEX).write_text(json.dumps({"format": "jevmem-specialists/1", "families": families}))
    with pytest.raises(ArtifactError, match=message):
        read_index(with_specialist)


def test_writing_an_empty_index_removes_it(with_specialist: Path) -> None:
    write_index(with_specialist, {})
    assert not (with_specialist / INDEX).exists()
    assert LocalBackend.load(with_specialist, runtime="torch").specialists == ()


def test_request_family() -> None:
    relevance = tuple(normalize_questions(family_questions("relevance")).values())
    pair = tuple(normalize_questions(family_questions("pair", ("semantic",))).values())
    custom = tuple(normalize_questions({"x": {"type": "noul", "instructions": "Is it blue?"}}).values())
    assert request_family(relevance) == "relevance"
    assert request_family(relevance + pair) is None
    assert request_family(relevance + custom) is None
    assert request_family(()) is None
    # outside the catalogue, the state's shape names the family (pair and consolidation share one: none)
    assert request_family(custom, RELEVANCE_STATE) == "relevance"
    assert request_family(relevance + custom, {**RELEVANCE_STATE, "previous": "Melanie: How was it?"}) == "relevance"
    assert request_family(custom, {**RELEVANCE_STATE, "extra": 1}) is None
    assert request_family(custom, pair_state()) is None
    assert request_family(pair + custom, RELEVANCE_STATE) is None  # a catalogue pair question on a relevance state: mixed
    assert request_family(custom, {"observation": "I went hiking."}) == "typing"
    assert request_family(custom, "not a mapping") is None


def test_a_paraphrased_relevance_question_reaches_the_specialist(with_specialist: Path, tiny_artifact: Path) -> None:
    combined = LocalBackend.load(with_specialist, runtime="torch", threads=1)
    main = LocalBackend.load(tiny_artifact, runtime="torch", threads=1)
    special = LocalBackend.load(with_specialist / "specialists" / "relevance", runtime="torch", threads=1)
    paraphrase = _request(RELEVANCE_STATE, {"q": {"type": "noul", "instructions": "Would state.memory help someone answer state.query?"}})
    assert _same(_probs(combined, [paraphrase]), _probs(special, [paraphrase]))
    assert not _same(_probs(combined, [paraphrase]), _probs(main, [paraphrase]))


def test_a_specialist_calibration_is_checked_against_its_parents_state_conventions(with_specialist: Path) -> None:
    """A specialist has no states.json of its own: the engine renders its states as the parent directory says, so
    its calibration records and is checked against the parent's conventions."""
    from controller.artifacts import artifact_hash
    from controller.calibration import Calibration, save_calibration
    from controller.errors import CalibrationMismatchError
    from controller.specialists import load_specialists
    from controller.states import StateConventions, read_states, write_states

    sub = with_specialist / "specialists" / "relevance"
    write_states(with_specialist, StateConventions(relevance_dated=True))
    save_calibration(Calibration({"noul": 2.0}, artifact_hash(sub)), sub / "calibration.json", states=read_states(with_specialist))
    assert json.loads((sub / "calibration.json").read_text())["states"]["relevance_dated"] is True
    assert not (sub / "states.json").exists()
    loaded = load_specialists(with_specialist)["relevance"]
    assert loaded.calibration.temperatures == {"noul": 2.0} and loaded.states == StateConventions(relevance_dated=True)
    write_states(with_specialist, StateConventions())
    with pytest.raises(CalibrationMismatchError, match="states.json"):
        load_specialists(with_specialist)


def test_a_specialist_calibration_saved_without_states_records_its_parents(with_specialist: Path, tmp_path: Path) -> None:
    """Without `states=`, a calibration written into a specialist folder records the conventions of the model
    directory whose index lists it (it has no states.json of its own, so the folder alone said: the defaults)."""
    from controller.artifacts import artifact_hash
    from controller.calibration import Calibration, save_calibration
    from controller.specialists import load_specialists
    from controller.states import StateConventions, conventions_dir, write_states

    sub = with_specialist / "specialists" / "relevance"
    write_states(with_specialist, StateConventions(relevance_dated=True))
    assert conventions_dir(sub) == with_specialist.resolve() and conventions_dir(with_specialist) == with_specialist
    save_calibration(Calibration({"noul": 2.0}, artifact_hash(sub)), sub / "calibration.json")
    assert json.loads((sub / "calibration.json").read_text())["states"]["relevance_dated"] is True
    assert load_specialists(with_specialist)["relevance"].states == StateConventions(relevance_dated=True)
    loose = tmp_path / "loose" / "specialists" / "relevance"  # a folder no index lists: its own (absent) file
    shutil.copytree(sub, loose)
    assert conventions_dir(loose) == loose
    save_calibration(Calibration({"noul": 2.0}, artifact_hash(loose)), loose / "calibration.json")
    assert json.loads((loose / "calibration.json").read_text())["states"]["relevance_dated"] is False
