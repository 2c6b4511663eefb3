"""Crash safety and resume: a stage killed mid-write (simulated by a write or serialise call that raises) leaves the
model directory, the data and the run records as they were, and every interrupted fit resumes.

Each test stops one write of the tiny pipeline of this module and checks that what a later stage or the controller
reads is whole: byte for byte the old files, or a clear error, never a mix of old and new files.
"""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from training.errors import PipelineError
from training.pipeline import run_all, run_stage
from training.pipeline_config import PipelineConfig
from training.trainer import FitConfig


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` (relative path -> bytes)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def siblings(root: Path) -> list[str]:
    """What a stage left beside the model directory (staging or swap leftovers)."""
    return sorted(p.name for p in root.parent.iterdir() if p.name != root.name and root.name in p.name)


class Crash(RuntimeError):
    """The simulated kill."""


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_base):  # type: ignore[no-untyped-def]
    """Data, a 2-step main fit and a 1-step relevance specialist, calibrated: a whole model directory."""
    root = tmp_path_factory.mktemp("crash")
    cfg = PipelineConfig(
        run_dir=str(root / "run"), model_dir=str(root / "model"), base_path=str(tiny_base), synthetic_per_family=24, dense="none",
        fit=FitConfig(steps=2, tokens_per_step=800, checkpoint_every=1, threads=1, lr=5e-3, head_lr=5e-2),
        specialist="relevance", specialist_steps=1, calibration_states=10, progress=False, command="pytest",
    )
    for stage in ("build_data", "fit", "fit_specialist", "calibrate"):
        run_stage(cfg, stage)
    return cfg


@pytest.fixture()
def run(tiny_run, tmp_path):  # type: ignore[no-untyped-def]
    """A copy of the tiny run (run directory with its data, model directory) for one test to break."""
    shutil.copytree(tiny_run.run, tmp_path / "run")
    shutil.copytree(tiny_run.model, tmp_path / "models" / "model")
    return replace(tiny_run, run_dir=str(tmp_path / "run"), model_dir=str(tmp_path / "models" / "model"))


def _half_written(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """`Path.write_text` of a file called `name` writes half its text, then the process 'dies'."""
    original = Path.write_text

    def write_text(self: Path, data: str, *args: Any, **kwargs: Any) -> int:
        if name in self.name:
            original(self, data[: len(data) // 2], *args, **kwargs)
            raise Crash(f"killed while writing {self}")
        return original(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)


# ------------------------------------------------------------------------------------------ the model directory
@pytest.mark.parametrize("where", ["heads", "states"])
def test_a_fit_killed_while_saving_leaves_the_old_model_directory_whole(run, monkeypatch, where) -> None:  # type: ignore[no-untyped-def]
    import safetensors.torch

    import controller.states
    from controller.artifacts import load_artifact
    from controller.specialists import load_specialists

    before = snapshot(run.model)
    if where == "heads":  # the adapter is written, the heads are not
        save_file = safetensors.torch.save_file

        def crash_on_heads(tensors: Any, filename: str, *args: Any, **kwargs: Any) -> None:
            if Path(filename).name.startswith("heads"):
                raise Crash("killed while writing the heads")
            save_file(tensors, filename, *args, **kwargs)

        monkeypatch.setattr(safetensors.torch, "save_file", crash_on_heads)
    else:  # weights, config and calibration written; states.json (not hashed) still the old model's
        monkeypatch.setattr(controller.states, "write_states", lambda *a, **k: (_ for _ in ()).throw(Crash("killed")))
    with pytest.raises(Crash):
        run_stage(replace(run, fit=replace(run.fit, seed=7)), "fit")  # other weights than the model in place
    assert snapshot(run.model) == before  # no file of the new model beside the old ones
    load_artifact(run.model, base_path=run.base_path)  # the old model loads, with its calibration
    assert set(load_specialists(run.model, base_path=run.base_path)) == {"relevance"}
    assert siblings(run.model) == []


def test_a_specialist_fit_killed_before_its_index_is_written_keeps_the_old_specialist(run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import controller.specialists
    from controller.specialists import load_specialists

    before = snapshot(run.model)
    monkeypatch.setattr(controller.specialists, "write_index", lambda *a, **k: (_ for _ in ()).throw(Crash("killed")))
    with pytest.raises(Crash):
        run_stage(replace(run, fit=replace(run.fit, seed=7)), "fit_specialist")
    assert snapshot(run.model) == before
    assert set(load_specialists(run.model, base_path=run.base_path)) == {"relevance"}  # hash and index agree


def test_a_calibrate_that_dies_keeps_the_models_calibration(run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import training.calibrate
    from controller.artifacts import load_artifact

    before = snapshot(run.model)
    assert "calibration.json" in before and "specialists/relevance/calibration.json" in before
    monkeypatch.setattr(training.calibrate, "calibrate_predictions", lambda *a, **k: (_ for _ in ()).throw(Crash("killed")))
    with pytest.raises(Crash):
        run_stage(run, "calibrate")
    assert snapshot(run.model) == before  # not served uncalibrated
    assert load_artifact(run.model, base_path=run.base_path).calibration.temperatures


def test_a_swap_interrupted_between_its_renames_is_rolled_back_by_the_next_stage(run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import os

    import data.paths
    import training.staging

    monkeypatch.setattr(data.paths, "_exchange", lambda a, b: False)  # a system without a one-step exchange
    before = snapshot(run.model)
    renames: list[Any] = []
    rename = os.rename

    def second_rename_dies(src: Any, dst: Any) -> None:
        renames.append((src, dst))
        if len(renames) == 2:  # the old directory is moved aside, the new one not yet moved in
            raise Crash("killed mid-swap")
        rename(src, dst)

    monkeypatch.setattr(data.paths.os, "rename", second_rename_dies)
    with pytest.raises(Crash):
        run_stage(run, "calibrate")
    assert not run.model.exists()  # a reader sees no model directory (a clear error), never a mixed one
    monkeypatch.setattr(data.paths.os, "rename", rename)
    training.staging.recover(run.model)
    assert snapshot(run.model) == before and siblings(run.model) == []


def test_an_embedder_fit_killed_while_saving_leaves_the_old_adapter(tiny_base, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import training.embedder
    from training.embedder import EmbedderFitConfig, fit_embedder

    pairs = [(f"Where did person {i} go?", f"Person {i}: I went to city {i}.") for i in range(6)]
    out = tmp_path / "model" / "embedder"
    fit_embedder(pairs, out, EmbedderFitConfig(lora_r=2, lora_alpha=4, epochs=1, batch_size=6), base=tiny_base)
    before = snapshot(out)
    monkeypatch.setattr(training.embedder, "_portable_config", lambda *a, **k: (_ for _ in ()).throw(Crash("killed")))
    with pytest.raises(Crash):
        fit_embedder(pairs, out, EmbedderFitConfig(lora_r=2, lora_alpha=4, epochs=1, batch_size=6, seed=5), base=tiny_base)
    assert snapshot(out) == before and siblings(out) == []


def test_an_export_that_fails_parity_leaves_no_graph_behind(run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import controller.onnx_export
    from controller.errors import ParityError

    (run.run / "model.onnx").write_bytes(b"the graph of the last export that passed parity")
    monkeypatch.setattr(controller.onnx_export, "check_parity", lambda *a, **k: (_ for _ in ()).throw(ParityError("off by 1", max_abs_diff=1.0, atol=1e-4)))
    with pytest.raises(ParityError):
        run_stage(replace(run, specialist=""), "export")
    assert (run.run / "model.onnx").read_bytes() == b"the graph of the last export that passed parity"
    assert sorted(p.name for p in run.run.glob("*onnx*")) == ["model.onnx"]


# --------------------------------------------------------------------------------------------- records and data
def test_a_run_record_killed_mid_write_keeps_the_old_record(run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    before = (run.run / "stages.json").read_bytes()
    _half_written(monkeypatch, "stages.json")
    with pytest.raises(Crash):
        run_stage(run, "calibrate")
    assert (run.run / "stages.json").read_bytes() == before


def test_the_model_card_and_metrics_killed_mid_write_keep_the_old_ones(run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    before = snapshot(run.model)
    _half_written(monkeypatch, "MODEL_CARD.md")
    with pytest.raises(Crash):
        run_stage(run, "calibrate")
    after = snapshot(run.model)
    assert after["MODEL_CARD.md"] == before["MODEL_CARD.md"]
    json.loads(after["metrics.json"])  # whole (rewritten for the new calibration)


def test_a_torn_run_record_is_a_clear_error(run) -> None:  # type: ignore[no-untyped-def]
    (run.run / "stages.json").write_text('{"fit": {"seconds": 1', encoding="utf-8")  # from a crash of older code
    with pytest.raises(PipelineError, match="stages.json"):
        run_stage(run, "calibrate")


def test_a_data_build_killed_before_its_summary_keeps_the_old_build(run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import json as json_module

    before = snapshot(run.data)
    dumps = json_module.dumps

    def crash_on_summary(value: Any, *args: Any, **kwargs: Any) -> str:
        if isinstance(value, dict) and "dropped_for_leakage" in value:
            raise Crash("killed while writing summary.json")
        return dumps(value, *args, **kwargs)

    monkeypatch.setattr(json_module, "dumps", crash_on_summary)
    with pytest.raises(Crash):
        run_stage(replace(run, fit=replace(run.fit, seed=4)), "build_data")  # another seed: other splits
    monkeypatch.setattr(json_module, "dumps", dumps)
    assert snapshot(run.data) == before  # never new splits beside the old build's summary (its rules, its counts)


# ------------------------------------------------------------------------------------------------------ resume
@pytest.fixture(scope="module")
def toy(toy_examples, tokenizer):  # type: ignore[no-untyped-def]
    from training.sampling import prepare_requests

    return prepare_requests([e for e in toy_examples if e.split == "train"], tokenizer, seed=0)[0]


FAST = dict(tokens_per_step=700, lr=5e-3, head_lr=5e-2, threads=1, warmup=0.1)


def test_resume_after_a_kill_mid_log_line_drops_the_torn_line(_tiny_model, toy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from training.fit_log import read_log
    from training.trainer import fit

    config = FitConfig(steps=4, checkpoint_every=2, **FAST)
    fit(copy.deepcopy(_tiny_model), toy, config, tmp_path, progress=False)
    (tmp_path / "checkpoints" / "step-0000004.pt").unlink()  # killed during step 5 of a longer run ...
    with (tmp_path / "train_log.jsonl").open("a", encoding="utf-8") as handle:
        handle.write('{"step": 5, "loss": 0.7')  # ... while its log line was being written
    _, result = fit(copy.deepcopy(_tiny_model), toy, config, tmp_path, resume=True, progress=False)
    assert result.resumed_from == 2 and result.steps_done == 4
    assert [e["step"] for e in read_log(tmp_path / "train_log.jsonl")] == [1, 2, 3, 4]


def _fit_and_weights(model: Any, toy: Any, config: FitConfig, run_dir: Path, **kw: Any) -> tuple[Any, dict[str, Any]]:
    from training.trainer import fit

    fitted, result = fit(copy.deepcopy(model), toy, config, run_dir, progress=False, **kw)
    return result, {n: p.detach().clone() for n, p in fitted.named_parameters() if p.requires_grad}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and max(float((a[n] - b[n]).abs().max()) for n in a) < 1e-6


def test_resume_falls_back_past_a_truncated_latest_checkpoint(_tiny_model, toy, tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    config = FitConfig(steps=4, checkpoint_every=2, **FAST)  # the default keeps two checkpoints: one to fall back to
    _, full = _fit_and_weights(_tiny_model, toy, config, tmp_path)
    folder = tmp_path / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["step-0000002.pt", "step-0000004.pt"]
    latest = folder / "step-0000004.pt"
    latest.write_bytes(latest.read_bytes()[: latest.stat().st_size // 2])  # a disk fault, a copy cut short
    with caplog.at_level("WARNING", logger="training.checkpoints"):
        result, resumed = _fit_and_weights(_tiny_model, toy, config, tmp_path, resume=True)
    assert result.resumed_from == 2 and result.steps_done == 4 and _same(resumed, full)  # not step 0, not a crash
    assert "step-0000004.pt" in caplog.text and "skipping" in caplog.text
    assert sorted(p.name for p in folder.iterdir()) == ["step-0000002.pt", "step-0000004.pt", "step-0000004.pt.unreadable"]


def test_resume_with_no_readable_checkpoint_starts_from_step_0_with_the_model_untouched(_tiny_model, toy, tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    import torch

    config = FitConfig(steps=4, checkpoint_every=2, **FAST)
    _, full = _fit_and_weights(_tiny_model, toy, config, tmp_path)
    folder = tmp_path / "checkpoints"
    (folder / "step-0000002.pt").write_bytes(b"")
    state = torch.load(folder / "step-0000004.pt", weights_only=True)
    state["optimizer"]["state"][0]["exp_avg"] = torch.zeros(3)  # the weights load, then the optimizer state does not fit
    torch.save(state, folder / "step-0000004.pt")
    with caplog.at_level("WARNING"):
        result, fresh = _fit_and_weights(_tiny_model, toy, config, tmp_path, resume=True)
    assert result.resumed_from == 0 and result.steps_done == 4
    assert _same(fresh, full)  # the half-loaded step-4 weights were put back before the fit began again
    assert "step-0000002.pt" in caplog.text and "step-0000004.pt" in caplog.text and "starts from step 0" in caplog.text


def test_make_train_resumes_when_the_kill_came_before_the_specialists_fit(run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import training.pipeline

    for stage in ("calibrate", "evaluate", "export"):  # not what this test is about: quick stand-ins
        monkeypatch.setitem(training.pipeline._RUNNERS, stage, lambda cfg: {})
    shutil.rmtree(run.run / "fit-relevance")  # the main fit was killed: no specialist checkpoint yet
    (run.run / "fit" / "checkpoints" / "step-0000002.pt").unlink()
    run_all(run, skip_data=True, resume=True)
    stages = json.loads((run.run / "stages.json").read_text())
    assert stages["fit"]["resumed_from"] == 1 and stages["fit_specialist"]["resumed_from"] == 0


def _cli(run: PipelineConfig, *extra: str) -> list[str]:
    return ["fit", "--run-dir", str(run.run), "--model-dir", str(run.model), "--data-dir", str(run.data), "--base", str(run.base_path),
            "--steps", "4", "--checkpoint-every", "2", "--tokens-per-step", "800", "--threads", "1", "--no-progress", *extra]


def test_ctrl_c_during_a_fit_is_a_message_exit_code_130_and_a_resumable_checkpoint(run, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    import training.trainer
    from training.__main__ import main
    from training.checkpoints import latest_checkpoint

    before = snapshot(run.model)
    lr_factor = training.trainer.lr_factor

    def interrupted_at_step_3(step: int, config: FitConfig) -> float:
        if step == 3:
            raise KeyboardInterrupt
        return lr_factor(step, config)

    monkeypatch.setattr(training.trainer, "lr_factor", interrupted_at_step_3)
    try:
        code = main(_cli(run))
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C during a fit escaped as a KeyboardInterrupt traceback")
    err = capsys.readouterr().err
    assert code == 130 and "interrupted" in err and "--resume" in err and "step 2" in err
    assert "Traceback" not in err
    assert latest_checkpoint(run.run / "fit").name == "step-0000002.pt"
    assert snapshot(run.model) == before  # the model directory is the old one until a fit finishes
    monkeypatch.setattr(training.trainer, "lr_factor", lr_factor)
    assert main(_cli(run, "--resume")) == 0
    assert json.loads((run.run / "fit" / "fit_result.json").read_text())["resumed_from"] == 2


# ----------------------------------------------------------------------------------------------------- teacher
def test_a_teacher_run_killed_inside_a_multibyte_character_resumes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import httpx2

    from data.schema import DecisionExample, read_jsonl
    from data.teacher import distill, teacher_id
    from tests.training.test_teacher import NOUL, FakeTeacher, _config

    examples = [DecisionExample(f"s{s}", "typing", "q", {"observation": f"Zoë ran {s} km 🏃"}, NOUL, 1.0, "synthetic:t",
                                f"synthetic:t:0:{s}", "train") for s in range(3)]
    out = tmp_path / "teacher.jsonl"
    distill(examples[:2], out, _config(), transport=httpx2.MockTransport(FakeTeacher()), progress=False)
    torn = (teacher_id("open7b", "s2") + '", "state": {"observation": "Zoë ran 2 km 🏃').encode()
    with out.open("ab") as handle:
        handle.write(b'{"id": "' + torn[:-2])  # the kill cut the runner emoji's four bytes
    report = distill(examples, out, _config(), transport=httpx2.MockTransport(FakeTeacher()), progress=False)
    assert report.skipped == 2 and report.written == 1
    ids = [r.id for r in read_jsonl(out)]
    assert sorted(ids) == sorted(teacher_id("open7b", e.id) for e in examples)  # no duplicate, nothing lost


@pytest.mark.parametrize("stage", ["fit", "fit_specialist", "calibrate", "fit_embedder"])
def test_a_model_directory_that_cannot_be_replaced_is_refused_before_the_stage_works(run, monkeypatch, stage) -> None:  # type: ignore[no-untyped-def]
    """A mount point (or an unwritable parent) was found only at the swap, after the fit: now before anything runs."""
    import os

    import training.pipeline

    before = snapshot(run.model)
    worked: list[str] = []
    monkeypatch.setitem(training.pipeline._RUNNERS, stage, lambda cfg, **kw: worked.append(stage) or {})
    monkeypatch.setattr(os.path, "ismount", lambda path: Path(path) == run.model.absolute())
    with pytest.raises(PipelineError, match="mount point"):
        run_stage(run, stage)
    assert worked == [] and snapshot(run.model) == before
    monkeypatch.setattr(os.path, "ismount", lambda path: False)
    run_stage(run, stage)  # the same stage once the directory can be replaced
    assert worked == [stage]


def test_a_run_directory_that_is_a_file_is_a_message_not_a_traceback(run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory\n", encoding="utf-8")
    for run_dir in (blocker, blocker / "x"):
        with pytest.raises(PipelineError, match="cannot use the run directory"):
            run_stage(replace(run, run_dir=str(run_dir)), "calibrate")
        with pytest.raises(PipelineError, match="cannot use the run directory"):
            run_all(replace(run, run_dir=str(run_dir)), skip_data=True)
    assert blocker.read_text(encoding="utf-8") == "not a directory\n"


@pytest.mark.parametrize("name", ["stages.json", "pipeline_config.json"])
@pytest.mark.parametrize("text", ["[1]", '"x"', "3"])
def test_a_run_record_that_is_not_an_object_stops_the_stage_before_it_works(run, monkeypatch, name, text) -> None:  # type: ignore[no-untyped-def]
    """Before: `[1]` in stages.json parsed, so the early check passed, and the stage crashed with a TypeError when it
    recorded its result, after its work (a fit: after the model was swapped in)."""
    import training.pipeline

    worked: list[str] = []
    monkeypatch.setitem(training.pipeline._RUNNERS, "fit", lambda cfg, **kw: worked.append("fit") or {})
    (run.run / name).write_text(text, encoding="utf-8")
    with pytest.raises(PipelineError, match="is not a JSON object"):
        run_stage(run, "fit")
    assert worked == []


def test_a_fit_on_an_empty_training_split_is_a_message(run) -> None:  # type: ignore[no-untyped-def]
    (run.data / "train.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(PipelineError, match="holds no training examples"):
        run_stage(run, "fit")


def test_make_train_with_a_bad_base_stops_before_the_data_build(run, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import training.pipeline
    from training.errors import TrainingError

    built: list[str] = []
    monkeypatch.setitem(training.pipeline._RUNNERS, "build_data", lambda cfg, **kw: built.append("data") or {})
    empty = tmp_path / "empty-base"
    empty.mkdir()
    for base in (tmp_path / "nowhere", empty):
        with pytest.raises(TrainingError, match="--base"):
            run_all(replace(run, base_path=str(base)))
    assert built == []
