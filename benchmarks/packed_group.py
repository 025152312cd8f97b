"""A packed group's training step as the benchmarks time it: modules/packed_step.PackedStep over K
members on synthetic data already on the device (gpu_check, family_throughput, compiled_step)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from datamodules.batch_augment import AugmentConfig, BatchAugment, member_draws, strong_inputs
from modules.packed import PackedClassifier
from modules.packed_step import PackedStep

# the datascale gpu profile's strong variant, as a packed step augments inside
STRONG = AugmentConfig(crop_padding=2, hflip=True, randaugment=True, random_erasing=0.25, mixup_alpha=0.8,
                       cutmix_alpha=1.0)


def strong_augment(num_classes: int = 10) -> BatchAugment:
    """The strong variant over Fashion-MNIST (its mean and std)."""
    return BatchAugment(STRONG, torch.tensor([72.9]), torch.tensor([90.0]), num_classes)


def group(family: str, k: int, batch: int, device: torch.device, mode: str | None, backend: str = "inductor",
          budget: str = "tiny", autocast: torch.dtype | None | str = "device", engine: bool = False):
    """A K-member group's step() (state carried between calls) and its losses: PackedStep eager
    (mode None) or compiled whole with fullgraph=True in `mode` (benchmarks/compiled_step.py and
    family_throughput.py too); autocast: bf16 on CUDA and float32 on the CPU ("device"), or as given.
    engine: the step as a sweep's group calls it (packed_loop.GroupLoop._step): uint8 images
    augmented inside by the strong variant (crop and flip drawn each step on the device, the strong
    stages' numbers inside the step from the members' seeds and the batch's place), each member's
    drop-path masks, the schedule as a tensor."""
    torch.manual_seed(0)
    packed = PackedClassifier(seeds=range(k), family=family, budget=budget).to(device).train()
    h = packed.template.hparams
    if autocast == "device":
        autocast = torch.bfloat16 if device.type == "cuda" else None
    augment = strong_augment(h.num_classes) if engine else None
    step = PackedStep(packed, total_steps=10_000, autocast=autocast, augment=augment)
    fn = step if mode is None else torch.compile(step, fullgraph=True, mode=mode, backend=backend)
    g = torch.Generator(device).manual_seed(1)
    shape = (k, batch, h.in_chans, h.image_size, h.image_size)
    x = (torch.randint(0, 256, shape, dtype=torch.uint8, device=device, generator=g) if engine
         else torch.randn(*shape, device=device, generator=g))
    y = torch.randint(0, h.num_classes, (k, batch), device=device, generator=g)
    lr = torch.full((k,), float(h.lr), device=device)
    gens = [torch.Generator(device).manual_seed(i) for i in range(k)]
    strong = strong_inputs([STRONG] * k, list(range(k)), shape[3:], device) if engine else {}
    schedule = step.schedule(device=device)
    box = {"state": step.init_state(), "losses": None, "steps": 0}

    def inputs() -> dict:
        if not engine:
            return {}
        box["steps"] += 1
        place = torch.tensor([0, box["steps"]], device=device)
        return {"draws": member_draws([augment.draws(batch, gen) for gen in gens]) | strong | {"place": place},
                "masks": packed._drop_path_masks(x), "schedule": schedule}

    def call():
        if mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()  # the previous step's outputs are this one's inputs
        box["state"], box["losses"] = fn(box["state"], x, y, lr, **inputs())
    return call, box


def profile_groups(family: str, members: int, seeds: list[int], work: Path, pool: Callable[[dict], int],
                   fraction: float | None = None, variants: list[str] | None = None,
                   miniature: dict | None = None) -> tuple[list[list], dict]:
    """The datascale gpu profile's main-stage packed groups of `members` runs of `family` at its
    smallest fraction (or `fraction`), over `seeds`, as the sweep plans and packs them (every run at
    the grid's first lr), with `miniature` overriding the profile's schedule; and their axes. pool:
    the training pool's size for the resolved axes (gpu_check, packed_stage)."""
    from experiments.runs.sweep.execute import pack_groups
    from experiments.runs.sweep.spec import load_spec, main_runs, resolve_axes
    spec = load_spec("datascale")
    axes = resolve_axes(spec, "gpu", families=[family], fractions=[fraction] if fraction else None, seeds=seeds,
                        variants=variants)
    axes["fractions"] = axes["fractions"][:1]
    axes.update(miniature or {})
    runs = main_runs(spec, axes, work, pool(axes), lambda *key: axes["lrs"][0])
    # `family`'s runs only: DeiT's plan brings its ResNet teachers (whose checkpoints its runs name)
    return pack_groups([r for r in runs if r.family == family], members), axes
