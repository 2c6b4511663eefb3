"""`jevmem export`: a store's observations as ingest JSONL. Ingesting the export into a new store and exporting that
gives the same file; what an export does not carry (summaries, authored and refused links) is said, not lost
silently; an existing file is not replaced without --force, and a failed export leaves no file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memory import Engine, Observation
from serving import cli

ROWS = [
    {"content": "Mira: I bought a blue bicycle.", "speaker": "Mira", "source_ids": ["S1:1"], "observed_at": "2024-05-14T10:00:00+02:00"},
    {"content": "Tom likes tea.", "entities": ["Tom"], "metadata": {"channel": "chat", "n": [1, 2]}, "event_time": "2024-05-15T08:30:00"},
    {"text": "Back from the lake with the kids.", "speaker": "Ann", "id": "S2:7"},
]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def ingest(capsys: pytest.CaptureFixture[str], db: Path, source: Path) -> None:
    code, _, err = run(capsys, "ingest", "--db", str(db), "--jsonl", str(source), "--embedder", "hashing")
    assert code == 0, err


@pytest.fixture
def store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    db = tmp_path / "a.db"
    ingest(capsys, db, source)
    return db


def test_an_export_ingests_back_into_the_same_observations(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    code, out, err = run(capsys, "export", "--db", str(store), "--jsonl", str(first))
    assert code == 0 and out == "" and "exported 3 observations" in err and "not carried" not in err, err
    records = [json.loads(line) for line in first.read_text(encoding="utf-8").splitlines()]
    assert records[0] == {"content": "Mira: I bought a blue bicycle.", "speaker": "Mira", "source_ids": ["S1:1"],
                          "observed_at": "2024-05-14T10:00:00+02:00"}
    assert records[1] == {"content": "Tom likes tea.", "entities": ["tom"], "metadata": {"channel": "chat", "n": [1, 2]},
                          "event_time": "2024-05-15T08:30:00"}
    assert records[2] == {"content": "Ann: Back from the lake with the kids.", "speaker": "Ann", "source_ids": ["S2:7"]}
    copy = tmp_path / "b.db"
    ingest(capsys, copy, first)
    assert run(capsys, "export", "--db", str(copy), "--jsonl", str(second))[0] == 0
    assert second.read_bytes() == first.read_bytes()


def test_what_an_export_does_not_carry_is_counted(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Engine.open(store, controller="heuristic", embedder="hashing", system_two=None) as engine:
        ids = [n.id for n in sorted(engine.store.iter_nodes(), key=lambda n: n.seq)]
        engine.link(ids[0], ids[2], "causal")
        edge = next(e for e in engine.store.edges_from(ids[0]) if e.relation == "temporal_next")
        engine.unlink(edge.src, edge.dst, edge.relation)
        engine.consolidate()
    code, out, err = run(capsys, "export", "--db", str(store), "--jsonl", "-")
    assert code == 0 and len(out.splitlines()) == 3, err
    assert "not carried: " in err and "1 authored edges" in err and "1 refused links" in err, err


def test_an_existing_file_is_kept_unless_force(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "out.jsonl"
    target.write_text("keep me\n", encoding="utf-8")
    code, _, err = run(capsys, "export", "--db", str(store), "--jsonl", str(target))
    assert code == 2 and "exists" in err and "--force" in err and target.read_text(encoding="utf-8") == "keep me\n"
    assert run(capsys, "export", "--db", str(store), "--jsonl", str(target), "--force")[0] == 0
    assert len(target.read_text(encoding="utf-8").splitlines()) == 3


@pytest.mark.parametrize("where", ["", "{dir}"])
def test_a_target_that_is_no_file_is_a_usage_error(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str) -> None:
    code, _, err = run(capsys, "export", "--db", str(store), "--jsonl", where.format(dir=tmp_path))
    assert code == 2 and "--jsonl needs a file path" in err, err


def test_no_store_is_created_by_an_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "export", "--db", str(tmp_path / "none.db"), "--jsonl", str(tmp_path / "o.jsonl"))
    assert code == 2 and "no memory store" in err and list(tmp_path.iterdir()) == []


def test_a_failed_export_leaves_no_file(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import memory.export

    def failing(node: Any) -> dict[str, Any]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(memory.export, "node_record", failing)
    target = tmp_path / "out.jsonl"
    code, _, err = run(capsys, "export", "--db", str(store), "--jsonl", str(target))
    assert code == 2 and "No space left" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.jsonl", *(p.name for p in tmp_path.glob("a.db*"))])


def test_node_record_leaves_out_the_engines_own_metadata() -> None:
    from memory.export import node_record

    with Engine.open(None, controller="heuristic", embedder="hashing", system_two=None) as engine:
        a = engine.write(Observation("Ann likes tea.", metadata={"k": "v"})).node_id
        b = engine.write(Observation("Bob likes tea."))
        engine.link(a, b.node_id, "semantic")
        engine.unlink(a, b.node_id, "semantic")
        node = engine.get(a).node
    assert "links_refused" in node.metadata and node_record(node)["metadata"] == {"k": "v"}
    assert "entities" not in node_record(node)  # extracted, not given: the ingesting engine extracts them again


def test_the_server_exports_the_same_lines(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fastapi.testclient import TestClient

    from serving.app import create_app
    from serving.settings import Settings

    target = tmp_path / "cli.jsonl"
    assert run(capsys, "export", "--db", str(store), "--jsonl", str(target))[0] == 0
    with TestClient(create_app(Settings.from_env(memory_db=str(store), embedder="hashing"))) as client:
        r = client.get("/v1/memory/export")
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
        assert r.content == target.read_bytes()
        assert r.headers["x-jevmem-export"] == "observations=3; summaries=0; authored_edges=0; refused_links=0"
        assert "application/x-ndjson" in client.get("/openapi.json").json()["paths"]["/v1/memory/export"]["get"]["responses"]["200"]["content"]
