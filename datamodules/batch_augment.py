"""Augmentation and normalisation of whole uint8 batches with tensor ops, on the batch's device.

Order: crop + flip (uint8) -> RandAugment (uint8) -> float + normalise -> Random Erasing -> MixUp/CutMix.
Validation and test batches only get normalised. Every random draw comes from the loader's
generator `g` (RandAugment, Random Erasing and MixUp draw from the global RNGs, which are seeded
from `g` around them and then restored), so a batch is a function of `g` alone: that is what lets
a run resume exactly, and keeps the model's own random draws (stochastic depth) apart.
"""
from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

import torch
import torch.nn.functional as F
from torchvision.transforms import v2


@dataclass
class AugmentConfig:
    crop_padding: int = 0          # random crop of the zero-padded image; 0 = off
    hflip: bool = False
    randaugment: bool = False      # torchvision RandAugment(num_ops=2, magnitude=9)
    randaugment_group: int = 16    # images sharing one draw of ops (v2 draws once per call)
    random_erasing: float = 0.0    # probability per image (timm RandomErasing)
    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0


class BatchAugment:
    def __init__(self, cfg: AugmentConfig, mean: torch.Tensor, std: torch.Tensor, num_classes: int):
        self.cfg = cfg
        self.mean = mean.view(1, -1, 1, 1).float()  # (1, C, 1, 1), in [0, 255] units
        self.std = std.view(1, -1, 1, 1).float()
        self.num_classes = num_classes
        self._randaugment = v2.RandAugment(num_ops=2, magnitude=9) if cfg.randaugment else None
        self._erasing = self._mixup = None
        if cfg.random_erasing > 0:
            from timm.data.random_erasing import RandomErasing
            self._erasing = RandomErasing(cfg.random_erasing, mode="pixel", device="cpu")
        if cfg.mixup_alpha > 0 or cfg.cutmix_alpha > 0:
            from timm.data import Mixup
            # label smoothing stays in the training recipe (the loss), not here
            self._mixup = Mixup(mixup_alpha=cfg.mixup_alpha, cutmix_alpha=cfg.cutmix_alpha,
                                label_smoothing=0.0, num_classes=num_classes)

    @property
    def soft_targets(self) -> bool:
        return self._mixup is not None

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """uint8 (B, C, H, W) -> normalised float32."""
        return x.float().sub_(self.mean.to(x.device)).div_(self.std.to(x.device))

    def train(self, x: torch.Tensor, y: torch.Tensor, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 (B, C, H, W), int64 (B,) -> float32 (B, C, H, W), int64 (B,) or soft (B, classes)."""
        cfg = self.cfg
        x = geometry(x, cfg.crop_padding, geometry_draws(cfg, x.shape[0], g))
        if self._randaugment is not None:
            with global_rng_from(g):
                x = torch.cat([self._randaugment(chunk) for chunk in x.split(cfg.randaugment_group)])
        x = self.normalize(x)
        if self._erasing is not None:
            self._erasing.device = x.device
            with global_rng_from(g):
                x = self._erasing(x)
        if self._mixup is not None:
            with global_rng_from(g):
                x, y = self._mixup(x, y)
        return x, y


@contextmanager
def global_rng_from(g: torch.Generator):
    """torch's (CPU and current CUDA device), numpy's and Python's global RNGs seeded from `g`
    inside the block, and restored to their previous states after it."""
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=g, device=g.device))
    numpy_state, python_state = np.random.get_state(), random.getstate()
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        try:
            yield
        finally:
            np.random.set_state(numpy_state)
            random.setstate(python_state)


def geometry_draws(cfg: AugmentConfig, batch: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """The random numbers of the crop and the flip of `batch` images, drawn from `g` in the order
    BatchAugment.train draws them: crop offsets dy, dx (B,) (with crop_padding), flip (B,) bool (with
    hflip). Apart from geometry() so that a compiled step can take them as inputs (a draw with a
    generator= argument breaks torch.compile's graph)."""
    draws = {}
    if cfg.crop_padding:
        for k in ("dy", "dx"):
            draws[k] = torch.randint(0, 2 * cfg.crop_padding + 1, (batch,), generator=g, device=g.device)
    if cfg.hflip:
        draws["flip"] = torch.rand(batch, generator=g, device=g.device) < 0.5
    return draws


def geometry(x: torch.Tensor, padding: int, draws: dict[str, torch.Tensor]) -> torch.Tensor:
    """The crop (when draws has dy, dx) and the horizontal flip (when it has flip) of uint8 (B, C, H, W)."""
    if "dy" in draws:
        x = crop_at(x, padding, draws["dy"], draws["dx"])
    if "flip" in draws:
        x = torch.where(draws["flip"][:, None, None, None], x.flip(3), x)
    return x


def random_crop(x: torch.Tensor, padding: int, g: torch.Generator) -> torch.Tensor:
    """Per-image random crop of the zero-padded batch: (B, C, H, W) -> same shape."""
    d = geometry_draws(AugmentConfig(crop_padding=padding), x.shape[0], g)
    return crop_at(x, padding, d["dy"], d["dx"])


def crop_at(x: torch.Tensor, padding: int, dy: torch.Tensor, dx: torch.Tensor) -> torch.Tensor:
    """The crops of the zero-padded batch at offsets dy, dx (B,), by one gather: (B, C, H, W) -> same shape."""
    B, C, H, W = x.shape
    Wp = W + 2 * padding
    padded = F.pad(x, (padding,) * 4).view(B, C, -1)                  # (B, C, Hp * Wp)
    dy, dx = dy.view(B, 1, 1), dx.view(B, 1, 1)
    rows = dy + torch.arange(H, device=x.device).view(1, H, 1)          # (B, H, 1)
    cols = dx + torch.arange(W, device=x.device).view(1, 1, W)          # (B, 1, W)
    flat = (rows * Wp + cols).view(B, 1, H * W).expand(B, C, H * W)     # positions in the padded image
    return padded.gather(2, flat).view(B, C, H, W)
