"""Robustness probes: how a classifier's top-1 answer survives translation, patch shuffling and
patch dropping (the inductive-bias experiment, issue #9).

- shift consistency (Zhang 2019, "Making Convolutional Networks Shift-Invariant Again"): how often
  two randomly shifted copies of an image get the same class;
- accuracy under a diagonal shift of s pixels, with shifts that are multiples of the patch size
  marked apart (a ViT with patch 4 sees a circular 4-pixel shift as a permutation of whole patches);
- patch shuffling and PatchDrop (Naseer et al. 2021, "Intriguing Properties of Vision
  Transformers"): accuracy when the image's grid cells are permuted, or a fraction of its patches
  are blanked.

Images are NORMALISED float tensors (N, C, H, W). A blanked or uncovered pixel takes `fill`: a number,
or one per channel ((C,)). The suite's probes (robustness_curves, which records it) fill black, a
pixel of 0 before normalisation (`black(mean, std)`), as Naseer et al. zero their [0, 1] images before
normalising; a single probe function called on its own fills with its `fill` argument (default 0.0); on Fashion-MNIST
black is also the background, so a blanked cell removes what it covered and adds nothing. A fill of
0.0 would be the dataset's mean colour (normalisation subtracts it): on a black background a grey
square of its own, which a model reads as content (on 295 images it reversed ViT's and the
ResNet's order under PatchDrop against the black fill: docs/history.md, "PatchDrop's fill").
Models are plain nn.Modules returning logits; they run in eval mode under torch.no_grad, in batches
(default 500 images) on the model's device, and get their train/eval flag back afterwards. Every
random draw comes from the caller's torch.Generator (drawn on the generator's device), so a seeded
generator gives the same answer every time.
"""
from __future__ import annotations

from numbers import Integral
from typing import Iterable, Sequence

import torch
from torch import nn

BATCH = 500  # images per forward pass: bounds activation memory on 10k-image test sets
DROP_FRACTIONS = tuple(round(i / 10, 1) for i in range(10))  # PatchDrop's information loss 0 .. 0.9


FILL = "black"  # what a probe record says its blanked pixels were (probes.json: robustness.fill)


def black(mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """(C,): a pixel of 0 (black) in normalised space, for a dataset normalised by per-channel mean
    and std in the same units as its pixels."""
    return (0 - mean.float()) / std.float()


def _filled(fill, images: torch.Tensor):
    """`fill` broadcastable against (N, C, H, W): a number as it is, one per channel as (1, C, 1, 1)."""
    if isinstance(fill, torch.Tensor):
        if fill.ndim != 1 or fill.shape[0] != images.shape[1]:
            raise ValueError(f"fill of shape {tuple(fill.shape)}: allowed a number or ({images.shape[1]},), one per channel")
        return fill.to(images.device, images.dtype).view(1, -1, 1, 1)
    return float(fill)


# ---------------- checks ----------------
def _check_images(images: torch.Tensor) -> None:
    if images.ndim != 4 or images.shape[0] == 0:
        raise ValueError(f"images of shape {tuple(images.shape)}: allowed (N, C, H, W) with N >= 1")


def _check_labels(images: torch.Tensor, labels: torch.Tensor) -> None:
    if labels.shape != (images.shape[0],):
        raise ValueError(f"labels of shape {tuple(labels.shape)}: allowed ({images.shape[0]},), one per image")


def _check_divides(images: torch.Tensor, step: int, what: str) -> None:
    h, w = images.shape[-2:]
    if not isinstance(step, Integral) or step < 1 or h % step or w % step:
        raise ValueError(f"{what}={step!r} does not divide the {h}x{w} image: allowed a positive integer dividing "
                         f"both H and W")


def _check_count(value: int, what: str, low: int = 1) -> None:
    if not isinstance(value, Integral) or value < low:
        raise ValueError(f"{what}={value!r}: allowed an integer >= {low}")


# ---------------- evaluation ----------------
def _device(model: nn.Module, images: torch.Tensor) -> torch.device:
    param = next(model.parameters(), None)
    return images.device if param is None else param.device


@torch.no_grad()
def predict(model: nn.Module, images: torch.Tensor, batch_size: int = BATCH) -> torch.Tensor:
    """Top-1 classes (N,) on the CPU, in eval mode, batch_size images per forward pass."""
    _check_images(images)
    _check_count(batch_size, "batch_size")
    device, was_training = _device(model, images), model.training
    model.eval()
    try:
        preds = [model(chunk.to(device)).argmax(-1).cpu() for chunk in images.split(batch_size)]  # (b,) each
    finally:
        model.train(was_training)
    return torch.cat(preds) if preds else torch.zeros(0, dtype=torch.long)


def _accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, batch_size: int) -> float:
    _check_labels(images, labels)
    return (predict(model, images, batch_size) == labels.cpu()).float().mean().item()


def _draw(generator: torch.Generator, low: int, high: int, shape: tuple[int, ...]) -> torch.Tensor:
    """Integers in [low, high], drawn on the generator's device (a CPU generator cannot fill a GPU tensor)."""
    return torch.randint(low, high + 1, shape, generator=generator, device=generator.device)


def _random_order(generator: torch.Generator, n: int, k: int, device: torch.device) -> torch.Tensor:
    """(n, k): an independent random permutation of range(k) per row."""
    return torch.rand(n, k, generator=generator, device=generator.device).argsort(1).to(device)


# ---------------- translation ----------------
def _per_image(d, n: int, device: torch.device, what: str) -> torch.Tensor:
    """An int or an (N,) integer tensor -> (N,) long on `device`."""
    d = torch.as_tensor(d, device=device)
    if d.is_floating_point() or d.is_complex() or d.ndim > 1 or (d.ndim == 1 and d.shape[0] != n):
        raise ValueError(f"{what} of dtype {d.dtype} and shape {tuple(d.shape)}: allowed an int or ({n},) integers")
    return d.long().expand(n)


def shift(images: torch.Tensor, dx, dy, circular: bool = False, fill=0.0) -> torch.Tensor:
    """Translate each image by (dx, dy) whole pixels: positive dx moves content right, positive dy down
    (torch.roll's sign). dx, dy: ints, or (N,) integer tensors for a shift per image.
    circular: wrap around (exactly torch.roll(images, (dy, dx), (-2, -1)) per image); otherwise the
    uncovered border is `fill` (a number, or (C,): see the module's docstring)."""
    _check_images(images)
    n, c, h, w = images.shape
    dx, dy = _per_image(dx, n, images.device, "dx"), _per_image(dy, n, images.device, "dy")
    # output pixel (y, x) reads input pixel (y - dy, x - dx)
    rows = torch.arange(h, device=images.device) - dy[:, None]        # (N, H) source row per output row
    cols = torch.arange(w, device=images.device) - dx[:, None]        # (N, W) source column per output column
    out = images.gather(2, (rows % h)[:, None, :, None].expand(n, c, h, w))   # rows moved
    out = out.gather(3, (cols % w)[:, None, None, :].expand(n, c, h, w))      # then columns
    if circular:
        return out
    inside = ((rows >= 0) & (rows < h))[:, None, :, None] & ((cols >= 0) & (cols < w))[:, None, None, :]  # (N,1,H,W)
    return torch.where(inside, out, _filled(fill, images))


def shift_consistency(model: nn.Module, images: torch.Tensor, max_shift: int, generator: torch.Generator,
                      circular: bool = False, trials: int = 1, *, fill=0.0, batch_size: int = BATCH) -> float:
    """Zhang 2019's consistency: per image draw two shifts (dx1, dy1), (dx2, dy2) uniformly in
    [-max_shift, max_shift]^2; the fraction of images whose two shifted copies get the same top-1 class,
    averaged over `trials` independent draws."""
    _check_images(images)
    _check_count(max_shift, "max_shift", low=0)
    _check_count(trials, "trials")
    n, agree = images.shape[0], 0.0
    for _ in range(trials):
        dx1, dy1, dx2, dy2 = _draw(generator, -max_shift, max_shift, (4, n)).to(images.device)  # (N,) each
        first = predict(model, shift(images, dx1, dy1, circular, fill), batch_size)
        second = predict(model, shift(images, dx2, dy2, circular, fill), batch_size)
        agree += (first == second).float().mean().item()
    return agree / trials


def accuracy_under_shift(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, shifts: Iterable[int],
                         circular: bool = False, *, fill=0.0, batch_size: int = BATCH) -> dict[int, float]:
    """{s: accuracy with every image shifted by s pixels in x and in y (diagonally)}; s = 0 is clean."""
    return {int(s): _accuracy(model, shift(images, int(s), int(s), circular, fill), labels, batch_size)
            for s in shifts}


def patch_multiple(shifts: Iterable[int], patch: int) -> dict[int, bool]:
    """{s: whether s is a multiple of the patch size} (0 counts: it moves no patch boundary)."""
    _check_count(patch, "patch")
    return {int(s): int(s) % patch == 0 for s in shifts}


# ---------------- patch shuffling ----------------
def shuffle_patches(images: torch.Tensor, grid: int, generator: torch.Generator) -> torch.Tensor:
    """Cut each image into grid x grid cells of (H/grid, W/grid) pixels, put the cells in a random
    order (a different permutation per image) and reassemble, row-major. grid 1 is the identity."""
    _check_images(images)
    _check_divides(images, grid, "grid")
    n, c, h, w = images.shape
    ch, cw = h // grid, w // grid
    cells = images.reshape(n, c, grid, ch, grid, cw).permute(0, 2, 4, 1, 3, 5)   # (N, g, g, C, ch, cw)
    cells = cells.reshape(n, grid * grid, c, ch, cw)                               # (N, g*g, C, ch, cw)
    order = _random_order(generator, n, grid * grid, images.device)               # (N, g*g)
    cells = cells.gather(1, order[:, :, None, None, None].expand_as(cells))       # cell k <- cell order[k]
    cells = cells.reshape(n, grid, grid, c, ch, cw).permute(0, 3, 1, 4, 2, 5)     # (N, C, g, ch, g, cw)
    return cells.reshape(n, c, h, w)


def patch_shuffle_accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, grid: int,
                           generator: torch.Generator, draws: int = 1, *, batch_size: int = BATCH) -> float:
    """Accuracy on grid x grid shuffled images (Naseer et al. 2021), averaged over `draws` shuffles."""
    _check_count(draws, "draws")
    return sum(_accuracy(model, shuffle_patches(images, grid, generator), labels, batch_size)
               for _ in range(draws)) / draws


# ---------------- PatchDrop ----------------
def drop_patches(images: torch.Tensor, patch: int, fraction: float, generator: torch.Generator,
                 fill=0.0) -> torch.Tensor:
    """Set round(fraction * P) of each image's P = (H/patch)(W/patch) patches to `fill` (a number, or
    (C,): see the module's docstring), a random choice per image. round is Python's (half to even:
    24.5 -> 24). fraction in [0, 1]."""
    _check_images(images)
    _check_divides(images, patch, "patch")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction={fraction!r}: allowed a number in [0, 1]")
    n, _, h, w = images.shape
    gh, gw = h // patch, w // patch
    k = round(fraction * gh * gw)
    order = _random_order(generator, n, gh * gw, images.device)          # (N, P) a random order per image
    dropped = torch.zeros(n, gh * gw, dtype=torch.bool, device=images.device)
    dropped.scatter_(1, order[:, :k], True)                               # (N, P) exactly k True per row
    mask = dropped.reshape(n, 1, gh, 1, gw, 1).expand(n, 1, gh, patch, gw, patch).reshape(n, 1, h, w)
    return torch.where(mask, _filled(fill, images), images)


def majority_rate(labels: torch.Tensor) -> float:
    """The share of the most frequent class among the labels: the accuracy of always answering it."""
    return torch.bincount(labels.cpu().long()).max().item() / max(1, labels.numel())


def top_class_share(preds: torch.Tensor) -> float:
    """The share of the images given the most frequent predicted class (1.0: one class for every image)."""
    return torch.bincount(preds.long()).max().item() / max(1, preds.numel())


def patchdrop(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, patch: int, fraction: float,
              generator: torch.Generator, draws: int = 3, *, fill=0.0, batch_size: int = BATCH) -> tuple[float, float]:
    """(accuracy, top-class share of the predictions) with a fraction of the patches blanked
    (PatchDrop, Naseer et al. 2021), each averaged over draws."""
    _check_count(draws, "draws")
    _check_labels(images, labels)
    acc = share = 0.0
    for _ in range(draws):
        preds = predict(model, drop_patches(images, patch, fraction, generator, fill), batch_size)
        acc += (preds == labels.cpu()).float().mean().item()
        share += top_class_share(preds)
    return acc / draws, share / draws


def patchdrop_accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, patch: int, fraction: float,
                       generator: torch.Generator, draws: int = 3, *, fill=0.0, batch_size: int = BATCH) -> float:
    """Accuracy with a fraction of the patches blanked (PatchDrop, Naseer et al. 2021), averaged over draws."""
    return patchdrop(model, images, labels, patch, fraction, generator, draws, fill=fill, batch_size=batch_size)[0]


# ---------------- everything at once ----------------
def default_grids(images: torch.Tensor, patch: int) -> tuple[int, ...]:
    """1, 2, 4 and the patch grid (7 at 28x28 / patch 4, 8 at 32x32), those that divide H and W."""
    h, w = images.shape[-2:]
    return tuple(sorted({g for g in (1, 2, 4, h // patch) if g >= 1 and h % g == 0 and w % g == 0}))


def robustness_curves(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, patch: int,
                      generator: torch.Generator, drop_fractions: Sequence[float] = DROP_FRACTIONS,
                      shuffle_grids: Sequence[int] | None = None, shifts: Sequence[int] | None = None,
                      max_shift: int | None = None, *, black_pixel: torch.Tensor, trials: int = 1,
                      drop_draws: int = 3, shuffle_draws: int = 1, batch_size: int = BATCH) -> dict:
    """Every probe above in one call, as JSON-ready lists and floats. black_pixel: (C,), black in the
    images' normalised space (`black`): what PatchDrop blanks with and a shift uncovers (the record's
    fill). Defaults: shuffle_grids = default_grids (1, 2, 4, 7 at 28x28 with patch 4), shifts = 0 ..
    2 * patch, max_shift = patch (two draws then differ by up to two patches). Shifts are reported
    black-filled and circular."""
    _check_images(images)
    _check_labels(images, labels)
    _check_divides(images, patch, "patch")
    grids = tuple(shuffle_grids) if shuffle_grids is not None else default_grids(images, patch)
    shifts = tuple(int(s) for s in (shifts if shifts is not None else range(2 * patch + 1)))
    max_shift = patch if max_shift is None else max_shift
    fractions = [float(f) for f in drop_fractions]
    kw = dict(batch_size=batch_size)
    fill = dict(fill=black_pixel)
    multiple = patch_multiple(shifts, patch)
    zero = accuracy_under_shift(model, images, labels, shifts, **fill, **kw)
    wrap = accuracy_under_shift(model, images, labels, shifts, circular=True, **kw)
    dropped = [patchdrop(model, images, labels, patch, f, generator, drop_draws, **fill, **kw) for f in fractions]
    return {
        "n_images": int(images.shape[0]),
        "patch": patch,
        "fill": FILL,  # the tables read PatchDrop and shifts only from records that blanked black
        "fill_value": [round(float(v), 6) for v in black_pixel],
        "majority_rate": majority_rate(labels),  # chance for these images: the tables correct accuracies by it
        "clean_accuracy": _accuracy(model, images, labels, batch_size),
        "drop_fractions": fractions,
        "patchdrop_accuracy": [acc for acc, _ in dropped],
        "patchdrop_top_share": [share for _, share in dropped],  # 1.0: the model answers one class for all
        "shuffle_grids": list(grids),
        "shuffle_accuracy": [patch_shuffle_accuracy(model, images, labels, g, generator, shuffle_draws, **kw)
                             for g in grids],
        "shifts": list(shifts),
        "shift_is_patch_multiple": [multiple[s] for s in shifts],
        "shift_accuracy": [zero[s] for s in shifts],
        "shift_accuracy_circular": [wrap[s] for s in shifts],
        "max_shift": max_shift,
        "shift_consistency": shift_consistency(model, images, max_shift, generator, trials=trials, **fill, **kw),
        "shift_consistency_circular": shift_consistency(model, images, max_shift, generator, circular=True,
                                                        trials=trials, **kw),
    }
