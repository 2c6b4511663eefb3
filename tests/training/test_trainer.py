from __future__ import annotations

import copy
import json
import shutil

import pytest
import torch

from training.errors import CheckpointError, TrainingError
from training.sampling import collate, label_tensors, prepare_requests
from training.checkpoints import latest_checkpoint
from training.trainer import FitConfig, fit, lr_factor, resolve_device

FAST = dict(tokens_per_step=700, lr=5e-3, head_lr=5e-2, threads=1, warmup=0.1)


@pytest.fixture(scope="module")
def toy(toy_examples, tokenizer):  # type: ignore[no-untyped-def]
    train = [e for e in toy_examples if e.split == "train"]
    requests, report = prepare_requests(train, tokenizer, noul_as_choice_rate=0.2, seed=0)
    assert report.augmented > 0 and report.skipped_too_long == 0
    return requests


def _mean_nll(model, requests) -> float:  # type: ignore[no-untyped-def]
    step = collate(requests)
    from training.losses import DecisionLoss

    with torch.inference_mode():
        flat = torch.cat([model(**{k: torch.from_numpy(v) for k, v in b.arrays().items()}).reshape(-1) for b in step.batches])
        return float(DecisionLoss(model)(flat, label_tensors(step)).total)  # type: ignore[arg-type]


def test_a_few_steps_reduce_the_loss(tiny_model, toy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    probe = toy[:40]
    before = _mean_nll(tiny_model, probe)
    model, result = fit(tiny_model, toy, FitConfig(steps=25, checkpoint_every=25, **FAST), tmp_path, progress=False)
    after = _mean_nll(model, probe)
    assert after < before - 0.02, (before, after)
    assert result.completed and result.steps_done == 25 and result.labels_seen > 0
    assert result.trainable_parameters < result.total_parameters / 10
    log = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log] == list(range(1, 26))
    assert (tmp_path / "loss.png").stat().st_size > 1000


def test_resume_reproduces_the_uninterrupted_run(_tiny_model, toy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = FitConfig(steps=6, checkpoint_every=3, keep_checkpoints=5, npair_fraction=0.3, **FAST)
    full, _ = fit(copy.deepcopy(_tiny_model), toy, config, tmp_path / "a", progress=False)
    # an interrupted run: only the step-3 checkpoint survives; a fresh model continues from it
    (tmp_path / "b" / "checkpoints").mkdir(parents=True)
    shutil.copy(tmp_path / "a" / "checkpoints" / "step-0000003.pt", tmp_path / "b" / "checkpoints")
    resumed, result = fit(copy.deepcopy(_tiny_model), toy, config, tmp_path / "b", resume=True, progress=False)
    assert result.resumed_from == 3 and result.steps_done == 6
    a = {n: p.detach() for n, p in full.named_parameters() if p.requires_grad}
    b = {n: p.detach() for n, p in resumed.named_parameters() if p.requires_grad}
    assert a.keys() == b.keys()
    assert max(float((a[n] - b[n]).abs().max()) for n in a) < 1e-6
    moved = {n: p.detach() for n, p in copy.deepcopy(_tiny_model).named_parameters() if n.startswith("heads.")}
    assert float((a["heads.weight"] - moved["heads.weight"]).abs().max()) > 1e-4  # it did train


def test_resume_refuses_a_checkpoint_of_another_configuration(_tiny_model, toy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    fit(copy.deepcopy(_tiny_model), toy, FitConfig(steps=2, checkpoint_every=2, **FAST), tmp_path, progress=False)
    assert latest_checkpoint(tmp_path) is not None
    with pytest.raises(CheckpointError, match="another training configuration"):
        fit(copy.deepcopy(_tiny_model), toy, FitConfig(steps=2, checkpoint_every=2, seed=9, **FAST), tmp_path, resume=True, progress=False)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        fit(copy.deepcopy(_tiny_model), toy, FitConfig(steps=2, **FAST), tmp_path / "empty", resume=True, progress=False)


def test_fit_config_validates_and_round_trips() -> None:
    config = FitConfig(steps=10, lr=1e-3)
    assert FitConfig.from_json(json.loads(json.dumps(config.to_json()))) == config
    assert config.fingerprint() == FitConfig(steps=10, lr=1e-3, threads=1, checkpoint_every=3).fingerprint()
    assert config.fingerprint() != FitConfig(steps=11, lr=1e-3).fingerprint()
    assert config.fingerprint() == FitConfig(steps=10, lr=1e-3, device="cpu").fingerprint()  # a run resumes on another device
    assert config.fingerprint() != FitConfig(steps=10, lr=1e-3, lora_layers=3).fingerprint()
    assert config.fingerprint() != FitConfig(steps=10, lr=1e-3, precision="bf16").fingerprint()
    assert config.fingerprint() == "761199d3496407f5"  # fields added since keep their defaults out: earlier runs still resume
    for bad in (dict(steps=0), dict(lora_layers=-1), dict(lr=0.0), dict(npair_fraction=1.5), dict(weight_decay=-1.0), dict(device="tpu"),
                dict(device="cuda:x"), dict(precision="fp16")):
        with pytest.raises(ValueError):
            FitConfig(**bad)  # type: ignore[arg-type]


def test_a_bf16_fit_trains_resumes_exactly_and_keeps_float32_weights(_tiny_model, toy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    probe = toy[:40]
    before = _mean_nll(_tiny_model, probe)
    config = FitConfig(steps=25, checkpoint_every=10, keep_checkpoints=5, precision="bf16", **FAST)
    full, result = fit(copy.deepcopy(_tiny_model), toy, config, tmp_path / "a", progress=False)
    assert result.completed and _mean_nll(full, probe) < before - 0.02
    assert {p.dtype for p in full.parameters()} == {torch.float32}  # autocast leaves the master weights alone
    fp32, _ = fit(copy.deepcopy(_tiny_model), toy, FitConfig(steps=25, checkpoint_every=25, **FAST), tmp_path / "fp32", progress=False)
    assert float((full.heads.weight - fp32.heads.weight).detach().abs().max()) > 1e-5  # the forward did run in bf16
    (tmp_path / "b" / "checkpoints").mkdir(parents=True)
    shutil.copy(tmp_path / "a" / "checkpoints" / "step-0000010.pt", tmp_path / "b" / "checkpoints")
    resumed, again = fit(copy.deepcopy(_tiny_model), toy, config, tmp_path / "b", resume=True, progress=False)
    assert again.resumed_from == 10
    a = {n: p.detach() for n, p in full.named_parameters() if p.requires_grad}
    b = {n: p.detach() for n, p in resumed.named_parameters() if p.requires_grad}
    assert max(float((a[n] - b[n]).abs().max()) for n in a) < 1e-6
    with pytest.raises(CheckpointError, match="another training configuration"):  # an fp32 run does not pick up bf16 state
        fit(copy.deepcopy(_tiny_model), toy, FitConfig(steps=25, checkpoint_every=10, **FAST), tmp_path / "b", resume=True, progress=False)


def test_learning_rate_warms_up_then_decays_to_zero() -> None:
    config = FitConfig(steps=100, warmup=0.1)
    factors = [lr_factor(s, config) for s in range(1, 101)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert factors[-1] == 0.0 and all(a >= b for a, b in zip(factors[9:], factors[10:]))


def test_device_auto_falls_back_to_cpu_and_cuda_is_refused_without_a_gpu(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu") and resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="no CUDA GPU") as info:
        resolve_device("cuda:0")
    assert isinstance(info.value, TrainingError)  # `--device cuda` on a CPU machine: a message, exit status 2


def test_a_file_that_is_not_a_fit_checkpoint_is_a_checkpoint_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from training.checkpoints import load_checkpoint

    for content in ([1, 2], {"step": 3}):  # the list was an AttributeError traceback
        torch.save(content, tmp_path / "step-0000003.pt")
        with pytest.raises(CheckpointError, match="is not a fit checkpoint"):
            load_checkpoint(tmp_path / "step-0000003.pt", None, None, FitConfig(), "data")


def test_label_tensors_move_whole(toy) -> None:  # type: ignore[no-untyped-def]
    labels = label_tensors(collate(toy[:12]))
    moved = labels.to("cpu")
    for name in labels.__dataclass_fields__:
        assert torch.equal(getattr(moved, name), getattr(labels, name)), name


@pytest.mark.gpu
def test_a_fit_on_the_gpu_trains_and_returns_a_cpu_model(_tiny_model, toy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    probe = toy[:40]
    before = _mean_nll(_tiny_model, probe)
    model, result = fit(copy.deepcopy(_tiny_model), toy, FitConfig(steps=25, checkpoint_every=25, device="cuda", **FAST), tmp_path, progress=False)
    assert next(model.parameters()).device.type == "cpu"  # ready to save and export
    assert result.completed and _mean_nll(model, probe) < before - 0.02


def test_a_fresh_fit_discards_the_checkpoints_of_an_earlier_run(_tiny_model, toy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # an earlier, longer run left checkpoints 2 and 4; a new run in the same directory must neither have its own
    # checkpoints pruned as "older" nor leave --resume to pick up the earlier run's weights
    fit(copy.deepcopy(_tiny_model), toy, FitConfig(steps=4, checkpoint_every=2, **FAST), tmp_path, progress=False)
    config = FitConfig(steps=2, checkpoint_every=1, seed=5, **FAST)
    fit(copy.deepcopy(_tiny_model), toy, config, tmp_path, progress=False)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-0000001.pt", "step-0000002.pt"]
    _, result = fit(copy.deepcopy(_tiny_model), toy, config, tmp_path, resume=True, progress=False)
    assert result.resumed_from == 2 and result.steps_done == 2


def test_resume_refuses_a_checkpoint_fitted_on_other_data(_tiny_model, toy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = FitConfig(steps=4, checkpoint_every=2, **FAST)
    fit(copy.deepcopy(_tiny_model), toy, config, tmp_path, progress=False)
    (tmp_path / "checkpoints" / "step-0000004.pt").unlink()  # interrupted after step 2
    with pytest.raises(CheckpointError, match="other training data"):  # the data were rebuilt in between
        fit(copy.deepcopy(_tiny_model), toy[: len(toy) // 2], config, tmp_path, resume=True, progress=False)
    recorded = json.loads((tmp_path / "fit_config.json").read_text())
    assert recorded == config.to_json()  # a refused resume leaves the run's record as it was


def test_a_refused_resume_keeps_the_runs_fit_config(_tiny_model, toy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = FitConfig(steps=2, checkpoint_every=2, **FAST)
    fit(copy.deepcopy(_tiny_model), toy, config, tmp_path, progress=False)
    with pytest.raises(CheckpointError):
        fit(copy.deepcopy(_tiny_model), toy, FitConfig(steps=2, checkpoint_every=2, seed=9, **FAST), tmp_path, resume=True, progress=False)
    assert json.loads((tmp_path / "fit_config.json").read_text()) == config.to_json()
