"""The sweep's display (runs.sweep.progress), with a fake clock and a fake launcher: one line for the
sweep over all its stages, with the dry run's estimate of the time left; a line per training run
from its progress.json; names and counters printed as they are."""
from __future__ import annotations

import io
import os
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from experiments.runs.sweep.progress import SweepProgress
from experiments.runs.run.record import read_progress, write_progress
from experiments.runs.run.run_folder import RunFolder
from experiments.runs.run.summary import Summary
from experiments.runs.sweep.spec import Run
from experiments.runs.sweep.sweep import run_sweep

DEVICE = "a test device"
RESNET = 90_742_560  # resnet-tiny's forward FLOPs per image at 28x28x1, as its summaries record them
TABLE = {(DEVICE, "resnet", "tiny", RESNET, 32, 1): 1000.0}  # one second per step: a 100-step run takes 100 s


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _runs(tmp_path: Path, stage: str, n: int, family: str = "resnet") -> list[Run]:
    return [Run(index=i, name=f"{family}-{stage}{i}", family=family, fraction=1.0, seed=i, variant="default",
                args=("--data.batch_size", "32"), batch_size=32, run_dir=tmp_path / f"{family}-{stage}{i}", stage=stage,
                budget="tiny", steps=100) for i in range(n)]


def _done(run: Run) -> None:
    run.run_dir.mkdir(parents=True, exist_ok=True)
    RunFolder(run.run_dir).write_summary(Summary(run=run.name, status="fitted" if run.stage == "tune" else "done"))


def test_one_line_for_the_whole_sweep_with_the_dry_runs_estimate_updated_as_runs_finish(tmp_path):
    clock = Clock()
    tune, main = _runs(tmp_path, "tune", 2), _runs(tmp_path, "main", 2)
    progress = SweepProgress([("tune", tune), ("main", main)], jobs=1, clock=clock, device=DEVICE, table=TABLE)
    seen = []

    def launcher(run: Run) -> int:
        seen.append(("start", progress.line(), progress.run_lines()))
        run.run_dir.mkdir(parents=True, exist_ok=True)
        clock.now += 150  # before any run finished, however long it has been: the plan's estimate
        write_progress(run.run_dir, 50, 100, 0.5)
        seen.append(("half", progress.line(), progress.run_lines()))
        clock.now += 50   # 200 s for a run estimated at 100 s: what is left takes twice as long
        _done(run)
        return 0

    console = Console(file=io.StringIO(), width=200)
    run_sweep(tune, launcher=launcher, console=console, progress=progress)
    assert seen[0] == ("start", "stage tune (1 of 2, then main) · 0/4 runs done · 0:00:00 elapsed · about 0:06:40 left",
                       ["  resnet-tune0: starting"])
    assert seen[1] == ("half", "stage tune (1 of 2, then main) · 0/4 runs done · 0:02:30 elapsed · about 0:05:50 left",
                       ["  resnet-tune0: step 50/100, val acc 0.5000"])
    # one run finished in 200 s of its estimated 100: the 300 s left are 600 s
    assert seen[2][1] == "stage tune (1 of 2, then main) · 1/4 runs done · 0:03:20 elapsed · about 0:10:00 left"
    run_sweep(main, launcher=launcher, console=console, progress=progress)
    assert seen[4][1] == "stage main (2 of 2) · 2/4 runs done · 0:06:40 elapsed · about 0:06:40 left"
    assert progress.line() == "stage main (2 of 2) · 4/4 runs done · 0:13:20 elapsed · nothing left to train"
    assert progress.run_lines() == []


def test_no_estimate_without_a_measured_step_time_and_a_trained_trial_costs_nothing(tmp_path):
    clock = Clock()
    tune, vit = _runs(tmp_path, "tune", 1), _runs(tmp_path, "main", 1, family="vit")
    progress = SweepProgress([("tune", tune), ("main", vit)], clock=clock, device=DEVICE, table=TABLE)
    assert progress.left() == "about 0:01:40 left, not counting vit-tiny at batch 32"
    _done(tune[0])
    assert progress.left() == "no estimate (no step time measured on this device for vit-tiny at batch 32)"
    # the tuning winner as a main run: trained, only its test is left
    winner = _runs(tmp_path, "tune", 1)[0]
    progress.plan("main", [replace(winner, stage="main")])
    assert progress.left() == "about 0:00:00 left"
    assert SweepProgress([("tune", tune)], device="elsewhere", table=TABLE).left() == "nothing left to train"


def test_names_and_counters_print_as_they_are(tmp_path):
    """Rich would read '[tune 1/1]' or a name in brackets as a style tag and drop it."""
    (run,) = _runs(tmp_path, "tune", 1)
    run = replace(run, name="[bold]resnet[/bold]")

    def launcher(r: Run) -> int:
        _done(r)
        return 0
    out = io.StringIO()
    run_sweep([run], launcher=launcher, console=Console(file=out, width=60),
              progress=SweepProgress([("tune", [run])], clock=Clock(), device=DEVICE, table=TABLE))
    assert "[tune 1/1] [bold]resnet[/bold]: fitted in " in out.getvalue(), out.getvalue()
    # in a log (no terminal) the sweep's line is kept whole (not cut at the width), and ends
    assert " ".join(out.getvalue().split()).endswith("stage tune (1 of 1) · 1/1 runs done · 0:00:00 elapsed · "
                                                      "nothing left to train") and out.getvalue().endswith("\n")


def test_a_run_started_here_shows_only_its_own_progress(tmp_path):
    """A progress.json older than the run's start is another invocation's: 'starting' until it writes."""
    (run,) = _runs(tmp_path, "tune", 1)
    run.run_dir.mkdir()
    write_progress(run.run_dir, 30, 100, 0.25)
    os.utime(run.run_dir / "progress.json", (1, 1))
    progress = SweepProgress([("tune", [run])], clock=Clock(), device=DEVICE, table=TABLE)
    progress.started([run])
    assert progress.run_lines() == ["  resnet-tune0: starting"]
    # ... though the steps it took count for the time left (it resumes from where it was)
    assert progress.left() == "about 0:01:10 left"
    write_progress(run.run_dir, 40, 100, None)
    assert progress.run_lines() == ["  resnet-tune0: step 40/100"]
    progress.started([run], queued=True)
    os.utime(run.run_dir / "progress.json", (1, 1))
    assert progress.run_lines() == []  # waiting in a stage process: not shown until it trains


def test_progress_records_are_read_as_numbers(tmp_path):
    write_progress(tmp_path, 3, 10, 0.5)
    assert read_progress(tmp_path) == {"step": 3, "steps": 10, "val_acc": 0.5}
    for text in ('{"step": "[red]3", "steps": 10, "val_acc": null}', '{"step": 3, "steps": 10, "val_acc": true}',
                 "[1, 2]", "not json"):
        (tmp_path / "progress.json").write_text(text)
        assert read_progress(tmp_path) is None, text
