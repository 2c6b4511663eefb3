"""A teacher's wire answers as decision-data targets, checked one answer at a time.

The server's body is read leniently (`wire_response`): only `model` and an `answers` object are required, so
one answer with a bad number (NaN, a string, null) is refused on its own, where the SDK's strict response
types would refuse the whole body and, retried alike, stop the run with every good answer of it. Each answer
is then checked against the question it answers (`answer_target`):

    TeacherError          the answer does not fit its question: another kind, probabilities over other
                          options or levels (a server that does not speak the protocol: the run stops)
    TeacherAnswerError    its numbers cannot be a target: not a number, NaN, outside [0, 1], a distribution
                          summing to 1 +/- more than `SUM_TOLERANCE`; a Choice `choice` that is not one of the
                          options or not their most likely; a Score `legend` that does not echo the levels
                          (its probabilities may be of another scale); an answer that is not an object
                          (the record is skipped and counted; the rest of the request is kept)

Answers may be raw JSON objects (the lenient body) or objects with attributes (the SDK's answer types).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from data.schema import DataError, Target, canonical

SUM_TOLERANCE = 0.02  # a distribution summing to 1 +/- this is renormalised; further off, the answer is refused
RANGE_TOLERANCE = 1e-6  # float rounding outside [0, 1] that is clipped rather than refused
_SHOWN = 8  # option names shown in a message (a server may send thousands)


class TeacherError(DataError):
    """The teacher cannot be used: refused configuration, or a server that keeps failing."""


class TeacherAnswerError(TeacherError):
    """One answer whose numbers cannot be a training target; its record is skipped and counted."""


@lru_cache(maxsize=1)
def wire_response() -> type:
    """The pydantic model a teacher's body is read with (`system_one(..., response_model=...)`)."""
    from pydantic import BaseModel, ConfigDict

    class TeacherResponse(BaseModel):
        model_config = ConfigDict(extra="ignore", frozen=True)

        model: str
        answers: dict[str, Any]  # checked per answer by `answer_target`

    return TeacherResponse


def answer_target(question: Mapping[str, Any], answer: Any) -> Target:
    """A wire answer as a schema target: Noul p; Choice {option: p} in question order; Score [p_i]."""
    if not isinstance(answer, Mapping) and not hasattr(answer, "type"):
        raise TeacherAnswerError(f"teacher answer is not an answer object: {_short(answer)}")
    kind = question["type"]
    if _get(answer, "type") != kind:
        raise TeacherError(f"teacher answered a {kind} question with a {_short(_get(answer, 'type'))} answer")
    if kind == "noul":
        return _probability(_get(answer, "noul"))
    probs = _get(answer, "probabilities")
    if not isinstance(probs, Mapping):
        raise TeacherAnswerError(f"teacher probabilities are not an object: {_short(probs)}")
    if kind == "choice":
        options = list(question["criteria"])
        if set(probs) != set(options):
            raise TeacherError(f"teacher probabilities over {_names(probs)} do not match the options {_names(options)}")
        target = _distribution({o: probs[o] for o in options})
        chosen = _get(answer, "choice")
        if chosen is not None and (not isinstance(chosen, str) or chosen not in target):
            raise TeacherAnswerError(f"teacher chose {_short(chosen)}, which is not one of the options {_names(options)}")
        if chosen is not None and target[chosen] < max(target.values()) - RANGE_TOLERANCE:
            raise TeacherAnswerError(f"teacher chose {chosen!r} (p={target[chosen]:.4f}) over a more likely option: "
                                     "its choice and probabilities disagree")
        return target  # type: ignore[return-value]
    levels = [str(i) for i in range(len(question["criteria"]))]
    by_level = {str(k): v for k, v in probs.items()}  # "0".. on the wire, 0.. in the SDK's answer type
    if len(by_level) != len(probs) or set(by_level) != set(levels):
        raise TeacherError(f"teacher probabilities cover levels {_names(probs)}, expected 0..{len(levels) - 1}")
    legend = _get(answer, "legend")
    if legend is not None:
        try:
            shown = {str(k): canonical(v) for k, v in legend.items()} if isinstance(legend, Mapping) else None
        except (TypeError, ValueError):  # NaN in a description: not JSON the question could have had
            shown = None
        if shown != {level: canonical(text) for level, text in zip(levels, question["criteria"])}:
            raise TeacherAnswerError(f"teacher legend {_short(legend)} does not echo the question's levels "
                                     f"{_short(question['criteria'])}: its probabilities may be of another scale")
    return list(_distribution({level: by_level[level] for level in levels}).values())


def _get(answer: Any, name: str) -> Any:
    return answer.get(name) if isinstance(answer, Mapping) else getattr(answer, name, None)


def _probability(value: object) -> float:
    try:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer too large for a float (JSON allows any)
        number = math.nan
    if not math.isfinite(number) or not -RANGE_TOLERANCE <= number <= 1 + RANGE_TOLERANCE:
        raise TeacherAnswerError(f"teacher gave {_short(value)} as a probability")
    return min(1.0, max(0.0, number))


def _distribution(probs: Mapping[str, object]) -> dict[str, float]:
    """Probabilities that sum to 1 within SUM_TOLERANCE, renormalised to sum to 1 exactly."""
    checked = {k: _probability(v) for k, v in probs.items()}
    total = sum(checked.values())
    if abs(total - 1.0) > SUM_TOLERANCE:
        raise TeacherAnswerError(f"teacher probabilities sum to {total:.4f}, not 1: {_short(dict(probs))}")
    return {k: v / total for k, v in checked.items()}


def _names(keys: Any) -> str:
    names = sorted(str(k) for k in keys)
    return repr(names[:_SHOWN])[:-1] + (f", ... {len(names) - _SHOWN} more]" if len(names) > _SHOWN else "]")


def _short(value: object, limit: int = 120) -> str:
    """`repr(value)`, cut: server output is shown only as far as a message needs it."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
