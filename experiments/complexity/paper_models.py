"""Paper-scale timm models (no weights): measured parameters and FLOPs against timm's published
figures, and the source article's FLOP claims checked against its own formula and the models."""
from __future__ import annotations

from typing import NamedTuple

import timm
import torch
from torch import nn

from modules.complexity import count_params, flop_breakdown

PUBLISHED_SOURCE = ("timm results/benchmark-infer-amp-nchw-pt240-cu124-rtx4090.csv (param_count, infer_gmacs at "
                    "infer_img_size 224), huggingface/pytorch-image-models@aa4b5850c1543fa488abf260f18390eda46cf85d")
PUBLISHED_IMAGE_SIZE = 224


class PaperModel(NamedTuple):  # the published figures are PUBLISHED_SOURCE's
    label: str
    timm_name: str
    params_m: float  # published parameters, millions (1000-class head)
    gmacs: float     # published forward GMACs for one 224x224 image


PAPER_MODELS = (
    PaperModel("ViT-B/16", "vit_base_patch16_224", 86.57, 17.58),
    PaperModel("ViT-L/16", "vit_large_patch16_224", 304.33, 61.6),
    PaperModel("ViT-H/14", "vit_huge_patch14_224", 630.76, 167.4),
    PaperModel("DeiT-Ti", "deit_tiny_patch16_224", 5.72, 1.26),
    PaperModel("DeiT-S", "deit_small_patch16_224", 22.05, 4.61),
    PaperModel("DeiT-B", "deit_base_patch16_224", 86.57, 17.58),
    PaperModel("Swin-T", "swin_tiny_patch4_window7_224", 28.29, 4.51),
    PaperModel("Swin-S", "swin_small_patch4_window7_224", 49.61, 8.77),
    PaperModel("Swin-B", "swin_base_patch4_window7_224", 87.77, 15.47),
    PaperModel("ConvNeXt-T", "convnext_tiny", 28.59, 4.47),
    PaperModel("ConvNeXt-S", "convnext_small", 50.22, 8.71),
    PaperModel("ConvNeXt-B", "convnext_base", 88.59, 15.38),
    PaperModel("R50+ViT-B/16", "vit_base_r50_s16_224", 97.89, 21.66),
    PaperModel("ResNet-50", "resnet50", 25.56, 4.11),
)
# Convolution-only networks take any input size; the transformers fix their position table and
# window grid at construction, so they are built for the size they are counted at. Those are all
# timm VisionTransformer / SwinTransformer, whose weight_init="skip" saves most of a meta build
# (initialising tensors that hold no values goes through slow reference kernels).
RESOLUTION_FREE = ("convnext_", "resnet")


def build_paper_model(timm_name: str, image_size: int = 224, device: str = "meta") -> nn.Module:
    """A PAPER_MODELS architecture without pretrained weights, for image_size x image_size RGB input.
    On "meta" its tensors hold shapes only: FLOPs are counted from them without compute or memory."""
    names = [m.timm_name for m in PAPER_MODELS]
    if timm_name not in names:
        raise ValueError(f"unknown paper model {timm_name!r}: allowed {', '.join(names)}")
    kwargs = {}
    if not timm_name.startswith(RESOLUTION_FREE):
        kwargs = {"img_size": image_size, **({"weight_init": "skip"} if device == "meta" else {})}
    with torch.device(device):
        return timm.create_model(timm_name, pretrained=False, **kwargs)


def paper_table(image_size: int = 224) -> list[dict]:
    """One row per PAPER_MODELS entry, counted on the meta device. The published columns and the
    relative differences to them are None away from the published 224."""
    published = image_size == PUBLISHED_IMAGE_SIZE
    rows = []
    for pm in PAPER_MODELS:
        model = build_paper_model(pm.timm_name, image_size)
        flops = flop_breakdown(model, image_size, in_chans=3)
        params = count_params(model)
        rows.append({
            "label": pm.label, "timm_name": pm.timm_name, "image_size": image_size,
            "params": params, "params_m": params / 1e6,
            "gmacs": flops["total"] / 2e9, "gflops": flops["total"] / 1e9,
            "attention_gflops": flops["attention"] / 1e9,
            "published_params_m": pm.params_m if published else None,
            "published_gmacs": pm.gmacs if published else None,
            "params_rel_diff": params / 1e6 / pm.params_m - 1 if published else None,
            "gmacs_rel_diff": flops["total"] / 2e9 / pm.gmacs - 1 if published else None,
        })
    return rows


# --- the source article's figures (its ViT configuration table and compute_complexity) ---------


class SeedClaim(NamedTuple):
    claim: str                # the article's words
    timm_name: str            # the model that settles it
    image_size: int
    claimed_g: float          # printed as "G FLOPs"
    claimed_params_m: float | None
    printed_by_formula: bool  # an output the article attributes to its compute_complexity code


SEED_CLAIMS = (
    SeedClaim("table: ViT-Base 86M, 16.8G FLOPs", "vit_base_patch16_224", 224, 16.8, 86, False),
    SeedClaim("table: ViT-Large 307M, 61.6G FLOPs", "vit_large_patch16_224", 224, 61.6, 307, False),
    SeedClaim("table: ViT-Huge 632M, 134G FLOPs", "vit_huge_patch14_224", 224, 134, 632, False),
    SeedClaim("compute_complexity(224, 16, 768): 16.80 GFLOPs", "vit_base_patch16_224", 224, 16.80, None, True),
    SeedClaim("compute_complexity(384, 16, 768): 118.46 GFLOPs", "vit_base_patch16_224", 384, 118.46, None, True),
    SeedClaim("compute_complexity(512, 16, 768): 364.79 GFLOPs", "vit_base_patch16_224", 512, 364.79, None, True),
    SeedClaim("compute_complexity(1024, 16, 768): 5764.47 GFLOPs", "vit_base_patch16_224", 1024, 5764.47, None, True),
)
# FlopCounterMode agrees with timm's published GMACs within 0.5%; leaving out the class token,
# patch embedding and head (as the article's formula does) moves a ViT's count by about 1.2%.
# A claim further than this from every reading is not a count of the model.
MATCH_TOL = 0.02


def seed_formula_macs(img_size: int, patch: int, dim: int) -> int:
    """The article's compute_complexity, verbatim: one encoder layer's multiply-adds (qkv 3ND^2 +
    proj ND^2, q @ k^T and attn @ v N^2 D each, MLP 2 x 4ND^2) with N = patches, no class token."""
    if min(img_size, patch, dim) < 1 or patch > img_size:
        raise ValueError(f"seed_formula_macs needs 1 <= patch <= img_size and dim >= 1, got img_size={img_size}, "
                         f"patch={patch}, dim={dim}")
    n = (img_size // patch) ** 2
    msa = 4 * n * dim ** 2 + 2 * n ** 2 * dim
    mlp = 8 * n * dim ** 2
    return msa + mlp


def _off(claimed: float, reference: float) -> str:
    """The claim relative to a reading: a percentage when close, a factor when far."""
    r = claimed / reference
    return f"{r - 1:+.1%}" if 0.5 < r < 2 else f"x{r:.2f}"


# What a claim within MATCH_TOL of each reading is, tried in this order (the right number first).
MISTAKES = {"FLOPs": "right: the whole model's FLOPs",
            "MACs": "MACs labelled FLOPs: the whole model's multiply-adds",
            "formula, all layers": "MACs labelled FLOPs: the article's formula over all layers",
            "formula, one layer": "one layer, not the whole model: the article's formula for one layer"}


def _verdict(c: SeedClaim, readings: dict[str, float], depth: int) -> str:
    """The first reading the claim matches within MATCH_TOL names the mistake (or none); with no
    match, how far the claim is from each whole-model reading."""
    match = next((k for k in MISTAKES if abs(c.claimed_g / readings[k] - 1) <= MATCH_TOL), None)
    if match:
        head = f"{MISTAKES[match]} ({readings[match]:.2f} G, claim {_off(c.claimed_g, readings[match])})"
    else:
        head = (f"follows from neither (none within {MATCH_TOL:.0%}): claim "
                + ", ".join(f"{_off(c.claimed_g, readings[k])} vs {k}"
                            for k in ("MACs", "FLOPs", "formula, all layers")))
    layer = readings["formula, one layer"]
    parts = [head, f"measured {readings['MACs']:.2f} GMACs = {readings['FLOPs']:.2f} GFLOPs; the article's "
                   f"formula {layer:.2f} G per layer, {readings['formula, all layers']:.2f} G over {depth} (MACs)"]
    if c.printed_by_formula and abs(c.claimed_g / layer - 1) > MATCH_TOL:
        parts.append(f"its code returns {layer:.2f} (one layer), not the printed {c.claimed_g:g}")
    return "; ".join(parts)


def seed_claims() -> list[dict]:
    """Per SEED_CLAIMS entry: the claim, the article's formula (one layer and x depth, both MACs), the
    measured whole model (MACs, FLOPs, params at the claim's resolution) and a one-line verdict."""
    rows = []
    for c in SEED_CLAIMS:
        model = build_paper_model(c.timm_name, c.image_size)
        total = flop_breakdown(model, c.image_size, in_chans=3)["total"]
        depth = len(model.blocks)
        layer = seed_formula_macs(c.image_size, model.patch_embed.patch_size[0], model.embed_dim) / 1e9
        readings = {"FLOPs": total / 1e9, "MACs": total / 2e9,
                    "formula, all layers": layer * depth, "formula, one layer": layer}
        verdict = _verdict(c, readings, depth)
        params_m = count_params(model) / 1e6
        if c.claimed_params_m is not None:
            ok = abs(c.claimed_params_m / params_m - 1) <= MATCH_TOL
            verdict += (f"; params {c.claimed_params_m:g}M {'right' if ok else 'wrong'} "
                        f"({_off(c.claimed_params_m, params_m)})")
        rows.append({"claim": c.claim, "timm_name": c.timm_name, "image_size": c.image_size,
                     "claimed_g": c.claimed_g, "claimed_params_m": c.claimed_params_m,
                     "formula_layer_g": layer, "depth": depth, "formula_model_g": layer * depth,
                     "measured_gmacs": readings["MACs"], "measured_gflops": readings["FLOPs"],
                     "measured_params_m": params_m, "verdict": verdict})
    return rows
