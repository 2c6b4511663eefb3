"""`jevmem relink` failing part-way: one line saying how many nodes were relinked (and kept), and a rerun that
finishes the rest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from serving import cli
from tests.memory.sqlite_faults import FailingConnection, statement_is


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_relink_that_fails_midway_says_how_many_nodes_it_relinked(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from memory.engine import Engine

    source = tmp_path / "obs.jsonl"
    source.write_text("".join(json.dumps({"content": f"Mira: data science work item {i}."}) + "\n" for i in range(4)))
    db = tmp_path / "m.db"
    assert run(capsys, "ingest", "--db", str(db), "--jsonl", str(source), "--embedder", "hashing")[0] == 0
    with Engine.open(db, embedder="hashing", system_two=None) as engine:  # four stale nodes
        for node in list(engine.store.iter_nodes()):
            engine.edit(node.id, node.content + " changed")
    real_open = Engine.open

    def failing_open(*args: Any, **kwargs: Any) -> Engine:
        engine = real_open(*args, **kwargs)
        FailingConnection.install(engine.store, when=statement_is("UPDATE nodes SET"), nth=3)
        return engine

    monkeypatch.setattr(Engine, "open", failing_open)
    code, out, err = run(capsys, "relink", "--db", str(db))
    monkeypatch.setattr(Engine, "open", real_open)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "relinked 2 of 4 nodes before this failure" in err and "disk is full" in err
    code, out, err = run(capsys, "stats", "--db", str(db), "--json")
    assert json.loads(out)["link_status"]["stale"] == 2
    code, out, err = run(capsys, "relink", "--db", str(db))
    assert code == 0 and "assessed 2 nodes" in out and "0 still pending" in out
    code, out, err = run(capsys, "stats", "--db", str(db), "--json")
    assert json.loads(out)["link_status"]["stale"] == 0
