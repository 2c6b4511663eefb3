"""Decision examples -> packed training requests -> step batches, with the inference template and packing.

    requests, report = prepare_requests(examples, tokenizer)      # one request per shared state
    sampler = BalancedSampler(requests, tokens_per_step=6000, seed=0)
    step = collate([requests[i] for i in sampler.indices(t)])     # micro-batches + label tensors

Examples that share a state form one request (`data.schema.group_examples`), rendered and tokenized by
`controller.template` and packed by `controller.packing.make_batches`, exactly as the local backend does,
so one forward pass carries every label of the state. The sampler is family-balanced (family mass
proportional to count^power) and stateless: the requests of step t depend only on (seed, t), which makes
a resumed run draw the same batches as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from controller.backend import BackendRequest
from controller.errors import InvalidRequestError
from controller.families import calibration_key
from controller.packing import Encoding, PackedBatch, make_batches
from controller.questions import ChoiceQuestion, NoulQuestion, Question, normalize_questions
from controller.template import TemplateTokenizer, TokenizedRequest, tokenize_request
from data.schema import DecisionExample, group_examples

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Label:
    """The target of one question of a request: (p,) for a Noul, one probability per option otherwise."""

    kind: str
    target: tuple[float, ...]
    weight: float
    family: str
    question_name: str
    example_id: str
    variant: str = ""  # "" as in the data; "noul_as_choice" for the augmentation
    options: tuple[str, ...] = ()  # Choice option names in request order (base rates, robustness)
    catalogue: str | None = None  # its calibration key, `controller.families.calibration_key`: `family.question`, or the state's family


@dataclass(frozen=True)
class LabeledRequest:
    """One state with its questions (tokenized) and their labels, aligned."""

    tokenized: TokenizedRequest
    labels: tuple[Label, ...]
    family: str  # the most common family of its labels (the sampling unit)
    split: str
    group: str
    list_key: str = ""  # requests of one ranking list (a relevance query's candidates) share it; "" for none

    @property
    def tokens(self) -> int:
        return self.tokenized.packed_tokens


@dataclass(frozen=True)
class PrepareReport:
    requests: int
    labels: int
    skipped_too_long: int
    augmented: int
    families: dict[str, int] = field(default_factory=dict)  # requests per family


def label_of(example: DecisionExample, question: Question) -> tuple[float, ...]:
    """The example's target in the option order of `question` (as rendered)."""
    target = example.target
    if isinstance(question, NoulQuestion):
        return (float(target),)  # type: ignore[arg-type]
    if isinstance(question, ChoiceQuestion):
        return tuple(float(target[name]) for name in question.labels)  # type: ignore[index]
    return tuple(float(v) for v in target)  # type: ignore[union-attr]


def noul_as_choice(question: NoulQuestion, p: float, yes_first: bool) -> tuple[ChoiceQuestion, tuple[float, ...]]:
    """The equivalent 2-option Choice of a Noul: options `yes` / `no` described by its criteria."""
    yes, no = ("yes", question.true), ("no", question.false)
    options = (yes, no) if yes_first else (no, yes)
    target = (p, 1.0 - p) if yes_first else (1.0 - p, p)
    return ChoiceQuestion(question.instructions, options), target


def _unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from `parts` (independent of process and hash seed)."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


# The one question trained as a ranking list too (`FitConfig.listwise_weight`): the read path ranks a query's
# candidates by it, so what matters is its order within a query as much as its calibration.
LISTWISE_QUESTION = ("relevance", "relevant")


def list_key_of(family: str, group: str, state: Mapping[str, object]) -> str:
    """The ranking list a request belongs to: its conversation (or generator group) and query, for the
    listwise family; "" otherwise."""
    return f"{group}\x1f{state['query']}" if family == LISTWISE_QUESTION[0] and isinstance(state.get("query"), str) else ""


def prepare_requests(
    examples: Sequence[DecisionExample],
    tokenizer: TemplateTokenizer,
    *,
    max_questions: int = 8,
    noul_as_choice_rate: float = 0.0,
    seed: int = 0,
) -> tuple[list[LabeledRequest], PrepareReport]:
    """Group by state, render and tokenize; requests over the template's limits are skipped and counted."""
    if not 0.0 <= noul_as_choice_rate <= 1.0:
        raise ValueError(f"noul_as_choice_rate must lie in [0, 1], got {noul_as_choice_rate}")
    out: list[LabeledRequest] = []
    skipped = augmented = 0
    for group in group_examples(examples, max_questions=max_questions):
        try:
            questions = list(normalize_questions(group.questions).values())
        except InvalidRequestError as error:
            raise ValueError(f"group {group.group}: a question the controller refuses: {error}") from error
        labels = []
        for i, (example, question) in enumerate(zip(group.examples, questions)):
            target, variant = label_of(example, question), ""
            if isinstance(question, NoulQuestion) and noul_as_choice_rate and _unit(seed, example.id, "as-choice") < noul_as_choice_rate:
                question, target = noul_as_choice(question, target[0], _unit(seed, example.id, "order") < 0.5)
                questions[i], variant = question, "noul_as_choice"
                augmented += 1
            names = question.labels if isinstance(question, ChoiceQuestion) else ()
            labels.append(Label(question.kind, target, example.weight, example.family, example.question_name, example.id, variant, names,
                                calibration_key(question, group.state)))
        try:
            tokenized = tokenize_request(BackendRequest(group.state, tuple(questions)), tokenizer)
        except InvalidRequestError:  # InputTooLongError: the template never truncates
            skipped += 1
            continue
        family = Counter(e.family for e in group.examples).most_common(1)[0][0]
        out.append(LabeledRequest(tokenized, tuple(labels), family, group.split, group.group, list_key_of(family, group.group, group.state)))
    report = PrepareReport(len(out), sum(len(r.labels) for r in out), skipped, augmented, dict(Counter(r.family for r in out)))
    if skipped:
        log.warning("skipped %d requests over the template's token limits", skipped)
    return out, report


class BalancedSampler:
    """Family-balanced draws with replacement, about `tokens_per_step` packed tokens per step.

    A family's share of draws is proportional to boost[family] * (its request count)^power: power 1 keeps the
    natural mix, 0 gives every family the same share; `boost` (default 1 for every family) tilts it further.
    With `lists`, a drawn request that belongs to a ranking list (`LabeledRequest.list_key`) brings the rest of
    its list (up to `list_size` requests in all), so a listwise loss sees a query's candidates side by side.
    """

    def __init__(self, requests: Sequence[LabeledRequest], *, tokens_per_step: int = 6000, power: float = 0.5, seed: int = 0,
                 boost: Mapping[str, float] | None = None, lists: bool = False, list_size: int = 12) -> None:
        if not requests:
            raise ValueError("BalancedSampler needs at least one request")
        if not 0.0 <= power <= 1.0:
            raise ValueError(f"power must lie in [0, 1], got {power}")
        if tokens_per_step < 1:
            raise ValueError(f"tokens_per_step must be >= 1, got {tokens_per_step}")
        counts = Counter(r.family for r in requests)
        boost = dict(boost or {})
        unknown = sorted(set(boost) - set(counts))
        if unknown:
            raise ValueError(f"boost names families without requests: {', '.join(unknown)}")
        if any(not (isinstance(b, (int, float)) and b > 0) for b in boost.values()):
            raise ValueError(f"boost factors must be > 0, got {boost}")
        mass = {f: boost.get(f, 1.0) * n**power for f, n in counts.items()}
        total = sum(mass.values())
        p = np.array([mass[r.family] / total / counts[r.family] for r in requests], dtype=np.float64)
        self.probabilities = p / p.sum()
        self.family_share = {f: m / total for f, m in sorted(mass.items())}
        self.tokens = np.array([r.tokens for r in requests], dtype=np.int64)
        self.tokens_per_step = tokens_per_step
        self.seed = seed
        self.list_keys = [r.list_key if lists else "" for r in requests]
        self.lists: dict[str, list[int]] = {}
        for i, key in enumerate(self.list_keys):
            if key:
                self.lists.setdefault(key, []).append(i)
        self.list_size = list_size

    def indices(self, step: int) -> list[int]:
        """The requests of step `step` (a pure function of seed and step)."""
        rng = np.random.default_rng([self.seed, step])
        chosen: list[int] = []
        used = 0
        while used < self.tokens_per_step:
            for i in rng.choice(len(self.probabilities), size=8, p=self.probabilities):
                group = self._list_of(int(i), rng)
                chosen.extend(group)
                used += int(self.tokens[group].sum())
                if used >= self.tokens_per_step:
                    break
        return chosen

    def _list_of(self, i: int, rng: np.random.Generator) -> list[int]:
        """`[i]`, or with lists on, i and up to `list_size - 1` others of its ranking list."""
        key = self.list_keys[i]
        if not key:
            return [i]
        others = [j for j in self.lists[key] if j != i]
        if len(others) > self.list_size - 1:
            others = sorted(int(j) for j in rng.choice(others, size=self.list_size - 1, replace=False))
        return [i, *others]


def cap_states(examples: Sequence[DecisionExample], per_group: int, *, seed: int = 0, by_source: bool = True) -> list[DecisionExample]:
    """Every example of at most `per_group` states per family (per source and family with `by_source`),
    drawn with a fixed seed: bounded, family-balanced evaluation sets. `per_group <= 0` keeps everything."""
    if per_group <= 0:
        return list(examples)
    states: dict[tuple[str, str], dict[str, list[DecisionExample]]] = {}
    for e in examples:
        source = e.group.split(":")[0] if by_source else ""
        states.setdefault((source, e.family), {}).setdefault(e.state_key, []).append(e)
    rng = np.random.default_rng(seed)
    out: list[DecisionExample] = []
    for key in sorted(states):
        keys = sorted(states[key])
        chosen = sorted(rng.permutation(len(keys))[:per_group])
        for i in chosen:
            out.extend(states[key][keys[i]])
    return out


@dataclass(frozen=True)
class StepBatch:
    """The micro-batches of one step and where each label's logits sit in their flattened output."""

    batches: list[PackedBatch]
    noul: tuple[np.ndarray, np.ndarray, np.ndarray]  # index (N,), target (N,), weight (N,)
    noul_list: np.ndarray  # (N,) the ranking list of each Noul label within the step (LISTWISE_QUESTION), -1 for none
    choice: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # index (N, K), mask, target, weight
    score: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    tokens: int  # real (unpadded) tokens
    labels: int


def _padded(rows: list[tuple[list[int], tuple[float, ...], float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    width = max((len(ix) for ix, _, _ in rows), default=1)
    index = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=bool)
    target = np.zeros((len(rows), width), dtype=np.float32)
    weight = np.zeros(len(rows), dtype=np.float32)
    for i, (ix, t, w) in enumerate(rows):
        index[i, : len(ix)], mask[i, : len(ix)], target[i, : len(ix)], weight[i] = ix, True, t, w
    return index, mask, target, weight


def collate(
    requests: Sequence[LabeledRequest],
    *,
    encodings: Sequence[Encoding] | None = None,
    max_batch_tokens: int = 8192,
) -> StepBatch:
    """Micro-batches (packed by default; `encodings[i]` may make request i an N-pair one) + label indices."""
    encodings = list(encodings) if encodings is not None else ["packed"] * len(requests)
    batches: list[PackedBatch] = []
    noul: list[tuple[int, float, float]] = []
    noul_list: list[int] = []
    list_ids: dict[str, int] = {}
    multi: dict[str, list[tuple[list[int], tuple[float, ...], float]]] = {"choice": [], "score": []}
    offset = 0
    tokens = 0
    for encoding in ("packed", "npair"):
        chosen = [r for r, e in zip(requests, encodings) if e == encoding]
        if not chosen:
            continue
        part, readout = make_batches([r.tokenized for r in chosen], encoding=encoding, max_batch_tokens=max_batch_tokens)
        starts = []
        for batch in part:
            starts.append(offset)
            offset += int(batch.marker_positions.size)  # logits (B, M) flatten row-major
            tokens += int((batch.question_ids >= 0).sum())
        flat = [[[starts[b] + row * part[b].marker_positions.shape[1] + m for b, row, m in q] for q in req] for req in readout.index]
        for request, slots in zip(chosen, flat):
            for label, ix in zip(request.labels, slots):
                if label.kind == "noul":
                    noul.append((ix[0], label.target[0], label.weight))
                    listed = request.list_key and (label.family, label.question_name) == LISTWISE_QUESTION
                    noul_list.append(list_ids.setdefault(request.list_key, len(list_ids)) if listed else -1)
                else:
                    multi[label.kind].append((ix, label.target, label.weight))
        batches.extend(part)
    noul_arrays = (
        np.array([n[0] for n in noul], dtype=np.int64),
        np.array([n[1] for n in noul], dtype=np.float32),
        np.array([n[2] for n in noul], dtype=np.float32),
    )
    count = len(noul) + len(multi["choice"]) + len(multi["score"])
    return StepBatch(batches, noul_arrays, np.array(noul_list, dtype=np.int64), _padded(multi["choice"]), _padded(multi["score"]), tokens, count)


def label_tensors(step: StepBatch) -> object:
    """`training.losses.LabelTensors` of a step (torch imported here, not at module import)."""
    import torch

    from training.losses import LabelTensors

    t = torch.from_numpy
    return LabelTensors(
        t(step.noul[0]), t(step.noul[1]), t(step.noul[2]),
        t(step.choice[0]), t(step.choice[1]), t(step.choice[2]), t(step.choice[3]),
        t(step.score[0]), t(step.score[1]), t(step.score[2]), t(step.score[3]),
        t(step.noul_list),
    )
