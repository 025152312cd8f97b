"""What a sweep shows while it runs: one line for the whole sweep, and one per run training.

    stage tune (1 of 2, then main) · 2/22 runs done · 0:26:13 elapsed · about 0:41:07 left
      resnet-tiny_fashion_mnist_f1_s0_lr0.003: step 1200/2000, val acc 0.8123

Runs are counted over every stage of the sweep, those finished before it started included. The
time left is the dry run's estimate (estimate.py: the step times measured on this device) of the
steps every unfinished run still has to take (a training run's progress.json says where it is),
and, once runs of this sweep have finished, that times how long they took over what was estimated
for them. With no finished run the estimate is the dry run's alone: never an extrapolation from
zero. What a run writes is shown as text, never read as Rich markup.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from datetime import timedelta
from typing import Callable, Iterator

from rich.console import Console
from rich.live import Live
from rich.text import Text

from experiments.runs.sweep.estimate import DONE, every_step_time, ordered_phases, phased_wall, unit_minutes
from experiments.runs.sweep.execute import finished, run_hardware, run_status
from experiments.runs.run.record import read_progress
from experiments.runs.run.run_folder import RunFolder
from experiments.runs.sweep.spec import Run


def clock_text(seconds: float) -> str:
    return str(timedelta(seconds=round(max(0.0, seconds))))


class SweepProgress:
    """The sweep's display. `stages`: (name, runs) of every stage this sweep runs, in order (a stage
    not yet planned exactly, such as the main runs before tuning chose their lr, with the runs it
    would have: their steps do not depend on the lr); `plan` replaces a stage's runs once known."""

    def __init__(self, stages: list[tuple[str, list[Run]]], jobs: int = 1, pack: int = 1,
                 clock: Callable[[], float] = time.monotonic, device: str | None = None,
                 table: dict[tuple, float] | None = None):
        self.stages = {name: list(runs) for name, runs in stages}
        self.stage = stages[0][0] if stages else ""
        self.jobs, self.pack, self.clock = jobs, pack, clock
        self.started_at = clock()
        # read here, once: the display asks every second, and a run's estimate must not delay its start
        self._device, self._table = device or run_hardware(jobs), every_step_time(jobs) if table is None else table
        # run name -> (run, when it started on `clock`, when on the wall clock, its estimated seconds or None;
        # queued: it waits in a stage process, shown once it writes its progress)
        self.running: dict[str, tuple[Run, float, float, float | None, bool]] = {}
        self.timed: list[tuple[float, float]] = []  # (seconds taken, seconds estimated) of runs finished here

    # ---------------- what happens ----------------
    def plan(self, stage: str, runs: list[Run]) -> None:
        self.stages[stage] = list(runs)

    def enter(self, stage: str) -> None:
        self.stage = stage
        self.stages.setdefault(stage, [])

    def started(self, runs: list[Run], queued: bool = False) -> None:
        """`runs` (a unit: one run, or a packed group) start training now."""
        estimated = None if queued else self._unit_seconds(runs)
        for r in runs:
            self.running[r.name] = (r, self.clock(), time.time(), estimated, queued)

    def ended(self, run: Run, status: str | None) -> None:
        _, start, _, estimated, _ = self.running.pop(run.name, (run, None, None, None, True))
        if start is not None and estimated and finished(run, status):
            self.timed.append((self.clock() - start, estimated))

    def run_dirs(self) -> list:
        """The folders of every run of the plan, once each."""
        return list(dict.fromkeys(r.run_dir for runs in self.stages.values() for r in runs))

    # ---------------- what is shown ----------------
    def line(self) -> str:
        names = list(self.stages)
        where = names.index(self.stage) if self.stage in names else 0
        then = f", then {', '.join(names[where + 1:])}" if names[where + 1:] else ""
        runs = [r for rs in self.stages.values() for r in rs]
        done = sum(finished(r, run_status(r)) for r in runs)
        return (f"stage {self.stage} ({where + 1} of {len(names)}{then}) · {done}/{len(runs)} runs done · "
                f"{clock_text(self.clock() - self.started_at)} elapsed · {self.left()}")

    def run_lines(self) -> list[str]:
        out = []
        for name, (run, _, since, _, queued) in list(self.running.items()):  # threads start runs
            p = read_progress(run.run_dir) if _fresh(run, since) else None
            if p is None and queued:
                continue
            what = "starting" if p is None else f"step {p['step']}/{p['steps'] or run.steps}" + (
                f", val acc {p['val_acc']:.4f}" if p["val_acc"] is not None else "")
            out.append(f"  {name}: {what}")
        return out

    def __rich_console__(self, console: Console, options) -> Iterator[Text]:
        # a terminal redraws the lines in place, one row each; a log keeps them whole
        for x in [self.line(), *self.run_lines()]:
            yield Text(x, no_wrap=console.is_terminal, overflow="ellipsis" if console.is_terminal else "fold")

    @contextmanager
    def live(self, console: Console) -> Iterator[None]:
        """The display, redrawn every second on a terminal (once, at the end, elsewhere)."""
        try:
            with Live(self, console=console, refresh_per_second=1, transient=False):
                yield
        finally:
            if not console.is_terminal:  # Live leaves its last line open there: what follows starts a line
                console.line()

    # ---------------- the time left ----------------
    def left(self) -> str:
        left = [r for runs in self.stages.values() for r in runs if not finished(r, run_status(r))]
        if not left:
            return "nothing left to train"
        seconds, missing = self._seconds([[u for u in phase if self._steps_left(u) > 0]
                                          for phase in ordered_phases(left, self.pack)])
        if seconds is None:
            return f"no estimate (no step time measured on this device for {', '.join(missing)})"
        if self.timed:  # as much slower or faster as the runs that finished here were
            seconds *= sum(t for t, _ in self.timed) / sum(e for _, e in self.timed)
        return f"about {clock_text(seconds)} left" + (f", not counting {', '.join(missing)}" if missing else "")

    def _seconds(self, phases: list[list[list[Run]]]) -> tuple[float | None, list[str]]:
        """Wall seconds of what the units of `phases` (one after another) have left, `jobs` at a time,
        and what has no step time."""
        if not any(phases):
            return 0.0, []
        minutes, missing = [], []
        for phase in phases:
            minutes.append([])
            for u in phase:
                each, none = unit_minutes([u], self._device, self._table, steps=self._steps_left)
                minutes[-1] += each
                missing += [m for m in none if m not in missing]
        return (60 * phased_wall(minutes, self.jobs) if any(minutes) else None), missing

    def _unit_seconds(self, unit: list[Run]) -> float | None:
        seconds, missing = self._seconds([[unit]])
        return None if missing else seconds

    @staticmethod
    def _steps_left(unit: list[Run]) -> int:
        """The steps a unit has still to take: all, less those its progress.json says it took."""
        run = unit[0]
        if run_status(run) in DONE:  # trained (a tuning trial, its test left to the main stage)
            return 0
        p = read_progress(run.run_dir)
        return max(0, run.steps - (p["step"] if p else 0))


def _fresh(run: Run, since: float) -> bool:
    """Whether the run wrote its progress.json since `since` (wall clock): an older one is another
    invocation's."""
    try:
        return RunFolder(run.run_dir).progress_file.stat().st_mtime >= since - 1.0
    except OSError:
        return False
