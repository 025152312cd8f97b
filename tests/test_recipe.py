"""The shared recipe: DeiT losses, weight-decay groups, the schedule, and the frozen teacher."""
from __future__ import annotations

import math

import pytest
import torch

from modules import ImageClassifier, build_model
from modules.distillation import distillation_loss
from modules.optim import param_groups, warmup_cosine


def test_hard_distillation_by_hand():
    base = torch.tensor(0.7)
    dist = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 3.0]])
    teacher = torch.tensor([[0.1, 0.9, 0.0], [0.0, 0.0, 5.0]])  # argmax: 1, 2
    ce0 = -math.log(math.exp(0.0) / (math.exp(2.0) + 2))                       # class 1 of row 0
    ce1 = -math.log(math.exp(3.0) / (1 + math.exp(1.0) + math.exp(3.0)))       # class 2 of row 1
    expected = 0.5 * 0.7 + 0.5 * (ce0 + ce1) / 2
    assert distillation_loss(base, dist, teacher, "hard", 0.5, 1.0).item() == pytest.approx(expected, rel=1e-6)


def test_soft_distillation_by_hand():
    base, alpha, tau = torch.tensor(1.2), 0.3, 2.0
    dist = torch.tensor([[1.0, -1.0], [0.5, 0.0]])
    teacher = torch.tensor([[0.0, 2.0], [1.0, 1.0]])

    def softmax(row):
        e = [math.exp(v / tau) for v in row]
        return [v / sum(e) for v in e]
    kl = sum(pt * math.log(pt / ps) for s, t in zip(dist.tolist(), teacher.tolist())
             for ps, pt in zip(softmax(s), softmax(t)))
    expected = (1 - alpha) * 1.2 + alpha * kl * tau * tau / dist.numel()  # summed, / (B * C) as in DeiT
    assert distillation_loss(base, dist, teacher, "soft", alpha, tau).item() == pytest.approx(expected, rel=1e-6)


def test_no_distillation_is_the_base_loss():
    assert distillation_loss(torch.tensor(0.4), torch.zeros(2, 3), None, "none", 0.5, 1.0).item() == pytest.approx(0.4)


def test_weight_decay_skips_norms_biases_positions_tokens():
    model = build_model("deit")
    decay, no_decay = param_groups(model, 0.05)
    names = {id(p): n for n, p in model.named_parameters()}
    skipped = {names[id(p)] for p in no_decay["params"]}
    assert {"pos_embed", "cls_token", "dist_token", "norm.weight", "blocks.0.attn.qkv.bias"} <= skipped
    assert all(names[id(p)].endswith("weight") and p.ndim > 1 for p in decay["params"])
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0


def test_swin_relative_position_tables_not_decayed():
    model = build_model("swin")
    names = {id(p): n for n, p in model.named_parameters()}
    skipped = {names[id(p)] for p in param_groups(model, 0.05)[1]["params"]}
    assert any("relative_position_bias_table" in n for n in skipped)


def test_warmup_then_cosine():
    total, warm = 100, 10
    lrs = [warmup_cosine(s, total, warm, 0.01) for s in range(total)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(lrs[:10], lrs[1:10]))
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    assert lrs[-1] == pytest.approx(0.01, abs=1e-3)
    assert warmup_cosine(55, total, warm, 0.0) == pytest.approx(0.5)  # half way through the cosine


def test_distillation_type_is_checked():
    with pytest.raises(ValueError, match="distillation='medium': allowed hard, soft, none"):
        ImageClassifier("deit", distillation="medium")
    with pytest.raises(ValueError, match="teacher_checkpoint applies to family 'deit' only"):
        ImageClassifier("vit", teacher_checkpoint="x.ckpt")
