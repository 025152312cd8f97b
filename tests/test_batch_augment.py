"""Batched augmentation from random numbers as tensors (datamodules/batch_augment.py,
randaugment.py, erasing_mixing.py, counter_rng.py): each op is the one torchvision's RandAugment
or timm's RandomErasing / Mixup computes, given the same random choices; the counter-based
generator is Threefry-2x32-20 (Random123's known answers) and the draws made from it follow their
distributions; a stage a member leaves out passes its images unchanged; and `apply`, the strong
stages' draws included, traces into one graph (torch.compile fullgraph: no host read inside)."""
from __future__ import annotations

import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from datamodules import erasing_mixing as em
from datamodules.batch_augment import AugmentConfig, BatchAugment, member_draws, strong_draws, strong_inputs
from datamodules.counter_rng import normal, threefry2x32, uniform, words
from datamodules.randaugment import NUM_OPS, SPACE, _TORCHVISION, randaugment, randaugment_draws, variants

MEAN, STD = torch.tensor([72.9]), torch.tensor([90.0])
PLACE = torch.tensor([0, 0])   # (epoch, batch): the counter-based draws' step


def _words(n: int, stream: int = 0, members: int = 1, place: torch.Tensor = PLACE) -> torch.Tensor:
    """n words of `stream` for members of seeds 0..members - 1: (members, n)."""
    return words(torch.arange(members), place, [(stream, n)])[0]


def test_threefry_is_random123s_known_answers():
    """threefry2x32 (20 rounds) against Random123's kat_vectors: (counter, key) -> output words;
    and `words` keeps apart what its key and counter hold: seeds, epochs, batches and streams."""
    kat = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
           ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
           ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0))]
    for counter, key, want in kat:
        got = threefry2x32(tuple(map(torch.tensor, key)), tuple(map(torch.tensor, counter)))
        assert [int(t) for t in got] == list(want)
    seeds = torch.tensor([0, 1])
    base = words(seeds, PLACE, [(0, 6), (1, 5)])
    assert [t.shape for t in base] == [(2, 6), (2, 5)] and all(((t >= 0) & (t < 2 ** 32)).all() for t in base)
    assert torch.equal(words(seeds, PLACE, [(1, 5)])[0], base[1])      # a stream whatever else is drawn
    assert not torch.equal(base[0][0], base[0][1]) and not torch.equal(base[0][:, :5], base[1])
    for place in ([1, 0], [0, 1]):   # another epoch, another batch
        assert not torch.equal(words(seeds, torch.tensor(place), [(0, 6)])[0], base[0])


def test_uniforms_and_normals_have_their_moments():
    u, z = uniform(_words(40_000)), normal(_words(40_000, stream=1))
    assert u.dtype == z.dtype == torch.float32 and ((u >= 0) & (u < 1)).all()
    counts = torch.histc(u, bins=10, min=0, max=1)
    assert (counts - 4000).abs().max() < 4 * math.sqrt(4000)
    assert abs(z.mean()) < 4 / 200 and abs(z.var() - 1) < 0.03
    assert abs((z.abs() < 1).float().mean() - 0.6827) < 0.01


def _images(n: int, c: int, size: int, seed: int = 0) -> torch.Tensor:
    """uint8 images with structure (a gradient plus noise), so that every op changes something."""
    g = torch.Generator().manual_seed(seed)
    ramp = torch.linspace(0, 200, size).view(1, 1, 1, size) + torch.linspace(0, 50, size).view(1, 1, size, 1)
    return (ramp + torch.randint(0, 40, (n, c, size, size), generator=g)).clamp(0, 255).to(torch.uint8)


@pytest.mark.parametrize("channels, size", [(1, 28), (3, 32)])
def test_every_randaugment_variant_is_torchvisions_op(channels, size):
    table = variants(size, size)
    assert len(table) == 23 and {name for name, _, _ in table} == set(SPACE)
    x = _images(3, channels, size)
    identity = 0
    assert table[identity][0] == "Identity"
    for v, (name, magnitude, _) in enumerate(table):
        got = randaugment(x, torch.tensor([[v, identity]] * len(x)))
        for i in range(len(x)):
            want = _TORCHVISION._apply_image_or_video_transform(
                x[i], name, magnitude, interpolation=_TORCHVISION.interpolation, fill=_TORCHVISION._fill)
            assert torch.equal(got[i], want), (name, magnitude)


def test_randaugment_gives_each_image_its_own_ops_in_turn():
    x = _images(4, 1, 28)
    table = variants(28, 28)
    names = [name for name, _, _ in table]
    rot, sol = names.index("Rotate"), names.index("Solarize")
    variant = torch.tensor([[rot, sol], [sol, rot], [0, 0], [rot, 0]])
    got = randaugment(x, variant)
    op = lambda img, v: _TORCHVISION._apply_image_or_video_transform(  # noqa: E731
        img, table[v][0], table[v][1], interpolation=_TORCHVISION.interpolation, fill=_TORCHVISION._fill)
    for i, (a, b) in enumerate(variant.tolist()):
        assert torch.equal(got[i], op(op(x[i], a), b))
    assert not torch.equal(got[0], got[1])          # the order of the ops matters


def test_randaugment_draws_are_uniform_over_ops_and_signs():
    v = randaugment_draws(_words(20_000 * NUM_OPS * 2).view(20_000, NUM_OPS, 2), (28, 28))
    assert v.shape == (20_000, NUM_OPS)
    table = variants(28, 28)
    counts = torch.bincount(v.flatten(), minlength=len(table)).double() / v.numel()
    for i, (name, _, _) in enumerate(table):
        signed = SPACE[name][1]
        want = 1 / len(SPACE) / (2 if signed else 1)
        assert abs(counts[i] - want) < 0.15 * want, (name, counts[i].item(), want)


def test_erasing_is_timms_given_the_same_numbers(monkeypatch):
    """Each image's box and pixels as timm's RandomErasing._erase makes them when its Python RNG
    returns our draws (its first fitting try) and its pixels are our noise's top-left corner."""
    from timm.data import random_erasing as timm_re
    timm = timm_re.RandomErasing(0.5, mode="pixel", device="cpu")
    assert (timm.min_area, timm.max_area) == em.ERASE_AREA
    assert np.allclose(timm.log_aspect_ratio, em.ERASE_LOG_ASPECT)
    x = torch.randn(64, 3, 16, 16)
    boxes, noise = words(torch.tensor([3]), PLACE, [(1, 64 * em.ERASE_WORDS), (2, 64 * 3 * 16 * 16)])
    d = em.erasing_draws(torch.tensor([0.5]), boxes.view(1, 64, em.ERASE_WORDS), noise, (3, 16, 16))
    d = {k: t[0] for k, t in d.items()}
    assert 10 < int(d["erase"].sum()) < 54
    got = em.erase(x, d)
    for i in range(64):
        h, w = int(d["erase_h"][i]), int(d["erase_w"][i])
        top, left = int(d["erase_top"][i]), int(d["erase_left"][i])
        assert 0 <= top <= 16 - h and 0 <= left <= 16 - w and h < 16 and w < 16

        class Fixed:  # timm's `random`: this image's draws, one fitting try
            random = staticmethod(lambda: 0.0 if d["erase"][i] else 1.0)
            randint = staticmethod(lambda lo, hi, it=iter([top, left]): next(it))
            uniform = staticmethod(lambda lo, hi, it=iter([h * w / 256, 0.0]): next(it))  # area, log aspect

        # exp(log aspect) = h / w: with area h * w, timm's sqrt and round give this box's h and w
        monkeypatch.setattr(timm_re, "random", Fixed)
        monkeypatch.setattr(timm_re, "math", SimpleNamespace(sqrt=math.sqrt, exp=lambda a, r=h / w: r))
        monkeypatch.setattr(timm_re, "_get_pixels", lambda *a, i=i, h=h, w=w, **k: d["erase_noise"][i, :, :h, :w])
        want = x[i].clone()
        timm._erase(want, 3, 16, 16, want.dtype)
        assert torch.equal(got[i], want)
    monkeypatch.undo()


def test_cutmix_box_is_timms(monkeypatch):
    from timm.data import mixup as timm_mixup
    for lam, cy, cx in [(0.3, 5, 27), (0.9, 0, 0), (0.5, 14, 13), (0.01, 27, 3)]:
        it = iter([cy, cx])
        monkeypatch.setattr(timm_mixup.np.random, "randint", lambda lo, hi, size=None: next(it))
        (yl, yh, xl, xh), want_lam = timm_mixup.cutmix_bbox_and_lam((8, 1, 28, 28), lam, correct_lam=True)
        box, got_lam = em.cutmix_box(torch.tensor(lam), torch.tensor(cy), torch.tensor(cx), 28, 28)
        assert box.tolist() == [yl, yh, xl, xh]
        assert got_lam.item() == pytest.approx(want_lam, abs=1e-7)


@pytest.mark.parametrize("cut", [False, True])
def test_mix_is_timms_batch_mode(monkeypatch, cut):
    """x and the soft targets as timm's Mixup(mode="batch") makes them for the same lambda and box."""
    from timm.data import mixup as timm_mixup
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(8, 1, 28, 28, generator=g), torch.randint(0, 10, (8,), generator=g)
    lam = torch.tensor(0.37)
    box, boxed = em.cutmix_box(lam, torch.tensor(9), torch.tensor(20), 28, 28)
    d = {"mix_lam": boxed if cut else lam, "mix_cut": torch.tensor(cut), "mix_box": box}
    got_x, got_y = em.mix(x, y, d, 10)
    timm = timm_mixup.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.0, num_classes=10)
    monkeypatch.setattr(timm, "_params_per_batch", lambda: (float(lam), cut))
    monkeypatch.setattr(timm_mixup, "cutmix_bbox_and_lam", lambda *a, **k: (tuple(box.tolist()), float(boxed)))
    want_x, want_y = timm(x.clone(), y)
    torch.testing.assert_close(got_x, want_x, rtol=0, atol=1e-6)
    torch.testing.assert_close(got_y, want_y, rtol=0, atol=1e-6)


@pytest.mark.parametrize("alpha", [0.8, 1.0, 2.0])
def test_beta_draws_have_betas_mean_and_variance(alpha):
    n = 4000   # one draw per member, 4000 members
    w = _words(2 * em.GAMMA_WORDS, stream=3, members=n).view(n, 2, em.GAMMA_WORDS)
    draws = em.beta(torch.full((n,), alpha), w).double()
    assert ((draws > 0) & (draws < 1)).all()
    mean, var = 0.5, 1 / (4 * (2 * alpha + 1))
    assert abs(draws.mean() - mean) < 4 * math.sqrt(var / n)
    assert abs(draws.var() - var) < 0.1 * var


def test_mixing_draws_switch_between_cutmix_and_mixup():
    n = 400
    w = _words(em.MIX_WORDS, stream=3, members=n)
    alpha = lambda a: torch.full((n,), a)  # noqa: E731
    d = em.mixing_draws(alpha(0.8), alpha(1.0), w, (28, 28))
    assert 150 < int(d["mix_cut"].sum()) < 250
    for lam, cut, (yl, yh, xl, xh) in zip(d["mix_lam"].tolist(), d["mix_cut"].tolist(), d["mix_box"].tolist()):
        if cut:  # CutMix's lambda is 1 - the box's area
            assert lam == pytest.approx(1 - (yh - yl) * (xh - xl) / 784, abs=1e-6)
    assert not em.mixing_draws(alpha(0.8), alpha(0.0), w, (28, 28))["mix_cut"].any()
    assert em.mixing_draws(alpha(0.0), alpha(1.0), w, (28, 28))["mix_cut"].all()
    off = em.mixing_draws(alpha(0.0), alpha(0.0), w, (28, 28))   # a member without the stage
    assert not off["mix_cut"].any() and (off["mix_lam"] == 1).all()


def test_a_stage_a_member_leaves_out_passes_its_images_unchanged():
    """A default member packed beside a strong one: the group's strong inputs give the default member
    its stages' defaults, which leave its images as they are; each member's images come out as its
    own run makes them (labels one-hot where the group mixes), its numbers drawn with the others'."""
    default = BatchAugment(AugmentConfig(crop_padding=2, hflip=True), MEAN, STD, 10)
    strong = BatchAugment(AugmentConfig(crop_padding=2, hflip=True, randaugment=True, random_erasing=1.0,
                                        mixup_alpha=0.8, cutmix_alpha=1.0), MEAN, STD, 10)
    x = torch.stack([_images(8, 1, 28, seed) for seed in (1, 2)])
    y = torch.randint(0, 10, (2, 8), generator=torch.Generator().manual_seed(0))
    own = [aug.draws(8, torch.Generator().manual_seed(s)) for aug, s in ((default, 10), (strong, 11))]
    place = {"place": torch.tensor([3, 5])}
    group = strong_inputs([default.cfg, strong.cfg], [0, 1], (28, 28), "cpu")
    gx, gy = default.apply(x, y, member_draws(own) | group | place)
    x0, y0 = default.apply(x[0], y[0], own[0])
    x1, y1 = strong.apply(x[1], y[1], own[1] | strong_inputs([strong.cfg], [1], (28, 28), "cpu") | place)
    assert torch.equal(gx[0], x0) and torch.equal(gx[1], x1)
    assert torch.equal(gy[0], torch.nn.functional.one_hot(y0, 10).float()) and torch.equal(gy[1], y1)
    assert not torch.equal(x1, default.apply(x[1], y[1], own[1])[0])


def _strong_draws(aug: BatchAugment, batch: int) -> dict:
    """A batch's crop and flip draws and the strong inputs of a run of seed 0 at its second batch."""
    return (aug.draws(batch, torch.Generator().manual_seed(0)) | strong_inputs([aug.cfg], [0], (28, 28), "cpu")
            | {"place": torch.tensor([0, 1])})


def test_apply_traces_into_one_graph():
    """The strong stages' draws included: a step that augments draws them inside its graph."""
    aug = BatchAugment(AugmentConfig(crop_padding=2, hflip=True, randaugment=True, random_erasing=0.5,
                                     mixup_alpha=0.8, cutmix_alpha=1.0), MEAN, STD, 10)
    x, y = _images(8, 1, 28), torch.arange(8)
    d = _strong_draws(aug, 8)
    torch._dynamo.reset()
    got = torch.compile(aug.apply, fullgraph=True, backend="aot_eager")(x, y, d)   # a graph break raises
    want = aug.apply(x, y, d)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert not torch.equal(want[0], aug.apply(x, y, {k: d[k] for k in ("dy", "dx", "flip")})[0])
    torch._dynamo.reset()


def test_the_draws_read_nothing_back_from_the_device(monkeypatch):
    """Every draw stays a tensor (no .item(), int() or .tolist() of one): on CUDA each would wait for
    the device. Tensor.__int__ / item / tolist are made to fail while drawing."""
    aug = BatchAugment(AugmentConfig(crop_padding=2, hflip=True, randaugment=True, random_erasing=0.5,
                                     mixup_alpha=0.8, cutmix_alpha=1.0), MEAN, STD, 10)
    d = _strong_draws(aug, 16)
    for method in ("__int__", "__float__", "__bool__", "item", "tolist"):
        monkeypatch.setattr(torch.Tensor, method, lambda *a, m=method, **k: pytest.fail(f"Tensor.{m} while drawing"))
    aug.draws(16, torch.Generator().manual_seed(0))
    drawn = strong_draws(d, (16,), (1, 28, 28))
    monkeypatch.undo()
    assert {"ra_variant", "erase", "erase_noise", "mix_lam", "mix_box"} <= set(drawn)
    random.seed(0)  # (the global RNGs play no part: nothing above reads them)
