"""A misbehaving teacher served for real on 127.0.0.1 (http.server in a thread), through the SDK client `distill`
makes itself: bad numbers, answers that do not fit, overload, failures, redirects, huge or endless bodies, a
recording process killed mid-append. Each says what happened before the fix where there was one."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import zstandard

import data.teacher
from data.schema import DecisionExample, read_jsonl
from data.teacher import TeacherAnswerError, TeacherConfig, TeacherError, TeacherReport, answer_target, distill, teacher_id
from tests.training.test_teacher import CHOICE, NOUL, SCORE, FakeTeacher, _examples

ROOT = Path(__file__).resolve().parents[2]
Behave = Callable[["_Handler", dict[str, Any], dict[str, Any], int], None]  # (handler, request, good body, call number)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        srv = self.server
        with srv.lock:
            srv.calls += 1
            call = srv.calls
        srv.auth.append(self.headers.get("authorization"))
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.headers.get("content-encoding") == "zstd":
            raw = zstandard.ZstdDecompressor().decompress(raw, max_output_size=10**8)
        payload = json.loads(raw)
        body = {"model": "open-teacher-7b", "answers": {k: FakeTeacher._answer(q) for k, q in payload["questions"].items()},
                "usage": {"input_tokens": 1, "output_tokens": 0}}
        try:
            srv.behave(self, payload, body, call)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up first (a timeout, a size limit)
            self.close_connection = True

    def send(self, status: int, body: Any = None, *, headers: tuple[tuple[str, str], ...] = (), raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(body).encode()  # (json.dumps writes NaN as the token NaN)
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("x-typesafe-request-id", "req")
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, behave: Behave) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.behave, self.calls, self.auth, self.lock = behave, 0, [], threading.Lock()
        self.stop = threading.Event()  # set at teardown: handlers that wait end at once
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up (what several tests do) is no error
            super().handle_error(request, client_address)


@pytest.fixture
def serve() -> Iterator[Callable[[Behave], _Server]]:
    started: list[tuple[_Server, threading.Thread]] = []

    def start(behave: Behave) -> _Server:
        server = _Server(behave)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        started.append((server, thread))
        return server

    yield start
    for server, thread in started:
        server.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def ok(handler: _Handler, request: dict[str, Any], body: dict[str, Any], call: int) -> None:
    handler.send(200, body)


def answering(answers: dict[str, Any]) -> Behave:
    """Every request answered well but for these question keys."""
    def behave(handler: _Handler, request: dict[str, Any], body: dict[str, Any], call: int) -> None:
        body["answers"].update({k: v for k, v in answers.items() if k in body["answers"]})
        handler.send(200, body)
    return behave


def status(code: int, *, headers: tuple[tuple[str, str], ...] = (), message: str = "no", until: int | None = None) -> Behave:
    """`code` on every call (on calls up to `until` only, then good answers)."""
    def behave(handler: _Handler, request: dict[str, Any], body: dict[str, Any], call: int) -> None:
        if until is not None and call > until:
            return handler.send(200, body)
        handler.send(code, {"detail": {"error_type": "x", "message": message}}, headers=headers)
    return behave


def _config(url: str, **kw: Any) -> TeacherConfig:
    return TeacherConfig(**{"base_url": url, "name": "open7b", "backoff": 0.0, "retries": 1, "timeout": 2.0, **kw})


def _distill(server: _Server, out: Path, examples: list[DecisionExample] | None = None, *, sleeps: list[float] | None = None,
             **kw: Any) -> TeacherReport:
    return distill(_examples(2) if examples is None else examples, out, _config(server.url, **kw), progress=False,
                   sleep=(sleeps if sleeps is not None else []).append)


def _ids(out: Path) -> list[str]:
    return [r.id for r in read_jsonl(out)] if out.exists() else []


# ---------------------------------------------------------------------------------------- one bad answer
@pytest.mark.parametrize("bad", [
    {"type": "noul", "noul": float("nan")},  # the JSON token NaN
    {"type": "noul", "noul": "0.5"},
    {"type": "noul", "noul": None},
    {"type": "noul"},
    {"type": "noul", "noul": -0.1},
    {"type": "noul", "noul": 1.7},
    {"type": "noul", "noul": 10**400},
    "yes",
])
def test_a_bad_number_skips_only_its_record_and_a_resume_asks_for_it_again(serve: Any, tmp_path: Path, bad: Any) -> None:
    # before: NaN, a string, null or a missing field failed the SDK's strict response type, so the whole body was
    # "not a System One response": retried alike, then the run stopped, every good answer of the request lost
    out = tmp_path / "t.jsonl"
    report = _distill(serve(answering({"q0": bad})), out)
    assert (report.written, report.invalid, report.failed) == (4, 2, 0)
    assert teacher_id("open7b", "s0:0") not in _ids(out) and teacher_id("open7b", "s0:1") in _ids(out)
    good = serve(ok)
    again = _distill(good, out)
    assert (again.skipped, again.written, good.calls) == (4, 2, 2)
    assert sorted(_ids(out)) == sorted(teacher_id("open7b", e.id) for e in _examples(2))


def test_a_choice_naming_an_option_not_asked_or_not_its_most_likely_is_skipped(serve: Any, tmp_path: Path) -> None:
    # before: the `choice` field was never read: both were recorded as targets
    probs = {"before": 0.6, "after": 0.2, "unknown": 0.2}
    for n, chosen in enumerate(("nowhere", "after", ["before"])):
        out = tmp_path / f"t{n}.jsonl"
        report = _distill(serve(answering({"q1": {"type": "choice", "choice": chosen, "confidence": 0.4, "probabilities": probs}})), out)
        assert (report.written, report.invalid) == (4, 2)
        assert teacher_id("open7b", "s0:1") not in _ids(out)
    tie = {"type": "choice", "choice": "after", "confidence": 0.0, "probabilities": {"before": 0.4, "after": 0.4, "unknown": 0.2}}
    assert _distill(serve(answering({"q1": tie})), tmp_path / "tie.jsonl").invalid == 0  # a tie may name either


@pytest.mark.parametrize("legend", [{"0": "high", "1": "mid", "2": "low"}, {"0": "low", "1": "mid"}, ["low", "mid", "high"],
                                    {"0": "low", "1": "mid", "2": float("nan")}])
def test_a_score_whose_legend_is_not_the_levels_asked_is_skipped(serve: Any, tmp_path: Path, legend: Any) -> None:
    # before: the legend was never read: a teacher that rated on a reversed scale was recorded as it was
    out = tmp_path / "t.jsonl"
    answer = {"type": "score", "score": 1.7, "confidence": 0.5, "legend": legend, "probabilities": {"0": 0.1, "1": 0.1, "2": 0.8}}
    report = _distill(serve(answering({"q2": answer})), out)
    assert (report.written, report.invalid) == (4, 2)
    assert teacher_id("open7b", "s1:2") not in _ids(out)


def test_answer_target_refuses_answers_that_are_not_answer_objects() -> None:
    for question, answer in ((NOUL, 0.5), (NOUL, None), (CHOICE, {"type": "choice", "probabilities": [0.5, 0.5]}),
                             (SCORE, {"type": "score", "probabilities": "0.5"})):
        with pytest.raises(TeacherAnswerError):
            answer_target(question, answer)
    legend = {"0": "low", "1": "mid", "2": "high"}
    assert answer_target(SCORE, {"type": "score", "legend": legend, "probabilities": {"0": 0, "1": 0, "2": 1}}) == [0.0, 0.0, 1.0]


def test_answers_that_do_not_fit_the_questions_stop_the_run_naming_the_record(serve: Any, tmp_path: Path) -> None:
    # before: "gave no answer for 1 of 3 questions of a request" / "teacher probabilities [...] do not match": no record named
    def missing(handler: _Handler, request: dict[str, Any], body: dict[str, Any], call: int) -> None:
        del body["answers"]["q1"]
        handler.send(200, body)

    extra = {"type": "choice", "choice": "before", "confidence": 0.4,
             "probabilities": {"before": 0.6, "after": 0.2, "unknown": 0.1, **{f"x{i}": 0.1 / 50 for i in range(50)}}}
    for behave, message in ((missing, "no answer for 1 of 3 questions of a request (for s0:1)"),
                            (answering({"q1": extra}), "answer for s0:1 does not fit its question"),
                            (answering({"q0": {"type": "choice", "choice": "a", "confidence": 1, "probabilities": {"a": 1.0}}}),
                             "answer for s0:0 does not fit its question")):
        out = tmp_path / "t.jsonl"
        with pytest.raises(TeacherError, match=re.escape(message)) as caught:
            _distill(serve(behave), out)
        assert "\n" not in str(caught.value) and len(str(caught.value)) < 400 and not out.exists()  # (50 option names: cut)


def test_answers_for_keys_not_asked_are_ignored(serve: Any, tmp_path: Path) -> None:
    behave = answering({})

    def more(handler: _Handler, request: dict[str, Any], body: dict[str, Any], call: int) -> None:
        body["answers"]["q99"] = {"type": "noul", "noul": float("nan")}
        behave(handler, request, body, call)

    assert _distill(serve(more), tmp_path / "t.jsonl").written == 6


# ------------------------------------------------------------------------------------- overload and failures
def test_a_503s_retry_after_is_honoured_and_the_run_ends_after_bounded_attempts(serve: Any, tmp_path: Path) -> None:
    # before: only a 429's Retry-After was read by the extra attempts; a 503 asking for 0.02 s got the backoff (here 0)
    sleeps: list[float] = []
    server = serve(status(503, headers=(("retry-after-ms", "20"),)))
    with pytest.raises(TeacherError, match="asked about s0:0 and 2 more, kept failing: .*503") as caught:
        _distill(server, tmp_path / "t.jsonl", sleeps=sleeps, retries=2)
    assert sleeps == [pytest.approx(0.02)] * 2 and server.calls == 3 * 3  # (retries + 1) x the SDK's 3 attempts
    assert "\n" not in str(caught.value) and not (tmp_path / "t.jsonl").exists()


def test_overload_and_server_errors_that_pass_are_retried_without_duplicates(serve: Any, tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    sleeps: list[float] = []
    for n, behave in enumerate((status(429, headers=(("retry-after", "0"),), until=4), status(500, until=4))):
        server = serve(behave)
        report = _distill(server, out if n == 0 else tmp_path / "u.jsonl", sleeps=sleeps, retries=2)
        assert report.written == 6 and server.calls == 4 + 2
    assert sorted(_ids(out)) == sorted(set(_ids(out)))


def test_a_non_json_body_is_retried_then_stops(serve: Any, tmp_path: Path) -> None:
    server = serve(lambda h, r, b, c: h.send(200, raw=b"<html>\n<body>gateway</body>\n</html>"))
    with pytest.raises(TeacherError, match="s0:0 and 2 more, answered with a body that is not a System One response") as caught:
        _distill(server, tmp_path / "t.jsonl")
    assert server.calls == 2 and "\n" not in str(caught.value)


def test_timeouts_and_a_connection_dropped_mid_body_are_retried_then_stop(serve: Any, tmp_path: Path) -> None:
    def slow(handler: _Handler, request: dict[str, Any], body: dict[str, Any], call: int) -> None:
        handler.server.stop.wait(1.0)
        handler.send(200, body)

    def dropped(handler: _Handler, request: dict[str, Any], body: dict[str, Any], call: int) -> None:
        data = json.dumps(body).encode()
        handler.send_response(200)
        handler.send_header("content-length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data[:20])
        handler.wfile.flush()
        handler.connection.shutdown(socket.SHUT_RDWR)
        handler.close_connection = True

    for behave, message, kw in ((slow, "raise --timeout from 0.1s", {"timeout": 0.1, "retries": 0}),
                                (dropped, "peer closed connection without sending complete message body", {})):
        server = serve(behave)
        with pytest.raises(TeacherError, match=message):
            _distill(server, tmp_path / "t.jsonl", **kw)
        assert server.calls == 3 * (kw.get("retries", 1) + 1) and not (tmp_path / "t.jsonl").exists()


def test_huge_endless_and_trickling_bodies_stop_instead_of_filling_memory_or_hanging(serve: Any, tmp_path: Path,
                                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # before: every body was read whole, however large (or however far it decoded); one streamed without end was
    # read until the server stopped
    monkeypatch.setattr(data.teacher, "MAX_BODY_BYTES", 2**20)

    def huge(handler: _Handler, request: dict[str, Any], body: dict[str, Any], call: int) -> None:
        handler.send(200, {**body, "x_pad": "x" * (2**20 + 1)})

    bomb = gzip.compress(b'{"x_pad": "' + b"x" * 30 * 2**20 + b'"}')  # ~30 KiB sent, 30 MiB decoded

    def gzipped(handler: _Handler, request: dict[str, Any], body: dict[str, Any], call: int) -> None:
        handler.send(200, headers=(("content-encoding", "gzip"),), raw=bomb)

    def chunked(gap: float, chunk: bytes) -> Behave:
        def behave(handler: _Handler, request: dict[str, Any], body: dict[str, Any], call: int) -> None:
            handler.send_response(200)
            handler.send_header("transfer-encoding", "chunked")
            handler.end_headers()
            handler.wfile.write(b"1\r\n{\r\n")
            while not handler.server.stop.wait(gap):
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                handler.wfile.flush()
        return behave

    for behave, message, calls, timeout in ((huge, r"a response body of \d+ bytes \(at most 1048576", 1, 2.0),
                                            (gzipped, "over 1048576 bytes once decoded", 1, 2.0),
                                            (chunked(0.0005, b" " * 65536), "a response body over 1048576 bytes", 1, 2.0),
                                            (chunked(0.05, b" "), "timed out .* raise --timeout", 3, 0.3)):
        server = serve(behave)
        start = time.monotonic()
        with pytest.raises(TeacherError, match=message):
            _distill(server, tmp_path / "t.jsonl", timeout=timeout, retries=0)
        assert server.calls == calls and time.monotonic() - start < 4


def test_a_redirect_stops_the_run_and_is_never_followed(serve: Any, tmp_path: Path) -> None:
    # before: a 307 to another host was a "refused request", counted, and the command exited 0 having labelled nothing
    elsewhere = serve(ok)
    server = serve(status(307, headers=(("location", elsewhere.url.replace("//", "//user:pw@") + "/v1/systemone"),)))
    with pytest.raises(TeacherError, match=r"asked about s0:0 and 2 more, redirected the request \(307\) to http://\*\*\*@127") as caught:
        _distill(server, tmp_path / "t.jsonl", examples=_examples(3))
    assert server.calls == 1 and elsewhere.calls == 0 and "pw" not in str(caught.value)


def test_a_key_the_server_echoes_is_never_shown(serve: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # before: a server error quoting the request's key was repeated in the warnings and in the final message
    key = "sk-teacher-5ecret"
    server = serve(status(500, message=f"bad token Bearer {key}\nat line 3"))
    with caplog.at_level("WARNING", logger="data.teacher"), pytest.raises(TeacherError, match="bad token Bearer \\*\\*\\* at line 3") as caught:
        _distill(server, tmp_path / "t.jsonl", api_key=key)
    assert server.auth[0] == f"Bearer {key}"  # it was sent, and only shown as ***
    assert key not in str(caught.value) and key not in caplog.text and "token Bearer ***" in caplog.text


# ---------------------------------------------------------------------------------------------------- resumes
_CHILD = r"""
import os, signal, sys
import data.teacher as teacher
from tests.training.test_teacher import _examples

real, appends = teacher.write_jsonl, []
def killed_mid_append(path, records, append):
    appends.append(path)
    if len(appends) < 3:
        return real(path, records, append=append)
    with open(path, "a", encoding="utf-8") as handle:  # one record whole, the next cut short, then SIGKILL
        handle.write(records[0].to_json() + "\n" + records[1].to_json()[: int(sys.argv[3])])
        handle.flush()
    os.kill(os.getpid(), signal.SIGKILL)
teacher.write_jsonl = killed_mid_append
teacher.distill(_examples(), sys.argv[2], teacher.TeacherConfig(base_url=sys.argv[1], name="open7b", backoff=0.0, retries=0),
                progress=False)
"""


@pytest.mark.parametrize(("cut", "kept"), [(0, 7), (37, 7), (10**6, 8)])  # at a line's start, inside it, before its newline
def test_a_run_killed_mid_append_resumes_without_a_duplicate_or_a_loss(serve: Any, tmp_path: Path, cut: int, kept: int) -> None:
    out = tmp_path / "t.jsonl"
    server = serve(ok)
    child = subprocess.run([sys.executable, "-c", _CHILD, server.url, str(out), str(cut)], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    assert len(_ids(out)) == kept  # two requests, one record of the third (and a whole one without its newline)
    report = _distill(server, out, _examples())
    assert report.skipped + report.written == 15
    assert sorted(_ids(out)) == sorted(teacher_id("open7b", e.id) for e in _examples())  # each once, none lost


def test_a_resume_over_inputs_moved_to_another_split_or_group_is_refused(serve: Any, tmp_path: Path) -> None:
    # before: recorded ids were skipped, so records kept the old split and group (where they train) of rebuilt data
    out = tmp_path / "t.jsonl"
    _distill(serve(ok), out)
    before = out.read_bytes()
    for moved in ({"split": "test"}, {"group": "synthetic:t:0:99"}):
        examples = [dataclasses.replace(e, **moved) for e in _examples(2)]
        server = serve(ok)
        with pytest.raises(TeacherError, match="another state or question .or group or split."):
            _distill(server, out, examples)
        assert server.calls == 0 and out.read_bytes() == before


def test_the_command_stops_with_one_line_naming_the_record_and_never_the_key(serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from training.__main__ import main

    key = "sk-teacher-5ecret"
    monkeypatch.setenv(data.teacher.TEACHER_API_KEY_ENV, key)
    assert main(["build-data", "--out", str(tmp_path / "data"), "--synthetic-per-family", "4"]) == 0
    server = serve(status(401, message=f"unknown key {key}\n\n<html>login</html>"))
    argv = ["distill", "--data", str(tmp_path / "data"), "--limit", "2", "--base-url", server.url, "--name", "t",
            "--out", str(tmp_path / "t.jsonl")]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    message = err.rstrip("\n").rsplit("\n", 1)[-1]  # (after the progress bar)
    assert message.startswith("error: ") and err.count("error") == 1 and "refused the request with 401" in message
    assert "asked about " in message and "<html>login</html>" in message and key not in err and server.auth == [f"Bearer {key}"]
