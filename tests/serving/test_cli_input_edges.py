"""`jevmem` against input at the edges: JSONL the parser reads wrongly or not at all, paths that are not stores,
stored text that would act on the terminal, flags out of range, and a server that cannot start. Each is one line on
stderr with exit status 2, and nothing is created or changed."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from serving import cli


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def ingest(capsys: pytest.CaptureFixture[str], db: Path, source: Path) -> tuple[int, str, str]:
    return run(capsys, "ingest", "--db", str(db), "--jsonl", str(source), "--embedder", "hashing")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"content": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ('{"content": "x", "metadata": {"n": ' + "9" * 5000 + "}}", "too many digits"),
        ('{"content": "first", "content": "second"}', "'content' appears twice"),
        ('{"content": "x", "metadata": {"k": 1, "k": 2}}', "'k' appears twice"),
    ],
    ids=["deep", "long-number", "duplicate-field", "duplicate-nested-key"],
)
def test_jsonl_the_parser_cannot_read_faithfully_is_refused_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    source = tmp_path / "obs.jsonl"
    source.write_text('{"content": "Mira: fine."}\n' + line + "\n", encoding="utf-8")
    db = tmp_path / "m.db"
    code, _, err = ingest(capsys, db, source)
    assert code == 2 and f"obs.jsonl:2: " in err and message in err, err
    assert "Traceback" not in err and "set_int_max_str_digits" not in err
    assert not db.exists()


@pytest.mark.parametrize("command", [["stats"], ["query", "bicycle"], ["relink"], ["show", "n1"]])
@pytest.mark.parametrize("kind", ["zero-byte", "table-less"])
def test_reading_commands_do_not_turn_an_empty_database_into_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], kind: str
) -> None:
    db = tmp_path / "m.db"
    if kind == "zero-byte":
        db.write_bytes(b"")
    else:
        sqlite3.connect(db).execute("PRAGMA user_version = 7").connection.close()
    before = db.read_bytes()
    code, _, err = run(capsys, command[0], "--db", str(db), *command[1:], "--embedder", "hashing")
    assert code == 2 and f"no memory store at {db}" in err and "empty database" in err, err
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.db"]  # no -wal / -shm left either


def test_reembed_does_not_turn_an_empty_database_into_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "m.db"
    db.write_bytes(b"")
    code, _, err = run(capsys, "reembed", "--db", str(db), "--embedder", "hashing")
    assert code == 2 and "no memory store" in err and db.read_bytes() == b""


@pytest.mark.parametrize("command", [["ingest", "--jsonl", "{src}"], ["stats"], ["query", "x"], ["reembed", "--embedder", "hashing"]])
def test_a_directory_as_db_is_named_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    source = tmp_path / "obs.jsonl"
    source.write_text('{"content": "Mira: fine."}\n', encoding="utf-8")
    folder = tmp_path / "stores"
    folder.mkdir()
    argv = [a.replace("{src}", str(source)) for a in command]
    code, _, err = run(capsys, argv[0], "--db", str(folder), *argv[1:])
    assert code == 2 and "is a directory" in err and "memory.db" in err, err
    assert list(folder.iterdir()) == []


@pytest.fixture
def hostile_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    source = tmp_path / "obs.jsonl"
    rows = [{"content": "Mira: my bicycle is \x1b[31mred\x1b[0m\x07 \u202eton\u202c\x9b2J\x7f\nsecond line", "source_ids": ["s\x1b1"]}]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    db = tmp_path / "m.db"
    code, _, err = ingest(capsys, db, source)
    assert code == 0, err
    return db


def _no_terminal_controls(text: str) -> bool:
    return not any(ch in text for ch in "\x1b\x07\x9b\x7f\u202e\u202c")


def test_query_and_show_print_terminal_controls_as_escapes(hostile_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "query", "--db", str(hostile_store), "bicycle")
    assert code == 0, err
    assert _no_terminal_controls(out)
    assert "my bicycle is \\x1b[31mred\\x1b[0m\\x07 \\u202eton\\u202c\\x9b2J\\x7f" in out and "sources s\\x1b1" in out
    assert "\n     second line" in out  # a further line of the content stays indented under its item
    node = out.split("] ", 1)[1].split(" ", 1)[0]
    code, out, err = run(capsys, "show", "--db", str(hostile_store), node)
    assert code == 0 and _no_terminal_controls(out) and "\\x1b[31mred" in out, err


def test_json_output_escapes_terminal_controls_and_keeps_the_stored_text(hostile_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "query", "--db", str(hostile_store), "bicycle", "--json")
    assert code == 0, err
    assert _no_terminal_controls(out)
    content = json.loads(out)["evidence"][0]["content"]
    assert content == "Mira: my bicycle is \x1b[31mred\x1b[0m\x07 \u202eton\u202c\x9b2J\x7f\nsecond line"  # data, unchanged


@pytest.mark.parametrize("k", ["0", "-3"])
def test_query_k_below_one_names_the_flag(hostile_store: Path, capsys: pytest.CaptureFixture[str], k: str) -> None:
    code, _, err = run(capsys, "query", "--db", str(hostile_store), "bicycle", "--k", k)
    assert code == 2 and f"--k must be a whole number >= 1" in err and f"got {k}" in err and "budget" not in err, err


def test_config_files_are_read_whatever_their_name(hostile_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("engine.JSON", "engine.cfg", "engine"):
        path = tmp_path / name
        path.write_text('{"n_seeds": "many"}', encoding="utf-8")  # read as a file: its bad field is named
        code, _, err = run(capsys, "query", "--db", str(hostile_store), "bicycle", "--config", str(path))
        assert code == 2 and "n_seeds" in err and "preset" not in err, (name, err)
    code, _, err = run(capsys, "query", "--db", str(hostile_store), "bicycle", "--config", str(tmp_path / "missing.JSON"))
    assert code == 2 and "no config file" in err and "default, fast, thorough" in err, err
    code, _, err = run(capsys, "query", "--db", str(hostile_store), "bicycle", "--config", "quick")
    assert code == 2 and "unknown preset 'quick'" in err, err


def test_serve_refuses_an_unknown_controller_or_a_directory_store_before_it_listens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import serving.server

    def no_listen(*_: object) -> None:
        raise AssertionError("the socket was bound before the settings were checked")

    monkeypatch.setattr(serving.server, "listen", no_listen)
    code, out, err = run(capsys, "serve", "--port", "0", "--controller", "bogus")
    assert code == 2 and "unknown controller 'bogus'" in err and "heuristic" in err and out == "", err
    code, out, err = run(capsys, "serve", "--port", "0", "--db", str(tmp_path))
    assert code == 2 and "is a directory" in err and out == "", err
