"""One pool of runs: a configuration is trained once, whichever experiment asks for it.

A run's folder is <runs_dir>/<experiment>/<readable name>_<config hash>, and the name and hash
follow from its whole configuration (identity.py). So when exp-distill plans the ResNet teacher
that exp-datascale already trained (same family, subset, seed, lr and schedule), the same folder
name exists under datascale/: the planned run takes that folder instead of training a second copy,
and its command names that experiment and folder, so a resumed or retried fit writes there too.
A spec may name the same configuration differently: exp-distill's hard/resnet student is
exp-datascale's DeiT (distilled hard from the ResNet of its subset and seed by default), named with
its variant. The hash is of the whole configuration, so a finished run of the same hash whose
readable name is this one's without its variant is the same run, and is taken too (one way only:
exp-datascale does not take exp-distill's students, whose records carry their variant).

An experiment's record names its own runs by folder name and a shared one as
"<experiment>/<folder>" (`entry`); the tables read both through `located`.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from experiments.runs.run.identity import HASH_CHARS, RUN_FOLDER, config_hash
from experiments.runs.run.names import checked_name, inside
from experiments.runs.run.run_folder import SUMMARY_FILE, RunFolder
from modules.files import parse_json


def home(run_dir: Path) -> Path:
    """Where the run of `run_dir` (<runs_dir>/<experiment>/<folder>) lives: its own folder once it
    exists, else the same folder of another experiment that holds a run (finished ones first, then
    a finished run of the same configuration under its name without the variant), else its own (it
    trains there)."""
    if run_dir.exists():
        return run_dir
    started = [d for d in sorted(run_dir.parent.parent.glob(f"*/{run_dir.name}")) if RunFolder(d).is_run()]
    done = [d for d in started if RunFolder(d).status() == "done"]
    return (done or same_configuration(run_dir) or started or [run_dir])[0]


def same_configuration(run_dir: Path) -> list[Path]:
    """Finished runs of other experiments that hold `run_dir`'s configuration under its readable name
    without the variant (see the module's docstring): the same hash, an identity.json that hashes to
    it, and a summary that says done. Only finished ones: a tuning trial another experiment did not
    choose is fitted, never tested, and testing it there would add it to that experiment's tables."""
    if not RUN_FOLDER.fullmatch(run_dir.name):
        return []
    root = run_dir.parent.parent
    readable, digest = run_dir.name[:-(HASH_CHARS + 1)], run_dir.name[-HASH_CHARS:]
    out = []
    for d in sorted(root.glob(f"*/*_{digest}")):
        if d.parent == run_dir.parent or not readable.startswith(d.name[:-(HASH_CHARS + 1)] + "_"):
            continue
        try:
            inside(root, d)
        except (OSError, RuntimeError, ValueError):  # outside the runs folder, or a link that loops
            continue
        ident = RunFolder(d).identity()
        if ident is not None and config_hash(ident) == digest and RunFolder(d).status() == "done":
            out.append(d)
    return out


def share(run):
    """`run` (spec.Run) moved to its home; its command's --experiment names the folder's experiment
    and its --run_name the folder's readable name, so that a fit of it writes there."""
    where = home(run.run_dir)
    if where == run.run_dir:
        return run
    args = list(run.args)
    args[args.index("--experiment") + 1] = where.parent.name
    if where.name != run.run_dir.name:
        args[args.index("--run_name") + 1] = where.name[:-(HASH_CHARS + 1)]
    return replace(run, run_dir=where, args=tuple(args))


def entry(run_dir: Path, experiment: str) -> str:
    """How `experiment`'s records name the run in `run_dir`: its folder name when it is the
    experiment's own, <experiment>/<folder> when it lives in another experiment's folder."""
    run_dir = Path(run_dir)
    return run_dir.name if run_dir.parent.name == experiment else f"{run_dir.parent.name}/{run_dir.name}"


def located(exp_dir: Path, name: str) -> Path:
    """The folder of a record's entry (see `entry`); a ValueError for anything else, so a record
    cannot lead a read outside the runs folder."""
    parts = str(name).split("/")
    if len(parts) == 1:
        return Path(exp_dir) / checked_name("run", parts[0])
    if len(parts) != 2:
        raise ValueError(f"run {name!r} in {exp_dir}: allowed a folder name or <experiment>/<folder>")
    root = Path(exp_dir).parent
    return inside(root, root / checked_name("experiment", parts[0]) / checked_name("run", parts[1]))


def shared_entries(exp_dir: Path) -> list[str]:
    """The entries "<experiment>/<folder>" that the records (*.json) of `exp_dir` name, as a key or a
    value anywhere in them, and that hold a run: the other experiments' runs this one reads. A record
    that is not JSON names none (the tables say what is wrong with it when they read it)."""
    exp_dir = Path(exp_dir)
    named = set()
    for path in sorted(exp_dir.glob("*.json")):
        try:
            named |= _texts(parse_json(path.read_text(errors="replace")))
        except (OSError, ValueError):
            continue
    return sorted(f"{d.parent.name}/{d.name}" for d in (s.parent for s in exp_dir.parent.glob(f"*/*/{SUMMARY_FILE}"))
                  if d.parent != exp_dir and f"{d.parent.name}/{d.name}" in named)


def _texts(record) -> set[str]:
    """Every text in a JSON record, its keys included."""
    if isinstance(record, str):
        return {record}
    if isinstance(record, dict):
        return {k for k in record if isinstance(k, str)} | set().union(*map(_texts, record.values()))
    if isinstance(record, list):
        return set().union(*map(_texts, record))
    return set()
