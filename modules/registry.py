"""The family registry: `build_model(family, budget, ...)` configures a timm model per family.

Families differ only in what their builder returns. Each builder takes the budget's row
(modules/budgets.py, beside the family's record), the data's shape and the architecture knobs, and
rejects combinations that would silently drop pixels or pad windows. A built model carries its
family's name (`family_of(model)`), which the probes read instead of guessing from its classes.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache, partial
from typing import Callable

import torch
from torch import nn

from .budgets import ARCHS, BUDGET_TARGETS, FAMILIES, KNOBS, Family

POS_EMBEDS = ("learn", "none", "sincos", "learn2d")
POOLS = ("token", "avg")


class ConfigError(ValueError):
    """A family, budget or knob value that is not allowed; the message says what is."""


@dataclass(frozen=True)
class Knobs:
    """Architecture knobs the experiments vary; None = the family's default."""
    patch_size: int | None = None
    pos_embed: str | None = None      # vit/deit/hybrid: learn (1D learned), none, sincos (fixed 2D),
                                      # learn2d (learned row + column embeddings, ViT paper App. D.4)
    pool: str | None = None           # vit/hybrid: token ([CLS]) or avg (global average pooling)
    window_size: int | None = None    # swin: default = largest size <= 8 dividing every stage grid
                                      # (7 at 28x28, 8 at 32x32: stage grids 28/14/7, 32/16/8)
    drop_path_rate: float = 0.0
    allow_unshifted: bool = False     # swin: accept a window at which no stage shifts (see _swin)


BUILDERS: dict[str, Callable] = {}  # family name -> its builder; the family's record is FAMILIES[name]


def register_family(name: str):
    """The decorated function builds family `name`, which must have a record in the family table."""
    if name not in FAMILIES:
        raise ConfigError(f"family {name!r} has no record in modules/budgets.py FAMILIES")

    def wrap(fn):
        BUILDERS[name] = fn
        return fn
    return wrap


def build_model(family: str, budget: str = "tiny", *, image_size: int = 28, in_chans: int = 1,
                num_classes: int = 10, patch_size: int | None = None, pos_embed: str | None = None,
                pool: str | None = None, window_size: int | None = None,
                drop_path_rate: float = 0.0, allow_unshifted: bool = False) -> nn.Module:
    """A freshly initialised model of `family` at `budget` for (in_chans, image_size, image_size) inputs."""
    knobs = check_options(family, budget, patch_size, pos_embed, pool, window_size, drop_path_rate, allow_unshifted)
    model = BUILDERS[family](ARCHS[family, budget], image_size, in_chans, num_classes, knobs)
    model.family = family
    return model


def family_of(model: nn.Module) -> Family:
    """The record of the family `build_model` built `model` as (ValueError for any other model)."""
    name = getattr(model, "family", None)
    if name not in FAMILIES:
        raise ValueError(f"a {type(model).__name__} not built by build_model: allowed models of the families "
                         f"{', '.join(FAMILIES)}")
    return FAMILIES[name]


def check_options(family: str, budget: str = "tiny", patch_size: int | None = None, pos_embed: str | None = None,
                  pool: str | None = None, window_size: int | None = None, drop_path_rate: float = 0.0,
                  allow_unshifted: bool = False) -> Knobs:
    """The family's options, checked without building anything (ConfigError naming a bad one)."""
    if family not in FAMILIES:
        raise ConfigError(f"unknown family {family!r}: allowed {', '.join(FAMILIES)}")
    if budget not in BUDGET_TARGETS:
        raise ConfigError(f"unknown budget {budget!r}: allowed {', '.join(BUDGET_TARGETS)}")
    if (family, budget) not in ARCHS:
        rows = ", ".join(b for b in BUDGET_TARGETS if (family, b) in ARCHS)
        raise ConfigError(f"family {family!r} has no {budget!r} row in modules/budgets.py ARCHS: allowed {rows}")
    knobs = Knobs(patch_size, pos_embed, pool, window_size, drop_path_rate, allow_unshifted)
    for k in KNOBS:
        if getattr(knobs, k) is not None and k not in FAMILIES[family].knobs:
            allowed = ", ".join(f for f in FAMILIES if k in FAMILIES[f].knobs)
            raise ConfigError(f"{k}={getattr(knobs, k)!r} does not apply to family {family!r} (only to {allowed})")
    for k in ("patch_size", "window_size"):
        if getattr(knobs, k) is not None and (isinstance(getattr(knobs, k), bool) or not isinstance(getattr(knobs, k), int)
                                              or getattr(knobs, k) < 1):
            raise ConfigError(f"{k}={getattr(knobs, k)!r}: allowed an integer >= 1 that divides the image size")
    if pos_embed is not None and pos_embed not in POS_EMBEDS:
        raise ConfigError(f"pos_embed={pos_embed!r}: allowed {', '.join(POS_EMBEDS)}")
    if pool is not None and pool not in POOLS:
        raise ConfigError(f"pool={pool!r}: allowed {', '.join(POOLS)}")
    if not 0.0 <= drop_path_rate < 1.0:
        raise ConfigError(f"drop_path_rate={drop_path_rate} is outside [0, 1)")
    return knobs


def _check_divides(size: int, step: int, what: str, family: str) -> None:
    if step < 1 or size % step:
        raise ConfigError(f"{family}: {what} {step} does not divide image size {size} "
                          f"(border pixels would be dropped); use an image size that is a multiple of {step}")


# ---------------- transformers with a global token sequence ----------------
def _vit_kwargs(arch: dict, image_size: int, in_chans: int, num_classes: int, k: Knobs) -> dict:
    pool = k.pool or "token"
    return dict(img_size=image_size, in_chans=in_chans, num_classes=num_classes,
                embed_dim=arch["embed_dim"], depth=arch["depth"], num_heads=arch["num_heads"], mlp_ratio=4.0,
                class_token=pool == "token", global_pool=pool,
                pos_embed="none" if k.pos_embed == "none" else "learn",
                no_embed_class=k.pos_embed in ("sincos", "learn2d"),  # 2D tables cover the patches only
                drop_path_rate=k.drop_path_rate)


class RowColPosEmbed(nn.Module):
    """The ViT paper's learned 2D position embedding (App. D.4): an X and a Y embedding of D/2 each,
    concatenated per patch. A parametrization of timm's `pos_embed` (torch.nn.utils.parametrize), so
    timm's own forward adds it: the parameters are row (gh, D/2) and col (gw, D - D/2), and
    `model.pos_embed` is the (1, gh * gw, D) table they make (patches only, no_embed_class layout)."""

    def __init__(self, grid: tuple[int, int]):
        super().__init__()
        self.grid = tuple(grid)

    def forward(self, row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        gh, gw = self.grid
        table = torch.cat((row[:, None].expand(gh, gw, -1), col[None].expand(gh, gw, -1)), dim=-1)  # (gh, gw, D)
        return table.reshape(1, gh * gw, -1)

    def right_inverse(self, table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Called once at registration: fresh row and column tables (timm's init, std 0.02)."""
        gh, gw = self.grid
        dim = table.shape[-1]
        row, col = torch.empty(gh, dim // 2), torch.empty(gw, dim - dim // 2)
        return nn.init.trunc_normal_(row, std=0.02), nn.init.trunc_normal_(col, std=0.02)


def _apply_sincos(model: nn.Module, knobs: Knobs) -> nn.Module:
    """The 2D tables over the patches: fixed sin-cos, or learned rows and columns (learn2d)."""
    if knobs.pos_embed == "learn2d":
        from torch.nn.utils import parametrize
        parametrize.register_parametrization(model, "pos_embed", RowColPosEmbed(model.patch_embed.grid_size))
    if knobs.pos_embed == "sincos":
        from timm.layers.pos_embed_sincos import build_sincos2d_pos_embed
        grid = model.patch_embed.grid_size
        with torch.no_grad():
            model.pos_embed.copy_(build_sincos2d_pos_embed(grid, model.embed_dim).unsqueeze(0))
        model.pos_embed.requires_grad_(False)
    return model


@register_family("vit")
def _vit(arch, image_size, in_chans, num_classes, k: Knobs):
    from timm.models.vision_transformer import VisionTransformer
    patch = k.patch_size or 4
    _check_divides(image_size, patch, "patch size", "vit")
    return _apply_sincos(VisionTransformer(patch_size=patch, **_vit_kwargs(arch, image_size, in_chans, num_classes, k)), k)


@cache
def _distilled_vit_class() -> type:
    """timm's VisionTransformerDistilled, able to run without a position table. Built on first use
    (timm is imported lazily) and reachable as `modules.registry.DistilledViT` (pickling)."""
    from timm.models.deit import VisionTransformerDistilled

    class DistilledViT(VisionTransformerDistilled):
        # timm's distilled `_pos_embed` always adds `self.pos_embed`; with none, only prepend the
        # two prefix tokens (cls, dist) as VisionTransformer._pos_embed does without a table.
        def _pos_embed(self, x: torch.Tensor) -> torch.Tensor:
            if self.pos_embed is not None:
                return super()._pos_embed(x)
            x = x.reshape(x.shape[0], -1, x.shape[-1])  # (B, H, W, D) with dynamic_img_size
            prefix = (self.cls_token.expand(x.shape[0], -1, -1), self.dist_token.expand(x.shape[0], -1, -1))
            return self.pos_drop(torch.cat((*prefix, x), dim=1))

    DistilledViT.__qualname__, DistilledViT.__module__ = "DistilledViT", __name__
    return DistilledViT


def __getattr__(name: str):
    if name == "DistilledViT":
        return _distilled_vit_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@register_family("deit")
def _deit(arch, image_size, in_chans, num_classes, k: Knobs):
    """DeiT: ViT + distillation token and head. timm's VisionTransformerDistilled rebuilds a learned
    (N + 2)-entry table in its __init__ whatever pos_embed says, so the knob is applied afterwards:
    learn keeps that table (cls, dist and every patch: the original DeiT); none removes it (no
    position parameter at all); sincos replaces it by the fixed 2D sin-cos table of the N patches
    (frozen), learn2d by learned row and column tables of those patches, and with either the two
    prefix tokens get no position (timm's no_embed_class layout: the table is added to the
    patches, then cls and dist are prepended)."""
    patch = k.patch_size or 4
    _check_divides(image_size, patch, "patch size", "deit")
    model = _distilled_vit_class()(patch_size=patch, **_vit_kwargs(arch, image_size, in_chans, num_classes, k))
    if k.pos_embed == "none":
        model.pos_embed = None
    elif k.pos_embed in ("sincos", "learn2d"):  # over the patches only; filled by _apply_sincos
        model.pos_embed = nn.Parameter(torch.zeros(1, model.patch_embed.num_patches, model.embed_dim))
    model.set_distilled_training(True)  # training forward returns (cls_logits, dist_logits)
    return _apply_sincos(model, k)


def _cifar_resnet(channels, depths, in_chans: int, num_classes: int, drop_path_rate: float = 0.0, pooled=True):
    """timm ResNet with BasicBlocks for small images: 3x3 stride-1 stem, no max-pool, stride 2
    from the second stage on (a 7x7/2 stem + max-pool would shrink 28x28 to 7x7 before stage 1)."""
    from timm.models.resnet import BasicBlock, ResNet
    # timm fixes the stem's output at 64 channels except for 'deep' stems (2 x stem_width): take
    # that width, then swap the deep stem's three convs for one 3x3 stride-1 conv.
    # timm's ResNet always runs layer1..layer4: rows with fewer stages build the missing ones at the
    # last width and replace them by Identity (as for ConvNeXt below).
    pad = 4 - len(depths)
    model = ResNet(BasicBlock, layers=tuple(depths) + (1,) * pad, channels=tuple(channels) + (channels[-1],) * pad,
                   in_chans=in_chans, num_classes=num_classes, stem_type="deep", stem_width=channels[0] // 2,
                   global_pool="avg" if pooled else "", drop_path_rate=drop_path_rate)
    model.conv1 = nn.Conv2d(in_chans, channels[0], 3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    for i in range(len(depths), 4):
        setattr(model, f"layer{i + 1}", nn.Identity())
    return model


@register_family("hybrid")
def _hybrid(arch, image_size, in_chans, num_classes, k: Knobs):
    """ViT paper's hybrid: a ResNet feature map (stride 4) tokenised with 1x1 patches."""
    from timm.layers import HybridEmbed
    from timm.models.vision_transformer import VisionTransformer
    stride = 2 ** (len(arch["stem_channels"]) - 1)
    _check_divides(image_size, stride, "ResNet stem stride", "hybrid")
    patch = k.patch_size or 1
    _check_divides(image_size // stride, patch, "patch size (on the stem's feature map)", "hybrid")
    stem = _cifar_resnet(arch["stem_channels"], arch["stem_depths"], in_chans, 0, pooled=False)
    model = VisionTransformer(patch_size=patch, embed_layer=partial(HybridEmbed, backbone=stem),
                              **_vit_kwargs(arch, image_size, in_chans, num_classes, k))
    return _apply_sincos(model, k)


# ---------------- hierarchical families ----------------
@register_family("swin")
def _swin(arch, image_size, in_chans, num_classes, k: Knobs):
    """Swin for small images: patch 1 and three stages, widths doubling at each patch merging.

    timm shifts the windows of every second block of a stage, but only where the window is smaller
    than the stage grid (a window covering the whole grid has nothing to shift). Patch 1 gives stage
    grids 28/14/7 at 28x28 (window 7) and 32/16/8 at 32x32 (window 8): windows shift in the first
    two stages, the third attends globally over its grid. (Patch 2 with two stages, 14/7 or 16/8,
    shifted in the first stage only: a window dividing 7 and smaller than it would be 1.)
    The default window is the largest size <= 8 that divides every stage grid; windows that timm
    would zero-pad (without masking the padding) are rejected, and so is a window at which no stage
    shifts (every stage one unshifted window: no longer Swin) unless allow_unshifted is set.
    """
    from timm.models.swin_transformer import SwinTransformer
    patch = k.patch_size or 1
    _check_divides(image_size, patch, "patch size", "swin")
    n_stages = len(arch["depths"])
    grid0 = image_size // patch
    if grid0 % 2 ** (n_stages - 1):
        raise ConfigError(f"swin: a {grid0}x{grid0} patch grid cannot be halved {n_stages - 1} times by patch "
                          f"merging without padding; use an image size that is a multiple of {patch * 2 ** (n_stages - 1)}")
    grids = [grid0 // 2 ** i for i in range(n_stages)]
    window = k.window_size or max(w for w in range(1, 9) if all(g % w == 0 for g in grids))
    bad = [g for g in grids if g > window and g % window]
    if window < 1 or bad:
        raise ConfigError(f"swin: window size {window} does not divide the stage grids {grids} "
                          f"(timm would pad windows without masking); use a window that divides every stage "
                          f"grid larger than it (a grid it covers is attended as one unshifted window)")

    def shifts(w: int) -> bool:  # timm shifts by w // 2 in every second block of a stage whose grid exceeds w
        return w >= 2 and any(g > w and depth >= 2 for g, depth in zip(grids, arch["depths"]))
    if not shifts(window) and not k.allow_unshifted:
        allowed = [w for w in range(2, grids[0]) if shifts(w) and all(g <= w or g % w == 0 for g in grids)]
        raise ConfigError(f"window_size={window}: no stage of the grids {grids} shifts its windows at this size; "
                          f"allowed {', '.join(map(str, allowed)) or 'none at this image size'} "
                          "(or allow_unshifted=true for global, unshifted attention)")
    return SwinTransformer(img_size=image_size, patch_size=patch, in_chans=in_chans, num_classes=num_classes,
                           embed_dim=arch["embed_dim"], depths=arch["depths"], num_heads=arch["num_heads"],
                           window_size=window, drop_path_rate=k.drop_path_rate)


class Float32DepthwiseConv2d(nn.Conv2d):
    """A depthwise convolution that runs in its weights' precision (fp32) under mixed precision (its
    input cast to it, autocast off inside), while the matmuls around it stay bf16: ConvNeXt's builder
    uses it. On the CPU, oneDNN's bf16 depthwise kernels are slow: ConvNeXt-tiny's 7x7 depthwise
    backward takes 53% of a bf16 step, 2.5x its fp32 time, and with them in fp32 ConvNeXt trains
    about 1.7x the images/s (results/cpu_levers.txt). In fp32 training it changes nothing. Its
    weights are an nn.Conv2d's (the same state_dict, so a checkpoint loads either way); its output is
    fp32, as the LayerNorm next in a ConvNeXt block wants it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.weight.dtype)
        if not torch.amp.is_autocast_available(x.device.type):  # the meta device (FLOP counting) has none
            return super().forward(x)
        with torch.autocast(x.device.type, enabled=False):
            return super().forward(x)


def is_depthwise(m: nn.Module) -> bool:
    """A plain depthwise convolution (one filter per input channel), as ConvNeXt's 7x7."""
    return type(m) in (nn.Conv2d, Float32DepthwiseConv2d) and 1 < m.groups == m.in_channels


def depthwise_in_fp32(model: nn.Module, fp32: bool = True) -> nn.Module:
    """Every depthwise nn.Conv2d of `model` as a Float32DepthwiseConv2d (fp32=False: back to
    nn.Conv2d). In place; returns `model`."""
    for m in model.modules():
        if is_depthwise(m):
            m.__class__ = Float32DepthwiseConv2d if fp32 else nn.Conv2d
    return model


@register_family("convnext")
def _convnext(arch, image_size, in_chans, num_classes, k: Knobs):
    """timm's ConvNeXt always builds 4 stages; a 4th would halve 7x7 to 3x3 (dropping a row and a
    column at 28x28), so rows list fewer stages and the missing ones become Identity. Its depthwise
    convolutions run in fp32 under bf16 autocast (Float32DepthwiseConv2d: a CPU speed lever)."""
    from timm.models.convnext import ConvNeXt
    patch = k.patch_size or 1  # timm's default stem (4x4/4) leaves too little to downsample
    n_stages = len(arch["depths"])
    _check_divides(image_size, patch * 2 ** (n_stages - 1), f"stem patch x 2^{n_stages - 1} stage downsampling",
                   "convnext")
    pad = 4 - n_stages
    model = ConvNeXt(in_chans=in_chans, num_classes=num_classes, patch_size=patch,
                     depths=tuple(arch["depths"]) + (0,) * pad, dims=tuple(arch["dims"]) + (arch["dims"][-1],) * pad,
                     drop_path_rate=k.drop_path_rate)
    for i in range(n_stages, 4):
        model.stages[i] = nn.Identity()
    if patch == 1:
        # A 1x1 stem conv + LayerNorm on one gray pixel keeps little more than its sign (LN removes
        # the scale of w * x + b): patchify 3x3 neighbourhoods at stride 1 instead.
        model.stem[0] = nn.Conv2d(in_chans, arch["dims"][0], kernel_size=3, stride=1, padding=1)
    return depthwise_in_fp32(model)


@register_family("resnet")
def _resnet(arch, image_size, in_chans, num_classes, k: Knobs):
    return _cifar_resnet(arch["channels"], arch["depths"], in_chans, num_classes, k.drop_path_rate)


def use_fused_attention(model: nn.Module, fused: bool) -> None:
    """timm's attention modules compute softmax(q k^T) v either by one fused SDPA kernel or by the
    explicit matmuls: the same function, rounded differently (under bf16 autocast the explicit path
    rounds q k^T to bf16 before its fp32 softmax; the fused kernel keeps it in fp32; against fp32 both
    err by the same ~6e-3 in logits: tests/test_attention_kernel.py). On the CPU the
    explicit path is faster at our token counts (ViT-tiny trains 2.2x faster at 50 tokens: SDPA's
    CPU flash kernel spends most of a step in its backward), and under torch.vmap it is the only one
    with a batching rule."""
    for m in model.modules():
        if hasattr(m, "fused_attn"):
            m.fused_attn = fused
