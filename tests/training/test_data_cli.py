"""`python -m training build-data` and `distill` on the tiny fixture (fast: few synthetic states, hashing embedder)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

import data.teacher
from data.schema import DataError, load_examples, read_jsonl
from tests.training.test_data_locomo import write_locomo_fixture
from tests.training.test_teacher import FakeTeacher
from training.__main__ import main


def test_build_data_writes_splits_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, audit = write_locomo_fixture(tmp_path)
    out = tmp_path / "decisions"
    argv = ["build-data", "--locomo", str(path), "--audit", str(audit), "--out", str(out),
            "--synthetic-per-family", "40", "--seed", "1", "--dense", "hashing", "--questions"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "family" in printed and "build wall-clock" in printed and "relevance" in printed
    assert sorted(p.name for p in out.iterdir()) == ["calibration.jsonl", "dev.jsonl", "summary.json", "test.jsonl", "train.jsonl"]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) >= {"counts", "seconds", "rows", "questions", "totals", "dropped_for_leakage", "config"}
    assert summary["counts"]["dev"] == len(load_examples(out, "dev")) > 0
    assert summary["config"]["seed"] == 1
    first = (out / "train.jsonl").read_bytes()
    assert main(argv) == 0  # same seed, same bytes
    assert (out / "train.jsonl").read_bytes() == first
    assert summary["config"]["rules"]["query_swaps"] == 0 and '"locomo:swap"' not in first.decode()
    assert main([*argv, "--query-swaps", "2"]) == 0
    assert json.loads((out / "summary.json").read_text())["config"]["rules"]["query_swaps"] == 2
    assert main([*argv, "--query-swaps", "1", "--random-swaps"]) == 0
    assert json.loads((out / "summary.json").read_text())["config"]["rules"]["random_swaps"] is True
    assert '"locomo:swap"' in (out / "train.jsonl").read_text()
    assert main([*argv, "--observation-queries", "3"]) == 0
    assert json.loads((out / "summary.json").read_text())["config"]["rules"]["observation_queries"] == 3
    assert '"locomo:observation-query"' in (out / "train.jsonl").read_text()


def test_train_conversations_limit_the_train_split_and_keep_the_held_out_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, audit = write_locomo_fixture(tmp_path)
    argv = ["build-data", "--locomo", str(path), "--audit", str(audit), "--synthetic-per-family", "10", "--dense", "hashing",
            "--calibration-conversations", ""]  # conv-41 and conv-44 are then both train conversations

    def groups(out: Path) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for e in load_examples(out):
            if e.source == "locomo":
                found.setdefault(e.split, set()).add(e.group)
        return found

    assert main([*argv, "--out", str(tmp_path / "all")]) == 0
    assert groups(tmp_path / "all") == {"train": {"locomo:conv-41", "locomo:conv-44"}, "dev": {"locomo:conv-26", "locomo:conv-30"}}
    assert main([*argv, "--out", str(tmp_path / "one"), "--train-conversations", "conv-44"]) == 0
    assert groups(tmp_path / "one") == {"train": {"locomo:conv-44"}, "dev": {"locomo:conv-26", "locomo:conv-30"}}
    assert json.loads((tmp_path / "one" / "summary.json").read_text())["config"]["train_conversations"] == ["conv-44"]
    for wrong, message in (("conv-99", "not in the LoCoMo file"), ("conv-26", "held out")):  # a message, exit status 2
        assert main([*argv, "--out", str(tmp_path / "bad"), "--train-conversations", wrong]) == 2
        assert message in capsys.readouterr().err
    assert main([*argv, "--out", str(tmp_path / "dev30"), "--dev-conversations", "conv-30"]) == 0  # conv-26 joins training
    assert groups(tmp_path / "dev30") == {"train": {"locomo:conv-26", "locomo:conv-41", "locomo:conv-44"}, "dev": {"locomo:conv-30"}}
    assert main([*argv, "--out", str(tmp_path / "none"), "--dev-conversations", ""]) == 0
    assert groups(tmp_path / "none") == {"train": {"locomo:conv-26", "locomo:conv-30", "locomo:conv-41", "locomo:conv-44"}}
    # a misspelt held-out id would silently train on the conversation meant to be held out
    for flag in ("--dev-conversations", "--calibration-conversations"):
        assert main([*argv, "--out", str(tmp_path / "typo"), flag, "conv26"]) == 2
        assert "held-out LoCoMo conversations not in the LoCoMo file: conv26" in capsys.readouterr().err
    assert not (tmp_path / "typo").exists()
    assert main([*argv, "--out", str(tmp_path / "dated"), "--relevance-dated"]) == 0
    assert json.loads((tmp_path / "dated" / "summary.json").read_text())["config"]["rules"]["relevance_dated"] is True


def test_build_data_without_locomo_and_without_calibration_conversation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "synthetic"
    assert main(["build-data", "--out", str(out), "--synthetic-per-family", "20", "--calibration-conversations", ""]) == 0
    assert {e.source.split(":")[0] for e in load_examples(out)} == {"synthetic"}
    assert not (out / "dev.jsonl").exists()


def test_distill_command_uses_the_teacher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "data"
    assert main(["build-data", "--out", str(out), "--synthetic-per-family", "10"]) == 0
    fake = FakeTeacher()
    original = data.teacher.make_client

    def client(config: Any, *, transport: Any = None) -> Any:
        return original(config, transport=httpx2.MockTransport(fake))

    monkeypatch.setattr(data.teacher, "make_client", client)
    labels = tmp_path / "teacher.jsonl"
    argv = ["distill", "--data", str(out), "--split", "train", "--families", "routing", "--limit", "12",
            "--base-url", "http://teacher.local", "--name", "open7b", "--out", str(labels)]
    assert main(argv) == 0
    records = list(read_jsonl(labels))
    assert len(records) == 12 and all(r.source == "teacher:open7b" and r.family == "routing" for r in records)
    assert "12 written" in capsys.readouterr().out
    # the recorded answers become training data of a new build; answers on held-out states never do
    held = tmp_path / "teacher-test.jsonl"
    assert main([*argv[:4], "test", *argv[5:-1], str(held)]) == 0
    rebuilt = tmp_path / "with-teacher"
    assert main(["build-data", "--out", str(rebuilt), "--synthetic-per-family", "10", "--include", str(labels), str(held)]) == 0
    assert "included" in capsys.readouterr().out
    train = [e for e in load_examples(rebuilt, "train") if e.source == "teacher:open7b"]
    assert sorted(e.id for e in train) == sorted(r.id for r in records)
    assert not [e for split in ("calibration", "test") for e in load_examples(rebuilt, split) if e.source.startswith("teacher:")]
    summary = json.loads((rebuilt / "summary.json").read_text())
    assert summary["included"][str(labels)] == {"read": 12, "held_out_dropped": 0, "other_conversations_dropped": 0, "train": 12}
    n_held = len(list(read_jsonl(held)))
    assert n_held > 0 and summary["included"][str(held)] == {"read": n_held, "held_out_dropped": n_held, "other_conversations_dropped": 0, "train": 0}
    assert summary["config"]["include"] == [str(labels), str(held)]
    # the same file twice, or a file that is not there: a message and exit status 2, nothing written
    for files, message in (([labels, labels], "already in the build"), ([tmp_path / "missing.jsonl"], "cannot read included")):
        assert main(["build-data", "--out", str(tmp_path / "bad"), "--synthetic-per-family", "10", "--include", *map(str, files)]) == 2
        assert message in capsys.readouterr().err and not (tmp_path / "bad").exists()


def test_build_data_from_an_unreadable_or_malformed_locomo_file_is_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = write_locomo_fixture(tmp_path)
    samples = json.loads(path.read_text(encoding="utf-8"))
    del samples[0]["qa"][1]["category"]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(samples), encoding="utf-8")
    for locomo, message in ((tmp_path / "missing.json", "cannot read LoCoMo file"), (broken, "qa 1: category must be one of")):
        argv = ["build-data", "--locomo", str(locomo), "--out", str(tmp_path / "out"), "--synthetic-per-family", "4", "--dense", "none"]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and not (tmp_path / "out").exists()


def test_distill_refuses_a_split_it_cannot_read_and_a_negative_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "data"
    assert main(["build-data", "--out", str(out), "--synthetic-per-family", "4"]) == 0

    def never(config: Any, *, transport: Any = None) -> Any:
        raise AssertionError("a refused command must not reach the teacher")

    monkeypatch.setattr(data.teacher, "make_client", never)
    labels = tmp_path / "teacher.jsonl"
    base = ["distill", "--base-url", "http://teacher.local", "--name", "open7b", "--out", str(labels)]
    for extra, message in ((["--data", str(tmp_path / "nowhere")], "no train.jsonl under"),
                           (["--data", str(out), "--split", "dve"], "no dve.jsonl under"),
                           (["--data", str(out), "--limit", "-3"], "--limit must be >= 0"),
                           (["--data", str(out), "--families", "routing,routng"], "no train examples of families routng")):
        assert main([*base, *extra]) == 2
        assert message in capsys.readouterr().err
    assert not labels.exists()  # nothing was asked of the teacher


def _example(i: int, group: str, question: str = "Is it episodic?") -> Any:
    from data.schema import DecisionExample

    return DecisionExample(id=f"mine:{i}", family="typing", question_name="episodic", state={"observation": f"text {i}"},
                           question={"type": "noul", "instructions": question}, target=1.0, source="mine", group=group)


def test_included_files_reject_repeated_ids_and_undecodable_bytes_and_keep_train_conversations(tmp_path: Path) -> None:
    from data.builders.dataset import included_examples
    from data.schema import write_jsonl
    from data.splits import SplitPlan

    plan = SplitPlan()
    twice = tmp_path / "twice.jsonl"
    write_jsonl(twice, [_example(0, "mine:a"), _example(0, "mine:a", "Is it semantic?")])  # one id, two questions
    with pytest.raises(DataError, match="appear more than once"):
        included_examples([str(twice)], plan, set())
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00{not text")
    with pytest.raises(DataError, match="cannot read included"):
        included_examples([str(binary)], plan, set())
    mixed = tmp_path / "mixed.jsonl"
    write_jsonl(mixed, [_example(1, "locomo:conv-42"), _example(2, "locomo:conv-50"), _example(3, "mine:a")])
    kept, counts = included_examples([str(mixed)], plan, set(), train_conversations=("conv-42",))
    assert sorted(e.id for e in kept) == ["mine:1", "mine:3"]
    assert counts[str(mixed)] == {"read": 3, "held_out_dropped": 0, "other_conversations_dropped": 1, "train": 2}
    every, _ = included_examples([str(mixed)], plan, set())
    assert len(every) == 3


def test_build_data_refuses_a_swap_target_that_is_not_a_negative(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build-data", "--out", str(tmp_path / "bad"), "--synthetic-per-family", "4", "--swap-target", "0.7"]) == 2
    assert "--swap-target is a negative's soft target in [0, 0.5), got 0.7" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_an_out_that_cannot_be_a_directory_is_refused_before_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # it was a FileExistsError / NotADirectoryError traceback, raised only once the whole build had run
    import data.builders

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a refused --out must not start the build")

    monkeypatch.setattr(data.builders.dataset, "build_dataset", never)
    monkeypatch.setattr("training.data_cli.build_dataset", never)
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    for out in (tmp_path / "a-file", tmp_path / "a-file" / "sub"):
        assert main(["build-data", "--out", str(out), "--synthetic-per-family", "4", "--dense", "none"]) == 2
        err = capsys.readouterr().err
        assert "cannot write the decision data to" in err and "is a file" in err and "Traceback" not in err
    assert (tmp_path / "a-file").read_text(encoding="utf-8") == "x"


def test_distill_to_a_directory_is_a_message_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "data"
    assert main(["build-data", "--out", str(out), "--synthetic-per-family", "4", "--dense", "none"]) == 0
    assert main(["distill", "--data", str(out), "--base-url", "http://teacher.local", "--name", "t", "--out", str(out)]) == 2
    assert "cannot write teacher records to" in capsys.readouterr().err
