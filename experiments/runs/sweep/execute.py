"""How one run, or one packed group, runs: as a `python -m experiments fit` (or `fit_packed`)
process with its output in the run folder's log.txt, and what its status is afterwards.

Shared by every launcher: the local sweep's thread pool (sweep.run_sweep) and the submitit array
tasks (slurm.RunTask) call `execute`/`execute_group` around `launch`/`launch_packed`. A run is
final once done or diverged; a failed run is retried by the next invocation. Runs are ordered and
packed by their cost (run_cost, pack_groups), DeiT students after every teacher (phases).
"""
from __future__ import annotations

import functools
import os
import queue
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Callable

import yaml

from modules.budgets import distils, fit_order
from modules.files import open_in_place, write_json

from experiments.runs.run.interruption import SIGNALS, Interrupted, deferred
from experiments.runs.run.run_folder import RunFolder
from experiments.runs.run.summary import Summary
from experiments.runs.sweep.spec import Run
from experiments.runs.sweep.shared import located

FINAL = ("done", "diverged")  # not run again; failed runs are retried
TUNED = ("fitted", "done")    # a tuning trial is complete once trained (its test, if any, comes from the main stage)


def finished(run: Run, status: str | None) -> bool:
    return status == "diverged" or status in (TUNED if run.stage == "tune" else ("done",))


def run_status(run: Run) -> str | None:
    return RunFolder(run.run_dir).status()


RUNNING: set[subprocess.Popen] = set()  # the run processes started here and not yet ended (a requeued task stops them)
# the signal that stops this sweep (stop_runs; no run process starts after it) and the runs it stopped
_STOP: dict = {"signum": None, "runs": []}
# how a run process stopped by SIGINT or SIGTERM ends: by the signal (interruption.end_process), or 128 + it
INTERRUPTED_EXITS = {e for s in SIGNALS for e in (-s, 128 + s)}


def stop_runs(signum: int) -> None:
    """Ctrl-C or SIGTERM to a sweep (interruption.deferred): every run process gets the signal (a
    Ctrl-C in the terminal has reached them already; the second one is ignored) and records itself as
    interrupted; no new one starts. It runs in a signal handler: no lock (the thread it interrupts
    may hold it), and a process starting meanwhile sees the stop once started (_run_logged)."""
    _STOP["signum"] = signum
    for proc in list(RUNNING):  # copied at once under the GIL: a thread may add one meanwhile
        proc.send_signal(signum)


def stopping() -> bool:
    return _STOP["signum"] is not None


@contextmanager
def stoppable():
    """The block's run processes stop on Ctrl-C or SIGTERM, each recording itself; Interrupted,
    naming the runs it stopped, is raised once they have ended (interruption.deferred)."""
    _STOP.update(signum=None, runs=[])
    try:
        with deferred(stop_runs):
            yield
    except Interrupted as stop:
        names = _STOP["runs"]
        if names:
            stop.what = (f"{len(names)} run(s) stopped and recorded as interrupted ({', '.join(names[:3])}"
                         + (f" and {len(names) - 3} more" if len(names) > 3 else "") + ")")
        raise


def visible_gpus() -> list[str]:
    """The GPUs this process sees, as a process it starts names them in CUDA_VISIBLE_DEVICES: the
    entries of its own CUDA_VISIBLE_DEVICES where that is set, else their indices."""
    import torch
    count = torch.cuda.device_count()
    listed = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    return listed[:count] if listed else [str(i) for i in range(count)]


def run_hardware(jobs: int) -> str:
    """This machine as each of `jobs` run processes at a time records it (provenance.hardware): one
    GPU where several run side by side (Workers), every GPU where one runs."""
    from experiments.runs.run.provenance import hardware
    return hardware(gpus=1 if jobs > 1 and visible_gpus() else None)


def gpu_sharing(jobs: int) -> str:
    """How `jobs` run processes at a time share this machine's GPUs, for the dry run's estimate."""
    gpus = len(visible_gpus()) if jobs > 1 else 0
    return "" if not gpus else ", one GPU each" if jobs <= gpus else f" on {gpus} GPUs"


class Workers:
    """What each of `jobs` run processes at a time gets: cpu_count / jobs threads and, on a machine
    with GPUs, one GPU that it alone sees (CUDA_VISIBLE_DEVICES), taken from a pool as it starts and
    given back as it ends: one per GPU, or round robin when the jobs outnumber the GPUs. One job at a
    time keeps the environment as it is (every thread; every GPU)."""

    def __init__(self, jobs: int = 1):
        self.threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None
        gpus = visible_gpus() if jobs > 1 else []
        self._free: queue.SimpleQueue[str] | None = queue.SimpleQueue() if gpus else None
        for i in range(jobs if gpus else 0):
            self._free.put(gpus[i % len(gpus)])

    @contextmanager
    def environment(self):
        """The environment of one run process, its GPU held until the block ends."""
        env = dict(os.environ)
        if self.threads:
            env["OMP_NUM_THREADS"] = str(self.threads)
        if self._free is None:
            yield env
            return
        gpu = self._free.get()
        try:
            yield {**env, "CUDA_VISIBLE_DEVICES": gpu}
        finally:
            self._free.put(gpu)


def _run_logged(command: list[str], shown: str, folder: Path, workers: Workers | None) -> int | None:
    """`command` as a process in this one's folder (a relative runs_dir or dataset folder names what
    it names here), its output appended to folder/log.txt; its exit status, or None when the sweep
    is stopping and it was not started."""
    folder.mkdir(parents=True, exist_ok=True)
    if stopping():
        return None
    with (workers or Workers()).environment() as env, open_in_place(folder / "log.txt", append=True) as log:
        log.write(f"\n$ {shown}\n")
        log.flush()
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=child_preexec())
        RUNNING.add(proc)
        if stopping():  # the stop came while it started, maybe before stop_runs could see it
            proc.send_signal(_STOP["signum"])
        try:
            return proc.wait()
        except KeyboardInterrupt as stop:  # raised here (not deferred): the run stops too and records it
            proc.send_signal(getattr(stop, "signum", signal.SIGINT))
            proc.wait()
            raise
        finally:
            RUNNING.discard(proc)


def launch(run: Run, workers: Workers | None = None) -> int:
    """One run as its own process (what a cluster job would run); output appended to log.txt."""
    return _run_logged(run.command(), run.shell(), run.run_dir, workers)


# the model options of a command that change its forward pass (modules.build_model's)
SHAPING_OPTIONS = ("patch_size", "pos_embed", "pool", "window_size", "allow_unshifted")


def flops_per_image(run: Run, shaped: bool = True) -> int | None:
    """Forward FLOPs for one image of the run's model: its family and budget with the model options
    of its command (a patch size, a pooling; without them unless `shaped`) at its dataset's image
    shape, as its summary records them (flops_per_image): what a step's cost grows with."""
    from datamodules.sources import FASHION_MNIST  # the fit command's default dataset
    a = run.args
    given = {a[i][2:]: a[i + 1] for i in range(len(a) - 1) if a[i].startswith("--")}
    options = tuple((k, yaml.safe_load(given[f"model.{k}"])) for k in SHAPING_OPTIONS if shaped and f"model.{k}" in given)
    resize = given.get("data.resize_to")
    return model_flops(run.family, run.budget, given.get("data.dataset", FASHION_MNIST),
                       None if resize in (None, "null") else int(resize), options)


@functools.lru_cache
def model_flops(family: str, budget: str, dataset: str, resize_to: int | None = None, options: tuple = ()) -> int | None:
    """Forward FLOPs for one image of the family at the budget on the dataset's images (resized, with
    the model options given); None where the family's FLOPs cannot be counted (as ImageClassifier.complexity records it)."""
    import torch
    from datamodules.image_classification import ImageClassificationDataModule, fixed_shape
    from modules import build_model, count_flops
    shape = fixed_shape(dataset, resize_to) or ImageClassificationDataModule(dataset, resize_to=resize_to).shape()
    with torch.device("meta"):  # shapes only: no weights, no compute
        model = build_model(family, budget, image_size=shape["image_size"], in_chans=shape["in_chans"],
                            num_classes=shape["num_classes"], **dict(options))
    try:
        return count_flops(model, shape["image_size"], shape["in_chans"])
    except Exception:  # a counter that fails prices nothing, as a fit records flops null
        return None


def run_cost(run: Run) -> float:
    """What ordering runs needs of a run's cost: its steps x its model's forward FLOPs per image.
    A proxy, not a time: Swin and ConvNeXt are slower per FLOP. A family whose FLOPs could not be
    counted costs 0 here (ordered as the cheapest)."""
    return run.steps * (flops_per_image(run) or 0)


def pack_groups(runs: list[Run], size: int) -> list[list[Run]]:
    """Runs that differ only in what packed members may differ in (their seed, lr, augmentation and
    DeiT's teacher: packed_fit.MEMBER_KEYS), in groups of at most `size`, in the order of their first
    run; everything else alone."""
    groups: dict[tuple, list[list[Run]]] = {}
    order: list[list[Run]] = []
    for r in runs:
        open_groups = groups.setdefault(pack_key(r), [])
        if size > 1 and open_groups and len(open_groups[-1]) < size:
            open_groups[-1].append(r)
        else:
            open_groups.append([r])
            order.append(open_groups[-1])
    return order


def pack_key(run: Run) -> tuple:
    """What the runs of one packed group share: their stage and every argument outside MEMBER_KEYS."""
    from experiments.runs.packed.fit import MEMBER_KEYS
    per_member = {"--run_name", *(f"--{k}" for k in MEMBER_KEYS)}
    a = list(run.args)
    return run.stage, tuple(x for i, x in enumerate(a) if x not in per_member and (i == 0 or a[i - 1] not in per_member))


def phase_units(phase: list[Run], pack: int) -> list[list[Run]]:
    """What runs as one process in a phase of runs to do. A run whose training is done (a tuning
    winner: only its test is left) comes first, alone (its `fit` tests it), without packing; with
    pack > 1 it joins the packed group of its configuration (pack_key), which tests it with the
    members it trains (fit_packed trains only the others), so no process only tests. It does not
    count towards `pack` (it trains nothing); with no such group to join, the tested runs of one
    configuration are a group of their own (packed_process)."""
    trained = [r for r in phase if run_status(r) == "fitted"]
    groups = pack_groups([r for r in phase if r not in trained], pack)
    if pack <= 1:
        return [[r] for r in trained] + groups
    for tested in pack_groups(trained, len(trained)):
        home = next((g for g in groups if pack_key(g[0]) == pack_key(tested[0])), None)
        if home is None:
            groups.append(tested)
        else:
            home[:0] = tested
    return groups


def packed_process(unit: list[Run], pack: int) -> bool:
    """Whether a unit runs as a `fit_packed` process: a group, or, packing, a run that is only tested."""
    return len(unit) > 1 or pack > 1 and run_status(unit[0]) == "fitted"


def units_of(runs: list[Run], pack: int) -> list[list[Run]]:
    """What trains as one process: packed groups of up to `pack` runs (pack_groups), or each run alone."""
    return pack_groups(runs, pack) if pack > 1 else [[r] for r in runs]


def _members_file(group: list[Run], log: Path) -> Path:
    """The group's members.json (fit_packed's input), and a line in each member's log.txt saying where
    the group's output goes."""
    from experiments.runs.packed.fit import group_dir
    gdir = group_dir([r.run_dir for r in group])
    gdir.mkdir(parents=True, exist_ok=True)
    members = gdir / "members.json"
    write_json(members, {"members": [list(r.args) for r in group]}, sort_keys=False)
    for r in group:
        r.run_dir.mkdir(parents=True, exist_ok=True)
        with open_in_place(r.run_dir / "log.txt", append=True) as f:
            done = "tested" if run_status(r) == "fitted" else "trained"   # a tuning winner is only tested
            f.write(f"\n{done} packed with {len(group) - 1} other run(s): see {log}\n")
    return members


def launch_packed(group: list[Run], workers: Workers | None = None) -> int:
    """K runs as one `fit_packed` process; its output goes to the group folder's log.txt, and each
    member's log.txt says where."""
    from experiments.runs.packed.fit import group_dir
    gdir = group_dir([r.run_dir for r in group])
    members = _members_file(group, gdir / "log.txt")
    return _run_logged([sys.executable, "-m", "experiments", "fit_packed", str(members)],
                       f"python -m experiments fit_packed {members}", gdir, workers)


def launch_packed_stage(groups: list[list[Run]], workers: Workers | None = None) -> int:
    """Every packed group of a stage in ONE `fit_packed` process, one group after another (no process
    start-up per group; the data decoded once, the compiled step's kernels built once per shape); its
    output goes to <experiment>/packed/log.txt."""
    from experiments.runs.packed.fit import PACKED_DIR
    folder = groups[0][0].run_dir.parent / PACKED_DIR
    files = [str(_members_file(g, folder / "log.txt")) for g in groups]
    return _run_logged([sys.executable, "-m", "experiments", "fit_packed", *files],
                       f"python -m experiments fit_packed {' '.join(files)}", folder, workers)


def execute(run: Run, launcher: Callable[[Run], int | None]) -> str | None:
    """Runs one run unless it is final; returns its status and makes sure summary.json says it."""
    status = run_status(run)
    if finished(run, status):
        return status
    if (problem := teacher_problem(run)) is not None:
        record_failure(run, problem)
        return "failed"
    code = launcher(run)
    if code is None:
        return None  # not started: the sweep is stopping
    status = run_status(run)
    if code == 0 and finished(run, status):
        return status
    if status == "diverged":
        return status
    return _ended(run, status, code, f"exit status {code}; see log.txt")


def weightless_teacher(run: Run) -> Path | None:
    """The folder of a DeiT student's teacher run when it is trained but cannot teach: no best
    checkpoint there (a record without its weights: the reference records keep none); else None."""
    if run.teacher is None:
        return None
    teacher = replace_dir(run, run.teacher)
    if run_status(teacher) in TUNED and not RunFolder(teacher.run_dir).best_checkpoint.is_file():
        return teacher.run_dir
    return None


def weightless_note(folder: Path) -> str:
    """What to do about a weightless teacher: the sweep does not retrain over a finished run."""
    return f"it has a record but no best checkpoint: move {folder} aside to retrain it"


def needs_teacher(run: Run) -> bool:
    """Whether a run distils (DeiT unless --model.distillation none) and so must have a teacher."""
    args = list(run.args)
    off = "--model.distillation" in args and args[args.index("--model.distillation") + 1] == "none"
    return distils(run.family) and not off


def teacher_problem(run: Run) -> str | None:
    """Why a DeiT student cannot distil from a teacher yet, or None: none planned (its ResNet's
    tuning has not finished), a teacher not trained, or one without its weights."""
    if run.teacher is None:
        return ("no teacher run is planned for it (the ResNet of its subset and seed has no learning rate "
                "chosen yet)" if needs_teacher(run) else None)
    if (folder := weightless_teacher(run)) is not None:
        return f"teacher run {run.teacher}: {weightless_note(folder)}"
    if run_status(replace_dir(run, run.teacher)) not in TUNED:
        return f"teacher run {run.teacher} is not trained"
    return None


def _ended(run: Run, status: str | None, code: int, failure: str) -> str:
    """The status of a run whose process ended unfinished: interrupted when the sweep is stopping
    or the process was (by SIGINT or SIGTERM: recorded so, unless the run recorded it, or is trained
    with only its test left), else failed."""
    if not stopping() and code not in INTERRUPTED_EXITS:
        record_failure(run, failure)
        return "failed"
    if status not in ("interrupted", "fitted"):
        _record(run, "interrupted")
    if stopping():
        _STOP["runs"].append(run.name)
    return "interrupted"


def replace_dir(run: Run, name: str) -> Run:
    """The run named `name` by run's experiment: a folder beside it, or <experiment>/<folder> (shared.py)."""
    return replace(run, name=name.rsplit("/", 1)[-1], run_dir=located(run.run_dir.parent, name), teacher=None)


def record_failure(run: Run, reason: str) -> None:
    """The run's summary says failed, with the error its own fit recorded or else `reason`."""
    s = RunFolder(run.run_dir).summary()
    _record(run, "failed", error=s.error if s is not None and s.status == "failed" and s.error else reason)


def _record(run: Run, status: str, error: str | None = None) -> None:
    """summary.json says `status` (and `error`), the rest of what the run recorded kept."""
    s = RunFolder(run.run_dir).summary() or Summary(experiment=run.run_dir.parent.name, run=run.name, family=run.family,
                                                    fraction=run.fraction, seed=run.seed, variant=run.variant)
    s = s.without("error").updated(status=status, **({"error": error} if error else {}))
    run.run_dir.mkdir(parents=True, exist_ok=True)
    RunFolder(run.run_dir).write_summary(s)


def execute_group(group: list[Run], launcher: Callable[[list[Run]], int]) -> dict[str, str]:
    """Runs a packed group (its unfinished members); returns each member's status, as execute does."""
    return execute_groups([group], lambda groups: launcher(groups[0]))


def execute_groups(groups: list[list[Run]], launcher: Callable[[list[list[Run]]], int],
                   reported: Callable[[list[Run], dict[str, str]], None] | None = None) -> dict[str, str]:
    """Runs packed groups (their unfinished members) by one call of `launcher`; returns each member's
    status, as execute does. `reported(group, statuses)` is called for each group as soon as its
    members are final (watched while the launcher runs), and for the rest when it returns."""
    todo, teachers = [], set()
    for group in groups:
        waiting = [r for r in group if not finished(r, run_status(r))]
        for r in waiting:
            if (problem := teacher_problem(r)) is not None:
                record_failure(r, problem)
                teachers.add(r.name)
        todo.append([r for r in waiting if r.name not in teachers])
    done: set[int] = set()

    def statuses(i: int, code: int | None) -> dict[str, str] | None:
        out = {}
        for r in groups[i]:
            status = run_status(r)
            if r in todo[i] and not finished(r, status) and status != "diverged":
                if code is None:
                    return None   # still training
                status = _ended(r, status, code, f"packed group exit status {code}; see log.txt")
            out[r.name] = status if r.name not in teachers else "failed"
        return out

    def watch(stop: threading.Event) -> None:
        while not stop.wait(WATCH_EVERY_S):
            for i in range(len(groups)):
                s = None if i in done else statuses(i, None)
                if s is not None:
                    done.add(i)
                    reported(groups[i], s)
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(stop,), daemon=True) if reported and len(groups) > 1 else None
    if watcher:
        watcher.start()
    try:
        code = launcher([g for g in todo if g]) if any(todo) else 0
    finally:
        stop.set()
        if watcher:
            watcher.join()
    out = {}
    for i in range(len(groups)):
        # not started (the sweep is stopping): nothing to say about its runs
        s = statuses(i, code) if code is not None else {r.name: None for r in groups[i]}
        out.update(s)
        if reported and i not in done:
            reported(groups[i], s)
    return out


WATCH_EVERY_S = 5.0   # how often a stage process's groups are checked for members that ended


def phases(todo: list[Run], pack: int) -> list[list[list[Run]]]:
    """The units (a run, or a packed group: phase_units) of the runs to do, in two phases: every run
    without a teacher, then the DeiT students (after every teacher)."""
    return [phase_units(phase, pack) for phase in ([r for r in todo if r.teacher is None],
                                                   [r for r in todo if r.teacher is not None])]


def queue_order(units: list[list[Run]], phase: list[Run]) -> list[list[Run]]:
    """A phase's units in the order its workers take them when several train at a time: family by
    family (their order in the phase), within a family the costliest first, so that no long run
    starts last while the other workers idle (a tested-only run costs nothing)."""
    rank = {f: i for i, f in enumerate(dict.fromkeys(r.family for r in phase))}
    return sorted(units, key=lambda u: (rank[u[0].family], -sum(run_cost(r) for r in u if run_status(r) != "fitted")))


def family_phases(todo: list[Run]) -> list[list[Run]]:
    """The runs to do in family order, in two phases: every family but the DeiT students, the
    teachers' family first and the others in their order of appearance, then the students (after
    every teacher). A sweep stopped early leaves whole families to read against the ResNet, not
    cells scattered over every family; within a phase a worker that frees takes the next run in
    that order (no worker idles at a family's end: at most jobs - 1 runs of the next family start
    before a family is done), and one process can train all of a phase's packed groups
    (launch_packed_stage) when one run trains at a time."""
    families = [[r for r in todo if r.family == f] for f in fit_order(list(dict.fromkeys(r.family for r in todo)))]
    return [p for p in ([r for f in families if not distils(f[0].family) for r in f],
                        [r for f in families if distils(f[0].family) for r in f]) if p]


def child_preexec() -> Callable | None:
    """Inside a submitit task the run ignores the warning signal (USR2), which SLURM sends to every
    process of the step: the task stops and requeues it (RunTask.checkpoint)."""
    if not os.environ.get("SUBMITIT_EXECUTOR"):
        return None
    return lambda: signal.signal(signal.SIGUSR2, signal.SIG_IGN)
