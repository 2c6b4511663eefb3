"""`jevmem` command line: ingest / query / show / stats / relink on a tiny JSONL, eval on a tiny LoCoMo file,
serve wiring, and user errors as one line with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from serving import cli
from tests.memory.eval_fixtures import write_locomo

ROWS = [
    {"content": "Mira: My old bicycle broke on the way to work.", "speaker": "Mira", "observed_at": "2024-05-14T10:00", "source_ids": ["d1"]},
    {"content": "Mira: I bought a new bicycle because the old one broke.", "speaker": "Mira", "observed_at": "2024-05-15T10:00", "source_ids": ["d2"]},
    {"text": "Tom: I am learning to paint landscapes.", "speaker": "Tom", "event_time": "2024-05-16T09:00"},
]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    source = tmp_path / "obs.jsonl"
    source.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n\n", encoding="utf-8")
    path = tmp_path / "memory.db"
    code, out, err = run(capsys, "ingest", "--db", str(path), "--jsonl", str(source), "--embedder", "hashing")
    assert code == 0, err
    assert "ingested 3 observations" in out
    return path


def test_query_shows_route_evidence_provenance_and_trace(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "query", "--db", str(db), "Why did Mira buy a new bicycle?", "--k", "2", "--answer")
    assert code == 0
    assert out.startswith("route: ")
    assert "I bought a new bicycle" in out and "sources d2" in out
    assert "trace:" in out and "answer (extractive):" in out


def test_query_json_and_show_and_stats(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "query", "--db", str(db), "bicycle", "--json")
    assert code == 0
    result = json.loads(out)
    assert set(result["route"]) >= {"temporal", "multi_hop"}
    node_id = result["evidence"][0]["node_id"]
    assert result["evidence"][0]["source_ids"] in (["d1"], ["d2"])
    code, out, _ = run(capsys, "show", "--db", str(db), node_id)
    assert code == 0 and out.startswith(node_id) and "backlinks (" in out
    code, out, _ = run(capsys, "stats", "--db", str(db), "--json")
    stats = json.loads(out)
    assert code == 0 and stats["nodes"] == 3 and stats["writes"] == 0  # a fresh engine instance
    code, out, _ = run(capsys, "relink", "--db", str(db))
    assert code == 0 and "0 still pending" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["query", "--db", "{tmp}/missing.db", "x"], "no memory store"),
        (["show", "--db", "{db}", "no-such-node"], "no node with id"),
        (["query", "--db", "{db}", "bicycle", "--embedder", "minilm"], "embedded with 'hashing'"),
        (["query", "--db", "{db}", "bicycle", "--k", "0"], "k must be a whole number >= 1"),
        (["query", "--db", "{db}", "bicycle", "--config", "nope"], "unknown preset"),
    ],
)
def test_user_errors_exit_2_without_traceback(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = run(capsys, *(a.format(tmp=tmp_path, db=db) for a in argv))
    assert code == 2
    assert message in err and "Traceback" not in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"content": ""}', "non-empty 'content'"),
        ('{"content": "x", "colour": 1}', "unknown field(s) colour"),
        ('{"content": "x", "observed_at": "yesterday"}', "not an ISO 8601 time"),
        ("[1]", "expected a JSON object"),
        ('{"content": "x", "metadata": [1]}', "'metadata' has the wrong type"),
        ('{"content": "x", "speaker": "   "}', "speaker must not be blank"),
        ('{"content": "x", "speaker": "Mi\\u0000ra"}', "speaker must be one line without control characters (U+0000 at 2)"),
    ],
)
def test_bad_jsonl_names_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, message: str) -> None:
    source = tmp_path / "bad.jsonl"
    source.write_text('{"content": "fine"}\n' + line + "\n", encoding="utf-8")
    code, _, err = run(capsys, "ingest", "--db", str(tmp_path / "m.db"), "--jsonl", str(source))
    assert code == 2 and ":2:" in err and message in err
    assert not (tmp_path / "m.db").exists()  # refused while reading: nothing was written


def test_ingest_locomo_needs_one_conversation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, _ = write_locomo(tmp_path)
    code, _, err = run(capsys, "ingest", "--db", str(tmp_path / "m.db"), "--locomo", str(data))
    assert code == 2 and "--conversation" in err and "conv-26, conv-30" in err
    code, _, err = run(capsys, "ingest", "--db", str(tmp_path / "m.db"), "--locomo", str(data), "--conversation", "conv-99")
    assert code == 2 and "available: conv-26, conv-30" in err
    code, out, _ = run(capsys, "ingest", "--db", str(tmp_path / "m.db"), "--locomo", str(data), "--conversation", "conv-30",
                       "--embedder", "hashing")
    assert code == 0 and "ingested 6 observations" in out
    code, out, _ = run(capsys, "query", "--db", str(tmp_path / "m.db"), "Where is the second store?", "--json")
    sources = {s for e in json.loads(out)["evidence"] for s in e["source_ids"]}
    assert "D2:1" in sources


def test_not_locomo_data_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "other.json"
    data.write_text(json.dumps([{"sample_id": "conv-1"}]), encoding="utf-8")
    code, _, err = run(capsys, "eval", "locomo", "--data", str(data), "--systems", "bm25")
    assert code == 2 and "does not look like LoCoMo data" in err
    code, _, err = run(capsys, "eval", "locomo", "--data", str(tmp_path / "missing.json"), "--systems", "bm25")
    assert code == 2 and "missing.json" in err


def test_eval_locomo_writes_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JEVMEM_CACHE", str(tmp_path / "cache"))
    data, audit = write_locomo(tmp_path)
    out_dir = tmp_path / "out"
    code, out, err = run(
        capsys, "eval", "locomo", "--data", str(data), "--audit", str(audit), "--conversations", "conv-26",
        "--embedder", "hashing", "--baseline-embedder", "hashing", "--bootstrap", "20", "--out", str(out_dir),
    )
    assert code == 0, err
    assert "| jevmem-heuristic |" in out and "| rrf |" in out
    report = json.loads((out_dir / "report.json").read_text())
    assert report["conversations"] == ["conv-26"] and report["questions"] == 5
    assert (out_dir / "report.md").exists() and (out_dir / "questions.jsonl").exists()
    rows = [json.loads(line) for line in (out_dir / "questions.jsonl").read_text().splitlines()]
    assert rows and all(set(r["gold_ranks"]) and all(v is None or v >= 1 for v in r["gold_ranks"].values()) for r in rows)
    code, out, err = run(
        capsys, "eval", "locomo", "--data", str(data), "--audit", str(audit), "--conversations", "conv-26", "--systems", "rrf,jevmem-heuristic",
        "--reference", "jevmem-heuristic", "--embedder", "hashing", "--baseline-embedder", "hashing", "--bootstrap", "20",
    )
    assert code == 0, err
    paired = out.split("## Paired difference: system minus jevmem-heuristic")[1].split("##")[0]
    assert "| rrf |" in paired and "| jevmem-heuristic |" not in paired


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--systems", "bm25", "--controller", "local"], "either --systems or --controller"),
        (["--systems", "bm25,graph"], "unknown system"),
        (["--conversations", "conv-99"], "not in"),
        (["--systems", "bm25", "--reference", "rrf"], "not among the systems run"),
        (["--systems", "jevmem-heuristic", "--embedder-adapter", "no/such/adapter"], "lacks a readable adapter_config.json"),
    ],
)
def test_eval_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    data, _ = write_locomo(tmp_path)
    code, _, err = run(capsys, "eval", "locomo", "--data", str(data), *argv)
    assert code == 2 and message in err


def test_argparse_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["query"])
    assert info.value.code == 2
    assert "--db" in capsys.readouterr().err


def test_serve_calls_the_server(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[tuple[Any, ...]] = []
    import serving.server

    monkeypatch.setattr(serving.server, "run", lambda *args, **kwargs: calls.append((*args, kwargs)))
    code, _, _ = run(capsys, "serve", "--host", "127.0.0.1", "--port", "8123", "--controller", "heuristic")
    assert code == 0 and calls == [("127.0.0.1", 8123, "heuristic", {})]
    code, _, _ = run(capsys, "serve", "--db", "mem.sqlite", "--embedder", "minilm")
    assert code == 0 and calls[-1] == (None, None, None, {"memory_db": "mem.sqlite", "embedder": "minilm"})


def test_serve_with_a_db_mounts_the_memory_api(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from serving.app import create_app
    from serving.settings import Settings

    settings = Settings.from_env(memory_db=str(tmp_path / "mem.sqlite"), embedder="hashing")  # `jevmem serve --db --embedder`
    with TestClient(create_app(settings)) as client:
        written = client.post("/v1/memory/observations", json={"content": "Mira: I bought a bicycle."})
        assert written.status_code == 201, written.text
        assert "/v1/memory/query" in client.get("/openapi.json").json()["paths"]


def test_serving_an_existing_store_uses_the_embedder_it_was_built_with(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fastapi.testclient import TestClient

    from memory.store.sqlite_schema import stored_embedder
    from serving.app import create_app
    from serving.settings import Settings

    source = tmp_path / "obs.jsonl"
    source.write_text('{"content": "Mira: I bought a bicycle."}\n', encoding="utf-8")
    db = tmp_path / "mem.sqlite"
    assert run(capsys, "ingest", "--db", str(db), "--jsonl", str(source), "--embedder", "hashing")[0] == 0
    # no embedder named: the server opens the store with its own (the default for a new store would be refused by it)
    with TestClient(create_app(Settings.from_env({}, memory_db=str(db)))) as client:
        assert client.get("/v1/memory/stats").json()["nodes"] == 1
        assert client.post("/v1/memory/observations", json={"content": "Mira: it is red."}).status_code == 201
    assert stored_embedder(db) == "hashing"
    code, out, _ = run(capsys, "query", "--db", str(db), "What did Mira buy?", "--json")  # so does the CLI
    assert code == 0 and json.loads(out)["evidence"]


def test_module_entry_point(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "serving", "stats", "--db", str(tmp_path / "missing.db")],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 2
    assert "no memory store" in proc.stderr and "Traceback" not in proc.stderr


def test_no_spin_reaches_the_local_controller_only(db: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from memory.engine import Engine

    seen: list[dict[str, Any]] = []
    real_open = Engine.open

    def spy(path: Any, **kwargs: Any) -> Any:
        seen.append(dict(kwargs))
        kwargs.pop("spinning", None)  # the heuristic stands in for the local model here
        return real_open(path, **{**kwargs, "controller": "heuristic"})

    monkeypatch.setattr(Engine, "open", spy)
    assert run(capsys, "stats", "--db", str(db), "--controller", "local", "--no-spin")[0] == 0
    assert run(capsys, "stats", "--db", str(db), "--controller", "heuristic", "--no-spin")[0] == 0
    assert run(capsys, "stats", "--db", str(db), "--controller", "local")[0] == 0
    assert [k.get("spinning") for k in seen] == [False, None, None]
