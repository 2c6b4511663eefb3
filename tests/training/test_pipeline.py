from __future__ import annotations

import argparse
import json
import shutil

import pytest

from controller.states import StateConventions, read_states
from controller.families import FAMILIES
from training.errors import PipelineError
from training.pipeline import run_all, run_stage
from training.pipeline_config import STAGES, PipelineConfig
from training.trainer import FitConfig

ALLOWED = {"config.json", "adapter", "heads.safetensors", "calibration.json", "metrics.json", "MODEL_CARD.md", "reliability.png", "states.json"}


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory, tiny_base):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("pipeline")
    cfg = PipelineConfig(
        run_dir=str(root / "run"), model_dir=str(root / "model"), base_path=str(tiny_base), synthetic_per_family=24, dense="none",
        fit=FitConfig(steps=6, tokens_per_step=800, checkpoint_every=3, threads=1, lr=5e-3, head_lr=5e-2, npair_fraction=0.2),
        calibration_states=20, eval_states=10, robust_states=12, npair_states=12, progress=False, command="pytest",
    )
    return cfg, run_all(cfg)


def test_make_train_runs_every_stage_and_records_its_wall_clock(pipeline_run) -> None:  # type: ignore[no-untyped-def]
    cfg, metrics = pipeline_run
    assert set(metrics["stages_seconds"]) == set(STAGES)
    assert all(v >= 0 for v in metrics["stages_seconds"].values())
    assert metrics["export"]["parity_max_abs_diff"] <= metrics["export"]["atol"]
    assert metrics["fit"]["steps_done"] == 6 and metrics["data"]["counts"]["train"] > 0
    assert {"raw", "calibrated", "base_rate", "uniform"} <= set(metrics["heldout"]["by_family"]["all"])
    assert "ece_after_calibration" in metrics["acceptance"]
    intervals = metrics["heldout"]["intervals"]
    assert set(intervals["ece_change"]) == set(metrics["heldout"]["by_family"]) - {"all"}
    assert all(v["lo"] <= v["hi"] and v["change"] == pytest.approx(v["calibrated"] - v["raw"], abs=2e-5) for v in intervals["ece_change"].values())
    assert all("change_ci" in v for v in metrics["acceptance"]["ece_after_calibration"]["families"].values())
    assert "cluster bootstrap" in (cfg.model / "MODEL_CARD.md").read_text()
    assert {"wording", "option_order", "noul_vs_choice"} <= set(metrics["robustness"])
    assert {"packed", "npair"} == set(metrics["packed_vs_npair"])
    assert metrics["model"]["states"] == {"relevance_dated": False, "relevance_context": False}
    assert "state conventions (`states.json`): the defaults" in (cfg.model / "MODEL_CARD.md").read_text()


def test_the_model_directory_is_small_and_loadable(pipeline_run) -> None:  # type: ignore[no-untyped-def]
    from controller.artifacts import artifact_hash, load_artifact
    from controller.local import LocalBackend

    cfg, metrics = pipeline_run
    assert {p.name for p in cfg.model.iterdir()} <= ALLOWED
    assert not list(cfg.model.rglob("*.onnx")) and not list(cfg.model.rglob("*.pt"))
    loaded = load_artifact(cfg.model, base_path=cfg.base_path)
    assert loaded.model_hash == artifact_hash(cfg.model) == metrics["model"]["artifact_hash"]
    assert set(loaded.calibration.temperatures) >= {"noul"}
    backend = LocalBackend(loaded, runtime="torch", threads=1)
    from controller.backend import BackendRequest
    from controller.families import family_questions
    from controller.questions import normalize_questions

    (result,) = backend.answer([BackendRequest({"observation": "I went hiking yesterday."}, tuple(normalize_questions(family_questions("typing")).values()))])
    assert len(result.probabilities) == 4 and all(0 <= p[0] <= 1 for p in result.probabilities)
    card = (cfg.model / "MODEL_CARD.md").read_text()
    assert "CC BY-NC" in card and "No outputs of Jev" in card and "| all |" in card
    assert "wall-clock per stage: build_data " in card and ", export " in card and "min in all" in card
    assert "LoRA adapter (r=8, alpha=16, dropout 0.1 on query/key/value/dense)" in card  # as the fit configured it
    assert json.loads((cfg.model / "metrics.json").read_text())["total_seconds"] > 0
    assert (cfg.model / "states.json").exists() and backend.state_conventions == StateConventions()  # undated data, no context


def test_the_model_directory_declares_the_state_conventions_of_its_data(pipeline_run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from training.pipeline_config import record_states

    cfg, _ = pipeline_run
    shutil.copytree(cfg.model, tmp_path / "model")
    (tmp_path / "data").mkdir()
    summary = json.loads((cfg.data / "summary.json").read_text())
    summary["config"]["rules"] = {**summary["config"].get("rules", {}), "relevance_dated": True}
    (tmp_path / "data" / "summary.json").write_text(json.dumps(summary))
    new = replace(cfg, model_dir=str(tmp_path / "model"), data_dir=str(tmp_path / "data"))
    assert record_states(new) == {"relevance_dated": True, "relevance_context": False}
    assert read_states(tmp_path / "model") == StateConventions(relevance_dated=True)
    assert read_states(cfg.model) == StateConventions()  # the original is untouched


def test_refitting_forgets_measurements_of_the_old_model(pipeline_run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    cfg, _ = pipeline_run
    shutil.copytree(cfg.run / "data", tmp_path / "run" / "data")
    new = replace(cfg, run_dir=str(tmp_path / "run"), model_dir=str(tmp_path / "model"), fit=replace(cfg.fit, steps=2))
    (tmp_path / "run" / "evaluation.json").write_text("{}")
    run_stage(new, "fit")
    assert not (tmp_path / "run" / "evaluation.json").exists()
    metrics = json.loads((tmp_path / "model" / "metrics.json").read_text())
    assert set(metrics["stages_seconds"]) == {"fit"} and metrics["heldout"] == {}


def test_calibrate_replaces_a_calibration_of_another_model(pipeline_run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from controller.artifacts import artifact_hash
    from controller.calibration import Calibration, save_calibration

    cfg, _ = pipeline_run
    model = tmp_path / "model"
    shutil.copytree(cfg.model, model)
    save_calibration(Calibration({"noul": 3.0}, "another-model"), model / "calibration.json")
    run_stage(replace(cfg, model_dir=str(model), run_dir=str(tmp_path / "run"), data_dir=str(cfg.data)), "calibrate")
    assert json.loads((model / "calibration.json").read_text())["model_hash"] == artifact_hash(model)


def test_a_pooled_prior_records_the_shifts_it_fits(pipeline_run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from controller.calibration import Calibration

    cfg, _ = pipeline_run
    model = tmp_path / "model"
    shutil.copytree(cfg.model, model)
    pooled = replace(cfg, model_dir=str(model), run_dir=str(tmp_path / "run"), data_dir=str(cfg.data), calibration_prior="pooled",
                     prior_min_examples=5)
    record = run_stage(pooled, "calibrate")
    saved = Calibration.from_json(json.loads((model / "calibration.json").read_text()))
    assert record["prior"] == "pooled" and saved.prior_shifts and record["prior_shifts"] == saved.prior_shifts
    assert all(key.partition(".")[0] in FAMILIES for key in saved.prior_shifts)
    record = run_stage(replace(pooled, calibration_prior="fitted"), "calibrate")
    fitted = Calibration.from_json(json.loads((model / "calibration.json").read_text()))
    assert record["prior"] == "fitted" and record.get("prior_shifts", {}) == fitted.prior_shifts
    assert fitted.prior_shifts == {k: v for k, v in saved.prior_shifts.items() if fitted.fitted("noul", 1, k)}
    with pytest.raises(PipelineError, match="unknown calibration prior"):
        run_stage(replace(pooled, calibration_prior="dev"), "calibrate")


def test_a_stage_run_alone_keeps_the_recipe_and_records_its_own_settings(pipeline_run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    cfg, _ = pipeline_run
    assert json.loads((cfg.run / "pipeline_config.json").read_text()) == json.loads(json.dumps(cfg.to_json()))  # run_all's recipe
    run, model = tmp_path / "run", tmp_path / "model"
    shutil.copytree(cfg.model, model)
    base = replace(cfg, run_dir=str(run), model_dir=str(model), data_dir=str(cfg.data))
    assert run_stage(base, "calibrate").get("config_changes") is None  # the first stage in a new run directory: the recipe
    recipe = json.loads((run / "pipeline_config.json").read_text())
    assert run_stage(base, "calibrate").get("config_changes") is None  # the recipe's own settings: nothing to record
    # data-build settings are not a stage's to change (its subcommand has no flags for them): never recorded
    summary = run_stage(replace(base, calibration_folds="group", fit=replace(cfg.fit, steps=9), locomo=None,
                                relevance_dated=not cfg.relevance_dated), "calibrate")
    assert summary["config_changes"] == {"calibration_folds": "group", "fit.steps": 9}
    assert json.loads((run / "pipeline_config.json").read_text()) == recipe  # left as make train wrote it
    metrics = json.loads((model / "metrics.json").read_text())
    assert metrics["calibration"]["config_changes"] == {"calibration_folds": "group", "fit.steps": 9}
    assert metrics["stage_changes"] == {"calibrate": {"calibration_folds": "group", "fit.steps": 9}}
    card = (model / "MODEL_CARD.md").read_text()
    assert "the calibrate stage was run again alone, with settings that differ from the recipe above: " \
           '`calibration_folds` = "group", `fit.steps` = 9' in card
    # run again by another command: the card still says how to reproduce the whole recipe, and names the rerun
    run_stage(replace(base, command="python -m training calibrate --run-dir R"), "calibrate")
    card = (model / "MODEL_CARD.md").read_text()
    assert f"- reproduce: `{recipe['command']}`" in card and "run again alone (`python -m training calibrate --run-dir R`)" in card


def test_the_data_stage_adds_included_examples_as_training_data(pipeline_run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from data.schema import load_examples, write_jsonl

    cfg, _ = pipeline_run
    mine = [replace(e, id=f"teacher:t:{e.id}", source="teacher:t", target=0.7) for e in load_examples(cfg.data, "train")
            if e.kind == "noul"][:5]
    write_jsonl(tmp_path / "mine.jsonl", mine)
    run = replace(cfg, run_dir=str(tmp_path / "run"), data_dir=str(tmp_path / "data"), include=(str(tmp_path / "mine.jsonl"),))
    record = run_stage(run, "build_data")
    assert record["included"] == {str(tmp_path / "mine.jsonl"): {"read": 5, "held_out_dropped": 0, "other_conversations_dropped": 0, "train": 5}}
    added = [e for e in load_examples(tmp_path / "data", "train") if e.source == "teacher:t"]
    assert sorted(e.id for e in added) == sorted(e.id for e in mine) and {e.target for e in added} == {0.7}


def test_every_locomo_rule_the_pipeline_names_reaches_the_data_build() -> None:
    from dataclasses import fields

    from data.builders.locomo import LocomoRules
    from training.pipeline import locomo_rules

    shared = {f.name for f in fields(LocomoRules)} & {f.name for f in fields(PipelineConfig)}
    assert {"query_swaps", "random_swaps", "relevance_dated", "rename_speakers"} <= shared
    changed = {"query_swaps": 2, "random_swaps": True, "observation_queries": 7, "train_hard_negatives": 3,
               "train_bm25_negatives": 1, "train_dense_negatives": 0, "relevance_context": True, "relevance_dated": True,
               "rename_speakers": 0.25}
    assert set(changed) == shared, "a LocomoRules field the pipeline config names has no value in this test"
    assert all(getattr(LocomoRules(), k) != v for k, v in changed.items())
    rules = locomo_rules(PipelineConfig(**changed))  # type: ignore[arg-type]
    assert {k: getattr(rules, k) for k in changed} == changed
    assert locomo_rules(PipelineConfig()) == LocomoRules()


def test_stages_refuse_to_run_without_their_inputs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from training.errors import PipelineError

    cfg = PipelineConfig(run_dir=str(tmp_path / "r"), model_dir=str(tmp_path / "m"), progress=False)
    with pytest.raises(PipelineError, match="run the fit stage first"):
        run_stage(cfg, "calibrate")
    with pytest.raises(PipelineError, match="unknown stage"):
        run_stage(cfg, "deploy")


def test_a_calibrate_run_that_cannot_start_keeps_the_models_calibration(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # a wrong --run-dir (no data there) must not cost the model directory its calibration
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}", encoding="utf-8")
    (model / "calibration.json").write_text("{}", encoding="utf-8")
    cfg = PipelineConfig(run_dir=str(tmp_path / "r"), model_dir=str(model), progress=False)
    with pytest.raises(PipelineError, match="no calibration.jsonl"):
        run_stage(cfg, "calibrate")
    assert (model / "calibration.json").read_text(encoding="utf-8") == "{}"


def test_a_fit_that_fails_keeps_the_measurements_of_the_model_in_place(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # the model directory still holds the evaluated model: its records must survive a fit that never ran
    run = tmp_path / "r"
    run.mkdir()
    (run / "stages.json").write_text(json.dumps({"evaluate": {"seconds": 1.0}, "fit": {"seconds": 2.0}}), encoding="utf-8")
    (run / "evaluation.json").write_text("{}", encoding="utf-8")
    cfg = PipelineConfig(run_dir=str(run), model_dir=str(tmp_path / "m"), data_dir=str(tmp_path / "nowhere"), progress=False)
    with pytest.raises(PipelineError, match="no train.jsonl"):
        run_stage(cfg, "fit")
    assert set(json.loads((run / "stages.json").read_text(encoding="utf-8"))) == {"evaluate", "fit"}
    assert (run / "evaluation.json").exists()


def test_cli_keeps_build_data_and_adds_the_stages() -> None:
    from training.__main__ import COMMANDS
    from training.cli import add_parser, config_from_args

    assert COMMANDS[0] == "training.data_cli"
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    add_parser(sub)
    args = parser.parse_args(["all", "--steps", "7", "--threads", "1", "--locomo", "x.json", "--eval-states", "5", "--skip-data"])
    cfg = config_from_args(args)
    assert cfg.fit.steps == 7 and cfg.fit.threads == 1 and cfg.locomo == "x.json" and cfg.eval_states == 5 and args.skip_data
    assert cfg.query_swaps == 0 and config_from_args(parser.parse_args(["all", "--query-swaps", "2"])).query_swaps == 2
    assert not cfg.random_swaps and config_from_args(parser.parse_args(["all", "--query-swaps", "1", "--random-swaps"])).random_swaps
    # make train passes --random-swaps; TRAIN_ARGS comes after it, so --no-random-swaps there must win
    assert not config_from_args(parser.parse_args(["all", "--random-swaps", "--no-random-swaps"])).random_swaps
    observed = config_from_args(parser.parse_args(["all", "--observation-queries", "300"]))
    assert cfg.observation_queries == PipelineConfig.observation_queries and observed.observation_queries == 300
    fewer = config_from_args(parser.parse_args(["all", "--train-conversations", "conv-42, conv-43"]))
    assert cfg.train_conversations == () and fewer.train_conversations == ("conv-42", "conv-43")
    uncalibrated = config_from_args(parser.parse_args(["all", "--calibration-conversations", ""]))
    assert cfg.calibration_conversations == ("conv-44",) and uncalibrated.calibration_conversations == ()
    assert cfg.dev_conversations == ("conv-26", "conv-30") and not cfg.relevance_dated
    everything = config_from_args(parser.parse_args(["all", "--dev-conversations", "", "--relevance-dated"]))
    assert everything.dev_conversations == () and everything.relevance_dated
    wide = config_from_args(parser.parse_args(["all", "--lora-r", "32", "--lora-alpha", "64"])).fit
    assert (wide.lora_r, wide.lora_alpha, wide.lora_dropout) == (32, 64, 0.1)
    assert cfg.calibration_prior == "fitted"
    assert cfg.include == () and config_from_args(parser.parse_args(["all", "--include", "a.jsonl", "b.jsonl"])).include == ("a.jsonl", "b.jsonl")
    assert config_from_args(parser.parse_args(["calibrate", "--calibration-prior", "calibration"])).calibration_prior == "calibration"
    assert config_from_args(parser.parse_args(["calibrate", "--calibration-prior", "fitted"])).calibration_prior == "fitted"
    args = parser.parse_args(["fit", "--resume", "--lr", "0.001"])
    assert args.resume and config_from_args(args).fit.lr == 0.001


@pytest.mark.parametrize("argv, message", [
    (["fit", "--steps", "0"], "steps must be >= 1"),
    (["fit", "--device", "gpu"], "device must be"),
    (["fit", "--family-boost", "relevance"], "family_boost"),
    (["fit", "--family-boost", "relevence=2"], "unknown families in --family-boost: relevence"),
    (["all", "--noul-as-choice-rate", "1.5"], "--noul-as-choice-rate must lie in [0, 1], got 1.5"),
    (["all", "--query-swaps", "-1"], "--query-swaps must be >= 0, got -1"),  # the run directory was made first
    (["fit", "--lora-dropout", "2"], "--lora-dropout must lie in [0, 1], got 2.0"),
    (["fit-specialist", "--specialist", "relevance", "--specialist-steps", "0"], "--specialist-steps must be >= 1, got 0"),
    (["fit-specialist", "--specialist", "relevance", "--specialist-sources", "synthetic:typing"], "without ':'"),
    (["ood", "--items", "0"], "items"),
    # NaN and infinity passed the range checks (NaN compares false) and would fit NaN weights or ignore a budget
    (["fit", "--weight-decay", "nan"], "--weight-decay must be a finite number, got nan"),
    (["fit", "--listwise-weight", "inf"], "--listwise-weight must be a finite number, got inf"),
    (["fit", "--lr", "inf"], "--lr must be a finite number, got inf"),
    (["fit", "--max-minutes", "nan"], "--max-minutes must be a finite number"),
    (["fit", "--max-minutes", "-5"], "--max-minutes must be >= 0, got -5.0"),  # the message named four fields, not the one
    (["fit", "--lora-layers", "-1"], "--lora-layers must be >= 0"),
    (["all", "--total-minutes", "nan"], "--total-minutes must be a finite number, got nan"),
    (["fit-specialist", "--specialist", "relevance", "--specialist-max-minutes", "nan"], "--specialist-max-minutes must be a finite number"),
])
def test_bad_flag_values_are_a_message_and_exit_code_2(argv, message, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from training.__main__ import main

    dirs = ["--out", str(tmp_path / "o")] if argv[0] == "ood" else ["--run-dir", str(tmp_path / "r"), "--model-dir", str(tmp_path / "m")]
    assert main([*argv, *dirs]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "r").exists() and not (tmp_path / "m").exists()  # refused before anything ran


def test_a_model_directory_that_cannot_be_loaded_is_a_message_and_exit_code_2(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    # controller's ArtifactError (a torn config.json, a missing weight file) escaped as a traceback
    from training.__main__ import main

    data = tmp_path / "data"
    assert main(["build-data", "--out", str(data), "--synthetic-per-family", "4", "--dense", "none"]) == 0
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{not json", encoding="utf-8")
    dirs = ["--run-dir", str(tmp_path / "r"), "--model-dir", str(model), "--data-dir", str(data), "--no-progress"]
    for argv in (["evaluate", *dirs], ["export", *dirs], ["compare-models", "--data-dir", str(data), "--model-dirs", str(model), "--split", "test"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"cannot read {model / 'config.json'}" in err and "Traceback" not in err


def test_comparison_commands_refuse_a_thread_count_and_a_base_they_cannot_use(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    # --threads 0 was torch's RuntimeError and a base directory without a tokenizer controller's
    # BackendUnavailableError, both tracebacks
    from training.__main__ import main

    data = tmp_path / "data"
    assert main(["build-data", "--out", str(data), "--synthetic-per-family", "4", "--dense", "none"]) == 0
    common = ["--data-dir", str(data), "--model-dirs", str(tmp_path / "m")]
    for argv, message in ((["compare-models", *common, "--threads", "0"], "--threads must be >= 1, got 0"),
                          (["ensemble", *common, "--threads", "-1"], "--threads must be >= 1, got -1"),
                          (["compare-models", *common, "--split", "test", "--base", str(tmp_path / "no-base")], "no-base")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_a_data_directory_that_is_a_file_is_refused_before_the_build(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from training.errors import PipelineError
    from training.pipeline import run_stage

    (tmp_path / "data").write_text("x", encoding="utf-8")
    cfg = PipelineConfig(run_dir=str(tmp_path / "r"), model_dir=str(tmp_path / "m"), data_dir=str(tmp_path / "data"), synthetic_per_family=4,
                         dense="none", progress=False)
    with pytest.raises(PipelineError, match="cannot write the decision data to .*data is a file"):
        run_stage(cfg, "build_data")
    assert (tmp_path / "data").read_text(encoding="utf-8") == "x"


def test_out_of_domain_figures_are_recorded_into_the_model_card_for_their_artifact_only(pipeline_run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from training.errors import PipelineError
    from training.ood import CoherenceScore, OodSummary, QuestionScore, record_summary

    cfg, _ = pipeline_run
    model, run = tmp_path / "model", tmp_path / "run"
    shutil.copytree(cfg.model, model)
    shutil.copytree(cfg.run, run, ignore=shutil.ignore_patterns("fit", "data", "*.onnx"))
    digest = json.loads((model / "calibration.json").read_text())["model_hash"]
    rag = [QuestionScore("m", "best_passage", 150, {"accuracy": 0.23, "ece15": 0.02, "nll": 1.61})]
    coherence = [CoherenceScore("m", None, None, {"REP": 63.7, "MEA": None}, 1417, 4, 129.0)]
    summary = OodSummary("local", "m", {"items": 150, "cardinality": 5, "seed": 42}, rag, coherence, {}, digest)
    assert record_summary(summary, run, model) == run / "ood.json"
    metrics = json.loads((model / "metrics.json").read_text())
    assert metrics["out_of_domain"]["sys1bench"][0]["metrics"]["accuracy"] == 0.23
    card = (model / "MODEL_CARD.md").read_text()
    assert "| m | best_passage | 0.230 | 0.020 | 1.610 |" in card and "overall not scored" in card and "4 refused or failed" in card
    record_summary(OodSummary("local", "m", {}, rag, coherence, {}, "another-hash"), run, model)
    assert json.loads((model / "metrics.json").read_text())["out_of_domain"].startswith("not measured on this artifact")
    with pytest.raises(PipelineError, match="local controller"):
        record_summary(OodSummary("heuristic", "h", {}, rag, coherence, {}), run, model)


def test_the_model_card_names_the_conversations_each_split_used() -> None:
    from training.card import _heldout_sources, _locomo_use

    default = _locomo_use({})  # a record from before the conversations were recorded: the default plan
    assert "conv-41/42/43" in default and "calibration conv-44" in default
    fewer = _locomo_use({"locomo_conversations": {"dev": ["conv-26", "conv-30"], "train": ["conv-42"], "calibration": ["conv-44"]}})
    assert fewer.startswith("Training used conv-42; calibration conv-44; held-out dev") and "synthetic data alone" not in fewer
    assert "synthetic data alone" in _locomo_use({"locomo_conversations": {"dev": ["conv-26"], "train": ["conv-41", "conv-44"]}})
    assert _heldout_sources({}) == "LoCoMo dev conv-26, conv-30 + synthetic test shard"
    assert _heldout_sources({"locomo_conversations": {"dev": ["conv-30"], "train": ["conv-26"]}}) == "LoCoMo dev conv-30 + synthetic test shard"
    assert "no LoCoMo conversation was held out" in _heldout_sources({"locomo_conversations": {"train": ["conv-26", "conv-30"]}})


def test_the_model_card_of_a_build_without_locomo_claims_no_locomo_and_names_the_included_files() -> None:
    from training.card import model_card

    # the build-data record of `all --synthetic-per-family 8 --include mine.jsonl teacher.jsonl` (no --locomo)
    data = {"locomo": False, "locomo_conversations": {}, "counts": {"train": 332, "calibration": 33, "test": 37},
            "included": {"/tmp/x/mine.jsonl": {"read": 40, "train": 40, "held_out_dropped": 0, "other_conversations_dropped": 0},
                         "/tmp/x/teacher.jsonl": {"read": 60, "train": 58, "held_out_dropped": 2, "other_conversations_dropped": 0}}}
    card = model_card({"model": {"name": "m", "version": "1"}, "data": data}, "python -m training all ...")
    assert "CC BY-NC dataset" not in card and "conv-41" not in card and "LoCoMo dev conv-26" not in card
    assert "**LoCoMo**: not used" in card and "synthetic test shard only: the data build read no LoCoMo file" in card
    assert "`mine.jsonl` 40 of 40" in card and "`teacher.jsonl` 58 of 60" in card
    assert "any other hosted model" not in card  # a teacher server's answers may be in the included files
    with_locomo = model_card({"model": {"name": "m", "version": "1"}, "data": {"locomo": True, "locomo_conversations": {
        "train": ["conv-41"], "calibration": ["conv-44"], "dev": ["conv-26"]}}}, "cmd")
    assert "CC BY-NC dataset" in with_locomo and "Training used conv-41" in with_locomo
    assert "No outputs of Jev (or any other hosted model)" in with_locomo


def test_the_card_states_how_states_must_be_rendered() -> None:
    from training.card import _states_text

    assert "defaults" in _states_text({"relevance_dated": False, "relevance_context": False})
    dated = _states_text({"relevance_dated": True, "relevance_context": False})
    assert "[8 May 2023] Speaker: text" in dated and "previous" not in dated


def test_the_card_names_a_listwise_loss_and_bf16_only_when_used() -> None:
    from training.card import _fit_extras_text

    assert _fit_extras_text({}) == "" and _fit_extras_text({"listwise_weight": 0.0, "precision": "fp32"}) == ""
    assert "0.5 x the listwise loss of `relevance.relevant`" in _fit_extras_text({"listwise_weight": 0.5})
    both = _fit_extras_text({"listwise_weight": 0.5, "precision": "bf16"})
    assert "listwise" in both and "bfloat16 autocast" in both and "bfloat16" not in _fit_extras_text({"listwise_weight": 0.5})


def test_the_card_lists_prior_shifts_only_for_a_pooled_or_fitted_prior() -> None:
    from training.card import _prior_lines

    assert _prior_lines({"prior": "calibration"}) == [] and _prior_lines({}) == []
    lines = _prior_lines({"prior": "pooled", "prior_shifts": {"pair.semantic": 0.1},
                          "specialist:relevance": {"prior_shifts": {"relevance.bridge": -0.11}}})
    assert len(lines) == 1 and 'main {"pair.semantic": 0.1}; relevance {"relevance.bridge": -0.11}' in lines[0]
    fitted = _prior_lines({"prior": "fitted", "prior_shifts": {"pair.semantic": 0.1}})
    assert len(fitted) == 1 and "`--calibration-prior fitted`" in fitted[0] and "only where its calibration level was fitted" in fitted[0]


def test_the_card_says_whether_a_rerun_fits_the_same_weights() -> None:
    from training.card import _repeatable_text

    done = {"completed": True, "steps_done": 40, "config": {"steps": 40}}
    assert "fits the same weights" in _repeatable_text({"the main fit": done, "the specialist's fit": {}})
    capped = {"completed": False, "steps_done": 31, "config": {"steps": 40}}
    text = _repeatable_text({"the main fit": done, "the specialist's fit": capped})
    assert text.startswith("- repeatable: no, the specialist's fit stopped by its minute cap at step 31 of 40") and "the main fit" not in text


def test_the_card_names_the_layers_a_partial_adapter_covers() -> None:
    from training.card import _lora_text

    assert _lora_text({"lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "lora_layers": 3}) == (
        "r=4, alpha=8, dropout 0.0 on the top 3 layers' query/key/value/dense")


@pytest.fixture(scope="module")
def specialist_run(pipeline_run, tmp_path_factory):  # type: ignore[no-untyped-def]
    """The pipeline run's model plus a relevance specialist, calibrated, evaluated and exported."""
    from dataclasses import replace

    cfg, _ = pipeline_run
    root = tmp_path_factory.mktemp("specialist")
    shutil.copytree(cfg.model, root / "model")
    spec = replace(cfg, run_dir=str(root / "run"), model_dir=str(root / "model"), data_dir=str(cfg.data),
                   specialist="relevance", specialist_steps=4)
    for stage in ("fit_specialist", "calibrate", "evaluate", "export"):
        run_stage(spec, stage)
    return spec, json.loads((spec.model / "metrics.json").read_text())


def test_a_specialist_is_fitted_calibrated_evaluated_and_served(specialist_run) -> None:  # type: ignore[no-untyped-def]
    from controller.artifacts import artifact_hash
    from controller.local import LocalBackend
    from controller.specialists import read_index

    cfg, metrics = specialist_run
    sub = cfg.model / "specialists" / "relevance"
    assert read_index(cfg.model) == {"relevance": {"path": "specialists/relevance", "artifact_hash": artifact_hash(sub)}}
    assert {p.name for p in sub.iterdir()} == {"config.json", "adapter", "heads.safetensors", "calibration.json"}
    fitted_on = json.loads((sub / "calibration.json").read_text())
    assert fitted_on["model_hash"] == artifact_hash(sub)
    assert all(k == "noul" or k.startswith("relevance") for k in fitted_on["fitted_on"])  # its own family only
    main_fitted = json.loads((cfg.model / "calibration.json").read_text())["fitted_on"]
    assert main_fitted and not any(k.startswith("relevance") for k in main_fitted)  # the main model no longer serves it
    assert metrics["specialist"]["family"] == "relevance" and metrics["specialist"]["steps_done"] == 4
    assert metrics["export"]["specialist:relevance"]["parity_max_abs_diff"] <= metrics["export"]["atol"]
    assert "relevance" in metrics["heldout"]["by_family"]
    # robustness and packed vs N-pair: each model on the families it serves
    assert "relevance" not in metrics["packed_vs_npair"]["packed"]["metrics"]
    assert set(metrics["packed_vs_npair"]["specialist:relevance"]["packed"]["metrics"]) == {"relevance", "all"}
    assert metrics["robustness"]["specialist:relevance"]["wording"]["canonical"]["n"] > 0
    card = (cfg.model / "MODEL_CARD.md").read_text()
    assert "**relevance specialist**" in card and "fit_specialist" in card and "- npair (relevance specialist): accuracy" in card
    assert f"served hash (with the specialists; `LocalBackend.model_hash`): `{metrics['model']['served_hash']}`" in card
    assert metrics["model"]["served_hash"] == LocalBackend.load(cfg.model, runtime="torch", base_path=cfg.base_path).model_hash
    assert LocalBackend.load(cfg.model, runtime="torch", base_path=cfg.base_path).specialists == ("relevance",)


def test_evaluation_reads_each_family_from_the_model_that_serves_it(specialist_run) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    from controller.artifacts import load_artifact
    from controller.specialists import load_specialists
    from training.pipeline_config import heldout_examples, predict_routed, tokenizer
    from training.predict import predict
    from training.sampling import prepare_requests

    cfg, _ = specialist_run
    requests, _ = prepare_requests(heldout_examples(cfg)[:200], tokenizer(cfg), max_questions=cfg.max_questions)
    main, subs = load_artifact(cfg.model, base_path=cfg.base_path), load_specialists(cfg.model, base_path=cfg.base_path)
    routed = {p.label.example_id + p.label.question_name + p.label.variant: p for p in predict_routed(cfg, main, subs, requests, "t").predictions}
    families = set()
    for model in (main, subs["relevance"]):
        for p in predict(model.model, requests).predictions:
            key = p.label.example_id + p.label.question_name + p.label.variant
            if (p.family == "relevance") == (model is subs["relevance"]):
                assert np.allclose(routed[key].logits, p.logits, atol=1e-5)
                families.add(p.family)
    assert "relevance" in families and len(families) > 1


def test_fitting_without_a_specialist_removes_a_stale_one(specialist_run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    cfg, _ = specialist_run
    shutil.copytree(cfg.model, tmp_path / "model")
    plain = replace(cfg, run_dir=str(tmp_path / "run"), model_dir=str(tmp_path / "model"), specialist="")
    assert run_stage(plain, "fit_specialist") == {"family": None}
    assert not (tmp_path / "model" / "specialists.json").exists() and not (tmp_path / "model" / "specialists").exists()
    with pytest.raises(Exception, match="unknown specialist family"):
        run_stage(replace(plain, specialist="weather"), "fit_specialist")


def test_compare_models_scores_each_family_from_the_model_that_serves_it(specialist_run, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from training.__main__ import main

    cfg, _ = specialist_run
    shutil.copytree(cfg.model, tmp_path / "plain")
    run_stage(replace(cfg, run_dir=str(tmp_path / "run"), model_dir=str(tmp_path / "plain"), specialist=""), "fit_specialist")
    out = tmp_path / "table.json"
    argv = ["compare-models", "--data-dir", str(cfg.data), "--model-dirs", str(cfg.model), str(tmp_path / "plain"),
            "--split", "test", "--base", str(cfg.base_path), "--threads", "1", "--out", str(out)]
    assert main(argv) == 0
    table = json.loads(out.read_text())
    ref, plain = "model", "plain"
    assert "relevance" in table and "main" in table and "| family | n | model: AUROC / NLL / ECE |" in capsys.readouterr().out
    for family, cells in table.items():  # the same main adapter answers every family but relevance in both
        if family not in ("relevance", "all"):
            assert cells[plain]["delta_nll"] == pytest.approx(0.0, abs=1e-4) and cells[plain]["n"] == cells[ref]["n"], family
    assert table["relevance"][plain]["nll"] != pytest.approx(table["relevance"][ref]["nll"], abs=1e-4)  # specialist vs main
    assert main([*argv[:-2], "--families", "weather"]) == 2
    assert "unknown families in --families: weather" in capsys.readouterr().err

def test_the_main_fit_leaves_the_specialist_family_to_the_specialist(specialist_run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    cfg, _ = specialist_run
    short = replace(cfg, run_dir=str(tmp_path / "run"), model_dir=str(tmp_path / "model"), fit=replace(cfg.fit, steps=1))
    families = run_stage(short, "fit")["requests"]["families"]
    assert "relevance" not in families and len(families) >= 4
    plain = run_stage(replace(short, specialist=""), "fit")["requests"]["families"]
    assert "relevance" in plain


def test_serving_routes_every_decision_example_to_the_model_that_learnt_it(pipeline_run) -> None:  # type: ignore[no-untyped-def]
    """Serving's route (catalogue, else state shape) agrees with the labels' family that training and evaluation
    route on, for paraphrased questions too: a relevance specialist answers exactly the relevance examples."""
    from controller.families import lookup
    from controller.questions import normalize_questions
    from controller.specialists import request_family
    from training.pipeline_config import split_examples

    cfg, _ = pipeline_run
    examples = [e for split in ("train", "calibration", "test") for e in split_examples(cfg, split)]
    relevance = [e for e in examples if e.family == "relevance"]
    assert relevance and len(relevance) < len(examples)
    assert any(lookup(e.question["instructions"]) is None for e in relevance)  # paraphrases among them
    routed = {e.id: request_family(tuple(normalize_questions({"q": e.question}).values()), e.state) for e in examples}
    assert all(routed[e.id] == "relevance" for e in relevance)
    assert all(routed[e.id] != "relevance" for e in examples if e.family != "relevance")


def test_served_relevance_reads_paraphrases_from_the_specialist(specialist_run) -> None:  # type: ignore[no-untyped-def]
    from controller.backend import BackendRequest
    from controller.families import lookup
    from controller.local import LocalBackend
    from controller.questions import normalize_questions
    from training.evaluate import auroc
    from training.pipeline_config import split_examples
    from training.served import SERVED_COLUMNS, format_served, served_relevance

    cfg, _ = specialist_run
    examples = [e for split in ("calibration", "test") for e in split_examples(cfg, split) if e.family == "relevance" and e.question_name == "relevant"]
    table = served_relevance(cfg.model, examples, base=str(cfg.base_path), threads=1)
    assert set(table) == set(SERVED_COLUMNS) and table["all"] is not None
    other = [e for e in examples if lookup(e.question["instructions"]) is None]
    assert other  # the build asks some relevance questions in other wordings
    alone = LocalBackend.load(cfg.model / "specialists" / "relevance", runtime="torch", threads=1, base_path=cfg.base_path)
    probs = [r.probabilities[0][0] for r in alone.answer([BackendRequest(e.state, tuple(normalize_questions({"q": e.question}).values())) for e in other])]
    assert table["other wording"] == pytest.approx(auroc(probs, [int(float(e.target) >= 0.5) for e in other]))
    assert "| model (as served) |" in format_served({"m": table})


def test_the_specialist_can_be_fitted_on_chosen_data_sources_only() -> None:
    from types import SimpleNamespace

    from training.errors import PipelineError
    from training.specialist import specialist_examples

    pool = [SimpleNamespace(family=f, source=s) for f, s in [("relevance", "locomo"), ("relevance", "synthetic:relevance"),
                                                              ("relevance", "teacher:big"), ("pair", "locomo")]]
    assert [e.source for e in specialist_examples(pool, "relevance")] == ["locomo", "synthetic:relevance", "teacher:big"]
    assert [e.source for e in specialist_examples(pool, "relevance", ("locomo",))] == ["locomo"]
    assert [e.source for e in specialist_examples(pool, "relevance", ("synthetic", "teacher"))] == ["synthetic:relevance", "teacher:big"]
    with pytest.raises(PipelineError, match="no training examples of family 'relevance' from the sources synthe"):
        specialist_examples(pool, "relevance", ("synthe",))  # a source's name, not a prefix of it
    with pytest.raises(PipelineError, match="without ':'"):
        PipelineConfig(specialist_sources=("synthetic:relevance",))


def test_a_specialist_on_a_source_the_data_lacks_is_refused_and_the_old_one_kept(specialist_run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from controller.specialists import read_index

    cfg, metrics = specialist_run
    assert set(metrics["specialist"]["examples_by_source"]) == {"synthetic:relevance"}  # the fixture's data has no LoCoMo
    shutil.copytree(cfg.model, tmp_path / "model")
    before = read_index(tmp_path / "model")
    spec = replace(cfg, run_dir=str(tmp_path / "run"), model_dir=str(tmp_path / "model"), specialist_sources=("locomo",))
    with pytest.raises(Exception, match="from the sources locomo"):
        run_stage(spec, "fit_specialist")
    assert read_index(tmp_path / "model") == before and not (tmp_path / "run" / "fit-relevance").exists()


def test_the_time_budget_shortens_only_the_specialists_fit() -> None:
    from training.pipeline import within_budget

    cfg = PipelineConfig(specialist="relevance", specialist_max_minutes=22.0, total_minutes=59.5, finish_minutes=8.0)
    assert within_budget(cfg, 29.5) == cfg  # 59.5 - 29.5 - 8 = 22 left: its own cap holds
    assert within_budget(cfg, 31.4).specialist_max_minutes == pytest.approx(20.1)
    assert within_budget(cfg, 58.0).specialist_max_minutes == 1.0  # spent: one minute, never 0 (which means no cap)
    uncapped = PipelineConfig(specialist="relevance", total_minutes=40.0)
    assert within_budget(uncapped, 10.0).specialist_max_minutes == pytest.approx(22.0)
    assert within_budget(PipelineConfig(specialist="relevance", specialist_max_minutes=22.0), 58.0).specialist_max_minutes == 22.0
    assert within_budget(PipelineConfig(total_minutes=10.0), 58.0) == PipelineConfig(total_minutes=10.0)
    with pytest.raises(Exception, match="total_minutes must be >= 0"):
        PipelineConfig(total_minutes=-1.0)


def test_the_capped_fits_run_last_before_the_finishing_stages() -> None:
    assert STAGES[-3:] == ("calibrate", "evaluate", "export") and STAGES[-5:-3] == ("fit", "fit_specialist")


def test_make_train_records_a_shortened_specialist_fit(pipeline_run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    cfg, _ = pipeline_run
    shutil.copytree(cfg.model, tmp_path / "model")
    budget = replace(cfg, run_dir=str(tmp_path / "run"), model_dir=str(tmp_path / "model"), data_dir=str(cfg.data),
                     specialist="relevance", specialist_steps=2, specialist_max_minutes=30.0, total_minutes=25.0, finish_minutes=4.0)
    run_all(budget, skip_data=True)
    stages = json.loads((tmp_path / "run" / "stages.json").read_text())
    assert 20.0 < stages["fit_specialist"]["config_changes"]["specialist_max_minutes"] <= 21.0  # 25 - 4 - elapsed
    assert json.loads((tmp_path / "run" / "pipeline_config.json").read_text())["specialist_max_minutes"] == 30.0
    assert "config_changes" not in stages["fit"]


def test_fit_specialist_without_a_model_is_a_message_even_without_a_family(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    # without --specialist the stage (which removes a model's specialists) exited 0 and recorded itself for no model
    from training.__main__ import main

    assert main(["fit-specialist", "--run-dir", str(tmp_path / "r"), "--model-dir", str(tmp_path / "m")]) == 2
    assert "no model directory at" in capsys.readouterr().err
    assert not (tmp_path / "r" / "stages.json").exists()
