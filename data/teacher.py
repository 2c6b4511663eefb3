"""Teacher labels: soft answers from any server that speaks the System One wire protocol.

For a set of decision examples (their states and questions; their targets are ignored), ask a teacher
model, for example a larger open model served locally behind the protocol, and record its probabilities
as new examples with `source="teacher:<name>"`, the same group and split as their input, and the id
`teacher:<name>:<input id>`. Questions that share a state go in one request (`max_questions` at most).

Resumable: records are appended to one JSONL file after every request, ids already in the file are
skipped, and a torn last line from an interrupted run is ignored. The SDK retries 408/429/5xx itself; on
top of that, connection failures, rate limits and server errors get `retries` more attempts with
exponential backoff before `TeacherError` stops the run (what was recorded stays). A request the server
refuses (4xx) is logged and counted as failed; the run goes on. A response that leaves a question unanswered
or answers it with another kind stops the run with `TeacherError` (a teacher that does not speak the protocol).

TypeSafe's customer terms forbid distilling from Jev's outputs: `TeacherConfig` refuses TypeSafe's hosts
and the Jev model aliases, and a response naming a `jev-` model stops the run. Never record Jev outputs.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from data.paths import unwritable
from data.schema import DataError, DecisionExample, DecisionGroup, Target, group_examples, read_jsonl, write_jsonl

log = logging.getLogger(__name__)

REFUSED_HOSTS = ("typesafe.ai",)
_JEV_MODEL = re.compile(r"^jev(?:[-_ ]|$)", re.IGNORECASE)  # jev-latest, jev-preview, jev-2.1 (not jevmem-*)


class TeacherError(DataError):
    """The teacher cannot be used: refused configuration, or a server that keeps failing."""


def is_jev_model(name: str | None) -> bool:
    return bool(name) and bool(_JEV_MODEL.match(str(name)))


@dataclass(frozen=True)
class TeacherConfig:
    base_url: str  # the teacher server (required: there is no default host)
    name: str  # recorded as source "teacher:<name>"
    api_key: str = "local"
    model: str | None = None  # model requested from the server (server default when None)
    max_questions: int = 32  # questions per request
    retries: int = 4  # extra attempts after the SDK's own retries
    backoff: float = 1.0  # seconds before the first extra attempt, doubled each time
    timeout: float = 30.0
    compression: bool = True  # zstd request bodies when the SDK has zstd

    def __post_init__(self) -> None:
        try:
            parsed = urlparse(self.base_url)
            host, _ = (parsed.hostname or "").lower(), parsed.port  # .port raises on a port out of range
        except ValueError as error:
            raise TeacherError(f"base_url {self.base_url!r} is not a URL: {error}") from error
        if not host:
            raise TeacherError(f"base_url needs a host, got {self.base_url!r}")
        if any(host == h or host.endswith("." + h) for h in REFUSED_HOSTS) or is_jev_model(self.model) or is_jev_model(self.name):
            raise TeacherError("distilling from Jev is not permitted (TypeSafe's customer terms); use another teacher model")
        if not re.fullmatch(r"[\w.\-]+", self.name):
            raise TeacherError(f"teacher name must be letters, digits, '.', '_' or '-', got {self.name!r}")
        if self.max_questions < 1 or self.retries < 0 or self.backoff < 0 or self.timeout <= 0:
            raise TeacherError("max_questions >= 1, retries >= 0, backoff >= 0 and timeout > 0 are required")


@dataclass(frozen=True)
class TeacherReport:
    requested: int  # input examples
    skipped: int  # already recorded before this run
    written: int
    failed: int  # examples whose request the server refused
    requests: int
    seconds: float


def teacher_id(name: str, example_id: str) -> str:
    return f"teacher:{name}:{example_id}"


def recorded_ids(path: str | Path) -> set[str]:
    path = Path(path)
    try:
        return {e.id for e in read_jsonl(path)} if path.exists() else set()
    except (OSError, UnicodeDecodeError) as error:
        raise TeacherError(f"cannot read teacher records {path}: {error}") from error


def make_client(config: TeacherConfig, *, transport: Any = None) -> Any:
    """An official SDK client for the teacher (a custom httpx2 transport in tests)."""
    from typesafe_sdk import RetryPolicy, TypeSafeClient

    return TypeSafeClient(
        api_key=config.api_key, base_url=config.base_url, model=config.model, transport=transport,
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
    start = time.perf_counter()
    items = [e for e in examples if not e.source.startswith("teacher:")]
    problem = unwritable(Path(out), directory=False)
    if problem:  # found at the first append, the answers of that request would be lost
        raise TeacherError(f"cannot write teacher records to {out}: {problem}")
    done = recorded_ids(out)
    todo = [e for e in items if teacher_id(config.name, e.id) not in done]
    groups = group_examples(todo, max_questions=config.max_questions)
    own_client = client is None
    client = client or make_client(config, transport=transport)
    written = failed = requests = 0
    try:
        from tqdm import tqdm

        for group in tqdm(groups, desc=f"teacher {config.name}", unit="req", disable=not progress):
            records = _ask(client, group, config, sleep)
            requests += 1
            if records is None:
                failed += len(group.examples)
                continue
            written += write_jsonl(out, records, append=True)
    finally:
        if own_client:
            client.close()
    return TeacherReport(len(items), len(items) - len(todo), written, failed, requests, time.perf_counter() - start)


def _ask(client: Any, group: DecisionGroup, config: TeacherConfig, sleep: Callable[[float], None]) -> list[DecisionExample] | None:
    from typesafe_sdk import (
        TypeSafeAPIConnectionError,
        TypeSafeAPIError,
        TypeSafeInternalServerError,
        TypeSafeRateLimitError,
    )

    questions = {f"q{i}": e.question for i, e in enumerate(group.examples)}
    delay = config.backoff
    for attempt in range(config.retries + 1):
        try:
            response = client.system_one(group.state, questions, model=config.model)
            break
        except (TypeSafeAPIConnectionError, TypeSafeRateLimitError, TypeSafeInternalServerError) as error:
            if attempt == config.retries:
                raise TeacherError(f"teacher {config.name} at {config.base_url} kept failing: {error}") from error
            log.warning("teacher request failed (%s); retrying in %.1fs", error, delay)
            sleep(delay)
            delay *= 2
        except TypeSafeAPIError as error:
            log.warning("teacher refused a request of %d questions: %s", len(questions), error)
            return None
    if is_jev_model(response.model):
        raise TeacherError(f"the teacher answered as {response.model!r}: Jev outputs must never be recorded")
    unanswered = [key for key in questions if key not in response.answers]
    if unanswered:
        raise TeacherError(f"teacher {config.name} gave no answer for {len(unanswered)} of {len(questions)} questions of a request")
    records = []
    for key, example in zip(questions, group.examples):
        target = answer_target(example.question, response.answers[key])
        records.append(
            DecisionExample(
                id=teacher_id(config.name, example.id), family=example.family, question_name=example.question_name,
                state=example.state, question=example.question, target=target, source=f"teacher:{config.name}",
                group=example.group, split=example.split, weight=example.weight, notes=f"model={response.model}",
            )
        )
    return records


def answer_target(question: Mapping[str, Any], answer: Any) -> Target:
    """A wire answer as a schema target: Noul p; Choice {option: p} in question order; Score [p_i]."""
    kind = question["type"]
    if getattr(answer, "type", None) != kind:
        raise TeacherError(f"teacher answered a {kind} question with a {getattr(answer, 'type', None)!r} answer")
    if kind == "noul":
        return min(1.0, max(0.0, float(answer.noul)))
    if kind == "choice":
        options = list(question["criteria"])
        probs = dict(answer.probabilities)
        if set(probs) != set(options):
            raise TeacherError(f"teacher probabilities {sorted(probs)} do not match the options {sorted(options)}")
        return _normalised({o: probs[o] for o in options})  # type: ignore[return-value]
    levels = len(question["criteria"])
    probs = {int(k): v for k, v in answer.probabilities.items()}
    if set(probs) != set(range(levels)):
        raise TeacherError(f"teacher probabilities cover levels {sorted(probs)}, expected 0..{levels - 1}")
    return list(_normalised({str(i): probs[i] for i in range(levels)}).values())


def _normalised(probs: dict[str, float]) -> dict[str, float]:
    clipped = {k: max(0.0, float(v)) for k, v in probs.items()}
    total = sum(clipped.values())
    if total <= 0:
        raise TeacherError("teacher probabilities sum to zero")
    return {k: v / total for k, v in clipped.items()}
