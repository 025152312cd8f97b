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


def _capture_logs(module) -> dict:
    """What the module logs outside a Trainer: `log` and `log_dict` record into a dict."""
    logged = {}
    module.log = lambda name, value, *a, **k: logged.__setitem__(name, float(value))
    module.log_dict = lambda values, *a, **k: logged.update({n: float(v) for n, v in values.items()})
    return logged


@pytest.mark.parametrize("distillation, reported", [("none", 1.0), ("hard", 0.0), ("soft", 0.0)])
def test_deit_reports_the_cls_head_without_distillation(distillation, reported):
    """val/acc (the summary's accuracy and ModelCheckpoint's monitor) is the cls head's when the
    dist head never trains (distillation none), (cls + dist) / 2 otherwise. Labels are the cls
    head's predictions; the dist head is rigged to answer one class no label has."""
    torch.manual_seed(0)
    m = ImageClassifier("deit", distillation=distillation).eval()
    x = torch.randn(8, 1, 28, 28)
    with torch.no_grad():
        cls = m._eval_logits(x)["_cls"]
        y = cls.argmax(dim=1)
        wrong = next(c for c in range(10) if c not in y.tolist())
        m.model.head_dist.weight.zero_()
        m.model.head_dist.bias.fill_(0.0)[wrong] = 100.0
        logged = _capture_logs(m)
        m.validation_step((x, y), 0)
        m.on_validation_epoch_end()
    assert logged["val/acc_cls"] == 1.0 and logged["val/acc_dist"] == 0.0
    assert logged["val/acc"] == reported


def test_deit_without_distillation_trains_the_cls_head_only():
    """distillation none: the loss is the cls head's cross-entropy, the training accuracy is
    measured on the cls logits, and a teacher, even if present, is never run."""
    torch.manual_seed(0)
    m = ImageClassifier("deit", distillation="none", label_smoothing=0.0).train()

    class Exploding(torch.nn.Module):
        def forward(self, x):
            raise AssertionError("the teacher ran")
    m.__dict__["teacher"] = Exploding()
    x, y = torch.randn(4, 1, 28, 28), torch.tensor([0, 1, 2, 3])
    loss, logits = m.training_loss(x, y)
    cls, dist = m.model(x)
    assert torch.equal(logits, cls) and not torch.equal(logits, (cls + dist) / 2)
    assert loss.item() == pytest.approx(torch.nn.functional.cross_entropy(cls, y).item(), rel=1e-6)
    loss.backward()
    assert m.model.head_dist.weight.grad is None and m.model.head.weight.grad is not None


def test_deit_without_distillation_ignores_the_teacher_checkpoint(tmp_path):
    """The sweep gives every DeiT run its teacher: with distillation none it is not loaded (a
    missing file does not raise), only named in a warning; with distillation it is loaded."""
    missing = str(tmp_path / "no-such-teacher.ckpt")
    m = ImageClassifier("deit", distillation="none", teacher_checkpoint=missing)
    with pytest.warns(UserWarning, match=r"distillation='none': teacher_checkpoint .*no-such-teacher.ckpt' is ignored"):
        m.setup("fit")
    assert m.teacher is None
    with pytest.raises(ValueError, match="does not exist"):
        ImageClassifier("deit", distillation="hard", teacher_checkpoint=missing).setup("fit")
