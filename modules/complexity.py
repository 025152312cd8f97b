"""Parameter and FLOP counts, attention included, with the attention's token-mixing share."""
from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

# The token-mixing products q @ k^T and attn @ v: timm's explicit attention path multiplies
# [B, heads, N, d] tensors, which aten.matmul flattens into aten.bmm, while nn.Linear (qkv, proj,
# MLP, heads, Swin's patch merging) folds its input to 2-D and lands on aten.addmm (aten.mm
# without bias) and convolutions on aten.convolution. Verified with timm 1.0.31 on ViT-B/16
# (bmm = 12 layers x 2 x 2 x 197^2 x 768 FLOPs exactly), DeiT, R50+ViT-B/16 and Swin-T
# (bmm = sum over blocks of 2 x 2 x 49 x N x C, its 7x7 windows), and ConvNeXt-T / ResNet-50
# (no bmm at all).
ATTENTION_OPS = (torch.ops.aten.bmm, torch.ops.aten.baddbmm)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def _flops_by_op(model: nn.Module, image_size: int, in_chans: int) -> dict:
    """{aten op: forward FLOPs} for one [1, in_chans, image_size, image_size] image. FlopCounterMode
    does not see fused SDPA on CPU, so timm's attention modules run their explicit
    q @ k^T / softmax / @ v path while counting."""
    fused = [(m, m.fused_attn) for m in model.modules() if hasattr(m, "fused_attn")]
    was_training = model.training
    try:
        for m, _ in fused:
            m.fused_attn = False
        model.eval()
        device = next(model.parameters()).device  # "meta" counts shapes only: no compute, no memory
        with FlopCounterMode(display=False) as counter:
            model(torch.zeros(1, in_chans, image_size, image_size, device=device))
        return dict(counter.get_flop_counts().get("Global", {}))
    finally:
        for m, f in fused:
            m.fused_attn = f
        model.train(was_training)


def flop_breakdown(model: nn.Module, image_size: int, in_chans: int) -> dict:
    """Forward FLOPs (2 x MACs) for one image: {"total", "attention" (the q @ k^T and attn @ v
    products: N^2 x D per global layer, M^2 x N x D per Swin window layer), "by_op" {op name: FLOPs}}.
    Works on models built on the meta device (counted from shapes alone)."""
    by_op = _flops_by_op(model, image_size, in_chans)
    return {"total": int(sum(by_op.values())),
            "attention": int(sum(by_op.get(op, 0) for op in ATTENTION_OPS)),
            "by_op": {str(op): int(n) for op, n in by_op.items()}}


def count_flops(model: nn.Module, image_size: int, in_chans: int) -> int:
    """Forward FLOPs (2 x MACs) for one image, attention included; works on meta-device models."""
    return flop_breakdown(model, image_size, in_chans)["total"]


def complexity(model: nn.Module, image_size: int, in_chans: int) -> dict:
    """{"params", "flops"} of `model` for one image. A FLOP count that fails (an op or a mode the
    counter does not handle) is recorded as flops None with a warning: a measurement never stops a
    fit or a build."""
    try:
        flops = count_flops(model, image_size, in_chans)
    except Exception as e:  # whatever the counter raises: the model itself may still train
        warnings.warn(f"FLOPs of {type(model).__name__} not counted ({type(e).__name__}: {e}): recorded as null")
        flops = None
    return {"params": count_params(model), "flops": flops}
