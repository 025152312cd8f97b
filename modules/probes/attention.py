"""Attention probes: the softmax attention maps of a built model, how far its heads look (mean
attention distance, ViT paper Fig. 7 right / App. D.7), how concentrated their attention is
(entropy), the last layer's [CLS] attention and attention rollout (Abnar & Zuidema 2020).

Maps are captured from timm's own modules: `Attention` (vit, deit, hybrid) and `WindowAttention`
(swin) normally call fused scaled_dot_product_attention, which never materialises the weights.
With `fused_attn` off both run `attn = softmax(q k^T * scale [+ bias + mask]); attn = attn_drop(attn)`,
so a pre-hook on `attn_drop` sees exactly the probabilities (Swin's relative position bias and
shifted-window mask are already inside the softmax). The flags, hooks and train/eval mode are
restored afterwards, also on error.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import Tensor, nn

from ..budgets import Family, names
from ..registry import family_of


# ---------------- which probes apply to a model: its family's record says ----------------
def _with_attention() -> list[str]:
    """The families with attention layers, global attention first (vit, deit, hybrid, swin)."""
    return names(attention="global") + names(attention="windowed")


def _check_attention(model: nn.Module, allowed: list[str] | None = None, lacks: str = "attention layers") -> Family:
    """The model's family; a one-line ValueError if it has no attention or is not in `allowed`."""
    family = family_of(model)
    allowed = _with_attention() if allowed is None else allowed
    if family.attention == "none":
        raise ValueError(f"family {family.name!r} has no attention layers: allowed {', '.join(allowed)}")
    if family.name not in allowed:
        raise ValueError(f"family {family.name!r} has no {lacks}: allowed {', '.join(allowed)}")
    return family


def _check_class_token(model: nn.Module) -> Family:
    family = _check_attention(model, names(class_token=True), "[CLS] token over one global patch grid")
    if not model.has_class_token:  # pool='avg' builds no [CLS] token
        raise ValueError(f"{family.name} model with global_pool={model.global_pool!r} has no class token: "
                         f"allowed models built with pool='token'")
    return family


# ---------------- capture ----------------
def _attention_modules(model: nn.Module) -> list[nn.Module]:
    from timm.layers import Attention
    from timm.models.swin_transformer import WindowAttention
    return [m for m in model.modules() if isinstance(m, (Attention, WindowAttention))]


@contextmanager
def _unfused(model: nn.Module, captured: list) -> Iterator[None]:
    """Within: every attention module runs its explicit softmax path in eval mode and appends
    (module, probs) to `captured` in forward order; flags, hooks and mode restored on exit."""
    modules = _attention_modules(model)
    flags = [m.fused_attn for m in modules]
    was_training = model.training
    # attn_drop(attn): the pre-hook's first argument is the softmax output (B*, heads, N, N)
    hooks = [m.attn_drop.register_forward_pre_hook(lambda _, args, m=m: captured.append((m, args[0].detach())))
             for m in modules]
    try:
        for m in modules:
            m.fused_attn = False
        model.eval()
        yield
    finally:
        for h in hooks:
            h.remove()
        for m, f in zip(modules, flags):
            m.fused_attn = f
        model.train(was_training)


@torch.no_grad()
def _capture(model: nn.Module, images: Tensor) -> list[tuple[nn.Module, Tensor]]:
    _check_attention(model)
    captured: list[tuple[nn.Module, Tensor]] = []
    with _unfused(model, captured):
        model(images)
    return captured


def attention_probs(model: nn.Module, images: Tensor) -> list[Tensor]:
    """Softmax attention of every attention layer in forward order (model in eval mode, no grad).

    vit/deit/hybrid: (B, heads, N, N) with the prefix tokens first (cls; cls, dist for DeiT).
    swin: (B * windows, heads, window², window²), window-major per image as timm's window_partition
    lays them out; shifted-window blocks see their (rolled) windows with the mask applied.
    """
    return [p for _, p in _capture(model, images)]


# ---------------- patch geometry ----------------
def _grid_centres(grid: tuple[int, int], stride: tuple[float, float]) -> Tensor:
    """(gh * gw, 2) pixel (row, col) centres of a row-major grid of cells of `stride` pixels."""
    rows = (torch.arange(grid[0], dtype=torch.float64) + 0.5) * stride[0]
    cols = (torch.arange(grid[1], dtype=torch.float64) + 0.5) * stride[1]
    return torch.cartesian_prod(rows, cols)  # row-major: token t = (t // gw, t % gw), as flatten(2)


def _pair(size: int | tuple[int, int]) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else tuple(size)


def patch_centres(model: nn.Module, image_size: int | tuple[int, int]) -> Tensor:
    """(N, 2) pixel (row, col) centres of the patch tokens of a vit/deit/hybrid model, in token
    order (prefix tokens excluded). The token grid is patch_embed.grid_size (for the hybrid, the
    stem's feature map over its patches): one token spans image_size / grid pixels."""
    _check_attention(model, names(attention="global"), "single global patch grid (it attends within windows)")
    grid = tuple(model.patch_embed.grid_size)
    h, w = _pair(image_size)
    return _grid_centres(grid, (h / grid[0], w / grid[1]))


# ---------------- mean attention distance ----------------
def attention_distance_from(probs: Tensor, centres: Tensor, num_prefix_tokens: int = 0) -> Tensor:
    """(heads,) mean attention distance of attention `probs` (B, heads, N, N) over tokens at pixel
    `centres` (N - num_prefix_tokens, 2): per query, sum over keys of weight x Euclidean distance
    between the query's and the key's centres; averaged over the B maps and the query tokens.

    The first `num_prefix_tokens` (cls, dist: no position in the image) are dropped from queries
    and keys, and each query row is renormalised to sum 1 over the remaining patch keys."""
    n = centres.shape[0] + num_prefix_tokens
    if probs.dim() != 4 or probs.shape[-2:] != (n, n):
        raise ValueError(f"probs of shape {tuple(probs.shape)}: allowed (B, heads, {n}, {n}) for "
                         f"{centres.shape[0]} centres and {num_prefix_tokens} prefix tokens")
    a = probs[..., num_prefix_tokens:, num_prefix_tokens:].double()           # (B, heads, P, P)
    a = a / a.sum(-1, keepdim=True).clamp_min(torch.finfo(a.dtype).tiny)     # rows sum 1 over patches
    c = centres.double().to(a.device)
    dist = (c[:, None, :] - c[None, :, :]).norm(dim=-1)                      # (P, P): exact 0 on the diagonal
    per_query = (a * dist).sum(-1)                                           # (B, heads, P)
    return per_query.mean(dim=(0, 2)).to(probs.dtype)


def _swin_block_of(model: nn.Module) -> dict[nn.Module, nn.Module]:
    """{WindowAttention: its SwinTransformerBlock} (window size and stage grid live on the block)."""
    from timm.models.swin_transformer import SwinTransformerBlock
    return {b.attn: b for b in model.modules() if isinstance(b, SwinTransformerBlock)}


def _swin_window_centres(block: nn.Module, image_size: tuple[int, int]) -> Tensor:
    """(window², 2) window-local pixel centres: one token of this stage spans image / stage grid
    pixels (patch size x 2^stage). Shifted windows are rolled, but the mask keeps each query on
    keys of its own unrolled region, where local offsets equal offsets in the image."""
    grid = block.input_resolution
    return _grid_centres(tuple(block.window_size), (image_size[0] / grid[0], image_size[1] / grid[1]))


SUPPORT = 1e-20  # a key whose softmax weight is below this is masked (Swin's shifted windows add -100)


def _uniform_over_keys(probs: Tensor) -> Tensor:
    """The same attention's keys, equally weighted: each query row uniform over the keys it may see."""
    seen = (probs > SUPPORT).to(probs.dtype)
    return seen / seen.sum(-1, keepdim=True)


def mean_attention_distance(model: nn.Module, images: Tensor, uniform: bool = False) -> Tensor:
    """(layers, heads) mean attention distance in INPUT PIXELS, averaged over query patches and
    `images` (B, C, H, W): per query, sum over keys of attention weight x Euclidean distance
    between the query's and key's patch centres (ViT paper Fig. 7 right, App. D.7).

    vit/deit/hybrid: prefix tokens (cls; cls, dist for DeiT) are dropped from queries and keys and
    each query row is renormalised to sum 1 over the patch keys; centres from `patch_centres`.
    swin: layers = every block of every stage in forward order; distances are measured within each
    window (window-local centres x the stage's pixel stride). Heads differ per stage: rows are
    padded with NaN up to the largest head count.

    uniform=True gives the reference a head that has learned nothing would reach: every query
    attending equally to the keys it may see (the same keys, masks and windows as the model's).
    """
    family = _check_attention(model)
    size = tuple(images.shape[-2:])
    captured = _capture(model, images)
    if uniform:
        captured = [(m, _uniform_over_keys(p)) for m, p in captured]
    if family.attention == "windowed":
        block = _swin_block_of(model)
        rows = [attention_distance_from(p, _swin_window_centres(block[m], size)) for m, p in captured]
    else:
        centres, prefix = patch_centres(model, size), model.num_prefix_tokens
        rows = [attention_distance_from(p, centres, prefix) for _, p in captured]
    return _padded(rows)


def _padded(rows: list[Tensor]) -> Tensor:
    """(layers, heads) from one (heads,) row per layer, NaN-padded up to the largest head count (Swin)."""
    heads = max(r.numel() for r in rows)
    out = torch.full((len(rows), heads), float("nan"))
    for i, r in enumerate(rows):
        out[i, :r.numel()] = r.float().cpu()
    return out


def attention_entropy_from(probs: Tensor, num_prefix_tokens: int = 0, masked: bool = False) -> Tensor:
    """(heads,) how spread attention `probs` (B, heads, N, N) is: per query, the entropy of its row
    over the patch keys (prefix tokens dropped and the row renormalised, as for distance) over the
    entropy of uniform attention on the keys it may see, log(keys): every patch key, or with
    `masked` (Swin's shifted windows) the keys whose weight is above SUPPORT; averaged over the B maps
    and the queries. 1: uniform; near 0: all on one key. A query that may see one key is left out."""
    a = probs[..., num_prefix_tokens:, num_prefix_tokens:].double()
    a = a / a.sum(-1, keepdim=True).clamp_min(torch.finfo(a.dtype).tiny)
    entropy = -(a * a.clamp_min(torch.finfo(a.dtype).tiny).log()).sum(-1)           # 0 log 0 = 0
    keys = (a > SUPPORT).sum(-1).double() if masked else torch.full_like(entropy, a.shape[-1])
    ratio = torch.where(keys > 1, entropy / keys.clamp_min(2).log(), float("nan"))   # (B, heads, P)
    return ratio.nanmean(dim=(0, 2)).to(probs.dtype)


def attention_entropy(model: nn.Module, images: Tensor) -> Tensor:
    """(layers, heads) attention entropy over uniform attention's (attention_entropy_from), the
    concentration of attention apart from its distance: a head can attend as far as uniform
    attention on average and still put most of its weight on a few patches. vit/deit/hybrid: prefix
    tokens dropped; swin: within each window, masked keys left out; rows NaN-padded as for distance."""
    swin = _check_attention(model).attention == "windowed"
    prefix = 0 if swin else model.num_prefix_tokens
    return _padded([attention_entropy_from(p, prefix, masked=swin) for _, p in _capture(model, images)])


# ---------------- [CLS] attention and rollout ----------------
def _grid_of(model: nn.Module, n_tokens: int) -> tuple[int, int]:
    gh, gw = model.patch_embed.grid_size
    if n_tokens != model.num_prefix_tokens + gh * gw:
        raise ValueError(f"{n_tokens} tokens: allowed {model.num_prefix_tokens} prefix + {gh}x{gw} patch tokens "
                         f"(the images' size must match the model's)")
    return gh, gw


def cls_attention(model: nn.Module, images: Tensor) -> Tensor:
    """(B, heads, gh, gw) the last layer's [CLS] query row over the patch keys: raw softmax
    weights (not renormalised: they sum to 1 minus the weight on the prefix tokens). vit, deit
    and hybrid built with pool='token'; swin, convnext, resnet and pool='avg' models raise."""
    _check_class_token(model)
    last = attention_probs(model, images)[-1]                      # (B, heads, N, N); cls is token 0
    gh, gw = _grid_of(model, last.shape[-1])
    return last[:, :, 0, model.num_prefix_tokens:].reshape(last.shape[0], last.shape[1], gh, gw)


def attention_rollout(model: nn.Module, images: Tensor) -> Tensor:
    """(B, gh, gw) attention rollout (Abnar & Zuidema 2020): per layer A' = 0.5 mean_heads(A) + 0.5 I
    (the residual), rows renormalised, multiplied through the layers (R = A'_L ... A'_1); the
    [CLS] row over the patch tokens, normalised to sum 1. Families as for `cls_attention`."""
    _check_class_token(model)
    probs = attention_probs(model, images)
    n = probs[0].shape[-1]
    gh, gw = _grid_of(model, n)
    eye = torch.eye(n, dtype=torch.float64, device=probs[0].device)
    rollout = eye.expand(probs[0].shape[0], n, n)                   # (B, N, N)
    for a in probs:
        a = 0.5 * a.double().mean(1) + 0.5 * eye                    # (B, N, N): heads averaged, residual added
        a = a / a.sum(-1, keepdim=True)
        rollout = a @ rollout                                       # later layers on the left
    cls = rollout[:, 0, model.num_prefix_tokens:]                   # (B, gh * gw)
    cls = cls / cls.sum(-1, keepdim=True)
    return cls.reshape(-1, gh, gw).to(probs[0].dtype)
