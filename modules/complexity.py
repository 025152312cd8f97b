"""Parameter and FLOP counts, attention included."""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def count_flops(model: nn.Module, image_size: int, in_chans: int) -> int:
    """Forward FLOPs (2 x MACs) for one image. FlopCounterMode does not see fused SDPA on CPU, so
    timm's attention modules run their explicit q @ k^T / softmax / @ v path while counting."""
    fused = [(m, m.fused_attn) for m in model.modules() if hasattr(m, "fused_attn")]
    was_training = model.training
    try:
        for m, _ in fused:
            m.fused_attn = False
        model.eval()
        device = next(model.parameters()).device
        with FlopCounterMode(display=False) as counter:
            model(torch.zeros(1, in_chans, image_size, image_size, device=device))
        return int(counter.get_total_flops())
    finally:
        for m, f in fused:
            m.fused_attn = f
        model.train(was_training)
