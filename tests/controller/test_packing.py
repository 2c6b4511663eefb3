from __future__ import annotations

import numpy as np

from controller.backend import BackendRequest
from controller.families import family_questions
from controller.packing import make_batches, rows_tokens
from controller.questions import normalize_questions
from controller.template import tokenize_request
from tests.controller.conftest import pair_state


def _visible(q: np.ndarray, o: np.ndarray) -> np.ndarray:
    return ((q[None, :] == 0) | (q[None, :] == q[:, None])) & ((o[None, :] == 0) | (o[None, :] == o[:, None]))


def _tok(tokenizer, family: str, state=None):  # type: ignore[no-untyped-def]
    qs = normalize_questions(family_questions(family))
    return tokenize_request(BackendRequest(state or pair_state(), tuple(qs.values())), tokenizer)


def test_packed_row_layout_and_attention_rule(tokenizer) -> None:  # type: ignore[no-untyped-def]
    tok = _tok(tokenizer, "pair")
    (batch,), readout = make_batches([tok])
    q, o, pos = batch.question_ids[0], batch.option_ids[0], batch.position_ids[0]
    s = len(tok.state)
    vis = _visible(q, o)
    assert not vis[:s, s:].any()  # the state never sees a question
    assert vis[s:, :s].all()  # everything sees the state
    first_q = slice(s, s + len(tok.questions[0].ids))
    second_q = s + len(tok.questions[0].ids)
    assert not vis[first_q, second_q].any()  # questions do not see each other
    assert pos[s] == s and pos[second_q] == s  # every question branch restarts after the state
    choice = tok.questions[-1]
    opt_rows = np.flatnonzero(o > 0)
    first, last = opt_rows[0], opt_rows[-1]
    assert vis[first, first - len(choice.ids)]  # an option sees its question
    assert not vis[first, last]  # but not a sibling option
    assert pos[first] == s + len(choice.ids) == pos[first + len(choice.options[0])]
    assert [len(x) for x in readout.index[0]] == [1, 1, 1, 1, 1, 7]
    markers = batch.marker_positions[0]
    assert (batch.input_ids[0][markers] == tokenizer.cls_id).all()
    assert list(batch.marker_kinds[0]) == [0] * 5 + [1] * 7


def test_batches_sort_pad_and_map_back(tokenizer) -> None:  # type: ignore[no-untyped-def]
    toks = [_tok(tokenizer, "pair"), _tok(tokenizer, "typing", {"observation": "hi"}), _tok(tokenizer, "routing", {"query": "when?"})]
    batches, readout = make_batches(toks, max_batch_tokens=100_000, max_padding=1.0)
    assert len(batches) == 1 and batches[0].shape[0] == 3
    b = batches[0]
    lengths = (b.question_ids >= 0).sum(axis=1)
    assert list(lengths) == sorted(lengths)  # shortest first
    assert (b.question_ids[b.input_ids == 0] == -1).all()  # pads are never attended by real tokens
    seen = {w for req in readout.index for q in req for w in q}
    assert len(seen) == sum(len(q.options) or 1 for t in toks for q in t.questions)
    split, _ = make_batches(toks, max_batch_tokens=1, max_padding=1.0)
    assert len(split) == 3
    ragged, _ = make_batches(toks, max_batch_tokens=100_000)  # default: at most 10% padding per batch
    for batch in ragged:
        real = int((batch.question_ids >= 0).sum())
        assert batch.shape[0] * batch.shape[1] - real <= 0.1 * batch.shape[0] * batch.shape[1]
    assert len(ragged) > 1  # these three lengths differ by far more than 10%


def test_npair_rows_are_plain_cross_encoder_sequences(tokenizer) -> None:  # type: ignore[no-untyped-def]
    tok = _tok(tokenizer, "pair")
    batches, readout = make_batches([tok], encoding="npair", max_batch_tokens=100_000)
    (b,) = batches
    assert b.shape[0] == 5 + 7
    assert (b.marker_positions == 0).all() and (b.question_ids[b.input_ids != 0] == 0).all()
    row = b.input_ids[0][b.input_ids[0] != 0]
    assert row[0] == tokenizer.cls_id and row[-1] == tokenizer.sep_id and (row == tokenizer.cls_id).sum() == 1
    assert rows_tokens(tok, "npair") == int((b.input_ids != 0).sum())
    assert rows_tokens(tok, "packed") == tok.packed_tokens
