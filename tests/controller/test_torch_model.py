from __future__ import annotations

import numpy as np
import torch

from controller.backend import BackendRequest
from controller.families import family_questions
from controller.packing import answer_logits, invariance_max_diff, make_batches
from controller.questions import normalize_questions
from controller.template import TokenizedRequest, tokenize_request
from controller.torch_model import bert_reference_check, encode, to_tensors
from tests.controller.conftest import pair_state


def _runner(model):  # type: ignore[no-untyped-def]
    def run(batch):  # type: ignore[no-untyped-def]
        with torch.inference_mode():
            return model(**to_tensors(batch.arrays())).numpy()

    return run


def _toks(tokenizer):  # type: ignore[no-untyped-def]
    def tok(family, state):  # type: ignore[no-untyped-def]
        return tokenize_request(BackendRequest(state, tuple(normalize_questions(family_questions(family)).values())), tokenizer)

    return [tok("pair", pair_state()), tok("typing", {"observation": "I love hiking."}), tok("stopping", {"query": "why?", "evidence": ["a", "b"], "depth": 2})]


def test_forward_is_bert(tiny_model) -> None:  # type: ignore[no-untyped-def]
    ids = torch.randint(1000, 5000, (3, 21), generator=torch.Generator().manual_seed(0))
    assert bert_reference_check(tiny_model, ids) < 1e-5


def test_packed_question_equals_question_alone(tiny_model, tokenizer) -> None:  # type: ignore[no-untyped-def]
    assert invariance_max_diff(_runner(tiny_model), _toks(tokenizer), "packed") < 1e-5


def test_duplicated_and_split_questions_match(tiny_model, tokenizer) -> None:  # type: ignore[no-untyped-def]
    pair = _toks(tokenizer)[0]
    run = _runner(tiny_model)
    (base,) = answer_logits(run, [pair])
    dup = TokenizedRequest(pair.state, pair.questions + pair.questions)
    (twice,) = answer_logits(run, [dup], max_sequence_tokens=len(pair.state) + pair.questions[-1].tokens)  # forces splitting
    for k, q in enumerate(base):
        assert np.abs(twice[k] - q).max() < 1e-5 and np.abs(twice[k + len(base)] - q).max() < 1e-5


def test_last_layer_marker_pruning_is_exact(tiny_model, tokenizer) -> None:  # type: ignore[no-untyped-def]
    (batch,), _ = make_batches(_toks(tokenizer)[:1])
    t = to_tensors(batch.arrays())
    args = [t[n] for n in ("input_ids", "token_type_ids", "position_ids", "question_ids", "option_ids")]
    every = torch.arange(batch.shape[1]).unsqueeze(0)
    with torch.inference_mode():
        pruned = encode(tiny_model.bert, *args, t["marker_positions"])
        full = encode(tiny_model.bert, *args, every)
    picked = full[0, t["marker_positions"][0]]
    assert torch.allclose(pruned[0], picked, atol=1e-6)


def test_npair_row_reads_cls_of_the_plain_sequence(tiny_model, tokenizer) -> None:  # type: ignore[no-untyped-def]
    typing = _toks(tokenizer)[1]
    batches, readout = make_batches([typing], encoding="npair", max_batch_tokens=1)
    b = batches[0]
    ids = torch.from_numpy(b.input_ids)
    with torch.inference_mode():
        hidden = tiny_model.bert(input_ids=ids, token_type_ids=torch.from_numpy(b.token_type_ids)).last_hidden_state
        expected = tiny_model.heads(hidden[:, 0])[:, 0]
        got = tiny_model(**to_tensors(b.arrays()))[:, 0]
    assert torch.allclose(got, expected, atol=1e-5)


def test_training_forward_backpropagates_into_lora_and_heads(tiny_model, tokenizer) -> None:  # type: ignore[no-untyped-def]
    from controller.artifacts import add_lora

    model = add_lora(tiny_model)
    model.train()
    batches, readout = make_batches(_toks(tokenizer), max_batch_tokens=100_000)
    logits = model(**to_tensors(batches[0].arrays()))
    loss = logits.pow(2).mean()
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert any("lora_B" in n for n in grads) and grads["heads.weight"] is not None
    assert all("lora" in n or n.startswith("heads") for n in grads)
