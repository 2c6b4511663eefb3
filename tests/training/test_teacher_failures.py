"""What a teacher gets wrong must become a clear error or a skipped-and-counted record, never a wrong target.

Fake teachers over httpx2.MockTransport (no sockets), or a stub client raising the SDK's errors where the
SDK's own retries would sleep for real; one test opens a connection to a closed local port.
"""

from __future__ import annotations

import json
import math
import socket
from pathlib import Path
from typing import Any

import httpx2
import pytest
import zstandard
from typesafe_sdk import TypeSafeAPIConnectionError, TypeSafeAPITimeoutError, TypeSafeRateLimitError

import data.teacher
from data.schema import DecisionExample, read_jsonl
from data.teacher import DEFAULT_MODEL, TeacherAnswerError, TeacherConfig, TeacherError, answer_target, distill, teacher_id
from tests.training.test_teacher import CHOICE, NOUL, SCORE, FakeTeacher, _config, _examples
from training.__main__ import main

MAKE_CLIENT = data.teacher.make_client


def _run(fake: Any, out: Path, examples: list[DecisionExample] | None = None, **kw: Any) -> data.teacher.TeacherReport:
    return distill(examples if examples is not None else _examples(), out, _config(**kw), transport=httpx2.MockTransport(fake),
                   progress=False, sleep=lambda s: None)


class _Answering(FakeTeacher):
    """FakeTeacher whose answer to each question of the request for state `s<k>` is `answers[k]` (when given)."""

    def __init__(self, answers: dict[int, dict[str, Any]], **kw: Any) -> None:
        super().__init__(**kw)
        self.answers = answers
        self.headers: list[httpx2.Headers] = []
        self.models: list[Any] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.headers.append(request.headers)
        response = super().__call__(request)
        if response.status_code != 200:
            return response
        body = json.loads(response.content)
        content = request.content
        if request.headers.get("content-encoding") == "zstd":
            content = zstandard.ZstdDecompressor().decompress(content, max_output_size=10**7)
        self.models.append(json.loads(content)["model"])
        state = self.states[-1]
        k = int(state["observation"].split()[2]) if isinstance(state, dict) and "observation" in state else -1
        for key, answer in self.answers.get(k, {}).items():
            body["answers"][key] = answer
        return httpx2.Response(200, json=body)


class _Answer:
    def __init__(self, type: str, **fields: Any) -> None:  # noqa: A002 - the wire field's name
        self.type = type
        self.__dict__.update(fields)


# ------------------------------------------------------------------------------------------- answer numbers
def test_probabilities_that_are_no_probabilities_are_skipped_and_counted(tmp_path: Path) -> None:
    # before: noul 1.7 was clipped to 1.0, a choice of 0.9 / 0.9 / 0.9 became uniform, a negative score level 0:
    # all recorded as targets the teacher never gave
    out = tmp_path / "teacher.jsonl"
    bad = {
        1: {"q0": {"type": "noul", "noul": 1.7}},
        2: {"q1": {"type": "choice", "choice": "before", "confidence": 0.9, "probabilities": {"before": 0.9, "after": 0.9, "unknown": 0.9}}},
        3: {"q2": {"type": "score", "score": 1.0, "confidence": 0.5, "legend": {"0": "low", "1": "mid", "2": "high"},
                   "probabilities": {"0": -0.4, "1": 0.7, "2": 0.7}}},
    }
    report = _run(_Answering(bad), out)
    assert (report.written, report.invalid, report.failed) == (12, 3, 0)
    ids = {r.id for r in read_jsonl(out)}
    assert not ids & {teacher_id("open7b", i) for i in ("s1:0", "s2:1", "s3:2")}
    assert teacher_id("open7b", "s1:1") in ids  # the rest of a request with one bad answer is kept
    again = _Answering({})  # a resume asks again for exactly the skipped ones
    assert _run(again, out).written == 3 and again.calls == 3


def test_answer_target_checks_every_number() -> None:
    for value in (math.nan, -0.2, 1.5, math.inf, True, "0.5"):
        with pytest.raises(TeacherAnswerError):
            answer_target(NOUL, _Answer("noul", noul=value))
    assert answer_target(NOUL, _Answer("noul", noul=1 + 1e-9)) == 1.0  # float rounding is clipped, not refused
    with pytest.raises(TeacherAnswerError, match="sum to 0.5000"):
        answer_target(CHOICE, _Answer("choice", probabilities={"before": 0.5, "after": 0.0, "unknown": 0.0}))
    with pytest.raises(TeacherAnswerError):
        answer_target(CHOICE, _Answer("choice", probabilities={"before": math.nan, "after": 0.5, "unknown": 0.5}))
    with pytest.raises(TeacherAnswerError):
        answer_target(CHOICE, _Answer("choice", probabilities={"before": 0.0, "after": 0.0, "unknown": 0.0}))
    near = answer_target(CHOICE, _Answer("choice", probabilities={"before": 0.333, "after": 0.333, "unknown": 0.333}))
    assert near == pytest.approx({"before": 1 / 3, "after": 1 / 3, "unknown": 1 / 3}) and abs(sum(near.values()) - 1) < 1e-12  # type: ignore[union-attr]
    with pytest.raises(TeacherError, match="levels"):  # another number of levels: not the protocol, the run stops
        answer_target(SCORE, _Answer("score", probabilities={0: 0.5, 1: 0.5}))


# ------------------------------------------------------------------------------------------------ statuses
def test_a_body_that_is_not_a_system_one_response_is_retried_then_stops_the_run(tmp_path: Path) -> None:
    # before: an HTML page with status 200 (a proxy) was "refused", every request alike, and the run reported success
    out = tmp_path / "teacher.jsonl"
    calls = []

    def html(request: httpx2.Request) -> httpx2.Response:
        calls.append(1)
        return httpx2.Response(200, text="<html>gateway</html>")

    with pytest.raises(TeacherError, match="not a System One response"):
        _run(html, out)
    assert len(calls) == 2 and not out.exists()  # retries=1: two attempts, nothing recorded


@pytest.mark.parametrize("status", [401, 403, 404])
def test_a_wrong_key_or_url_stops_at_the_first_request(tmp_path: Path, status: int) -> None:
    # before: every request was refused in turn (one warning each) and the command exited 0
    fake = FakeTeacher(status_on={i: status for i in range(1, 10)})
    with pytest.raises(TeacherError, match=f"refused the request with {status}"):
        _run(fake, tmp_path / "teacher.jsonl")
    assert fake.calls == 1


def test_requests_refused_in_a_row_stop_the_run(tmp_path: Path) -> None:
    # before: a server that refuses every request (422: say, a protocol it does not take) was asked all of them
    examples = _examples(states=10)
    fake = FakeTeacher(status_on={i: 422 for i in range(1, 20)})
    with pytest.raises(TeacherError, match="3 requests in a row"):
        _run(fake, tmp_path / "teacher.jsonl", examples, max_failed_requests=3)
    assert fake.calls == 3
    some = FakeTeacher(status_on={2: 422, 3: 422})  # failures that are not in a row are counted, the run goes on
    report = _run(some, tmp_path / "other.jsonl", examples, max_failed_requests=3)
    assert (report.failed, report.written) == (6, 24)


class _Stub:
    """A client whose calls raise the given errors in turn, then answer through FakeTeacher's logic."""

    def __init__(self, errors: list[BaseException]) -> None:
        self.errors = errors
        self.calls = 0

    def system_one(self, state: Any, questions: Any, *, model: Any = None, **kw: Any) -> Any:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        raise AssertionError("not reached in these tests")

    def close(self) -> None:
        pass


def test_rate_limits_honour_retry_after_within_a_bound(tmp_path: Path) -> None:
    # before: a 429's Retry-After was ignored by the extra attempts (1 s, 2 s, ... while the server asked for 7 s)
    def limited(after: str) -> TypeSafeRateLimitError:
        return TypeSafeRateLimitError(429, {"detail": "slow down"}, httpx2.Headers({"retry-after": after}))

    sleeps: list[float] = []
    stub = _Stub([limited("7"), limited("3600"), limited("0"), limited("0")])
    with pytest.raises(TeacherError, match="kept failing"):
        distill(_examples(1), tmp_path / "t.jsonl", _config(backoff=1.0, retries=3), client=stub, progress=False, sleep=sleeps.append)
    assert sleeps == [7.0, data.teacher.MAX_WAIT, 4.0] and stub.calls == 4  # bounded: MAX_WAIT, retries + 1 attempts


def test_connection_refused_and_timeouts_say_what_to_check(tmp_path: Path) -> None:
    sleeps: list[float] = []
    refused = _Stub([TypeSafeAPIConnectionError("Connection error: refused")] * 3)
    with pytest.raises(TeacherError, match="is the server running"):
        distill(_examples(1), tmp_path / "t.jsonl", _config(backoff=0.5, retries=2), client=refused, progress=False, sleep=sleeps.append)
    assert sleeps == [0.5, 1.0] and refused.calls == 3
    slow = _Stub([TypeSafeAPITimeoutError(30.0)] * 2)
    with pytest.raises(TeacherError, match="raise --timeout"):
        distill(_examples(1), tmp_path / "t.jsonl", _config(), client=slow, progress=False, sleep=sleeps.append)


def test_a_teacher_that_is_not_running_is_a_message_from_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = tmp_path / "data"
    assert main(["build-data", "--out", str(data_dir), "--synthetic-per-family", "4"]) == 0
    with socket.socket() as s:  # a local port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["distill", "--data", str(data_dir), "--limit", "2", "--base-url", f"http://127.0.0.1:{port}", "--name", "t",
            "--retries", "0", "--out", str(tmp_path / "t.jsonl")]
    def no_sdk_backoff(config: TeacherConfig, *, transport: Any = None) -> Any:
        return MAKE_CLIENT(TeacherConfig(**{**config.__dict__, "backoff": 0.0}), transport=transport)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(data.teacher, "make_client", no_sdk_backoff)
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert "is the server running" in err and "Traceback" not in err and not (tmp_path / "t.jsonl").exists()


# ------------------------------------------------------------------------------------------------- resumes
def test_a_resume_against_another_model_is_refused(tmp_path: Path) -> None:
    # before: the second model's answers were appended under the same source, mixed with the first's
    out = tmp_path / "teacher.jsonl"
    _run(FakeTeacher(model="open-teacher-7b"), out, _examples(2))
    before = out.read_bytes()
    with pytest.raises(TeacherError, match="another --name"):
        _run(FakeTeacher(model="open-teacher-70b"), out)
    assert out.read_bytes() == before
    assert _run(FakeTeacher(model="open-teacher-70b"), out, name="open70b").written == 15  # a name of its own is fine


def test_a_resume_over_rebuilt_data_is_refused(tmp_path: Path) -> None:
    # before: ids already recorded were skipped although their state had changed, so the new states never got answers
    out = tmp_path / "teacher.jsonl"
    _run(FakeTeacher(), out, _examples(2))
    rebuilt = [DecisionExample(e.id, e.family, e.question_name, {"observation": "another text"}, e.question, e.target, e.source,
                               e.group, e.split) for e in _examples(2)]
    with pytest.raises(TeacherError, match="another state or question"):
        _run(FakeTeacher(), out, rebuilt)


def test_duplicate_ids_in_the_input_or_the_records_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "teacher.jsonl"
    with pytest.raises(TeacherError, match="appears twice"):
        _run(FakeTeacher(), out, _examples(1) + _examples(1))
    _run(FakeTeacher(), out, _examples(1))
    with out.open("a", encoding="utf-8") as handle:  # what two runs appending to one file at once leave
        handle.write(out.read_text(encoding="utf-8").splitlines()[0] + "\n")
    with pytest.raises(TeacherError, match="twice"):
        _run(FakeTeacher(), out)


def test_a_run_interrupted_between_requests_resumes_without_loss_or_duplicates(tmp_path: Path) -> None:
    out = tmp_path / "teacher.jsonl"

    class Interrupted(FakeTeacher):
        def __call__(self, request: httpx2.Request) -> httpx2.Response:
            if self.calls == 2:
                raise KeyboardInterrupt
            return super().__call__(request)

    with pytest.raises(KeyboardInterrupt):
        _run(Interrupted(), out)
    assert len(list(read_jsonl(out))) == 6
    assert _run(FakeTeacher(), out).written == 9
    ids = [r.id for r in read_jsonl(out)]
    assert sorted(ids) == sorted(teacher_id("open7b", e.id) for e in _examples())


# --------------------------------------------------------------------------------------------- key and model
def test_the_api_key_is_never_shown(tmp_path: Path) -> None:
    config = _config(api_key="sk-secret-123", base_url="http://teacher.local")
    assert "sk-secret-123" not in repr(config)
    with pytest.raises(TeacherError) as caught:
        distill(_examples(1), tmp_path / "t.jsonl", config, client=_Stub([TypeSafeAPIConnectionError("x")] * 2), progress=False,
                sleep=lambda s: None)
    assert "sk-secret-123" not in str(caught.value) and "teacher.local" in str(caught.value)
    with pytest.raises(TeacherError, match="API key") as empty:
        _config(api_key="has space")
    assert "has space" not in str(empty.value)


@pytest.mark.parametrize("url", ["http://user:pw@teacher.local", "https://user@teacher.local:8443/v1", "http://:pw@teacher.local"])
def test_credentials_in_the_url_are_refused_without_showing_them(url: str) -> None:
    # before: httpx sent them as Basic auth in place of the key, and `-v` logged the password with the URL
    with pytest.raises(TeacherError, match=r"carries credentials .*JEVMEM_TEACHER_API_KEY") as caught:
        _config(base_url=url)
    assert "pw" not in str(caught.value) and "***@teacher.local" in str(caught.value)


@pytest.mark.parametrize("url", ["ftp://teacher.local", "file://teacher.local/x", "ws://teacher.local"])
def test_a_scheme_other_than_http_is_refused(url: str) -> None:
    with pytest.raises(TeacherError, match="http:// or https://"):
        _config(base_url=url)


def _distill_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeTeacher, *extra: str) -> int:
    data_dir = tmp_path / "data"
    if not data_dir.exists():
        assert main(["build-data", "--out", str(data_dir), "--synthetic-per-family", "4"]) == 0
    monkeypatch.setattr(data.teacher, "make_client", lambda config, *, transport=None: MAKE_CLIENT(config, transport=httpx2.MockTransport(fake)))
    return main(["distill", "--data", str(data_dir), "--families", "routing", "--limit", "3", "--base-url", "http://teacher.local",
                 "--name", "t", "--out", str(tmp_path / "t.jsonl"), *extra])


def test_the_command_reads_the_key_from_the_environment_and_never_from_typesafes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # before: the key could only be given on the command line (visible in the process list)
    monkeypatch.setenv("TYPESAFE_API_KEY", "typesafe-key")
    monkeypatch.setenv(data.teacher.TEACHER_API_KEY_ENV, "env-key")
    fake = _Answering({})
    assert _distill_cli(tmp_path, monkeypatch, fake) == 0
    assert {h["authorization"] for h in fake.headers} == {"Bearer env-key"}
    assert "env-key" not in capsys.readouterr().err
    monkeypatch.delenv(data.teacher.TEACHER_API_KEY_ENV)
    fake = _Answering({})
    (tmp_path / "t.jsonl").unlink()
    assert _distill_cli(tmp_path, monkeypatch, fake) == 0
    assert {h["authorization"] for h in fake.headers} == {"Bearer local"}  # TypeSafe's key never goes to a teacher
    (tmp_path / "t.jsonl").unlink()
    assert _distill_cli(tmp_path, monkeypatch, _Answering({}), "--api-key", "argv-key") == 0
    err = capsys.readouterr().err
    assert "visible to other users" in err and "argv-key" not in err


def test_the_environment_cannot_change_the_model_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # before: without --model the SDK sent $TYPESAFE_DEFAULT_MODEL (here a Jev model) to the teacher
    monkeypatch.setenv("TYPESAFE_DEFAULT_MODEL", "jev-preview")
    fake = _Answering({})
    _run(fake, tmp_path / "t.jsonl", _examples(2))
    assert fake.models == [DEFAULT_MODEL, DEFAULT_MODEL]
    named = _Answering({})
    _run(named, tmp_path / "u.jsonl", _examples(1), model="qwen-72b")
    assert named.models == ["qwen-72b"]


def test_the_command_passes_request_size_timeout_and_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTeacher()
    seen: list[TeacherConfig] = []
    real = data.teacher.distill

    def spy(examples: Any, out: Any, config: TeacherConfig, **kw: Any) -> Any:
        seen.append(config)
        return real(examples, out, config, **kw)

    monkeypatch.setattr(data.teacher, "distill", spy)
    assert _distill_cli(tmp_path, monkeypatch, fake, "--max-questions", "1", "--timeout", "90", "--retries", "2") == 0
    assert (seen[0].max_questions, seen[0].timeout, seen[0].retries) == (1, 90.0, 2)
    assert fake.calls == 3  # one question per request


def test_a_second_run_on_the_same_file_stops_before_asking_anything(tmp_path: Path) -> None:
    """Two runs appending to one file would ask for, and record, the same examples twice (the resume check reads the
    file once, at the start): the second stops at once, and the first one's file is untouched."""
    import threading

    from data.paths import exclusive

    out = tmp_path / "teacher.jsonl"
    _run(FakeTeacher(), out, _examples()[:3])
    before = out.read_bytes()
    holding, release = threading.Event(), threading.Event()

    def first_run() -> None:  # another writer of `out` (a thread takes the lock as another process would)
        with exclusive(out):
            holding.set()
            release.wait(10)

    other = threading.Thread(target=first_run)
    other.start()
    try:
        assert holding.wait(10)
        fake = FakeTeacher()
        with pytest.raises(TeacherError, match="another process is writing"):
            _run(fake, out)
        assert fake.calls == 0 and out.read_bytes() == before
    finally:
        release.set()
        other.join(10)
    report = _run(FakeTeacher(), out)  # once the first has ended, the file resumes as usual
    assert report.skipped == 3 and report.written == report.requested - 3


@pytest.mark.parametrize("content", [
    b'[{"sample_id": "conv-26", "conversation": {}}]',  # a one-line JSON file without a newline: read as a torn append
    b'{"id": "x", "note": "not ours"}',
    b"id,target\n1,0.5",
])
def test_an_out_file_that_distill_did_not_write_is_refused_and_kept(tmp_path: Path, content: bytes) -> None:
    """Before: a last line without its newline was taken for an interrupted append and cut at the first append, so
    `--out` naming another file (a LoCoMo JSON, a CSV) lost its content."""
    out = tmp_path / "notes.json"
    out.write_bytes(content)
    fake = FakeTeacher()
    with pytest.raises(TeacherError, match="not a teacher records file|cannot read teacher records"):
        _run(fake, out)
    assert fake.calls == 0 and out.read_bytes() == content


def test_an_out_file_of_other_decision_examples_is_refused(tmp_path: Path) -> None:
    from data.schema import write_jsonl

    out = tmp_path / "train.jsonl"  # the split being labelled, given as --out by mistake
    write_jsonl(out, _examples())
    before = out.read_bytes()
    with pytest.raises(TeacherError, match="is not a teacher records file: .* has source"):
        _run(FakeTeacher(), out)
    assert out.read_bytes() == before


def test_a_teacher_record_cut_short_still_resumes(tmp_path: Path) -> None:
    out = tmp_path / "teacher.jsonl"
    _run(FakeTeacher(), out, _examples()[:3])
    whole = out.read_bytes()
    for cut in (whole + b'{"id":"teach', whole + b'{"id":"teacher:open7b:x","fam'):
        out.write_bytes(cut)
        report = _run(FakeTeacher(), out)
        assert report.skipped == 3 and len(list(read_jsonl(out))) == report.requested
        out.write_bytes(whole)
