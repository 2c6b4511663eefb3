"""The retrieval-embedder fit (`training.embedder`) on the tiny BERT of conftest: pairs, loss, adapter files, seeding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data.locomo import load_locomo
from tests.memory.eval_fixtures import write_locomo
from training.embedder import (
    SUMMARY_FILE,
    EmbedderFitConfig,
    batch_loss,
    fit_embedder,
    fit_on_conversations,
    locomo_negatives,
    locomo_pairs,
)

PAIRS = [(f"Where did person {i} travel in {m}?", f"Person {i}: I went to city {i} in {m} and loved it.")
         for i in range(6) for m in ("May", "June")]


def test_locomo_pairs_take_each_gold_turn_of_the_answerable_questions(tmp_path: Path) -> None:
    data, audit = write_locomo(tmp_path)
    conversations = load_locomo(data, audit=audit)
    pairs = locomo_pairs(conversations)
    expected = [(q.question, t.memory_text()) for c in conversations for q in c.questions if q.category in (1, 2, 3, 4)
                for d in q.evidence for t in c.turns if t.dia_id == d]
    assert pairs == expected and pairs
    assert all(": " in memory for _, memory in pairs)  # the text the engine stores: "Speaker: text"


def test_a_repeated_question_does_not_count_its_other_gold_turn_as_a_negative(tiny_base: Path) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(tiny_base))
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_base))
    config = EmbedderFitConfig()
    same = [("q one?", "A: first answer"), ("q one?", "A: second answer"), ("q two?", "B: other")]
    with torch.no_grad():
        masked = batch_loss(model, tokenizer, same, config)
        unmasked = batch_loss(model, tokenizer, [same[0], ("q one ?", same[1][1]), same[2]], config)
    assert torch.isfinite(masked) and masked < unmasked


def test_the_fit_learns_saves_the_adapter_and_is_seeded(tiny_base: Path, tmp_path: Path) -> None:
    config = EmbedderFitConfig(lora_r=4, lora_alpha=8, lr=5e-3, epochs=6, batch_size=6, seed=3)
    summary = fit_embedder(PAIRS, tmp_path / "a", config, base=tiny_base)
    assert summary["pairs"] == len(PAIRS) and len(summary["epoch_loss"]) == 6
    assert summary["epoch_loss"][-1] < summary["epoch_loss"][0]
    assert {p.name for p in (tmp_path / "a").iterdir()} == {"adapter_config.json", "adapter_model.safetensors", SUMMARY_FILE}
    assert json.loads((tmp_path / "a" / SUMMARY_FILE).read_text())["config"]["lora_r"] == 4
    again = fit_embedder(PAIRS, tmp_path / "b", config, base=tiny_base)
    assert again["epoch_loss"] == summary["epoch_loss"]
    for name in ("adapter_model.safetensors", "adapter_config.json"):  # the digest that names the embedder is stable
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    recorded = json.loads((tmp_path / "a" / "adapter_config.json").read_text())
    assert recorded["target_modules"] == sorted(recorded["target_modules"]) and "/" not in recorded["base_model_name_or_path"]


def test_bad_settings_and_no_pairs_are_refused(tiny_base: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="lora_r"):
        EmbedderFitConfig(epochs=0)
    with pytest.raises(ValueError, match="lr and scale"):
        EmbedderFitConfig(lr=0.0)
    with pytest.raises(ValueError, match="no .* pairs"):
        fit_embedder([], tmp_path / "x", base=tiny_base)


def test_the_command_fits_on_the_named_conversations(tiny_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from training.__main__ import main

    data, audit = write_locomo(tmp_path)
    out = tmp_path / "emb"
    args = ["fit-embedder", "--locomo", str(data), "--audit", str(audit), "--conversations", "conv-26", "--out", str(out),
            "--base", str(tiny_base), "--epochs", "1", "--lora-r", "2"]
    assert main(args) == 0
    summary = json.loads((out / SUMMARY_FILE).read_text())
    conversation = load_locomo(data, audit=audit, conversations=("conv-26",))
    assert summary["pairs"] == len(locomo_pairs(conversation)) and summary["config"]["lora_alpha"] == 4
    capsys.readouterr()
    assert main([*args[:6], "conv-99", *args[7:]]) == 2
    assert "conv-99" in capsys.readouterr().err


def test_the_pipeline_stage_fits_on_the_train_conversations_only(tiny_base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from training import embedder as module
    from training import pipeline
    from training.pipeline_config import PipelineConfig
    from training.errors import PipelineError

    data, audit = write_locomo(tmp_path)
    seen: list[list[str]] = []
    real = module.fit_embedder

    def small_fit(pairs, out_dir, config, *, base, conversations, negatives):  # type: ignore[no-untyped-def]
        seen.append(list(conversations))
        return real(pairs, out_dir, EmbedderFitConfig(lora_r=2, lora_alpha=4, epochs=1, batch_size=4), base=base, conversations=conversations)

    monkeypatch.setattr(module, "fit_embedder", small_fit)
    cfg = PipelineConfig(run_dir=str(tmp_path / "run"), model_dir=str(tmp_path / "model"), base_path=str(tiny_base),
                                  locomo=str(data), audit=str(audit), dev_conversations=("conv-30",), calibration_conversations=())
    summary = pipeline.stage_fit_embedder(cfg)
    assert seen == [["conv-26"]] and summary["conversations"] == ["conv-26"]
    assert json.loads((tmp_path / "model" / "embedder" / SUMMARY_FILE).read_text())["conversations"] == ["conv-26"]
    assert "adapter_model.safetensors" in {p.name for p in (tmp_path / "model" / "embedder").iterdir()}
    held_out = PipelineConfig(run_dir=str(tmp_path / "run"), model_dir=str(tmp_path / "m2"), locomo=str(data), audit=str(audit))
    with pytest.raises(PipelineError, match="outside the dev and calibration"):
        pipeline.stage_fit_embedder(held_out)  # conv-26 and conv-30 are the default dev pair: nothing to fit on
    skipped = pipeline.stage_fit_embedder(PipelineConfig(run_dir=str(tmp_path / "run"), model_dir=str(tmp_path / "m3")))
    assert "skipped" in skipped and not (tmp_path / "m3").exists()


def test_the_model_card_describes_the_embedder() -> None:
    from training.card import _embedder_lines

    emb = {"config": asdict_config(), "conversations": ["conv-41"], "pairs": 5, "epoch_loss": [0.9, 0.5], "seconds": 1.0}
    (line,) = _embedder_lines(emb)
    assert "rank 16" in line and "5 (question, gold turn) pairs of conv-41" in line and "0.900, 0.500" in line
    assert _embedder_lines({}) == [] and "hard negative" not in line
    (mined,) = _embedder_lines({**emb, "config": {**emb["config"], "hard_negatives": 1}})
    assert "1 hard negative per pair drawn from the BM25 top 20 turns" in mined


def asdict_config() -> dict:
    from dataclasses import asdict

    return asdict(EmbedderFitConfig())


def test_hard_negative_pools_hold_top_bm25_turns_of_the_same_conversation_but_no_gold(tmp_path: Path) -> None:
    data, audit = write_locomo(tmp_path)
    conversations = load_locomo(data, audit=audit)
    pools = locomo_negatives(conversations, depth=3)
    for conv in conversations:
        texts = {t.memory_text() for t in conv.turns}
        gold_of = {t.dia_id: t.memory_text() for t in conv.turns}
        for q in conv.questions:
            if q.question in pools:
                assert set(pools[q.question]) <= texts and len(pools[q.question]) <= 3
                assert not {gold_of[d] for d in q.evidence if d in gold_of} & set(pools[q.question])
    assert any(pools.values())


def test_a_hard_negative_that_is_the_question_s_own_gold_is_masked(tiny_base: Path) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(tiny_base))
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_base))
    model.eval()  # no dropout: the three losses differ only by their negatives
    batch = [("q one?", "A: first answer")]  # one pair: its loss is 0 until a negative joins
    config = EmbedderFitConfig()
    with torch.no_grad():
        plain = batch_loss(model, tokenizer, batch, config)
        own = batch_loss(model, tokenizer, batch, config, ["A: second answer"], {"q one?": {"A: first answer", "A: second answer"}})
        other = batch_loss(model, tokenizer, batch, config, ["C: unrelated words here"], {})
    assert torch.isclose(own, plain, atol=1e-6)  # another gold of the question, masked: the same loss as without it
    assert other > plain  # a real negative only adds to the softmax's denominator


def test_the_fit_with_hard_negatives(tiny_base: Path, tmp_path: Path) -> None:
    data, audit = write_locomo(tmp_path)
    conversations = load_locomo(data, audit=audit)
    config = EmbedderFitConfig(lora_r=2, lora_alpha=4, epochs=2, batch_size=4, hard_negatives=1, mine_depth=5)
    with_negatives = fit_on_conversations(conversations, tmp_path / "hn", config, base=tiny_base)
    without = fit_on_conversations(conversations, tmp_path / "plain", EmbedderFitConfig(lora_r=2, lora_alpha=4, epochs=2, batch_size=4), base=tiny_base)
    assert with_negatives["config"]["hard_negatives"] == 1 and with_negatives["pairs"] == without["pairs"]
    assert with_negatives["epoch_loss"] != without["epoch_loss"]
    with pytest.raises(ValueError, match="mined pools"):
        fit_embedder(PAIRS, tmp_path / "x", config, base=tiny_base)
    with pytest.raises(ValueError, match="hard_negatives"):
        EmbedderFitConfig(hard_negatives=-1)


def test_the_shipped_adapter_records_the_recipe_make_train_runs() -> None:
    from dataclasses import asdict

    from controller.embedding import TUNED_ADAPTER_DIR

    shipped = json.loads((TUNED_ADAPTER_DIR / SUMMARY_FILE).read_text())
    assert shipped["config"] == json.loads(json.dumps(asdict(EmbedderFitConfig())))
    assert shipped["conversations"] == ["conv-41", "conv-42", "conv-43"]  # never the dev pair or conv-44


def _no_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fit that reaches its first step fails the test: the inputs must be refused before any of its work."""
    from training import embedder as module

    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the fit ran")

    monkeypatch.setattr(module, "batch_loss", refuse)


def _fit_embedder(capsys: pytest.CaptureFixture[str], tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    from training.__main__ import main

    data, _ = write_locomo(tmp_path)
    code = main(["fit-embedder", "--locomo", str(data), "--conversations", "conv-26", "--epochs", "1", "--lora-r", "2", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_command_refuses_a_base_that_is_not_a_base_model_directory(tiny_base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    _no_fit(monkeypatch)
    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    no_tokenizer = tmp_path / "no-tokenizer"
    shutil.copytree(tiny_base, no_tokenizer)
    (no_tokenizer / "tokenizer.json").unlink()
    out = tmp_path / "emb"
    for base, message in (
        (tmp_path / "nonexistent", "does not exist: give a base model directory"),
        (tmp_path / "a-file", "is not a directory: give a base model directory"),
        (tmp_path / "empty", "is not a base model directory: it has no config.json and no model.safetensors or pytorch_model.bin"),
        (no_tokenizer, f"is not a base model directory: tokenizer file not found: {no_tokenizer / 'tokenizer.json'}"),
    ):
        code, printed, err = _fit_embedder(capsys, tmp_path, "--out", str(out), "--base", str(base))
        assert (code, printed, err) == (2, "", f"error: --base {base} {message}\n")
        assert not out.exists()
    damaged = tmp_path / "damaged"
    shutil.copytree(tiny_base, damaged)
    (damaged / "tokenizer.json").write_text('{"x":', encoding="utf-8")
    code, printed, err = _fit_embedder(capsys, tmp_path, "--out", str(out), "--base", str(damaged))
    assert (code, printed) == (2, "") and err.startswith(f"error: --base {damaged}: cannot read its tokenizer.json: ")
    assert "Traceback" not in err and not out.exists()


def test_the_pipeline_stage_refuses_a_bad_base_before_fitting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from training import pipeline
    from training.errors import TrainingError
    from training.pipeline_config import PipelineConfig

    _no_fit(monkeypatch)
    data, audit = write_locomo(tmp_path)
    cfg = PipelineConfig(run_dir=str(tmp_path / "run"), model_dir=str(tmp_path / "model"), base_path=str(tmp_path / "nonexistent"),
                         locomo=str(data), audit=str(audit), dev_conversations=("conv-30",), calibration_conversations=())
    with pytest.raises(TrainingError, match=rf"^--base {tmp_path / 'nonexistent'} does not exist"):
        pipeline.stage_fit_embedder(cfg)
    assert not (tmp_path / "model").exists()


def test_the_command_refuses_an_out_it_cannot_replace_before_fitting(tiny_base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    _no_fit(monkeypatch)
    a_file = tmp_path / "a-file"
    a_file.write_text("kept", encoding="utf-8")
    for out, problem in ((a_file, f"{a_file} is a file, not a directory"),
                         (a_file / "emb", f"{a_file} is a file, so {a_file / 'emb'} cannot be created")):
        code, printed, err = _fit_embedder(capsys, tmp_path, "--out", str(out), "--base", str(tiny_base))
        assert (code, printed, err) == (2, "", f"error: cannot write --out {out}: {problem}\n")
    assert a_file.read_text(encoding="utf-8") == "kept"


def test_conversations_without_questions_are_a_message_naming_them(tiny_base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _no_fit(monkeypatch)
    data, _ = write_locomo(tmp_path)
    samples = json.loads(data.read_text(encoding="utf-8"))
    samples[0]["qa"] = []  # conv-26
    data.write_text(json.dumps(samples), encoding="utf-8")
    out = tmp_path / "emb"
    from training.__main__ import main

    code = main(["fit-embedder", "--locomo", str(data), "--conversations", "conv-26", "--out", str(out), "--base", str(tiny_base)])
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, "")
    assert captured.err == ("error: no (question, gold turn) pairs to fit the embedder on in conv-26: they hold no answerable "
                            "question (categories 1-4) that cites a turn\n")
    assert not out.exists()
