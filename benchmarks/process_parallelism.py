"""Training throughput of one run on every CPU thread against P runs side by side, each with
cpu_count / P threads (what `sweep --jobs P`, the cpu profiles' `jobs: 2`, does).

Each family at its budget (default tiny), batch 32 of 28x28x1 synthetic images, in the suite's
precision and attention kernel (benchmarks/family_throughput.single_step: the model and optimiser,
not the loader). The P processes warm up, wait at one barrier, then time the same number of steps;
their images/s add up. A tiny model at batch 32 leaves threads idle inside a step (small matmuls,
Python and autograd overhead run on one thread), so separate runs fill the cores better.

    make bench          # or: python benchmarks/process_parallelism.py --family vit resnet --procs 2
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import torch

from experiments.runs.run.cli import default_precision
from experiments.runs.run.provenance import hardware, versions
from family_throughput import single_step  # benchmarks/ is on the path of the script and of its spawned workers
from modules import FAMILIES, ImageClassifier
from modules.budgets import TEACHER
from modules.classifier import freeze


def worker(family: str, budget: str, batch: int, threads: int, steps: int, barrier, out, teacher: bool = False) -> None:
    """`teacher`: a DeiT step with the forward of its frozen ResNet teacher inside, as the sweep trains
    DeiT (random weights: the cost is the same)."""
    torch.set_num_threads(threads)
    clf, step = single_step(family, budget, batch, torch.device("cpu"), default_precision(), steps + 2, False)
    if teacher:
        clf.__dict__["teacher"] = freeze(ImageClassifier(TEACHER, budget).model)
    for _ in range(2):
        step()
    barrier.wait()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    out.put(batch * steps / (time.perf_counter() - t))


def measure(family: str, budget: str, batch: int, procs: int, steps: int, threads: int | None = None,
            teacher: bool = False) -> list[float]:
    """images/s of each of `procs` processes training side by side with `threads` threads each
    (default cpu_count // procs)"""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(procs), ctx.Queue()
    threads = threads or max(1, (os.cpu_count() or 1) // procs)
    ps = [ctx.Process(target=worker, args=(family, budget, batch, threads, steps, barrier, out, teacher))
          for _ in range(procs)]
    for p in ps:
        p.start()
    rates = [out.get() for _ in ps]
    for p in ps:
        p.join()
    return rates


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", nargs="+", default=list(FAMILIES), choices=FAMILIES, help="families (default all)")
    p.add_argument("--budget", default="tiny")
    p.add_argument("--batch", type=int, default=32, help="images per step (default 32, the cpu profiles')")
    p.add_argument("--procs", type=int, default=os.cpu_count() or 1,
                   help="runs side by side (default: one per CPU thread)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per process (default 20)")
    a = p.parse_args()
    cpus = os.cpu_count() or 1
    if not 1 <= a.procs <= cpus:
        raise SystemExit(f"--procs {a.procs}: allowed 1..{cpus} (the CPU threads)")
    v = versions()
    print(f"hardware: {hardware()}; torch {v['torch']}, timm {v['timm']}")
    print(f"{a.budget} budget, batch {a.batch}, {default_precision()}, {a.steps} timed steps per process on cpu; "
          f"1 run x {cpus} threads vs {a.procs} runs x {max(1, cpus // a.procs)} thread(s), side by side")
    print(f"{'family':9} {'1 run img/s':>11} | {f'{a.procs} runs img/s (each)':>28} | {'speed-up':>8}")
    for family in a.family:
        (one,) = measure(family, a.budget, a.batch, 1, a.steps)
        many = measure(family, a.budget, a.batch, a.procs, a.steps)
        each = ", ".join(f"{r:,.0f}" for r in many)
        print(f"{family:9} {one:11,.0f} | {f'{sum(many):,.0f} ({each})':>28} | {sum(many) / one:7.2f}x", flush=True)


if __name__ == "__main__":
    main()
