"""Teacher labels: soft answers from any server that speaks the System One wire protocol.

For a set of decision examples (their states and questions; their targets are ignored), ask a teacher
model, for example a larger open model served locally behind the protocol, and record its probabilities
as new examples with `source="teacher:<name>"`, the same group and split as their input, and the id
`teacher:<name>:<input id>`. Questions that share a state go in one request (`max_questions` at most).

Resumable: records are appended to one JSONL file after every request, ids already in the file are
skipped, and a torn last line from an interrupted run is ignored. A resume must continue the same work:
a recorded id whose state, question, group or split differs from its input now (the data were rebuilt), or a teacher
that answers as another model than the one already recorded under this name, stops the run before
anything is appended (use a new `--out` or `--name`). One run at a time per file: a second run on the same `out`
(another process) stops at once with `TeacherError`, before it reads or asks anything, instead of appending
the same answers beside the first run's.

What a teacher gets wrong never becomes a silently wrong target:

    TeacherError               the run stops (what was recorded stays; rerun to resume)
    │                          - refused configuration (Jev, a bad URL, an empty key)
    │                          - the server keeps failing: connection refused, timeouts, 408 / 429 / 5xx,
    │                            a body that is not a System One response; `retries` more attempts with
    │                            exponential backoff (a 429's or 503's Retry-After honoured up to `MAX_WAIT`)
    │                            on top of the SDK's own retries
    │                          - 401 / 403 / 404: a wrong key, permission or URL fails every request alike; a
    │                            redirect (3xx) is never followed (the key would go with it) and stops the run
    │                          - a body over `MAX_BODY_BYTES` (one still arriving `timeout` s after its headers
    │                            is a timeout, retried)
    │                          - an answer that does not fit its question (missing, another kind, other options
    │                            or levels): a server that does not speak the protocol; the message names the record
    │                          - `max_failed_requests` requests in a row that gave nothing to record
    └── TeacherAnswerError     one answer that cannot be a target (not a number, NaN, outside [0, 1], a
                               distribution summing to 1 ± more than `SUM_TOLERANCE`, a Choice naming an option
                               not asked or not its most likely, a Score legend that is not the question's
                               levels; `data.teacher_answers`): its record is skipped and counted
                               (`TeacherReport.invalid`); the rest of the request is kept
A request the server refuses (400 / 422 and other 4xx) is logged and its examples counted as failed.

Answers for keys not asked are ignored. Server text in messages and warnings is cut to one short line.

The API key: `TeacherConfig.api_key` is never shown (`repr`, messages, nor where a server's error echoes it); the
CLI reads it from the environment (`TEACHER_API_KEY_ENV`) and never from TypeSafe's own variable. The SDK's default model (`jev-latest`, or
`TYPESAFE_DEFAULT_MODEL` from the environment) is never sent for want of `model`: the protocol's alias
`DEFAULT_MODEL` is requested explicitly, so the environment cannot change what is asked.

TypeSafe's customer terms forbid distilling from Jev's outputs: `TeacherConfig` refuses TypeSafe's hosts
and the Jev model aliases, and a response naming a `jev-` model stops the run. Never record Jev outputs.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from data.errors import BusyError
from data.paths import exclusive, unwritable
from data.schema import DataError, DecisionExample, DecisionGroup, canonical, group_examples, read_jsonl, write_jsonl
from data.teacher_answers import (  # noqa: F401 - re-exported: the teacher's public API
    RANGE_TOLERANCE,
    SUM_TOLERANCE,
    TeacherAnswerError,
    TeacherError,
    answer_target,
    wire_response,
)
from data.teacher_http import BodyTooLarge, capped_client, retry_after

log = logging.getLogger(__name__)

REFUSED_HOSTS = ("typesafe.ai",)
_JEV_MODEL = re.compile(r"^jev(?:[-_ ]|$)", re.IGNORECASE)  # jev-latest, jev-preview, jev-2.1 (not jevmem-*)
TEACHER_API_KEY_ENV = "JEVMEM_TEACHER_API_KEY"  # not TYPESAFE_API_KEY: a TypeSafe key must never reach another server
DEFAULT_MODEL = "jev-latest"  # the protocol's alias for a server's default model (what the SDK sends by default)
MAX_WAIT = 60.0  # seconds: the longest wait between attempts (doubling backoff, a Retry-After)
FATAL_STATUSES = frozenset({401, 403, 404})  # every request would fail alike (and so would a redirect, 3xx)
MAX_BODY_BYTES = 16 * 2**20  # a response body larger than this stops the run (32 questions of 255 options: < 1 MiB)
_MODEL_NOTE = "model="


def is_jev_model(name: str | None) -> bool:
    return bool(name) and bool(_JEV_MODEL.match(str(name)))


@dataclass(frozen=True)
class TeacherConfig:
    base_url: str  # the teacher server (required: there is no default host)
    name: str  # recorded as source "teacher:<name>"
    api_key: str = field(default="local", repr=False)  # never shown: not in repr, logs or messages
    model: str | None = None  # model requested from the server (None: the protocol's default alias)
    max_questions: int = 32  # questions per request
    retries: int = 4  # extra attempts after the SDK's own retries
    backoff: float = 1.0  # seconds before the first extra attempt, doubled each time (at most MAX_WAIT)
    timeout: float = 30.0
    compression: bool = True  # zstd request bodies when the SDK has zstd
    max_failed_requests: int = 5  # requests in a row with nothing to record (refused / invalid) before the run stops

    def __post_init__(self) -> None:
        try:
            parsed = urlparse(self.base_url)
            host, _ = (parsed.hostname or "").lower(), parsed.port  # .port raises on a port out of range
        except ValueError as error:
            raise TeacherError(f"base_url {shown_url(self.base_url)!r} is not a URL: {error}") from error
        if not host:
            raise TeacherError(f"base_url needs a host, got {shown_url(self.base_url)!r}")
        if "@" in parsed.netloc:  # httpx would send them as Basic auth in place of the key, and log them with the URL
            raise TeacherError(f"base_url {shown_url(self.base_url)!r} carries credentials (user:password@): give the key "
                               f"in ${TEACHER_API_KEY_ENV} (or --api-key) and the URL without them")
        if parsed.scheme.lower() not in ("http", "https"):
            raise TeacherError(f"base_url must be http:// or https://, got {shown_url(self.base_url)!r}")
        if any(host == h or host.endswith("." + h) for h in REFUSED_HOSTS) or is_jev_model(self.model) or is_jev_model(self.name):
            raise TeacherError("distilling from Jev is not permitted (TypeSafe's customer terms); use another teacher model")
        if not re.fullmatch(r"[\w.\-]+", self.name):
            raise TeacherError(f"teacher name must be letters, digits, '.', '_' or '-', got {self.name!r}")
        if not isinstance(self.api_key, str) or not self.api_key or not self.api_key.isascii() or not self.api_key.isprintable() \
                or any(c.isspace() for c in self.api_key):
            raise TeacherError("the teacher API key must be non-empty printable ASCII without spaces")  # (the key is not shown)
        if self.max_questions < 1 or self.retries < 0 or self.backoff < 0 or not self.timeout > 0 or self.max_failed_requests < 1:
            raise TeacherError("max_questions >= 1, retries >= 0, backoff >= 0, timeout > 0 and max_failed_requests >= 1 are required")


@dataclass(frozen=True)
class TeacherReport:
    requested: int  # input examples
    skipped: int  # already recorded before this run
    written: int
    failed: int  # examples whose request the server refused
    requests: int
    seconds: float
    invalid: int = 0  # answers refused as targets (NaN, out of range, not a distribution): not recorded


def teacher_id(name: str, example_id: str) -> str:
    return f"teacher:{name}:{example_id}"


def shown_url(url: str) -> str:
    """`url` without credentials (`http://user:secret@host` -> `http://***@host`), for messages."""
    return re.sub(r"(?<=//)[^/@]*@", "***@", url)


_RECORD_START = b'{"id":"teacher:'  # how every line `distill` appends begins (`DecisionExample.to_json`, id first)


def recorded(path: str | Path) -> dict[str, DecisionExample]:
    """The records of a teacher file by id (empty when there is none); an id recorded twice is an error, and so
    is a file that is not one `distill` wrote (`TeacherError`): a record of another source, or a last line cut
    short that is not the start of a teacher record. Appending to such a file would mix teacher answers into
    it, and would cut its last line, taken for an interrupted append."""
    path = Path(path)
    out: dict[str, DecisionExample] = {}
    try:
        for record in read_jsonl(path) if path.exists() else ():
            if not record.source.startswith("teacher:"):
                raise TeacherError(f"{path} is not a teacher records file: {record.id} has source {record.source!r}; "
                                   "give --out a file of its own (a new one, or one an earlier run wrote)")
            if record.id in out:
                raise TeacherError(f"{path} records {record.id} twice (two runs appended to it at once?): "
                                   "keep one record per id before resuming")
            out[record.id] = record
        _check_tail(path)
    except (OSError, UnicodeDecodeError, DataError) as error:
        if isinstance(error, TeacherError):
            raise
        raise TeacherError(f"cannot read teacher records {path}: {error}") from error
    return out


def _check_tail(path: Path) -> None:
    """A last line without its newline must be the beginning of a teacher record (an interrupted append)."""
    if not path.exists():
        return
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return
    tail = data[data.rfind(b"\n") + 1:]
    head = re.sub(rb"\s+", b"", tail[:64])  # `{"id": "teacher:...` as another JSON writer spaces it, too
    if head and not (head.startswith(_RECORD_START) or _RECORD_START.startswith(head)):
        raise TeacherError(f"{path} is not a teacher records file: its last line ({tail[:40]!r}...) is not a record "
                           "or the start of one; give --out a file of its own (a new one, or one an earlier run wrote)")


def recorded_ids(path: str | Path) -> set[str]:
    return set(recorded(path))


def make_client(config: TeacherConfig, *, transport: Any = None) -> Any:
    """An official SDK client for the teacher (a custom httpx2 transport in tests), over an httpx2 client that
    follows no redirect (the key would go with it), and that stops reading a body over `MAX_BODY_BYTES` or one
    still arriving `timeout` seconds after its headers (a server streaming without end never times out otherwise)."""
    from typesafe_sdk import RetryPolicy, TypeSafeClient

    http = capped_client()(timeout=config.timeout, transport=transport, follow_redirects=False, max_body=MAX_BODY_BYTES,
                            body_seconds=config.timeout)
    return TypeSafeClient(
        api_key=config.api_key, base_url=config.base_url, model=config.model or DEFAULT_MODEL, http_client=http,
        timeout=config.timeout, retry=RetryPolicy(max_retries=2, backoff_initial=min(config.backoff, 0.5), backoff_max=5.0),
        compression=None if config.compression else False,
    )


def distill(
    examples: Iterable[DecisionExample],
    out: str | Path,
    config: TeacherConfig,
    *,
    client: Any = None,
    transport: Any = None,
    progress: bool = True,
    sleep: Callable[[float], None] = time.sleep,
) -> TeacherReport:
    """Ask the teacher about every example not yet recorded in `out`; append its answers there."""
    try:
        with exclusive(out, wait=False):  # two runs on one file would ask and record the same examples twice
            return _distill(examples, out, config, client=client, transport=transport, progress=progress, sleep=sleep)
    except BusyError as busy:
        raise TeacherError(f"cannot write teacher records to {out}: {busy}") from busy


def _distill(examples: Iterable[DecisionExample], out: str | Path, config: TeacherConfig, *, client: Any, transport: Any,
             progress: bool, sleep: Callable[[float], None]) -> TeacherReport:
    start = time.perf_counter()
    items = [e for e in examples if not e.source.startswith("teacher:")]
    seen: set[str] = set()
    for e in items:
        if e.id in seen:  # two inputs, one record id: one answer would be lost, or recorded twice
            raise TeacherError(f"input example id {e.id} appears twice")
        seen.add(e.id)
    problem = unwritable(Path(out), directory=False)
    if problem:  # found at the first append, the answers of that request would be lost
        raise TeacherError(f"cannot write teacher records to {out}: {problem}")
    done = recorded(out)
    model = _recorded_model(done, config.name, out)
    todo = []
    for e in items:
        record = done.get(teacher_id(config.name, e.id))
        if record is None:
            todo.append(e)
        elif canonical(record.state) != canonical(e.state) or canonical(record.question) != canonical(e.question) \
                or (record.group, record.split) != (e.group, e.split):  # a record keeps its input's group: where it trains
            raise TeacherError(f"{out} holds {record.id} for another state or question (or group or split) than its input "
                               "now (the data were rebuilt?): write these answers to a new --out")
    groups = group_examples(todo, max_questions=config.max_questions)
    own_client = client is None
    client = client or make_client(config, transport=transport)
    written = failed = invalid = requests = in_a_row = 0
    try:
        from tqdm import tqdm

        for group in tqdm(groups, desc=f"teacher {config.name}", unit="req", disable=not progress):
            response = _request(client, group, config, sleep)
            requests += 1
            records: list[DecisionExample] = []
            if response is None:
                failed += len(group.examples)
            else:
                model = _check_model(response.model, model, config.name, out)
                records, bad = _records(group, response, config)
                invalid += bad
                written += write_jsonl(out, records, append=True) if records else 0
            in_a_row = 0 if records else in_a_row + 1
            if in_a_row >= config.max_failed_requests and requests < len(groups):  # (the last request ends the run anyway)
                raise TeacherError(f"teacher {config.name} gave nothing to record for {in_a_row} requests in a row "
                                   f"({failed} examples refused, {invalid} answers invalid so far; see the warnings)")
    finally:
        if own_client:
            client.close()
    return TeacherReport(requested=len(items), skipped=len(items) - len(todo), written=written, failed=failed,
                         requests=requests, seconds=time.perf_counter() - start, invalid=invalid)


def _recorded_model(done: Mapping[str, DecisionExample], name: str, out: str | Path) -> str | None:
    prefix = teacher_id(name, "")
    models = {r.notes[len(_MODEL_NOTE):] for r in done.values() if r.id.startswith(prefix) and r.notes.startswith(_MODEL_NOTE)}
    if len(models) > 1:
        raise TeacherError(f"{out} mixes answers of models {sorted(models)} under teacher {name}: keep one model per name")
    return next(iter(models), None)


def _check_model(answered: str, expected: str | None, name: str, out: str | Path) -> str:
    if is_jev_model(answered):
        raise TeacherError(f"the teacher answered as {answered!r}: Jev outputs must never be recorded")
    if expected is not None and answered != expected:
        raise TeacherError(f"teacher {name} in {out} is model {expected!r}, but the server now answers as {answered!r}: "
                           "give this model another --name (or --out), so that one source never mixes two models")
    return answered


def _request(client: Any, group: DecisionGroup, config: TeacherConfig, sleep: Callable[[float], None]) -> Any:
    """The server's response, or None when it refused the request; TeacherError when it keeps failing."""
    from typesafe_sdk import (
        TypeSafeAPIConnectionError,
        TypeSafeAPIError,
        TypeSafeAPIResponseValidationError,
        TypeSafeAPITimeoutError,
        TypeSafeInternalServerError,
        TypeSafeRateLimitError,
    )

    questions = {f"q{i}": e.question for i, e in enumerate(group.examples)}
    where = f"teacher {config.name} at {shown_url(config.base_url)}, asked about {_ids(group)},"
    delay = config.backoff
    for attempt in range(config.retries + 1):
        try:
            return client.system_one(group.state, questions, model=config.model or DEFAULT_MODEL, response_model=wire_response())
        except BodyTooLarge as error:
            raise TeacherError(f"{where} answered with {error}: not a System One response") from error
        except TypeSafeAPIResponseValidationError as error:  # (an API error of status 200: caught before the refusals)
            failure = error
            message = f"{where} answered with a body that is not a System One response: {_said(error, config)}"
        except (TypeSafeAPIConnectionError, TypeSafeRateLimitError, TypeSafeInternalServerError) as error:
            failure = error
            message = f"{where} kept failing: {_said(error, config)}"
            if isinstance(error, TypeSafeAPITimeoutError):
                message += f" (a slow teacher: raise --timeout from {config.timeout:g}s, or lower --max-questions)"
            elif isinstance(error, TypeSafeAPIConnectionError):
                message += " (is the server running, and is --base-url right?)"
        except TypeSafeAPIError as error:
            if 300 <= error.status < 400:  # not followed: the request, and its key, would go to wherever it points
                location = shown_url(error.headers.get("location", "?"))[:200]
                raise TeacherError(f"{where} redirected the request ({error.status}) to {location}: redirects are not "
                                   "followed; give --base-url the teacher's own address") from error
            if error.status in FATAL_STATUSES:
                raise TeacherError(f"{where} refused the request with {error.status}: {_said(error, config)} (check the API "
                                   "key, --base-url and --model; every request would fail alike)") from error
            if error.status != 408:
                log.warning("teacher refused the request about %s: %s", _ids(group), _said(error, config))
                return None
            failure, message = error, f"{where} kept timing out: {_said(error, config)}"
        if attempt == config.retries:
            raise TeacherError(message) from failure
        after = retry_after(failure.headers) if isinstance(failure, TypeSafeAPIError) else None  # a 503's too, not just a 429's
        wait = min(MAX_WAIT, max(delay, after or 0.0))
        log.warning("teacher request failed (%s); retrying in %.1fs", _said(failure, config), wait)
        sleep(wait)
        delay = min(MAX_WAIT, delay * 2)
    raise AssertionError("unreachable")  # the loop returns or raises


def _said(error: BaseException, config: TeacherConfig) -> str:
    """What an error of the server says, on one line, cut, and without the API key (a server may echo it)."""
    text = " ".join(str(error).split())
    if config.api_key != "local":
        text = text.replace(config.api_key, "***")
    return text if len(text) <= 300 else text[:300] + "..."


def _ids(group: DecisionGroup) -> str:
    first = group.examples[0].id
    return first if len(group.examples) == 1 else f"{first} and {len(group.examples) - 1} more"


def _records(group: DecisionGroup, response: Any, config: TeacherConfig) -> tuple[list[DecisionExample], int]:
    """(the records of one response, how many answers were refused as targets)."""
    keys = [f"q{i}" for i in range(len(group.examples))]
    unanswered = [example.id for key, example in zip(keys, group.examples) if key not in response.answers]
    if unanswered:
        raise TeacherError(f"teacher {config.name} gave no answer for {len(unanswered)} of {len(keys)} questions of a request "
                           f"(for {unanswered[0]}{' and more' if len(unanswered) > 1 else ''}): a server that does not speak the "
                           "protocol; nothing of this request was recorded")
    records, invalid = [], 0
    for key, example in zip(keys, group.examples):
        try:
            target = answer_target(example.question, response.answers[key])
        except TeacherAnswerError as error:
            log.warning("teacher answer for %s skipped: %s", example.id, _said(error, config))
            invalid += 1
            continue
        except TeacherError as error:
            raise TeacherError(f"teacher {config.name}'s answer for {example.id} does not fit its question: "
                               f"{_said(error, config)} (a server that does not speak the protocol; nothing of this "
                               "request was recorded)") from error
        records.append(
            DecisionExample(
                id=teacher_id(config.name, example.id), family=example.family, question_name=example.question_name,
                state=example.state, question=example.question, target=target, source=f"teacher:{config.name}",
                group=example.group, split=example.split, weight=example.weight, notes=f"{_MODEL_NOTE}{response.model}",
            )
        )
    return records, invalid
