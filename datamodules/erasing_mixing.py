"""Random Erasing (Zhong et al. 2020) and MixUp / CutMix (Zhang et al. 2018; Yun et al. 2019) on
whole batches, as timm defines them: RandomErasing(mode="pixel") erases one box of normal noise per
image (area 2-33% of the image, aspect 0.3-3.3, up to 10 tries to fit it); Mixup(mode="batch")
pairs each image with the batch's reversed order, one lambda per batch, CutMix or MixUp with
probability 1/2 when both are on, CutMix's lambda corrected to the box's area, targets one-hot mixed.

timm draws these with Python's and numpy's RNGs inside the call, image by image; here every random
number is a function of counter_rng's words, drawn for a batch (or a packed group's batches) at once
(`erasing_draws`, `mixing_draws`), and the ops are static-shape tensor ops: no host read, so they
compile into a training step's graph (modules.packed_step).
"""
from __future__ import annotations

import math

import torch

from .counter_rng import below, normal, uniform

ERASE_AREA = (0.02, 1 / 3)                                  # timm RandomErasing: min_area, max_area
ERASE_LOG_ASPECT = (math.log(0.3), math.log(1 / 0.3))      # its min_aspect 0.3, max_aspect 1 / 0.3
ERASE_TRIES = 10
ERASE_WORDS = 3 + 2 * ERASE_TRIES        # per image: the gate, each try's area and aspect, the corner's 2
SWITCH_PROB = 0.5   # timm Mixup: CutMix rather than MixUp, when both alphas are set
GAMMA_TRIES = 16
GAMMA_WORDS = 2 * GAMMA_TRIES + 1        # a try's normal and uniform, U for a < 1
MIX_WORDS = 3 + 4 * GAMMA_WORDS          # per batch: the switch, the centre's 2, 4 Gamma draws


def erasing_draws(probability: torch.Tensor, w: torch.Tensor, noise: torch.Tensor, shape: tuple) -> dict:
    """Each image's box {erase, erase_top, erase_left, erase_h, erase_w (..., B)} and erase_noise
    (..., B, C, H, W) float32 (its pixels), for images of `shape` (C, H, W), from words w (..., B,
    ERASE_WORDS) and noise (..., B * C * H * W rounded up to even); probability (...,) per member."""
    C, H, W = shape
    T = ERASE_TRIES
    erase = uniform(w[..., 0]) < probability[..., None]          # timm: skipped when random() > p
    lo, hi = ERASE_AREA
    area = H * W * (lo + (hi - lo) * uniform(w[..., 1:1 + T]))
    a, b = ERASE_LOG_ASPECT
    aspect = torch.exp(a + (b - a) * uniform(w[..., 1 + T:1 + 2 * T]))
    h, w_ = torch.round(torch.sqrt(area * aspect)).long(), torch.round(torch.sqrt(area / aspect)).long()
    fits = (h < H) & (w_ < W)
    first = fits.long().argmax(-1, keepdim=True)                 # the first try whose box fits
    h, w_ = h.gather(-1, first)[..., 0], w_.gather(-1, first)[..., 0]
    top = below(w[..., -2], (H - h + 1).clamp(min=1))              # uniform over 0..H - h
    left = below(w[..., -1], (W - w_ + 1).clamp(min=1))
    pixels = normal(noise)[..., :w.shape[-2] * C * H * W].view(*w.shape[:-1], C, H, W)
    return {"erase": erase & fits.any(-1), "erase_top": top, "erase_left": left, "erase_h": h, "erase_w": w_,
            "erase_noise": pixels}


def erase(x: torch.Tensor, d: dict) -> torch.Tensor:
    """Normalised (B, C, H, W): each image's box replaced by the top-left h x w corner of its noise."""
    B, C, H, W = x.shape
    rows = torch.arange(H, device=x.device).view(1, H, 1)
    cols = torch.arange(W, device=x.device).view(1, 1, W)
    top, left, h, w = (d[k].view(B, 1, 1) for k in ("erase_top", "erase_left", "erase_h", "erase_w"))
    box = (rows >= top) & (rows < top + h) & (cols >= left) & (cols < left + w) & d["erase"].view(B, 1, 1)
    at = ((rows - top).clamp(0, H - 1) * W + (cols - left).clamp(0, W - 1)).view(B, 1, H * W)  # noise pixel
    patch = d["erase_noise"].view(B, C, H * W).gather(2, at.expand(B, C, H * W)).view(B, C, H, W)
    return torch.where(box[:, None], patch.to(x.dtype), x)


def mixing_draws(mixup_alpha: torch.Tensor, cutmix_alpha: torch.Tensor, w: torch.Tensor, shape: tuple) -> dict:
    """One batch's {mix_lam (...) float32, mix_cut (...) bool, mix_box (..., 4) int64: rows yl:yh,
    columns xl:xh} for images of `shape` (H, W), from words w (..., MIX_WORDS), alphas (...,) per
    member (0: that method off; both 0: lambda 1, the images unchanged): lambda ~ Beta(alpha, alpha)
    of the chosen method, CutMix's box centred uniformly and clipped (timm's rand_bbox), its lambda
    corrected to the box's area."""
    H, W = shape
    mixup, cutmix = mixup_alpha > 0, cutmix_alpha > 0
    cut = torch.where(mixup & cutmix, uniform(w[..., 0]) < SWITCH_PROB, cutmix)
    g = w[..., 3:].unflatten(-1, (2, 2, GAMMA_WORDS))            # (MixUp's, CutMix's) Beta, each 2 Gammas
    lam_mix = torch.where(mixup, beta(mixup_alpha, g[..., 0, :, :]), 1.0)
    lam_cut = torch.where(cutmix, beta(cutmix_alpha, g[..., 1, :, :]), 1.0)
    lam = torch.where(cut, lam_cut, lam_mix)
    box, boxed = cutmix_box(lam, below(w[..., 1], H), below(w[..., 2], W), H, W)   # centre: uniform row, column
    return {"mix_lam": torch.where(cut, boxed, lam), "mix_cut": cut, "mix_box": box}


def cutmix_box(lam: torch.Tensor, cy: torch.Tensor, cx: torch.Tensor, H: int, W: int):
    """timm's cutmix_bbox_and_lam (rand_bbox, correct_lam): the box (yl, yh, xl, xh) of sides
    sqrt(1 - lam) of the image's, centred at (cy, cx) and clipped, and lambda corrected to 1 - its area."""
    ratio = torch.sqrt(1 - lam.double())
    cut_h, cut_w = (H * ratio).floor().long(), (W * ratio).floor().long()
    yl, yh = (cy - cut_h // 2).clamp(0, H), (cy + (cut_h + 1) // 2).clamp(0, H)   # an odd side: 1 more below
    xl, xh = (cx - cut_w // 2).clamp(0, W), (cx + (cut_w + 1) // 2).clamp(0, W)
    return torch.stack([yl, yh, xl, xh], -1), (1 - (yh - yl) * (xh - xl) / (H * W)).float()


def mix(x: torch.Tensor, y: torch.Tensor, d: dict, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x (..., B, C, H, W) float, y (..., B) labels or (..., B, classes) soft, and mixing_draws per
    batch (mix_lam (...), mix_cut (...), mix_box (..., 4)) -> mixed x, soft targets (..., B, classes).
    Each image is mixed with the one at the mirrored place of its batch (timm's x.flip(0))."""
    H, W = x.shape[-2:]
    lead = d["mix_lam"].shape                                   # (...): one draw per batch
    lam = d["mix_lam"].to(x.dtype).view(*lead, 1, 1, 1, 1)
    flipped = x.flip(-4)
    blended = x * lam + flipped * (1 - lam)
    yl, yh, xl, xh = (t.view(*lead, 1, 1, 1, 1) for t in d["mix_box"].unbind(-1))
    rows = torch.arange(H, device=x.device).view(H, 1)
    cols = torch.arange(W, device=x.device).view(1, W)
    box = (rows >= yl) & (rows < yh) & (cols >= xl) & (cols < xh)   # (..., 1, 1, H, W)
    x = torch.where(d["mix_cut"].view(*lead, 1, 1, 1, 1), torch.where(box, flipped, x), blended)
    if y.ndim == len(lead) + 1:  # labels -> one-hot, by scatter (F.one_hot checks the range on the host)
        y = torch.zeros(*y.shape, num_classes, device=y.device).scatter_(-1, y[..., None], 1.0)
    lam_y = d["mix_lam"].to(y.dtype).view(*lead, 1, 1)
    return x, y * lam_y + y.flip(-2) * (1 - lam_y)


def beta(alpha: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Beta(alpha, alpha) (...,) float32 from words w (..., 2, GAMMA_WORDS): X / (X + Y) of two
    Gamma(alpha) draws."""
    xy = gamma(alpha[..., None], w)
    return xy[..., 0] / (xy[..., 0] + xy[..., 1])


def gamma(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Gamma(a, 1) (...,) float32 from words w (..., GAMMA_WORDS) by Marsaglia and Tsang's method
    (2000) with a fixed number of tries, vectorised: GAMMA_TRIES candidates, the first accepted kept.
    Each is accepted with probability > 0.95 at a >= 1, so all 16 fail with probability < 0.05^16 <
    2e-21 (then the first candidate is kept); for a < 1, Gamma(a + 1) * U^(1/a). Where a <= 0 (a
    member without the stage) the draw is of Gamma(1), for the caller to discard."""
    T = GAMMA_TRIES
    a = torch.where(a > 0, a, 1.0)
    boost = a < 1
    d = torch.where(boost, a + 1, a)[..., None] - 1 / 3
    c = 1 / torch.sqrt(9 * d)
    z, u = normal(w[..., :T]), uniform(w[..., T:2 * T])
    v = (1 + c * z) ** 3
    accept = (v > 0) & (torch.log(u) < 0.5 * z * z + d - d * v + d * torch.log(v.clamp(min=1e-30)))
    first = accept.long().argmax(-1, keepdim=True)
    sample = (d * v).gather(-1, first)[..., 0].clamp(min=1e-30)
    return torch.where(boost, sample * (1 - uniform(w[..., 2 * T])) ** (1 / a), sample)
