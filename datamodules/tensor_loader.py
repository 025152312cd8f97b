"""A loader over uint8 tensors already in memory (and on the accelerator when training there).

Each batch is one index into the whole tensor plus batched tensor ops: no workers, no collate,
no per-sample PIL. Shards by rank for multi-process training (every rank draws the same
permutation from (seed, epoch) and takes every world_size-th batch).
"""
from __future__ import annotations

import math
from typing import Callable, Iterator

import torch


class TensorBatchLoader:
    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int, *,
                 transform: Callable, shuffle: bool = False, drop_last: bool = False,
                 seed: int = 0, start_epoch: int = 0, rank: int = 0, world_size: int = 1):
        self.images, self.labels = images, labels  # (N, C, H, W) uint8, (N,) int64
        self.batch_size, self.transform = batch_size, transform
        self.shuffle, self.drop_last = shuffle, drop_last
        self.seed, self.epoch = seed, start_epoch
        self.rank, self.world_size = rank, world_size

    def _batches_total(self) -> int:
        n = len(self.labels)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __len__(self) -> int:
        total = self._batches_total()
        if self.shuffle:  # training: every rank gets the same number of batches
            return total // self.world_size
        return len(range(self.rank, total, self.world_size))

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        device = self.labels.device
        g = torch.Generator(device=device)
        g.manual_seed(self.seed * 100_003 + self.epoch)
        self.epoch += 1
        n = len(self.labels)
        order = torch.randperm(n, generator=g, device=device) if self.shuffle else torch.arange(n, device=device)
        for i in range(len(self)):
            start = (i * self.world_size + self.rank) * self.batch_size
            idx = order[start:start + self.batch_size]
            yield self.transform(self.images[idx], self.labels[idx], g)
