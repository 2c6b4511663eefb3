"""The decision-data schema: validation, JSON round-trip, files, grouping, `datasets` loading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data.schema import (
    DecisionExample,
    SchemaError,
    from_row,
    group_examples,
    load_decisions,
    load_examples,
    read_jsonl,
    to_row,
    write_jsonl,
    write_splits,
)

NOUL = {"type": "noul", "instructions": "Does state.observation describe an event?"}
CHOICE = {"type": "choice", "instructions": "Order?", "criteria": {"before": "a first", "after": None, "unknown": "no idea"}}
SCORE = {"type": "score", "instructions": "How sure?", "criteria": ["low", "mid", "high"]}


def make(i: int = 0, *, question: dict | None = None, target: object = 1.0, split: str = "train", state: object = None) -> DecisionExample:
    return DecisionExample(
        id=f"x:{i}", family="typing", question_name="episodic", state=state if state is not None else {"observation": f"Ann ran {i} km. ✓"},
        question=question or NOUL, target=target, source="synthetic:test", group="g0", split=split,  # type: ignore[arg-type]
    )


def test_round_trip_keeps_every_field_and_option_order() -> None:
    examples = [
        make(0, target=0.25),
        make(1, question=CHOICE, target={"unknown": 0.5, "before": 0.25, "after": 0.25}),
        make(2, question=SCORE, target=[0.2, 0.3, 0.5], split="test"),
    ]
    for e in examples:
        back = DecisionExample.from_json(e.to_json())
        assert back == e
        assert from_row(to_row(e)) == e
    choice = DecisionExample.from_json(examples[1].to_json())
    assert list(choice.target) == ["before", "after", "unknown"]  # follows the question's options
    assert list(json.loads(to_row(examples[1])["question"])["criteria"]) == ["before", "after", "unknown"]


@pytest.mark.parametrize(
    ("question", "target", "field"),
    [
        (NOUL, 1.5, "target"),
        (NOUL, True, "target"),
        (CHOICE, {"before": 1.0}, "target"),
        (CHOICE, {"before": 0.5, "after": 0.2, "unknown": 0.2}, "target"),
        (SCORE, [0.5, 0.5], "target"),
        ({"type": "box"}, 1.0, "question"),
        ({"type": "noul"}, 1.0, "question"),
    ],
)
def test_invalid_targets_and_questions_are_refused(question: dict, target: object, field: str) -> None:
    with pytest.raises(SchemaError) as info:
        make(question=question, target=target)
    assert info.value.field_name == field


def test_invalid_split_weight_and_state() -> None:
    with pytest.raises(SchemaError):
        make(split="validation")
    with pytest.raises(SchemaError):
        DecisionExample("i", "f", "q", {"a": 1}, NOUL, 1.0, "s", "g", weight=-1.0)
    with pytest.raises(SchemaError):
        make(state=3)
    with pytest.raises(SchemaError):
        DecisionExample.from_dict({**make().to_dict(), "extra": 1})


def test_jsonl_files_and_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    assert write_jsonl(path, [make(0), make(1)]) == 2
    with path.open("a", encoding="utf-8") as handle:
        handle.write(make(2).to_json()[:30])  # an interrupted append
    assert [e.id for e in read_jsonl(path)] == ["x:0", "x:1"]
    path.write_text("not json\n" + make(0).to_json() + "\n", encoding="utf-8")
    with pytest.raises(SchemaError):
        list(read_jsonl(path))


def test_an_append_keeps_a_whole_last_record_that_lost_only_its_newline(tmp_path: Path) -> None:
    # a buffered write cut just before the newline: the record reads as recorded (a resumed teacher run skips
    # its id), so the next append must keep it, not cut it as torn
    path = tmp_path / "t.jsonl"
    write_jsonl(path, [make(0), make(1)])
    with path.open("a", encoding="utf-8") as handle:
        handle.write(make(2).to_json())
    assert [e.id for e in read_jsonl(path)] == ["x:0", "x:1", "x:2"]
    write_jsonl(path, [make(3)], append=True)
    assert [e.id for e in read_jsonl(path)] == ["x:0", "x:1", "x:2", "x:3"]
    with path.open("a", encoding="utf-8") as handle:
        handle.write(make(4).to_json()[:30])  # a torn one is still cut
    write_jsonl(path, [make(5)], append=True)
    assert [e.id for e in read_jsonl(path)] == ["x:0", "x:1", "x:2", "x:3", "x:5"]


def test_grouping_packs_questions_of_one_state() -> None:
    shared = {"observation": "Ann ran 5 km."}
    examples = [make(i, state=shared) for i in range(5)] + [make(9), make(10, state=shared, split="dev")]
    groups = group_examples(examples)
    sizes = sorted(len(g.examples) for g in groups)
    assert sizes == [1, 1, 5]
    assert sorted(len(g.examples) for g in group_examples(examples, max_questions=2)) == [1, 1, 1, 2, 2]
    big = next(g for g in groups if len(g.examples) == 5)
    assert list(big.questions) == [f"x:{i}" for i in range(5)] and big.state == shared


@pytest.mark.parametrize("bad", [0, -2])
def test_grouping_refuses_a_group_size_below_one_instead_of_losing_examples(bad: int) -> None:
    from data.schema import DataError

    with pytest.raises(DataError, match="max_questions must be >= 1"):
        group_examples([make(i) for i in range(3)], max_questions=bad)


def test_an_interrupted_split_write_leaves_the_previous_build_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Ctrl-C while a rebuild writes train.jsonl must not leave a cut train split (its torn last line is skipped
    # silently on reading) beside the old build's other splits
    import data.schema

    write_splits(tmp_path, [make(i) for i in range(4)] + [make(9, split="dev")])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real = data.schema.write_jsonl

    def interrupted(path: Path, examples: object, **kw: object) -> int:
        with Path(path).open("w", encoding="utf-8") as handle:
            handle.write(next(iter(examples)).to_json()[:20])  # type: ignore[call-overload]
        raise KeyboardInterrupt

    monkeypatch.setattr(data.schema, "write_jsonl", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_splits(tmp_path, [make(i + 20) for i in range(6)] + [make(30, split="calibration")])
    monkeypatch.setattr(data.schema, "write_jsonl", real)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_splits_and_datasets_loading(tmp_path: Path) -> None:
    examples = [make(0), make(1, split="dev"), make(2, question=CHOICE, target={"before": 1.0, "after": 0.0, "unknown": 0.0})]
    (tmp_path / "test.jsonl").write_text("stale\n", encoding="utf-8")
    assert write_splits(tmp_path, examples) == {"train": 2, "dev": 1}
    assert not (tmp_path / "test.jsonl").exists()
    assert [e.id for e in load_examples(tmp_path)] == ["x:0", "x:2", "x:1"]
    ds = load_decisions(tmp_path)
    assert set(ds) == {"train", "dev"} and ds["train"].num_rows == 2
    row = ds["train"][1]
    assert row["kind"] == "choice" and json.loads(row["target"]) == {"before": 1.0, "after": 0.0, "unknown": 0.0}
    assert row["state_key"] == examples[2].state_key
    assert from_row(row) == examples[1 + 1]


def test_records_that_cannot_be_written_back_or_numbers_too_big_are_schema_errors(tmp_path: Path) -> None:
    # json.loads reads NaN and 400-digit numbers; they crashed the build later (ValueError from canonical()/to_json,
    # OverflowError from float()) with a traceback instead of a message naming the line
    good = make(0).to_dict()
    lines = {
        "state": json.dumps(good).replace('"Ann ran 0 km. \\u2713"', "NaN"),
        "question": json.dumps({**good, "question": {**NOUL, "criteria": {"true": 1.0}}}).replace("1.0}", "Infinity}"),
        "weight": json.dumps({**good, "weight": 10**400}),
        "target": json.dumps({**good, "target": 10**400}),
        "depth": "[" * 100_000,
    }
    for name, line in lines.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text(line + "\n" + make(1).to_json() + "\n", encoding="utf-8")
        with pytest.raises(SchemaError, match=f"{name}.jsonl:1: "):
            list(read_jsonl(path))


def test_a_split_file_that_cannot_be_read_is_a_data_error_naming_it(tmp_path: Path) -> None:
    from data.schema import DataError

    (tmp_path / "train.jsonl").write_bytes(b"\xff\xfe\x00{not text")
    (tmp_path / "dev.jsonl").mkdir()
    for split in ("train", "dev"):
        with pytest.raises(DataError, match=f"cannot read decision examples .*{split}.jsonl"):
            load_examples(tmp_path, split)



class Killed(BaseException):
    """The simulated kill of a build at one filesystem step of its commit."""


def _snapshot(root: Path) -> dict[str, bytes] | None:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())} if root.is_dir() else None


@pytest.mark.parametrize("exchange", [True, False], ids=["one-step-exchange", "two-renames"])
def test_a_split_write_killed_at_any_step_of_its_commit_leaves_the_old_or_the_new_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                                       exchange: bool) -> None:
    # the commit used to rename the split files and summary.json in one by one: a kill between two renames left
    # the new train split beside the old dev split and the old summary, a build that never was
    import os

    import data.paths

    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    if exchange and not data.paths._exchange(tmp_path / "a", tmp_path / "b"):
        pytest.skip("no renameat2(RENAME_EXCHANGE) on this system")
    old_rows = [make(i) for i in range(3)] + [make(9, split="dev")]
    new_rows = [make(i + 20) for i in range(4)] + [make(30, split="calibration")]
    summary = lambda counts: {"summary.json": json.dumps(counts) + "\n"}  # noqa: E731
    write_splits(tmp_path / "new", new_rows, extra=summary)
    new = {**_snapshot(tmp_path / "new"), "notes.txt": b"kept\n"}  # type: ignore[dict-item]  (other files stay)
    real = {"os.rename": os.rename, "os.replace": os.replace, "Path.rename": Path.rename, "Path.replace": Path.replace,
            "exchange": data.paths._exchange if exchange else (lambda a, b: False)}
    where = {"os.rename": (os, "rename"), "os.replace": (os, "replace"), "Path.rename": (Path, "rename"),
             "Path.replace": (Path, "replace"), "exchange": (data.paths, "_exchange")}
    kills = 0
    for kill_at in range(1, 12):
        for after in (False, True):  # killed just before the step, or just after it
            out = tmp_path / f"out-{kill_at}-{after}"
            write_splits(out, old_rows, extra=summary)
            (out / "notes.txt").write_text("kept\n", encoding="utf-8")
            old = _snapshot(out)
            steps: list[str] = []

            def step(name: str):  # type: ignore[no-untyped-def]
                def run(*args, **kwargs):  # type: ignore[no-untyped-def]
                    steps.append(name)
                    if len(steps) == kill_at and not after:
                        raise Killed(name)
                    result = real[name](*args, **kwargs)
                    if len(steps) == kill_at:
                        raise Killed(name)
                    return result
                return run

            for name, (owner, attribute) in where.items():
                monkeypatch.setattr(owner, attribute, step(name))
            try:
                write_splits(out, new_rows, extra=summary)
            except Killed:
                kills += 1
            finally:
                monkeypatch.undo()
            if exchange:  # the directory holds the old build or the new one at every instant
                assert _snapshot(out) in (old, new), (kill_at, after, steps)
            else:  # a kill between the two renames leaves no directory (never a mix); the next write puts the old one back
                assert _snapshot(out) in (None, old, new), (kill_at, after, steps)
                data.paths.recover(out)
                assert _snapshot(out) in (old, new), (kill_at, after, steps)
            write_splits(out, new_rows, extra=summary)  # and clears what the kill left beside it
            assert _snapshot(out) == new and [p.name for p in tmp_path.iterdir() if out.name in p.name] == [out.name]
        if len(steps) < kill_at:
            break  # the write took fewer steps than this: every one of them was killed at
    assert kills >= 2
