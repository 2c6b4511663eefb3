"""`jevmem eval ...` against careless arguments: refused (exit 2, one line) before any long work starts, which the
tests check by making that work fail loudly if it is reached."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from serving import cli
from tests.memory.eval_fixtures import write_locomo


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _never(*args: Any, **kwargs: Any) -> Any:
    pytest.fail("the long work started before the arguments were checked")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_locomo(tmp_path)[0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--out", "{file}"], "--out {file} is not a writable directory"),
        (["--out", "{file}/sub"], "--out {file}/sub is not a writable directory"),
        (["--systems", "bm25,jevmem-nope"], "unknown backend 'nope'"),
        (["--systems", "bm25,jevmem-heuristic", "--config", "nope"], "unknown preset 'nope'"),
        (["--systems", "bm25,jevmem-heuristic", "--config", "{bad_config}"], "unknown config fields: bogus"),
        (["--systems", "jevmem-local", "--model-dir", "{tmp}/no-model"], "--model-dir {tmp}/no-model holds no config.json"),
        (["--systems", ""], "--systems names no system"),
        (["--systems", "bm25", "--seed", "-1"], "seed must be >= 0"),
        (["--conversations", ""], "conversation(s) not in"),
    ],
)
def test_eval_locomo_refuses_before_the_baselines_run(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str
) -> None:
    import memory.evaluation.harness as harness

    monkeypatch.setattr(harness, "run_baselines", _never)
    monkeypatch.setattr(harness, "_embedder", _never)
    file = tmp_path / "taken.txt"
    file.write_text("x")
    bad_config = tmp_path / "bad.json"
    bad_config.write_text('{"bogus": 1}')
    fill = {"file": file, "tmp": tmp_path, "bad_config": bad_config}
    code, _, err = run(capsys, "eval", "locomo", "--data", str(data), "--embedder", "hashing", "--baseline-embedder", "hashing",
                       *(a.format(**fill) for a in argv))
    assert code == 2 and message.format(**fill) in err and err.count("\n") == 1, err


def test_a_refused_run_leaves_no_out_directory(tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code, _, err = run(capsys, "eval", "locomo", "--data", str(data), "--systems", "bm25,jevmem-nope", "--out", str(out))
    assert code == 2 and "unknown backend 'nope'" in err and not out.exists()


def test_an_empty_conversation_id_is_shown_quoted(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "eval", "locomo", "--data", str(data), "--conversations", "", "conv-26")
    assert code == 2 and "conversation(s) not in" in err and "''" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--variants", '{"a": {}}', "--k", "0"], "--k must be >= 1"),
        (["--variants", '{"a": {}}', "--threads", "0"], "--threads must be >= 1"),
        (["--variants", '{"a": {"bogus": 1}}'], "unknown config fields: bogus"),
        (["--variants", '{"a": {"n_seeds": 0}}'], "n_seeds must be >= 1"),
        (["--variants", '{"a": {"max_entities": 3}}'], "changes write-path fields (max_entities)"),
        (["--variants", '{"a": {}}', "--config", "nope"], "unknown preset 'nope'"),
        (["--variants", "[1]"], "--variants must be a JSON object"),
        (["--variants", " [1]"], "--variants must be a JSON object"),
        (["--variants", ""], "--variants needs a JSON object or the path of a JSON file"),
        (["--variants", "{tmp}"], "--variants {tmp}: cannot read the file"),
        (["--variants", "{tmp}/missing.json"], "--variants {tmp}/missing.json: cannot read the file"),
    ],
)
def test_eval_sweep_refuses_before_any_conversation_is_written(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str
) -> None:
    import memory.evaluation.sweep as sweep

    monkeypatch.setattr(sweep, "sweep_locomo", _never)
    code, _, err = run(capsys, "eval", "sweep", "--data", str(data), "--embedder", "hashing", *(a.replace("{tmp}", str(tmp_path)) for a in argv))
    assert code == 2 and message.replace("{tmp}", str(tmp_path)) in err and err.count("\n") == 1, err


def test_the_sweep_library_refuses_k_0_before_writing(data: Path) -> None:
    from controller.client import SystemOneClient
    from controller.embedding import create_embedder
    from data.locomo import load_locomo
    from memory.config import EngineConfig
    from memory.evaluation.sweep import sweep

    client = SystemOneClient("heuristic")
    try:
        with pytest.raises(ValueError, match="query_k must be >= 1"):
            sweep(load_locomo(data), client, _Unembeddable(create_embedder("hashing")), EngineConfig(), {"a": {}}, query_k=0)
    finally:
        client.close()


class _Unembeddable:
    """An embedder that fails the test if anything is embedded (that is, written)."""

    def __init__(self, inner: Any) -> None:
        self.dim, self.name = inner.dim, inner.name

    def embed(self, texts: Any) -> Any:
        pytest.fail("a conversation was written before query_k was checked")


def test_eval_compare_refuses_rows_that_are_not_objects_and_a_negative_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = tmp_path / "questions.jsonl"
    rows.write_text(json.dumps([{"system": "rrf"}]) + "\n")
    code, _, err = run(capsys, "eval", "compare", str(rows), "--reference", "rrf")
    assert code == 2 and "questions.jsonl:1: not a question row" in err and "Traceback" not in err
    row = {"system": "rrf", "conversation": "c", "qid": "q1", "category": 1, "n_gold": 1, "R_frac@10": 1.0}
    rows.write_text(json.dumps(row) + "\n" + json.dumps({**row, "system": "bm25"}) + "\n")
    code, _, err = run(capsys, "eval", "compare", str(rows), "--reference", "rrf", "--seed", "-1")
    assert code == 2 and "seed must be >= 0" in err


def test_the_systems_help_names_every_baseline() -> None:
    """The help text is written out (building the parser imports nothing heavy); it must not drift from the harness."""
    from memory.evaluation.harness import BASELINES
    from serving.cli import build_parser

    locomo = build_parser()._subparsers._group_actions[0].choices["eval"]._subparsers._group_actions[0].choices["locomo"]  # type: ignore[union-attr]
    (action,) = [a for a in locomo._actions if "--systems" in a.option_strings]
    listed = [name.strip() for name in (action.help or "").removeprefix("comma list of ").split(",")]
    assert listed == [*BASELINES, "jevmem-<controller>"]
