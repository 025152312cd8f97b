"""A loader over uint8 tensors already in memory (and on the accelerator when training there).

Each batch is one index into the whole tensor plus batched tensor ops: no workers, no collate,
no per-sample PIL. Shards by rank for multi-process training (every rank draws the same
permutation from (seed, epoch) and takes every world_size-th image of it).

Resumable at any batch: the order and the augmentation of an epoch are a function of one
generator seeded by (seed, epoch) and of the batch's place (epoch, index), which the transform
gets (the strong stages' counter-based draws); `state_dict()` (which Lightning puts into every
checkpoint) holds the generator's state before each of the last batches handed out and before the
next one (Lightning may fetch a batch ahead of the one it trains on: the state it resumes at is one
of those).
"""
from __future__ import annotations

import math
from typing import Callable, Iterator

import torch

KEPT_STATES = 4  # generator states kept, for the last batches handed out (Lightning prefetches one)


class TensorBatchLoader:
    """`transform(images, labels, generator, (epoch, batch index))` makes a batch. `position`, when
    given, says where a pass starts: (epoch, batches of it already trained). It is read when the
    pass starts, i.e. after Lightning has restored a checkpoint; without it (or when it returns
    None), passes count epochs from 0."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int, *,
                 transform: Callable, shuffle: bool = False, drop_last: bool = False, seed: int = 0,
                 rank: int = 0, world_size: int = 1, position: Callable[[], tuple[int, int] | None] | None = None):
        self.images, self.labels = images, labels  # (N, C, H, W) uint8, (N,) int64
        self.batch_size, self.transform = batch_size, transform
        self.shuffle, self.drop_last = shuffle, drop_last
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.position = position
        self.epoch = 0                                   # of the pass in progress
        self._passes = 0                                 # passes started (the epoch, without `position`)
        self._states: dict[int, torch.Tensor] = {}      # batch index -> generator state before it
        self._g: torch.Generator | None = None
        self._next = 0                                   # index of the next batch of the pass
        self._restored: dict | None = None

    def _rank_count(self) -> int:
        """Images this rank sees per epoch: every world_size-th of the epoch's order (training
        truncates to an equal share so every rank runs the same number of steps)."""
        n = len(self.labels)
        return n // self.world_size if self.drop_last else len(range(self.rank, n, self.world_size))

    def __len__(self) -> int:
        n = self._rank_count()
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def state_dict(self) -> dict:
        states = {k: s.clone() for k, s in self._states.items()}
        if self._g is not None:
            states[self._next] = self._g.get_state()  # the generator waits before the next batch
        return {"epoch": self.epoch, "generator_states": states}

    def load_state_dict(self, state: dict) -> None:
        self._restored = state

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        where = self.position() if self.position is not None else None
        epoch, start = where if where is not None else (self._passes, 0)
        self._passes += 1
        device = self.labels.device
        g = torch.Generator(device=device)
        g.manual_seed(self.seed * 100_003 + epoch)
        n = len(self.labels)
        order = torch.randperm(n, generator=g, device=device) if self.shuffle else torch.arange(n, device=device)
        if start > 0:
            g.set_state(self._restored_state(epoch, start))
        self._restored = None
        self.epoch, self._states, self._g = epoch, {}, g
        mine = order[self.rank::self.world_size][: self._rank_count()]
        for i in range(start, len(self)):
            self._states[i] = g.get_state()
            self._states.pop(i - KEPT_STATES, None)
            idx = mine[i * self.batch_size:(i + 1) * self.batch_size]
            batch = self.transform(self.images[idx], self.labels[idx], g, (epoch, i))
            self._next = i + 1
            yield batch
        self._g, self._next = None, 0

    def _restored_state(self, epoch: int, batch: int) -> torch.Tensor:
        saved = self._restored or {}
        states = saved.get("generator_states", {})
        if saved.get("epoch") != epoch or batch not in states:
            raise RuntimeError(f"the checkpoint holds no loader state for epoch {epoch}, batch {batch} "
                               f"(it has epoch {saved.get('epoch')}, batches {sorted(states)})")
        return states[batch]
