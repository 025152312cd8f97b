"""exp-datascale's figure: test error against training images, one line per family and settings."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.datascale.numbers import Result
from experiments.datascale.words import common_settings
from experiments.figures import family_colour, pyplot, save_png

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plot(rows: list[dict], runs: list[Result], path: Path) -> "Figure":
    """Test error (1 - accuracy) against training images, log-log, one line per (family,
    settings), bars the 95% t-interval over seeds where there is one (cut at the axis floor)."""
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter, NullFormatter
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    settings = list(dict.fromkeys(r["settings"] for r in rows))
    for j, family in enumerate(dict.fromkeys(r["family"] for r in rows)):
        color = family_colour(family, f"C{j % 10}")
        for i, st in enumerate(settings):
            pts = [r for r in rows if r["family"] == family and r["settings"] == st]
            if not pts:
                continue
            err = [max(1.0 - p["test_acc_mean"], 1e-4) for p in pts]
            ci = [p["test_acc_ci95"] or 0.0 for p in pts]
            ax.errorbar([p["train_size"] for p in pts], err, yerr=[[min(c, 0.9 * e) for c, e in zip(ci, err)], ci],
                        marker="o", capsize=3, color=color, label=f"{family} ({st})" if st else family,
                        linestyle=("-", "--", ":", "-.")[i % 4])
    ax.set_xscale("log")
    sizes = sorted({r["train_size"] for r in rows})
    ax.set_xticks(sizes, [f"{n:,}" for n in sizes])   # the sizes run, not matplotlib's 3x10^2 4x10^2 (they overlap)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.set_xlabel("training images (log scale)")
    ax.set_ylabel("test error, 1 - accuracy (log scale)")
    ax.set_title(textwrap.fill(f"{common_settings(runs)}; mean over seeds, bars: 95% t-interval", 120),
                 fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path)
    return fig  # for TensorBoard, which closes it (log_figures)
