"""`python -m experiments tables`: results/<experiment>.{csv,md,png} regenerated from run folders.

Reads only results/runs/<experiment>/*/{summary,identity}.json (and the sweep.json and tuning.json
the runner leaves), so a fresh clone regenerates the committed tables and plot byte for byte. A row
is one configuration over its seeds: runs are grouped by every setting of their identity except the
seed, and the settings that differ between rows are shown in a `settings` column. Settings that
follow the training-set size (the learning rate chosen per fraction, the steps and validation
interval, the validation images) have columns of their own instead, unless two rows of one family
at the same size differ in them.

Each row: mean test accuracy ± the half-width of its 95% Student-t interval over seeds, the paired
difference to the ResNet of the same seed and training subset, and a mark on rows with a run still
improving at its last validation. Below it: the slope of log test error against log training
images per family (results/<experiment>_slopes.csv), a generated reading of who wins and whether
the transformer-CNN gap narrows, and the learning-rate tuning (results/<experiment>_tuning.csv).
The numbers are numbers.py's, the words words.py's (the claims' fixed words claims.yaml's), the plot
figures.py's; the statistics are experiments/statistics.py's. The plot is also an image in TensorBoard
(<runs_dir>/<experiment>/tensorboard; every experiment's tables do so: experiments/figures.py, log_figures).
"""
from __future__ import annotations

from pathlib import Path

from experiments.datascale.figures import plot
from experiments.datascale.numbers import (CLAIMS, REFERENCE, aggregate, by_seed, collect, error_slopes, gap_change,
                                           planned, rejudged, results, write_rows_csv, write_slopes_csv,
                                           write_tuning_csv)
from experiments.datascale.words import render_markdown
from experiments.report.claim import Claim
from experiments.figures import log_figures
from experiments.report.findings import Finding, source
from experiments.report.records import read_record, read_runs
from experiments.statistics import paired_difference
from experiments.runs.sweep.reference import NothingFinished, whose
from modules.budgets import FAMILIES, kind_of


def make_tables(exp_dir: Path, out_dir: Path) -> list[Path]:
    """<out>/<name>.csv, .md, _slopes.csv, and .png when the runs span more than one training-set
    size, _tuning.csv when the sweep left a tuning.json."""
    name = exp_dir.name
    runs, unreadable = read_runs(exp_dir)
    sweep, tuning = read_record(exp_dir / "sweep.json"), read_record(exp_dir / "tuning.json")
    planned_runs, left_out = planned(results(runs), sweep, tuning)
    tuning = rejudged(tuning, runs)
    rows = aggregate(planned_runs)
    if not rows:
        raise NothingFinished(f"no finished runs in {exp_dir}: run the experiment first")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.csv", out_dir / f"{name}.md"]
    write_rows_csv(rows, paths[0])
    png, figs = None, {}
    if len({r["train_size"] for r in rows}) > 1:
        png = out_dir / f"{name}.png"
        figs["test_error_by_train_size"] = plot(rows, planned_runs, png)
        paths.append(png)
    log_figures(figs, exp_dir / "tensorboard", name)  # beside the sweep's own view (write_sweep_view)
    text = render_markdown(exp_dir, rows, planned_runs, sweep, png, tuning, left_out, unreadable)
    paths[1].write_text(text)
    slopes = out_dir / f"{name}_slopes.csv"
    if png is not None:  # more than one training-set size
        write_slopes_csv(error_slopes(rows), slopes)
        paths.append(slopes)
    elif slopes.exists():
        slopes.unlink()
    stale = out_dir / f"{name}_tuning.csv"
    if tuning.get("profiles"):
        write_tuning_csv(tuning, stale)
        paths.append(stale)
    elif stale.exists():
        stale.unlink()  # the runs no longer have a tuning record: neither has the table
    return paths


def findings(exp_dir: Path) -> list[Finding]:
    """The ViT paper's two data-scale claims, ViT against the ResNet of the same seeds: below it at
    the smallest training set both ran (Fig. 4: "ResNets perform better with smaller pre-training
    datasets"), and the gap's change from the smallest to the largest (they "plateau sooner than
    ViT"): a trend only from the paired interval of the change. Then the same change for every
    other family against the ResNet (transformer_catch_up, cnn_catch_up), in the family table's order."""
    sweep, tuning = read_record(exp_dir / "sweep.json"), read_record(exp_dir / "tuning.json")
    rows = aggregate(planned(collect(exp_dir), sweep, tuning)[0])
    scope = min((r["_scope"] for r in rows if r["family"] in ("vit", REFERENCE)), default=None)  # the first variant where several ran
    by = {(r["family"], r["train_size"]): r for r in rows if r["_scope"] == scope and not r["settings"]}
    profiles = ", ".join(sorted((sweep.get("profiles") or {}))) or "?"
    out = []
    for family in [f for f in FAMILIES if f != REFERENCE]:
        sizes = sorted(n for f, n in by if f == family and (REFERENCE, n) in by)
        if not sizes or family != "vit" and len(sizes) < 2:
            continue
        out += _against_resnet(family, sizes[0], sizes[-1], by, profiles, exp_dir)
    return out


def _against_resnet(family: str, small: int, large: int, by: dict, profiles: str, exp_dir: Path) -> list[Finding]:
    """ViT's two rows (below at the smallest size; the change to the largest), another family's one."""
    def behind(*ns) -> dict:  # the runs a claim rests on, and how many of them were still improving
        rows = [by[f, n] for f in (family, REFERENCE) for n in ns]
        return {"runs": sum(r["seeds"] for r in rows), "improving": sum(r["still_improving"] for r in rows)}
    used = [by[f, n] for f in (family, REFERENCE) for n in {small, large}]
    where = source("datascale", profiles, [x.summary for r in used for x in r["_runs"]], whose(exp_dir))
    title = FAMILIES[family].title
    out = []
    if family == "vit":
        gap = paired_difference(by_seed(by[family, small]), by_seed(by[REFERENCE, small]))
        out.append(Claim(CLAIMS["scarce_data"], gap, **behind(small)).row(
            f"ViT − ResNet at {small:,} images{steps_apart(by, [small], family)}", where))
    if large > small:
        change = gap_change(by[family, small], by[REFERENCE, small], by[family, large], by[REFERENCE, large])
        wording = CLAIMS["catch_up"] if family == "vit" else \
            CLAIMS[f"{'transformer' if kind_of(family) == 'transformer' else 'cnn'}_catch_up"].filled(family=title)
        out.append(Claim(wording, change, **behind(small, large)).row(
            f"change of {title} − ResNet from {small:,} to {large:,} images{steps_apart(by, [small, large], family)}",
            where))
    return out


def steps_apart(by: dict, sizes: list[int], family: str = "vit") -> str:
    """Where `family` and the ResNet trained different numbers of steps at `sizes`, the words that say
    so (each family to its own plateau: the claim is read only when every run behind it plateaued)."""
    steps = {f: [by[f, n]["max_steps"] for n in sizes] for f in (family, REFERENCE)}
    if any(not isinstance(x, int) for v in steps.values() for x in v) or steps[family] == steps[REFERENCE]:
        return ""
    return (" (steps: " + ", ".join(f"{FAMILIES[f].title} " + " / ".join(f"{x:,}" for x in v)
                                    for f, v in steps.items()) + ")")
