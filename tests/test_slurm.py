"""The submitit launchers (experiments/runs/sweep/slurm.py) under submitit's LocalExecutor: real subprocess
jobs through the code path `--launcher slurm` takes. An array with a dependency; a failing task
retried, then reported; a task preempted mid-run and requeued that ends equal to an uninterrupted
run; --status on a half-finished sweep."""
from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
import yaml

from experiments.__main__ import main
from experiments.runs.run.run_folder import RunFolder
from experiments.runs.run.summary import Summary
from experiments.runs.sweep.cluster import ClusterOptions
from experiments.runs.sweep.spec import load_spec, main_runs, resolve_axes, tuning_runs
from experiments.runs.sweep.execute import _record
from experiments.runs.sweep.slurm import RunTask
from experiments.runs.sweep.sweep import run_sweep

from .fake_launch import fake_launch
from .test_sweep import _folder, sweep_env  # noqa: F401 (the fixture)

ROOT = Path(__file__).resolve().parents[1]


def _times(run, word: str) -> list[float]:
    return [float(x.split()[1]) for x in (run.run_dir / "log.txt").read_text().splitlines() if x.startswith(word + " ")]


def test_array_with_dependency_and_a_failing_task_reported(sweep_env, capsys):
    """One stage: resnet and vit in one array, the DeiT student in a second array that runs only
    after its teacher's job has ended; vit fails, is retried once, then reported with its log."""
    spec_path, runs = sweep_env
    spec = load_spec(str(spec_path))
    plan = main_runs(spec, resolve_axes(spec, "cpu", families=["resnet", "vit", "deit"], fractions=[1.0]), runs, 540,
                     lambda *key: 0.003)
    resnet, vit, deit = sorted(plan, key=lambda r: ["resnet", "vit", "deit"].index(r.family))
    assert deit.teacher == resnet.run_dir.name
    opts = ClusterOptions(launcher="submitit-local", array_parallelism=2, retries=1, time_min=10)
    results = run_sweep(plan, launcher=fake_launch, cluster=opts)
    assert results == {resnet.name: "done", vit.name: "failed", deit.name: "done"}
    assert _times(deit, "start")[0] >= _times(resnet, "end")[0]           # the dependency held
    assert len(_times(vit, "start")) == 2 and "attempt 1 of 2 failed; retrying" in (vit.run_dir / "log.txt").read_text()
    out = capsys.readouterr().out
    assert f"failed: {vit.name}" in out and "boom: the fake vit run fails" in out
    assert "submitted 2 task(s)" in out and "submitted 1 task(s)" in out and "after the teachers' jobs" in out
    folder = runs / "tiny" / "submitit"                                    # submitit's files stay in the experiment
    assert len(list(folder.glob("*_submitted.pkl"))) == 3 and len(list(folder.glob("*_result.pkl"))) == 3


def test_a_student_stopped_by_its_teacher_fails_once_not_retries_times(sweep_env):
    """A DeiT student whose teacher has a record but no weights fails without launching; its task
    does not retry it (it would stop again at once), while a failing launch is still retried."""
    spec_path, runs = sweep_env
    spec = load_spec(str(spec_path))
    teacher, student = main_runs(spec, resolve_axes(spec, "cpu", families=["deit"], fractions=[1.0]), runs, 540,
                                 lambda *key: 0.003)
    _record(teacher, "done")  # a record as results/reference keeps it: no checkpoints/
    launched = []
    assert RunTask([student], retries=2, launcher=lambda run: launched.append(run) or 0)() == {student.name: "failed"}
    log = student.run_dir / "log.txt"
    assert launched == [] and not (log.exists() and "retrying" in log.read_text())
    (teacher.run_dir / "checkpoints").mkdir()
    (teacher.run_dir / "checkpoints" / "best.ckpt").write_bytes(b"weights")
    assert RunTask([student], retries=2, launcher=lambda run: launched.append(run) or 1)() == {student.name: "failed"}
    assert launched == [student] * 3 and (student.run_dir / "log.txt").read_text().count("; retrying") == 2


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _end_processes_under(folder: Path) -> None:
    """Ends, by pid, any process of this test still running (its command line names the test's folder)."""
    for stat in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(folder) in stat.read_bytes().decode(errors="replace") and int(stat.parent.name) != os.getpid():
                os.kill(int(stat.parent.name), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def test_preempted_task_requeues_and_ends_equal_to_an_uninterrupted_run(sweep_env, tmp_path, in_process_launches):
    """The whole sweep through `--launcher submitit-local --no_wait`: the command returns at once
    and the scheduler chains the stages (a continuation job after each array runs the command
    again). The tuning task gets the scheduler's warning signal (USR2) mid-run, kills its run and
    requeues itself; the requeued task resumes from last.ckpt; best.ckpt and last.ckpt hold the
    weights of the same run trained without a break; the main stage (its test) follows and the
    last continuation regenerates the tables."""
    spec, runs = sweep_env
    longer = yaml.safe_load(spec.read_text())
    # 51 steps, last.ckpt after 17: 34 steps' time to signal the task mid-run
    longer["profiles"]["cpu"].update(epochs=3.0, val_checks=3, fractions=[1.0])
    longer["families"] = ["resnet"]
    spec.write_text(yaml.safe_dump(longer))
    out = tmp_path / "tables"
    cmd = [sys.executable, "-m", "experiments", "sweep", "--spec", str(spec), "--runs_dir", str(runs),
           "--launcher", "submitit-local", "--no_wait", "--tables_out", str(out)]
    try:
        with open(tmp_path / "driver.txt", "w") as driver:  # not a pipe: the jobs it starts outlive it
            code = subprocess.run(cmd, cwd=ROOT, stdout=driver, stderr=subprocess.STDOUT, timeout=300).returncode
        said = (tmp_path / "driver.txt").read_text()
        assert code == 0 and "1 task(s) submitted" in said, said[-3000:]
        deadline = time.time() + 300
        while time.time() < deadline and not list((runs / "tiny").glob("resnet-*/checkpoints/last.ckpt")):
            time.sleep(0.01)
        (run_dir,) = (runs / "tiny").glob("resnet-*_????????")
        fit_pid = int((run_dir / ".lock").read_text())
        os.kill(_ppid(fit_pid), signal.SIGUSR2)      # the task: what SLURM sends signal_delay_s before the limit
        deadline = time.time() + 400
        while time.time() < deadline and not (out / "tiny.csv").exists():
            time.sleep(0.5)
        logs = "".join(p.read_text() for p in sorted((runs / "tiny" / "submitit").glob("*_log.out")))
        assert (out / "tiny.csv").exists(), logs[-3000:]
    finally:
        time.sleep(2)  # the last continuation job exits
        _end_processes_under(tmp_path)
    log = (run_dir / "log.txt").read_text()
    assert "sweep tiny (cpu, stage all): 1 runs" in logs                 # the chain went to the end
    assert "the scheduler's warning signal came" in log and "resuming from" in log, log[-3000:]
    assert log.count("\n$ python -m experiments fit ") == 3           # trained, resumed, then tested
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "done"

    ref = tmp_path / "ref"                 # the same run, uninterrupted, locally (fitted in this process)
    assert main(["sweep", "--spec", str(spec), "--runs_dir", str(ref), "--stage", "tune"]) == 0
    whole = _folder(ref / "tiny", run_dir.name.rsplit("_", 2)[0] + "_" + run_dir.name.rsplit("_", 2)[1])
    for name in ("best.ckpt", "last.ckpt"):
        a, b = (torch.load(d / "checkpoints" / name, weights_only=True) for d in (whole, run_dir))
        assert a["global_step"] == b["global_step"] == {"best.ckpt": a["global_step"], "last.ckpt": 51}[name], name
        assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"]), name


def test_status_of_a_half_finished_sweep(sweep_env, capsys):
    """--status reads each planned run's folder: done, running (its lock is held), failed (with the
    last lines of its log), diverged, pending; the main runs of an untuned family are announced."""
    spec_path, runs = sweep_env
    spec = yaml.safe_load(spec_path.read_text())
    spec["families"] = ["resnet", "vit"]
    spec["profiles"]["cpu"].update(fractions=[1.0], lrs=[0.001, 0.003])
    spec_path.write_text(yaml.safe_dump(spec))
    sweep = ["sweep", "--spec", str(spec_path), "--runs_dir", str(runs)]
    assert main([*sweep, "--dry_run"]) == 0
    names = [x.split()[2] for x in capsys.readouterr().out.splitlines() if x.startswith("# ")]
    loaded = load_spec(str(spec_path))
    trials = {(r.family, r.lr): r for r in tuning_runs(loaded, resolve_axes(loaded, "cpu"), runs, 540,
                                                       ["resnet", "vit"])}
    assert sorted(r.name for r in trials.values()) == sorted(names)
    done, diverged, failed, running = (trials["resnet", 0.001], trials["resnet", 0.003], trials["vit", 0.001],
                                       trials["vit", 0.003])
    for r, status in ((done, "fitted"), (diverged, "diverged"), (failed, "failed")):
        r.run_dir.mkdir(parents=True)
        RunFolder(r.run_dir).write_summary(Summary(run=r.name, status=status, val_acc_best=0.5, error="exit status 1"))
    (failed.run_dir / "log.txt").write_text("$ python -m experiments fit ...\nTraceback\nRuntimeError: out of memory\n")
    running.run_dir.mkdir(parents=True)
    with open(running.run_dir / ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)                # a fit holding its folder
        assert main([*sweep, "--status"]) == 0
    out = capsys.readouterr().out
    rows = {x.split()[3]: x.split()[2] for x in out.splitlines() if x.startswith(("tune ", "main "))}
    assert rows == {done.run_dir.name: "done", diverged.run_dir.name: "diverged", failed.run_dir.name: "failed",
                    running.run_dir.name: "running"}
    assert f"failed: {failed.name}" in out and "    RuntimeError: out of memory" in out
    assert "main stage of vit: listed once their tuning is done" in out  # resnet's main run is its tuning winner
    assert "4 runs: 1 diverged, 1 done, 1 failed, 1 running" in out
    assert sorted(p.name for p in (runs / "tiny").iterdir()) == sorted(r.run_dir.name for r in trials.values())  # nothing written
