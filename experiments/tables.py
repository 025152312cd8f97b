"""`python -m experiments tables`: results/<experiment>.{csv,md,png} regenerated from run folders alone.

Each experiment's tables are made by its own package (experiments/<experiment>/tables.py:
make_tables); an experiment without one (fit-families, a spec of your own run by `sweep`) gets the
sweep's table, which is exp-datascale's (experiments/datascale/tables.py). The run folders are yours
in results/runs where you have run the experiment, else the committed results/reference; each
table's first lines say which. results/step_times.csv (runs/estimate.py: what the dry runs
estimate from) is rebuilt from every experiment's runs. With --readme, the README's Findings block is rebuilt from every
experiment's `findings` (report/findings.py), whichever experiments this call regenerated.
Records are read as data (report/records.py): a run whose summary.json or identity.json is not what
the suite writes is left out, with one line on stderr and "runs left out: <run> (<why>)" in every
report built from it; the others are tabled as usual.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import replace
from pathlib import Path

from experiments.report.findings import render
from experiments.report.table_format import write_csv
from experiments.report.readme import update_block
from experiments.report.records import read_runs
from experiments.runs import reference
from experiments.runs.estimate import COLUMNS, STEP_TIMES, measured
from experiments.runs.lock import refuse_experiment_links
from experiments.runs.names import checked_name
from experiments.runs.reference import experiments_in, has_records

README = Path("README.md")  # its block between <!-- tables:findings --> and <!-- /tables:findings --> is regenerated
SWEEP_TABLES = "datascale"  # whose make_tables serves every experiment the sweep runs
FINDINGS_ORDER = ("datascale", "distill", "inductive_bias", "complexity")  # the Findings table's rows, in this order


def tables_of(name: str):
    """make_tables of experiments/<name>/tables.py, else the sweep's."""
    own = Path(__file__).parent / name / "tables.py"
    return importlib.import_module(f"experiments.{name if own.is_file() else SWEEP_TABLES}.tables").make_tables


def findings_block(roots: list[Path]) -> str:
    """Every experiment's findings (yours where you ran it, else the reference), as one markdown
    table, and the runs they could not read."""
    rows, left = [], []
    for name in FINDINGS_ORDER:
        exp_dir = next((r / name for r in roots if has_records(r / name)), None)
        if exp_dir is not None:
            rows += importlib.import_module(f"experiments.{name}.tables").findings(exp_dir)
            # named in the runs folder (a shared run is already <experiment>/<folder>), each once
            left += [replace(o, name=o.name if "/" in o.name else f"{name}/{o.name}") for o in read_runs(exp_dir)[1]]
    return render(rows, list({o.name: o for o in left}.values()))


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
    for name in names:
        checked_name("experiment", name)  # results/<name>.csv etc. stay inside --out
        exp_dir = next((r / name for r in roots if has_records(r / name)), None)
        if exp_dir is None:
            raise ValueError(f"experiment {name!r} has no runs in {' or '.join(r.as_posix() for r in roots)}")
        refuse_experiment_links(exp_dir)  # its figures go into its tensorboard/; a record behind a link is another file
        for path in tables_of(name)(exp_dir, Path(a.out)):
            print(f"wrote {path}")
        for left in read_runs(exp_dir)[1]:
            print(left.warning(), file=sys.stderr)
    if a.readme and update_block(Path(a.readme), "findings", findings_block(roots)):
        print(f"wrote {a.readme}")
    step_times = Path(a.out) / STEP_TIMES.name  # from every experiment's runs, whichever this call regenerated
    every = sorted(set().union(*(experiments_in(r) for r in roots)))
    write_csv(step_times, measured([next(r / n for r in roots if has_records(r / n)) for n in every]), COLUMNS)
    print(f"wrote {step_times}")
    return 0
