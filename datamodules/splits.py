"""Stratified, seeded, nested splits.

Everything derives from one ordering: shuffle each class's indices, then deal them out round-robin
over the classes (in a shuffled class order). Any prefix of that order is stratified (per-class
counts differ by at most one until a class runs out) and, for one seed, a shorter prefix is
contained in every longer one: the 10% training subset is inside the 30% subset.
"""
from __future__ import annotations

import numpy as np


def stratified_order(labels: np.ndarray, seed: int) -> np.ndarray:
    """Positions 0..len(labels)-1 in round-robin class order; see the module docstring."""
    rng = np.random.default_rng(seed)
    classes = rng.permutation(np.unique(labels))
    per_class = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
    rounds = max(len(p) for p in per_class)
    # (rounds, classes) table, -1 where a class has run out; row-major read = round robin
    table = np.full((rounds, len(per_class)), -1, dtype=np.int64)
    for j, p in enumerate(per_class):
        table[: len(p), j] = p
    order = table.ravel()
    return order[order >= 0]


def default_val_size(train_split_size: int, cap: int = 5000, max_fraction: float = 0.1) -> int:
    """5,000 images or 10% of the train split, whichever is smaller."""
    return min(cap, int(train_split_size * max_fraction))


def split_train_val(labels: np.ndarray, val_size: int, split_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(pool, val) positions, both sorted. The pool is what training subsets are drawn from."""
    if not 0 < val_size < len(labels):
        raise ValueError(f"val_size={val_size}: allowed integers in [1, {len(labels) - 1}] for a train split of {len(labels)}")
    order = stratified_order(labels, split_seed)
    return np.sort(order[val_size:]), np.sort(order[:val_size])


def resolve_train_size(fraction: float, train_size: int | None, pool_size: int) -> int:
    if train_size is not None:
        if fraction != 1.0:
            raise ValueError(f"give fraction or train_size, not both (fraction={fraction}, train_size={train_size})")
        if not 1 <= train_size <= pool_size:
            raise ValueError(f"train_size={train_size} is outside the training pool: allowed 1..{pool_size}")
        return train_size
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction={fraction} is outside (0, 1]")
    return max(1, round(fraction * pool_size))


def training_subset(pool: np.ndarray, pool_labels: np.ndarray, n: int, seed: int) -> np.ndarray:
    """n positions of the pool, stratified and nested across n for one seed (sorted)."""
    return np.sort(pool[stratified_order(pool_labels, seed)[:n]])
