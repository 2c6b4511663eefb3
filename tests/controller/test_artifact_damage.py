"""A damaged or hostile model directory, graph cache or option set for the `local` backend: each fault is an
`ArtifactError` / `BackendOptionError` naming the file (or option) and what is wrong, chained with `from` where
another error caused it; never a bare KeyError / RuntimeError, never weights or temperatures used silently.

Weights come from the tiny models of conftest; the committed directory is only copied for checks that fail
before any weights are read (`no_weights` makes sure of that)."""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.artifacts import DEFAULT_MODEL_DIR, artifact_hash, file_sha256, load_artifact
from controller.backend import BackendRequest, check_backend_options, create_backend
from controller.errors import ArtifactError, BackendOptionError, BackendOptionValueError, CalibrationMismatchError, UnknownBackendError
from controller.families import family_questions
from controller.local import LocalBackend
from controller.once import FirstTime
from controller.questions import normalize_questions
from controller.specialists import read_index
from tests.controller.conftest import pair_state

REQUEST = BackendRequest(pair_state(), tuple(normalize_questions(family_questions("pair")).values()))


def _copy(src: Path, tmp_path: Path, name: str = "m") -> Path:
    return Path(shutil.copytree(src, tmp_path / name))


def _edit_json(path: Path, **changes: Any) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def _repin(model: Path) -> None:
    """Re-fit the calibration's hash to the directory as it is now: the damage itself must be found, not only the
    calibration mismatch that an edit of a hashed file causes (a hostile directory ships a matching calibration)."""
    _edit_json(model / "calibration.json", model_hash=artifact_hash(model))


def _save_heads(path: Path, **tensors: Any) -> None:
    from safetensors.torch import save_file

    save_file(tensors, str(path))


def _heads(model: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(model / "heads.safetensors"))


@pytest.fixture()
def no_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading any weights (the real MiniLM's included) fails the test: the check must come first."""
    import controller.artifacts as artifacts

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("weights were loaded before the damage was found")

    for name in ("_base_model", "_full_model", "_with_adapter", "_load_heads"):
        monkeypatch.setattr(artifacts, name, refuse)


@pytest.fixture()
def shipped(tmp_path: Path) -> Path:
    if not (DEFAULT_MODEL_DIR / "config.json").exists():
        pytest.skip("no committed model")
    return _copy(DEFAULT_MODEL_DIR, tmp_path, "jevmem-minilm")


# ------------------------------------------------------------------------------------------------ config.json
def _outside_weights(m: Path) -> None:
    shutil.copy(m / "encoder.safetensors", m.parent / "other.safetensors")
    _edit_json(m / "config.json", encoder={"kind": "full", "path": "../other.safetensors"})


def _absolute_weights(m: Path) -> None:
    shutil.copy(m / "encoder.safetensors", m.parent / "abs.safetensors")
    _edit_json(m / "config.json", encoder={"kind": "full", "path": str(m.parent / "abs.safetensors")})


def _renamed_weights(m: Path) -> None:
    (m / "encoder.safetensors").rename(m / "weights.safetensors")
    _edit_json(m / "config.json", encoder={"kind": "full", "path": "weights.safetensors"})


def _without(key: str) -> Callable[[Path], None]:
    def edit(m: Path) -> None:
        data = json.loads((m / "config.json").read_text())
        del data[key]
        (m / "config.json").write_text(json.dumps(data))

    return edit


CONFIG_DAMAGE: dict[str, tuple[Callable[[Path], Any], str]] = {
    "missing": (lambda m: (m / "config.json").unlink(), "config.json: .*No such file"),
    "empty": (lambda m: (m / "config.json").write_text(""), "config.json: Expecting value"),
    "truncated": (lambda m: (m / "config.json").write_text((m / "config.json").read_text()[:40]), "cannot read .*config.json"),
    "not json": (lambda m: (m / "config.json").write_text("model, v2"), "cannot read .*config.json"),
    "a duplicate key": (lambda m: (m / "config.json").write_text((m / "config.json").read_text().rstrip()[:-1] + ', "name": "x"}'),
                        "config.json: the key 'name' appears twice"),
    "another format": (lambda m: _edit_json(m / "config.json", format="jevmem-controller/2"), "format 'jevmem-controller/2'"),
    "a numeric version": (lambda m: _edit_json(m / "config.json", version=2), "config.json lacks a string name and version"),
    "another head layout": (lambda m: _edit_json(m / "config.json", head_layout="linear4"), "head layout 'linear4'"),
    "an unknown encoder kind": (lambda m: _edit_json(m / "config.json", encoder={"kind": "qlora", "path": "encoder.safetensors"}),
                                "config.json: unknown encoder kind 'qlora'"),
    "weights outside the directory": (_outside_weights, "must be at 'encoder.safetensors', not '../other.safetensors'"),
    "weights at an absolute path": (_absolute_weights, "must be at 'encoder.safetensors', not '/"),
    "weights the hash does not cover": (_renamed_weights, "must be at 'encoder.safetensors', not 'weights.safetensors'"),
    "no bert_config": (_without("bert_config"), "config.json: full encoder weights need a 'bert_config' object"),
    "a list as bert_config": (lambda m: _edit_json(m / "config.json", bert_config=[1]), "need a 'bert_config' object, got \\[1\\]"),
    "a huge hidden size": (lambda m: _edit_bert(m, hidden_size=10**9), r"bert_config.hidden_size must be a whole number in \[1, 4096\]"),
    "a fractional layer count": (lambda m: _edit_bert(m, num_hidden_layers=2.5), "bert_config.num_hidden_layers must be a whole number"),
    "a boolean vocabulary": (lambda m: _edit_bert(m, vocab_size=True), "bert_config.vocab_size must be a whole number"),
}


def _edit_bert(model: Path, **sizes: Any) -> None:
    """config.json's bert_config with `sizes` changed (read before any weights are allocated)."""
    config = json.loads((model / "config.json").read_text())
    _edit_json(model / "config.json", bert_config={**config["bert_config"], **sizes})


@pytest.mark.parametrize("damage", list(CONFIG_DAMAGE))
def test_a_damaged_config_is_an_artifact_error_naming_it(tiny_artifact: Path, tmp_path: Path, damage: str) -> None:
    edit, message = CONFIG_DAMAGE[damage]
    model = _copy(tiny_artifact, tmp_path)
    edit(model)
    if (model / "config.json").is_file() and damage not in ("empty", "truncated", "not json", "a duplicate key"):
        _repin(model)
    with pytest.raises(ArtifactError, match=message) as info:
        load_artifact(model)
    assert not isinstance(info.value, CalibrationMismatchError)


def test_bert_config_that_does_not_fit_the_weights_names_the_tensor(tiny_artifact: Path, tmp_path: Path) -> None:
    model = _copy(tiny_artifact, tmp_path)
    config = json.loads((model / "config.json").read_text())
    _edit_json(model / "config.json", bert_config={**config["bert_config"], "hidden_size": 48})
    _repin(model)
    with pytest.raises(ArtifactError, match=r"encoder.safetensors: .* has shape \(32,\), the BERT config expects \(48,\)") as info:
        load_artifact(model)
    assert isinstance(info.value.__cause__, ValueError)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: _edit_json(m / "config.json", encoder={"kind": "lora", "path": "../adapter"}), "must be at 'adapter', not '../adapter'"),
        (lambda m: _edit_json(m / "config.json", base_model={"id": "x"}), "LoRA adapter needs a 'base_model' object with the base weights' 'sha256'"),
        (lambda m: _edit_json(m / "config.json", base_model=None), "'base_model' object .* got None"),
        (lambda m: (m / "adapter" / "adapter_model.safetensors").unlink(), "lacks adapter/adapter_model.safetensors"),
        (lambda m: (m / "calibration.json").unlink(), "calibration.json is missing"),
        (lambda m: (m / "config.json").write_bytes((m / "config.json").read_bytes()[:-2]), "cannot read .*config.json"),
    ],
    ids=["adapter-escape", "no-base-sha", "null-base", "no-adapter-weights", "no-calibration", "cut-config"],
)
def test_the_committed_directory_damaged_is_refused_before_any_weights_load(shipped: Path, no_weights: None, edit, message) -> None:  # type: ignore[no-untyped-def]
    edit(shipped)
    for load in (lambda: load_artifact(shipped), lambda: LocalBackend.load(shipped, runtime="torch")):
        with pytest.raises(ArtifactError, match=message):
            load()


# ------------------------------------------------------------------------------------------------ weights
HEADS_DAMAGE: dict[str, tuple[Callable[[Path], Any], str]] = {
    "empty": (lambda m: (m / "heads.safetensors").write_bytes(b""), "cannot load the heads in .*heads.safetensors: .*header"),
    "truncated": (lambda m: (m / "heads.safetensors").write_bytes((m / "heads.safetensors").read_bytes()[:40]), "heads.safetensors: .*header"),
    "four heads": (lambda m: _save_heads(m / "heads.safetensors", **{"heads.weight": np_t((4, 32)), "heads.bias": np_t((4,))}),
                   r"heads.safetensors: heads.weight has shape \(4, 32\), expected \(3, 32\)"),
    "another width": (lambda m: _save_heads(m / "heads.safetensors", **{"heads.weight": np_t((3, 16)), "heads.bias": np_t((3,))}),
                      r"heads.weight has shape \(3, 16\), expected \(3, 32\)"),
    "a scalar bias": (lambda m: _save_heads(m / "heads.safetensors", **{"heads.weight": np_t((3, 32)), "heads.bias": np_t(())}),
                      r"heads.bias has shape \(\), expected \(3,\)"),
    "int64": (lambda m: _save_heads(m / "heads.safetensors", **{k: (v * 100).long() for k, v in _heads(m).items()}), "heads.weight is int64, not floating point"),
    "bool": (lambda m: _save_heads(m / "heads.safetensors", **{k: v > 0 for k, v in _heads(m).items()}), "is bool, not floating point"),
    "NaN": (lambda m: _save_heads(m / "heads.safetensors", **{"heads.weight": np_t((3, 32), math.nan), "heads.bias": np_t((3,))}),
            "heads.weight holds NaN or infinite values"),
    "no bias": (lambda m: _save_heads(m / "heads.safetensors", **{"heads.weight": np_t((3, 32))}), "holds \\['heads.weight'\\], expected exactly"),
    "an extra tensor": (lambda m: _save_heads(m / "heads.safetensors", **{**_heads(m), "heads.extra": np_t((1,))}), "heads.extra"),
}


def np_t(shape: tuple[int, ...], fill: float = 0.0) -> Any:
    import torch

    return torch.full(shape, fill)


@pytest.mark.parametrize("damage", list(HEADS_DAMAGE))
def test_damaged_heads_are_named(tiny_artifact: Path, tmp_path: Path, damage: str) -> None:
    edit, message = HEADS_DAMAGE[damage]
    model = _copy(tiny_artifact, tmp_path)
    edit(model)
    _repin(model)
    with pytest.raises(ArtifactError, match=message) as info:
        load_artifact(model)
    assert "heads.safetensors" in str(info.value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: {k: (v * 100).long() for k, v in t.items()}, "encoder.safetensors: .* is int64, not floating point"),
        (lambda t: {k: v.half() for k, v in t.items()}, None),  # float16 widens to float32 exactly: loads
    ],
    ids=["int64", "float16"],
)
def test_encoder_weights_of_a_non_float_dtype_are_refused(tiny_artifact: Path, tmp_path: Path, edit, message) -> None:  # type: ignore[no-untyped-def]
    from safetensors.torch import load_file, save_file

    model = _copy(tiny_artifact, tmp_path)
    save_file(edit(load_file(str(model / "encoder.safetensors"))), str(model / "encoder.safetensors"))
    _repin(model)
    if message is None:
        assert load_artifact(model).model.bert.embeddings.word_embeddings.weight.dtype.is_floating_point
        return
    with pytest.raises(ArtifactError, match=message):
        load_artifact(model)


def test_a_cut_encoder_file_is_named(tiny_artifact: Path, tmp_path: Path) -> None:
    model = _copy(tiny_artifact, tmp_path)
    (model / "encoder.safetensors").write_bytes((model / "encoder.safetensors").read_bytes()[:1000])
    _repin(model)
    with pytest.raises(ArtifactError, match="cannot load the encoder weights .*encoder.safetensors") as info:
        load_artifact(model)
    assert info.value.__cause__ is not None


@pytest.fixture(scope="module")
def tiny_lora(tiny_base_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    from controller.artifacts import ArtifactMeta, add_lora, save_artifact
    from controller.torch_model import PackedCrossEncoder

    model = add_lora(PackedCrossEncoder.from_base(tiny_base_dir))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:  # a trained adapter: a missing lora_A would no longer multiply out to zero
                p.normal_(0, 0.2, generator=torch.Generator().manual_seed(3))
    out = tmp_path_factory.mktemp("tiny-lora") / "m"
    save_artifact(model.eval(), out, ArtifactMeta(name="tiny-lora"), base_path=tiny_base_dir)
    return out


def _adapter_tensors(m: Path, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    from safetensors.torch import load_file, save_file

    path = m / "adapter" / "adapter_model.safetensors"
    save_file(change(load_file(str(path))), str(path))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: _adapter_tensors(m, lambda t: dict(sorted(t.items())[1:])), "adapter_model.safetensors does not fit .*missing \\['base_model"),
        (lambda m: _adapter_tensors(m, lambda t: {**t, "base_model.model.bogus.weight": np_t((2,))}), "unexpected \\['base_model.model.bogus.weight'\\]"),
        (lambda m: _adapter_tensors(m, lambda t: {k: (v * 100).long() for k, v in t.items()}), "adapter_model.safetensors: .* is I64, not floating point"),
        (lambda m: (m / "adapter" / "adapter_config.json").write_text("{"), "cannot load the LoRA adapter in .*adapter: "),
        (lambda m: _edit_json(m / "adapter" / "adapter_config.json", r=4), "cannot load the LoRA adapter in .*adapter: .*size mismatch"),
        (lambda m: (m / "adapter" / "adapter_model.safetensors").write_bytes(b""), "cannot load the LoRA adapter in .*adapter: .*header"),
    ],
    ids=["missing-tensor", "extra-tensor", "int64", "config-not-json", "other-rank", "empty-weights"],
)
def test_a_damaged_lora_adapter_is_named(tiny_lora: Path, tiny_base_dir: Path, tmp_path: Path, edit, message) -> None:  # type: ignore[no-untyped-def]
    model = _copy(tiny_lora, tmp_path)
    edit(model)
    _repin(model)
    with pytest.raises(ArtifactError, match=message):
        load_artifact(model, base_path=tiny_base_dir)


def test_an_adapter_whose_config_names_a_hub_model_loads_without_asking_the_hub(tiny_lora: Path, tiny_base_dir: Path, tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from peft.utils import save_and_load

    def offline(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the hub was asked")

    monkeypatch.setattr(save_and_load, "check_file_exists_on_hf_hub", offline)
    model = _copy(tiny_lora, tmp_path)
    _edit_json(model / "adapter" / "adapter_config.json", base_model_name_or_path="someone/another-model")
    _repin(model)
    assert load_artifact(model, base_path=tiny_base_dir).trained


def test_an_unreadable_weights_file_is_named_not_a_raw_oserror(tiny_artifact: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _copy(tiny_artifact, tmp_path)
    real = Path.read_bytes

    def denied(self: Path) -> bytes:
        if self.name == "heads.safetensors":  # as for a file of another account (chmod cannot show it to root)
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(ArtifactError, match="cannot read .*heads.safetensors to hash") as info:
        load_artifact(model)
    assert isinstance(info.value.__cause__, PermissionError)
    (tmp_path / "dir.onnx").mkdir()
    with pytest.raises(ArtifactError, match="dir.onnx"):
        file_sha256(tmp_path / "dir.onnx")


# ------------------------------------------------------------------------------------------------ calibration.json
def _calibration(**changes: Any) -> Callable[[Path], None]:
    return lambda m: _edit_json(m / "calibration.json", **changes)


CALIBRATION_DAMAGE: dict[str, tuple[Callable[[Path], Any], str]] = {
    "empty": (lambda m: (m / "calibration.json").write_text(""), "Expecting value"),
    "truncated": (lambda m: (m / "calibration.json").write_text((m / "calibration.json").read_text()[:20]), "calibration.json"),
    "NaN": (_calibration(temperatures={"noul": math.nan}), "'noul' must be a positive number, not nan"),
    "inf": (_calibration(temperatures={"noul": math.inf}), "must be a positive number, not inf"),
    "negative": (_calibration(temperatures={"noul": -1.0}), "must be a positive number, not -1.0"),
    "zero": (_calibration(temperatures={"choice:3-4": 0.0}), "must be a positive number, not 0.0"),
    "denormal": (_calibration(temperatures={"choice:5-8": 1e-320}), "outside \\[0.001, 1000\\]"),
    "huge": (_calibration(temperatures={"noul": 1e300}), "outside \\[0.001, 1000\\]"),
    "family NaN": (_calibration(family_temperatures={"pair:noul": math.nan}), "'pair:noul' must be a positive number"),
    "bias inf": (_calibration(family_temperatures={"pair:noul": 1.0}, family_biases={"pair:noul": math.inf}), "bias of 'pair:noul' must be a finite"),
    "a string": (_calibration(temperatures={"noul": "2.5"}), "'temperatures' must map names to numbers; 'noul' is '2.5'"),
    "a boolean": (_calibration(temperatures={"noul": True}), "'noul' is True"),
    "null table": (_calibration(temperatures=None), "'temperatures' must be a JSON object"),
    "list table": (_calibration(family_biases=["pair:noul"]), "'family_biases' must be a JSON object"),
    "fitted_on list": (_calibration(fitted_on=[1, 2]), "'fitted_on' must be a JSON object"),
    "a duplicate key": (lambda m: (m / "calibration.json").write_text((m / "calibration.json").read_text().rstrip()[:-1] + ', "temperatures": {}}'),
                        "the key 'temperatures' appears twice"),
    "another format": (_calibration(format="jevmem-calibration/2"), "calibration format"),
}


@pytest.mark.parametrize("damage", list(CALIBRATION_DAMAGE))
def test_a_damaged_calibration_is_named(tiny_artifact: Path, tmp_path: Path, damage: str) -> None:
    edit, message = CALIBRATION_DAMAGE[damage]
    model = _copy(tiny_artifact, tmp_path)
    edit(model)
    with pytest.raises(ArtifactError, match=message) as info:
        LocalBackend.load(model, runtime="torch")
    assert str(model / "calibration.json") in str(info.value) and info.value.__cause__ is not None


@pytest.mark.parametrize("temperature", [1e-3, 1e3])
def test_every_temperature_accepted_gives_finite_probabilities_on_extreme_logits(temperature: float) -> None:
    from controller.calibration import MAX_TEMPERATURE, MIN_TEMPERATURE, Calibration

    assert MIN_TEMPERATURE <= temperature <= MAX_TEMPERATURE
    cal = Calibration({group: temperature for group in ("noul", "choice:3-4", "score:2-3")})
    biggest = float(np.finfo(np.float32).max)  # the largest logit a float32 graph can return
    for kind, z in (("choice", [biggest, -biggest, 0.0]), ("score", [biggest, biggest]), ("noul", [biggest]), ("noul", [-biggest])):
        probs = cal.probabilities(kind, np.array(z, dtype=np.float32))
        assert all(math.isfinite(p) and 0.0 <= p <= 1.0 for p in probs)
        assert kind == "noul" or sum(probs) == pytest.approx(1.0)


def test_a_duplicate_key_in_states_json_is_refused(tiny_artifact: Path, tmp_path: Path) -> None:
    model = _copy(tiny_artifact, tmp_path)
    (model / "states.json").write_text('{"format": "jevmem-states/1", "relevance_dated": true, "relevance_dated": false}')
    with pytest.raises(ArtifactError, match="states.json: the key 'relevance_dated' appears twice"):
        load_artifact(model)


# ------------------------------------------------------------------------------------------------ specialists.json
def _index(families: Any) -> str:
    return json.dumps({"format": "jevmem-specialists/1", "families": families})


def _symlinked_out(m: Path) -> str:
    outside = m.parent / "outside"
    outside.mkdir()
    (m / "specialists" / "evil").symlink_to(outside)
    return _index({"relevance": {"path": "specialists/evil", "artifact_hash": "ab"}})


SPECIALIST_DAMAGE: dict[str, tuple[Callable[[Path], str], str]] = {
    "not json": (lambda m: "{", "specialists.json: Expecting property name"),
    "a duplicate key": (lambda m: '{"format": "jevmem-specialists/1", "families": {}, "families": {}}', "the key 'families' appears twice"),
    "families a list": (lambda m: _index([]), "is not a jevmem-specialists/1 index"),
    "an unknown family": (lambda m: _index({"poetry": {"path": "specialists/relevance", "artifact_hash": "ab"}}), "unknown family 'poetry'"),
    "escaping with ..": (lambda m: _index({"relevance": {"path": "../elsewhere", "artifact_hash": "ab"}}), "must live in a folder under"),
    "an absolute path": (lambda m: _index({"relevance": {"path": "/tmp", "artifact_hash": "ab"}}), "must live in a folder under"),
    "the directory itself": (lambda m: _index({"relevance": {"path": "specialists/..", "artifact_hash": "ab"}}), "must live in a folder under"),
    "a symlink out": (_symlinked_out, "must live in a folder under"),
    "a NUL byte": (lambda m: _index({"relevance": {"path": "special\u0000ists", "artifact_hash": "ab"}}), "is not a usable folder name"),
    "no hash": (lambda m: _index({"relevance": {"path": "specialists/relevance"}}), "needs a 'path' and an 'artifact_hash'"),
}


@pytest.mark.parametrize("damage", list(SPECIALIST_DAMAGE))
def test_a_hostile_specialists_index_is_refused(shipped: Path, no_weights: None, damage: str) -> None:
    write, message = SPECIALIST_DAMAGE[damage]
    (shipped / "specialists.json").write_text(write(shipped))
    with pytest.raises(ArtifactError, match=message) as info:
        read_index(shipped)
    assert str(shipped / "specialists.json") in str(info.value)


@pytest.mark.parametrize(("path", "message"), [("specialists/missing", "specialists/missing is not a model directory"),
                                               ("heads.safetensors", "heads.safetensors is not a model directory")])
def test_a_specialist_that_is_not_a_model_directory_is_refused_at_load(tiny_artifact: Path, tmp_path: Path, path: str, message: str) -> None:
    model = _copy(tiny_artifact, tmp_path)
    (model / "specialists.json").write_text(_index({"relevance": {"path": path, "artifact_hash": "ab"}}))
    with pytest.raises(ArtifactError, match=message):
        LocalBackend.load(model, runtime="torch")


# ------------------------------------------------------------------------------------------------ the ONNX cache
@pytest.fixture()
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache under `tmp_path`, and a fresh private fallback directory under it (not the session's)."""
    import tempfile
    from types import SimpleNamespace

    from controller import graph_cache

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(graph_cache, "_PRIVATE", {})
    monkeypatch.setattr(graph_cache, "_WARNED", FirstTime())
    monkeypatch.setattr(graph_cache, "atexit", SimpleNamespace(register=lambda *args, **kwargs: None))
    monkeypatch.setenv("JEVMEM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "tmp"


def _answers(model: Path) -> tuple[Any, Path]:
    backend = LocalBackend.load(model, threads=1)
    try:
        return backend.answer([REQUEST]), Path(backend.graph.path)
    finally:
        backend.close()


def _directory_in_its_place(graph: Path) -> None:
    graph.unlink()
    graph.mkdir()  # the sidecar stays: it must not be trusted either


@pytest.mark.parametrize(
    "damage",
    [lambda g: g.write_bytes(b""), lambda g: g.write_bytes(g.read_bytes()[:5000]), lambda g: g.write_bytes(b"\0" * g.stat().st_size),
     lambda g: g.with_suffix(".json").write_text('{"model_hash": 1'), _directory_in_its_place],
    ids=["empty", "truncated", "zeroed-same-size", "cut-sidecar", "a-directory"],
)
def test_a_damaged_cached_graph_is_rebuilt_and_answers_as_before(tiny_artifact: Path, private_cache: Path, damage) -> None:  # type: ignore[no-untyped-def]
    expected, graph = _answers(tiny_artifact)
    damage(graph)
    again, served = _answers(tiny_artifact)
    assert again == expected
    assert served == graph or served.is_relative_to(private_cache)  # a directory in the way: built in the private cache


def test_a_read_only_cache_holding_a_damaged_graph_serves_a_private_rebuild(tiny_artifact: Path, private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    expected, graph = _answers(tiny_artifact)
    graph.write_bytes(graph.read_bytes()[:1000])
    real_open = os.open
    cache = graph.parent

    def read_only(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:  # EROFS for new files in the cache (root ignores chmod)
        if flags & os.O_CREAT and Path(path).is_relative_to(cache):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    again, served = _answers(tiny_artifact)
    assert again == expected and served.is_relative_to(private_cache)
    assert len(graph.read_bytes()) == 1000  # the read-only entry is left alone, and never served


# ------------------------------------------------------------------------------------------------ factory options
BAD_OPTIONS: list[tuple[dict[str, Any], str]] = [
    ({"threads": "2"}, "threads"), ({"threads": -1}, "threads"), ({"threads": 1.5}, "threads"), ({"threads": True}, "threads"),
    ({"quantize": "false"}, "quantize"), ({"quantize": 1}, "quantize"), ({"spinning": "no"}, "spinning"),
    ({"runtime": "cuda"}, "runtime"), ({"runtime": None}, "runtime"), ({"encoding": "pairs"}, "encoding"),
    ({"export_method": "../../evil"}, "export_method"), ({"overflow": None}, "overflow"), ({"overflow": ["refuse"]}, "overflow"),
    ({"device": "tpu"}, "device"), ({"device": 3}, "device"), ({"device": "cuda:1", "runtime": "onnx"}, "device"),
    ({"max_request_tokens": 0}, "max_request_tokens"), ({"max_request_tokens": "8192"}, "max_request_tokens"),
    ({"max_sequence_tokens": -1}, "max_sequence_tokens"), ({"max_batch_tokens": 0}, "max_batch_tokens"), ({"max_batch_tokens": 1e9}, "max_batch_tokens"),
    ({"max_padding": math.nan}, "max_padding"), ({"max_padding": -0.1}, "max_padding"), ({"max_padding": 1.5}, "max_padding"), ({"max_padding": "0.1"}, "max_padding"),
    ({"model_dir": 123}, "model_dir"), ({"model_dir": ""}, "model_dir"), ({"base_path": 5}, "base_path"),
    ({"specialists": {"relevance": 1}}, "specialists"), ({"specialists": []}, "specialists"), ({"lock": 1}, "lock"),
]


@pytest.mark.parametrize(("bad", "option"), BAD_OPTIONS, ids=[",".join(f"{k}={v!r}" for k, v in o.items()) for o, _ in BAD_OPTIONS])
def test_a_bad_option_value_is_refused_before_the_model_loads(tiny_artifact: Path, no_weights: None, bad: dict[str, Any], option: str) -> None:
    options = {"model_dir": str(tiny_artifact), "runtime": "torch", "threads": 1, **bad}
    with pytest.raises(BackendOptionValueError, match="cannot use the keyword argument") as info:
        create_backend("local", **options)
    error = info.value
    assert error.option == option and error.backend == "local" and option in str(error)
    assert isinstance(error, BackendOptionError) and isinstance(error, TypeError) and isinstance(error, ValueError)


def test_an_unknown_option_is_refused_before_the_model_loads(tiny_artifact: Path, no_weights: None) -> None:
    with pytest.raises(BackendOptionError, match="cannot take the keyword argument 'thread'") as info:
        create_backend("local", model_dir=str(tiny_artifact), thread=1)
    assert info.value.option == "thread" and not isinstance(info.value, BackendOptionValueError)


def test_the_constructor_checks_the_same_options(tiny_artifact: Path) -> None:
    loaded = load_artifact(tiny_artifact)
    with pytest.raises(BackendOptionValueError, match="quantize"):
        LocalBackend(loaded, runtime="torch", quantize=True)
    with pytest.raises(BackendOptionValueError, match="max_padding"):
        LocalBackend(loaded, runtime="torch", max_padding=float("inf"))


def test_option_values_at_their_limits_are_accepted(tiny_artifact: Path) -> None:
    backend = create_backend("local", model_dir=Path(tiny_artifact), runtime="torch", threads=0, device="cpu", max_batch_tokens=1,
                             max_padding=0, max_request_tokens=1 << 20, spinning=False, specialists={})
    try:
        (result,) = backend.answer([REQUEST])
        assert all(math.isfinite(p) for probs in result.probabilities for p in probs)
    finally:
        backend.close()
    backend = create_backend("local", model_dir=str(tiny_artifact), runtime="torch", device="auto", max_padding=1.0)
    backend.close()


@pytest.mark.parametrize(("bad", "option"), BAD_OPTIONS, ids=[",".join(f"{k}={v!r}" for k, v in o.items()) for o, _ in BAD_OPTIONS])
def test_check_backend_options_refuses_what_create_backend_would_without_loading(
    tiny_artifact: Path, no_weights: None, bad: dict[str, Any], option: str,
) -> None:
    """What a server checks before it listens (`serving.server.preflight`): the same refusal, nothing loaded."""
    with pytest.raises(BackendOptionValueError) as info:
        check_backend_options("local", {"model_dir": str(tiny_artifact), "runtime": "torch", **bad})
    assert info.value.option == option


@pytest.mark.parametrize(("name", "options", "error", "message"), [
    ("local", {"thread": 1}, BackendOptionError, "cannot take the keyword argument 'thread'"),
    ("local", {"loaded": None}, BackendOptionError, "cannot take the keyword argument 'loaded'"),
    ("heuristic", {"bogus": 1}, BackendOptionError, "backend 'heuristic' cannot take the keyword argument 'bogus'"),
    ("remote", {"bogus": 1}, BackendOptionError, "backend 'remote' cannot take the keyword argument 'bogus'"),
    ("nope", {}, UnknownBackendError, "unknown backend 'nope'; available: heuristic, local, remote"),
])
def test_check_backend_options_names_the_backend_and_the_option(name: str, options: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        check_backend_options(name, options)


def test_check_backend_options_accepts_good_options_and_loads_nothing(tiny_artifact: Path, no_weights: None) -> None:
    check_backend_options("local", {"model_dir": str(tiny_artifact), "runtime": "torch", "threads": 2, "overflow": "truncate_state"})
    check_backend_options("local", {})
    check_backend_options("heuristic", {})
    check_backend_options("remote", {"base_url": "http://127.0.0.1:9"})  # nothing is reached
