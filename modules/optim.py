"""AdamW with decay only on weight matrices, and linear warmup then cosine decay, per step."""
from __future__ import annotations

import math

import torch
from torch import nn


# The largest peak learning rate: AdamW applies lr times (about) one per weight and step in float32;
# an lr past float32's largest value cannot be applied at all, so it is bad input. A smaller absurd
# one (1e30) is a run that diverges, recorded as such: divergence is a result, not an error.
MAX_LR = float(torch.finfo(torch.float32).max)
LR_LIMIT = f"<= {MAX_LR:.3g} (float32's largest, in which the optimiser applies it)"


def lr_in_range(lr: float) -> bool:
    return 0 < lr <= MAX_LR  # False for nan too


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """No decay for norms, biases (every 1-D tensor), position embeddings and tokens: decaying them
    pulls the embeddings toward zero without regularising anything (as in timm/DeiT/big_vision)."""
    skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim <= 1 or name in skip or "pos_embed" in name or name.endswith("_token") \
                or "relative_position_bias_table" in name:
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def warmup_steps(total_steps: int, warmup_fraction: float) -> int:
    """Steps of linear warmup in a run of `total_steps`: at least one (a step at lr 0 is wasted)."""
    return max(1, round(warmup_fraction * total_steps))


def warmup_cosine(step: int, total_steps: int, warmup_steps: int, min_ratio: float) -> float:
    """Multiplier of the peak learning rate at `step` (0-based)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def adamw_warmup_cosine(model: nn.Module, *, lr: float, weight_decay: float, betas: tuple[float, float],
                        total_steps: int, warmup_fraction: float, min_lr_ratio: float):
    optimizer = torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, betas=betas)
    warmup = warmup_steps(total_steps, warmup_fraction)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: warmup_cosine(s, total_steps, warmup, min_lr_ratio))
    return optimizer, schedule
