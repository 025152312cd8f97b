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
precision a fit trains in here (cli.default_precision: bf16 autocast where the cores run bf16
matmuls natively, else fp32), with its MFU: 3 x the student's forward FLOPs an image against this
machine's matmul peak in that precision, measured with a process's threads. DeiT runs its frozen
ResNet teacher's forward inside each step, as the sweep trains it (the teacher's weights are
random: the cost is the same). `jobs` processes (the sweep's
default jobs, or JOBS=) time the same family at once, each with the threads a sweep's run process
gets (cpu_count / jobs; one process per core by default), after warming up and one barrier
(benchmarks/process_parallelism.measure): a sweep trains a family's runs side by side, and they
contend for memory.
Not timed, and the dry run says so: validations, tests, the loader's augmentation and Lightning's
own loop, which a record's step time counts. Its rows are keyed by machine, threads and jobs; a run
replaces those of its own key only, and writes the file (atomically) after each family, so an
interrupted one keeps what it timed.

    make bench-steps     # or: python benchmarks/step_times.py --family vit resnet --steps 10 --jobs 2
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from modules.files import parse_json, write_atomic

OUT = Path(__file__).resolve().parents[1] / "results" / "step_times_bench.json"


def row(family: str, budget: str, batch: int, steps: int, jobs: int, threads: int, peak: float) -> dict:
    """One family's step time here: the median over `jobs` processes timing it at once; its MFU
    against `peak` (FLOP/s of one process's matmul), counting the student's 3 x forward FLOPs only."""
    from datamodules.sources import FASHION_MNIST
    from experiments.runs.run.cli import default_precision
    from experiments.runs.sweep.execute import model_flops
    from modules.budgets import distils
    from process_parallelism import measure
    rate = statistics.median(measure(family, budget, batch, jobs, steps, threads=threads, teacher=distils(family)))
    flops = model_flops(family, budget, FASHION_MNIST)
    return {"family": family, "budget": budget, "flops_per_image": flops, "batch": batch, "members": 1,
            "precision": default_precision(), "threads": threads, "jobs": jobs, "steps": steps,
            "step_ms": round(1000 * batch / rate, 1), "images_per_s": round(rate),
            "mfu": round(3 * flops * rate / peak, 3) if flops else None}


def merged(old: dict, device: str, entry: dict) -> dict:
    """The file with this device's entry of the same threads and jobs replaced, every other kept."""
    devices = old.get("devices", {})
    key = (entry["threads"], entry["jobs"])
    mine = [e for e in devices.get(device, []) if (e["threads"], e["jobs"]) != key]
    return {"devices": {**devices, device: sorted(mine + [entry], key=lambda e: (e["threads"], e["jobs"]))}}


def existing(path: Path) -> dict:
    """The step-time file at `path` ({} where there is none); one line and exit 1 where it is not one,
    which is then left as it is: other machines' rows are never lost."""
    if not path.exists():
        return {}
    try:
        old = parse_json(path.read_text())
    except (OSError, ValueError) as e:
        sys.exit(f"--out {str(path)!r} is not a step-time file this can add to ({e}): move it, or name another")
    devices = old.get("devices", {}) if isinstance(old, dict) else None
    if not isinstance(devices, dict) or not all(
            isinstance(es, list) and all(isinstance(e, dict) and type(e.get("threads")) is int and type(e.get("jobs")) is int
                                         for e in es) for es in devices.values()):
        sys.exit(f"--out {str(path)!r} is not a step-time file this can add to (allowed {{\"devices\": {{machine: "
                 "[{\"threads\": int, \"jobs\": int, \"rows\": [...]}, ...]}}): move it, or name another")
    return old


def main(argv: list[str] | None = None) -> None:
    from experiments.runs.run.provenance import hardware, versions
    from experiments.runs.sweep.estimate import job_threads
    from experiments.runs.sweep.spec import default_jobs
    from modules import FAMILIES
    from modules.budgets import BUDGET_TARGETS
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", nargs="+", default=list(FAMILIES), choices=FAMILIES, help="families (default all)")
    p.add_argument("--budget", default="tiny", choices=BUDGET_TARGETS, help="model budget (default tiny, the cpu profiles')")
    p.add_argument("--batch", type=int, default=32, help="images a step (default 32, the cpu profiles')")
    p.add_argument("--steps", type=int, default=50, help="timed steps per process, after 2 untimed (default 50)")
    p.add_argument("--jobs", type=int, default=default_jobs(),
                   help="processes timing a family at once, as a sweep's --jobs (default: the sweep's, one per core)")
    p.add_argument("--out", type=Path, default=OUT, help=f"the file the rows merge into (default {OUT.parent.name}/{OUT.name})")
    p.error = lambda message: sys.exit(f"{message} (python benchmarks/step_times.py --help lists the options)")
    a = p.parse_args(argv)
    for name, value in (("--batch", a.batch), ("--steps", a.steps), ("--jobs", a.jobs)):
        if value < 1:
            sys.exit(f"{name} {value}: allowed integers >= 1")
    old = existing(a.out)
    import torch
    if torch.cuda.is_available():  # a run here trains on the GPU: its steps are gpu-check's to time
        sys.exit("a GPU is visible: bench-steps times runs on a CPU; on a GPU `make gpu-check` measures the steps")
    from experiments.runs.run.cli import default_precision
    from family_throughput import matmul_peak
    device, threads = hardware(), job_threads(a.jobs)  # as each of a sweep's `jobs` run processes computes
    torch.set_num_threads(threads)
    peak, how = matmul_peak(torch.device("cpu"), default_precision())
    print(f"hardware: {device}; one training step a run, {a.budget} budget, batch {a.batch}, {a.steps} timed steps, "
          f"{a.jobs} at a time with {threads} thread(s) each; MFU against {peak / 1e9:,.1f} GFLOP/s ({how}, "
          f"{threads} thread(s))", flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip() or None
    entry = {"threads": threads, "jobs": a.jobs, "commit": commit, "versions": versions(), "seconds": 0,
             "peak_flops": round(peak), "peak": how, "rows": []}
    started = time.perf_counter()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    for family in a.family:
        r = row(family, a.budget, a.batch, a.steps, a.jobs, threads, peak)
        entry["rows"].append(r)
        entry["seconds"] = round(time.perf_counter() - started)
        write_atomic(a.out, json.dumps(merged(old, device, entry), indent=1) + "\n")  # kept if a later family fails
        mfu = f"{100 * r['mfu']:5.1f}% MFU" if r["mfu"] is not None else "  n/a MFU"
        print(f"{family:9} {r['step_ms']:8.1f} ms/step  {r['images_per_s']:7,} img/s a run  {mfu}  ({r['precision']})",
              flush=True)
    print(f"-> {a.out}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # family_throughput, as the other benchmarks import it
    main()
