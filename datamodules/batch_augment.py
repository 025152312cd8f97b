"""Augmentation and normalisation of whole uint8 batches with tensor ops, on the batch's device.

Order: crop + flip (uint8) -> RandAugment (uint8) -> float + normalise -> Random Erasing -> MixUp/CutMix.
Validation and test batches only get normalised. A training batch is augmented in two halves:
the random numbers, then `apply`, tensor ops of fixed shape on them; nothing is read back to the
host, so a step that augments for itself (modules.packed_step) compiles `apply` into its graph.
The random numbers come from two sources, both a function of where the batch sits in the run (so a
run resumes exactly, and the model's own random draws, stochastic depth, stay apart):
- the crop and the flip (`draws`) from the loader's generator `g`: one per member of a packed group,
  drawn outside its step (a draw with generator= breaks torch.compile's graph);
- the strong stages (RandAugment, Random Erasing, MixUp/CutMix) from the counter-based generator
  datamodules.counter_rng, a pure function of (the run's seed, the batch's epoch and index, the
  stage): `apply` draws them itself from `strong_inputs` (the members' seeds and settings, (K,)
  tensors) and the batch's place, for every member of a packed group at once, inside its graph.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .counter_rng import words
from .erasing_mixing import ERASE_WORDS, MIX_WORDS, erase, erasing_draws, mix, mixing_draws
from .randaugment import NUM_OPS, randaugment, randaugment_draws, variants


@dataclass
class AugmentConfig:
    crop_padding: int = 0          # random crop of the zero-padded image; 0 = off
    hflip: bool = False
    randaugment: bool = False      # torchvision's RandAugment (num_ops 2, magnitude 9), ops drawn per image
    random_erasing: float = 0.0    # probability per image (timm's RandomErasing, mode pixel)
    mixup_alpha: float = 0.0       # timm's Mixup, mode batch (label smoothing stays in the loss)
    cutmix_alpha: float = 0.0


# the strong stages and their settings in AugmentConfig (a setting's default turns its stage off)
STRONG = {"randaugment": ("randaugment",), "erasing": ("random_erasing",), "mixing": ("mixup_alpha", "cutmix_alpha")}
GEOMETRY = ("dy", "dx", "flip")                 # the crop's and the flip's draws, from the loader's generator
PER_BATCH = ("mix_lam", "mix_cut", "mix_box")   # one draw per batch; the other draws are per image


class BatchAugment:
    def __init__(self, cfg: AugmentConfig, mean: torch.Tensor, std: torch.Tensor, num_classes: int):
        self.cfg = cfg
        self.mean = mean.view(1, -1, 1, 1).float()  # (1, C, 1, 1), in [0, 255] units
        self.std = std.view(1, -1, 1, 1).float()
        self.num_classes = num_classes

    def to(self, device: torch.device) -> "BatchAugment":
        """Keep the normalisation's mean and std on `device` (not copied there again per batch)."""
        self.mean, self.std = self.mean.to(device), self.std.to(device)
        return self

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """uint8 (B, C, H, W) -> normalised float32."""
        if self.mean.device != x.device:
            self.to(x.device)
        return (x.float() - self.mean) / self.std

    def train(self, x: torch.Tensor, y: torch.Tensor, g: torch.Generator, strong: dict, place: tuple[int, int]
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 (B, C, H, W), int64 (B,) -> float32 (B, C, H, W), int64 (B,) or soft (B, classes).
        strong: strong_inputs of this run ({} without strong stages); place: (epoch, batch of it)."""
        d = self.draws(len(y), g)
        if strong:
            d |= strong | {"place": torch.tensor(place, device=x.device)}
        return self.apply(x, y, d)

    def draws(self, batch: int, g: torch.Generator) -> dict[str, torch.Tensor]:
        """The crop and flip draws of a batch of `batch` images, from the loader's generator `g`."""
        return geometry_draws(self.cfg, batch, g)

    def apply(self, x: torch.Tensor, y: torch.Tensor, d: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 (..., B, C, H, W), labels (..., B) and their draws (crop and flip per image
        (..., B)), plus, with strong stages, strong_inputs (...,) and place -> normalised float32
        (..., B, C, H, W) and labels, or soft targets (..., B, classes) when a member mixes. Leading
        dims: the members of a packed group, each with its own draws."""
        lead, image = x.shape[:-3], x.shape[-3:]
        if "seed" in d:
            d = {k: t for k, t in d.items() if k in GEOMETRY} | strong_draws(d, lead, image)
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
    """The crop and flip draws of a packed group's members stacked (K, B)."""
    return {k: torch.stack([d[k] for d in draws]) for k in draws[0]}


def strong_inputs(cfgs: list[AugmentConfig], seeds: list[int], size: tuple[int, int], device) -> dict:
    """What the strong stages' random numbers of K members are a function of, besides the batch's
    place: their seeds and their settings of every strong stage some member uses, (K,) tensors on
    `device` ({} when none does; a member without a stage has its default, which leaves the images
    as they are). Computes RandAugment's variants for images of `size` (H, W) here, outside any trace."""
    stages = [s for s, names in STRONG.items() if any(getattr(c, n) for c in cfgs for n in names)]
    if not stages:
        return {}
    if "randaugment" in stages:
        variants(*size)
    return {"seed": torch.tensor(seeds, device=device),
            **{n: torch.tensor([float(getattr(c, n)) for c in cfgs], device=device) for s in stages for n in STRONG[s]}}


def strong_draws(d: dict, lead: tuple, shape: tuple) -> dict[str, torch.Tensor]:
    """The strong stages' random numbers of images (*lead, C, H, W) (lead: the members' dims, then
    the batch's) from counter_rng, for the stages whose settings `d` holds (strong_inputs, (K,) each,
    and place): one hash for all members and stages; a member's own settings (its stage off: the
    draws of no change). RandAugment's ra_variant, erasing's erase_*, mixing's mix_* (erasing_draws,
    mixing_draws), shaped as BatchAugment.apply reads them."""
    C, H, W = shape
    members, batch = lead[:-1], lead[-1]
    pixels = batch * C * H * W + batch * C * H * W % 2
    counts = {"randaugment": [(0, batch * NUM_OPS * 2)], "erasing": [(1, batch * ERASE_WORDS), (2, pixels)],
              "mixing": [(3, MIX_WORDS)]}
    stages = [s for s, names in STRONG.items() if names[0] in d]
    seed = d["seed"].reshape(-1)
    k, w = len(seed), iter(words(seed, d["place"], [c for s in stages for c in counts[s]]))
    setting = {n: d[n].reshape(-1) for s in stages for n in STRONG[s]}
    out = {}
    if "randaugment" in stages:
        variant = randaugment_draws(next(w).view(k, batch, NUM_OPS, 2), (H, W))
        out["ra_variant"] = torch.where(setting["randaugment"].view(k, 1, 1) > 0, variant, 0)
    if "erasing" in stages:
        boxes = next(w).view(k, batch, ERASE_WORDS)
        out |= erasing_draws(setting["random_erasing"], boxes, next(w), shape)
    if "mixing" in stages:
        out |= mixing_draws(setting["mixup_alpha"], setting["cutmix_alpha"], next(w), (H, W))
    return {n: t.reshape((*members, *t.shape[1:]) if n in PER_BATCH else (*lead, *t.shape[2:]))
            for n, t in out.items()}


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
