"""A training step of each family on this CPU, as a cpu profile's sweep trains it: what the dry run
prices a run from on a machine that no run of the suite has measured.

results/step_times.csv holds the step times of the machines the records were trained on; elsewhere (a
laptop, a node of another kind) the dry run said "no step times measured, so no estimate". This
times one step of each family here and merges the rows into results/step_times_bench.json under
this machine's `hardware` string, leaving other machines' rows as they are; the dry run then prices
the runs no record has measured from them, and says so (experiments/runs/sweep/estimate.py).

What is timed: benchmarks/family_throughput.single_step (forward, loss, backward, clipping, AdamW with
warmup and cosine) of each family at its budget (default tiny), batch 32 (the cpu profiles') of
synthetic 28x28x1 images already in memory, with the attention kernel the suite trains with, in the
precision a fit trains in here (cli.default_precision: bf16 autocast where the cores run bf16 matmuls
natively, else fp32). DeiT runs its frozen ResNet teacher's forward inside each step, as the sweep
trains it (the teacher's weights are random: the cost is the same). `jobs` processes time the same
family at once, each on its share of the cores (execute.Workers: one thread each, one process per
core by default), because a sweep trains a family's runs side by side and they contend for memory.
Not timed, and the dry run says so: validations, tests, the loader's augmentation and Lightning's
own loop, which a record's step time counts.

    make bench-steps     # or: python benchmarks/step_times.py --family vit resnet --steps 10 --jobs 2
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "results" / "step_times_bench.json"


def _threads(n: int) -> None:
    os.environ["OMP_NUM_THREADS"] = str(n)
    import torch
    torch.set_num_threads(n)


def step_ms(family: str, budget: str, batch: int, steps: int, warmup: int) -> float:
    """Milliseconds per training step of one run of `family`, after `warmup` untimed steps."""
    import torch

    from experiments.runs.run.cli import default_precision
    from family_throughput import single_step, timed
    from modules import ImageClassifier
    from modules.budgets import TEACHER, distils
    from modules.classifier import freeze
    device = torch.device("cpu")
    clf, step = single_step(family, budget, batch, device, default_precision(), warmup + steps, fused=False)
    if distils(family):  # the sweep's DeiT distils from the ResNet of its subset: its forward runs every step
        clf.__dict__["teacher"] = freeze(ImageClassifier(TEACHER, budget).model)
    seconds, _ = timed(step, steps, warmup, device)
    return 1000.0 * seconds / steps


def measure(families: list[str], budget: str, batch: int, steps: int, warmup: int, jobs: int) -> list[dict]:
    """A row per family: its step time here, the median over `jobs` processes timing it at once."""
    from experiments.runs.run.cli import default_precision
    from datamodules.sources import FASHION_MNIST
    from experiments.runs.sweep.estimate import job_threads
    from experiments.runs.sweep.execute import model_flops
    threads = job_threads(jobs)  # as each of a sweep's `jobs` run processes computes, and the estimate reads
    rows = []
    # spawn: each worker starts its own torch with `threads` threads before any model is built
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn"), initializer=_threads, initargs=(threads,)) as pool:
        for family in families:
            times = [f.result() for f in [pool.submit(step_ms, family, budget, batch, steps, warmup)
                                          for _ in range(jobs)]]
            ms = statistics.median(times)
            rows.append({"family": family, "budget": budget, "flops_per_image": model_flops(family, budget, FASHION_MNIST),
                         "batch": batch, "members": 1, "precision": default_precision(), "threads": threads,
                         "jobs": jobs, "steps": steps, "step_ms": round(ms, 1), "images_per_s": round(batch * 1000 / ms)})
            print(f"{family:9} {ms:8.1f} ms/step  {batch * 1000 / ms:7,.0f} img/s a run  "
                  f"({jobs} at a time, {threads} thread(s) each, {default_precision()})", flush=True)
    return rows


def merged(old: dict, device: str, entry: dict) -> dict:
    """The file with this device's entry at its thread count replaced, every other machine's kept."""
    devices = old.get("devices", {})
    mine = [e for e in devices.get(device, []) if e.get("threads") != entry["threads"]]
    return {"devices": {**devices, device: sorted(mine + [entry], key=lambda e: e["threads"])}}


def existing(path: Path) -> dict:
    """The step-time file at `path` ({} where there is none); one line and exit 1 where it is not one,
    which is then left as it is: other machines' rows are never lost."""
    if not path.exists():
        return {}
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        sys.exit(f"--out {str(path)!r} is not a step-time file this can add to ({e}): move it, or name another")
    devices = old.get("devices", {}) if isinstance(old, dict) else None
    if not isinstance(devices, dict) or not all(isinstance(es, list) and all(isinstance(e, dict) for e in es)
                                                for es in devices.values()):
        sys.exit(f"--out {str(path)!r} is not a step-time file this can add to (not {{\"devices\": {{machine: "
                 "[entries]}}): move it, or name another")
    return old


def main(argv: list[str] | None = None) -> None:
    from experiments.runs.run.provenance import hardware, versions
    from experiments.runs.sweep.spec import default_jobs
    from modules import FAMILIES
    from modules.budgets import BUDGET_TARGETS
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", nargs="+", default=list(FAMILIES), choices=FAMILIES, help="families (default all)")
    p.add_argument("--budget", default="tiny", choices=BUDGET_TARGETS, help="model budget (default tiny, the cpu profiles')")
    p.add_argument("--batch", type=int, default=32, help="images a step (default 32, the cpu profiles')")
    p.add_argument("--steps", type=int, default=50, help="timed steps per process (default 50)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--jobs", type=int, default=default_jobs(),
                   help="processes timing a family at once, as a sweep's --jobs (default: one per core)")
    p.add_argument("--out", type=Path, default=OUT, help=f"the file the rows merge into (default {OUT.parent.name}/{OUT.name})")
    a = p.parse_args(argv)
    for name, value in (("--batch", a.batch), ("--steps", a.steps), ("--jobs", a.jobs)):
        if value < 1:
            sys.exit(f"{name} {value}: allowed integers >= 1")
    old = existing(a.out)
    import torch
    if torch.cuda.is_available():  # a run here trains on the GPU: its steps are gpu-check's to time
        sys.exit("a GPU is visible: bench-steps times runs on a CPU; on a GPU `make gpu-check` measures the steps")
    device = hardware()
    print(f"hardware: {device}; one training step a run, {a.budget} budget, batch {a.batch}, "
          f"{a.steps} timed steps after {a.warmup}", flush=True)
    started = time.perf_counter()
    rows = measure(a.family, a.budget, a.batch, a.steps, a.warmup, a.jobs)
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip() or None
    entry = {"threads": rows[0]["threads"], "jobs": a.jobs, "commit": commit, "versions": versions(),
             "seconds": round(time.perf_counter() - started), "rows": rows}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(merged(old, device, entry), indent=1) + "\n")
    print(f"-> {a.out}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # family_throughput, as the other benchmarks import it
    main()
