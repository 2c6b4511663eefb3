"""`jevmem ingest` against careless input: a file is written whole or not at all, and what was (not) stored is said."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from serving import cli
from tests.memory.sqlite_faults import INSERT_NODE, FailingConnection, statement_is


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def nodes(capsys: pytest.CaptureFixture[str], db: Path) -> int:
    code, out, err = run(capsys, "stats", "--db", str(db), "--json")
    assert code == 0, err
    return int(json.loads(out)["nodes"])


def _jsonl(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"content": f"Mira: note number {i}.", "source_ids": [f"d{i}"]}) + "\n" for i in range(n)))
    return path


def test_a_record_the_engine_refuses_mid_file_stores_nothing_and_names_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "obs.jsonl"
    source.write_text('{"content": "Mira: one."}\n{"content": "Mira: two."}\n\n{"content": "three", "metadata": {"x": NaN}}\n')
    db = tmp_path / "m.db"
    code, _, err = run(capsys, "ingest", "--db", str(db), "--jsonl", str(source), "--embedder", "hashing")
    assert code == 2 and "obs.jsonl:4:" in err and "Traceback" not in err
    assert not db.exists()  # refused while reading: the first two lines were not written


def test_a_store_failure_mid_file_stores_nothing_so_a_rerun_does_not_duplicate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from memory.engine import Engine

    source = _jsonl(tmp_path / "obs.jsonl", 5)
    db = tmp_path / "m.db"
    assert run(capsys, "ingest", "--db", str(db), "--jsonl", str(_jsonl(tmp_path / "seed.jsonl", 1)), "--embedder", "hashing")[0] == 0
    real_open = Engine.open

    def failing_open(*args: Any, **kwargs: Any) -> Engine:
        engine = real_open(*args, **kwargs)
        FailingConnection.install(engine.store, when=statement_is(INSERT_NODE), nth=3)  # the third new node: disk full
        return engine

    monkeypatch.setattr(Engine, "open", failing_open)
    code, out, err = run(capsys, "ingest", "--db", str(db), "--jsonl", str(source))
    monkeypatch.setattr(Engine, "open", real_open)
    assert nodes(capsys, db) == 1  # the head of the file was not left behind
    assert code == 2 and "Traceback" not in err
    assert "nothing from" in err and "obs.jsonl" in err and "disk is full" in err and out == ""
    assert run(capsys, "ingest", "--db", str(db), "--jsonl", str(source))[0] == 0
    assert nodes(capsys, db) == 6  # the rerun stores each line once


def test_an_empty_file_is_refused_without_creating_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "empty.jsonl"
    source.write_text("\n\n")
    db = tmp_path / "m.db"
    code, _, err = run(capsys, "ingest", "--db", str(db), "--jsonl", str(source), "--embedder", "hashing")
    assert code == 2 and "holds no observations" in err and not db.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--jsonl", "{src}", "--conversation", "conv-26"], "--conversation goes with --locomo"),
        (["--jsonl", "{tmp}"], "is a directory"),
    ],
)
def test_conflicting_or_impossible_ingest_arguments_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    source = _jsonl(tmp_path / "obs.jsonl", 1)
    db = tmp_path / "m.db"
    code, _, err = run(capsys, "ingest", "--db", str(db), "--embedder", "hashing", *(a.format(src=source, tmp=tmp_path) for a in argv))
    assert code == 2 and message in err and err.count("\n") == 1 and not db.exists()


@pytest.mark.parametrize("command", [["ingest", "--jsonl", "{src}"], ["stats"], ["query", "x"]])
def test_an_empty_db_path_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    source = _jsonl(tmp_path / "obs.jsonl", 1)
    code, _, err = run(capsys, *(a.format(src=source) for a in command), "--db", "", "--embedder", "hashing")
    assert code == 2 and "--db needs a file path" in err


def test_a_locomo_turn_the_engine_would_refuse_names_its_dia_id_and_stores_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.memory.eval_fixtures import locomo_samples

    samples = locomo_samples()
    samples[1]["conversation"]["session_2"][1]["text"] = "caf\ud800"  # a lone surrogate, as a JSON escape can give
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps(samples), encoding="utf-8")
    db = tmp_path / "m.db"
    code, _, err = run(capsys, "ingest", "--db", str(db), "--locomo", str(data), "--conversation", "conv-30", "--embedder", "hashing")
    assert code == 2 and "conv-30 turn D2:2: " in err and "not valid Unicode" in err and not db.exists()
