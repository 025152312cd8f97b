"""Every registered family x budget at 28x28x1 and 32x32x3: shape, finiteness, gradients, budget."""
from __future__ import annotations

import pytest
import torch

from modules import BUDGET_TARGETS, FAMILIES, ConfigError, build_model, count_flops, count_params
from modules.budgets import BUDGET_TOLERANCE

SHAPES = [(28, 1), (32, 3)]


@pytest.mark.parametrize("size, chans", SHAPES, ids=["28x28x1", "32x32x3"])
@pytest.mark.parametrize("budget", list(BUDGET_TARGETS))
@pytest.mark.parametrize("family", FAMILIES)
def test_family_budget(family, budget, size, chans):
    torch.manual_seed(0)
    model = build_model(family, budget, image_size=size, in_chans=chans, num_classes=10)
    n = count_params(model)
    target = BUDGET_TARGETS[budget]
    assert abs(n / target - 1) <= BUDGET_TOLERANCE, f"{family}/{budget}: {n:,} params vs target {target:,}"

    model.train()
    out = model(torch.randn(2, chans, size, size))
    outs = out if isinstance(out, tuple) else (out,)  # DeiT trains with (cls, dist) logits
    assert len(outs) == (2 if family == "deit" else 1)
    for o in outs:
        assert o.shape == (2, 10) and torch.isfinite(o).all()
    sum(o.sum() for o in outs).backward()
    missing = [name for name, p in model.named_parameters() if p.requires_grad and (p.grad is None or not torch.isfinite(p.grad).all())]
    assert not missing, f"no gradient for {missing}"

    model.eval()
    with torch.no_grad():
        assert model(torch.randn(2, chans, size, size)).shape == (2, 10)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_sees_every_pixel_region(family):
    """Changing one pixel in any corner or the centre changes the output (in float64, where a
    dropped pixel leaves the output bit-identical): no border row or column is silently dropped."""
    torch.manual_seed(0)
    model = build_model(family, "tiny", image_size=28, in_chans=1).double().eval()
    with torch.no_grad():  # wake branches that start at zero (timm's zero-init BN, layer scale 1e-6)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    x = torch.randn(1, 1, 28, 28, dtype=torch.float64)
    for i, j in ((0, 0), (0, 27), (27, 0), (27, 27), (13, 13)):
        y = x.clone()
        y[..., i, j] += 1.0
        with torch.no_grad():
            assert (model(x) - model(y)).abs().max() > 0, f"pixel ({i}, {j}) has no effect"


@pytest.mark.parametrize("family, kwargs, match", [
    ("transformer", {}, r"unknown family 'transformer': allowed vit, deit, swin, convnext, hybrid, resnet"),
    ("vit", {"budget": "huge"}, r"unknown budget 'huge': allowed tiny, small, base"),
    ("vit", {"patch_size": 5}, r"patch size 5 does not divide image size 28"),
    ("deit", {"patch_size": 3, "image_size": 32}, r"patch size 3 does not divide image size 32"),
    ("swin", {"window_size": 4}, r"window size 4 does not divide the stage grids \[14, 7\]"),
    ("swin", {"image_size": 30}, r"cannot be halved"),
    ("convnext", {"image_size": 30}, r"does not divide image size 30"),
    ("hybrid", {"image_size": 30}, r"stem stride 4 does not divide image size 30"),
    ("resnet", {"pos_embed": "none"}, r"pos_embed='none' does not apply to family 'resnet'"),
    ("vit", {"pos_embed": "rope"}, r"pos_embed='rope': allowed learn, none, sincos"),
    ("vit", {"drop_path_rate": 1.0}, r"drop_path_rate=1.0"),
])
def test_bad_configurations_are_named(family, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        build_model(family, **kwargs)


def test_swin_window_is_derived_to_divide_every_stage():
    assert build_model("swin", image_size=28).layers[0].blocks[0].window_size == (7, 7)
    assert build_model("swin", image_size=32, in_chans=3).layers[0].blocks[0].window_size == (8, 8)


def test_vit_knobs():
    sincos = build_model("vit", pos_embed="sincos")
    assert not sincos.pos_embed.requires_grad and sincos.pos_embed.shape == (1, 49, 100)
    assert build_model("vit", pos_embed="none").pos_embed is None
    avg = build_model("vit", pool="avg")
    assert avg.cls_token is None and avg.global_pool == "avg"
    assert build_model("vit", patch_size=7).patch_embed.grid_size == (4, 4)
    assert build_model("hybrid").patch_embed.grid_size == (7, 7)  # ResNet stem, stride 4, 1x1 patches


def test_flops_count_attention():
    """Forward FLOPs of timm's deit_small at 224 match its published 4.6 GMACs only when the
    attention matmuls are counted."""
    import timm
    model = timm.create_model("deit_small_patch16_224", pretrained=False)
    assert abs(count_flops(model, 224, 3) / 2e9 - 4.6) < 0.05
