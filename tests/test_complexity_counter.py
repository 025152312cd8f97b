"""The FLOP counter against answers computed by hand, meta against real weights, the paper-scale
models against timm's published figures, and the source article's formula."""
from __future__ import annotations

import pytest
import timm
import torch
from timm.models.vision_transformer import Block
from torch import nn

from experiments.complexity.paper_models import (MATCH_TOL, PAPER_MODELS, build_paper_model, paper_table, seed_claims,
                                      seed_formula_macs)
from modules.complexity import count_flops, flop_breakdown


@pytest.mark.parametrize("bias, op", [(True, "aten.addmm"), (False, "aten.mm")])
def test_linear(bias, op):
    # FlopCounterMode counts a matmul's 2 x in x out per row and not the bias add: same with or without bias
    c, side, out = 3, 4, 7
    model = nn.Sequential(nn.Flatten(), nn.Linear(c * side * side, out, bias=bias))
    flops = 2 * (c * side * side) * out
    assert flop_breakdown(model, side, c) == {"total": flops, "attention": 0, "by_op": {op: flops}}


def test_conv2d():
    conv = nn.Conv2d(3, 8, kernel_size=3, stride=2, padding=1)
    h_out = (17 + 2 * 1 - 3) // 2 + 1  # 9
    assert count_flops(conv, 17, 3) == 2 * 8 * 3 * 3 * 3 * h_out * h_out


class _Tokens(nn.Module):
    """[1, D, H, W] image -> [1, H*W, D] tokens, so a transformer block can be counted on its own."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x):
        return self.block(x.flatten(2).transpose(1, 2))


def test_vit_block_attention_term():
    d, side = 32, 5
    n = side * side
    block = _Tokens(Block(dim=d, num_heads=4, mlp_ratio=4.0, qkv_bias=True))
    block.block.attn.fused_attn = True  # counted anyway: the counter switches it off and restores it
    macs = {"qkv": 3 * n * d * d, "q@k^T": n * n * d, "attn@v": n * n * d, "proj": n * d * d,
            "mlp": 2 * n * d * 4 * d}  # norms, softmax, GELU and residual adds are not counted
    counts = flop_breakdown(block, side, d)
    assert counts["total"] == 2 * sum(macs.values())
    assert counts["attention"] == 2 * (2 * n * n * d)
    assert block.block.attn.fused_attn is True


def test_meta_counts_equal_cpu_counts():
    kwargs = dict(pretrained=False, img_size=32, depth=2, num_classes=10)
    cpu = timm.create_model("deit_tiny_patch16_224", **kwargs)
    with torch.device("meta"):
        meta = timm.create_model("deit_tiny_patch16_224", **kwargs)
    assert flop_breakdown(meta, 32, 3) == flop_breakdown(cpu, 32, 3)


@pytest.fixture(scope="module")
def table():
    return {row["timm_name"]: row for row in paper_table()}


@pytest.mark.parametrize("pm", PAPER_MODELS, ids=[pm.label for pm in PAPER_MODELS])
def test_paper_models_match_published(pm, table):
    row = table[pm.timm_name]
    assert abs(row["params_m"] / pm.params_m - 1) < 0.01, row
    assert abs(row["gmacs"] / pm.gmacs - 1) < 0.01, row
    assert row["gflops"] == pytest.approx(2 * row["gmacs"])
    assert (row["attention_gflops"] > 0) == (not pm.timm_name.startswith(("convnext", "resnet")))


def test_swin_attention_is_windowed(table):
    # Swin-T: 7x7 windows (M^2 = 49) over 56^2, 28^2, 14^2, 7^2 tokens with 96..768 channels, 2/2/6/2 blocks;
    # q@k^T and attn@v cost M^2 x N x C each per block
    stages = [(56 * 56, 96, 2), (28 * 28, 192, 2), (14 * 14, 384, 6), (7 * 7, 768, 2)]
    flops = sum(2 * 2 * 49 * n * c * blocks for n, c, blocks in stages)
    assert table["swin_tiny_patch4_window7_224"]["attention_gflops"] == pytest.approx(flops / 1e9)


def test_seed_formula_by_hand():
    n, d = (224 // 16) ** 2, 768
    by_hand = (3 * n * d * d + n * d * d) + (n * n * d + n * n * d) + 2 * (4 * n * d * d)
    assert seed_formula_macs(224, 16, 768) == by_hand == 1_446_273_024
    with pytest.raises(ValueError, match="patch=0"):
        seed_formula_macs(224, 0, 768)


def test_seed_claims_verdicts_follow_the_numbers():
    for row in seed_claims():
        claimed, macs = row["claimed_g"], row["measured_gmacs"]
        assert row["verdict"].startswith("MACs labelled FLOPs") == (abs(claimed / macs - 1) <= MATCH_TOL), row
        assert ("its code returns" in row["verdict"]) == row["claim"].startswith("compute_complexity"), row


def test_unknown_paper_model():
    with pytest.raises(ValueError, match="vit_nonexistent_patch16.*allowed.*vit_base_patch16_224"):
        build_paper_model("vit_nonexistent_patch16")
