"""Teacher distillation against a fake wire-protocol teacher (httpx2.MockTransport: no sockets)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
import zstandard

from data.schema import DecisionExample, read_jsonl
from data.teacher import TeacherConfig, TeacherError, answer_target, distill, teacher_id

NOUL = {"type": "noul", "instructions": "Does state.observation describe an event?"}
CHOICE = {"type": "choice", "instructions": "Order?", "criteria": {"before": None, "after": "later", "unknown": None}}
SCORE = {"type": "score", "instructions": "How sure?", "criteria": ["low", "mid", "high"]}


class FakeTeacher:
    """Answers deterministically; can fail (connection error or HTTP status) on chosen calls."""

    def __init__(self, *, model: str = "open-teacher-7b", fail_from: int | None = None, status_on: dict[int, int] | None = None) -> None:
        self.calls = 0
        self.model = model
        self.fail_from = fail_from
        self.status_on = status_on or {}
        self.states: list[Any] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.calls += 1
        if self.fail_from is not None and self.calls >= self.fail_from:
            raise httpx2.ConnectError("teacher down", request=request)
        if self.calls in self.status_on:
            status = self.status_on[self.calls]
            return httpx2.Response(status, json={"detail": {"error_type": "x", "message": "no"}}, headers={"x-typesafe-request-id": "r"})
        assert request.url.path == "/v1/systemone"
        body = request.content
        if request.headers.get("content-encoding") == "zstd":
            body = zstandard.ZstdDecompressor().decompress(body, max_output_size=10**7)
        payload = json.loads(body)
        self.states.append(payload["state"])
        answers = {key: self._answer(q) for key, q in payload["questions"].items()}
        return httpx2.Response(200, json={"model": self.model, "answers": answers, "usage": {"input_tokens": 10, "output_tokens": 0}},
                               headers={"x-typesafe-request-id": f"req-{self.calls}"})

    @staticmethod
    def _answer(q: dict) -> dict:
        if q["type"] == "noul":
            return {"type": "noul", "noul": 0.8}
        if q["type"] == "choice":
            names = list(q["criteria"])
            probs = {n: (0.6 if i == 0 else 0.4 / (len(names) - 1)) for i, n in enumerate(names)}
            return {"type": "choice", "choice": names[0], "confidence": 0.4, "probabilities": probs}
        n = len(q["criteria"])
        return {"type": "score", "score": 1.0, "confidence": 0.5, "legend": {str(i): d for i, d in enumerate(q["criteria"])},
                "probabilities": {str(i): 1.0 / n for i in range(n)}}


def _examples(states: int = 5) -> list[DecisionExample]:
    out = []
    for s in range(states):
        state = {"observation": f"Ann ran {s} km on Monday. " + "x" * 1100 * (s == 0)}  # one body big enough for zstd
        for j, (q, t) in enumerate(((NOUL, 1.0), (CHOICE, {"before": 1.0, "after": 0.0, "unknown": 0.0}), (SCORE, [0.0, 0.0, 1.0]))):
            out.append(DecisionExample(f"s{s}:{j}", "typing", f"q{j}", state, q, t, "synthetic:t", f"synthetic:t:0:{s}", "train"))
    return out


def _config(**kw: Any) -> TeacherConfig:
    return TeacherConfig(**{"base_url": "http://teacher.local", "name": "open7b", "backoff": 0.0, "retries": 1, **kw})


def test_records_soft_answers_in_the_schema(tmp_path: Path) -> None:
    out = tmp_path / "teacher.jsonl"
    fake = FakeTeacher()
    report = distill(_examples(), out, _config(), transport=httpx2.MockTransport(fake), progress=False)
    assert (report.written, report.skipped, report.failed, report.requests) == (15, 0, 0, 5)
    assert fake.calls == 5  # questions sharing a state go in one request
    records = {r.id: r for r in read_jsonl(out)}
    noul = records[teacher_id("open7b", "s1:0")]
    assert noul.target == pytest.approx(0.8) and noul.source == "teacher:open7b" and noul.split == "train"
    assert noul.group == "synthetic:t:0:1" and "open-teacher-7b" in noul.notes
    choice = records[teacher_id("open7b", "s1:1")].target
    assert choice == pytest.approx({"before": 0.6, "after": 0.2, "unknown": 0.2})
    assert records[teacher_id("open7b", "s1:2")].target == pytest.approx([1 / 3] * 3)


def test_resumes_after_an_interruption(tmp_path: Path) -> None:
    out = tmp_path / "teacher.jsonl"
    sleeps: list[float] = []
    down = FakeTeacher(fail_from=3)  # two requests succeed, then the teacher is unreachable
    with pytest.raises(TeacherError):
        distill(_examples(), out, _config(backoff=0.25), transport=httpx2.MockTransport(down), progress=False, sleep=sleeps.append)
    first = [r.id for r in read_jsonl(out)]
    assert len(first) == 6 and sleeps == [0.25]
    with out.open("a", encoding="utf-8") as handle:
        handle.write('{"id": "teacher:open7b:s4:0", "fam')  # a torn line from the crash
    up = FakeTeacher()
    report = distill(_examples(), out, _config(), transport=httpx2.MockTransport(up), progress=False)
    assert report.skipped == 6 and report.written == 9 and up.calls == 3
    ids = [r.id for r in read_jsonl(out)]
    assert sorted(set(ids)) == sorted(teacher_id("open7b", e.id) for e in _examples())
    again = FakeTeacher()
    assert distill(_examples(), out, _config(), transport=httpx2.MockTransport(again), progress=False).written == 0
    assert again.calls == 0


def test_refused_requests_are_counted_and_skipped(tmp_path: Path) -> None:
    out = tmp_path / "teacher.jsonl"
    fake = FakeTeacher(status_on={2: 422})
    report = distill(_examples(), out, _config(), transport=httpx2.MockTransport(fake), progress=False)
    assert report.failed == 3 and report.written == 12


def test_jev_is_never_a_teacher(tmp_path: Path) -> None:
    with pytest.raises(TeacherError):
        _config(base_url="https://api.typesafe.ai")
    with pytest.raises(TeacherError):
        _config(model="jev-latest")
    _config(model="jevmem-minilm-1.0.0")  # this project's own local model is fine
    with pytest.raises(TeacherError):
        distill(_examples(1), tmp_path / "t.jsonl", _config(), transport=httpx2.MockTransport(FakeTeacher(model="jev-2.1")), progress=False)
    assert not (tmp_path / "t.jsonl").exists()


def test_answer_conversion_checks_options() -> None:
    class Answer:
        type = "choice"
        probabilities = {"before": 0.5, "after": 0.5}

    with pytest.raises(TeacherError):
        answer_target(CHOICE, Answer())
    with pytest.raises(TeacherError):
        answer_target(NOUL, Answer())


class _Omitting(FakeTeacher):
    """Answers every question but the first of each request."""

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        response = super().__call__(request)
        body = json.loads(response.content)
        body["answers"].pop(next(iter(body["answers"])))
        return httpx2.Response(200, json=body)


def test_a_response_without_an_answer_for_every_question_stops_the_run_with_a_teacher_error(tmp_path: Path) -> None:
    out = tmp_path / "teacher.jsonl"
    with pytest.raises(TeacherError, match="no answer for 1 of 3 questions"):
        distill(_examples(2), out, _config(), transport=httpx2.MockTransport(_Omitting()), progress=False)
    assert not out.exists()  # nothing half-answered was recorded


def test_an_output_it_cannot_write_or_read_is_refused_before_the_teacher_is_asked(tmp_path: Path) -> None:
    # an --out under a file (or a directory as --out) failed only when the first answers were written: a
    # traceback, and the teacher's work of that request lost; an --out that is not text was a UnicodeDecodeError
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "binary.jsonl").write_bytes(b"\xff\xfe\x00")
    for out, message in ((tmp_path / "a-file" / "t.jsonl", "cannot write teacher records to"),
                         (tmp_path / "a-dir", "cannot write teacher records to"),
                         (tmp_path / "binary.jsonl", "cannot read teacher records")):
        fake = FakeTeacher()
        with pytest.raises(TeacherError, match=message):
            distill(_examples(1), out, _config(), transport=httpx2.MockTransport(fake), progress=False)
        assert fake.calls == 0
    assert (tmp_path / "binary.jsonl").read_bytes() == b"\xff\xfe\x00"  # left as it was


@pytest.mark.parametrize("url", ["http://[::1", "http://teacher.local:99999"])
def test_a_base_url_that_does_not_parse_is_a_teacher_error(url: str) -> None:
    with pytest.raises(TeacherError, match="base_url"):
        _config(base_url=url)
