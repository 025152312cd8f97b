"""Robustness probes (modules/probes/robustness.py): translation, patch shuffling and PatchDrop on
hand-made images with the answers written out here, then invariances of built models that fix the
answer in advance: a ViT without position embedding ignores the order of its patches, a circular
conv + global average pool ignores circular shifts, a flatten + linear model ignores neither."""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from modules import build_model
from modules.probes.robustness import (accuracy_under_shift, drop_patches, patch_multiple, patch_shuffle_accuracy,
                                       patchdrop_accuracy, robustness_curves, shift, shift_consistency,
                                       shuffle_patches)

SIZE, PATCH = 28, 4  # vit at 28x28 with patch 4: a 7x7 grid


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _images(n: int = 8, c: int = 1, size: int = SIZE, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, c, size, size, generator=_gen(seed))


def _labels(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 10, (n,), generator=_gen(seed))


def _clean_accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return (model(images).argmax(-1) == labels).float().mean().item()


def _circular_model(c: int = 1) -> nn.Module:
    """Circular conv (equivariant to circular shifts) + global average pool: invariant to them."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(c, 8, 3, padding=1, padding_mode="circular"), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))


def _linear_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(SIZE * SIZE, 10))


def _vit(**kw) -> nn.Module:
    torch.manual_seed(0)
    return build_model("vit", image_size=SIZE, in_chans=1, num_classes=10, patch_size=PATCH, **kw).eval()


def _logits(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(images)


def _cells(image: torch.Tensor, grid: int) -> list[torch.Tensor]:
    """An image's (C, H, W) grid cells, row-major, cut by slicing."""
    h = image.shape[-1] // grid
    return [image[:, i * h:(i + 1) * h, j * h:(j + 1) * h] for i in range(grid) for j in range(grid)]


# ---------------- shift ----------------
@pytest.mark.parametrize("circular", [False, True])
def test_shift_by_zero_is_identity(circular):
    images = _images()
    assert torch.equal(shift(images, 0, 0, circular), images)


def test_circular_shift_is_roll_per_image():
    images = _images(n=5)
    dx, dy = torch.tensor([1, -3, 0, 27, 30]), torch.tensor([0, 2, -5, 1, -29])
    out = shift(images, dx, dy, circular=True)
    for i in range(5):
        rolled = torch.roll(images[i], (int(dy[i]), int(dx[i])), dims=(-2, -1))
        assert torch.equal(out[i], rolled)


def test_zero_fill_shift_by_hand():
    image = torch.arange(16.0).reshape(1, 1, 4, 4)
    images = image.expand(3, 1, 4, 4)
    out = shift(images, torch.tensor([1, -1, 4]), torch.tensor([0, 2, 0]), fill=-1.0)
    right = [[-1, 0, 1, 2], [-1, 4, 5, 6], [-1, 8, 9, 10], [-1, 12, 13, 14]]          # dx = 1
    left_down = [[-1, -1, -1, -1], [-1, -1, -1, -1], [1, 2, 3, -1], [5, 6, 7, -1]]  # dx = -1, dy = 2
    gone = [[-1] * 4] * 4                                                            # dx = 4: off the image
    assert out[:, 0].tolist() == [right, left_down, gone]


def test_shift_rejects_fractional_shifts():
    with pytest.raises(ValueError, match="dx"):
        shift(_images(), 0.5, 0)


# ---------------- shift consistency ----------------
def test_circularly_invariant_model_is_fully_consistent():
    model, images = _circular_model().double(), _images(n=64).double()
    assert shift_consistency(model, images, 5, _gen(), circular=True, trials=2) == 1.0


def test_flatten_linear_model_is_not_consistent():
    model, images = _linear_model(), _images(n=64)
    assert shift_consistency(model, images, 3, _gen(), circular=True) < 1.0
    assert shift_consistency(model, images, 3, _gen()) < 1.0


def test_no_shift_is_always_consistent():
    assert shift_consistency(_linear_model(), _images(n=16), 0, _gen()) == 1.0


def test_consistency_is_deterministic_given_the_generator():
    model, images = _linear_model(), _images(n=64)
    runs = [shift_consistency(model, images, 3, _gen(7), trials=3) for _ in range(2)]
    assert runs[0] == runs[1]


def test_negative_max_shift_is_rejected():
    with pytest.raises(ValueError, match="max_shift=-1") as err:
        shift_consistency(_linear_model(), _images(), -1, _gen())
    assert "\n" not in str(err.value)


# ---------------- accuracy under shift ----------------
def test_shift_zero_accuracy_is_clean_accuracy():
    model, images, labels = _linear_model(), _images(n=40), _labels(40)
    assert accuracy_under_shift(model, images, labels, (0,)) == {0: _clean_accuracy(model, images, labels)}


def test_patch_multiple():
    assert patch_multiple((1, 4, 8), 4) == {1: False, 4: True, 8: True}


def test_vit_without_position_ignores_circular_shift_by_a_patch():
    """A circular shift by the patch size permutes whole patches: no position embedding, nothing changes."""
    model, images, labels = _vit(pos_embed="none", pool="avg"), _images(), _labels(8)
    assert torch.allclose(_logits(model, shift(images, PATCH, PATCH, circular=True)), _logits(model, images),
                          atol=1e-5)
    acc = accuracy_under_shift(model, images, labels, (0, PATCH), circular=True)
    assert acc[PATCH] == acc[0]


# ---------------- patch shuffling ----------------
def test_shuffle_with_grid_one_is_identity():
    images = _images()
    assert torch.equal(shuffle_patches(images, 1, _gen()), images)


def test_shuffle_permutes_cells_differently_per_image():
    images = torch.arange(3 * 2 * SIZE * SIZE, dtype=torch.float32).reshape(3, 2, SIZE, SIZE)  # every value unique
    out = shuffle_patches(images, 7, _gen())
    perms = []
    for before, after in zip(images, out):
        source = {float(cell[0, 0, 0]): k for k, cell in enumerate(_cells(before, 7))}  # first value -> cell index
        cells_after = _cells(after, 7)
        perm = [source[float(cell[0, 0, 0])] for cell in cells_after]
        assert sorted(perm) == list(range(49))                                            # a permutation
        assert all(torch.equal(cell, _cells(before, 7)[k]) for cell, k in zip(cells_after, perm))  # cells intact
        perms.append(perm)
    assert perms[0] != list(range(49)) and perms[0] != perms[1]


def test_shuffle_preserves_the_multiset_of_cells():
    images = _images(n=4)
    out = shuffle_patches(images, 4, _gen())
    for before, after in zip(images, out):
        flat = [torch.stack([c.flatten() for c in _cells(x, 4)]) for x in (before, after)]   # (16, 49) each
        keys = [f[f[:, 0].argsort()] for f in flat]                                          # sorted by first pixel
        assert torch.equal(keys[0], keys[1])


def test_grid_that_does_not_divide_is_rejected():
    with pytest.raises(ValueError, match="grid=5") as err:
        shuffle_patches(_images(), 5, _gen())
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("pool", ["avg", "token"])
def test_vit_without_position_ignores_patch_order(pool):
    """Shuffling 4x4 cells = permuting the tokens; without a position table, self-attention and the
    pool (mean, or the [CLS] token, which attends to the set of tokens) cannot tell."""
    model, images = _vit(pos_embed="none", pool=pool), _images()
    shuffled = shuffle_patches(images, SIZE // PATCH, _gen())
    assert not torch.equal(shuffled, images)
    assert torch.allclose(_logits(model, shuffled), _logits(model, images), atol=1e-5)


def test_vit_with_learned_position_sees_patch_order():
    model, images = _vit(pos_embed="learn", pool="avg"), _images()
    with torch.no_grad():
        model.pos_embed.copy_(torch.randn(model.pos_embed.shape, generator=_gen(3)))
    shuffled = shuffle_patches(images, SIZE // PATCH, _gen())
    assert not torch.allclose(_logits(model, shuffled), _logits(model, images), atol=1e-3)


def test_shuffle_accuracy_grid_one_is_clean_and_deterministic():
    model, images, labels = _linear_model(), _images(n=40), _labels(40)
    assert patch_shuffle_accuracy(model, images, labels, 1, _gen()) == _clean_accuracy(model, images, labels)
    runs = [patch_shuffle_accuracy(model, images, labels, 7, _gen(5), draws=2) for _ in range(2)]
    assert runs[0] == runs[1]


# ---------------- PatchDrop ----------------
def test_drop_nothing_is_identity_and_clean_accuracy():
    model, images, labels = _linear_model(), _images(n=40), _labels(40)
    assert torch.equal(drop_patches(images, PATCH, 0.0, _gen()), images)
    assert patchdrop_accuracy(model, images, labels, PATCH, 0.0, _gen()) == _clean_accuracy(model, images, labels)


def test_drop_everything_leaves_only_fill():
    out = drop_patches(_images(), PATCH, 1.0, _gen(), fill=-0.5)
    assert torch.equal(out, torch.full_like(out, -0.5))


# round(fraction * patches) by hand: 0.3 * 49 = 14.7 -> 15; 0.25 * 16 = 4; 0.5 * 49 = 24.5 -> 24 (half to even)
@pytest.mark.parametrize("patch, fraction, expected", [(4, 0.3, 15), (7, 0.25, 4), (4, 0.5, 24), (4, 0.1, 5)])
def test_drop_count_per_image(patch, fraction, expected):
    images = torch.ones(6, 3, SIZE, SIZE)
    out = drop_patches(images, patch, fraction, _gen(), fill=0.0)
    grid = SIZE // patch
    dropped_sets = []
    for image in out:
        cells = _cells(image, grid)
        dropped = [k for k, c in enumerate(cells) if torch.equal(c, torch.zeros_like(c))]
        assert len(dropped) == expected
        assert (image == 0).sum().item() == expected * 3 * patch * patch   # only whole patches are blanked
        dropped_sets.append(dropped)
    assert len({tuple(d) for d in dropped_sets}) > 1                         # chosen per image


@pytest.mark.parametrize("fraction", [1.5, -0.1])
def test_fraction_outside_unit_interval_is_rejected(fraction):
    with pytest.raises(ValueError, match=f"fraction={fraction}") as err:
        drop_patches(_images(), PATCH, fraction, _gen())
    assert "\n" not in str(err.value)


def test_black_is_a_pixel_of_zero_per_channel_and_fills_each_channel_with_its_own():
    """Naseer et al. blank their [0, 1] images before normalising: black is (0 - mean) / std per
    channel, and a dropped cell or a shift's border takes each channel's own value."""
    from modules.probes.robustness import black
    mean, std = torch.tensor([125.3, 123.0, 113.9]), torch.tensor([63.0, 62.1, 66.7])   # 0-255 units, CIFAR-10's
    fill = black(mean, std)
    assert torch.allclose(fill * std + mean, torch.zeros(3), atol=1e-4)                # black again once un-normalised
    images = _images(c=3)
    dropped = drop_patches(images, PATCH, 1.0, _gen(), fill=fill)
    assert all(torch.equal(dropped[:, c], torch.full_like(dropped[:, c], fill[c].item())) for c in range(3))
    moved = shift(images, 2, 0, fill=fill)
    assert all(torch.equal(moved[:, c, :, :2], torch.full_like(moved[:, c, :, :2], fill[c].item())) for c in range(3))
    assert torch.equal(moved[..., 2:], images[..., :-2])
    with pytest.raises(ValueError, match=r"fill of shape \(2,\): allowed a number or \(3,\), one per channel"):
        drop_patches(images, PATCH, 0.5, _gen(), fill=torch.zeros(2))


# ---------------- everything at once ----------------
def test_robustness_curves_known_answers_and_batching():
    model, images, labels = _circular_model().double(), _images(n=30).double(), _labels(30)
    model.train()
    black = torch.tensor([-0.8], dtype=torch.float64)
    small = robustness_curves(model, images, labels, PATCH, _gen(11), black_pixel=black, batch_size=7)
    assert model.training                                                      # flag restored
    assert robustness_curves(model, images, labels, PATCH, _gen(11), black_pixel=black) == small  # batching changes nothing
    assert small["fill"] == "black" and small["fill_value"] == [-0.8]
    json.dumps(small)
    clean = _clean_accuracy(model, images, labels)
    assert small["clean_accuracy"] == clean
    assert small["drop_fractions"] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    assert small["patchdrop_accuracy"][0] == clean
    assert small["shuffle_grids"] == [1, 2, 4, 7] and small["shuffle_accuracy"][0] == clean
    assert small["shifts"] == list(range(9)) and small["shift_accuracy"][0] == clean
    assert small["shift_is_patch_multiple"] == [True, False, False, False, True, False, False, False, True]
    assert small["shift_accuracy_circular"] == [clean] * 9                     # invariant to circular shifts
    assert small["shift_consistency_circular"] == 1.0 and small["max_shift"] == PATCH
    lengths = {len(small[k]) for k in ("drop_fractions", "patchdrop_accuracy")}
    assert lengths == {10}


class _OneClass(nn.Module):
    """Answers class `c` for every image: what an untrained or collapsed model can do."""

    def __init__(self, c: int, classes: int = 10):
        super().__init__()
        self.c, self.classes, self.w = c, classes, nn.Parameter(torch.zeros(1))

    def forward(self, x):
        out = torch.zeros(x.shape[0], self.classes) + self.w
        out[:, self.c] = 1.0
        return out


def test_the_curves_record_chance_and_a_model_answering_one_class():
    from modules.probes.robustness import majority_rate, robustness_curves
    labels = torch.tensor([3] * 27 + [0] * 10 + [1] * 3)  # 40 images, 27 of class 3: chance is 0.675
    images = torch.rand(40, 1, 8, 8)
    assert majority_rate(labels) == pytest.approx(27 / 40)
    r = robustness_curves(_OneClass(3), images, labels, 4, torch.Generator().manual_seed(0),
                          drop_fractions=[0.0, 0.5], shuffle_grids=[1], shifts=[0], black_pixel=torch.zeros(1))
    assert r["majority_rate"] == pytest.approx(0.675) and r["clean_accuracy"] == pytest.approx(0.675)
    assert r["patchdrop_top_share"] == [1.0, 1.0] and r["patchdrop_accuracy"] == pytest.approx([0.675, 0.675])
    json.dumps(r)
