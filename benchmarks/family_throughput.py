"""Training throughput per family, one run against K runs packed in one process (PackedStep),
with model FLOPs utilisation (MFU) against this device's measured matmul peak.

Each family at its budget (default tiny), batch 128 (GPU) or 32 (CPU: the cpu profiles') of
28x28x1 images (synthetic, already on the device: the model is timed, not the loader), in the
precision the suite trains in
(experiments.runs.run.cli.default_precision: bf16 autocast where the hardware has native bf16, else fp32).
  single : a plain loop over ImageClassifier.training_loss + AdamW/warmup-cosine + clipping, with the
           attention kernel the suite trains with (explicit matmuls on every device:
           ImageClassifier.setup); "other kernel": the same with fused SDPA
  packed : modules/packed_step.PackedStep eager (what a packed group trains with on the CPU), K
           members (vmap over stacked weights), per-member clipping and lr (packed_group.group)
  FLOPs  : ImageClassifier.complexity["flops"] (forward, 2 x MACs) x 3 for forward + backward
  MFU    : achieved FLOP/s / peak FLOP/s of a large square matmul in the same precision
DeiT runs without a teacher (its distillation head learns the labels).

    make bench          # or: python benchmarks/family_throughput.py --family vit resnet --k 8 --steps 20
"""
from __future__ import annotations

import argparse
import contextlib
import time
import warnings

import torch

from experiments.runs.run.cli import default_precision
from experiments.runs.run.provenance import hardware, versions
from modules import FAMILIES, ImageClassifier
from modules.optim import adamw_warmup_cosine
from modules.registry import use_fused_attention

warnings.filterwarnings("ignore", "There is a performance drop")  # vmap falls back to a loop for some ops


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def autocast(device: torch.device, precision: str):
    if precision.startswith("bf16"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    if precision.startswith("16"):
        return torch.autocast(device.type, dtype=torch.float16)
    return contextlib.nullcontext()


def matmul_peak(device: torch.device, precision: str) -> tuple[float, str]:
    """FLOP/s of the best of a few large square matmuls (2 n^3 FLOPs each) in the suite's precision."""
    dtype = {"bf16": torch.bfloat16, "16": torch.float16}.get(precision.split("-")[0], torch.float32)
    n = 8192 if device.type == "cuda" else 1024
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    best = 0.0
    for _ in range(5 if device.type == "cuda" else 3):
        sync(device)
        t = time.perf_counter()
        for _ in range(10 if device.type == "cuda" else 2):
            a @ b
        sync(device)
        best = max(best, (10 if device.type == "cuda" else 2) * 2 * n ** 3 / (time.perf_counter() - t))
    return best, f"{n}x{n} {str(dtype).removeprefix('torch.')} matmul"


def training_flops(clf) -> float | None:
    """FLOPs of one training image (forward + backward = 3 x forward); None where the counter failed."""
    forward = clf.complexity["flops"]
    return None if forward is None else 3 * forward


def mfu(images_per_sec: float, flops: float | None, peak: float) -> str:
    """Model FLOPs utilisation as a 6-wide column; "n/a" without a FLOP count."""
    return f"{images_per_sec * flops / peak:6.1%}" if flops is not None else f"{'n/a':>6}"


def gpu_utilisation(device: torch.device) -> str:
    if device.type != "cuda":
        return "n/a"
    try:
        return f"{torch.cuda.utilization(device)}%"
    except Exception:  # needs pynvml / amdsmi
        return "n/a"


def timed(step, steps: int, warmup: int, device: torch.device) -> tuple[float, str]:
    """Seconds for `steps` calls of step() after `warmup` untimed ones; GPU utilisation midway."""
    for _ in range(warmup):
        step()
    sync(device)
    util, t = "n/a", time.perf_counter()
    for i in range(steps):
        step()
        if i == steps // 2:
            util = gpu_utilisation(device)
    sync(device)
    return time.perf_counter() - t, util


def single_step(family: str, budget: str, batch: int, device, precision: str, total: int, fused: bool):
    torch.manual_seed(0)
    clf = ImageClassifier(family, budget).to(device).train()
    use_fused_attention(clf.model, fused)
    h = clf.hparams
    opt, sched = adamw_warmup_cosine(clf.model, lr=h.lr, weight_decay=h.weight_decay, betas=tuple(h.betas),
                                     total_steps=total, warmup_fraction=h.warmup_fraction, min_lr_ratio=h.min_lr_ratio)
    x = torch.randn(batch, h.in_chans, h.image_size, h.image_size, device=device)
    y = torch.randint(0, h.num_classes, (batch,), device=device)

    def step():
        with autocast(device, precision):
            loss, _ = clf.training_loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(clf.model.parameters(), 1.0)
        opt.step()
        sched.step()
    return clf, step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", nargs="+", default=list(FAMILIES), choices=FAMILIES, help="families (default all)")
    p.add_argument("--budget", default="tiny")
    p.add_argument("--k", type=int, default=4, help="members of the packed run (default 4)")
    p.add_argument("--batch", type=int, default=None,
                   help="images per member per step (default: the datascale profile's, 128 on a GPU, 32 on a CPU)")
    p.add_argument("--steps", type=int, default=None, help="timed steps (default 30 on a GPU, 3 on a CPU)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 5 on a GPU, 1 on a CPU)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()
    device = torch.device(a.device)
    steps = a.steps or (30 if device.type == "cuda" else 5)
    a.batch = a.batch or (128 if device.type == "cuda" else 32)
    warmup = a.warmup if a.warmup is not None else (5 if device.type == "cuda" else 1)
    precision = default_precision()
    peak, how = matmul_peak(device, precision)
    v = versions()
    print(f"hardware: {hardware()}; torch {v['torch']}, timm {v['timm']}, lightning {v['lightning']}")
    print(f"{a.budget} budget, batch {a.batch} x 28x28x1 (synthetic, on {device.type}), {precision}, "
          f"{steps} timed steps after {warmup}; packed K={a.k}")
    print(f"peak: {peak / 1e12:.3f} TFLOP/s ({how}, measured); training FLOPs = 3 x forward")
    print("single: explicit attention (ImageClassifier's, on every device); other kernel: fused SDPA "
          "(transformer families)")
    print(f"{'family':9} {'MFLOP/img':>9} {'single img/s':>12} {'MFU':>6} {'GPU':>5} {'other kernel':>12} | "
          f"{'packed img/s':>12} {'MFU':>6} {'GPU':>5} {'speed-up':>8}")
    for family in a.family:
        total = warmup + steps
        clf, step = single_step(family, a.budget, a.batch, device, precision, total, fused=False)
        flops = training_flops(clf)
        seconds, util1 = timed(step, steps, warmup, device)
        single = a.batch * steps / seconds
        other = "n/a"
        if any(hasattr(m, "fused_attn") for m in clf.model.modules()):
            _, step = single_step(family, a.budget, a.batch, device, precision, total, fused=True)
            other = f"{a.batch * steps / timed(step, steps, warmup, device)[0]:,.0f}"
        del clf, step  # free the single run before the packed one
        from packed_group import group  # the packed group's step, as gpu_check and compiled_step build it
        step, _ = group(family, a.k, a.batch, device, None, budget=a.budget,
                        autocast=torch.bfloat16 if precision == "bf16-mixed" else None)
        seconds, utilk = timed(step, steps, warmup, device)
        packed = a.k * a.batch * steps / seconds
        mflops = f"{flops / 3e6:9.1f}" if flops is not None else f"{'n/a':>9}"
        print(f"{family:9} {mflops} {single:12,.0f} {mfu(single, flops, peak)} {util1:>5} {other:>12} | "
              f"{packed:12,.0f} {mfu(packed, flops, peak)} {utilk:>5} {packed / single:7.2f}x", flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
