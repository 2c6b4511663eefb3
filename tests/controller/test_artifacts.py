from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from controller.artifacts import ArtifactMeta, add_lora, artifact_hash, load_artifact, load_untrained, save_artifact
from controller.backend import BackendRequest
from controller.calibration import Calibration, save_calibration
from controller.errors import ArtifactError, CalibrationMismatchError
from controller.families import family_questions
from controller.packing import make_batches
from controller.questions import normalize_questions
from controller.template import tokenize_request
from controller.torch_model import PackedCrossEncoder, to_tensors
from tests.controller.conftest import pair_state


def _pair_inputs(tokenizer) -> dict:  # type: ignore[no-untyped-def]
    tok = tokenize_request(BackendRequest(pair_state(), tuple(normalize_questions(family_questions("pair")).values())), tokenizer)
    (batch,), _ = make_batches([tok])
    return to_tensors(batch.arrays())


def _logits(model, tokenizer) -> np.ndarray:  # type: ignore[no-untyped-def]
    with torch.inference_mode():
        return model(**_pair_inputs(tokenizer)).numpy()


def test_full_weights_round_trip(tiny_artifact, _tiny_model, tokenizer) -> None:  # type: ignore[no-untyped-def]
    loaded = load_artifact(tiny_artifact)
    assert loaded.trained and loaded.info.name == "tiny-0.0.1" and loaded.info.description == "tiny test model"
    assert loaded.model_hash == artifact_hash(tiny_artifact)
    assert loaded.calibration.model_hash == loaded.model_hash
    assert np.array_equal(_logits(loaded.model, tokenizer), _logits(_tiny_model, tokenizer))
    for name in ("config.json", "heads.safetensors", "encoder.safetensors", "calibration.json", "metrics.json", "MODEL_CARD.md"):
        assert (tiny_artifact / name).exists()


def test_hash_covers_weights_not_metrics(tiny_artifact, tmp_path) -> None:  # type: ignore[no-untyped-def]
    copy = tmp_path / "m"
    shutil.copytree(tiny_artifact, copy)
    before = artifact_hash(copy)
    (copy / "metrics.json").write_text('{"accuracy": 1.0}')
    assert artifact_hash(copy) == before
    data = bytearray((copy / "heads.safetensors").read_bytes())
    data[-1] ^= 1
    (copy / "heads.safetensors").write_bytes(bytes(data))
    assert artifact_hash(copy) != before


def test_state_conventions_load_with_the_model_outside_its_hash(tiny_artifact, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from controller.states import StateConventions, write_states

    copy = tmp_path / "m"
    shutil.copytree(tiny_artifact, copy)
    before = artifact_hash(copy)
    assert load_artifact(copy).states == StateConventions()
    write_states(copy, StateConventions(relevance_dated=True))
    loaded = load_artifact(copy)  # the calibration still matches: the file is not hashed
    assert loaded.states == StateConventions(relevance_dated=True) and loaded.model_hash == before


def test_calibration_for_another_model_is_refused(tiny_artifact, tmp_path) -> None:  # type: ignore[no-untyped-def]
    copy = tmp_path / "m"
    shutil.copytree(tiny_artifact, copy)
    save_calibration(Calibration({"noul": 2.0}, "someone-else"), copy / "calibration.json")
    with pytest.raises(CalibrationMismatchError):
        load_artifact(copy)


def test_broken_directories_raise_artifact_error(tiny_artifact, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ArtifactError):
        load_artifact(tmp_path)
    copy = tmp_path / "m"
    shutil.copytree(tiny_artifact, copy)
    config = json.loads((copy / "config.json").read_text())
    config["template"]["template_version"] = "packed-0"
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ArtifactError, match="template"):
        load_artifact(copy)
    shutil.copytree(tiny_artifact, tmp_path / "n")
    (tmp_path / "n" / "heads.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ArtifactError):
        load_artifact(tmp_path / "n")


def test_lora_adapter_is_saved_small_and_merged_on_load(tiny_base_dir, tokenizer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = add_lora(PackedCrossEncoder.from_base(tiny_base_dir))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2, generator=torch.Generator().manual_seed(3))
            if name.startswith("heads"):
                p.add_(0.5)
    model.eval()
    expected = _logits(model, tokenizer)
    out = tmp_path / "lora"
    save_artifact(model, out, ArtifactMeta(name="tiny-lora"), base_path=tiny_base_dir)
    assert (out / "adapter" / "adapter_config.json").exists() and not (out / "encoder.safetensors").exists()
    modules = json.loads((out / "adapter" / "adapter_config.json").read_text())["target_modules"]
    assert modules == sorted(modules) and len(modules) > 1  # peft writes this set in hash-seed order
    config = json.loads((out / "config.json").read_text())
    assert config["encoder"]["kind"] == "lora" and len(config["base_model"]["sha256"]) == 64
    loaded = load_artifact(out, base_path=tiny_base_dir)
    assert not any("lora" in n for n in loaded.model.state_dict())
    assert np.abs(_logits(loaded.model, tokenizer) - expected).max() < 1e-5


def test_lora_on_top_layers_only_round_trips_and_leaves_lower_layers_without_gradients(tiny_base_dir, tokenizer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = add_lora(PackedCrossEncoder.from_base(tiny_base_dir), top_layers=1)
    n_layers = model.bert.config.num_hidden_layers
    assert n_layers >= 2
    adapted = {int(n.split("layer.")[1].split(".")[0]) for n, _ in model.named_parameters() if "lora_" in n}
    assert adapted == {n_layers - 1}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2, generator=torch.Generator().manual_seed(5))
    model.train()
    model(**_pair_inputs(tokenizer)).sum().backward()
    grads = {n for n, p in model.named_parameters() if p.grad is not None}
    assert grads and all("heads" in n or f"layer.{n_layers - 1}." in n for n in grads)
    model.eval()
    expected = _logits(model, tokenizer)
    save_artifact(model, tmp_path / "top", ArtifactMeta(name="tiny-top"), base_path=tiny_base_dir)
    loaded = load_artifact(tmp_path / "top", base_path=tiny_base_dir)
    assert np.abs(_logits(loaded.model, tokenizer) - expected).max() < 1e-5
    with pytest.raises(ValueError, match="top_layers"):
        add_lora(PackedCrossEncoder.from_base(tiny_base_dir), top_layers=n_layers + 1)


def test_adapter_on_other_base_weights_is_refused(tiny_base_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    save_artifact(add_lora(PackedCrossEncoder.from_base(tiny_base_dir)), tmp_path / "a", base_path=tiny_base_dir)
    other = tmp_path / "other-base"
    shutil.copytree(tiny_base_dir, other)
    from safetensors.torch import load_file, save_file

    weights = load_file(str(other / "model.safetensors"))
    first = sorted(weights)[0]
    weights[first] = weights[first] + 1
    save_file(weights, str(other / "model.safetensors"))
    with pytest.raises(ArtifactError, match="sha256"):
        load_artifact(tmp_path / "a", base_path=other)


def test_untrained_model_is_named_as_such(tiny_base_dir) -> None:  # type: ignore[no-untyped-def]
    a, b = load_untrained(tiny_base_dir), load_untrained(tiny_base_dir)
    assert not a.trained and "untrained" in a.info.name and "UNTRAINED" in a.info.description
    assert a.model_hash == b.model_hash
    assert torch.equal(a.model.heads.weight, b.model.heads.weight)  # fixed seed


def test_adapter_config_is_canonical_so_equal_weights_hash_equal(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from controller.artifacts import canonical_adapter_config

    texts = []
    for i, order in enumerate((["value", "query", "key"], ["key", "value", "query"])):
        path = tmp_path / f"c{i}.json"
        path.write_text(json.dumps({"target_modules": order, "r": 8, "lora_alpha": 16}))
        canonical_adapter_config(path)
        texts.append(path.read_text())
    assert texts[0] == texts[1] and json.loads(texts[0])["target_modules"] == ["key", "query", "value"]



@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("config.json", "[1]", "config.json"),  # valid JSON, not an object
        ("config.json", {"template": "packed-1"}, "template"),  # fields of the wrong shape
        ("config.json", {"encoder": "lora"}, "config.json"),
        ("calibration.json", "[]", "calibration.json"),
        ("calibration.json", '{"format": "jevmem-calibration/1", "temperatures": {"noul": "warm"}}', "calibration.json"),
        ("calibration.json", '{"format": "jevmem-calibration/1", "temperatures": ["noul"]}', "calibration.json"),
    ],
)
def test_malformed_json_files_are_artifact_errors(tiny_artifact, tmp_path, name, text, message) -> None:  # type: ignore[no-untyped-def]
    copy = tmp_path / "m"
    shutil.copytree(tiny_artifact, copy)
    if isinstance(text, dict):
        text = json.dumps({**json.loads((copy / name).read_text()), **text})
    (copy / name).write_text(text)
    with pytest.raises(ArtifactError, match=message):
        load_artifact(copy)


@pytest.mark.parametrize("missing", ["adapter/adapter_model.safetensors", "adapter/adapter_config.json", "heads.safetensors"])
def test_a_missing_file_is_named(tiny_base_dir, tmp_path, missing) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "lora"
    save_artifact(add_lora(PackedCrossEncoder.from_base(tiny_base_dir)), out, base_path=tiny_base_dir)
    (out / missing).unlink()
    with pytest.raises(ArtifactError, match=f"lacks {missing}"):
        load_artifact(out, base_path=tiny_base_dir)


def test_edited_weights_say_so_rather_than_only_refit(tiny_artifact, tmp_path) -> None:  # type: ignore[no-untyped-def]
    copy = tmp_path / "m"
    shutil.copytree(tiny_artifact, copy)
    data = bytearray((copy / "encoder.safetensors").read_bytes())
    data[-1] ^= 1  # one flipped bit in the weights: the hash the calibration pins no longer matches
    (copy / "encoder.safetensors").write_bytes(bytes(data))
    with pytest.raises(CalibrationMismatchError, match="changed since") as info:
        load_artifact(copy)
    assert artifact_hash(copy) in str(info.value)


def test_a_trained_model_without_calibration_is_refused_unless_the_caller_opts_in(tiny_artifact, tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    import logging

    from controller.local import LocalBackend

    copy = tmp_path / "m"
    shutil.copytree(tiny_artifact, copy)
    (copy / "calibration.json").unlink()
    for load in (lambda: load_artifact(copy), lambda: LocalBackend.load(copy, runtime="torch")):
        with pytest.raises(ArtifactError, match="calibration.json is missing") as info:
            load()
        assert str(copy / "calibration.json") in str(info.value) and "python -m training calibrate" in str(info.value)
    with caplog.at_level(logging.INFO, logger="controller.artifacts"):
        loaded = load_artifact(copy, allow_uncalibrated=True)  # the calibrate stage: the file is about to be fitted
    assert loaded.calibration == Calibration({}, loaded.model_hash) and "calibration.json" in caplog.text


def test_an_uncalibrated_load_that_was_asked_for_is_info_once_per_directory(tiny_artifact, tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    """The calibrate stage loads the model (and each specialist) uncalibrated on purpose, sometimes many times: that
    was a WARNING per load, now INFO once per directory and process, DEBUG after."""
    import logging

    first, second = tmp_path.resolve() / "a", tmp_path.resolve() / "b"
    for copy in (first, second):
        shutil.copytree(tiny_artifact, copy)
        (copy / "calibration.json").unlink()
    with caplog.at_level(logging.DEBUG, logger="controller.artifacts"):
        for copy in (first, first, tmp_path / "a" / ".." / "a", second):
            load_artifact(copy, allow_uncalibrated=True)
    noted = [r for r in caplog.records if "loaded uncalibrated, as asked" in r.getMessage()]
    assert [(r.levelno, Path(r.args[0]).resolve()) for r in noted] == [  # type: ignore[index]
        (logging.INFO, first), (logging.DEBUG, first), (logging.DEBUG, first), (logging.INFO, second)]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "controller.artifacts"]


def test_a_calibration_is_refused_once_states_json_changes_from_what_it_was_fitted_under(tiny_artifact, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from controller.states import StateConventions, write_states

    copy = tmp_path / "m"
    shutil.copytree(tiny_artifact, copy)
    digest = artifact_hash(copy)
    write_states(copy, StateConventions(relevance_dated=True))
    save_calibration(Calibration({"noul": 2.0}, digest), copy / "calibration.json")
    recorded = json.loads((copy / "calibration.json").read_text())["states"]
    assert recorded == {"relevance_context": False, "relevance_dated": True}
    assert load_artifact(copy).calibration.temperatures == {"noul": 2.0}
    for change in (lambda: write_states(copy, StateConventions()), lambda: (copy / "states.json").unlink()):
        change()
        with pytest.raises(CalibrationMismatchError, match="states.json") as info:
            load_artifact(copy)
        assert "python -m training calibrate" in str(info.value)
        assert artifact_hash(copy) == digest  # the weights' identity is untouched: only the calibration is refused
    write_states(copy, StateConventions(relevance_dated=True))
    assert load_artifact(copy).model_hash == digest


def test_calibrations_without_a_states_record_are_not_checked(tiny_artifact, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from controller.states import StateConventions, write_states

    copy = tmp_path / "m"
    shutil.copytree(tiny_artifact, copy)
    assert "states" not in json.loads((copy / "calibration.json").read_text())  # an identity map depends on no rendering
    old = Calibration({"noul": 2.0}, artifact_hash(copy)).to_json()  # a fitted file written before the record existed
    (copy / "calibration.json").write_text(json.dumps(old))
    write_states(copy, StateConventions(relevance_dated=True, relevance_context=True))
    assert load_artifact(copy).calibration.temperatures == {"noul": 2.0}
    (copy / "calibration.json").write_text(json.dumps({**old, "states": {"relevance_dated": "yes"}}))
    with pytest.raises(ArtifactError, match="'states'"):
        load_artifact(copy)


def test_the_committed_model_still_loads_its_calibration_and_keeps_its_hashes() -> None:
    from controller.artifacts import DEFAULT_MODEL_DIR
    from controller.calibration import load_calibration
    from controller.specialists import read_index
    from controller.states import read_states

    if not (DEFAULT_MODEL_DIR / "config.json").exists():
        pytest.skip("no committed model")
    digest = artifact_hash(DEFAULT_MODEL_DIR)
    assert digest.startswith("0aa6e981")
    load_calibration(DEFAULT_MODEL_DIR / "calibration.json", digest, read_states(DEFAULT_MODEL_DIR))
    (entry,) = read_index(DEFAULT_MODEL_DIR).values()
    sub = DEFAULT_MODEL_DIR / entry["path"]
    assert artifact_hash(sub) == entry["artifact_hash"] and entry["artifact_hash"].startswith("28d846f4")
    load_calibration(sub / "calibration.json", entry["artifact_hash"], read_states(DEFAULT_MODEL_DIR))  # its parent's conventions


def test_saving_an_adapter_asks_no_hub_even_when_not_offline(tiny_base_dir, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # peft's save_embedding_layers="auto" asked huggingface.co whether the base named in the adapter has a
    # config.json (the shipped base is named nreimers/MiniLM-L6-H384-uncased): a network call at save time
    # unless HF_HUB_OFFLINE was set, which `python -m training all` run by hand does not set.
    import peft.utils.other as peft_other

    asked: list[tuple[str, str]] = []
    monkeypatch.setattr(peft_other, "file_exists", lambda repo, name, **kw: asked.append((repo, name)) or True)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    model = add_lora(PackedCrossEncoder.from_base(tiny_base_dir))
    for config in model.bert.peft_config.values():
        config.base_model_name_or_path = "nreimers/MiniLM-L6-H384-uncased"  # a hub id, as the installed base's
    save_artifact(model, tmp_path / "lora", ArtifactMeta(name="tiny-lora"), base_path=tiny_base_dir)
    assert asked == [] and (tmp_path / "lora" / "adapter" / "adapter_model.safetensors").exists()
