"""`python -m experiments tables`: results/<experiment>.{csv,md,png} regenerated from run folders alone.

Each experiment's tables are made by its own package (experiments/<experiment>/tables.py:
make_tables); an experiment without one (fit-families, a spec of your own run by `sweep`) gets the
sweep's table, which is exp-datascale's (experiments/datascale/tables.py). The run folders are yours
in results/runs where you have finished runs of the experiment, else the committed results/reference;
each table's first lines say which. results/step_times.csv (runs/estimate.py: what the dry runs
estimate from) is rebuilt from the reference's runs, results/runs/step_times.csv from yours. With
--readme, the README's Findings block is rebuilt from every experiment's `findings`
(report/findings.py), in the order their specs declare (`order` in experiments/<name>/spec.yaml).
With --experiment, only those experiments' reports, Findings rows and rows of runtimes.md change:
every other row is kept as it was, and the step times (a measure over whole runs folders) are left
to a call without --experiment.
Records are read as data (report/records.py): a run whose summary.json or identity.json is not what
the suite writes is left out, with one line on stderr and "runs left out: <run> (<why>)" in every
report built from it; the others are tabled as usual.
"""
from __future__ import annotations

import argparse
import importlib
import re
import sys
from dataclasses import replace
from pathlib import Path

from experiments.report.findings import Finding, kept_findings, render
from experiments.report.table_format import write_csv
from experiments.report import runtimes
from experiments.report.readme import read_block, update_block
from experiments.report.records import LeftOut, read_record, read_runs
from experiments.runs.sweep import reference
from experiments.runs.sweep.estimate import COLUMNS, STEP_TIMES, measured
from experiments.runs.run.lock import refuse_experiment_links
from experiments.runs.run.names import checked_name
from experiments.runs.sweep.reference import NothingFinished, experiments_in, has_records
from experiments.runs.sweep.spec import declared, spec_path

README = Path("README.md")  # its block between <!-- tables:findings --> and <!-- /tables:findings --> is regenerated
SWEEP_TABLES = "datascale"  # whose make_tables serves every experiment the sweep runs


def own_tables(name: str):
    """experiments/<name>/tables.py, or None for an experiment without one."""
    return importlib.import_module(f"experiments.{name}.tables") if (spec_path(name).parent / "tables.py").is_file() \
        else None


def tables_of(name: str):
    """make_tables of experiments/<name>/tables.py, else the sweep's."""
    return (own_tables(name) or importlib.import_module(f"experiments.{SWEEP_TABLES}.tables")).make_tables


def findings_order() -> list[str]:
    """The experiments whose tables give Findings rows, in the order their specs declare."""
    return [d.name for d in declared() if hasattr(own_tables(d.name), "findings")]


def findings_block(roots: list[Path], order: list[str], only: list[str] | None = None, kept: str = "") -> str:
    """The findings of the experiments in `order` as one markdown table, and the runs they could not
    read; with `only`, those experiments' rows, and every other row (and run left out) as the block
    `kept` has it."""
    before = kept_findings(kept)
    rows, left = [], []
    for name in order:
        found, unread = experiment_findings(name, roots) if only is None or name in only else before.get(name, ([], []))
        rows += found
        left += unread
    return render(rows, list({str(o): o for o in left}.values()))


def experiment_findings(name: str, roots: list[Path]) -> tuple[list[Finding], list[LeftOut]]:
    """One experiment's rows and the runs behind them it could not read. A question takes its row
    from the first runs in line that answer it (yours, then the reference); a row of the reference's
    that your runs cannot give yet stays, saying so, rather than vanishing."""
    answers = {}  # runs folder -> its rows
    for exp_dir in (r / name for r in roots if has_records(r / name)):
        try:
            answers[exp_dir] = own_tables(name).findings(exp_dir)
        except NothingFinished:
            answers[exp_dir] = []
    first = next(iter(answers), None)
    rows, left = [], []
    for question in dict.fromkeys(f.question for found in reversed(answers.values()) for f in found):
        exp_dir, row = next((d, f) for d, found in answers.items() for f in found if f.question == question)
        if exp_dir != first:
            row = replace(row, source=f"{row.source} ({first.as_posix()} has no finished runs for it yet)")
        rows.append(row)
    for exp_dir in (d for d, found in answers.items() if found):
        # named in the runs folder (a shared run is already <experiment>/<folder>)
        left += [replace(o, name=o.name if "/" in o.name else f"{name}/{o.name}") for o in read_runs(exp_dir)[1]]
    return rows, left


def build(name: str, roots: list[Path], out: Path) -> Path:
    """Tables of experiment `name` from the first runs in line that have something to show; returns
    their folder. A figure the experiment's previous report showed and this one does not is removed:
    every figure in `out` comes from the same records as its table."""
    checked_name("experiment", name)  # results/<name>.csv etc. stay inside --out
    shown_before = linked_figures(out / f"{name}.md")
    unfinished = None
    for exp_dir in (r / name for r in roots if has_records(r / name)):
        refuse_experiment_links(exp_dir)  # its figures go into its tensorboard/; a record behind a link is another file
        try:
            paths = tables_of(name)(exp_dir, out)
        except NothingFinished as e:
            print(f"{name}: {e}", file=sys.stderr)
            unfinished = unfinished or e
            continue
        for path in paths:
            print(f"wrote {path}")
        for stale in sorted(shown_before - {p.name for p in paths}):
            (out / stale).unlink(missing_ok=True)
            print(f"removed {out / stale} (its report no longer shows it)")
        for left in read_runs(exp_dir)[1]:
            print(left.warning(), file=sys.stderr)
        return exp_dir
    raise unfinished or ValueError(f"experiment {name!r} has no runs in {' or '.join(r.as_posix() for r in roots)}")


def linked_figures(report: Path) -> set[str]:
    """The figures beside it that a report shows (![...](name.png)): an image's whole markup, so that a
    record's text that names a figure (a run folder called 'x](name.png)') never counts."""
    return set(re.findall(r"!\[[^\n]*?\]\(([^)/\s]+\.png)\)", report.read_text())) if report.is_file() else set()


def write_runtimes(roots: list[Path], out: Path, readme: Path | None, only: list[str] | None = None) -> None:
    """<out>/runtimes.md: every measured runtime in the records of each runs folder (yours, then the
    reference), or with `only` those experiments' (the other rows kept), and the README's sentence on
    the default profile from the first that measured it (when datascale is among those rebuilt)."""
    report = out / "runtimes.md"
    rows = {r: [row for n in sorted(experiments_in(r)) if only is None or n in only
                for row in runtimes.runtime_rows(r / n)] for r in roots}
    before = report.read_text() if only is not None and report.is_file() else ""
    report.write_text(runtimes.render([row for r in roots for row in rows[r]], only, before))
    print(f"wrote {report}")
    if only is not None and "datascale" not in only:
        return
    measured = next((r for r in roots if any(row["experiment"] == "datascale" for row in rows[r])), None)
    record = read_record(measured / "datascale" / "sweep.json") if measured else {}
    hours = runtimes.training_hours(measured / "datascale", record) if measured else {}
    precisions = runtimes.trained_precisions(measured / "datascale", record) if measured else []
    if readme and update_block(readme, "default-profile", runtimes.default_profile(rows.get(measured, []), record,
                                                                                  hours=hours, precisions=precisions)):
        print(f"wrote {readme}: its first screen's default-profile block")


def write_step_times(roots: list[Path], out: Path) -> None:
    """Per runs folder, the step times of its experiments (estimate.py): the reference's into
    <out>/step_times.csv, which the dry runs read first; yours into a file of their own in your runs
    folder, so a measurement on a loaded machine never replaces the committed one."""
    for root in roots:
        every = sorted(experiments_in(root))
        if not every:
            continue
        path = out / STEP_TIMES.name if root.resolve() == reference.REFERENCE.resolve() else root / STEP_TIMES.name
        write_csv(path, measured([root / n for n in every]), COLUMNS)
        print(f"wrote {path}")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments tables", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", nargs="+", help="experiment folders under runs_dir (default: every one with runs)")
    p.add_argument("--runs_dir", default=None,
                   help=f"where the run folders are (default: {reference.RUNS.as_posix()} for each experiment you have run, "
                        f"else the committed {reference.REFERENCE.as_posix()})")
    p.add_argument("--out", default="results", help="where tables and plots go (default results)")
    p.add_argument("--readme", default=str(README), help="README whose Findings block to refresh ('' for none)")
    a = p.parse_args(argv)
    roots = [Path(a.runs_dir)] if a.runs_dir else [reference.RUNS, reference.REFERENCE]  # the user's runs first
    names = a.experiment or sorted(set().union(*(experiments_in(r) for r in roots)))
    if not names:
        raise ValueError(f"no runs in {' or '.join(r.as_posix() for r in roots)}: run an experiment first "
                         "(make exp-datascale)")
    order = findings_order()  # before anything is written: a spec that cannot be read is one error line
    built = []
    for name in names:
        try:
            built.append(build(name, roots, Path(a.out)))
        except NothingFinished:
            if a.experiment:  # asked for by name: nothing to show is the answer
                raise
    if not built:  # every experiment found has started, none has anything to show yet
        raise NothingFinished(f"no finished runs in {' or '.join(r.as_posix() for r in roots)} yet")
    only = names if a.experiment else None
    readme = Path(a.readme) if a.readme else None
    if readme and update_block(readme, "findings", findings_block(roots, order, only, read_block(readme, "findings"))):
        print(f"wrote {a.readme}: its Findings")
    write_runtimes(roots, Path(a.out), readme, only)
    if only is None:  # step times are a measure over whole runs folders
        write_step_times(roots, Path(a.out))
    return 0
