"""`jevmem ingest --batch-size N`: committed batches (another writer gets the lock between them), a failure that
says exactly which records are stored and how to resume, `--skip` resuming without duplicates, and blank ids refused."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from serving import cli
from tests.memory.sqlite_faults import INSERT_NODE, FailingConnection, statement_is


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _jsonl(path: Path, n: int) -> Path:
    """n records; a blank line after the second, so record k (k > 2) is on line k + 1."""
    lines = [json.dumps({"content": f"Mira: note number {i}.", "source_ids": [f"d{i}"]}) for i in range(1, n + 1)]
    path.write_text("\n".join([*lines[:2], "", *lines[2:]]) + "\n", encoding="utf-8")
    return path


def _stored_sources(db: Path) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT source_ids FROM nodes WHERE kind != 'summary' ORDER BY seq").fetchall()
    finally:
        conn.close()
    return [s for (ids,) in rows for s in json.loads(ids)]


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(batch size, records another connection already sees) for every `write_many` call."""
    from memory.engine import Engine

    seen: list[tuple[int, int]] = []
    real = Engine.write_many

    def spy(self: Engine, observations: Any, **kwargs: Any) -> Any:
        batch = list(observations)
        seen.append((len(batch), len(_stored_sources(self.store.path))))  # type: ignore[attr-defined]
        return real(self, batch, **kwargs)

    monkeypatch.setattr(Engine, "write_many", spy)
    return seen


def test_records_are_written_in_committed_batches(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  batches: list[tuple[int, int]]) -> None:
    db = tmp_path / "m.db"
    code, out, err = run(capsys, "ingest", "--db", str(db), "--jsonl", str(_jsonl(tmp_path / "obs.jsonl", 5)),
                         "--embedder", "hashing", "--batch-size", "2")
    assert code == 0, err
    assert batches == [(2, 0), (2, 2), (1, 4)]  # each batch committed before the next starts
    assert "ingested 5 observations" in out and _stored_sources(db) == [f"d{i}" for i in range(1, 6)]


def test_without_a_batch_size_the_file_is_one_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    batches: list[tuple[int, int]]) -> None:
    code, _, err = run(capsys, "ingest", "--db", str(tmp_path / "m.db"), "--jsonl", str(_jsonl(tmp_path / "obs.jsonl", 5)),
                       "--embedder", "hashing")
    assert code == 0, err
    assert batches == [(5, 0)]


def test_a_failed_batch_says_which_records_are_stored_and_skip_resumes_without_duplicates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from memory.engine import Engine

    source = _jsonl(tmp_path / "obs.jsonl", 7)
    db = tmp_path / "m.db"
    real = Engine.write_many
    calls = iter(range(100))

    def third_batch_fails(self: Engine, observations: Any, **kwargs: Any) -> Any:
        if next(calls) == 2:  # the disk fills during the third batch (records 5 and 6)
            FailingConnection.install(self.store, when=statement_is(INSERT_NODE), nth=2)
        return real(self, observations, **kwargs)

    monkeypatch.setattr(Engine, "write_many", third_batch_fails)
    code, out, err = run(capsys, "ingest", "--db", str(db), "--jsonl", str(source), "--embedder", "hashing", "--batch-size", "2")
    monkeypatch.setattr(Engine, "write_many", real)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "records 1..4 of" in err and "(through line 5)" in err and "record 5 (line 6)" in err
    assert "disk is full" in err and "--skip 4" in err
    assert _stored_sources(db) == ["d1", "d2", "d3", "d4"]  # the batch that failed left nothing behind
    code, out, err = run(capsys, "ingest", "--db", str(db), "--jsonl", str(source), "--batch-size", "2", "--skip", "4")
    assert code == 0, err
    assert "ingested 3 observations (records 5..7; the first 4 skipped)" in out
    assert _stored_sources(db) == [f"d{i}" for i in range(1, 8)]  # each record once


def test_a_failure_in_the_first_batch_says_nothing_was_stored(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from memory.engine import Engine

    real_open = Engine.open

    def failing_open(*args: Any, **kwargs: Any) -> Engine:
        engine = real_open(*args, **kwargs)
        FailingConnection.install(engine.store, when=statement_is(INSERT_NODE), nth=2)
        return engine

    monkeypatch.setattr(Engine, "open", failing_open)
    db = tmp_path / "m.db"
    code, _, err = run(capsys, "ingest", "--db", str(db), "--jsonl", str(_jsonl(tmp_path / "obs.jsonl", 4)),
                       "--embedder", "hashing", "--batch-size", "3")
    assert code == 2 and "nothing from" in err and "record 1 (line 1)" in err and "--skip 0" in err
    assert _stored_sources(db) == []


def test_a_locomo_resume_names_the_turn(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from memory.engine import Engine
    from tests.memory.eval_fixtures import write_locomo

    data, _ = write_locomo(tmp_path)
    real = Engine.write_many
    calls = iter(range(100))

    def second_batch_fails(self: Engine, observations: Any, **kwargs: Any) -> Any:
        if next(calls) == 1:
            FailingConnection.install(self.store, when=statement_is(INSERT_NODE))
        return real(self, observations, **kwargs)

    monkeypatch.setattr(Engine, "write_many", second_batch_fails)
    db = tmp_path / "m.db"
    argv = ["ingest", "--db", str(db), "--locomo", str(data), "--conversation", "conv-30", "--embedder", "hashing"]
    code, _, err = run(capsys, *argv, "--batch-size", "4")
    monkeypatch.setattr(Engine, "write_many", real)
    assert code == 2 and "records 1..4 of" in err and "--skip 4" in err
    resumed = run(capsys, *argv, "--batch-size", "4", "--skip", "4")
    assert resumed[0] == 0 and "ingested 2 observations" in resumed[1]
    assert len(_stored_sources(db)) == len(set(_stored_sources(db))) == 6


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--batch-size", "0"], "--batch-size must be a whole number >= 1"),
        (["--skip", "-1"], "--skip must be a whole number >= 0"),
        (["--skip", "3"], "--skip 3 skips every record"),
    ],
)
def test_impossible_batch_options_are_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   extra: list[str], message: str) -> None:
    db = tmp_path / "m.db"
    code, _, err = run(capsys, "ingest", "--db", str(db), "--jsonl", str(_jsonl(tmp_path / "obs.jsonl", 3)),
                       "--embedder", "hashing", *extra)
    assert code == 2 and message in err and err.count("\n") == 1 and not db.exists()


@pytest.mark.parametrize("source", ["locomo one", "locomo two", "jsonl"])
def test_a_blank_conversation_id_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str) -> None:
    # before: "" meant "every conversation", so a file of one conversation was ingested without a word
    from tests.memory.eval_fixtures import locomo_samples

    if source == "jsonl":
        argv = ["--jsonl", str(_jsonl(tmp_path / "obs.jsonl", 1))]
    else:
        data = tmp_path / "locomo.json"
        data.write_text(json.dumps(locomo_samples()[: 1 if source == "locomo one" else 2]), encoding="utf-8")
        argv = ["--locomo", str(data)]
    db = tmp_path / "m.db"
    code, out, err = run(capsys, "ingest", "--db", str(db), *argv, "--conversation", "", "--embedder", "hashing")
    expected = "--conversation goes with --locomo" if source == "jsonl" else "--conversation needs a LoCoMo sample id"
    assert code == 2 and expected in err and err.count("\n") == 1 and out == "" and not db.exists()


# ------------------------------------------------------------------------------------ Ctrl-C
def _interrupt_when(monkeypatch: pytest.MonkeyPatch, where: str, call: int) -> None:
    """Send SIGINT to this process in the `call`-th `write_many`: after its first record ("record"), or once it has
    returned, its batch committed ("committed")."""
    import signal

    from memory.engine import Engine

    real = Engine.write_many
    calls = [0]

    def interrupting(self: Engine, observations: Any, progress: Any = None) -> Any:
        calls[0] += 1
        if calls[0] != call:
            return real(self, observations, progress=progress)
        if where == "committed":
            results = real(self, observations, progress=progress)
            signal.raise_signal(signal.SIGINT)
            return results

        def first_record(done: int) -> None:
            if done == 1:
                signal.raise_signal(signal.SIGINT)
            progress(done)

        return real(self, observations, progress=first_record)

    monkeypatch.setattr(Engine, "write_many", interrupting)


@pytest.mark.parametrize(("where", "stored"), [("record", 2), ("committed", 4)])
def test_ctrl_c_says_exactly_which_records_are_stored_and_the_resume_stores_each_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, where: str, stored: int,
) -> None:
    """Ctrl-C in the second batch of two: mid-batch, that batch rolls back; while it commits (the window between the
    commit and the count), the count still includes it, so `--skip` neither duplicates nor drops a record."""
    db, src = tmp_path / "m.db", _jsonl(tmp_path / "obs.jsonl", 6)
    _interrupt_when(monkeypatch, where, call=2)
    code, _, err = run(capsys, "ingest", "--db", str(db), "--jsonl", str(src), "--embedder", "hashing", "--batch-size", "2")
    assert code == 130 and "stopping after the record in progress" in err
    assert f"records 1..{stored} of" in err and f"--skip {stored}" in err
    assert _stored_sources(db) == [f"d{i}" for i in range(1, stored + 1)]
    monkeypatch.undo()
    code, _, _ = run(capsys, "ingest", "--db", str(db), "--jsonl", str(src), "--embedder", "hashing", "--batch-size", "2",
                     "--skip", str(stored))
    assert code == 0 and _stored_sources(db) == [f"d{i}" for i in range(1, 7)]


def test_ctrl_c_in_an_all_or_nothing_ingest_stores_nothing_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    import signal

    db = tmp_path / "m.db"
    before = signal.getsignal(signal.SIGINT)  # the default handler, or SIG_IGN under a background job
    _interrupt_when(monkeypatch, "record", call=1)
    code, _, err = run(capsys, "ingest", "--db", str(db), "--jsonl", str(_jsonl(tmp_path / "obs.jsonl", 3)), "--embedder", "hashing")
    assert code == 130 and "nothing from" in err and "was stored" in err
    assert _stored_sources(db) == []
    assert signal.getsignal(signal.SIGINT) is before  # the handler is put back
