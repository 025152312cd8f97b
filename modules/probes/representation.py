"""Representation similarity: linear CKA (Kornblith et al. 2019) and the minibatch CKA heat maps of
Raghu et al. 2021 ("Do Vision Transformers See Like CNNs?", after Nguyen et al. 2021).

A model's representations are its block outputs, one (B, features) matrix per block in forward
order: every transformer block of vit / deit / hybrid (tokens (B, N, D) flattened; the hybrid's
ResNet stem is part of the tokeniser and left out), every Swin block, every ConvNeXt block and every
residual block of the ResNet.
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch import nn


def linear_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear CKA of (n, d1) and (n, d2) feature matrices: ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F ||Yc^T Yc||_F)
    with column-centred Xc, Yc. Invariant to orthogonal maps and isotropic scaling of either side."""
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != y.shape[0] or x.shape[0] < 2:
        raise ValueError(f"feature shapes {tuple(x.shape)} and {tuple(y.shape)}: allowed (n, d1) and (n, d2), "
                         f"same n >= 2")
    # float64: the ratio of squared Frobenius norms loses digits quickly in float32
    xc = x.double() - x.double().mean(0)                      # (n, d1)
    yc = y.double() - y.double().mean(0)                      # (n, d2)
    cross = torch.linalg.matrix_norm(yc.T @ xc) ** 2          # HSIC(X, Y) up to a shared 1/(n-1)^2
    norm = torch.linalg.matrix_norm(xc.T @ xc) * torch.linalg.matrix_norm(yc.T @ yc)
    if norm == 0:
        raise ValueError("a feature matrix is constant across the n examples: CKA is undefined; allowed "
                         "features that vary")
    return float(cross / norm)


# ---------------- block outputs ----------------
def _block_types() -> tuple[type, ...]:
    # timm is imported lazily, as in modules/registry.py
    from timm.models.convnext import ConvNeXtBlock
    from timm.models.resnet import BasicBlock, Bottleneck
    from timm.models.swin_transformer import SwinTransformerBlock
    from timm.models.vision_transformer import Block
    return Block, SwinTransformerBlock, ConvNeXtBlock, BasicBlock, Bottleneck


def _blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name, module) of each block in forward order (registration order is forward order in these
    timm models). The hybrid's stem blocks sit under patch_embed (the tokeniser): skipped."""
    types = _block_types()
    found = [(name, m) for name, m in model.named_modules()
             if isinstance(m, types) and not name.startswith("patch_embed.")]
    if not found:
        raise ValueError(f"{type(model).__name__} has no known blocks: allowed timm vit, deit, swin, convnext, "
                         f"hybrid, resnet models")
    return found


def layer_names(model: nn.Module) -> list[str]:
    """Names of the blocks whose outputs layer_features returns, same order ("blocks.0",
    "layers.1.blocks.0", "stages.2.blocks.1", "layer3.0")."""
    return [name for name, _ in _blocks(model)]


@torch.no_grad()
def layer_features(model: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """One (B, features) matrix per block output, in forward order, on the model's device.
    Shapes before flattening: vit/deit/hybrid (B, N, D), swin (B, H, W, C), convnext/resnet (B, C, H, W)."""
    outputs: list[torch.Tensor] = []

    def keep(_module, _inputs, output):
        out = output[0] if isinstance(output, (tuple, list)) else output
        outputs.append(out.flatten(1))                        # (B, features)

    handles = [m.register_forward_hook(keep) for _, m in _blocks(model)]
    was_training = model.training
    try:
        model.eval()
        model(images.to(next(model.parameters()).device))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return outputs


# ---------------- minibatch CKA ----------------
def unbiased_hsic(k: torch.Tensor, l: torch.Tensor) -> torch.Tensor:
    """Song et al. 2012's unbiased HSIC of Gram matrices, every pair: k (a, n, n), l (b, n, n) -> (a, b)
    (two (n, n) matrices -> a scalar). With K~ = K with its diagonal zeroed:
    HSIC_1 = [tr(K~ L~) + 1'K~1 1'L~1 / ((n-1)(n-2)) - 2/(n-2) 1'K~L~1] / (n(n-3)); needs n >= 4."""
    single = k.ndim == 2 and l.ndim == 2
    k, l = (m.double().reshape(-1, *m.shape[-2:]) for m in (k, l))
    n = k.shape[-1]
    if n < 4 or k.shape[-2:] != (n, n) or l.shape[-2:] != (n, n):
        raise ValueError(f"Gram shapes {tuple(k.shape)} and {tuple(l.shape)}: allowed square n x n, same n >= 4")
    k = k - torch.diag_embed(k.diagonal(dim1=-2, dim2=-1))     # K~ (a, n, n)
    l = l - torch.diag_embed(l.diagonal(dim1=-2, dim2=-1))     # L~ (b, n, n)
    trace = torch.einsum("aij,bji->ab", k, l)                  # tr(K~ L~)
    sums = k.sum((1, 2))[:, None] * l.sum((1, 2))[None, :]    # 1'K~1 1'L~1
    middle = k.sum(1) @ l.sum(2).T                             # 1'K~ (a, n) times L~1 (b, n): 1'K~L~1
    hsic = (trace + sums / ((n - 1) * (n - 2)) - 2 * middle / (n - 2)) / (n * (n - 3))
    return hsic[0, 0] if single else hsic


def _grams(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """Linear-kernel Gram matrices K = X X^T of every block output: (layers, B, B), float64."""
    return torch.stack([f.double() @ f.double().T for f in layer_features(model, images)])


def minibatch_cka(model_a: nn.Module, model_b: nn.Module, batches: Iterable) -> torch.Tensor:
    """(La, Lb) CKA between every block of model_a and of model_b (Raghu et al. 2021):
    sum_i HSIC_1(K_i, L_i) / sqrt(sum_i HSIC_1(K_i, K_i) * sum_i HSIC_1(L_i, L_i)) over minibatches i.
    batches: image tensors (B, C, H, W) with B >= 4 (an (images, labels) pair counts as its images)."""
    cross = self_a = self_b = None
    for batch in batches:
        images = batch[0] if isinstance(batch, (tuple, list)) else batch
        if images.shape[0] < 4:
            raise ValueError(f"minibatch of {images.shape[0]} images: allowed at least 4 (unbiased HSIC)")
        k = _grams(model_a, images)                           # (La, B, B)
        l = k if model_b is model_a else _grams(model_b, images)  # (Lb, B, B)
        parts = (unbiased_hsic(k, l), unbiased_hsic(k, k).diagonal(), unbiased_hsic(l, l).diagonal())
        if cross is None:
            cross, self_a, self_b = parts
        else:
            cross, self_a, self_b = cross + parts[0], self_a + parts[1], self_b + parts[2]
    if cross is None:
        raise ValueError("batches is empty: allowed at least one minibatch of >= 4 images")
    return (cross / torch.sqrt(self_a[:, None] * self_b[None, :])).float().cpu()


def cka_heatmap(matrix: torch.Tensor, names_a: list[str], names_b: list[str], title: str | None = None, ax=None):
    """Draw an (La, Lb) CKA matrix as Raghu et al.'s heat map: model_a's layers up the y axis, model_b's
    along x, layer 0 at the bottom left, colour scale 0..1. Returns the matplotlib Axes."""
    if ax is None:
        from matplotlib.figure import Figure
        ax = Figure(figsize=(1.5 + 0.35 * len(names_b), 1.2 + 0.35 * len(names_a))).subplots()
    image = ax.imshow(matrix.cpu().numpy(), origin="lower", vmin=0.0, vmax=1.0, cmap="magma", aspect="auto")
    ax.set_xticks(range(len(names_b)), names_b, rotation=90, fontsize=7)
    ax.set_yticks(range(len(names_a)), names_a, fontsize=7)
    if title:
        ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, label="CKA")
    return ax
