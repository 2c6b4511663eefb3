"""Tokenized requests -> padded batches of packed (or N-pair) sequences, plus the readout map back.

A batch is plain numpy (no torch), shared by the torch model, the ONNX graph and training:

    input_ids       (B, L) int64   token ids, `[PAD]` after the end of a row
    token_type_ids  (B, L) int64   0 for the state prefix, 1 for branches
    position_ids    (B, L) int64   restart right after each branch's parent
    question_ids    (B, L) int64   0 state, k >= 1 the k-th question branch of the row (its options too), -1 pad
    option_ids      (B, L) int64   0 not an option, k >= 1 the k-th option branch of the row, -1 pad
    marker_positions(B, M) int64   where each readout token sits (0 for unused slots)
    marker_kinds    (B, M) int64   0 Noul, 1 Choice option, 2 Score level (0 for unused slots)

The attention rule is computed from the two id columns, inside the model (and inside the exported graph):
token i sees token j iff (q_j == 0 or q_j == q_i) and (o_j == 0 or o_j == o_i), i.e. j is in the state, in
i's own question, or in i's own option. An N-pair row has all ids 0 (full attention) and one marker at 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from controller.template import (
    DEFAULT_MAX_SEQUENCE_TOKENS,
    SequencePart,
    TokenizedRequest,
    plan_sequences,
)

Encoding = Literal["packed", "npair"]
KIND_INDEX = {"noul": 0, "choice": 1, "score": 2}
PAD_ID = 0  # BERT's [PAD]


@dataclass(frozen=True)
class PackedBatch:
    input_ids: np.ndarray  # (B, L)
    token_type_ids: np.ndarray  # (B, L)
    position_ids: np.ndarray  # (B, L)
    question_ids: np.ndarray  # (B, L)
    option_ids: np.ndarray  # (B, L)
    marker_positions: np.ndarray  # (B, M)
    marker_kinds: np.ndarray  # (B, M)

    def arrays(self) -> dict[str, np.ndarray]:
        """The model / graph inputs by name."""
        return {name: getattr(self, name) for name in INPUT_NAMES}

    @property
    def shape(self) -> tuple[int, int]:
        return self.input_ids.shape  # type: ignore[return-value]

    def valid_markers(self) -> np.ndarray:
        """(B, M) bool: marker slots that belong to a readout (a used slot never sits at position 0, except
        the first slot of an N-pair row, which is always used)."""
        valid = self.marker_positions > 0
        valid[:, 0] = True
        return valid


INPUT_NAMES: tuple[str, ...] = (
    "input_ids",
    "token_type_ids",
    "position_ids",
    "question_ids",
    "option_ids",
    "marker_positions",
    "marker_kinds",
)


@dataclass(frozen=True)
class Row:
    """One packed sequence before padding, with the readout slots it provides."""

    input_ids: list[int]
    token_type_ids: list[int]
    position_ids: list[int]
    question_ids: list[int]
    option_ids: list[int]
    markers: list[int]
    kinds: list[int]
    slots: list[tuple[int, int, int]]  # per marker: (request, question, option) it answers

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass(frozen=True)
class Readout:
    """Where each question's logits live: `index[r][k]` lists flat (batch, row, marker) triples in option order."""

    index: list[list[list[tuple[int, int, int]]]]

    def gather(self, logits: Sequence[np.ndarray]) -> list[list[np.ndarray]]:
        """Per request, per question, the logits in option order (a Noul has one)."""
        return [
            [np.array([logits[b][row, m] for b, row, m in q], dtype=np.float64) for q in request]
            for request in self.index
        ]


def packed_rows(request_index: int, tok: TokenizedRequest, max_sequence_tokens: int) -> list[Row]:
    """The packed rows of one request (usually one; more when it exceeds `max_sequence_tokens`)."""
    rows = []
    s = len(tok.state)
    for plan in plan_sequences(tok, max_sequence_tokens):
        row = Row(list(tok.state), [0] * s, list(range(s)), [0] * s, [0] * s, [], [], [])
        n_options = 0
        for qn, part in enumerate(plan.parts, start=1):
            _append_part(row, request_index, tok, part, qn, n_options, s)
            n_options += part.options[1] - part.options[0]
        rows.append(row)
    return rows


def _append_part(row: Row, r: int, tok: TokenizedRequest, part: SequencePart, qn: int, seen: int, s: int) -> None:
    q = tok.questions[part.question]
    kind = KIND_INDEX[q.kind]
    q_start = len(row)
    row.input_ids.extend(q.ids)
    row.token_type_ids.extend([1] * len(q.ids))
    row.position_ids.extend(range(s, s + len(q.ids)))
    row.question_ids.extend([qn] * len(q.ids))
    row.option_ids.extend([0] * len(q.ids))
    if not q.options:
        row.markers.append(q_start)
        row.kinds.append(kind)
        row.slots.append((r, part.question, 0))
        return
    base = s + len(q.ids)
    for k in range(*part.options):
        opt = q.options[k]
        row.markers.append(len(row))
        row.kinds.append(kind)
        row.slots.append((r, part.question, k))
        row.input_ids.extend(opt)
        row.token_type_ids.extend([1] * len(opt))
        row.position_ids.extend(range(base, base + len(opt)))
        row.question_ids.extend([qn] * len(opt))
        row.option_ids.extend([seen + k - part.options[0] + 1] * len(opt))


def npair_rows(request_index: int, tok: TokenizedRequest) -> list[Row]:
    """The plain cross-encoder: `[CLS] state [SEP] question [SEP] (option [SEP])`, one row per Noul / option."""
    rows = []
    for qi, q in enumerate(tok.questions):
        kind = KIND_INDEX[q.kind]
        question = list(q.ids[1:])  # drop the branch marker: `text [SEP]`
        tails = [question] if not q.options else [question + list(o[1:]) for o in q.options]
        for k, tail in enumerate(tails):
            ids = list(tok.state) + tail
            n = len(ids)
            types = [0] * len(tok.state) + [1] * len(tail)
            rows.append(Row(ids, types, list(range(n)), [0] * n, [0] * n, [0], [kind], [(request_index, qi, k)]))
    return rows


def build_rows(tokenized: Sequence[TokenizedRequest], encoding: Encoding, max_sequence_tokens: int) -> list[Row]:
    rows: list[Row] = []
    for r, tok in enumerate(tokenized):
        rows.extend(packed_rows(r, tok, max_sequence_tokens) if encoding == "packed" else npair_rows(r, tok))
    return rows


def pad_rows(rows: Sequence[Row]) -> PackedBatch:
    """Right-pad rows to one (B, L) batch; pads get question / option id -1 so nothing real attends to them."""
    b = len(rows)
    length = max(len(r) for r in rows)
    m = max(len(r.markers) for r in rows)
    out = {name: np.zeros((b, length), dtype=np.int64) for name in INPUT_NAMES[:5]}
    out["input_ids"].fill(PAD_ID)
    out["question_ids"].fill(-1)
    out["option_ids"].fill(-1)
    markers = np.zeros((b, m), dtype=np.int64)
    kinds = np.zeros((b, m), dtype=np.int64)
    for i, row in enumerate(rows):
        n = len(row)
        out["input_ids"][i, :n] = row.input_ids
        out["token_type_ids"][i, :n] = row.token_type_ids
        out["position_ids"][i, :n] = row.position_ids
        out["question_ids"][i, :n] = row.question_ids
        out["option_ids"][i, :n] = row.option_ids
        markers[i, : len(row.markers)] = row.markers
        kinds[i, : len(row.kinds)] = row.kinds
    return PackedBatch(marker_positions=markers, marker_kinds=kinds, **out)


def make_batches(
    tokenized: Sequence[TokenizedRequest],
    *,
    encoding: Encoding = "packed",
    max_sequence_tokens: int = DEFAULT_MAX_SEQUENCE_TOKENS,
    max_batch_tokens: int = 8192,
    max_padding: float = 0.1,
) -> tuple[list[PackedBatch], Readout]:
    """Rows sorted by length and grouped into micro-batches of at most `max_batch_tokens` padded tokens,
    none more than `max_padding` padding: on CPU the encoder costs the same per token alone or batched
    (compute-bound), so padding is pure loss and a ragged batch is split instead.

    Every answer is independent of the grouping (masking), so the grouping only affects speed.
    """
    rows = build_rows(tokenized, encoding, max_sequence_tokens)
    order = sorted(range(len(rows)), key=lambda i: (len(rows[i]), i))
    groups: list[list[int]] = []
    real = 0  # real tokens of the open group
    for i in order:
        n = len(rows[i])  # rows come shortest first, so the newest row sets the padded length
        padded = (len(groups[-1]) + 1) * n if groups else 0
        if groups and padded <= max_batch_tokens and padded - (real + n) <= max_padding * padded:
            groups[-1].append(i)
            real += n
        else:
            groups.append([i])
            real = n
    index: list[list[list[tuple[int, int, int]]]] = [
        [[] for _ in range(len(tok.questions))] for tok in tokenized
    ]
    positions: dict[tuple[int, int, int], tuple[int, int, int]] = {}
    batches = []
    for b, group in enumerate(groups):
        batches.append(pad_rows([rows[i] for i in group]))
        for row_in_batch, i in enumerate(group):
            for m, slot in enumerate(rows[i].slots):
                positions[slot] = (b, row_in_batch, m)
    for (r, q, k), where in sorted(positions.items()):
        index[r][q].append(where)
    return batches, Readout(index)


def rows_tokens(tokenized: TokenizedRequest, encoding: Encoding, max_sequence_tokens: int = DEFAULT_MAX_SEQUENCE_TOKENS) -> int:
    """Tokens the model reads for one request under `encoding` (padding excluded)."""
    rows = packed_rows(0, tokenized, max_sequence_tokens) if encoding == "packed" else npair_rows(0, tokenized)
    return sum(len(r) for r in rows)


def answer_logits(
    run: Callable[[PackedBatch], np.ndarray], tokenized: Sequence[TokenizedRequest], encoding: Encoding = "packed", **options: int
) -> list[list[np.ndarray]]:
    """Run every micro-batch through `run` (batch -> (B, M) logits) and gather per request / question."""
    batches, readout = make_batches(tokenized, encoding=encoding, **options)
    return readout.gather([run(b) for b in batches])


def invariance_max_diff(run: Callable[[PackedBatch], np.ndarray], tokenized: Sequence[TokenizedRequest], encoding: Encoding = "packed") -> float:
    """Max |logit change| of a question between: all requests batched together, its request alone, its
    request with the questions reversed, and the question alone with its state."""
    together = answer_logits(run, tokenized, encoding)
    worst = 0.0
    for r, tok in enumerate(tokenized):
        alone = answer_logits(run, [tok], encoding)[0]
        backwards = answer_logits(run, [TokenizedRequest(tok.state, tok.questions[::-1])], encoding)[0][::-1]
        for k, question in enumerate(tok.questions):
            (single,) = answer_logits(run, [TokenizedRequest(tok.state, (question,))], encoding)[0]
            for other in (together[r][k], backwards[k], single):
                worst = max(worst, float(np.abs(other - alone[k]).max()))
    return worst
