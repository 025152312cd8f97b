"""Every registered family x budget at 28x28x1 and 32x32x3: shape, finiteness, gradients, budget."""
from __future__ import annotations

import pytest
import torch

from modules import BUDGET_TARGETS, FAMILIES, ConfigError, build_model, count_flops, count_params
from modules.budgets import BUDGET_TOLERANCE
from modules.registry import POS_EMBEDS

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
    assert len(outs) == (2 if FAMILIES[family].distillation_token else 1)
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
    ("swin", {"window_size": 4}, r"window size 4 does not divide the stage grids \[28, 14, 7\]"),
    ("swin", {"window_size": 6, "image_size": 32, "in_chans": 3}, r"window size 6 does not divide the stage grids \[32, 16, 8\]"),
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


def shifting_stages(model) -> list[bool]:
    """Per stage of a timm SwinTransformer: does any block shift its windows? timm keeps
    shift_size > 0 only where the (possibly shrunk) window is smaller than the block's grid."""
    return [any(max(b.shift_size) > 0 and all(w < g for w, g in zip(b.window_size, b.input_resolution))
                for b in stage.blocks) for stage in model.layers]


def test_shift_counter_sees_the_old_single_shifting_stage():
    """The former default (patch 2, two stages: grids 14/7 at 28x28 with window 7) shifted in one
    stage only: the second stage's grid equals the window."""
    from timm.models.swin_transformer import SwinTransformer
    old = SwinTransformer(img_size=28, patch_size=2, in_chans=1, num_classes=10, embed_dim=64, depths=(2, 2),
                          num_heads=(2, 4), window_size=7)
    assert shifting_stages(old) == [True, False]


@pytest.mark.parametrize("size, chans", SHAPES, ids=["28x28x1", "32x32x3"])
@pytest.mark.parametrize("budget", list(BUDGET_TARGETS))
def test_swin_shifts_windows_in_at_least_two_stages(budget, size, chans):
    model = build_model("swin", budget, image_size=size, in_chans=chans)
    grids = [stage.blocks[0].input_resolution for stage in model.layers]
    assert grids == [(size // 2 ** i,) * 2 for i in range(len(model.layers))]  # patch 1, halving stages
    shifting = shifting_stages(model)
    assert sum(shifting) >= 2, f"swin/{budget} at {size}x{size}: shifting stages {shifting} (grids {grids})"
    for stage, shifts in zip(model.layers, shifting):
        if shifts:  # a shifting block masks attention across the wrapped-around border
            assert any(b.attn_mask is not None for b in stage.blocks)


@pytest.mark.parametrize("size, chans", SHAPES, ids=["28x28x1", "32x32x3"])
@pytest.mark.parametrize("pos_embed", POS_EMBEDS)
def test_deit_pos_embed_knob(pos_embed, size, chans):
    """timm's VisionTransformerDistilled rebuilds a learned (N + 2)-entry table whatever pos_embed
    says: each value must give the table it names, train, and run in both modes."""
    from timm.layers.pos_embed_sincos import build_sincos2d_pos_embed
    torch.manual_seed(0)
    model = build_model("deit", pos_embed=pos_embed, image_size=size, in_chans=chans)
    grid, dim = model.patch_embed.grid_size, model.embed_dim
    n = grid[0] * grid[1]
    params = dict(model.named_parameters())
    if pos_embed == "learn":  # the original DeiT: cls, dist and every patch
        assert params["pos_embed"].shape == (1, n + 2, dim) and params["pos_embed"].requires_grad
    elif pos_embed == "none":
        assert model.pos_embed is None
        assert not [k for k in (*params, *model.state_dict()) if "pos" in k]
    else:  # 2D over the patches (fixed sin-cos, or learned rows + columns); cls and dist get no position
        if pos_embed == "sincos":
            assert params["pos_embed"].shape == (1, n, dim) and not params["pos_embed"].requires_grad
            assert torch.equal(params["pos_embed"][0], build_sincos2d_pos_embed(grid, dim))
        else:
            row, col = (params[f"parametrizations.pos_embed.original{i}"] for i in (0, 1))
            assert row.shape == (grid[0], dim // 2) and col.shape == (grid[1], dim - dim // 2)
            assert model.pos_embed.shape == (1, n, dim)
            params["pos_embed"] = model.pos_embed  # the table the two make, as the forward adds it
        patches = torch.randn(2, n, dim)
        tokens = model._pos_embed(patches)
        assert tokens.shape == (2, n + 2, dim)
        assert torch.equal(tokens[:, 0], model.cls_token[:, 0].expand(2, -1))
        assert torch.equal(tokens[:, 1], model.dist_token[:, 0].expand(2, -1))
        assert torch.allclose(tokens[:, 2:], patches + params["pos_embed"])

    params = dict(model.named_parameters())
    before = {k: p.detach().clone() for k, p in params.items()}
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(trainable, lr=0.1)
    model.train()
    x, y = torch.randn(4, chans, size, size), torch.tensor([0, 1, 2, 3])
    cls, dist = model(x)
    assert cls.shape == dist.shape == (4, 10)
    (torch.nn.functional.cross_entropy(cls, y) + torch.nn.functional.cross_entropy(dist, y)).backward()
    missing = [k for k, p in params.items() if p.requires_grad and (p.grad is None or not p.grad.abs().sum() > 0)]
    assert not missing, f"no gradient for {missing}"
    opt.step()
    for k, p in params.items():  # every trainable parameter moved, the frozen table did not
        assert torch.equal(p, before[k]) != p.requires_grad, k

    model.eval()
    with torch.no_grad():
        assert model(x).shape == (4, 10)


def _shuffle_patches(x: torch.Tensor, patch: int, perm: torch.Tensor) -> torch.Tensor:
    b, c, h, w = x.shape
    gh, gw = h // patch, w // patch
    p = x.reshape(b, c, gh, patch, gw, patch).permute(0, 2, 4, 1, 3, 5).reshape(b, gh * gw, c, patch, patch)
    return p[:, perm].reshape(b, gh, gw, c, patch, patch).permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, w)


@pytest.mark.parametrize("pos_embed", POS_EMBEDS)
def test_deit_without_positions_ignores_patch_order(pos_embed):
    """Without a position table DeiT is blind to the order of its patches; with one it is not."""
    torch.manual_seed(0)
    model = build_model("deit", pos_embed=pos_embed).double().eval()
    x = torch.randn(2, 1, 28, 28, dtype=torch.float64)
    shuffled = _shuffle_patches(x, 4, torch.randperm(49))
    with torch.no_grad():
        same = torch.allclose(model(x), model(shuffled), atol=1e-10)
    assert same == (pos_embed == "none")


@pytest.mark.parametrize("family", ["vit", "hybrid"])
def test_learned_2d_position_embedding(family):
    """learn2d (ViT paper App. D.4): patch (i, j) gets [row_i, col_j]; only rows and columns are
    parameters, both learn and neither is weight-decayed; the model saves and loads."""
    from modules.optim import param_groups
    torch.manual_seed(0)
    model = build_model(family, pos_embed="learn2d")
    (gh, gw), dim = model.patch_embed.grid_size, model.embed_dim
    row, col = model.parametrizations.pos_embed.original0, model.parametrizations.pos_embed.original1
    table = model.pos_embed.reshape(gh, gw, dim)
    for i, j in ((0, 0), (2, 5), (gh - 1, gw - 1)):
        assert torch.equal(table[i, j], torch.cat((row[i], col[j])))
    assert sum(p.numel() for n, p in model.named_parameters() if "pos_embed" in n) == (gh + gw) * dim // 2
    no_decay = {id(p) for p in param_groups(model, 0.05)[1]["params"]}
    assert id(row) in no_decay and id(col) in no_decay
    model(torch.randn(2, 1, 28, 28)).sum().backward()
    assert row.grad.abs().sum() > 0 and col.grad.abs().sum() > 0
    again = build_model(family, pos_embed="learn2d")
    again.load_state_dict(model.state_dict())
    with torch.no_grad():
        x = torch.randn(2, 1, 28, 28)
        assert torch.equal(again.eval()(x), model.eval()(x))


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


def test_depthwise_convolutions_in_fp32_under_bf16():
    """The CPU speed lever for ConvNeXt's depthwise convolutions: its builder swaps them in, and
    they compute in fp32 under bf16 autocast, give an nn.Conv2d's result and keep its state_dict;
    swapped back, bf16. No other family has a depthwise convolution to swap."""
    from modules.registry import Float32DepthwiseConv2d, depthwise_in_fp32, is_depthwise
    torch.manual_seed(0)
    assert {f for f in FAMILIES for m in build_model(f, "tiny").modules() if is_depthwise(m)} == {"convnext"}
    assert all(type(m) is Float32DepthwiseConv2d for m in build_model("convnext", "tiny").modules() if is_depthwise(m))
    model = depthwise_in_fp32(build_model("convnext", "tiny"), fp32=False)
    keys = model.state_dict().keys()
    dw = [m for m in depthwise_in_fp32(model).modules() if isinstance(m, Float32DepthwiseConv2d)]
    assert len(dw) == 6 and all(m.groups == m.in_channels for m in dw)   # 2 + 2 + 2 blocks, each one 7x7 depthwise
    assert model.state_dict().keys() == keys
    x = torch.randn(2, dw[0].in_channels, 7, 7).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = dw[0](x)
        assert out.dtype == torch.float32 and model(torch.randn(2, 1, 28, 28)).dtype == torch.bfloat16
    torch.testing.assert_close(out, torch.nn.functional.conv2d(x.float(), dw[0].weight, dw[0].bias, padding=3,
                                                               groups=dw[0].groups))
    with torch.device("meta"):  # how the sweep and the dry run count FLOPs (no autocast there)
        on_meta = depthwise_in_fp32(build_model("convnext", "tiny"))
    assert count_flops(on_meta, 28, 1) == count_flops(build_model("convnext", "tiny"), 28, 1)
    depthwise_in_fp32(model, fp32=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert dw[0](x).dtype == torch.bfloat16
