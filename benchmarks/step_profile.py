"""Where one training step of each family spends its time on this CPU, by operator (torch.profiler).

The step is the one benchmarks/cpu_levers.py times as the cpu profiles train (family_throughput.
single_step: forward, loss, backward, clipping, AdamW + warmup/cosine; synthetic 28x28x1 images in
memory, batch 32, one thread, bf16-mixed where the CPU runs bf16 matmuls natively, else 32-true).
Operators' own (self) CPU time, which excludes the operators they call, is summed over forward and
backward and grouped into kinds:
  matmul          mm, bmm, addmm (linear layers, attention's q k^T and its weighted sum)
  convolution     every convolution, forward and backward
  normalisation   LayerNorm, BatchNorm, GroupNorm, forward and backward
  softmax         attention's softmax and the loss's log-softmax, and their backward
  copies, casts   copy_, _to_copy, clone, cat, stack, roll, indexing, padding: memory moved, not computed
  activations     GELU, ReLU (clamp_min_ and threshold_backward inside) and their backward
  elementwise     add, mul, div, sum and the like
  other           the rest: the optimizer's and autograd's own overhead, views, allocation, norms of
                  the gradients (clipping)
then the operators that take the most. A lever should attack the largest kind. The shares are the
reading; "op ms/step" sums the operators' time (Python between them left out, the profiler's own
overhead in), and the load average beside it says what else the cores ran. Prints measured shares;
asserts nothing.

    python benchmarks/step_profile.py [--family swin convnext] [--steps 5] [--top 6]
"""
from __future__ import annotations

import argparse
import os
import re
import warnings
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from experiments.runs.run.cli import cpu_precision
from experiments.runs.run.provenance import hardware, versions
from family_throughput import single_step
from modules import FAMILIES

KINDS = (  # (kind, pattern on the operator's name), first match wins
    ("convolution", r"conv"),
    ("matmul", r"^aten::(mm|bmm|addmm|baddbmm|matmul|linear)$"),
    ("normalisation", r"^aten::(native_)?(layer|batch|group)_norm(_backward)?$|^aten::_batch_norm_impl_index"),
    ("softmax", r"softmax"),
    ("copies, casts", r"^aten::(copy_|_to_copy|clone|cat|stack|roll|index\w*|_index_put_impl_|new_zeros|"
                      r"constant_pad_nd|contiguous|fill_|zero_)$"),
    ("activations", r"gelu|relu|silu|^aten::(clamp_min_|threshold_backward)$"),  # relu_ runs clamp_min_
    ("elementwise", r"^aten::(add|add_|mul|mul_|div|div_|sub|sub_|sum|mean|neg|sqrt|pow|where|addcmul_|"
                    r"addcdiv_|lerp_|sqrt_|exp|clamp\w*|_foreach_(?!norm)\w+)$"),
)


def kind_of(name: str) -> str:
    return next((kind for kind, pattern in KINDS if re.search(pattern, name)), "other")


def profile_step(family: str, budget: str, batch: int, precision: str, steps: int):
    """(ms per step, {kind: share}, [(operator, share)] largest first) over `steps` profiled steps."""
    _, step = single_step(family, budget, batch, torch.device("cpu"), precision, 10_000, fused=False)
    for _ in range(3):  # warm-up: allocator, oneDNN primitive caches
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    events = [(e.key, e.self_cpu_time_total) for e in prof.key_averages()]
    total = sum(t for _, t in events)
    kinds: dict[str, float] = defaultdict(float)
    for name, t in events:
        kinds[kind_of(name)] += t / total
    ops = sorted(((name, t / total) for name, t in events if name.startswith("aten::")), key=lambda o: -o[1])
    return total / steps / 1e3, dict(kinds), ops


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", nargs="+", default=list(FAMILIES), choices=FAMILIES, help="families (default all)")
    p.add_argument("--budget", default="tiny")
    p.add_argument("--batch", type=int, default=32, help="images a step (default 32, the cpu profiles')")
    p.add_argument("--steps", type=int, default=5, help="profiled steps, after 3 warm-up steps")
    p.add_argument("--top", type=int, default=6, help="operators listed per family")
    a = p.parse_args()
    warnings.filterwarnings("ignore")  # the profiler's and timm's notes would interleave with the table
    torch.set_num_threads(1)
    precision = cpu_precision()
    v = versions()
    print(f"hardware: {hardware()}; torch {v['torch']}, timm {v['timm']}; 1 thread; {a.budget} budget, "
          f"batch {a.batch}, {precision}; {a.steps} profiled steps; shares of the step's operator time; "
          f"load average {os.getloadavg()[0]:.1f} when it started")
    order = [kind for kind, _ in KINDS] + ["other"]
    print(f"{'family':9} {'op ms/step':>10} " + " ".join(f"{k:>13}" for k in order))
    largest = {}
    for family in a.family:
        ms, kinds, ops = profile_step(family, a.budget, a.batch, precision, a.steps)
        print(f"{family:9} {ms:10.1f} " + " ".join(f"{kinds.get(k, 0):13.0%}" for k in order), flush=True)
        largest[family] = ops[:a.top]
    print("largest operators (self time, forward and backward apart):")
    for family, ops in largest.items():
        print(f"{family:9} " + ", ".join(f"{name.removeprefix('aten::')} {share:.0%}" for name, share in ops))


if __name__ == "__main__":
    main()
