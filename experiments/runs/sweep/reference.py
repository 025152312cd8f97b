"""Whose runs a table is built from: the user's (results/runs, git-ignored, where every run the suite
trains goes) or the committed reference (results/reference: the small records of the runs behind the
committed tables, with their hardware and commit in each summary.json).

A fresh clone has no runs of its own, so `make tables` builds from the reference; once a user runs an
experiment, its tables are built from their runs, and `git diff results/` compares their reproduction
with ours. `make reference` (developers) copies the records of the user's runs over the reference.

    python -m experiments reference [--experiment NAME ...]
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from modules.files import write_atomic

from experiments.runs.run.lock import SUBMITIT_DIR, refuse_experiment_links
from experiments.runs.run.names import checked_name
from experiments.runs.run.run_folder import CHECKPOINTS, PROGRESS_FILE, TRAIN_INDICES_FILE
from experiments.runs.sweep.shared import shared_entries

RUNS = Path("results/runs")
REFERENCE = Path("results/reference")
# a record is small and plain; checkpoints, event files, logs, locks and drawn probe figures stay behind
RECORD_SUFFIXES = (".json", ".yaml")
LEFT_BEHIND = (TRAIN_INDICES_FILE, PROGRESS_FILE)
LEFT_BEHIND_FOLDERS = (CHECKPOINTS, "probes", "tensorboard", "packed", SUBMITIT_DIR)  # submitit/: a scheduler's files


class NothingFinished(ValueError):
    """An experiment folder with records but nothing its tables can show yet (no finished run, no
    measurement): `make tables` then builds that experiment from the next runs in line."""


def has_records(exp_dir: Path) -> bool:
    """Whether `exp_dir` holds anything the tables read: a run's summary or an experiment record."""
    return exp_dir.is_dir() and (any(exp_dir.glob("*/summary.json")) or any(exp_dir.glob("*.json")))


def experiments_in(root: Path) -> set[str]:
    return {d.name for d in root.iterdir() if has_records(d)} if root.is_dir() else set()


def whose_runs(exp_dir: Path) -> str:
    """The sentence under a table's title that says whose runs it was built from."""
    d = Path(exp_dir)
    if d.parent.resolve() == REFERENCE.resolve():
        target = "make fit-families" if d.name == "fit-families" else f"make exp-{d.name.replace('_', '-')}"
        yours = RUNS / d.name
        started = (f" Your runs in {yours.as_posix()} are not in it: none has finished yet (`make tables` "
                   "builds from them once one has).") if has_records(yours) else ""
        return (f"Built from the committed reference records in {d.as_posix()} (hardware and commit below). "
                f"`{target}` runs your own into {yours.as_posix()}; the tables are then built from "
                f"yours, and `git diff results/` compares them with ours.{started}")
    return f"Built from the runs in {d.as_posix()}."


def whose(exp_dir: Path) -> str:
    """Two words for a table cell: whose runs a number came from."""
    return "reference runs" if Path(exp_dir).parent.resolve() == REFERENCE.resolve() else "your runs"


def refresh(name: str, runs: Path = RUNS, reference: Path = REFERENCE) -> int:
    """Replaces reference/<name> with the records of runs/<name>, and copies the records of the
    other experiments' runs it shares; returns how many files it copied. Any symbolic link in a
    folder copied from or into is refused before anything is removed: a record behind a link would
    commit the contents of whatever it points at, and a copy through one would write there."""
    source, target = runs / checked_name("experiment", name), reference / name
    if not has_records(source):
        raise ValueError(f"experiment {name!r} has no run records in {source.as_posix()}: allowed "
                         f"{', '.join(sorted(experiments_in(runs))) or 'none (run an experiment first)'}")
    # the other experiments' runs it reads (shared.py): theirs, kept beside them
    pairs = [(source, target), *((runs / e, reference / e) for e in shared_entries(source))]
    for folder in (f for pair in pairs for f in pair):
        refuse_experiment_links(folder)
    shutil.rmtree(target, ignore_errors=True)  # a run no longer among the user's is no longer ours either
    return sum(_copy_records(s, t) for s, t in pairs)


def _copy_records(source: Path, target: Path) -> int:
    files = [f for f in sorted(source.rglob("*")) if f.is_file() and f.suffix in RECORD_SUFFIXES
             and f.name not in LEFT_BEHIND
             and not set(f.relative_to(source).parts[:-1]) & set(LEFT_BEHIND_FOLDERS)
             and not _through_link(source, f)]  # a link's target is not a record of ours
    for f in files:
        (target / f.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target / f.relative_to(source), f.read_bytes())
    return len(files)


def _through_link(source: Path, f: Path) -> bool:
    """Whether `f`, or a folder between `source` and it, is a symbolic link."""
    return any(p.is_symlink() for p in (f, *f.parents) if p != source and source in p.parents)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments reference", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", nargs="+", help="experiments to refresh (default: every one with runs)")
    a = p.parse_args(argv)
    names = a.experiment or sorted(experiments_in(RUNS))
    if not names:
        raise ValueError(f"no run records in {RUNS.as_posix()}: run an experiment first (make exp-datascale)")
    for name in names:
        print(f"{REFERENCE.as_posix()}/{name}: {refresh(name)} records from {RUNS.as_posix()}/{name}")
    return 0
