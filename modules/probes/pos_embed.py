"""Position-embedding probes: the ViT paper's Fig. 7 (left), the cosine similarity of each patch's
position embedding with every other patch's, and a few numbers saying whether the table has 2D
structure (nearby patches more alike than distant ones, by grid distance rather than raster order).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ALLOWED = "allowed vit, deit, hybrid with pos_embed learn, learn2d or sincos"
# 2D structure: grid neighbours, in each direction, above far patches by at least this much cosine.
# A vertical neighbour is a whole row away in the 1D order, so only a table that learned the grid
# makes it close; far patches (grid distance >= 3) of an unstructured table sit near 0.
STRUCTURE_MIN_GAP = 0.1

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
    patches once, by neighbour against far similarity:
    horizontal_mean / vertical_mean: mean similarity of grid neighbours in the same row / the same
    column (a vertical neighbour is gw apart in the 1D order); neighbour_mean: both together
    (Manhattan grid distance 1); far_mean: at Manhattan distance >= 3; gap = neighbour_mean − far_mean;
    bands: the mean similarity at each Manhattan distance 1, 2, ... (a falling band profile is
    similarity falling off with grid distance, however quickly);
    two_d: horizontal and vertical neighbours both above far patches by STRUCTURE_MIN_GAP or more.
    Also grid_correlation / raster_correlation: Pearson correlation of similarity with minus the
    Euclidean grid distance / minus the distance in raster order |i - j| (kept as numbers: a
    correlation cannot see similarity that falls off within one or two patches)."""
    gh, gw = sim.shape[:2]
    if sim.shape != (gh, gw, gh, gw) or gh * gw < 2:
        raise ValueError(f"similarity shape {tuple(sim.shape)}: allowed (gh, gw, gh, gw) with at least 2 patches")
    rows, cols = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
    rows, cols = rows.flatten().double(), cols.flatten().double()          # (N,) row-major, as the table
    i, j = torch.triu_indices(gh * gw, gh * gw, offset=1)                    # each pair once
    dr, dc = (rows[i] - rows[j]).abs(), (cols[i] - cols[j]).abs()
    s = sim.reshape(gh * gw, gh * gw)[i, j].double()
    manhattan, euclid, raster = dr + dc, (dr ** 2 + dc ** 2).sqrt(), (i - j).abs().double()

    def mean(mask: torch.Tensor) -> float:
        return float(s[mask].mean()) if mask.any() else float("nan")
    out = {"neighbour_mean": mean(manhattan == 1), "far_mean": mean(manhattan >= 3),
           "horizontal_mean": mean((dr == 0) & (dc == 1)), "vertical_mean": mean((dr == 1) & (dc == 0)),
           "bands": [mean(manhattan == d) for d in range(1, int(manhattan.max()) + 1)],
           "grid_correlation": _pearson(s, -euclid), "raster_correlation": _pearson(s, -raster)}
    out["gap"] = out["neighbour_mean"] - out["far_mean"]
    out["two_d"] = bool(min(out["horizontal_mean"], out["vertical_mean"]) - out["far_mean"] >= STRUCTURE_MIN_GAP)
    return out


def plot_pos_embed_similarity(sim: torch.Tensor, fig=None, title: str | None = None):
    """ViT Fig. 7 (left): a gh x gw grid of small gh x gw tiles, tile (r, c) the similarity of patch
    (r, c) with every patch; one colour scale -1..1. Drawn as one mosaic image with blank gutters
    between tiles (a subplot per tile took ~1 s a figure at 7 x 7, and grows with the grid).
    Draws into `fig` (a new Figure if None); returns it."""
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.figure import Figure
    gh, gw = sim.shape[:2]
    # (gh, gw, gh, gw) -> tiles padded by one NaN row and column -> rows of tiles -> drop the last gutter
    tiles = np.pad(sim.detach().cpu().double().numpy(), ((0, 0), (0, 0), (0, 1), (0, 1)), constant_values=np.nan)
    mosaic = tiles.transpose(0, 2, 1, 3).reshape(gh * (gh + 1), gw * (gw + 1))[:-1, :-1]
    fig = fig if fig is not None else Figure(figsize=(1.0 + 0.7 * gw, 0.6 + 0.7 * gh))
    ax = fig.subplots()
    image = ax.imshow(mosaic, vmin=-1.0, vmax=1.0, cmap=colormaps["viridis"].with_extremes(bad="white"),
                      interpolation="nearest")
    ax.set_xticks([c * (gw + 1) + (gw - 1) / 2 for c in range(gw)], [str(c + 1) for c in range(gw)], fontsize=7)
    ax.set_yticks([r * (gh + 1) + (gh - 1) / 2 for r in range(gh)], [str(r + 1) for r in range(gh)], fontsize=7)
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    ax.set(xlabel="Input patch column", ylabel="Input patch row")
    fig.colorbar(image, ax=ax, label="Cosine similarity", shrink=0.8)
    if title:
        fig.suptitle(title)
    return fig
