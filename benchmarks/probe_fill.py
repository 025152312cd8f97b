"""What PatchDrop and a shift measure depends on what fills the blanked pixels: the dataset's mean
colour (0.0 in normalised space, the probes' fill before 2026-12-07) against black (a pixel of 0
before normalisation, Naseer et al.'s and the probes' fill since). On trained run folders, on the
first --images test images: PatchDrop's accuracy and its share of the clean accuracy above chance
at 10-90% of the --patch cells blanked, and the accuracy after diagonal shifts, under each fill.
Prints measured numbers; asserts nothing.

    python benchmarks/probe_fill.py RUN_DIR [RUN_DIR ...] [--images 1000] [--patch 4]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from datamodules import ImageClassificationDataModule  # noqa: E402
from experiments.runs.run.provenance import git_commit, hardware  # noqa: E402
from experiments.runs.run.run_config import load_config  # noqa: E402
from experiments.runs.run.trained import load_classifier, test_images  # noqa: E402
from modules.probes.robustness import (accuracy_under_shift, black, majority_rate, patchdrop,  # noqa: E402
                                       predict)

FRACTIONS = (0.1, 0.3, 0.5, 0.7, 0.9)
SHIFTS = (2, 4, 6)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/probe_fill.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="run folders written by `python -m experiments fit`")
    p.add_argument("--images", type=int, default=1000, help="test images (default 1000)")
    p.add_argument("--patch", type=int, default=4, help="cell size in pixels (default 4)")
    a = p.parse_args(argv)
    print(f"# PatchDrop and shifts under two fills; {hardware()}, commit {git_commit()}")
    for run in map(Path, a.runs):
        data = load_config(run)["data"]
        x, y = test_images(data, a.images)
        model = load_classifier(run).model
        chance, clean = majority_rate(y), (predict(model, x) == y).float().mean().item()
        print(f"\n{run.name}: clean accuracy {clean:.3f} on {len(y)} test images, majority-class rate {chance:.3f}")
        fills = {"mean colour": 0.0, "black": black(*ImageClassificationDataModule(**data).normalization)}
        for name, fill in fills.items():
            dropped = [patchdrop(model, x, y, a.patch, f, torch.Generator().manual_seed(0), fill=fill)[0]
                       for f in FRACTIONS]
            kept = [(acc - chance) / (clean - chance) for acc in dropped]
            shifted = accuracy_under_shift(model, x, y, SHIFTS, fill=fill)
            print(f"  {name:>11} fill: PatchDrop at {'/'.join(f'{f:g}' for f in FRACTIONS)}: "
                  + " ".join(f"{v:.3f}" for v in dropped) + "; share above chance kept: "
                  + " ".join(f"{v:.2f}" for v in kept) + f"; diagonal shift {'/'.join(map(str, SHIFTS))} px: "
                  + " ".join(f"{shifted[s]:.3f}" for s in SHIFTS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
