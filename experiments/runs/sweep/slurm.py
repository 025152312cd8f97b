"""Launchers of the spec runners (sweep, distill, inductive_bias) beyond this process, through submitit.

`--launcher local` (the default) is run_sweep's own: each run a process here. The other two send
each stage through this file:
- `slurm`: each stage is one SLURM job array (submitit's SlurmExecutor); its tasks are the stage's
  runs or packed groups. DeiT students are a second array with `--dependency=afterany:<teachers'
  array>`; partition, account, GPUs, CPUs, memory, time limit and array parallelism come from the
  profile's `cluster:` mapping or from the options (add_options).
- `submitit-local`: the same code path with submitit's LocalExecutor (real subprocess jobs, its
  pickles and logs). It has no scheduler, so two things are emulated: a student task waits until
  its teachers' jobs have ended, and at most `array_parallelism` tasks run at once (slot locks).

What a task does (RunTask): it runs the run's exact command (Run.command(); a packed group's
fit_packed) with its output in the run folder's log.txt, as the local launcher does, and retries a
failing run up to `retries` times. On SLURM's warning signal (USR2, signal_delay_s before the time
limit, or on preemption) it kills its run and requeues itself (submitit's checkpoint()); the
requeued task starts the same command, which resumes from the run folder's last.ckpt, written at
every validation. Training is deterministic and last.ckpt holds the loader's position, so the run
ends with the weights of an uninterrupted one; the steps since the last validation are redone.

Waiting (the default) shows a progress display until the arrays are done, then the runner goes on
to its next stage. `--no_wait` returns at once: a small continuation job, after the stage's arrays
(afterany; emulated on the local executor), runs the same runner command again; it skips finished
runs and submits the next stage, until the last one regenerates the tables. `--status` prints every
planned run's state from its folder. Submitit's own pickles and logs go to
<runs_dir>/<experiment>/submitit/.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from modules.files import open_in_place

from experiments.runs.sweep.cluster import ClusterOptions, Submitted
from experiments.runs.run.lock import SUBMITIT_DIR, try_lock
from experiments.runs.run.run_folder import RunFolder
from experiments.runs.sweep.execute import (FINAL, RUNNING, TUNED, record_failure, execute, execute_group, finished,
                                      launch, launch_packed, run_status, teacher_problem)

ROOT = Path(__file__).resolve().parents[3]
POLL_S = 1.0


# ---------------- what one array task runs ----------------
def _import_submitit():
    try:
        import submitit
    except ImportError:
        raise ValueError("--launcher slurm and submitit-local need submitit: allowed after pip install -e .[cluster]") from None
    return submitit


try:
    from submitit.helpers import Checkpointable as _Checkpointable
except ImportError:  # submitit is an optional extra: the local launcher never builds a task
    _Checkpointable = object


class RunTask(_Checkpointable):
    """One array task: a run, or a packed group, run until final or `retries` retries are spent."""

    def __init__(self, runs: list, retries: int, launcher: Callable | None = None,
                 packed_launcher: Callable | None = None, after: list | None = None, slots: tuple | None = None):
        self.runs, self.retries = list(runs), retries
        self.launcher, self.packed_launcher = launcher, packed_launcher
        self.after, self.slots = after or [], slots   # local executor only: its dependency and parallelism

    def __call__(self) -> dict[str, str]:
        if self.after:
            wait_ended(self.after)
        with _slot(self.slots):
            for attempt in range(self.retries + 1):
                if len(self.runs) == 1:
                    statuses = {self.runs[0].name: execute(self.runs[0], self.launcher or launch)}
                else:
                    statuses = execute_group(self.runs, self.packed_launcher or launch_packed)
                bad = [n for n, s in statuses.items() if s not in FINAL + TUNED]
                # a student stopped by its teacher (none planned, untrained or without weights) would
                # stop again at once: retrying waits for nothing
                stuck = all(teacher_problem(r) is not None for r in self.runs if r.name in bad)
                if not bad or attempt == self.retries or stuck:
                    break
                for r in self.runs:
                    if r.name in bad:
                        with open_in_place(r.run_dir / "log.txt", append=True) as log:
                            log.write(f"\nattempt {attempt + 1} of {self.retries + 1} failed; retrying\n")
        return statuses

    def checkpoint(self, *args, **kwargs):
        """Preempted or near the time limit: the run stops here and the same task is requeued; it
        resumes from the run folder's last.ckpt."""
        from submitit.helpers import DelayedSubmission

        for proc in list(RUNNING):  # not proc.wait(): this handler interrupted a wait that holds its lock
            proc.kill()
            deadline = time.time() + 60
            while _alive(proc.pid) and time.time() < deadline:
                time.sleep(0.1)
        for r in self.runs:
            if r.run_dir.exists():
                with open_in_place(r.run_dir / "log.txt", append=True) as log:
                    log.write("\nthe scheduler's warning signal came: stopped here, requeued; the run resumes from "
                              "its last checkpoint\n")
        return DelayedSubmission(self, *args, **kwargs)


class _slot:
    """At most len(slots) tasks at once on the local executor: each holds one flock'ed slot file."""

    def __init__(self, slots: tuple | None):
        self.slots, self.handle = slots, None

    def __enter__(self):
        if not self.slots:
            return self
        folder, n = Path(self.slots[0]), self.slots[1]
        folder.mkdir(parents=True, exist_ok=True)
        while True:
            for i in range(n):
                h = open_in_place(folder / f"slot{i}.lock", append=True)
                if try_lock(h):
                    self.handle = h
                    return self
                h.close()
            time.sleep(0.5)

    def __exit__(self, *exc):
        if self.handle:
            self.handle.close()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    return state not in ("Z", "X")


def ended(job) -> bool:
    """Whether a job has ended, from any process: its result pickle exists, or (local executor) its
    controller process is gone."""
    if job.paths.result_pickle.exists():
        return True
    if type(job).__name__ == "LocalJob":
        return not _alive(int(job.job_id))
    return job.done()


def wait_ended(jobs: list) -> None:
    while not all(ended(j) for j in jobs):
        time.sleep(POLL_S)


class Continue:
    """The continuation job: after the stage's jobs end, the same runner command again (with
    --no_wait), which skips finished runs and submits the next stage."""

    def __init__(self, command: list[str], after: list | None = None):
        self.command, self.after = command, after or []

    def __call__(self) -> int:
        if self.after:
            wait_ended(self.after)
        print("$ " + " ".join(self.command), flush=True)
        return subprocess.run(self.command).returncode  # in the submitting folder, as sbatch starts a job


# ---------------- submitting and waiting ----------------
def executor(opts: ClusterOptions, folder: Path, name: str, dependency: str | None = None, small: bool = False):
    submitit = _import_submitit()
    folder.mkdir(parents=True, exist_ok=True)
    if opts.launcher == "slurm":
        ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=5)
        params = {"job_name": name, "time": 30 if small else opts.time_min, "signal_delay_s": opts.signal_delay_s,
                  "stderr_to_stdout": True, "cpus_per_task": 1 if small else opts.cpus,
                  "gpus_per_node": None if small or not opts.gpus else opts.gpus,
                  "mem": f"{opts.mem_gb}GB" if opts.mem_gb and not small else None,
                  "partition": opts.partition, "account": opts.account, "dependency": dependency}
        if opts.array_parallelism and not small:
            params["array_parallelism"] = opts.array_parallelism
        ex.update_parameters(**{k: v for k, v in params.items() if v is not None})
    else:
        ex = submitit.LocalExecutor(folder=folder, max_num_timeout=5)
        gpus = opts.gpus if opts.gpus is not None else _visible_gpus()
        ex.update_parameters(timeout_min=opts.time_min, signal_delay_s=opts.signal_delay_s,
                             gpus_per_node=0 if small else gpus, stderr_to_stdout=True)
    return ex


def _visible_gpus() -> int:
    import torch
    return torch.cuda.device_count()


def submitit_dir(runs: list) -> Path:
    return runs[0].run_dir.parent / SUBMITIT_DIR


def run_stage(runs: list, units: list[list[list]], opts: ClusterOptions, launcher=None, packed_launcher=None,
              console=None) -> dict[str, str]:
    """A stage's units (phases of runs or packed groups: teachers, then their students) as one job
    array per phase, the students' after the teachers'; waits with a progress display (returns each
    run's status) or, with --no_wait, submits a continuation job and raises Submitted."""
    from rich.console import Console

    console = console or Console()
    folder = submitit_dir(runs)
    stage = runs[0].stage
    slots = (str(folder / "slots"), opts.array_parallelism) if opts.launcher == "submitit-local" else None
    submitted: list[tuple[list, object]] = []
    previous: list = []
    for phase in units:
        if not phase:
            continue
        dependency = f"afterany:{previous[0].job_id.split('_')[0]}" if previous and opts.launcher == "slurm" else None
        ex = executor(opts, folder, f"{runs[0].run_dir.parent.name}-{stage}", dependency)
        after = previous if previous and opts.launcher != "slurm" else None
        tasks = [RunTask(u, opts.retries, launcher, packed_launcher, after, slots) for u in phase]
        jobs = ex.submit_array(tasks)
        submitted += list(zip(phase, jobs))
        previous = jobs
        console.print(f"{stage}: submitted {len(jobs)} task(s) as job array {_array_id(jobs)} "
                      f"({opts.launcher}" + (f", after {dependency.split(':')[1]}" if dependency else "")
                      + (", after the teachers' jobs" if after else "") + f"); logs in {folder}", soft_wrap=True)
    jobs = [j for _, j in submitted]
    if not opts.wait:
        command = [sys.executable, "-m", "experiments", opts.runner, *[x for x in opts.argv if x != "--no_wait"],
                   "--no_wait", "--chained"]
        slurm = opts.launcher == "slurm"
        ex = executor(opts, folder, f"{runs[0].run_dir.parent.name}-next",
                      f"afterany:{','.join(sorted({j.job_id.split('_')[0] for j in jobs}))}" if slurm else None,
                      small=True)
        job = ex.submit(Continue(command, None if slurm else jobs))
        raise Submitted(f"{stage}: {len(jobs)} task(s) submitted; job {job.job_id} then runs the same command for "
                        f"the next stage. Watch: python -m experiments {opts.runner} "
                        + " ".join(x for x in opts.argv if x not in ("--no_wait",)) + " --status")
    results = _wait(submitted, len([r for u, _ in submitted for r in u]), stage, console)
    for unit, job in submitted:
        error = _job_error(job)
        for r in unit:
            status = run_status(r)
            if not finished(r, status) and status != "diverged" and error:
                record_failure(r, f"its {opts.launcher} job {job.job_id} failed: {error}")
                status = "failed"
            results[r.name] = status or "failed"
    report_failed([r for u, _ in submitted for r in u if results[r.name] == "failed"], console)
    return results


def _array_id(jobs: list) -> str:
    ids = sorted({j.job_id.split("_")[0] for j in jobs})
    return ids[0] if len(ids) == 1 else f"{ids[0]}..{ids[-1]}"


def _job_error(job) -> str | None:
    try:
        e = job.exception()
    except Exception as ex:  # noqa: BLE001 (a job the scheduler lost)
        return str(ex).strip().splitlines()[-1] if str(ex).strip() else type(ex).__name__
    if e is None:
        return None
    text = str(e).strip()
    return text.splitlines()[-1] if text else type(e).__name__


def _wait(submitted: list, total: int, stage: str, console) -> dict:
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    results: dict[str, str] = {}
    pending = list(submitted)
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(f"{stage} (tasks running)", total=total)
        while pending:
            for unit, job in list(pending):
                if job.done():
                    pending.remove((unit, job))
                    for r in unit:
                        results[r.name] = run_status(r)
                        progress.console.print(escape(f"[{stage} {r.index + 1}] {r.name}: {results[r.name] or 'failed'} "
                                                      f"(job {job.job_id})"), soft_wrap=True)
                        progress.advance(task)
            if pending:
                time.sleep(POLL_S)
    return results


def tail(path: Path, n: int = 5) -> list[str]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [x for x in lines if x.strip()][-n:]


def report_failed(runs: list, console=None, n: int = 5) -> None:
    for r in runs:
        text = f"failed: {r.name} ({r.run_dir}); last lines of its log.txt:\n" + "\n".join(
            "    " + x for x in tail(r.run_dir / "log.txt", n))
        (console.print(text, markup=False, highlight=False, soft_wrap=True) if console else print(text))


# ---------------- --status ----------------
def run_state(run) -> tuple[str, str]:
    """(done | running | failed | diverged | interrupted | pending, a detail) from the run's folder alone."""
    folder = RunFolder(run.run_dir)
    s = folder.summary()
    status = s.status if s is not None else None
    if finished(run, status) and status != "diverged":
        acc = s.test_acc if run.stage != "tune" else s.val_acc_best
        return "done", (f"{'test' if run.stage != 'tune' else 'val'} acc {acc:.4f}" if acc is not None else "")
    if status == "diverged":
        return "diverged", s.error or ""
    if folder.held():
        return "running", "trained, testing" if status == "fitted" else ""
    if status == "failed":
        return "failed", s.error or ""
    if run.run_dir.exists():
        resumes = "resumes from last.ckpt" if folder.last_checkpoint.exists() else ""
        if status == "interrupted":  # by Ctrl-C or SIGTERM (runs.run.interruption)
            return "interrupted", resumes or "starts again"
        return "pending", "only its test is left" if status == "fitted" else resumes or "started"
    return "pending", ""




def print_status(stages: list[tuple[str, list]], waiting: list[str], exp_dir: Path) -> int:
    """One table of every planned run's state (--status); failed runs with the last lines of their log."""
    counts: dict[str, int] = {}
    seen, failed = set(), []
    print(f"{'stage':<10} {'#':>3}  {'state':<11} run / detail")
    for title, runs in stages:
        for r in runs:
            if r.run_dir in seen:
                continue
            seen.add(r.run_dir)
            state, detail = run_state(r)
            counts[state] = counts.get(state, 0) + 1
            print(f"{title:<10} {r.index:>3}  {state:<11} {r.run_dir.name}" + (f"  ({detail})" if detail else ""))
            if state == "failed":
                failed.append(r)
    for w in waiting:
        print(f"{'':<10} {'':>3}  {'pending':<11} {w}")
    print(f"{len(seen)} runs: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
          + (f"; {len(waiting)} more listed once their tuning is done" if waiting else ""))
    report_failed(failed)
    if (exp_dir / "submitit").is_dir():
        print(f"scheduler logs: {exp_dir / 'submitit'}")
    return 0


def run_then_tables(stages: Callable[[], int], cluster: ClusterOptions, experiment: str, runs_dir: Path,
                    planning_only: bool) -> int:
    """A runner's stages, then (unless it only planned) the tables; after a --no_wait submission,
    the submission's line and exit 0: the scheduler runs the rest."""
    try:
        code = stages()
    except Submitted as e:
        print(e)
        return 0
    if not planning_only:
        regenerate_tables(cluster, experiment, runs_dir)
    return code


def regenerate_tables(opts: ClusterOptions, experiment: str, runs_dir: Path) -> None:
    """Once a slurm or submitit-local run is done: `python -m experiments tables` for it."""
    if not opts.submitit:
        return
    default = Path(opts.tables_out).resolve() == (ROOT / "results").resolve()
    subprocess.run([sys.executable, "-m", "experiments", "tables", "--experiment", experiment, "--runs_dir",
                    str(runs_dir), "--out", opts.tables_out, *([] if default else ["--readme", ""])], check=False)
