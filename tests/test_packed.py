"""Packed runs (modules/packed.py) change nothing: K members trained at once equal K single runs
from the same seeds on the same batches; an exported member is an ordinary checkpoint; clipping
uses each member's own norm. And the training step of either module never waits for the device."""
from __future__ import annotations

import json
import traceback
import warnings

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from torch.utils._python_dispatch import TorchDispatchMode

from modules import FAMILIES, ImageClassifier
from modules.classifier import load_teacher
from modules.packed import PackedClassifier, clip_grad_norm_per_member

SEEDS, STEPS, B, CLIP = (0, 1), 5, 8, 0.05
CONFIG = {"warmup_fraction": 0.4}  # 2 warmup steps, then cosine


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():  # vmap's CPU fallback for flash attention; Lightning's small-data notes
        warnings.filterwarnings("ignore", "There is a performance drop")
        warnings.filterwarnings("ignore", ".*(does not have many workers|log_every_n_steps|LeafSpec).*")
        yield


def _batches(k: int, n: int = STEPS, seed: int = 123) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Member k's batches: images (B, 1, 28, 28), labels (B,)."""
    g = torch.Generator().manual_seed(seed + k)
    return [(torch.randn(B, 1, 28, 28, generator=g), torch.randint(0, 10, (B,), generator=g)) for _ in range(n)]


def _packed_batches(k: int = len(SEEDS), n: int = STEPS):
    per = [_batches(i, n) for i in range(k)]
    return [(torch.stack([p[s][0] for p in per]), torch.stack([p[s][1] for p in per])) for s in range(n)]


class Record(Callback):
    """Losses (per member for packed) and gradient norms before clipping, step by step."""

    def __init__(self):
        self.losses, self.norms = [], []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(outputs["losses"] if "losses" in outputs else outputs["loss"].detach().reshape(1))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        self.norms.append(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))


def _fit(module, batches, **trainer_kw) -> Record:
    rec = Record()
    trainer = L.Trainer(max_steps=len(batches), gradient_clip_val=CLIP, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        callbacks=[rec], **trainer_kw)
    # the loader's own generator: a DataLoader otherwise draws its base seed from the global RNG, the
    # stream a single run's stochastic depth draws from (the suite's loaders use their own generators)
    trainer.fit(module, torch.utils.data.DataLoader(batches, batch_size=None, generator=torch.Generator()))
    return rec


def _singles(family, **config):
    out = []
    for k, s in enumerate(SEEDS):
        torch.manual_seed(s)
        m = ImageClassifier(family, **CONFIG, **config)
        out.append((m, _fit(m, _batches(k))))
    return out


def _assert_packed_equals_singles(packed, packed_rec, singles):
    losses = torch.stack(packed_rec.losses)                              # (steps, K)
    single = torch.cat([torch.stack(r.losses) for _, r in singles], 1)   # (steps, K)
    torch.testing.assert_close(losses, single, rtol=1e-5, atol=1e-6)
    assert len(losses) == STEPS and losses[-1].ne(losses[0]).all()       # it trained
    for k, (m, _) in enumerate(singles):
        mine, ref = packed.member_state_dict(k), m.model.state_dict()
        assert mine.keys() == ref.keys()
        for n in ref:  # weights and BatchNorm statistics; Adam divides by sqrt(v): where a gradient is
            # near 0 it turns fp32 rounding of batched vs single matmuls into up to ~1e-5 (an Adam step is 3e-3)
            torch.testing.assert_close(mine[n], ref[n], rtol=1e-4, atol=3e-5, msg=n)


@pytest.mark.parametrize("family", ["vit", "resnet"])  # resnet: BatchNorm statistics per member
def test_packed_members_equal_single_runs(family, tmp_path):
    singles = _singles(family)
    assert all(max(float(n) for n in r.norms) > CLIP for _, r in singles), "clipping never active"
    packed = PackedClassifier(seeds=SEEDS, family=family, **CONFIG)
    _assert_packed_equals_singles(packed, _fit(packed, _packed_batches()), singles)


def test_members_with_their_own_learning_rates_equal_single_runs():
    """A tuning grid packed: member k at lr_k is the single run at lr_k (AdamW at lr 1, scaled)."""
    lrs = (1e-3, 1e-2)
    singles = []
    for k, (s, lr) in enumerate(zip(SEEDS, lrs)):
        torch.manual_seed(s)
        m = ImageClassifier("vit", lr=lr, **CONFIG)
        singles.append((m, _fit(m, _batches(k))))
    packed = PackedClassifier(seeds=SEEDS, lrs=lrs, family="vit", **CONFIG)
    _assert_packed_equals_singles(packed, _fit(packed, _packed_batches()), singles)
    with pytest.raises(ValueError, match="one learning rate > 0 per member"):
        PackedClassifier(seeds=SEEDS, lrs=(1e-3,), family="vit")


@pytest.fixture(scope="module")
def trained_resnets(tmp_path_factory):
    """A packed ResNet pair after a few steps and its members' exported checkpoints."""
    packed = PackedClassifier(seeds=SEEDS, family="resnet", **CONFIG)
    _fit(packed, _packed_batches())
    d = tmp_path_factory.mktemp("members")
    paths = [d / f"resnet_s{s}.ckpt" for s in SEEDS]
    for k, p in enumerate(paths):
        packed.save_member_checkpoint(k, p)
    return packed, paths


def test_exported_member_is_an_ordinary_checkpoint(trained_resnets, cli):
    packed, paths = trained_resnets
    x = torch.randn(2, B, 1, 28, 28)
    packed.eval()
    with torch.no_grad():
        expected = packed(x)                                             # (K, B, classes)
    for k, path in enumerate(paths):
        clf = ImageClassifier.load_from_checkpoint(path, map_location="cpu").eval()
        assert clf.hparams.family == "resnet" and clf.complexity == packed.complexity
        with torch.no_grad():
            torch.testing.assert_close(clf(x[k]), expected[k], rtol=1e-5, atol=1e-6)
        teacher = load_teacher(str(path), clf.hparams)
        assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    code, run_dir = cli("test", "--ckpt_path", str(paths[1]), "--model.family", "resnet")
    assert code == 0
    (record,) = (run_dir / "evaluations").glob("resnet_s1_*.json")  # a checkpoint outside a run folder
    assert 0 <= json.loads(record.read_text())["test_acc"] <= 1


def test_deit_members_with_their_own_teachers(trained_resnets):
    _, paths = trained_resnets
    singles = []
    for k, s in enumerate(SEEDS):
        torch.manual_seed(s)
        m = ImageClassifier("deit", teacher_checkpoint=str(paths[k]), **CONFIG)
        singles.append((m, _fit(m, _batches(k))))
    packed = PackedClassifier(seeds=SEEDS, family="deit", teacher_checkpoints=[str(p) for p in paths], **CONFIG)
    _assert_packed_equals_singles(packed, _fit(packed, _packed_batches()), singles)
    # the teachers differ (different seeds), so using one teacher for both would not match
    assert not torch.equal(*(torch.load(p, weights_only=True)["state_dict"]["model.fc.weight"] for p in paths))


def test_each_member_is_clipped_by_its_own_norm():
    torch.manual_seed(0)
    grads = [torch.randn(3, 4, 5) * 1e-3, torch.randn(3, 7) * 1e-3]      # 3 members
    grads[0][1] *= 1e6                                                   # member 1: huge gradients
    params = [torch.zeros_like(g, requires_grad=True) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    norms = clip_grad_norm_per_member(params, 1.0)
    for k in range(3):  # as torch's clip_grad_norm_ on member k alone
        ps = [torch.nn.Parameter(torch.zeros_like(g[k])) for g in grads]
        for p, g in zip(ps, grads):
            p.grad = g[k].clone()
        ref = torch.nn.utils.clip_grad_norm_(ps, 1.0)
        torch.testing.assert_close(norms[k], ref)
        for p, q in zip(params, ps):
            torch.testing.assert_close(p.grad[k], q.grad)
    assert norms[1] > 1e2 and norms[0] < 1 and norms[2] < 1
    assert torch.equal(params[0].grad[0], grads[0][0])                   # small members untouched


class SyncSpy(TorchDispatchMode):
    """Operators that make the host wait for the device (.item(), bool(), unique, nonzero) or copy
    host data to it (torch.tensor of a Python number). Not one_hot's range checks: they call
    .item() on the CPU only (on CUDA they are device asserts: aten/src/ATen/native/Onehot.cpp)."""
    WAITS = ("_local_scalar_dense", "is_nonzero", "unique", "nonzero", "masked_select", "lift_fresh")

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(w in func.__name__ for w in self.WAITS) \
                and not any("one_hot(" in (f.line or "") for f in traceback.extract_stack() if f.filename != __file__):
            self.calls.append(func.__name__)
        return func(*args, **(kwargs or {}))


def _spy_on(module, *hooks) -> list[tuple[int, str, str]]:
    """(step, hook, operator) of every waiting operator the module's hooks run."""
    calls = []
    for name in hooks:
        fn = getattr(module, name)

        def spied(*a, fn=fn, name=name, **kw):
            with SyncSpy() as spy:
                out = fn(*a, **kw)
            calls.extend((module.global_step, name, op) for op in spy.calls)
            return out
        setattr(module, name, spied)
    return calls


@pytest.mark.parametrize("packed", [False, True])
def test_training_step_never_waits_for_the_device(packed):
    """Between log steps (log_every_n_steps=50: none in these 4) neither module reads a device
    value on the host: no .item(), no bool(tensor), no unique/nonzero, no float turned tensor.
    (Lightning creates each logged value's state at its first step: step 0 is not checked.)"""
    module = PackedClassifier(seeds=SEEDS, family="vit") if packed else ImageClassifier("vit")
    calls = _spy_on(module, "training_step", "on_train_batch_end")
    _fit(module, _packed_batches(n=4) if packed else _batches(0, 4), log_every_n_steps=50)
    assert [c for c in calls if c[0] >= 1] == []


def test_divergence_stops_within_a_log_interval_and_writes_no_checkpoint(cli):
    code, run_dir = cli("fit", "--model.family", "resnet", "--model.lr", "1e30",
                        "--trainer.log_every_n_steps", "3", "--trainer.limit_train_batches", "12")
    s = json.loads((run_dir / "summary.json").read_text())
    assert code != 0 and s["status"] == "diverged" and "loss is nan at step" in s["error"], s
    assert s["steps"] <= 3  # noticed at the first log step
    assert not (run_dir / "checkpoints" / "best.ckpt").exists() and not (run_dir / "checkpoints" / "last.ckpt").exists()


@pytest.mark.parametrize("family", [f for f in FAMILIES if f not in ("vit", "resnet", "deit")])  # those: above
def test_other_families_one_step(family):
    """The same for the other families, one forward and backward: losses and every gradient."""
    packed = PackedClassifier(seeds=SEEDS, family=family).train()
    x, y = _packed_batches(n=1)[0]
    losses, _ = packed(x, y)
    losses.sum().backward()
    grads = {n: p.grad for n, p in packed.members.named_parameters()}
    for k, s in enumerate(SEEDS):
        torch.manual_seed(s)
        single = ImageClassifier(family).train()
        loss, _ = single.training_loss(x[k], y[k])
        loss.backward()
        torch.testing.assert_close(losses[k], loss, rtol=1e-5, atol=1e-6)
        for n, p in single.model.named_parameters():
            torch.testing.assert_close(grads[n][k], p.grad, rtol=1e-4, atol=1e-6, msg=n)


def test_a_diverged_member_leaves_the_others_alone(tmp_path):
    batches = _packed_batches()
    batches[2][0][1] = float("nan")                                      # member 1's images at step 2
    packed = PackedClassifier(seeds=SEEDS, family="resnet", **CONFIG)
    rec = _fit(packed, batches, log_every_n_steps=2)
    assert list(packed.diverged) == [1] and "loss is nan at step 2" in packed.diverged[1]
    torch.manual_seed(SEEDS[0])
    single = ImageClassifier("resnet", **CONFIG)
    ref = _fit(single, _batches(0))
    torch.testing.assert_close(torch.stack(rec.losses)[:, 0], torch.cat(ref.losses), rtol=1e-5, atol=1e-6)
    packed.save_member_checkpoint(0, tmp_path / "m0.ckpt")
    with pytest.raises(FloatingPointError, match="member 1 .*loss is nan at step 2"):
        packed.save_member_checkpoint(1, tmp_path / "m1.ckpt")


def test_drop_path_members_draw_from_their_own_seeds():
    """Stochastic depth (drop_path_rate 0.5): member k draws its masks as its single run with seed k
    does, so it still equals that run; members' masks differ, and a member's training does not depend
    on the other members (groups [0, 1] and [2, 1] give seed 1 the same weights, bit for bit)."""
    dp = {"drop_path_rate": 0.5}
    singles = _singles("vit", **dp)
    packed = PackedClassifier(seeds=SEEDS, family="vit", **CONFIG, **dp)
    masks = packed.train()._drop_path_masks(_packed_batches(n=1)[0][0])     # (K, drop paths, B)
    assert masks.shape == (2, 6, B) and not torch.equal(masks[0], masks[1])  # 4 blocks x 2; block 0 at rate 0 draws none
    packed = PackedClassifier(seeds=SEEDS, family="vit", **CONFIG, **dp)
    torch.manual_seed(SEEDS[0])  # as fit_packed seeds the global RNG: with its first member's seed
    _assert_packed_equals_singles(packed, _fit(packed, _packed_batches()), singles)
    other = PackedClassifier(seeds=(2, SEEDS[1]), family="vit", **CONFIG, **dp)
    torch.manual_seed(2)
    _fit(other, _packed_batches())
    mine, ref = other.member_state_dict(1), packed.member_state_dict(1)
    assert all(torch.equal(mine[n], ref[n]) for n in ref)
    mine0, ref0 = other.member_state_dict(0), packed.member_state_dict(0)
    assert not all(torch.equal(mine0[n], ref0[n]) for n in ref0)  # member 0 did change
