"""`python -m training` misused: bad flag values, paths that are something else, cut-short data, a resume with other
settings. Each is one line on stderr naming the flag or file and exit code 2 (1 for a system error no check
foresaw), never a traceback, and every directory the command was given is left as it was.

Nothing here fits a real model: the stages are refused before they work (or stand-ins record that they ran).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from training.trainer import FitConfig


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` (relative path -> bytes); {} when it does not exist."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()} if root.exists() else {}


def _main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    from training.__main__ import main

    code = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small synthetic data build (every split file whole)."""
    from training.__main__ import main

    out = tmp_path_factory.mktemp("misuse") / "data"
    assert main(["build-data", "--out", str(out), "--synthetic-per-family", "8", "--dense", "none"]) == 0
    return out


@pytest.fixture()
def dirs(tmp_path: Path, data: Path, tiny_base: Path) -> list[str]:
    """--run-dir / --model-dir (both new), --data-dir (the module's build) and --base (the tiny model)."""
    return ["--run-dir", str(tmp_path / "run"), "--model-dir", str(tmp_path / "model"), "--data-dir", str(data),
            "--base", str(tiny_base), "--threads", "1", "--no-progress"]


# --------------------------------------------------------------------------------------------------- flag values
@pytest.mark.parametrize("argv, message", [
    # fast dropout refused p = 1 inside the fit: a ValueError traceback after the data was prepared
    (["fit", "--lora-dropout", "1"], "--lora-dropout must be < 1 (1 drops every activation), got 1.0"),
    (["fit", "--attention-dropout", "1.0"], "--attention-dropout must be < 1"),
    # negative state counts were taken as "all" without a word
    (["evaluate", "--eval-states", "-1"], "--eval-states must be >= 0, got -1"),
    (["calibrate", "--calibration-states", "-2"], "--calibration-states must be >= 0, got -2"),
    (["evaluate", "--robust-states", "-1"], "--robust-states must be >= 0, got -1"),
    (["evaluate", "--npair-states", "-3"], "--npair-states must be >= 0, got -3"),
    # more LoRA layers than the base has: peft's ValueError traceback after the data was tokenized
    (["fit", "--lora-layers", "3"], "--lora-layers 3: the base model has 2 encoder layers"),
    (["fit-specialist", "--specialist", "relevance", "--specialist-lora-layers", "5"], "--specialist-lora-layers 5: the base model has 2 encoder layers"),
    # an empty build: the data directory was replaced by no data, then the fit said "run build-data first"
    (["all", "--synthetic-per-family", "0"], "--synthetic-per-family 0 without --locomo or --include"),
])
def test_bad_flag_values_are_refused_before_anything_runs(argv: list[str], message: str, dirs: list[str], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    if argv[0] == "all":  # its own data directory (the default, under the run directory), not the module's
        dirs = [d for i, d in enumerate(dirs) if "--data-dir" not in (d, dirs[i - 1])]
    code, err = _main(capsys, *argv, *dirs)
    assert code == 2 and message in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists() and not (tmp_path / "model").exists()


# ------------------------------------------------------------------------------------------------------- --base
def _bad_base(kind: str, tiny_base: Path, root: Path) -> Path:
    if kind == "a file":
        (root / "base").write_text("not a model\n", encoding="utf-8")
        return root / "base"
    base = root / "base"
    shutil.copytree(tiny_base, base)
    if kind == "torn config.json":
        (base / "config.json").write_text('{"hidden_size": 32, ', encoding="utf-8")
    elif kind == "not a BERT config":
        (base / "config.json").write_text('{"hidden_size": 32}', encoding="utf-8")
    else:  # cut weights
        weights = base / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return base


@pytest.mark.parametrize("kind", ["a file", "torn config.json", "not a BERT config", "cut weights"])
def test_a_base_that_is_not_a_model_is_named_before_the_fit(kind: str, dirs: list[str], tiny_base: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Each was a traceback (the tokenizer's, json's, transformers', safetensors') once the fit stage loaded it."""
    base = _bad_base(kind, tiny_base, tmp_path)
    code, err = _main(capsys, "fit", "--steps", "1", *dirs, "--base", str(base))
    assert code == 2 and f"--base {base}" in err
    assert not (tmp_path / "model").exists() and not (tmp_path / "run").exists()


# -------------------------------------------------------------------------------------------------- --model-dir
@pytest.mark.parametrize("stage", ["fit", "fit-specialist", "calibrate"])
@pytest.mark.parametrize("what", ["a base model", "a base model with its README", "a transformers config.json", "another directory"])
def test_a_model_dir_that_is_something_else_is_left_as_it_was(stage: str, what: str, dirs: list[str], tiny_base: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`fit --model-dir <the base>` exited 0 having replaced the base's config.json with the model's (and mixed the
    model's files into any directory); fit-specialist wrote a card and metrics into it; calibrate named its
    staging copy. The documentation a model directory may keep (README.md) does not let a base model through."""
    target = tmp_path / "target"
    if what.startswith("a base model"):
        shutil.copytree(tiny_base, target)
        if what.endswith("README"):
            (target / "README.md").write_text("# a base model card\n", encoding="utf-8")
    elif what == "a transformers config.json":  # nothing but what a model directory may hold: its config.json says what it is
        target.mkdir()
        shutil.copy(tiny_base / "config.json", target / "config.json")
        (target / "README.md").write_text("# a base model card\n", encoding="utf-8")
    else:
        target.mkdir()
        (target / "notes.txt").write_text("mine\n", encoding="utf-8")
    before = snapshot(target)
    code, err = _main(capsys, stage, "--steps", "1", "--tokens-per-step", "500", *dirs, "--model-dir", str(target))
    assert code == 2 and f"--model-dir {target} holds" in err
    assert snapshot(target) == before and not (tmp_path / "run").exists()


# What users keep beside a model: documentation, licences, version control's and the desktop's files.
KEPT = {"README.md": b"# our controller\n", "readme.txt": b"notes\n", "CHANGES.md": b"- v2\n", "LICENSE": b"MIT\n",
        "NOTICE": b"(c)\n", ".gitattributes": b"*.safetensors filter=lfs\n", ".gitignore": b"*.tmp\n", ".DS_Store": b"\0\1"}


def test_foreign_model_dir_lets_documentation_through_and_nothing_else(tmp_path: Path) -> None:
    from training.pipeline_checks import foreign_model_dir

    for name, content in KEPT.items():
        (tmp_path / name).write_bytes(content)
    assert foreign_model_dir(tmp_path) is None
    for other in ("model.safetensors", "pytorch_model.bin", "tokenizer.json", "vocab.txt", "notes.txt"):
        (tmp_path / other).write_bytes(b"x")
        assert f"holds {other}," in str(foreign_model_dir(tmp_path))
        (tmp_path / other).unlink()
    (tmp_path / "docs.md").mkdir()  # the names are of files: a folder so named is something else
    assert "holds docs.md," in str(foreign_model_dir(tmp_path))


def test_documentation_in_the_model_dir_is_accepted_and_kept_by_fit_and_calibrate(dirs: list[str], tmp_path: Path,
                                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A README.md beside the model was refused as a foreign file by fit and calibrate. Each stage writes a copy of
    the directory that replaces it (`training.staging`): the copy carries the files over."""
    model = tmp_path / "model"
    model.mkdir()
    for name, content in KEPT.items():
        (model / name).write_bytes(content)
    stages = [("fit", "--steps", "1", "--tokens-per-step", "500"),
              ("fit-specialist", "--specialist", "relevance", "--specialist-steps", "1", "--tokens-per-step", "500"),
              ("calibrate",)]
    for stage, *flags in stages:
        code, err = _main(capsys, stage, *dirs, *flags)
        assert code == 0, err
        assert {name: (model / name).read_bytes() for name in KEPT} == KEPT, stage
    assert (model / "config.json").exists() and (model / "specialists" / "relevance").is_dir() and (model / "calibration.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "run"]  # no staging copy or old directory left beside it


@pytest.mark.parametrize("flag, other", [("--model-dir", "--run-dir"), ("--model-dir", "--data-dir"), ("--model-dir", "--base"),
                                         ("--data-dir", "--run-dir")])
def test_two_flags_naming_one_directory_are_refused(flag: str, other: str, dirs: list[str], tiny_base: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A model directory given as the run, data or base directory took the model's files into it (exit 0)."""
    shared = tmp_path / "shared"
    if other == "--base":
        shutil.copytree(tiny_base, shared)  # a copy: the session's tiny base must survive a regression
    elif other == "--data-dir":
        shutil.copytree(Path(dirs[dirs.index("--data-dir") + 1]), shared)
    else:
        shared.mkdir()
    before = snapshot(shared)
    code, err = _main(capsys, "fit", "--steps", "1", *dirs, flag, str(shared), other, str(shared))
    assert code == 2 and "name the same directory" in err and flag in err and other in err
    assert snapshot(shared) == before


# ----------------------------------------------------------------------------------------------- --specialist-*
@pytest.mark.parametrize("argv, named", [
    (["fit", "--specialist-steps", "300"], "--specialist-steps given"),
    (["all", "--specialist-lora-layers", "2"], "--specialist-lora-layers given"),
    (["calibrate", "--specialist-max-minutes", "5"], "--specialist-max-minutes given"),
    (["evaluate", "--specialist-sources", "locomo"], "--specialist-sources given"),
    (["export", "--specialist-steps", "1000"], "--specialist-steps given"),  # the default's value, typed: given all the same
    (["fit", "--specialist-st", "3"], "--specialist-steps given"),  # an abbreviation
    (["fit-specialist", "--specialist-sources", "locomo", "--specialist-steps", "3"],
     "--specialist-steps, --specialist-sources given without --specialist: they have no effect; without --specialist, "
     "fit-specialist removes the model directory's specialist; add --specialist relevance or drop them"),
])
def test_specialist_flags_without_a_specialist_are_refused_before_anything_runs(argv: list[str], named: str, dirs: list[str], tmp_path: Path,
                                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """They were ignored without a word (exit 0); fit-specialist then removed the model directory's specialist."""
    code, err = _main(capsys, *argv, *dirs)
    assert code == 2 and named in err and "add --specialist relevance or drop" in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists() and not (tmp_path / "model").exists()


def test_specialist_flags_with_a_specialist_and_make_train_are_accepted() -> None:
    import argparse
    import re
    import shlex

    from training.cli import add_parser, config_from_args

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    for stage in ("fit", "fit-specialist", "calibrate", "evaluate", "export", "all"):
        cfg = config_from_args(parser.parse_args([stage, "--specialist", "relevance", "--specialist-steps", "3", "--specialist-sources", "locomo"]))
        assert (cfg.specialist, cfg.specialist_steps, cfg.specialist_sources) == ("relevance", 3, ("locomo",))
    assert config_from_args(parser.parse_args(["fit-specialist"])).specialist == ""  # no flag of its own: removes the specialist
    # the shipped recipe's line, its make variables at their defaults
    recipe = re.search(r"^train:.*?\n((?:\t.*\n)+)", (Path(__file__).parents[2] / "Makefile").read_text(encoding="utf-8"), re.M)
    assert recipe is not None
    line = re.sub(r"\$\(or \$\(\w+\),([^)]*)\)", r"\1", recipe.group(1).replace("\\\n", " ")).replace("$(TRAIN_ARGS)", "")
    argv = shlex.split(line.partition("-m training ")[2])
    assert argv[0] == "all" and "--specialist-steps" in argv
    cfg = config_from_args(parser.parse_args(argv))
    assert cfg.specialist == "relevance" and cfg.specialist_steps == 700 and cfg.specialist_lora_layers == 3
    # `make train TRAIN_ARGS="--specialist ''"`: no specialist, said explicitly, with the recipe's flags still there
    assert config_from_args(parser.parse_args([*argv, "--specialist", ""])).specialist == ""


# ------------------------------------------------------------------------------------------------------ --data-dir
@pytest.mark.parametrize("cut", [1, 40])
def test_a_split_file_cut_short_is_named_not_read_without_its_last_record(cut: int, data: Path, dirs: list[str], tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A copy cut inside a record: the torn last line was dropped without a word and the fit ran on the rest."""
    cut_data = tmp_path / "cut"
    shutil.copytree(data, cut_data)
    train = cut_data / "train.jsonl"
    train.write_bytes(train.read_bytes()[:-cut])
    code, err = _main(capsys, "fit", "--steps", "1", *dirs, "--data-dir", str(cut_data))
    assert code == 2 and f"{train} ends inside a record" in err
    assert not (tmp_path / "model").exists() and not (tmp_path / "run" / "fit").exists()


# ------------------------------------------------------------------------------------------------------- resume
# The run's own flags (RUN_FIT: those a fit stage alone takes); a test adds the ones it changes after them
# (argparse: the last one wins).
RUN_FIT = ["--steps", "4", "--specialist", "relevance", "--specialist-steps", "2"]
RUN = [*RUN_FIT, "--synthetic-per-family", "8", "--dense", "none"]


@pytest.fixture()
def resumable(tmp_path: Path, data: Path, tiny_base: Path) -> list[str]:
    """A run killed during its fits: its recipe, data, and a checkpoint of each fit with the settings it recorded."""
    import argparse

    from training.cli import add_parser, config_from_args
    from training.pipeline_stages import fit_dir
    from training.specialist import specialist_fit_config

    run = tmp_path / "run"
    shutil.copytree(data, run / "data")
    dirs = ["--run-dir", str(run), "--model-dir", str(tmp_path / "model"), "--base", str(tiny_base), "--threads", "1", "--no-progress"]
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    cfg = config_from_args(parser.parse_args(["all", *dirs, *RUN]))
    (run / "pipeline_config.json").write_text(json.dumps(cfg.to_json()), encoding="utf-8")
    special = specialist_fit_config(cfg.fit, steps=cfg.specialist_steps, lora_layers=cfg.specialist_lora_layers,
                                    max_minutes=cfg.specialist_max_minutes)
    for stage, config in (("fit", cfg.fit), ("fit_specialist", special)):
        (fit_dir(cfg, stage) / "checkpoints").mkdir(parents=True)
        (fit_dir(cfg, stage) / "fit_config.json").write_text(json.dumps(config.to_json()), encoding="utf-8")
        (fit_dir(cfg, stage) / "checkpoints" / "step-0000002.pt").write_bytes(b"a checkpoint")
    return dirs


@pytest.mark.parametrize("argv, message", [
    # all --resume rewrote the recipe and rebuilt the data before the fit refused its checkpoints
    (["all", "--resume", "--lr", "0.002"], "the checkpoints under {run}/fit were written with other settings: --lr 0.002 (was 0.001)"),
    (["all", "--resume", "--specialist-steps", "3"], "{run}/fit-relevance were written with other settings: --specialist-steps 3 (was 2)"),
    # ... and replaced the data the checkpoints were fitted on, which the fit then refused
    (["all", "--resume", "--synthetic-per-family", "9"], "--resume would rebuild the data the checkpoints were fitted on with other settings: "
                                                         "--synthetic-per-family 9 (was 8)"),
    # a fit stage alone prepared its data first, and named no setting
    (["fit", "--resume", "--seed", "1"], "{run}/fit were written with other settings: --seed 1 (was 0)"),
])
def test_resume_with_other_settings_is_refused_before_anything_is_written(argv: list[str], message: str, resumable: list[str],
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    run = Path(resumable[1])
    before = snapshot(run)
    code, err = _main(capsys, argv[0], *resumable, *(RUN if argv[0] == "all" else RUN_FIT), *argv[1:])
    assert code == 2 and message.format(run=run) in err
    assert snapshot(run) == before


def test_resume_accepts_the_run_time_knobs_and_data_flags_with_skip_data(resumable: list[str]) -> None:
    """The refusals above are of settings that change the fit: not threads, checkpoints, caps or the device."""
    import argparse

    from training.cli import add_parser, config_from_args
    from training.pipeline_checks import check_resume

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    knobs = ["--threads", "2", "--checkpoint-every", "1", "--max-minutes", "5", "--specialist-max-minutes", "3", "--device", "cpu"]
    check_resume(config_from_args(parser.parse_args(["all", *resumable, *RUN, *knobs])))
    other_data = config_from_args(parser.parse_args(["all", *resumable, *RUN, "--synthetic-per-family", "9"]))
    check_resume(other_data, skip_data=True)  # the data stay as built: nothing to refuse
    with pytest.raises(Exception, match="--synthetic-per-family 9"):
        check_resume(other_data)


def test_skip_data_keeps_the_recipe_of_the_data_as_built(resumable: list[str], monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    """`all --skip-data --synthetic-per-family 9` recorded 9 for data built with 8: the card's recipe misdescribed
    the data, and a later --resume with the run's own flags was refused as a change."""
    import training.pipeline

    ran: list[str] = []
    for stage in training.pipeline.STAGES:
        monkeypatch.setitem(training.pipeline._RUNNERS, stage, lambda cfg, stage=stage, **kw: ran.append(stage) or {})
    run = Path(resumable[1])
    with caplog.at_level("WARNING", logger="training.pipeline"):
        code, _ = _main(capsys, "all", *resumable, *RUN, "--skip-data", "--synthetic-per-family", "9")
    assert code == 0 and "build_data" not in ran and "fit" in ran
    assert json.loads((run / "pipeline_config.json").read_text(encoding="utf-8"))["synthetic_per_family"] == 8
    assert "these flags do not change them: --synthetic-per-family 9 (was 8)" in caplog.text


def test_a_refused_checkpoint_names_the_settings_that_differ(_tiny_model: Any, toy_examples: Any, tokenizer: Any, tmp_path: Path) -> None:
    """A library `fit(resume=True)` with another configuration said only 'another training configuration'."""
    import copy

    from training.errors import CheckpointError
    from training.sampling import prepare_requests
    from training.trainer import fit

    requests = prepare_requests([e for e in toy_examples if e.split == "train"][:60], tokenizer, seed=0)[0]
    config = FitConfig(steps=1, checkpoint_every=1, tokens_per_step=300, threads=1)
    fit(copy.deepcopy(_tiny_model), requests, config, tmp_path, progress=False)
    other = FitConfig(steps=1, checkpoint_every=1, tokens_per_step=300, threads=2, lr=2e-3)
    with pytest.raises(CheckpointError, match=r"another training configuration: FitConfig\.lr 0\.002 \(was 0\.001\); rerun with"):
        fit(copy.deepcopy(_tiny_model), requests, other, tmp_path, resume=True, progress=False)


# ------------------------------------------------------------------------------------------------------ outputs
@pytest.mark.parametrize("stage, blocker, directory", [
    ("evaluate", "evaluation.json", True), ("export", "model.onnx", True),  # found at the last write: the stage's work lost
    ("fit", "fit", False), ("fit", "fit/checkpoints", False), ("fit", "fit/train_log.jsonl", True),  # tracebacks in the fit
])
def test_an_output_in_the_way_is_refused_before_the_stage_works(stage: str, blocker: str, directory: bool, dirs: list[str], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import training.pipeline

    worked: list[str] = []
    monkeypatch.setitem(training.pipeline._RUNNERS, stage, lambda cfg, **kw: worked.append(stage) or {})
    path = tmp_path / "run" / blocker
    path.parent.mkdir(parents=True)
    path.mkdir() if directory else path.write_text("x\n", encoding="utf-8")
    before = snapshot(tmp_path / "run")
    code, err = _main(capsys, stage, *dirs)
    assert code == 2 and str(path) in err and worked == []
    assert snapshot(tmp_path / "run") == before


def test_compare_models_refuses_an_out_it_cannot_write_before_scoring(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An --out that is a directory was found at the write, after every model was scored: a traceback."""
    code, err = _main(capsys, "compare-models", "--data-dir", str(data), "--model-dirs", str(tmp_path / "m"), "--split", "test",
                      "--threads", "1", "--out", str(tmp_path))
    assert code == 2 and f"cannot write --out {tmp_path}: {tmp_path} is a directory, not a file" in err


def test_calibrate_names_the_model_directory_not_its_staging_copy(dirs: list[str], tiny_base: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from controller.artifacts import save_artifact
    from controller.torch_model import PackedCrossEncoder

    model = tmp_path / "model"
    save_artifact(PackedCrossEncoder.from_base(tiny_base, seed=0), model, base_path=tiny_base)
    heads = model / "heads.safetensors"
    heads.write_bytes(heads.read_bytes()[:100])  # torn
    before = snapshot(model)
    code, err = _main(capsys, "calibrate", *dirs)
    assert code == 2 and str(heads) in err and ".staging" not in err
    assert snapshot(model) == before


def test_an_os_error_no_check_foresaw_is_one_line_and_exit_code_1(dirs: list[str], monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import training.pipeline

    def refused(cfg: Any, **kw: Any) -> dict[str, Any]:
        raise PermissionError(13, "Permission denied", "/mnt/ro/evaluation.json")

    monkeypatch.setitem(training.pipeline._RUNNERS, "evaluate", refused)
    assert _main(capsys, "evaluate", *dirs) == (1, "error: [Errno 13] Permission denied: '/mnt/ro/evaluation.json'\n")


# ------------------------------------------------------------------------------------------- --model-name / version
def test_a_model_of_ones_own_is_named_on_the_wire(dirs: list[str], tmp_path: Path, tiny_base: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A scratch model was served as jevmem-minilm-1.0.0, the committed model's name: /v1/models could not tell them apart."""
    from controller.artifacts import load_artifact

    code, err = _main(capsys, "fit", "--steps", "1", *dirs, "--model-name", "acme-tickets", "--model-version", "0.3.1")
    assert code == 0, err
    config = json.loads((tmp_path / "model" / "config.json").read_text(encoding="utf-8"))
    assert (config["name"], config["version"]) == ("acme-tickets", "0.3.1")
    assert load_artifact(tmp_path / "model", base_path=tiny_base, allow_uncalibrated=True).info.name == "acme-tickets-0.3.1"
    # the recorded recipe names it; a later stage run with the default name records no change for it
    recipe = json.loads((tmp_path / "run" / "pipeline_config.json").read_text(encoding="utf-8"))
    assert recipe["model_name"] == "acme-tickets"


@pytest.mark.parametrize("argv, message", [
    (["--model-name", ""], "--model-name must be 1-64 letters"),
    (["--model-name", "my model"], "got 'my model'"),
    (["--model-name=-x"], "starting with a letter or digit"),
    (["--model-version", "1/2"], "--model-version must be"),
    (["--model-name", "n" * 65], "--model-name must be 1-64"),
])
def test_a_model_name_the_wire_cannot_carry_is_refused_up_front(argv: list[str], message: str, dirs: list[str], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _main(capsys, "fit", "--steps", "1", *dirs, *argv)
    assert code == 2 and message in err and err.count("\n") == 1
    assert not (tmp_path / "model").exists()


def test_a_setting_newer_than_the_recorded_recipe_is_no_change_at_its_default(tmp_path: Path) -> None:
    from training.pipeline import _config_changes
    from training.pipeline_config import PipelineConfig

    cfg = PipelineConfig(run_dir=str(tmp_path / "run"), model_dir=str(tmp_path / "model"))
    (tmp_path / "run").mkdir()
    old = cfg.to_json()
    del old["model_name"], old["model_version"]  # a recipe written before these settings existed
    (tmp_path / "run" / "pipeline_config.json").write_text(json.dumps(old), encoding="utf-8")
    assert _config_changes(cfg) == {}
    from dataclasses import replace

    assert _config_changes(replace(cfg, model_name="other")) == {"model_name": "other"}
    assert _config_changes(replace(cfg, model_name="other"), "calibrate") == {}  # a stage that never reads it
