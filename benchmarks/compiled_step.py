"""Does torch.compile speed up training on this machine? One run's training step (forward, loss,
backward, clipping, AdamW + warmup/cosine) eager, against the same step with the network compiled
(`torch.compile(model)`, inductor: what a user would switch on), in the suite's precision.

Then a packed group of K members (--members, default 4): modules/packed_step.PackedStep, the step
a packed group trains with (experiments/runs/packed/loop.py), eager against compiled whole with
`torch.compile(step, fullgraph=True)` (packed_group.group, in the suite's precision: bf16 autocast
where the hardware has native bf16), and the group length from which compiling pays.

Each family at its budget (default tiny), batch 32 (CPU: the cpu profiles') or 128 (GPU) of
28x28x1 synthetic images already on the device. The first compiled steps pay for compilation
(cold: a fresh inductor cache unless TORCHINDUCTOR_CACHE_DIR is set); the script reports that time
apart, then times eager and compiled steps in interleaved repeats (this machine's speed drifts
between minutes) and gives the median ratio, and the run length from which compiling pays: its
compile time over the time it saves per step (a run of fewer steps is faster eager). Default
families: vit and resnet, the two every cpu profile trains.

    make bench          # or: python benchmarks/compiled_step.py --family vit resnet hybrid --steps 20
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
import warnings

# a cold compile, what a first run pays: inductor's on-disk cache would make a second `make bench` ~20x
# faster; this one is removed when the script ends
_CACHE = tempfile.TemporaryDirectory(prefix="compiled_step-inductor-")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", _CACHE.name)
import torch  # noqa: E402

from experiments.runs.run.cli import default_precision
from experiments.runs.run.provenance import hardware, versions
from family_throughput import single_step, sync, timed
from packed_group import group
from modules import FAMILIES

warnings.filterwarnings("ignore", "TensorFloat32 tensor cores")
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # "No CUDA runtime is found" on a CPU


def first_calls(step, device: torch.device) -> float:
    """Seconds of a compiled step's first two calls: the first compiles, the second checks that nothing recompiles."""
    sync(device)
    t = time.perf_counter()
    for _ in range(2):
        step()
    sync(device)
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", nargs="+", default=["vit", "resnet"], choices=FAMILIES,
                   help="families (default vit resnet)")
    p.add_argument("--budget", default="tiny")
    p.add_argument("--batch", type=int, default=None, help="images per step (default 128 on a GPU, 32 on a CPU)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per repeat (default 10)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved eager/compiled repeats (default 3)")
    p.add_argument("--members", type=int, default=4, help="members of the packed group (default 4; 0: skip it)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()
    device = torch.device(a.device)
    a.batch = a.batch or (128 if device.type == "cuda" else 32)
    precision = default_precision()
    v = versions()
    print(f"hardware: {hardware()}; torch {v['torch']}, timm {v['timm']}")
    print(f"{a.budget} budget, batch {a.batch} x 28x28x1 (synthetic, on {device.type}), {precision}; "
          f"torch.compile(model), inductor; {a.repeats} x {a.steps} timed steps each, interleaved")
    print(f"{'family':9} {'compile s':>9} {'eager img/s':>11} {'compiled img/s':>14} {'speed-up':>8} "
          f"{'pays after':>12}  (repeats)")
    for family in a.family:
        total = 2 + 2 * a.repeats * a.steps + 4
        _, eager = single_step(family, a.budget, a.batch, device, precision, total, fused=False)
        clf, compiled = single_step(family, a.budget, a.batch, device, precision, total, fused=False)
        clf.model = torch.compile(clf.model)  # the same parameters: the optimizer and clipping see them
        compile_s = first_calls(compiled, device)
        eager()
        rates = []
        for _ in range(a.repeats):
            e = a.batch * a.steps / timed(eager, a.steps, 0, device)[0]
            c = a.batch * a.steps / timed(compiled, a.steps, 0, device)[0]
            rates.append((e, c))
        e, c = (statistics.median(r[i] for r in rates) for i in (0, 1))
        ratio = statistics.median(r[1] / r[0] for r in rates)
        runs = ", ".join(f"{x:.2f}" for x in (r[1] / r[0] for r in rates))
        saved = a.batch / e - a.batch / c  # seconds per step
        pays = f"{compile_s / saved:,.0f} steps" if saved > 0 else "never"
        print(f"{family:9} {compile_s:9.1f} {e:11,.0f} {c:14,.0f} {ratio:7.2f}x {pays:>12}  ({runs})", flush=True)
        torch._dynamo.reset()
    if a.members:
        packed_table(a, device)


def packed_table(a, device: torch.device) -> None:
    k = a.members
    amp = torch.bfloat16 if default_precision() == "bf16-mixed" else None   # the suite's precision here
    precision = "bf16 autocast" if amp else "float32"
    print(f"\npacked group of {k} members (PackedStep), batch {a.batch} each, {precision}; img/s over all members; "
          f"{a.repeats} x {a.steps} timed steps each, interleaved")
    print(f"{'family':9} {'eager img/s':>11} {'compile s':>9} {'compiled img/s':>14} {'speed-up':>8} {'pays from':>10}")
    for family in a.family:
        eager, _ = group(family, k, a.batch, device, None, budget=a.budget, autocast=amp)
        compiled, _ = group(family, k, a.batch, device, "default", budget=a.budget, autocast=amp)
        compile_s = first_calls(compiled, device)
        eager()
        rates = []
        for _ in range(a.repeats):
            rates.append([k * a.batch * a.steps / timed(f, a.steps, 0, device)[0] for f in (eager, compiled)])
        eag, com = (statistics.median(r[i] for r in rates) for i in range(2))
        ratio = statistics.median(r[1] / r[0] for r in rates)
        saved = k * a.batch / eag - k * a.batch / com   # seconds per step
        pays = f"{compile_s / saved:,.0f} steps" if saved > 0 else "never"
        print(f"{family:9} {eag:11,.0f} {compile_s:9.1f} {com:14,.0f} {ratio:7.2f}x {pays:>10}", flush=True)
        torch._dynamo.reset()


if __name__ == "__main__":
    main()
