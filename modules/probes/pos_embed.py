"""Position-embedding probes: the ViT paper's Fig. 7 (left), the cosine similarity of each patch's
position embedding with every other patch's, and a few numbers saying whether the table has 2D
structure (nearby patches more alike than distant ones, by grid distance rather than raster order).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ALLOWED = "allowed vit, deit, hybrid with pos_embed learn, learn2d or sincos"
STRUCTURE_MIN_CORRELATION = 0.3  # grid_correlation above this (and above raster_correlation): 2D structure


def patch_table(model: nn.Module) -> torch.Tensor:
    """The position table's patch entries as a (gh, gw, D) float tensor. timm tables hold either the
    patches only (no_embed_class: sincos, or a model without prefix tokens) or the model's
    num_prefix_tokens entries first (learn: vit's cls; deit's cls and dist) and then the patches."""
    table = getattr(model, "pos_embed", None)
    if not isinstance(table, torch.Tensor) or table.ndim != 3 or not hasattr(model, "patch_embed"):
        what = "pos_embed='none'" if table is None and hasattr(model, "pos_embed") else \
            f"{type(model).__name__} has no pos_embed table"
        raise ValueError(f"model has no position table ({what}): {ALLOWED}")
    gh, gw = model.patch_embed.grid_size
    n, prefix = gh * gw, getattr(model, "num_prefix_tokens", 0)
    if table.shape[1] not in (n, n + prefix):
        raise ValueError(f"position table of {table.shape[1]} entries for a {gh}x{gw} grid: allowed {n} "
                         f"(patches only) or {n + prefix} ({prefix} prefix entries, then the patches)")
    patches = table[0, table.shape[1] - n:]                   # (N, D), row-major over the grid
    return patches.detach().float().cpu().reshape(gh, gw, -1)


def pos_embed_similarity(model: nn.Module) -> torch.Tensor:
    """(gh, gw, gh, gw) cosine similarities: [r, c] is patch (r, c)'s similarity with every patch."""
    patches = patch_table(model)
    gh, gw, d = patches.shape
    unit = F.normalize(patches.reshape(gh * gw, d), dim=-1)  # (N, D)
    return (unit @ unit.T).reshape(gh, gw, gh, gw)


def _pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    return float((a * b).sum() / (a.norm() * b.norm()))


def pos_embed_2d_structure(sim: torch.Tensor) -> dict:
    """Whether a (gh, gw, gh, gw) similarity shows 2D structure, over each unordered pair of distinct
    patches once:
    neighbour_mean / far_mean: mean similarity at Manhattan grid distance 1 / at >= 3; gap = their difference;
    grid_correlation: Pearson correlation of similarity with minus the Euclidean grid distance;
    raster_correlation: the same with minus the distance in raster order |i - j| (a 1D table's ordering);
    two_d: grid_correlation > STRUCTURE_MIN_CORRELATION and > raster_correlation."""
    gh, gw = sim.shape[:2]
    if sim.shape != (gh, gw, gh, gw) or gh * gw < 2:
        raise ValueError(f"similarity shape {tuple(sim.shape)}: allowed (gh, gw, gh, gw) with at least 2 patches")
    rows, cols = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
    rows, cols = rows.flatten().double(), cols.flatten().double()          # (N,) row-major, as the table
    i, j = torch.triu_indices(gh * gw, gh * gw, offset=1)                    # each pair once
    dr, dc = (rows[i] - rows[j]).abs(), (cols[i] - cols[j]).abs()
    s = sim.reshape(gh * gw, gh * gw)[i, j].double()
    manhattan, euclid, raster = dr + dc, (dr ** 2 + dc ** 2).sqrt(), (i - j).abs().double()
    near, far = s[manhattan == 1], s[manhattan >= 3]
    out = {"neighbour_mean": float(near.mean()),
           "far_mean": float(far.mean()) if far.numel() else float("nan"),
           "grid_correlation": _pearson(s, -euclid),
           "raster_correlation": _pearson(s, -raster)}
    out["gap"] = out["neighbour_mean"] - out["far_mean"]
    out["two_d"] = bool(out["grid_correlation"] > max(STRUCTURE_MIN_CORRELATION, out["raster_correlation"]))
    return out


def plot_pos_embed_similarity(sim: torch.Tensor, fig=None, title: str | None = None):
    """ViT Fig. 7 (left): a gh x gw grid of small gh x gw images, tile (r, c) the similarity of patch
    (r, c) with every patch; one colour scale -1..1. Draws into `fig` (a new Figure if None); returns it."""
    from matplotlib.figure import Figure
    gh, gw = sim.shape[:2]
    fig = fig if fig is not None else Figure(figsize=(1.0 + 0.7 * gw, 0.6 + 0.7 * gh))
    axes = fig.subplots(gh, gw, squeeze=False)
    for r in range(gh):
        for c in range(gw):
            ax = axes[r][c]
            image = ax.imshow(sim[r, c].cpu().numpy(), vmin=-1.0, vmax=1.0, cmap="viridis")
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(str(r + 1), fontsize=7)
            if r == gh - 1:
                ax.set_xlabel(str(c + 1), fontsize=7)
    fig.supxlabel("Input patch column")
    fig.supylabel("Input patch row")
    fig.colorbar(image, ax=axes, label="Cosine similarity", shrink=0.8)
    if title:
        fig.suptitle(title)
    return fig
