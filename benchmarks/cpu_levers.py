"""The CPU speed levers per family, side by side, as the cpu profiles train: one run per core, one
thread each (benchmarks/process_parallelism.py: two such runs beat one run on both threads).

For each family at its budget (default tiny), the training step of one run
(benchmarks/family_throughput.single_step: forward, loss, backward, clipping, AdamW + warmup/cosine;
synthetic 28x28x1 images already in memory, so the model is timed, not the loader), in images/s and
MFU against this core's measured matmul peak in the lever's precision. The baseline is what the cpu
profiles train: batch 32 in the suite's precision (bf16-mixed where the hardware runs bf16 matmuls
natively, else 32-true: experiments.runs.run.cli.default_precision on a CPU). Under each lever:
  batch      32 / 64 / 128 images a step (the profile's batch by training-set size)
  precision  the other precision: 32-true against bf16-mixed (an emulated bf16, where the hardware
             has no native bf16 matmuls, is 10-100x slower and is not timed)
  depthwise  for families with depthwise convolutions (ConvNeXt), those in bf16 under bf16-mixed,
             as autocast would run them: the lever the builder already pulls, undone
             (modules.registry.Float32DepthwiseConv2d keeps them in fp32; the matmuls stay bf16)
  layout     channels_last memory format for the convolutional families (resnet, convnext, hybrid)
  compile    torch.compile(model) (inductor), timed after its compilation, which is reported apart
  validation the share of a cpu-profile run's time its validations take (val_checks x val_size
             images forward, no gradient, in the suite's precision as Lightning validates (autocast
             under bf16-mixed), at the eval speed measured here) at the smallest and the
             largest training set of exp-datascale's cpu profile, with its steps and batch sizes
Each lever is timed in interleaved repeats against the baseline (this machine's speed drifts), and
the speed-up is the median ratio. Prints measured rows; asserts nothing.

    python benchmarks/cpu_levers.py [--family swin convnext] [--batch 32 128] [--levers compile layout]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

_CACHE = tempfile.TemporaryDirectory(prefix="cpu_levers-inductor-")  # a cold compile, what a first run pays
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", _CACHE.name)
import torch  # noqa: E402

from experiments.runs.run.cli import cpu_precision  # noqa: E402
from experiments.runs.run.provenance import hardware, versions  # noqa: E402
from family_throughput import autocast, matmul_peak, mfu, single_step, training_flops  # noqa: E402
from modules import FAMILIES  # noqa: E402

warnings.filterwarnings("ignore")
LEVERS = ("batch", "precision", "depthwise", "layout", "compile", "validation")


def convolves(family: str, budget: str) -> bool:
    """Whether the network has overlapping convolutions (kernel > stride), where the memory layout
    (channels_last) can matter; a patchify stem alone (kernel = stride) does not count."""
    from modules import build_model
    return any(isinstance(m, torch.nn.Conv2d) and m.kernel_size[0] > m.stride[0]
               for m in build_model(family, budget).modules())


def has_depthwise(family: str, budget: str) -> bool:
    """Whether the family's model has depthwise convolutions (ConvNeXt's 7x7)."""
    from modules import build_model
    from modules.registry import is_depthwise
    return any(is_depthwise(m) for m in build_model(family, budget).modules())


def make(family: str, budget: str, batch: int, precision: str, layout: bool = False, compiled: bool = False,
         depthwise_bf16: bool = False):
    """(flops per image, the step) of one run; the compiled step's first call (its compilation) is made here."""
    from modules.registry import depthwise_in_fp32
    clf, step = single_step(family, budget, batch, torch.device("cpu"), precision, 10_000, fused=False)
    if depthwise_bf16:
        depthwise_in_fp32(clf.model, fp32=False)
    if layout:
        clf.model.to(memory_format=torch.channels_last)
    if compiled:
        clf.model = torch.compile(clf.model)
    t = time.perf_counter()
    step()  # warm-up (and compilation)
    first = time.perf_counter() - t
    return training_flops(clf), step, first


def eval_images_per_s(family: str, budget: str, batch: int, steps: int, precision: str) -> float:
    """Forward passes in eval mode without gradients (a validation), in `precision`, images/s."""
    clf, _ = single_step(family, budget, batch, torch.device("cpu"), precision, 10_000, fused=False)
    clf.eval()
    x = torch.randn(batch, clf.hparams.in_chans, clf.hparams.image_size, clf.hparams.image_size)
    with torch.no_grad(), autocast(torch.device("cpu"), precision):
        clf.model(x)
        t = time.perf_counter()
        for _ in range(steps):
            clf.model(x)
    return batch * steps / (time.perf_counter() - t)


def validation_share(family: str, train_per_s: dict[int, float], eval_per_s: float) -> str:
    """'118 images: 12%; 2,950: 3%' for exp-datascale's cpu profile: validation seconds over a run's seconds."""
    from experiments.runs.sweep.spec import batch_for, load_spec, resolve_axes, steps_for
    axes = resolve_axes(load_spec("datascale"), "cpu")
    out = []
    for fraction in (axes["fractions"][0], axes["fractions"][-1]):
        n = round(fraction * 59_000)
        batch, steps = batch_for(n, axes), steps_for(n, axes, family)
        if batch not in train_per_s:
            return f"not timed at batch {batch}"
        train_s = steps * batch / train_per_s[batch]
        val_s = axes["val_checks"] * (axes["val_size"] or 0) / eval_per_s
        out.append(f"{n:,} images: {val_s / (train_s + val_s):.0%} of {(train_s + val_s) / 60:.0f} min")
    return "; ".join(out)


def seconds_per_step(step, steps: int) -> float:
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t) / steps


def compare(base, lever, steps: int, repeats: int) -> tuple[float, float, float]:
    """(baseline s/step, lever s/step, median ratio) over interleaved repeats."""
    b, v = [], []
    for _ in range(repeats):
        b.append(seconds_per_step(base, steps))
        v.append(seconds_per_step(lever, steps))
    return statistics.median(b), statistics.median(v), statistics.median(x / y for x, y in zip(b, v))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    p.add_argument("--budget", default="tiny")
    p.add_argument("--batch", nargs="+", type=int, default=[32, 64, 128], help="batch sizes (the first: the baseline)")
    p.add_argument("--levers", nargs="+", default=list(LEVERS), choices=LEVERS)
    p.add_argument("--steps", type=int, default=4, help="timed steps per repeat")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="threads per run (default 1: one run per core)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    base_batch, base_precision = a.batch[0], cpu_precision()
    other = "32-true" if base_precision != "32-true" else None  # an emulated bf16 is not timed
    peaks = {prec: matmul_peak(torch.device("cpu"), prec) for prec in (base_precision, other) if prec}
    v = versions()
    print(f"hardware: {hardware()}; torch {v['torch']}, timm {v['timm']}; {a.threads} thread(s) per run")
    print(f"{a.budget} budget, 28x28x1 synthetic images in memory; {a.steps} timed steps x {a.repeats} interleaved "
          f"repeats; training FLOPs = 3 x forward; peaks ({a.threads} thread(s)): "
          + ", ".join(f"{prec} {peak / 1e9:.1f} GFLOP/s ({how})" for prec, (peak, how) in peaks.items()))
    if "precision" in a.levers and other is None:
        print("precision: no native bf16 matmuls on this CPU (an emulated bf16 step is 10-100x slower): fp32 only")
    print(f"{'family':9} {'lever':28} {'img/s':>8} {'MFU':>6} {'vs base':>8} {'first step s':>12}")
    for family in a.family:
        flops, base, _ = make(family, a.budget, base_batch, base_precision)
        levers = []
        if "batch" in a.levers:
            levers += [(f"batch {b}", dict(batch=b)) for b in a.batch[1:]]
        if "precision" in a.levers and other:
            levers.append((other, dict(precision=other)))
        if "depthwise" in a.levers and base_precision != "32-true" and has_depthwise(family, a.budget):
            levers.append(("depthwise conv in bf16", dict(depthwise_bf16=True)))
        if "layout" in a.levers and convolves(family, a.budget):
            levers.append(("channels_last", dict(layout=True)))
        if "compile" in a.levers:
            levers.append(("torch.compile(model)", dict(compiled=True)))
        base_s = seconds_per_step(base, a.steps)
        print(f"{family:9} {f'{base_precision}, batch {base_batch}':28} {base_batch / base_s:8,.0f} "
              f"{mfu(base_batch / base_s, flops, peaks[base_precision][0])} {'1.00x':>8} {'':>12}", flush=True)
        train_per_s = {base_batch: base_batch / base_s}
        for label, kw in levers:
            batch, precision = kw.pop("batch", base_batch), kw.pop("precision", base_precision)
            _, step, first = make(family, a.budget, batch, precision, **kw)
            b_s, l_s, ratio = compare(base, step, a.steps, a.repeats)
            per_image = (b_s / base_batch) / (l_s / batch)  # images/s ratio (batches differ)
            print(f"{family:9} {label:28} {batch / l_s:8,.0f} {mfu(batch / l_s, flops, peaks[precision][0])} "
                  f"{(per_image if batch != base_batch else ratio):7.2f}x {first:12.1f}", flush=True)
            if label.startswith("batch"):
                train_per_s[batch] = batch / l_s
            del step
        if "validation" in a.levers:
            eval_s = eval_images_per_s(family, a.budget, 256, a.steps, base_precision)  # the DataModule's eval_batch_size
            print(f"{family:9} {'validation (eval)':28} {eval_s:8,.0f} {'':>6} {'':>8} {'':>12}  "
                  f"cpu profile: {validation_share(family, train_per_s, eval_s)}", flush=True)


if __name__ == "__main__":
    main()
