"""DeiT's distillation losses (facebookresearch/deit losses.py) and the frozen teacher."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

DISTILLATION_TYPES = ("hard", "soft", "none")
INFERENCE_HEADS = ("cls", "dist", "both")  # DeiT Table 3: the class head, the distillation head, their mean


def distillation_loss(base_loss: torch.Tensor, dist_logits: torch.Tensor, teacher_logits: torch.Tensor | None,
                      kind: str, alpha: float, tau: float) -> torch.Tensor:
    """Mix the cls-head loss with the dist-head loss against the teacher.

    hard: (1 - a) * base + a * CE(z_dist, argmax z_teacher)
    soft: (1 - a) * base + a * tau^2 * KL(z_dist / tau || z_teacher / tau), summed / (B * C)
    none: base only (the dist head gets no gradient)
    """
    if kind == "none":
        return base_loss
    if kind == "soft":
        kl = F.kl_div(F.log_softmax(dist_logits / tau, dim=1), F.log_softmax(teacher_logits / tau, dim=1),
                      reduction="sum", log_target=True)
        dist = kl * tau * tau / dist_logits.numel()
    elif kind == "hard":
        dist = F.cross_entropy(dist_logits, teacher_logits.argmax(dim=1))
    else:
        raise ValueError(f"distillation={kind!r}: allowed {', '.join(DISTILLATION_TYPES)}")
    return (1 - alpha) * base_loss + alpha * dist


def deit_heads(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(cls_logits, dist_logits) of a timm VisionTransformerDistilled in any mode (its own forward
    returns the two only in training mode; evaluation needs both heads separately)."""
    tokens = model.forward_features(x)              # (B, 2 + N, D): [cls, dist, patches...]
    return model.head(tokens[:, 0]), model.head_dist(tokens[:, 1])


def deit_predict(model: nn.Module, x: torch.Tensor, head: str) -> torch.Tensor:
    """(B, classes) logits of one inference head: cls, dist, or both = (cls + dist) / 2 (DeiT's
    late fusion, the mean of the two heads' logits)."""
    if head not in INFERENCE_HEADS:
        raise ValueError(f"inference head {head!r}: allowed {', '.join(INFERENCE_HEADS)}")
    cls, dist = deit_heads(model, x)
    return {"cls": cls, "dist": dist, "both": (cls + dist) / 2}[head]


def token_cosine(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """(depth,) mean over images of cos(class token, distillation token) at the output of each
    block (DeiT Sec. 4: 0.06 at the input, 0.93 after the last block in DeiT-B)."""
    return deit_probe(model, x)[2]


def deit_probe(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One forward pass: (cls_logits, dist_logits, token cosine per block (depth,))."""
    sims = []

    def hook(_module, _inputs, tokens):           # tokens: (B, 2 + N, D)
        sims.append(F.cosine_similarity(tokens[:, 0].float(), tokens[:, 1].float(), dim=-1).mean())
    handles = [block.register_forward_hook(hook) for block in model.blocks]
    try:
        tokens = model.forward_features(x)        # (B, 2 + N, D) after the final norm
    finally:
        for h in handles:
            h.remove()
    return model.head(tokens[:, 0]), model.head_dist(tokens[:, 1]), torch.stack(sims)


def freeze(teacher: nn.Module) -> nn.Module:
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher
