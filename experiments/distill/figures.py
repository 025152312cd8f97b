"""exp-distill's figure: each student's test accuracy against training images (teachers dashed) and
its class-distillation token cosine after each block."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from experiments.distill.numbers import (DEIT_PUBLISHED, NAME, Profile, estimate_of, reported, student_accs, teacher_accs,
                                         token_cosine)
from experiments.figures import pyplot, save_png

if TYPE_CHECKING:
    from matplotlib.figure import Figure
def plot(p: Profile, path: Path) -> "Figure":
    """Left: reported-head test accuracy against training images (teachers dashed); right: the
    cls-dist token cosine after each block at the largest fraction."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator, NullFormatter
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=110)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    sized = [f for f in p.fractions if p.train_size(f)]
    for i, s in enumerate(p.student_names):
        ests = [(p.train_size(f), estimate_of(student_accs(p, s, f, reported(s)))) for f in sized]
        ests = [(n, e) for n, e in ests if e is not None]
        dodge = 1.03 ** (i - (len(p.student_names) - 1) / 2)  # side by side, so the bars don't hide each other
        if ests:
            left.errorbar([n * dodge for n, _ in ests], [e.value for _, e in ests],
                          yerr=[e.ci95 or 0.0 for _, e in ests],
                          marker="o", capsize=3, color=colors[i % len(colors)], label=s)
    for j, t in enumerate(p.teacher_families):
        ests = [(p.train_size(f), estimate_of(teacher_accs(p, t, f))) for f in sized]
        ests = [(n, e) for n, e in ests if e is not None]
        if ests:
            left.plot([n for n, _ in ests], [e.value for _, e in ests], "--", marker="s", alpha=0.7,
                      color=colors[(len(p.student_names) + j) % len(colors)], label=f"teacher {t}")
    left.set_xscale("log")
    sizes = [p.train_size(f) for f in sized]
    left.set_xticks(sizes, [f"{n:,}" for n in sizes])
    left.xaxis.set_minor_formatter(NullFormatter())
    left.set_xlabel("training images (log scale)")
    left.set_ylabel("test accuracy (cls+dist; cls for none)")
    left.set_ylim(0, 1)  # accuracy is bounded; a 2-seed t-interval is not
    left.set_title("mean over seeds, bars: 95% t-interval; teachers dashed", fontsize=9)
    top = p.fractions[-1] if p.fractions else None
    for i, s in enumerate(p.student_names):
        curve = token_cosine(p, s, top) if top is not None else []
        if curve:
            right.plot(range(1, len(curve) + 1), curve, marker="o", color=colors[i % len(colors)], label=s)
    right.axhline(DEIT_PUBLISHED["token_cosine"][1], linestyle=":", color="0.5", label="DeiT-B, last block")
    right.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.set_xlabel("block")
    right.set_ylabel("cos(class token, distillation token)")
    right.set_title(f"after each block, mean over seeds, fraction {top:g}" if top is not None else "", fontsize=9)
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{NAME} ({p.name}): {p.axes.get('dataset', '')}, DeiT students", fontsize=10)
    fig.tight_layout()
    save_png(fig, path)
    return fig  # for TensorBoard, which closes it (log_figures)

