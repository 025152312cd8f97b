"""A loader over uint8 tensors already in memory (and on the accelerator when training there).

Each batch is one index into the whole tensor plus batched tensor ops: no workers, no collate,
no per-sample PIL. Shards by rank for multi-process training (every rank draws the same
permutation from (seed, epoch) and takes every world_size-th image of it).
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

    def _rank_count(self) -> int:
        """Images this rank sees per epoch: every world_size-th of the epoch's order (training
        truncates to an equal share so every rank runs the same number of steps)."""
        n = len(self.labels)
        return n // self.world_size if self.drop_last else len(range(self.rank, n, self.world_size))

    def __len__(self) -> int:
        n = self._rank_count()
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        device = self.labels.device
        g = torch.Generator(device=device)
        g.manual_seed(self.seed * 100_003 + self.epoch)
        self.epoch += 1
        n = len(self.labels)
        order = torch.randperm(n, generator=g, device=device) if self.shuffle else torch.arange(n, device=device)
        mine = order[self.rank::self.world_size][: self._rank_count()]
        for i in range(len(self)):
            idx = mine[i * self.batch_size:(i + 1) * self.batch_size]
            yield self.transform(self.images[idx], self.labels[idx], g)
