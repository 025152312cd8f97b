"""A packed group's training step as the benchmarks time it: modules/packed_step.PackedStep over K
members on synthetic data already on the device (gpu_check, family_throughput, compiled_step)."""
from __future__ import annotations

import torch

from modules.packed import PackedClassifier
from modules.packed_step import PackedStep


def group(family: str, k: int, batch: int, device: torch.device, mode: str | None, backend: str = "inductor",
          budget: str = "tiny", autocast: torch.dtype | None | str = "device"):
    """A K-member group's step() (state carried between calls) and its losses: PackedStep eager
    (mode None) or compiled whole with fullgraph=True in `mode` (benchmarks/compiled_step.py and
    family_throughput.py too); autocast: bf16 on CUDA and float32 on the CPU ("device"), or as given."""
    torch.manual_seed(0)
    packed = PackedClassifier(seeds=range(k), family=family, budget=budget).to(device).train()
    h = packed.template.hparams
    if autocast == "device":
        autocast = torch.bfloat16 if device.type == "cuda" else None
    step = PackedStep(packed, total_steps=10_000, autocast=autocast)
    fn = step if mode is None else torch.compile(step, fullgraph=True, mode=mode, backend=backend)
    g = torch.Generator(device).manual_seed(1)
    x = torch.randn(k, batch, h.in_chans, h.image_size, h.image_size, device=device, generator=g)
    y = torch.randint(0, h.num_classes, (k, batch), device=device, generator=g)
    lr = torch.full((k,), float(h.lr), device=device)
    box = {"state": step.init_state(), "losses": None}

    def call():
        box["state"], box["losses"] = fn(box["state"], x, y, lr)
    return call, box
