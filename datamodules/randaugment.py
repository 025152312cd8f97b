"""RandAugment (Cubuk et al. 2020) on whole uint8 batches, a pair of ops of its own per image.

torchvision's v2 RandAugment defines the ops, their magnitudes (num_ops 2, magnitude 9 of 31 bins,
nearest interpolation, fill 0) and computes each op; what differs is how the ops are chosen:
torchvision draws one pair per call, for the whole batch, and reads the draw on the host. Here
each image's ops are tensors on the batch's device, from counter_rng's words (`randaugment_draws`), and
`randaugment` runs each op slot as one grid_sample (every image by its own affine map: the shears,
translations and rotations, with torchvision's matrices) plus the 12 colour variants on the whole
batch, each image keeping its own: no host read and static shapes, so it compiles into a training
step's graph (modules.packed_step). tests/test_batch_augment.py holds every variant equal to
torchvision's op.
"""
from __future__ import annotations

import math

import torch
from torchvision.transforms.v2 import InterpolationMode, RandAugment
from torchvision.transforms.v2 import functional as F
from torchvision.transforms.v2.functional._geometry import (_affine_grid, _apply_grid_transform,
                                                            _get_inverse_affine_matrix)

from .counter_rng import below

NUM_OPS = 2          # ops applied one after the other to each image
MAGNITUDE = 9        # of NUM_BINS: torchvision's default
NUM_BINS = 31
_TORCHVISION = RandAugment(num_ops=NUM_OPS, magnitude=MAGNITUDE, num_magnitude_bins=NUM_BINS,
                           interpolation=InterpolationMode.NEAREST)
SPACE = _TORCHVISION._AUGMENTATION_SPACE   # op name -> (magnitudes(bins, H, W), signed), torchvision's order


GEOMETRIC = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")   # affine maps, nearest, fill 0
COLOUR = {  # the other ops: torchvision's image kernels, as its RandAugment calls them
    "Brightness": lambda x, m: F.adjust_brightness_image(x, brightness_factor=1.0 + m),
    "Color": lambda x, m: F.adjust_saturation_image(x, saturation_factor=1.0 + m),
    "Contrast": lambda x, m: F.adjust_contrast_image(x, contrast_factor=1.0 + m),
    "Sharpness": lambda x, m: F.adjust_sharpness_image(x, sharpness_factor=1.0 + m),
    "Posterize": lambda x, m: F.posterize_image(x, bits=int(m)),
    "Solarize": lambda x, m: F.solarize_image(x, threshold=255.0 * m),   # uint8's bound times the magnitude
    "AutoContrast": lambda x, m: F.autocontrast_image(x),
    "Equalize": lambda x, m: F.equalize_image(x),
}
_TABLES: dict[tuple[int, int], tuple] = {}


def variants(height: int, width: int) -> tuple[tuple[str, float, list | None], ...]:
    """(op, magnitude, inverse affine matrix of a geometric op) of every op at MAGNITUDE, in SPACE's
    order; a signed op twice, + then -. Kept per image size once computed: batch_augment.strong_inputs
    computes it eagerly, so a traced randaugment and its draws read constants (torchvision computes
    magnitudes as tensors, and its affine's argument checks do not trace)."""
    if (height, width) not in _TABLES:
        out = []
        for name, (magnitudes, signed) in SPACE.items():
            m = magnitudes(NUM_BINS, height, width)
            m = 0.0 if m is None else float(m[MAGNITUDE])
            out += [(name, v, _matrix(name, v, height, width)) for v in ((m, -m) if signed else (m,))]
        _TABLES[height, width] = tuple(out)
    return _TABLES[height, width]


def _matrix(name: str, m: float, height: int, width: int) -> list[float] | None:
    """The inverse affine matrix torchvision's affine / rotate compute for op `name` at magnitude m."""
    corner = [-0.5 * width, -0.5 * height]    # ShearX/Y shear about the top-left corner (center=[0, 0])
    shear = math.degrees(math.atan(m))
    args = {"ShearX": (corner, 0.0, [0.0, 0.0], [shear, 0.0]), "ShearY": (corner, 0.0, [0.0, 0.0], [0.0, shear]),
            "TranslateX": ([0.0, 0.0], 0.0, [float(int(m)), 0.0], [0.0, 0.0]),
            "TranslateY": ([0.0, 0.0], 0.0, [0.0, float(int(m))], [0.0, 0.0]),
            "Rotate": ([0.0, 0.0], -(m % 360), [0.0, 0.0], [0.0, 0.0])}   # rotate_image negates the angle
    if name not in args:
        return None
    centre, angle, translate, shear_xy = args[name]
    return _get_inverse_affine_matrix(centre, angle, translate, 1.0, shear_xy)


def randaugment_draws(w: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Each image's ops as indices into variants(*size), from words (..., NUM_OPS, 2) of
    counter_rng: (..., NUM_OPS) int64. An op is uniform over the 14 of SPACE and a signed one is
    negated with probability 1/2, as torchvision draws."""
    first, signed = _constants(*size, w.device)[2:]
    op = below(w[..., 0], len(SPACE))
    negative = w[..., 1] < 2 ** 31
    return first[op] + (negative & signed[op]).long()


def randaugment(x: torch.Tensor, variant: torch.Tensor) -> torch.Tensor:
    """uint8 (B, C, H, W), variant (B, NUM_OPS) from randaugment_draws -> uint8 (B, C, H, W): each
    image through its ops in turn. Per op slot: one grid_sample moves every image by its own affine
    map (the identity for a colour op), each colour variant runs on the whole batch, and each image
    keeps its own variant's result."""
    B, C, H, W = x.shape
    table = variants(H, W)
    grids, slot_of = _constants(H, W, x.device)[:2]
    colour = [i for i, (name, _, _) in enumerate(table) if name in COLOUR]
    for k in range(variant.shape[1]):
        v = variant[:, k]
        moved = _apply_grid_transform(x, grids[v], "nearest", fill=None)   # fill None: zeros, as RandAugment's default
        every = torch.stack([x, moved, *(COLOUR[table[i][0]](x, table[i][1]) for i in colour)])
        pick = slot_of[v].view(1, B, 1, 1, 1).expand(1, B, C, H, W)
        x = every.gather(0, pick)[0]
    return x


_ON_DEVICE: dict[tuple, tuple[torch.Tensor, ...]] = {}


def _constants(height: int, width: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The tables randaugment and its draws index, on `device`: each variant's sampling grid
    (variants, H, W, 2), where its result sits in randaugment's stack (0: the image, 1: moved, 2..:
    the colour variants in order), and per op of SPACE its + variant's index and whether it is signed.
    Built once per device outside a trace (not copied to the device per batch); inside one, constants."""
    key = (height, width, str(device))
    if key in _ON_DEVICE:
        return _ON_DEVICE[key]
    table = variants(height, width)
    eye = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    theta = torch.tensor([m if m is not None else eye for _, _, m in table], dtype=torch.float32, device=device)
    grids = torch.cat([_affine_grid(t.view(1, 2, 3), w=width, h=height, ow=width, oh=height) for t in theta])
    colour = [i for i, (name, _, _) in enumerate(table) if name in COLOUR]
    slot_of = [1 if name in GEOMETRIC else 0 for name, _, _ in table]
    for j, i in enumerate(colour):
        slot_of[i] = 2 + j
    signed = torch.tensor([s for _, s in SPACE.values()], device=device)
    first = torch.cumsum(1 + signed.long(), 0) - (1 + signed.long())
    out = (grids, torch.tensor(slot_of, device=device), first, signed)
    if not torch.compiler.is_compiling():
        _ON_DEVICE[key] = out
    return out
