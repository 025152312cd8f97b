"""`python -m experiments sweep`: run an experiment spec, resumably, in two stages.

1. tune: each family trains at every learning rate of the profile's grid, at its tuned_fractions
   (else its smallest and largest fraction; the profile's first seed); the winner on validation
   accuracy is recorded in <runs_dir>/<experiment>/tuning.json. These runs never load the test split.
2. main: every family x fraction x seed x variant at the learning rate chosen at the nearest tuned
   fraction; the best-validation checkpoint is tested. The tuning run that won is the same run
   (same configuration, same folder): only its test is left to do, by its own `fit`, or, packed,
   in the group of its configuration (execute.phase_units).

Run again, the same command skips finished (and diverged) runs, resumes interrupted ones from their
last checkpoint and retries failed ones; one failing run never stops the sweep. A rerun that finds
nothing to train or test changes no record. A second sweep of the same experiment started meanwhile
waits for the first, then finds its runs finished. Each run's output goes to its folder's log.txt;
the terminal shows one line for the sweep and one per run training (runs/progress.py).
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Callable

import torch
from rich.console import Console
from rich.markup import escape

from datamodules import ImageClassificationDataModule
from datamodules.splits import resolve_train_size
from modules.budgets import TEACHER, distils
from modules.files import parse_json, write_json

from experiments.runs.run.identity import plan_key
from experiments.runs.run.convergence import TIE, exact, judged
from experiments.runs.run.lock import hold_experiment
from experiments.runs.run.names import runs_dir_option
from experiments.runs.run.record import session_rows
from experiments.runs.run.run_folder import RunFolder
from experiments.runs.run.summary import Summary
from experiments.runs.sweep.spec import (JOBS_HELP, Run, load_spec, main_runs, nearest_tuned, outside_profile, resolve_axes,
                                         tuned_fractions, tuning_runs, tuning_seed)
from experiments.runs.sweep.cluster import Submitted, add_options, options_from
from experiments.runs.sweep.execute import (FINAL, TUNED, Workers, execute, execute_group, execute_groups, finished, launch,
                                      family_phases, launch_packed, launch_packed_stage, pack_groups, packed_process,
                                      phase_units, phases, queue_order, run_status, stoppable, stopping,
                                      weightless_note, weightless_teacher)
from experiments.runs.sweep.slurm import print_status, regenerate_tables
from experiments.runs.run.tensorboard import write_sweep_view
from experiments.runs.sweep.estimate import DONE, estimate
from experiments.runs.run.interruption import Interrupted
from experiments.runs.sweep.progress import SweepProgress

def run_sweep(runs: list[Run], jobs: int = 1, launcher: Callable[[Run], int] | None = None,
              console: Console | None = None, pack: int = 1,
              packed_launcher: Callable[[list[Run]], int] | None = None, cluster=None,
              progress: SweepProgress | None = None) -> dict[str, str]:
    """Executes every run (teachers before their DeiT students); returns name -> status. With
    pack > 1, runs that differ only in their seed, lr or augmentation (pack_groups) train up to
    `pack` at a time in one process. With a submitit launcher (cluster: slurm.ClusterOptions), each
    phase is one job array (slurm.run_stage). `progress`: the whole sweep's display, of which these
    runs are a stage (by default they are the whole sweep)."""
    console = console or Console()
    if cluster is not None and cluster.submitit:
        from experiments.runs.sweep.slurm import run_stage
        # a continuation job does not submit again what failed in the array before it (its retries are spent)
        todo = [r for r in runs if not finished(r, run_status(r)) and not (cluster.chained and run_status(r) == "failed")]
        results = {r.name: run_status(r) for r in runs if r not in todo}
        console.print(f"{len(runs)} runs: {len(runs) - len(todo)} already finished, {len(todo)} to run")
        if todo:
            results.update(run_stage(runs, phases(todo, pack), cluster, launcher, packed_launcher, console))
        return results
    workers = Workers(jobs)
    # the default launchers: one process per run, per packed group, or (one at a time) per stage
    stage_launcher = launch_packed_stage if launcher is None and packed_launcher is None else None
    launcher = launcher or (lambda r: launch(r, workers))
    packed_launcher = packed_launcher or (lambda g: launch_packed(g, workers))
    results: dict[str, str] = {}
    todo = [r for r in runs if not finished(r, run_status(r))]
    for r in runs:
        if r not in todo:
            results[r.name] = run_status(r)
    console.print(f"{len(runs)} runs: {len(runs) - len(todo)} already finished, {len(todo)} to run")
    stage = runs[0].stage if runs else "sweep"
    progress = progress or SweepProgress([(stage, runs)], jobs=jobs, pack=pack)
    progress.enter(stage)
    # Ctrl-C or SIGTERM: the running runs stop and record themselves, nothing new starts (execute.stoppable)
    with stoppable(), progress.live(console):

        def report(run: Run, status: str | None, seconds: float) -> None:
            progress.ended(run, status)
            if status is None or status == "interrupted" and stopping():
                return  # not started, or stopped with the sweep: its line names them, the display counts them not done
            results[run.name] = status
            s = RunFolder(run.run_dir).summary() or Summary()
            acc = f", test acc {s.test_acc:.4f}" if s.test_acc is not None else ""
            val = f", val acc {s.val_acc_best:.4f}" if run.stage == "tune" and s.val_acc_best else ""
            # of the whole stage (DeiT's tuning trials run after the others': numbered after them)
            total = max(len(progress.stages.get(run.stage) or runs), run.index + 1)
            console.print(escape(f"[{run.stage} {run.index + 1}/{total}] {run.name}: {status} in "
                                 f"{seconds:.0f} s{val}{acc}"))

        def one(unit: list[Run]) -> None:
            if stopping():
                return  # nothing starts once the sweep is stopping
            start = time.perf_counter()
            progress.started(unit)
            if not packed_process(unit, pack):
                statuses = {unit[0].name: execute(unit[0], launcher)}
            else:
                statuses = execute_group(unit, packed_launcher)
            for r in unit:
                report(r, statuses[r.name], time.perf_counter() - start)

        # family by family, students after every teacher: a stopped sweep leaves whole families
        for phase in family_phases(todo):
            units = phase_units(phase, pack)
            groups = [u for u in units if packed_process(u, pack)]
            if jobs <= 1 and len(groups) > 1 and stage_launcher is not None:
                # every packed group of the phase in one process (execute.launch_packed_stage), each
                # reported as it ends; the runs alone before them
                for u in units:
                    if u not in groups:
                        one(u)
                if not stopping():
                    progress.started([r for g in groups for r in g], queued=True)
                    start = time.perf_counter()
                    execute_groups(groups, stage_launcher, lambda g, statuses: [
                        report(r, statuses[r.name], time.perf_counter() - start) for r in g])
            elif jobs <= 1:
                for u in units:
                    one(u)
            else:
                with ThreadPoolExecutor(jobs) as pool:
                    list(pool.map(one, queue_order(units, phase)))
    return results


class Launches:
    """A runner's stages through run_sweep, each run's status in `results` and what was really
    launched (trained or tested) in `launched`: an invocation that launched nothing leaves its
    record's wall time as it is. A dry run launches nothing."""

    def __init__(self, launcher: Callable[[Run], int], jobs: int, dry_run: bool = False, cluster=None):
        self.launcher, self.jobs, self.dry_run, self.cluster = launcher, jobs, dry_run, cluster
        self.results: dict[str, str] = {}
        self.launched: list[str] = []

    def __call__(self, runs: list[Run]) -> None:
        if runs and not self.dry_run:
            if self.cluster is not None and self.cluster.submitit:  # the tasks run elsewhere: count here
                self.launched += [r.name for r in runs if not finished(r, run_status(r))]
                self.results.update(run_sweep(runs, jobs=self.jobs, launcher=self.launcher, cluster=self.cluster))
            else:
                self.results.update(run_sweep(runs, jobs=self.jobs, launcher=self._counted))

    def _counted(self, run: Run) -> int:
        self.launched.append(run.name)
        return self.launcher(run)


@contextmanager
def launching(exp_dir: Path, launcher: Callable[[Run], int], jobs: int, dry_run: bool, cluster=None):
    """A runner's Launches under the experiment's lock, so that a second invocation finds the
    first one's runs finished; a dry run takes no lock and writes nothing, not even the lock file."""
    with nullcontext() if dry_run else hold_experiment(exp_dir):
        yield Launches(launcher, jobs, dry_run, cluster)


def choose_lrs(trials: list[Run]) -> tuple[dict, list[dict]]:
    """(family, variant, fraction) -> the chosen lr among finished trials, and a record of every
    trial. Only validation is read. The chosen lr is the best validation accuracy's, except that
    trials within TIE of the best cannot be told apart on validation (the plateau rule's tolerance,
    the verdicts' margin for accuracy: convergence.py), so among
    those a plateaued trial is preferred, its number being the one a longer run would keep; then
    the best validation, then the smaller lr. (At 118 images ViT's 1e-3 and 3e-3 reach 0.689 and
    0.691 at 8,000 steps, the second still climbing: the best alone flips with the steps.)"""
    by_key, records = {}, []
    for r in trials:
        s = RunFolder(r.run_dir).summary() or Summary()
        acc = s.val_acc_best if s.status in TUNED else None
        try:  # a record from elsewhere is data: a value of the wrong kind is one line naming it
            if acc is not None and (isinstance(acc, bool) or not isinstance(acc, (int, float)) or not 0 <= acc <= 1):
                raise ValueError(f"val_acc_best={acc!r}: allowed a number from 0 to 1")
            plateaued = (judged(s) or {}).get("plateaued")
        except (TypeError, ValueError) as e:
            raise ValueError(f"{r.run_dir / 'summary.json'}: {e}; delete that run folder to train it again") from None
        records.append({"family": r.family, "variant": r.variant, "fraction": r.fraction, "seed": r.seed, "lr": r.lr,
                        "train_size": s.train_size, "val_size": s.val_size, "status": s.status,
                        "val_acc_best": acc, "plateaued": plateaued, "run": r.entry})
        if acc is not None:
            by_key.setdefault((r.family, r.variant, r.fraction), []).append((acc, bool(plateaued), r.lr))
    return {k: tie_broken(v) for k, v in by_key.items()}, records


def tie_broken(trials: list[tuple[float, bool, float]]) -> float:
    """The lr of [(val_acc_best, plateaued, lr), ...] that choose_lrs takes."""
    best = max(acc for acc, _, _ in trials)
    tied = [t for t in trials if exact(best - t[0]) <= TIE]  # in counts of images: float32 decides no tie
    return max(tied, key=lambda t: (t[1], t[0], -t[2]))[2]


class TuningIncomplete(ValueError):
    pass


def lr_lookup(choices: dict, axes: dict):
    def lr_of(family: str, variant: str, fraction: float) -> float:
        t = nearest_tuned(fraction, axes)
        if (family, variant, t) not in choices:
            raise TuningIncomplete(f"no learning rate chosen for {family} ({variant}) at fraction {t:g}: every tuning "
                                   "trial failed or has not run (see the tuning stage's log.txt files)")
        return choices[(family, variant, t)]
    return lr_of


def tuning_stage(spec: dict, axes: dict, runs_dir: Path, pool: int, run=None) -> tuple[dict, list[Run]]:
    """Runs (or, with run=None, only lists) the tuning trials: the teachers' and other families'
    first, then DeiT's, which distil from the ResNet trained at the ResNet's chosen lr."""
    first = tuning_runs(spec, axes, runs_dir, pool, [f for f in axes["families"] if not distils(f)])
    if run:
        run(first)
    choices, _ = choose_lrs(first)
    trials = list(first)
    students = [f for f in axes["families"] if distils(f)]
    if students:
        # each DeiT trial distils from the ResNet trial at the ResNet's chosen lr (same fraction, seed, variant)
        teacher_dir = {(r.fraction, r.seed, r.variant): r.run_dir for r in first
                       if r.family == TEACHER and choices.get((r.family, r.variant, r.fraction)) == r.lr}
        deit = tuning_runs(spec, axes, runs_dir, pool, students, teacher_dir)
        deit = [replace(r, index=len(first) + i) for i, r in enumerate(deit)]
        if run:
            run(deit)
        trials += deit
        choices, _ = choose_lrs(trials)
    return choices, trials


def write_tuning_record(exp_dir: Path, spec: dict, axes: dict, trials: list[Run], choices: dict,
                        ran: bool = True) -> None:
    """<experiment>/tuning.json: every trial's validation accuracy and the lr each main run uses, over
    every piece of the profile swept so far (merged_tuning). Not rewritten when the stage ran nothing
    (ran=False) and the profile's record has its cells: a trial's status moves on from fitted to done
    when the main stage tests it, which is no news about the tuning."""
    _, records = choose_lrs(trials)
    lr_of = lr_lookup(choices, axes)
    uses = []
    for variant in axes["variants"]:
        for family in axes["families"]:
            for f in axes["fractions"]:
                try:
                    uses.append({"family": family, "variant": variant, "fraction": f, "lr": lr_of(family, variant, f),
                                 "tuned_at": nearest_tuned(f, axes)})
                except TuningIncomplete:
                    pass
    path = exp_dir / "tuning.json"
    try:
        record = parse_json(path.read_text())
    except (OSError, ValueError):
        record = {}
    old = record.get("profiles", {}).get(axes["profile"])
    fresh = {"metric": "val_acc_best", "seed": tuning_seed(axes), "fractions": tuned_fractions(axes),
             "grid": {"model.lr": axes["lrs"]}, "trials": records, "choices": uses}
    if not ran and old is not None and not _new_cells(old, fresh):
        return
    record = {"spec": spec["name"], "profiles": record.get("profiles", {})}
    record["profiles"][axes["profile"]] = merged_tuning(old, fresh) if old else fresh
    exp_dir.mkdir(parents=True, exist_ok=True)
    write_json(path, record)


def _cell(entry: dict) -> tuple:
    return entry.get("family"), entry.get("variant"), entry.get("fraction")


def _new_cells(old: dict, fresh: dict) -> bool:
    """Whether `fresh` has a trial or choice of a (family, variant, fraction) `old` lacks."""
    return any({_cell(e) for e in fresh[k]} - {_cell(e) for e in old.get(k, [])} for k in ("trials", "choices"))


def merged_tuning(old: dict, fresh: dict) -> dict:
    """A profile's tuning record after a sweep of some of its families or fractions (a piece: FAMILIES=,
    FRACTIONS=): `fresh`'s trials and choices replace those of the same (family, variant, fraction),
    the others' stay on record after them; tuned fractions and lrs are those of both."""
    def merge(key: str) -> list[dict]:
        cells = {_cell(e) for e in fresh[key]}
        return [e for e in old.get(key, []) if _cell(e) not in cells] + fresh[key]
    lrs = sorted({*old.get("grid", {}).get("model.lr", []), *fresh["grid"]["model.lr"]})
    return {**fresh, "fractions": sorted({*old.get("fractions", []), *fresh["fractions"]}),
            "grid": {"model.lr": lrs}, "trials": merge("trials"), "choices": merge("choices")}


class AnyLr(dict):
    """Learning-rate choices before tuning, for a dry run's estimate: every (family, variant,
    fraction) gets `lr`. A run's steps do not depend on its lr, so neither does the estimate."""

    def __init__(self, lr: float):
        super().__init__()
        self.lr = lr

    def get(self, key, default=None):
        return self.lr

    def __getitem__(self, key):
        return self.lr

    def __contains__(self, key):
        return True


def whole_profile(runs: list[Run], axes: dict, jobs: int, pack: int = 1) -> None:
    """Prints what the whole profile would take from scratch: its tuning trials and every run it
    plans once they are done (planned with AnyLr, so priced whether or not trained), each
    configuration once. By name, not folder: a DeiT trial listed before its teacher's lr is chosen
    has no teacher in its folder's hash yet, and is the same run as the one planned with its teacher."""
    every = list({r.name: r for r in runs}.values())
    print(f"## the whole profile from scratch ({len(every)} runs, {sum(r.steps for r in every):,} optimisation "
          "steps): " + (estimate(every, jobs, pack=pack).lstrip("; ") or "nothing planned"))


def whole_left(runs: list[Run], jobs: int, pack: int = 1, piece: bool = False) -> str:
    """The dry run's last line: what the planned runs still take; once some have finished it says how
    many, so that what is left is not read as the whole profile's cost (a fresh machine's dry run
    prices all of it); `piece`: the runs are a piece of the profile (FAMILIES=, FRACTIONS=, SEEDS=,
    VARIANTS= or one stage), and it says so."""
    names = {r.name for r in runs}  # a tuning trial is also its stage's main run: one run
    finished = len({r.name for r in runs if run_status(r) in DONE})
    label = f", what is left ({finished} of {len(names)} runs finished)" if finished else ""
    return (f"## {'this piece of the profile' if piece else 'the whole profile'}{label}: "
            + estimate(runs, jobs, pack=pack).lstrip("; "))


def _runnable_families(axes: dict, choices: dict) -> list[str]:
    return [f for f in axes["families"]
            if all((f, r, t) in choices for r in axes["variants"] for t in tuned_fractions(axes))]


def packed_cost(runs: list[Run], pack: int) -> str:
    """', in G packed groups: S group steps' (the steps a packed sweep takes), or '' without packing."""
    if pack <= 1:
        return ""
    groups = pack_groups(runs, pack)
    steps = sum(g[0].steps for g in groups)
    return f", in {len(groups)} packed groups (up to {pack} runs each): {steps:,} group steps"


def print_plan(title: str, runs: list[Run], axes: dict, pack: int = 1, jobs: int | None = None) -> None:
    steps = sum(r.steps for r in runs)
    batches = "/".join(str(b) for b in sorted({r.batch_size for r in runs})) or axes["batch_size"]
    print(f"## {title}: {len(runs)} runs, {steps:,} optimisation steps of {batches} images"
          + packed_cost(runs, pack) + estimate(runs, jobs or axes.get("jobs") or 1, pack=pack))
    for r in runs:
        weightless = weightless_teacher(r)
        after = (f" (after {r.teacher}" + (f"; {weightless_note(weightless)}" if weightless else "") + ")"
                 if r.teacher else "")
        print(f"# {r.index} {r.name} [{run_status(r) or 'new'}]{after}")
        print(r.shell())


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default="datascale", help="an experiment with a spec.yaml under experiments/, or a .yaml path (default datascale)")
    p.add_argument("--profile", default=None, help="profile of the spec (default: gpu where a GPU is present, else cpu)")
    p.add_argument("--families", nargs="+", help="override the profile's families (DeiT brings the ResNet it distils from)")
    p.add_argument("--fractions", nargs="+", type=float,
                   help="override the training fractions, each in (0, 1]; a profile with tuned_fractions still tunes "
                        "there (a piece of its plan), else they are tuned at their smallest and largest")
    p.add_argument("--seeds", nargs="+", type=int, help="override the seeds (tuning keeps the profile's first seed)")
    p.add_argument("--budget", help="override the budget (tiny, small, base)")
    p.add_argument("--dataset", help="override the dataset")
    p.add_argument("--variants", nargs="+", help="override the variants (default, strong)")
    p.add_argument("--lrs", nargs="+", type=float, help="override the learning-rate grid of the tuning stage")
    p.add_argument("--stage", choices=("all", "tune", "main"), default="all",
                   help="all (default): tune, then the main runs; tune or main: that stage only")
    p.add_argument("--runs_dir", default="results/runs", type=runs_dir_option,
                   help="where run folders go (default results/runs)")
    p.add_argument("--jobs", type=int, default=None,
                   help=f"runs (or packed groups) at a time, each with cpu_count / jobs threads (default: {JOBS_HELP})")
    p.add_argument("--pack", type=int, default=None,
                   help="train up to this many runs that differ only in their seed, lr or augmentation in one "
                        "process, packed (modules/packed.py; default: the profile's pack, else 1 = each run alone)")
    p.add_argument("--dry_run", action="store_true", help="print each run's exact command and status (the main stage's once its lr tuning is done; "
                        "before that their count and estimate); run nothing")
    p.add_argument("--only", type=int, nargs="+",
                   help="with --stage main: run only these run indices")
    add_options(p)

    def one_line(message: str):  # instead of argparse's usage text and exit
        raise ValueError(f"{message} (python -m experiments sweep --help lists the options)")
    p.error = one_line
    a = p.parse_args(argv)
    if a.jobs is not None and a.jobs < 1:
        raise ValueError(f"--jobs {a.jobs}: allowed integers >= 1")
    if a.pack is not None and a.pack < 1:
        raise ValueError(f"--pack {a.pack}: allowed integers >= 1 (1 = every run alone)")
    if a.only and a.stage != "main":
        raise ValueError(f"--only with --stage {a.stage}: allowed with --stage main only (run --stage tune first)")
    existing = next(d for d in (Path(a.runs_dir).absolute(), *Path(a.runs_dir).absolute().parents) if d.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):  # before the dataset is loaded
        raise ValueError(f"cannot write to runs_dir {a.runs_dir!r}: {str(existing)!r} is "
                         + ("not a folder" if not existing.is_dir() else "not writable"))
    spec = load_spec(a.spec)
    profile = a.profile or ("gpu" if torch.cuda.is_available() else "cpu")
    axes = resolve_axes(spec, profile, families=a.families, fractions=a.fractions, seeds=a.seeds,
                        budget=a.budget, dataset=a.dataset, variants=a.variants, lrs=a.lrs)
    if (note := outside_profile(spec, profile, a.families)) is not None:
        print(note)
    runs_dir, exp_dir = Path(a.runs_dir), Path(a.runs_dir) / spec["name"]
    pack = a.pack or axes["pack"]
    jobs = a.jobs or axes["jobs"]
    cluster = options_from(a, spec["profiles"][profile].get("cluster"), "sweep", argv, jobs)
    pool = len(ImageClassificationDataModule(axes["dataset"], val_size=axes["val_size"])._splits["pool"])
    if a.dry_run or a.status:
        stages, waiting_note = [], []
        choices, trials = tuning_stage(spec, axes, runs_dir, pool)
        if a.stage != "main":
            stages.append(("tune", trials))
            if not a.status:
                print_plan("tuning stage", trials, axes, pack, jobs)
        if a.stage != "tune":
            families = _runnable_families(axes, choices)
            if families:
                planned = main_runs(spec, {**axes, "families": families}, runs_dir, pool, lr_lookup(choices, axes))
                stages.append(("main", planned))
                if not a.status:
                    print_plan("main stage" + ("" if families == axes["families"] else f" ({', '.join(families)})"),
                               planned, axes, pack, jobs)
            waiting = [f for f in axes["families"] if f not in families]
            if waiting and a.status:
                waiting_note.append(f"main stage of {', '.join(waiting)}: listed once their tuning is done")
            elif waiting:
                # the steps do not depend on the learning rate: the stage's cost is known before tuning
                pending = main_runs(spec, {**axes, "families": waiting}, runs_dir, pool, lambda *key: axes["lrs"][0])
                tuned = [r for r in pending if r.seed == tuning_seed(axes) and r.fraction in tuned_fractions(axes)]
                new = sum(r.steps for r in pending if r not in tuned)
                rest = [r for r in pending if r not in tuned]
                stages.append(("main, not yet planned", rest))
                trials = "1 of them a tuning trial" if len(tuned) == 1 else f"{len(tuned)} of them tuning trials"
                print(f"## main stage of {', '.join(waiting)}: {len(pending)} runs ({trials}, then only tested), "
                      f"{new:,} more optimisation steps"
                      + packed_cost(rest, pack) + estimate(rest, jobs, pack=pack)
                      + "; their commands are known once their tuning is done")
        if a.status:
            return print_status([s for s in stages if s[0] != "main, not yet planned"], waiting_note, exp_dir)
        piece = any((a.families, a.fractions, a.seeds, a.variants)) or a.stage != "all"
        print(whole_left([r for _, runs in stages for r in runs], jobs, pack, piece=piece))
        return 0
    # every planned run's options parsed before the experiment's folder, lock or curves are made: a spec
    # whose variant_args hold a bad value (or name code outside import_policy.py) leaves nothing behind
    planned_stages(spec, axes, runs_dir, pool, a.stage)
    try:
        with hold_experiment(exp_dir):
            code = run_stages(a, spec, axes, runs_dir, pool, jobs, pack, cluster)
    except Submitted as e:
        print(e)
        return 0
    regenerate_tables(cluster, spec["name"], runs_dir)
    return code


def planned_stages(spec: dict, axes: dict, runs_dir: Path, pool: int, stage: str) -> list[tuple[str, list[Run]]]:
    """The stages `stage` runs ("all", "tune" or "main") and their runs as planned now, for the
    display: a family not tuned yet has its main runs at the grid's first lr (their steps, all the
    display needs, do not depend on it)."""
    choices, trials = tuning_stage(spec, axes, runs_dir, pool)

    def lr_of(family: str, variant: str, fraction: float) -> float:
        return choices.get((family, variant, nearest_tuned(fraction, axes)), axes["lrs"][0])
    return ([("tune", trials)] if stage != "main" else []) + \
        ([("main", main_runs(spec, axes, runs_dir, pool, lr_of))] if stage != "tune" else [])


def run_stages(a: argparse.Namespace, spec: dict, axes: dict, runs_dir: Path, pool: int, jobs: int, pack: int,
               cluster=None) -> int:
    """Runs the stages of `a.stage`; records tuning.json and sweep.json when it trained or tested something."""
    exp_dir, profile = runs_dir / spec["name"], axes["profile"]
    start = time.perf_counter()
    results: dict[str, str] = {}
    ran: list[Run] = []  # what this invocation trains or tests: only that is news for the records
    sizes = [resolve_train_size(f, None, pool) for f in axes["fractions"]]
    tested = a.stage != "tune"
    write_sweep_view(exp_dir, sizes, [], tested, keep_existing=True)  # the curves' layout while runs train

    progress = SweepProgress(planned_stages(spec, axes, runs_dir, pool, a.stage), jobs=jobs, pack=pack)

    def run(runs: list[Run]) -> None:
        ran.extend(r for r in runs if not finished(r, run_status(r)))
        try:
            results.update(run_sweep(runs, jobs=jobs, pack=pack, cluster=cluster, progress=progress))
        except Interrupted:  # HParams then has its columns (identity, val/acc_best, test/acc) over the runs so far
            write_sweep_view(exp_dir, sizes, session_rows(progress.run_dirs()), tested)
            raise
    if a.stage != "main":
        choices, trials = tuning_stage(spec, axes, runs_dir, pool, run=run)
        write_tuning_record(exp_dir, spec, axes, trials, choices, ran=bool(ran))
    else:
        choices, trials = tuning_stage(spec, axes, runs_dir, pool)
    if a.stage != "tune":
        families = _runnable_families(axes, choices)
        for f in axes["families"]:
            if f not in families:
                print(f"{f}: no main runs: no learning rate was chosen for it (its tuning trials did not finish)")
                results[f"{f} (main stage)"] = "failed"
        runs = main_runs(spec, {**axes, "families": families}, runs_dir, pool, lr_lookup(choices, axes)) \
            if families else []
        # the tables show these runs, not those of an earlier choice: run name without its lr -> folder
        plan = {plan_key(r.name): r.entry for r in runs}
        if a.only:
            bad = [i for i in a.only if not 0 <= i < len(runs)]
            if bad:
                raise ValueError(f"--only {bad[0]}: allowed run indices 0..{len(runs) - 1}")
            runs = [runs[i] for i in a.only]
        if runs:
            progress.plan("main", runs)
            run(runs)
    else:
        runs = []
    # the hparams table over every run of the plan (a tuning winner is also a main run: once)
    write_sweep_view(exp_dir, sizes, session_rows(list(dict.fromkeys(r.run_dir for r in [*trials, *runs]))), tested)
    wall = time.perf_counter() - start
    counts = {s: list(results.values()).count(s) for s in sorted(set(results.values()))}
    print(f"sweep {spec['name']} ({profile}, stage {a.stage}): {len(results)} runs in {wall:.0f} s: "
          + ", ".join(f"{n} {s}" for s, n in counts.items()))
    code = 0 if all(s in FINAL + TUNED for s in results.values()) else 1
    # per profile: the axes asked for and, for a whole sweep, its wall time (read by the tables)
    sweep_file = exp_dir / "sweep.json"
    record = parse_json(sweep_file.read_text()) if sweep_file.exists() else {}
    if not ran and profile in record.get("profiles", {}):
        return code  # found everything finished: the record (the last wall time that trained) stays
    record = {"spec": spec["name"], "profiles": record.get("profiles", {})}
    previous = record["profiles"].get(profile, {})
    record["profiles"][profile] = {**axes, "pool_size": pool,
                                   "sample_efficiency_accuracy": spec.get("sample_efficiency_accuracy")}
    plan = {**previous.get("main_runs", {}), **(plan if a.stage != "tune" else {})}  # overrides plan a subset
    if plan:
        record["profiles"][profile]["main_runs"] = dict(sorted(plan.items()))
    if a.stage == "all" and not a.only and ran:
        record["profiles"][profile]["last_invocation"] = {"wall_time_s": round(wall), "runs": len(results),
                                                         "trained": len(ran), "statuses": counts, "jobs": jobs,
                                                         "pack": pack}
    elif previous.get("last_invocation"):
        record["profiles"][profile]["last_invocation"] = previous["last_invocation"]
    exp_dir.mkdir(parents=True, exist_ok=True)
    write_json(sweep_file, record, sort_keys=False)
    return code
