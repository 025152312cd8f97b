"""The tables' figures in TensorBoard: every experiment's results/*.png is also an image of
<runs_dir>/<experiment>/tensorboard[/<profile>], one events file each, replaced on every run of the
tables; the probes' figures go into their run's own events (probes/<name>).
"""
from __future__ import annotations

import io
from pathlib import Path

from modules import FAMILIES
from modules.files import write_atomic



def family_colour(family: str, default: str) -> str:
    """One colour per family in every figure, by its place in the family table (`default` for others)."""
    return f"C{list(FAMILIES).index(family)}" if family in FAMILIES else default


def pyplot():
    """matplotlib.pyplot on the Agg backend: the tables draw on machines without a display."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_png(fig, path: Path, dpi: float | str = "figure") -> None:
    """The figure as a PNG without matplotlib's version stamp, so an unchanged figure is byte-identical;
    written atomically, never through a link (modules.files)."""
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=dpi, metadata={"Software": None})
    write_atomic(path, png.getbuffer())


def log_figures(figs: dict, log_dir: Path, prefix: str, replace: bool = True) -> None:
    """The figures ({name: matplotlib Figure}, already saved as .png) as TensorBoard images, tags
    <prefix>/<name>, in log_dir (closed after). `replace`: log_dir's earlier events files go first,
    so rerunning the tables leaves one events file holding the current figures (none without
    figures) rather than one more per run; a run's own folder (probes) keeps its curves: False."""
    from torch.utils.tensorboard import SummaryWriter
    log_dir = Path(log_dir)
    if replace:
        for old in log_dir.glob("events.out.tfevents.*"):
            old.unlink()
    if not figs:
        return
    log_dir.mkdir(parents=True, exist_ok=True)
    writer = SummaryWriter(log_dir=str(log_dir))
    for name, fig in figs.items():
        writer.add_figure(f"{prefix}/{name}", fig)
    writer.close()
