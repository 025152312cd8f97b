"""`python -m experiments sweep`: run an experiment spec, resumably.

Run again, the same command skips finished (and diverged) runs, resumes interrupted ones from their
last checkpoint and retries failed ones; one failing run never stops the sweep. Each run's output
goes to its folder's log.txt; the terminal shows which run of how many is going and the time left.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Callable

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from datamodules import ImageClassificationDataModule

from .run_record import read_summary, write_summary
from .spec import Run, expand, load_spec, resolve_axes

FINAL = ("done", "diverged")  # not run again; failed runs are retried


def run_status(run: Run) -> str | None:
    s = read_summary(run.run_dir)
    return s.get("status") if s else None


def launch(run: Run, threads: int | None = None) -> int:
    """One run as its own process (what a cluster job would run); output appended to log.txt."""
    run.run_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    with open(run.run_dir / "log.txt", "a") as log:
        log.write(f"\n$ {run.shell()}\n")
        log.flush()
        return subprocess.run(run.command(), stdout=log, stderr=subprocess.STDOUT, env=env,
                              cwd=Path(__file__).resolve().parents[1]).returncode


def execute(run: Run, launcher: Callable[[Run], int]) -> str:
    """Runs one run unless it is final; returns its status and makes sure summary.json says it."""
    status = run_status(run)
    if status in FINAL:
        return status
    if run.teacher is not None and run_status(replace_dir(run, run.teacher)) != "done":
        _record_failure(run, f"teacher run {run.teacher} is not done")
        return "failed"
    code = launcher(run)
    status = run_status(run)
    if code == 0 and status == "done":
        return status
    if status == "diverged":
        return status
    _record_failure(run, f"exit status {code}; see log.txt")
    return "failed"


def replace_dir(run: Run, name: str) -> Run:
    return replace(run, name=name, run_dir=run.run_dir.parent / name, teacher=None)


def _record_failure(run: Run, reason: str) -> None:
    s = read_summary(run.run_dir) or {"experiment": run.run_dir.parent.name, "run": run.name, "family": run.family,
                                       "fraction": run.fraction, "seed": run.seed, "recipe": run.recipe}
    s.update(status="failed", error=s.get("error") if s.get("status") == "failed" and s.get("error") else reason)
    run.run_dir.mkdir(parents=True, exist_ok=True)
    write_summary(run.run_dir, s)


def run_sweep(runs: list[Run], jobs: int = 1, launcher: Callable[[Run], int] | None = None,
              console: Console | None = None) -> dict[str, str]:
    """Executes every run (teachers before their DeiT students); returns name -> status."""
    console = console or Console()
    launcher = launcher or (lambda r: launch(r, threads=max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None))
    results: dict[str, str] = {}
    todo = [r for r in runs if run_status(r) not in FINAL]
    for r in runs:
        if r not in todo:
            results[r.name] = run_status(r)
    console.print(f"{len(runs)} runs: {len(runs) - len(todo)} already finished, {len(todo)} to run")
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("left"), TimeRemainingColumn()]
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("sweep", total=len(todo))

        def one(run: Run) -> None:
            start = time.perf_counter()
            status = execute(run, launcher)
            results[run.name] = status
            s = read_summary(run.run_dir) or {}
            acc = f", test acc {s['test_acc']:.4f}" if s.get("test_acc") is not None else ""
            progress.console.print(f"[{run.index + 1}/{len(runs)}] {run.name}: {status} in "
                                   f"{time.perf_counter() - start:.0f} s{acc}")
            progress.advance(task)

        # students wait for every teacher: two phases when running in parallel
        for phase in ([r for r in todo if r.teacher is None], [r for r in todo if r.teacher is not None]):
            if jobs <= 1:
                for r in phase:
                    progress.update(task, description=f"run {r.index + 1}/{len(runs)} {r.name}")
                    one(r)
            else:
                progress.update(task, description=f"{jobs} runs at a time")
                with ThreadPoolExecutor(jobs) as pool:
                    list(pool.map(one, phase))
    return results


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default="datascale", help="spec name in experiments/specs or a .yaml path (default datascale)")
    p.add_argument("--profile", default=None, help="profile of the spec (default: gpu where a GPU is present, else cpu)")
    p.add_argument("--families", nargs="+", help="override the spec's families")
    p.add_argument("--fractions", nargs="+", type=float, help="override the training fractions, each in (0, 1]")
    p.add_argument("--seeds", nargs="+", type=int, help="override the seeds")
    p.add_argument("--budget", help="override the budget (tiny, small, base)")
    p.add_argument("--dataset", help="override the dataset")
    p.add_argument("--recipes", nargs="+", help="override the recipes (default, strong)")
    p.add_argument("--runs_dir", default="results/runs", help="where run folders go (default results/runs)")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (default 1)")
    p.add_argument("--dry_run", action="store_true", help="print each run's exact command and status; run nothing")
    p.add_argument("--only", type=int, nargs="+", help="run only these run indices (e.g. a SLURM array task id)")

    def one_line(message: str):  # instead of argparse's usage text and exit
        raise ValueError(f"{message} (python -m experiments sweep --help lists the options)")
    p.error = one_line
    a = p.parse_args(argv)
    if a.jobs < 1:
        raise ValueError(f"--jobs {a.jobs}: allowed integers >= 1")
    existing = next(d for d in (Path(a.runs_dir).absolute(), *Path(a.runs_dir).absolute().parents) if d.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):  # before the dataset is loaded
        raise ValueError(f"cannot write to runs_dir {a.runs_dir!r}: {str(existing)!r} is "
                         + ("not a folder" if not existing.is_dir() else "not writable"))
    spec = load_spec(a.spec)
    profile = a.profile or ("gpu" if torch.cuda.is_available() else "cpu")
    axes = resolve_axes(spec, profile, families=a.families, fractions=a.fractions, seeds=a.seeds,
                        budget=a.budget, dataset=a.dataset, recipes=a.recipes)
    pool = len(ImageClassificationDataModule(axes["dataset"])._splits["pool"])
    runs = expand(spec, axes, Path(a.runs_dir), pool)
    if a.only:
        bad = [i for i in a.only if not 0 <= i < len(runs)]
        if bad:
            raise ValueError(f"--only {bad[0]}: allowed run indices 0..{len(runs) - 1}")
        runs = [runs[i] for i in a.only]
    if a.dry_run:
        for r in runs:
            print(f"# {r.index} {r.name} [{run_status(r) or 'new'}]" + (f" (after {r.teacher})" if r.teacher else ""))
            print(r.shell())
        return 0
    exp_dir = Path(a.runs_dir) / spec["name"]
    exp_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    results = run_sweep(runs, jobs=a.jobs)
    counts = {s: list(results.values()).count(s) for s in sorted(set(results.values()))}
    wall = time.perf_counter() - start
    print(f"sweep {spec['name']} ({profile}): {len(runs)} runs in {wall:.0f} s: "
          + ", ".join(f"{n} {s}" for s, n in counts.items()))
    # per profile: the axes asked for and, for a whole sweep, its wall time (read by the tables)
    sweep_file = exp_dir / "sweep.json"
    record = json.loads(sweep_file.read_text()) if sweep_file.exists() else {}
    record = {"spec": spec["name"], "profiles": record.get("profiles", {})}
    previous = record["profiles"].get(profile, {})
    record["profiles"][profile] = {**axes, "pool_size": pool,
                                   "sample_efficiency_accuracy": spec.get("sample_efficiency_accuracy")}
    if not a.only:
        record["profiles"][profile]["last_invocation"] = {"wall_time_s": round(wall), "runs": len(runs),
                                                         "statuses": counts, "jobs": a.jobs}
    elif previous.get("last_invocation"):
        record["profiles"][profile]["last_invocation"] = previous["last_invocation"]
    sweep_file.write_text(json.dumps(record, indent=1) + "\n")
    return 0 if all(s in FINAL for s in results.values()) else 1
