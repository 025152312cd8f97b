"""Images per second delivered by the DataModule's training loader (uint8 tensors, batched
augmentation) vs the usual alternative (a `datasets` dataset of PNG-encoded images with per-sample
torchvision transforms in a standard DataLoader), same augmentation, same run.

    make bench          # or: python benchmarks/datamodule_throughput.py [--alt_batches 100]
"""
from __future__ import annotations

import argparse
import io
import time

import datasets
import torch
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import transforms as T

from datamodules import ImageClassificationDataModule
from experiments.runs.run.provenance import hardware, versions


def ours(dm: ImageClassificationDataModule) -> tuple[float, int]:
    loader = dm.train_dataloader()
    start, n = time.perf_counter(), 0
    for x, y in loader:  # one full epoch
        n += len(y)
    return n / (time.perf_counter() - start), n


def alternative(dm: ImageClassificationDataModule, batches: int, workers: int) -> tuple[float, int]:
    images, labels = dm._train_arrays
    idx = dm.train_indices
    # HF serves Fashion-MNIST as PNG bytes in an Image column; encode once, outside the timing
    pngs = []
    for a in images[idx]:
        buf = io.BytesIO()
        Image.fromarray(a[..., 0]).save(buf, format="PNG")
        pngs.append({"bytes": buf.getvalue(), "path": None})
    ds = datasets.Dataset.from_dict({"image": pngs, "label": labels[idx].tolist()},
                                    features=datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")}))
    mean, std = (m.item() / 255 for m in dm.normalization[0]), (s.item() / 255 for s in dm.normalization[1])
    tf = T.Compose([T.RandomCrop(dm.image_size, padding=dm.augment.cfg.crop_padding), T.RandomHorizontalFlip(),
                    T.ToTensor(), T.Normalize([next(mean)], [next(std)])])

    def per_sample(batch):
        batch["image"] = [tf(img) for img in batch["image"]]
        return batch
    loader = DataLoader(ds.with_transform(per_sample), batch_size=dm.batch_size, shuffle=True, drop_last=True,
                        num_workers=workers, persistent_workers=False)
    it, n = iter(loader), 0
    next(it)  # worker start-up is not throughput
    start = time.perf_counter()
    for _ in range(batches):
        b = next(it)
        n += len(b["label"])
    return n / (time.perf_counter() - start), n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--alt_batches", type=int, default=100, help="batches timed for the alternative (default 100)")
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers of the alternative (default 2)")
    a = p.parse_args()
    torch.manual_seed(0)
    dm = ImageClassificationDataModule("fashion_mnist", batch_size=128)
    dm.setup("fit")
    ours_ips, ours_n = ours(dm)
    alt_ips, alt_n = alternative(dm, a.alt_batches, a.workers)
    print(f"hardware: {hardware()}; torch {versions()['torch']}, datasets {versions()['datasets']}")
    print(f"augmentation: random crop (padding {dm.augment.cfg.crop_padding}) + horizontal flip + normalise, batch 128")
    print(f"DataModule tensor loader : {ours_ips:12,.0f} images/s  ({ours_n:,} images, one epoch)")
    print(f"datasets + per-sample tf : {alt_ips:12,.0f} images/s  ({alt_n:,} images, DataLoader, {a.workers} workers)")
    print(f"speed-up                 : {ours_ips / alt_ips:12.1f}x  (goal: at least 20x)")


if __name__ == "__main__":
    main()
