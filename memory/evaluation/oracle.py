"""Relevance oracles: how far would a better relevance judge carry this engine on LoCoMo?

    gold = GoldRelevance.from_conversation(conv)
    judge = RelevanceOracle(controller, gold, auroc=0.85)    # auroc=None: the controller's own answers
    engine.controller = judge; engine.query(...); judge.measured_auroc()

An evaluation instrument, never an engine component: it reads the questions' gold evidence, which the engine
must not see. It wraps the engine's `Controller` and replaces one answer only, the `relevant` Noul of the
read path's relevance requests (`{"query", "memory"}` states); routing, bridge, stopping and every write-path
answer stay the controller's own.

The replacement is a judge of known quality whose errors are independent of retrieval: a score
s = z + d * gold with z ~ N(0, 1) drawn from a hash of (seed, query, memory), so the same pair always gets the
same answer, and d = sqrt(2) * Phi^-1(auroc), which makes the AUROC of s on any set of pairs `auroc` in
expectation. The answer is the calibrated probability of that score, sigmoid(d * s - d^2 / 2 + logit(prior)),
so an oracle is as well calibrated as a controller could be; auroc = 1 answers exactly 1 for gold, 0 otherwise.
Real errors are not independent of retrieval (a trained judge misses most on the hard negatives the retriever
also ranks high), so an oracle of the controller's measured AUROC is an optimistic reference for it.

Gold: a memory is gold for a query when its text is the text of a gold evidence turn of a question with that
text (texts the read path cut for length are matched by their kept prefix).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from controller.families import lookup, split_memory_text
from data.locomo import Conversation, Question
from memory.control import Answers, Controller, Usage
from memory.evaluation.metrics import auroc as _auroc

_TRUNCATED = " [truncated]"


def separation(auroc: float) -> float:
    """d such that N(d, 1) scores beat N(0, 1) scores with probability `auroc` (inf at 1)."""
    if not 0.5 <= auroc <= 1.0:
        raise ValueError(f"an oracle's AUROC must lie in [0.5, 1], got {auroc}")
    return math.inf if auroc == 1.0 else math.sqrt(2.0) * NormalDist().inv_cdf(auroc)


def _normal(*parts: object) -> float:
    """A standard normal draw determined by `parts` (Box-Muller on two hashed uniforms)."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=16).digest()
    u1 = (int.from_bytes(digest[:8], "little") + 1) / (2**64 + 1)
    u2 = int.from_bytes(digest[8:], "little") / 2**64
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def oracle_probability(gold: bool, auroc: float, *, prior: float, key: str) -> float:
    """The calibrated answer of an oracle of quality `auroc` for one pair (deterministic in `key`)."""
    if not 0.0 < prior < 1.0:
        raise ValueError(f"prior must lie in (0, 1), got {prior}")
    d = separation(auroc)
    if math.isinf(d):
        return 1.0 if gold else 0.0
    s = _normal(key) + (d if gold else 0.0)
    logit = d * s - d * d / 2.0 + math.log(prior / (1.0 - prior))
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, logit))))


@dataclass(frozen=True)
class GoldRelevance:
    """Which memory texts answer which query text, from a conversation's gold evidence."""

    by_query: Mapping[str, frozenset[str]]  # query text -> gold memory texts (as the engine stores them)

    @classmethod
    def from_conversation(cls, conversation: Conversation, questions: Iterable[Question] | None = None) -> GoldRelevance:
        text_of = {t.dia_id: t.memory_text() for t in conversation.turns}
        out: dict[str, set[str]] = {}
        for q in conversation.questions if questions is None else questions:
            out.setdefault(q.question, set()).update(text_of[d] for d in q.evidence if d in text_of)
        return cls({k: frozenset(v) for k, v in out.items()})

    def is_gold(self, query: str, memory: str) -> bool:
        """Whether `memory` (as a relevance state holds it: maybe dated, maybe cut) is a gold turn of `query`."""
        texts = self.by_query.get(query, frozenset())
        memory = split_memory_text(memory)[1]  # `EngineConfig.relevance_dated` states carry `[date] ` first
        if memory in texts:
            return True
        if memory.endswith(_TRUNCATED):
            head = memory[: -len(_TRUNCATED)]
            return any(t.startswith(head) for t in texts)
        return False


def _is_relevant_question(question: Any) -> bool:
    instructions = question.get("instructions") if isinstance(question, Mapping) else getattr(question, "instructions", None)
    return lookup(instructions) == ("relevance", "relevant")


Level = float | str | None  # None: the controller's own; float: an oracle's AUROC; "heuristic" / "mean": see parse_levels
JUDGES = ("heuristic", "mean")


@dataclass
class RelevanceOracle(Controller):
    """A `Controller` whose read-path `relevant` answers come from an oracle of AUROC `auroc`, or from `judge`
    (another controller) mixed with the wrapped controller's own as `mix * judge + (1 - mix) * own`; with
    neither, the answers stay the wrapped controller's. Every judged pair is recorded with its gold label, the
    wrapped controller's answer and the answer given, so a run can report the AUROC each achieved on it."""

    inner: Controller
    gold: GoldRelevance
    auroc: float | None = None
    prior: float = 0.1  # about the share of gold among a query's judged candidates on LoCoMo
    seed: int = 0
    judge: Controller | None = None
    mix: float = 1.0
    judged: dict[tuple[str, str], tuple[bool, float, float]] = field(default_factory=dict)  # (query, memory) -> (gold, own, given)

    def __post_init__(self) -> None:
        if self.auroc is not None:
            separation(self.auroc)  # validates
            if self.judge is not None:
                raise ValueError("a RelevanceOracle takes an AUROC or a judge, not both")
        if not 0.0 <= self.mix <= 1.0:
            raise ValueError(f"mix must lie in [0, 1], got {self.mix}")
        self.client = self.inner.client

    def usage(self) -> Usage:
        return self.inner.usage()

    def state_option(self, name: str, configured: bool | None) -> bool:
        return self.inner.state_option(name, configured)  # states rendered as for the wrapped controller

    def ask(self, state: Mapping[str, Any], questions: Mapping[str, Any]) -> Answers:
        return self.ask_batch([(state, questions)])[0]

    def ask_batch(self, requests: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> list[Answers]:
        answers = self.inner.ask_batch(requests) if len(requests) != 1 else [self.inner.ask(*requests[0])]
        keys = [self._relevant_keys(s, q) for s, q in requests]
        judged: list[float | None] = [None] * len(requests)
        if self.judge is not None:
            asked = [i for i, k in enumerate(keys) if k]
            replies = self.judge.ask_batch([(requests[i][0], {"r": requests[i][1][keys[i][0]]}) for i in asked])
            for i, reply in zip(asked, replies):
                judged[i] = float(reply["r"].noul)
        return [self._replace(s, k, a, j) if k else a for (s, _), k, a, j in zip(requests, keys, answers, judged)]

    @staticmethod
    def _relevant_keys(state: Mapping[str, Any], questions: Mapping[str, Any]) -> list[str]:
        if not {"query", "memory"} <= set(state) <= {"query", "memory", "previous"}:  # relevance states only
            return []
        return [k for k, q in questions.items() if _is_relevant_question(q)]

    def _replace(self, state: Mapping[str, Any], keys: Sequence[str], answers: Answers, judged: float | None) -> Answers:
        from typesafe_sdk import NoulAnswer

        query, memory = str(state["query"]), str(state["memory"])
        gold = self.gold.is_gold(query, memory)
        out = dict(answers)
        for key in keys:
            own = float(answers[key].noul)
            if self.auroc is not None:
                given = oracle_probability(gold, self.auroc, prior=self.prior, key=f"{self.seed}:{query}:{memory}")
            elif judged is not None:
                given = self.mix * judged + (1.0 - self.mix) * own
            else:
                given = own
            out[key] = NoulAnswer(type="noul", noul=given)
            self.judged[(query, memory)] = (gold, own, given)
        return out

    def measured_auroc(self, *, own: bool = False) -> float | None:
        """AUROC of the answers given (or, with `own`, of the wrapped controller's) on every pair judged so far."""
        if not self.judged:
            return None
        rows = list(self.judged.values())
        return _auroc([o if own else g for _, o, g in rows], [y for y, _, _ in rows])


def parse_levels(spec: str) -> list[Level]:
    """`"own,heuristic,mean,0.85,1"` -> [None, "heuristic", "mean", 0.85, 1.0]: `own` is the controller's own
    relevance, `heuristic` the weight-free heuristic controller's, `mean` the average of the two."""
    out: list[Level] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if part == "own":
            out.append(None)
            continue
        if part in JUDGES:
            out.append(part)
            continue
        try:
            value = float(part)
        except ValueError as error:
            raise ValueError(f"an oracle level is 'own', 'heuristic', 'mean' or an AUROC in [0.5, 1], got {part!r}") from error
        separation(value)
        out.append(value)
    if not out:
        raise ValueError("no oracle levels given")
    return out


def make_oracle(inner: Controller, gold: GoldRelevance, level: Level, *, seed: int = 0, judge: Controller | None = None) -> RelevanceOracle:
    """The wrapper for one level; `judge` is the controller `heuristic` and `mean` levels ask."""
    if isinstance(level, str):
        if judge is None:
            raise ValueError(f"level {level!r} needs a judge controller")
        return RelevanceOracle(inner, gold, seed=seed, judge=judge, mix=1.0 if level == "heuristic" else 0.5)
    return RelevanceOracle(inner, gold, level, seed=seed)


def level_name(level: Level) -> str:
    if level is None:
        return "own relevance"
    if isinstance(level, str):
        return "heuristic relevance" if level == "heuristic" else "mean of own and heuristic relevance"
    return f"oracle AUROC {level:.2f}"


__all__ = ["JUDGES", "GoldRelevance", "Level", "RelevanceOracle", "level_name", "make_oracle", "oracle_probability", "parse_levels", "separation"]
