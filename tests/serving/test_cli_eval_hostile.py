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
        (["--systems", "bm25", "--seed", "-1"], "--seed must be >= 0, got -1"),
        (["--k", "19"], "--k must be >= 20, got 19 (the report scores recall at 5, 10, 20 items)"),
        (["--k", "0"], "--k must be >= 20, got 0"),
        (["--threads", "0"], "--threads must be >= 1, got 0"),
        (["--threads", "-2"], "--threads must be >= 1, got -2"),
        (["--bootstrap", "0"], "--bootstrap must be >= 1, got 0"),
        (["--bootstrap", "-5"], "--bootstrap must be >= 1, got -5"),
        (["--max-turns", "0"], "--max-turns must be >= 1, got 0"),
        (["--force"], "--force goes with --out"),
        (["--out", "{earlier}"], "--out {earlier} already holds report.json, report.md of an earlier run; pass another "
                                 "directory, or --force to overwrite them"),
        (["--out", "{blocked}", "--force"], "--out {blocked}: questions.jsonl is a directory, where the report writes a file"),
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
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "report.json").write_text("{}")
    (earlier / "report.md").write_text("# old")
    (earlier / "notes.txt").write_text("kept")
    blocked = tmp_path / "blocked"
    (blocked / "questions.jsonl").mkdir(parents=True)
    fill = {"file": file, "tmp": tmp_path, "bad_config": bad_config, "earlier": earlier, "blocked": blocked}
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
        (["--variants", '{"a": {}}', "--k", "0"], "--k must be >= 10, got 0"),
        (["--variants", '{"a": {}}', "--k", "9"], "--k must be >= 10, got 9 (the sweep table scores R_frac, R_all and nDCG at 10 items)"),
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


def test_the_k_floors_follow_what_is_scored() -> None:
    """`eval locomo --k` reaches the harness' largest recall cut-off, `eval sweep --k` the @10 of its table."""
    from memory.evaluation import EvalConfig
    from memory.evaluation.sweep import sweep_table
    from serving.cli_eval import SWEEP_SCORED_AT, _report_ks

    assert _report_ks() == EvalConfig().ks and max(_report_ks()) == 20
    EvalConfig(query_k=max(_report_ks()))  # the floor is what the harness accepts
    with pytest.raises(ValueError, match="must cover the largest k"):
        EvalConfig(query_k=max(_report_ks()) - 1)
    head = sweep_table({}).splitlines()[0]
    assert all(f"{m}@{SWEEP_SCORED_AT} |" in head for m in ("R_frac", "R_all", "nDCG")), head


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


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ks", "0"], "--ks must be >= 1, got 0"),
        (["--ks", "10", "-3"], "--ks must be >= 1, got -3"),
        (["--threads", "0"], "--threads must be >= 1, got 0"),
    ],
)
def test_eval_first_stage_refuses_out_of_range_flags(
    data: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str
) -> None:
    import memory.evaluation.first_stage as first_stage
    import memory.evaluation.harness as harness

    monkeypatch.setattr(first_stage, "first_stage_recall", _never)
    monkeypatch.setattr(harness, "_embedder", _never)
    code, _, err = run(capsys, "eval", "first-stage", "--data", str(data), "--embedder", "hashing", *argv)
    assert code == 2 and message in err and err.count("\n") == 1, err


def _quick_run(capsys: pytest.CaptureFixture[str], data: Path, out: Path, *extra: str) -> tuple[int, str]:
    code, _, err = run(capsys, "eval", "locomo", "--data", str(data), "--systems", "bm25", "--bootstrap", "20", "--out", str(out), *extra)
    return code, err


def test_an_earlier_report_is_kept_unless_force(tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")  # a directory with other files is fine
    assert _quick_run(capsys, data, out)[0] == 0
    before = (out / "report.json").read_text()
    (out / "report.md").write_text("# edited by hand")
    code, err = _quick_run(capsys, data, out, "--seed", "1")
    assert code == 2 and f"--out {out} already holds report.json, questions.jsonl, report.md" in err and err.count("\n") == 1, err
    assert (out / "report.md").read_text() == "# edited by hand" and (out / "report.json").read_text() == before
    code, err = _quick_run(capsys, data, out, "--force")
    assert code == 0, err
    assert (out / "report.md").read_text().startswith("# LoCoMo retrieval") and (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "questions.jsonl", "report.json", "report.md"]


def test_an_interrupted_report_write_leaves_the_old_file_whole(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import memory.evaluation.report as report

    out = tmp_path / "out"
    assert _quick_run(capsys, data, out)[0] == 0
    old = (out / "questions.jsonl").read_text()
    clean = report._clean
    rows: list[Any] = []

    def cut(value: Any) -> Any:  # ^C after the first question row of questions.jsonl
        if isinstance(value, dict) and "qid" in value:
            rows.append(value)
            if len(rows) == 2:
                raise KeyboardInterrupt
        return clean(value)

    monkeypatch.setattr(report, "_clean", cut)
    assert _quick_run(capsys, data, out, "--force")[0] == 130 and len(rows) == 2
    assert (out / "questions.jsonl").read_text() == old
    assert sorted(p.name for p in out.iterdir()) == ["questions.jsonl", "report.json", "report.md"]  # no temporary file left


def _saved_run(directory: Path) -> Path:
    directory.mkdir(parents=True)
    rows = [{"system": system, "conversation": "c", "qid": f"q{i}", "category": 1, "n_gold": 1, "R_frac@10": float(i % 2)}
            for system in ("bm25", "rrf") for i in range(4)]
    (directory / "questions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return directory


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["{a}", "{a}"], "RUN {a} given twice; give each run once"),
        (["{a}", "{b}", "{a}/"], "RUN {a}/ given twice (also as {a}); give each run once"),
        (["{a}", "{a}/questions.jsonl"], "RUN {a}/questions.jsonl given twice (also as {a}); give each run once"),
        (["{a}", "--draws", "0"], "--draws must be >= 1, got 0"),
        (["{a}", "--seed", "-1"], "--seed must be >= 0, got -1"),
    ],
)
def test_eval_compare_refuses_a_run_given_twice_and_out_of_range_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    fill = {"a": _saved_run(tmp_path / "a" / "run"), "b": _saved_run(tmp_path / "b" / "run")}
    code, _, err = run(capsys, "eval", "compare", *(a.format(**fill) for a in argv), "--reference", "rrf")
    assert code == 2 and message.format(**fill) in err and err.count("\n") == 1, err


def test_eval_compare_tells_apart_runs_of_one_directory_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _saved_run(tmp_path / "a" / "run"), _saved_run(tmp_path / "b" / "run")
    other = _saved_run(tmp_path / "b" / "other")
    code, _, err = run(capsys, "eval", "compare", str(a), str(b), "--reference", "rrf")
    assert code == 2 and "found: bm25@a/run, rrf@a/run, bm25@b/run, rrf@b/run" in err, err
    code, out, err = run(capsys, "eval", "compare", str(a), str(b / "questions.jsonl"), str(other), "--reference", "rrf@b/run")
    assert code == 0, err
    assert "system minus rrf@b/run" in out and "| bm25@a/run |" in out and "| rrf@other |" in out and "| bm25@other |" in out


def test_the_systems_help_names_every_baseline() -> None:
    """The help text is written out (building the parser imports nothing heavy); it must not drift from the harness."""
    from memory.evaluation.harness import BASELINES
    from serving.cli import build_parser

    locomo = build_parser()._subparsers._group_actions[0].choices["eval"]._subparsers._group_actions[0].choices["locomo"]  # type: ignore[union-attr]
    (action,) = [a for a in locomo._actions if "--systems" in a.option_strings]
    listed = [name.strip() for name in (action.help or "").removeprefix("comma list of ").split(",")]
    assert listed == [*BASELINES, "jevmem-<controller>"]
