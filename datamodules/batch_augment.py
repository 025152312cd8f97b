"""Augmentation and normalisation of whole uint8 batches with tensor ops, on the batch's device.

Order: crop + flip (uint8) -> RandAugment (uint8) -> float + normalise -> Random Erasing -> MixUp/CutMix.
Validation and test batches only get normalised. A training batch is augmented in two halves:
`draws` takes every random number from the loader's generator `g` (on the batch's device: no host
read), `apply` is tensor ops of fixed shape on them. So a batch is a function of `g` alone (a run
resumes exactly, and the model's own random draws, stochastic depth, stay apart), and a step that
augments for itself (modules.packed_step) takes the draws as inputs and compiles `apply` into its
graph (a draw with generator= breaks torch.compile's graph).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .erasing_mixing import erase, erasing_draws, mix, mixing_draws
from .randaugment import randaugment, randaugment_draws


@dataclass
class AugmentConfig:
    crop_padding: int = 0          # random crop of the zero-padded image; 0 = off
    hflip: bool = False
    randaugment: bool = False      # torchvision's RandAugment (num_ops 2, magnitude 9), ops drawn per image
    random_erasing: float = 0.0    # probability per image (timm's RandomErasing, mode pixel)
    mixup_alpha: float = 0.0       # timm's Mixup, mode batch (label smoothing stays in the loss)
    cutmix_alpha: float = 0.0


# draws of a stage a member's variant leaves out, when members that use it share its batches
# (a packed group of the default and the strong variant): each leaves the images as they are
IDENTITY_DRAWS = {"ra_variant": 0, "erase": False, "erase_top": 0, "erase_left": 0, "erase_h": 0, "erase_w": 0,
                  "erase_noise": 0.0, "mix_lam": 1.0, "mix_cut": False, "mix_box": 0}
PER_BATCH = ("mix_lam", "mix_cut", "mix_box")   # one draw per batch; the other draws are per image


class BatchAugment:
    def __init__(self, cfg: AugmentConfig, mean: torch.Tensor, std: torch.Tensor, num_classes: int):
        self.cfg = cfg
        self.mean = mean.view(1, -1, 1, 1).float()  # (1, C, 1, 1), in [0, 255] units
        self.std = std.view(1, -1, 1, 1).float()
        self.num_classes = num_classes

    @property
    def soft_targets(self) -> bool:
        return self.cfg.mixup_alpha > 0 or self.cfg.cutmix_alpha > 0

    def to(self, device: torch.device) -> "BatchAugment":
        """Keep the normalisation's mean and std on `device` (not copied there again per batch)."""
        self.mean, self.std = self.mean.to(device), self.std.to(device)
        return self

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """uint8 (B, C, H, W) -> normalised float32."""
        if self.mean.device != x.device:
            self.to(x.device)
        return (x.float() - self.mean) / self.std

    def train(self, x: torch.Tensor, y: torch.Tensor, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 (B, C, H, W), int64 (B,) -> float32 (B, C, H, W), int64 (B,) or soft (B, classes)."""
        return self.apply(x, y, self.draws(len(y), tuple(x.shape[1:]), g))

    def draws(self, batch: int, shape: tuple[int, int, int], g: torch.Generator) -> dict[str, torch.Tensor]:
        """Every random number of a batch of `batch` images of `shape` (C, H, W), from `g`, in a
        fixed order: geometry_draws, then per image RandAugment's ops (ra_variant (B, 2)) and Random
        Erasing's box (erase_*), then per batch MixUp/CutMix's (mix_*); only the variant's stages."""
        cfg = self.cfg
        d = geometry_draws(cfg, batch, g)
        if cfg.randaugment:
            d["ra_variant"] = randaugment_draws(batch, shape[1:], g)
        if cfg.random_erasing > 0:
            d.update(erasing_draws(cfg.random_erasing, batch, shape, g))
        if self.soft_targets:
            d.update(mixing_draws(cfg.mixup_alpha, cfg.cutmix_alpha, shape[1:], g))
        return d

    def apply(self, x: torch.Tensor, y: torch.Tensor, d: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 (..., B, C, H, W), labels (..., B) and their draws (per image (..., B, ...), per batch
        (..., ...)) -> normalised float32 (..., B, C, H, W) and labels, or soft targets (..., B, classes)
        when the draws mix. Leading dims: the members of a packed group, each with its own draws."""
        lead, image = x.shape[:-3], x.shape[-3:]
        per_image = {k: t.reshape(-1, *t.shape[len(lead):]) for k, t in d.items() if k not in PER_BATCH}
        x = geometry(x.reshape(-1, *image), self.cfg.crop_padding, per_image)
        if "ra_variant" in d:
            x = randaugment(x, per_image["ra_variant"])
        x = self.normalize(x)
        if "erase" in d:
            x = erase(x, per_image)
        x = x.view(*lead, *image)
        if "mix_lam" in d:
            x, y = mix(x, y, d, self.num_classes)
        return x, y


def member_draws(draws: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The draws of a packed group's members stacked (K, ...): a stage some members leave out gets
    IDENTITY_DRAWS for them (their images pass it unchanged, and their generators drew nothing for it)."""
    keys = dict.fromkeys(k for d in draws for k in d)
    like = {k: next(d[k] for d in draws if k in d) for k in keys}
    return {k: torch.stack([d[k] if k in d else torch.full_like(like[k], IDENTITY_DRAWS[k]) for d in draws])
            for k in keys}


def geometry_draws(cfg: AugmentConfig, batch: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """The random numbers of the crop and the flip of `batch` images, drawn from `g`: crop offsets
    dy, dx (B,) (with crop_padding), flip (B,) bool (with hflip)."""
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
