from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from training.dropout import FastDropout, dropout_mask, use_fast_dropout
from training.trainer import FitConfig, prepare_model


def test_mask_has_the_dropout_distribution() -> None:
    torch.manual_seed(0)
    mask = dropout_mask(torch.Size((1000, 1000)), 0.1)
    kept = mask > 0
    assert abs(float(kept.float().mean()) - 0.9) < 0.002  # 1e6 draws: the sd of the share is 0.0003
    values = torch.unique(mask).tolist()
    assert len(values) == 2 and values[0] == 0.0 and values[1] == pytest.approx(1 / 0.9, rel=1e-4)
    assert abs(float(mask.mean()) - 1.0) < 0.003  # expectation preserved
    rows = kept.float().mean(1)  # no position within a row is favoured (the four 16-bit slices of a word)
    cols = kept.float().mean(0)
    assert float(rows.std()) < 0.015 and float(cols.std()) < 0.015
    assert abs(float(cols[0::4].mean()) - float(cols[3::4].mean())) < 0.005


def test_masks_follow_torch_seed_and_odd_sizes() -> None:
    torch.manual_seed(7)
    a = dropout_mask(torch.Size((3, 5, 7)), 0.3)
    torch.manual_seed(7)
    b = dropout_mask(torch.Size((3, 5, 7)), 0.3)
    c = dropout_mask(torch.Size((3, 5, 7)), 0.3)
    assert a.shape == (3, 5, 7) and torch.equal(a, b) and not torch.equal(a, c)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        dropout_mask(torch.Size((2,)), 1.0)


def test_fast_dropout_is_identity_in_eval_and_scales_gradients_in_training() -> None:
    layer = FastDropout(0.25)
    x = torch.randn(64, 33, requires_grad=True)
    assert layer.eval()(x) is x and FastDropout(0.0).train()(x) is x
    layer.train()
    y = layer(x)
    y.sum().backward()
    zero = y == 0
    assert 0.15 < float(zero.float().mean()) < 0.35
    assert torch.equal(x.grad == 0, zero)
    assert torch.allclose(x.grad[~zero], torch.full_like(x.grad[~zero], 4 / 3))
    with pytest.raises(ValueError):
        FastDropout(-0.1)


def test_swap_replaces_every_active_dropout_and_keeps_inference(_tiny_model) -> None:  # type: ignore[no-untyped-def]
    plain = prepare_model(copy.deepcopy(_tiny_model), FitConfig(dropout="torch", lora_dropout=0.1))
    before = [m.p for m in plain.modules() if type(m) is nn.Dropout and m.p > 0]
    assert len(before) > 6  # BERT's hidden dropout and peft's LoRA dropout
    fast = copy.deepcopy(plain)
    assert use_fast_dropout(fast) == len(before)
    assert not [m for m in fast.modules() if type(m) is nn.Dropout and m.p > 0]
    assert sorted(m.p for m in fast.modules() if isinstance(m, FastDropout)) == sorted(before)
    swapped = prepare_model(copy.deepcopy(_tiny_model), FitConfig(lora_dropout=0.1))  # "fast" is the default
    assert sum(isinstance(m, FastDropout) for m in swapped.modules()) == len(before)
    n, length = 2, 12
    batch = {"input_ids": torch.randint(1000, 2000, (n, length)), "token_type_ids": torch.zeros(n, length, dtype=torch.long),
                 "position_ids": torch.arange(length).repeat(n, 1), "question_ids": torch.zeros(n, length, dtype=torch.long),
                 "option_ids": torch.zeros(n, length, dtype=torch.long), "marker_positions": torch.full((n, 1), length - 1),
                 "marker_kinds": torch.zeros(n, 1, dtype=torch.long)}
    plain.eval(), fast.eval()
    with torch.no_grad():
        assert torch.equal(plain(**batch), fast(**batch))
        fast.train()
        assert not torch.equal(plain(**batch), fast(**batch))  # masks drawn in training mode


def test_fit_config_dropout_kind() -> None:
    with pytest.raises(ValueError, match="dropout must be one of"):
        FitConfig(dropout="bernoulli")
    assert FitConfig(dropout="torch").fingerprint() != FitConfig().fingerprint()
