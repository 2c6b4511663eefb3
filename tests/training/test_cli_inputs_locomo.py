"""`python -m training` on LoCoMo and audit files it cannot use: `error: <message>` on stderr, exit code 2, nothing
written (tiny fixtures written here; the real data is never read by tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.training.test_data_locomo import write_locomo_fixture
from training.__main__ import main

BUILD = ["--synthetic-per-family", "4", "--dense", "hashing"]


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("held_out", [[], ["--dev-conversations=", "--calibration-conversations="]])
def test_build_data_refuses_a_null_sample_id(tmp_path: Path, capsys: pytest.CaptureFixture[str], held_out: list[str]) -> None:
    path, _ = write_locomo_fixture(tmp_path)
    samples = json.loads(path.read_text(encoding="utf-8"))
    samples[0]["sample_id"] = None
    path.write_text(json.dumps(samples), encoding="utf-8")
    out = tmp_path / "o1"
    code, printed, err = _run(capsys, ["build-data", "--locomo", str(path), "--out", str(out), *BUILD, *held_out])
    assert code == 2 and printed == "" and "Traceback" not in err
    assert err == f"error: {path} does not look like LoCoMo data: sample 0: sample_id must be a non-empty string, got None\n"
    assert not out.exists()


def test_build_data_names_the_audit_file_when_it_is_the_bad_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, audit = write_locomo_fixture(tmp_path)
    out = tmp_path / "o2"
    argv = ["build-data", "--locomo", str(path), "--audit", str(audit), "--out", str(out), *BUILD]
    audit.write_text("{not json", encoding="utf-8")
    code, _, err = _run(capsys, argv)
    assert code == 2 and err.startswith(f"error: cannot read the --audit file {audit}: ") and "LoCoMo file" not in err
    entry = {"question_id": "locomo_0_qa3", "question": json.loads(path.read_text())[0]["qa"][2]["question"], "correct_evidence": 7}
    audit.write_text(json.dumps([entry]), encoding="utf-8")
    code, _, err = _run(capsys, argv)
    assert code == 2 and err == (f"error: the --audit file {audit} is not a LoCoMo audit: audit entry 0: correct_evidence must be "
                                 "a list of dia_id strings, got 7\n")
    assert not out.exists()
