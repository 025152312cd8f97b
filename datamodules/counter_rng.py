"""A counter-based random number generator of tensor ops: Threefry-2x32 with 20 rounds (Salmon,
Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011; Random123's
threefry2x32, JAX's default generator).

Why one: the strong variant's random numbers (RandAugment's ops, Random Erasing's boxes and noise,
MixUp/CutMix's lambda, switch and box) must be drawn for a packed group's K members at once and
inside its compiled step (datamodules.batch_augment, modules.packed_step). A torch.Generator cannot
do either: a draw with generator= breaks torch.compile's graph, and K generators are K draws per
step. A counter-based generator is a pure function, output = hash(key, counter): member k's numbers
at a step are a function of (its seed, the step, the stream) computed for every member by the same
ops over a (K,) tensor of seeds, on any device, in a graph or not; a resumed run knows its step, so
it draws what the uninterrupted run drew.

Why Threefry: its rounds are 32-bit additions, rotations and xors only, which int64 tensors compute
exactly (torch's uint32 lacks most ops): every sum is masked back to 32 bits and a rotation shifts a
word below 2^32 left by at most 31 bits, so no value reaches 2^63 and nothing rests on signed
overflow. Adequacy: the paper finds Threefry-2x32 with 13 rounds passes TestU01's BigCrush on every
counter/key pattern it tried; 20 rounds is its recommended safety margin. The hash of distinct
(key, counter) pairs gives independent-looking 64-bit blocks, so streams never overlap as long as
their counters differ (`words`). tests/test_batch_augment.py holds it to Random123's known answers.

Conversions: uniform floats from a word's top 24 bits (float32's mantissa: exact, in [0, 1));
integers in [0, n) by (word * n) >> 32 (the floor of word / 2^32 * n, exact in int64); normals by
Box-Muller (both of each pair's normals used; tails cut at 5.8 sigma by the 24-bit uniforms).
"""
from __future__ import annotations

import math

import torch

MASK = 0xFFFFFFFF
ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
PARITY = 0x1BD11BDA
STREAMS = 16   # streams per step: a step's counters are (index, batch * STREAMS + stream)


def threefry2x32(key: tuple, counter: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """Threefry-2x32-20 of the 32-bit words key (k0, k1) and counter (c0, c1), each an int64 tensor
    (or int) in [0, 2^32), broadcast together -> the two output words, int64 in [0, 2^32)."""
    k0, k1 = key
    ks = (k0, k1, k0 ^ k1 ^ PARITY)
    x0, x1 = (counter[0] + ks[0]) & MASK, (counter[1] + ks[1]) & MASK
    for i in range(5):
        for r in ROTATIONS[i % 2]:
            x0 = (x0 + x1) & MASK
            x1 = (((x1 << r) & MASK) | (x1 >> (32 - r))) ^ x0
        x0 = (x0 + ks[(i + 1) % 3]) & MASK
        x1 = (x1 + ks[(i + 2) % 3] + (i + 1)) & MASK
    return x0, x1


def words(seed: torch.Tensor, place: torch.Tensor, counts: list[tuple[int, int]]) -> list[torch.Tensor]:
    """32-bit words (K, n) of stream s for each (s, n) in `counts` (s < STREAMS), for members of
    seeds `seed` (K,) int64 at the batch `place` (2,) int64 = (epoch, batch of the epoch). Key
    (seed mod 2^32, epoch), counter (i, batch * STREAMS + s), both words of each block: one hash of
    all the streams' counters, a stream's numbers independent of which other streams are drawn."""
    dev = seed.device
    blocks = [(n + 1) // 2 for _, n in counts]
    index = torch.cat([torch.arange(m, device=dev) for m in blocks])
    stream = torch.cat([torch.full((m,), s, dtype=torch.long, device=dev) for (s, _), m in zip(counts, blocks)])
    y0, y1 = threefry2x32((seed.view(-1, 1) & MASK, place[0]), (index, place[1] * STREAMS + stream))
    both = torch.stack([y0, y1], -1).flatten(1)       # (K, 2 * blocks): a block's two words side by side
    return [w[:, :n] for w, (_, n) in zip(both.split([2 * m for m in blocks], 1), counts)]


def uniform(w: torch.Tensor) -> torch.Tensor:
    """Words -> float32 uniform in [0, 1), multiples of 2^-24."""
    return (w >> 8).float() * 2.0 ** -24


def below(w: torch.Tensor, n) -> torch.Tensor:
    """Words -> int64 uniform in [0, n) (n an int or an int64 tensor broadcast with w, below 2^31)."""
    return (w * n) >> 32


def normal(w: torch.Tensor) -> torch.Tensor:
    """Words (..., 2m) -> m pairs of standard normals (..., 2m) by Box-Muller: the first m words
    give the radii, the last m the angles."""
    a, b = w.chunk(2, -1)
    radius = torch.sqrt(-2 * torch.log(1 - uniform(a)))   # 1 - u in (0, 1]
    angle = (2 * math.pi) * uniform(b)
    return torch.cat([radius * torch.cos(angle), radius * torch.sin(angle)], -1)
