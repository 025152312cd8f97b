"""A trained run folder read back for evaluation after training: its best checkpoint's network and
the test images of its data (its config.yaml is read as data by run_config.load_config), for
exp-distill's probes, exp-complexity's interpolation and `python -m experiments probe`. Each bad
folder is one clear line."""
from __future__ import annotations

from pathlib import Path

import torch

from datamodules import ImageClassificationDataModule

from experiments.runs.run.run_folder import RunFolder

FIT = "`python -m experiments fit`"


def load_classifier(run_dir: str | Path):
    """The run's ImageClassifier from checkpoints/best.ckpt, on CPU, in eval mode (no teacher)."""
    from modules import ImageClassifier
    from modules.checkpoint_io import read_checkpoint
    ckpt = RunFolder(run_dir).best_checkpoint
    if not ckpt.is_file():
        raise ValueError(f"checkpoint {str(ckpt)!r} does not exist: allowed a run folder written by {FIT}")
    read_checkpoint(ckpt)  # weights only: refuses, in one line, a file that holds code
    try:
        return ImageClassifier.load_from_checkpoint(ckpt, map_location="cpu", weights_only=True,
                                                    teacher_checkpoint=None).eval()
    except Exception as e:
        text = str(e).strip()
        raise ValueError(f"checkpoint {str(ckpt)!r} is not a readable checkpoint of this suite "
                         f"({type(e).__name__}: {text.splitlines()[0] if text else ''})") from None


def test_images(data: dict, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `limit` (all when None) test images of a run's data section, normalised as the
    run saw them: (N, C, H, W) float and (N,) labels, in the split's fixed order."""
    dm = ImageClassificationDataModule(**data)
    dm.setup("test")
    xs, ys, n = [], [], 0
    for x, y in dm.test_dataloader():
        take = len(y) if limit is None else min(len(y), limit - n)
        xs.append(x[:take])
        ys.append(y[:take])
        n += take
        if limit is not None and n >= limit:
            break
    return torch.cat(xs), torch.cat(ys)
