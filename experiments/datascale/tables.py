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
The statistics are in experiments/report/statistics.py. The plot is also an image in TensorBoard
(<runs_dir>/<experiment>/tensorboard; every experiment's tables do so: report/figures.log_figures).
"""
from __future__ import annotations

import itertools
import json
import math
import statistics
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

from modules.budgets import FAMILIES, kind_of, reading_order

from experiments.runs.reference import NothingFinished, whose, whose_runs
from experiments.report.records import LeftOut, Run, left_out_line, read_record, read_runs
from experiments.runs.convergence import judged, plateau_unknown, still_improving
from experiments.runs.run_folder import Teacher
from experiments.report.statistics import Estimate, loglog_error_slope, mean_ci, paired_difference
from experiments.report.findings import Finding, estimate_text, read, source
from experiments.report.figures import family_colour, log_figures, pyplot, save_png
from experiments.report.verdicts import (STILL_IMPROVING, cannot_tell, category, direction, equivalent, no_difference, not_read,
                                         side, verdict, were_improving)
from experiments.report.table_format import count, fmt, plural, plus_minus, write_csv

SEED_KEYS = ("seed_everything", "data.seed")   # what varies within a row
AXIS_KEYS = ("model.family", "data.fraction", "data.train_size")  # shown in their own columns
# chosen per training-set size (the tuning stage, the schedule): columns of their own, not settings
SIZE_KEYS = ("model.lr", "model.weight_decay", "trainer.max_steps", "trainer.val_check_interval", "data.val_size")
# what one family sets differently from another without it being another recipe
FAMILY_KEYS = ("model.family", "model.teacher_checkpoint", "model.distillation", "model.distill_alpha",
               "model.distill_tau", "model.patch_size", "model.window_size", "model.pool", "model.pos_embed",
               "trainer.precision")
SHOWN_COMMON = ("data.dataset", "model.budget", "data.batch_size", "trainer.max_steps", "trainer.max_epochs",
                "trainer.val_check_interval", "trainer.check_val_every_n_epoch", "model.lr", "model.weight_decay",
                "trainer.precision")
REFERENCE = "resnet"                               # the paired differences are to this family
COLUMNS = ("family", "settings", "fraction", "train_size", "val_size", "lr", "weight_decay", "max_steps",
           "test_acc_mean", "test_acc_ci95", "test_acc_std", "seeds", "delta_vs_resnet", "delta_vs_resnet_ci95",
           "delta_pairs", "still_improving", "params", "flops_per_image", "images_per_sec", "wall_time_s",
           "config_hashes")
SLOPE_COLUMNS = ("family", "settings", "slope", "slope_ci95", "points", "train_sizes", "still_improving")
TUNING_COLUMNS = ("profile", "family", "recipe", "fraction", "train_size", "val_size", "seed")


def collect(exp_dir: Path) -> list[dict]:
    """Each readable run's summary (records.read_runs), with its identity (the settings its folder
    hash covers) under 'identity' when the folder has one."""
    return run_summaries(read_runs(exp_dir)[0])


def run_summaries(runs: dict[str, Run]) -> list[dict]:
    out = []
    for name, run in runs.items():
        s = {**run.summary, "run": name} if "/" in name else run.summary  # a shared run: as the record names it
        ident = run.identity
        out.append({**s, "identity": grouping_identity(ident, s.get("teacher")), "_seeds": [ident.get(k) for k in SEED_KEYS]}
                   if ident is not None else s)
    return out


def grouping_identity(ident: dict, teacher: dict | None) -> dict:
    """The identity without the seed; a DeiT teacher is named by the student's record of it
    (`teacher`, run_folder.Teacher): its family-budget and variant (a matched teacher's
    'resnet-at-vit'), not by its own fraction, seed and lr, which follow the student's."""
    out = {k: v for k, v in ident.items() if k not in SEED_KEYS}
    named = Teacher.from_record(teacher)
    if out.get("model.teacher_checkpoint") and named is not None:
        out["model.teacher_checkpoint"] = named.label()
    return out


def _key(ident: dict) -> str:
    return json.dumps(ident, sort_keys=True)


def varying_settings(summaries: list[dict]) -> list[str]:
    """Identity keys (other than the seed and the row axes) whose values differ between runs of
    one family (a DeiT teacher is not a difference from a ResNet). A size key (SIZE_KEYS: the
    learning rate chosen per fraction, the steps, the validation images) is one only where two runs
    of the family at the same training-set size and otherwise equal settings differ in it."""
    keys = set()
    for family in {s.get("family") for s in summaries}:
        idents = [s["identity"] for s in summaries if "identity" in s and s.get("family") == family]
        varying = _varying(idents)
        plain = [k for k in varying if k not in SIZE_KEYS]
        keys |= set(plain)
        keys |= {k for k in varying if k in SIZE_KEYS and _splits_a_size(idents, k, plain)}
    return sorted(keys)


def _varying(idents: list[dict]) -> list[str]:
    keys = sorted({k for i in idents for k in i} - set(AXIS_KEYS))
    return [k for k in keys if len({json.dumps(i.get(k)) for i in idents}) > 1]


def _splits_a_size(idents: list[dict], key: str, plain: list[str]) -> bool:
    values = defaultdict(set)
    for i in idents:
        values[json.dumps([i.get(k) for k in (*AXIS_KEYS, *plain)])].add(json.dumps(i.get(key)))
    return any(len(v) > 1 for v in values.values())


def settings_label(ident: dict, keys: list[str]) -> str:
    return ", ".join(f"{k.split('.', 1)[-1]}={fmt(ident.get(k))}" for k in keys)


def comparison_scope(summary: dict) -> str:
    """What a run shares with the runs of other families it is compared with (the recipe, budget,
    dataset, split...): its identity without the family's own keys, the size keys and the axes;
    the summary's recipe for a run without identity."""
    ident = summary.get("identity")
    if ident is None:
        return json.dumps({"recipe": summary.get("recipe")})
    # data.val_size stays: it sets the pool a training subset is drawn from, so the same seed at
    # another val_size trains on other images, and a pair across them would not be paired
    return _key({k: v for k, v in ident.items()
                 if k not in (*FAMILY_KEYS, *AXIS_KEYS) and (k not in SIZE_KEYS or k == "data.val_size")})


def _steps(s: dict):
    """A run's step budget: its max_steps, or for a run bounded by epochs (max_steps -1, as
    fit-families trains) the steps it took once done, which its epochs set."""
    ident = s.get("identity") or {}
    done_steps = s.get("steps") if s.get("status") == "done" else None
    for v in (s.get("max_steps"), ident.get("trainer.max_steps"), done_steps):
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _values(runs: list[dict], get) -> list:
    return sorted({v for v in (get(r) for r in runs) if v is not None}, key=lambda v: (str(type(v)), v))


def _one(values: list):
    """The value the runs of a row share; None when none has one; 'a/b' when they differ."""
    if not values:
        return None
    return values[0] if len(values) == 1 else "/".join(fmt(v) for v in values)


def aggregate(summaries: list[dict]) -> list[dict]:
    """One row per configuration over its finished seeds: the mean test accuracy with its 95%
    t-interval half-width (test_acc_ci95, None with one seed) and sample standard deviation (None
    with one seed), the paired difference to the ResNet of the same seeds, training subset and
    scope (delta_vs_resnet, delta_vs_resnet_ci95, delta_pairs; None for the ResNet or when no
    pair exists), the validation images, learning rate and steps, and how many of its runs were
    still improving at their last validation. Runs without an identity group by family and
    fraction. Keys starting with "_" are for the other tables (the runs and their scope)."""
    done = [s for s in summaries if s.get("status") == "done" and s.get("test_acc") is not None]
    keys = {f: varying_settings([s for s in done if s["family"] == f]) for f in {s["family"] for s in done}}
    groups = defaultdict(list)
    for s in done:
        ident = s.get("identity") or {"model.family": s["family"], "data.fraction": float(s["fraction"])}
        groups[_key(ident)].append(s)
    rows = []
    for runs in groups.values():
        accs = [r["test_acc"] for r in runs]
        first = runs[0]
        acc = mean_ci(accs)
        lr = _one(_values(runs, lambda r: (r.get("identity") or {}).get("model.lr")))
        rows.append({"family": first["family"], "settings": settings_label(first.get("identity", {}), keys[first["family"]]),
                     "fraction": float(first["fraction"]), "train_size": first["train_size"],
                     "val_size": _one(_values(runs, lambda r: r.get("val_size"))), "lr": lr,
                     "weight_decay": _one(_values(runs, lambda r: (r.get("identity") or {}).get("model.weight_decay"))),
                     "max_steps": _one(_values(runs, _steps)),
                     "test_acc_mean": acc.value, "test_acc_ci95": acc.ci95,
                     "test_acc_std": statistics.stdev(accs) if len(accs) > 1 else None, "seeds": len(accs),
                     "delta_vs_resnet": None, "delta_vs_resnet_ci95": None, "delta_pairs": None,
                     "still_improving": sum(still_improving(r) for r in runs),
                     "_plateau_unknown": sum(plateau_unknown(r) for r in runs),
                     "params": first["params"], "flops_per_image": first["flops_per_image"],
                     "images_per_sec": round(statistics.fmean(r.get("images_per_sec") or 0 for r in runs)),
                     "wall_time_s": round(statistics.fmean(r.get("wall_time_s") or 0 for r in runs)),
                     "config_hashes": " ".join(sorted({r.get("config_hash") or "" for r in runs})),
                     "_val_acc_mean": statistics.fmean(r.get("val_acc_best") or 0 for r in runs),
                     "_runs": sorted(runs, key=lambda r: str(r.get("seed"))), "_scope": comparison_scope(first)})
    _pair_with_reference(rows)
    order = {f: i for i, f in enumerate(FAMILIES)}
    return sorted(rows, key=lambda r: (order.get(r["family"], 99), r["settings"], r["fraction"]))


def _pair_with_reference(rows: list[dict]) -> None:
    """Fills each row's paired difference to the ResNet row of the same scope and training-set
    size (of the same settings label, if several), over the seeds both have."""
    refs = defaultdict(list)
    for r in rows:
        if r["family"] == REFERENCE:
            refs[r["_scope"], r["train_size"]].append(r)
    for r in rows:
        if r["family"] == REFERENCE:
            continue
        cands = refs.get((r["_scope"], r["train_size"]), [])
        if len(cands) > 1:
            cands = [c for c in cands if c["settings"] == r["settings"]]
        if len(cands) != 1:
            continue
        d = paired_difference(_by_seed(r), _by_seed(cands[0]))
        if d is not None:  # a difference is read only where both rows' runs plateaued
            r.update(delta_vs_resnet=d.value, delta_vs_resnet_ci95=d.ci95, delta_pairs=d.n,
                     _delta_improving=bool(r["still_improving"] or cands[0]["still_improving"]))


def _by_seed(row: dict) -> dict:
    """seed -> test accuracy, the seed being (seed_everything, data.seed) where the identity is known:
    two runs of one data.seed are two pairs' worth, not one overwriting the other."""
    return {json.dumps(s.get("_seeds", s.get("seed"))): s["test_acc"] for s in row["_runs"]}


def sample_efficiency(rows: list[dict], threshold: float) -> dict[tuple[str, str], int | None]:
    """Smallest training set whose mean test accuracy reaches `threshold` (None: never)."""
    out = {}
    for r in rows:
        key = (r["family"], r["settings"])
        out.setdefault(key, None)
        if r["test_acc_mean"] >= threshold and (out[key] is None or r["train_size"] < out[key]):
            out[key] = r["train_size"]
    return out


def error_slopes(rows: list[dict]) -> list[dict]:
    """Per (family, settings): the OLS slope of log test error against log training images over
    every finished run (seeds separate points), with its 95% t-interval (slope/slope_ci95 None
    where not estimable: fewer than 3 points or one training-set size)."""
    lines = defaultdict(list)
    for r in rows:
        lines[r["family"], r["settings"]].append(r)
    out = []
    for (family, settings), rs in lines.items():
        pts = [(s["train_size"], s["test_acc"]) for r in rs for s in r.get("_runs", [])]
        est = loglog_error_slope(pts)
        used = [(n, a) for n, a in pts if a < 1]  # an error of 0 has no log: loglog_error_slope drops it
        out.append({"family": family, "settings": settings, "slope": est.value if est else None,
                    "slope_ci95": est.ci95 if est else None, "points": len(used),
                    "train_sizes": " ".join(str(n) for n in sorted({n for n, _ in used})),
                    "still_improving": sum(r["still_improving"] for r in rs)})
    return out


def _num(v, digits: int = 4) -> str:
    return "" if v is None else f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def write_rows_csv(rows: list[dict], path: Path) -> None:
    write_csv(path, ({**r, **{k: _num(r[k]) for k in ("test_acc_mean", "test_acc_ci95", "test_acc_std",
                                                       "delta_vs_resnet", "delta_vs_resnet_ci95")},
                      **{k: "" if r[k] is None else fmt(r[k]) for k in ("val_size", "lr", "weight_decay",
                                                                           "max_steps", "delta_pairs")}}
                     for r in rows), COLUMNS)


def write_slopes_csv(slopes: list[dict], path: Path) -> None:
    write_csv(path, ({**s, "slope": _num(s["slope"]), "slope_ci95": _num(s["slope_ci95"])} for s in slopes),
              SLOPE_COLUMNS)


def _provenance(summaries: list[dict]) -> list[str]:
    def values(key):
        return sorted({json.dumps(s[key], sort_keys=True) if isinstance(s.get(key), dict) else str(s.get(key))
                       for s in summaries if s.get(key) is not None})
    lines = [f"- hardware: {'; '.join(values('hardware'))}",
             f"- code: commit {', '.join(values('commit'))}"]
    for v in values("versions"):
        lines.append("- versions: " + ", ".join(f"{k} {x}" for k, x in json.loads(v).items()))
    return lines


def _common_settings(summaries: list[dict]) -> str:
    """The settings every run of the table shares, of those a reader needs to place it."""
    idents = [s["identity"] for s in summaries if "identity" in s]
    shown = []
    for k in SHOWN_COMMON:
        vals = {json.dumps(i.get(k)) for i in idents}
        if idents and len(vals) == 1 and idents[0].get(k) not in (None, -1):
            shown.append(f"{k.split('.', 1)[1]} {fmt(idents[0][k])}")
    seeds = sorted({s.get("seed") for s in summaries if s.get("seed") is not None})
    return ", ".join(shown) + f"; seeds {seeds}"


def _family_settings(summaries: list[dict]) -> list[str]:
    """Shown settings that differ between families but not within one (e.g. a precision that
    depended on the machine a family was rerun on)."""
    families = list(dict.fromkeys(s["family"] for s in summaries if "identity" in s))
    out = []
    for k in SHOWN_COMMON:
        values = {f: {json.dumps(s["identity"].get(k)) for s in summaries if s.get("family") == f and "identity" in s}
                  for f in families}
        if all(len(v) == 1 for v in values.values()) and len({next(iter(v)) for v in values.values()}) > 1:
            by_value = defaultdict(list)
            for f, v in values.items():
                by_value[json.loads(next(iter(v)))].append(f)
            out.append(f"{k.split('.', 1)[1]} " + "; ".join(f"{fmt(v)} ({', '.join(fs)})" for v, fs in by_value.items()))
    return out


def _best(rows: list[dict], on: str = "test_acc_mean") -> dict:
    """The row with the highest mean `on`: test accuracy to report who is highest, validation
    accuracy ('_val_acc_mean') to choose which rows a comparison reads."""
    return max(rows, key=lambda r: (r[on], -list(FAMILIES).index(r["family"]) if r["family"] in FAMILIES else 0))


def scaling_reading(rows: list[dict]) -> list[str]:
    """Sentences from the numbers, one paragraph per comparison scope (recipe; rows carry it as
    '_scope', '' if absent): who has the highest mean test accuracy at each training-set size, and
    whether the gap between the best transformer (vit, deit, swin, hybrid) and the best CNN
    (resnet, convnext) narrows or widens from the smallest to the largest size both kinds ran at,
    read from the paired 95% interval of that change (experiments/report/verdicts.py), never from the
    two endpoint means."""
    scopes = list(dict.fromkeys(r.get("_scope", "") for r in rows))
    labels = _scope_labels(scopes)
    out = []
    for scope in sorted(scopes, key=lambda s: labels[s]):
        text = _reading(sorted((r for r in rows if r.get("_scope", "") == scope), key=lambda r: r["train_size"]))
        out.append(f"{labels[scope]}: {text}" if labels[scope] else text)
    return out


def _scope_labels(scopes: list[str]) -> dict[str, str]:
    parsed = {s: json.loads(s) if s else {} for s in scopes}
    keys = _varying(list(parsed.values())) if len(scopes) > 1 else []
    return {s: settings_label(p, keys) if keys else "" for s, p in parsed.items()}


def _reading(rows: list[dict]) -> str:
    sizes = sorted({r["train_size"] for r in rows})
    settings = defaultdict(set)
    for r in rows:
        settings[r["family"]].add(r.get("settings"))

    def _name(row):  # its settings only where the family has several in this scope
        return f"{row['family']} ({row['settings']})" if len(settings[row["family"]]) > 1 else row["family"]
    improving = {n: sum(r.get("still_improving") or 0 for r in rows if r["train_size"] == n) for n in sizes}
    silent = [n for n in sizes if improving[n]]  # converged or silent: no winner read at these sizes
    wins = []
    for n in (n for n in sizes if not improving[n]):
        at = [r for r in rows if r["train_size"] == n]
        best = _best(at)
        tied = [r for r in at if r["test_acc_mean"] == best["test_acc_mean"]]
        wins.append((" and ".join(_name(r) for r in tied), n, best["test_acc_mean"]))
    if len(sizes) > 1 and not silent and len({w for w, _, _ in wins}) == 1:
        text = (f"Highest mean test accuracy: {wins[0][0]} at every training-set size ("
                + ", ".join(f"{a:.4f} at {n:,} images" for _, n, a in wins) + ").")
    else:
        text = ("Highest mean test accuracy: " + "; ".join(f"{w} at {n:,} images ({a:.4f})" for w, n, a in wins) + "."
                if wins else "")
    if silent:
        unknown = sum(r.get("_plateau_unknown") or 0 for r in rows if r["train_size"] in silent)
        text += (" Not read at " + ", ".join(f"{n:,}" for n in silent) + " images: "
                 + f"{sum(improving[n] for n in silent)} of the runs there {were_improving(unknown)} ({STILL_IMPROVING}).")
        text = text.strip()
    kinds = {kind_of(r["family"]) for r in rows} - {None}
    if kinds != {"transformer", "CNN"}:
        have = ", ".join(sorted({r["family"] for r in rows if kind_of(r["family"])}))
        lacking = "CNN" if "CNN" not in kinds else "transformer"
        missing = f"no {lacking} ({', '.join(f for f in reading_order() if kind_of(f) == lacking)})"
        return text + f" Transformers against CNNs can't be compared here: {missing} ran" + (f" (only {have})." if have
                                                                                              else ".")
    both = [n for n in sizes if {kind_of(r["family"]) for r in rows if r["train_size"] == n} >= {"transformer", "CNN"}]
    if not both:
        return text + " Transformers against CNNs can't be compared: no training-set size has both."

    def gap(n):  # the best of each kind by mean validation accuracy: a choice, so never made on test
        at = [r for r in rows if r["train_size"] == n]
        t = _best([r for r in at if kind_of(r["family"]) == "transformer"], on="_val_acc_mean")
        c = _best([r for r in at if kind_of(r["family"]) == "CNN"], on="_val_acc_mean")
        return t["test_acc_mean"] - c["test_acc_mean"], t, c

    def said(n):
        d, t, c = gap(n)
        return f"{d:+.4f} at {n:,} images ({_name(t)} {t['test_acc_mean']:.4f} vs {_name(c)} {c['test_acc_mean']:.4f})"
    # every row of either kind at the sizes a gap reads: the best of a kind is known only when all have plateaued
    used = [r for r in rows if r["train_size"] in (both[0], both[-1]) and kind_of(r["family"])]
    if any(r.get("still_improving") for r in used):  # converged or silent: no gap or trend from these rows
        if set(both) <= set(silent):
            return text  # its "Not read at ..." already names them
        return text + " " + not_read(sum(r.get("still_improving") or 0 for r in used), sum(r.get("seeds", 1) for r in used),
                                     sum(r.get("_plateau_unknown") or 0 for r in used))
    best = "Best transformer minus best CNN (each chosen by mean validation accuracy)"
    if len(both) == 1:
        return text + (f" {best}: {said(both[0])}; both kinds ran at this one training-set "
                       "size only, so whether the gap narrows can't be told.")
    ends = (*gap(both[0])[1:], *gap(both[-1])[1:])  # transformer and CNN rows at the smallest, then the largest
    change, (d1, d2) = _trend(*ends), _paired_gaps(*ends)
    text += (f" {best}: {said(both[0])}, {said(both[-1])}. The change of the gap from "
             f"{both[0]:,} to {both[-1]:,} images, paired by seed: {_signed(change)}: ")
    s = side(change)
    if equivalent(change):
        text += f"{no_difference(change)}: the gap stays the same as data grows."
    elif not s or s != (d2 > d1) - (d2 < d1):   # a trend only from the paired interval, never from the endpoints
        text += f"{cannot_tell(change)}; no trend is concluded."
    else:
        text += f"{direction(change, 'a trend')}; {_trend_words(d1, d2)}"
    text += _each_transformer(rows, both[0], both[-1], _name)
    if any(r.get("test_acc_ci95") is None for r in used):
        text += " Some of these means rest on one seed (no interval): a single draw, not a measured trend."
    else:
        text += f" The 95% intervals of these means are up to ±{max(r['test_acc_ci95'] for r in used):.4f}."
    return text


def _trend_words(d1: float, d2: float) -> str:
    """What a trend of the transformer − CNN gap from d1 (smallest size) to d2 (largest) says of the paper's claim."""
    paper, opposite = "as the paper says.", "the opposite of the paper's claim that transformers catch up as data grows."
    if d2 > d1 and d1 < 0:
        return (f"the CNN lead narrows from {-d1:.4f} to {-d2:.4f}: transformers catch up as data grows, {paper}"
                if d2 < 0 else f"the CNN lead of {-d1:.4f} narrows and closes: transformers draw level, {paper}"
                if d2 == 0 else f"the CNN lead of {-d1:.4f} narrows and turns into a transformer lead of {d2:.4f}: "
                f"transformers overtake as data grows, {paper}")
    if d2 > d1:
        return (f"the transformer lead widens from {d1:.4f} to {d2:.4f}: transformers gain with data, {paper} But "
                "they led already at the smallest size, where the paper has CNNs ahead." if d1 > 0 else
                f"level at the smallest size, a transformer lead of {d2:.4f} at the largest: transformers gain "
                f"with data, {paper}")
    if d1 <= 0:
        return f"the CNN lead widens from {-d1:.4f} to {-d2:.4f}: transformers fall further behind, {opposite}"
    return (f"the transformer lead narrows from {d1:.4f} to {d2:.4f}: CNNs catch up, {opposite}" if d2 > 0 else
            f"the transformer lead of {d1:.4f} turns into a CNN lead of {-d2:.4f}: {opposite}")


def _each_transformer(rows: list[dict], small: int, large: int, name) -> str:
    """With several transformers: each one's difference to the best CNN at the smallest and the
    largest size, so that the best transformer's trend is not read as every transformer's."""
    cnn = {n: _best([r for r in rows if r["train_size"] == n and kind_of(r["family"]) == "CNN"], on="_val_acc_mean")
           for n in (small, large)}
    pairs = []
    for key in dict.fromkeys((r["family"], r.get("settings")) for r in rows):  # first-seen order
        ends = [next((r for r in rows if (r["family"], r.get("settings")) == key and r["train_size"] == n), None)
                for n in (small, large)]
        if kind_of(key[0]) == "transformer" and None not in ends:
            d = [r["test_acc_mean"] - cnn[n]["test_acc_mean"] for r, n in zip(ends, (small, large))]
            pairs.append((name(ends[0]), *d, _trend(ends[0], cnn[small], ends[1], cnn[large])))
    if len(pairs) < 2:
        return ""
    text = (f" Each transformer minus the best CNN, {small:,} to {large:,} images, and the change paired by seed: "
            + ", ".join(f"{f} {a:+.4f} to {b:+.4f} ({_signed(t)}: {verdict(t, 'gains on it', 'loses ground')})"
                        for f, a, b, t in pairs) + ".")
    if {category(t) for *_, t in pairs} >= {"higher", "lower"}:
        text += " They disagree: the best transformer's trend is not every transformer's."
    return text


def _trend(t_small: dict, c_small: dict, t_large: dict, c_large: dict) -> Estimate | None:
    """(transformer − CNN at the largest size) − (the same at the smallest), paired by seed (a
    seed also draws the training subset): only seeds all four rows ran enter."""
    small, large = _gaps_by_seed(t_small, c_small, t_large, c_large)
    return paired_difference(large, small)


def _paired_gaps(t_small: dict, c_small: dict, t_large: dict, c_large: dict) -> tuple[float, float]:
    """The mean gap at the smallest and the largest size over the seeds `_trend` pairs, rounded as
    printed: the words of a trend ("narrows from .. to ..") agree with its paired interval."""
    small, large = _gaps_by_seed(t_small, c_small, t_large, c_large)
    return (round(statistics.fmean(small.values()), 4), round(statistics.fmean(large.values()), 4)) if small else (0.0, 0.0)


def _gaps_by_seed(t_small: dict, c_small: dict, t_large: dict, c_large: dict) -> tuple[dict, dict]:
    """{seed: transformer − CNN} at the smallest and the largest size, over the seeds all four rows ran."""
    small, large = _by_seed(t_small), _by_seed(t_large)
    c_s, c_l = _by_seed(c_small), _by_seed(c_large)
    keys = sorted(set(small) & set(large) & set(c_s) & set(c_l))
    return {k: small[k] - c_s[k] for k in keys}, {k: large[k] - c_l[k] for k in keys}


def _signed(est: Estimate | None) -> str:
    if est is None:
        return "no seed ran at both sizes"
    return f"{est.value:+.4f}" + (f" ± {est.ci95:.4f}" if est.ci95 is not None else "") + \
        f" ({est.n} pair{'s' if est.n != 1 else ''})"


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _short(key: str) -> str:
    return key.split(".", 1)[-1]


def tuning_trials(tuning: dict) -> list[dict]:
    """Every trial of tuning.json, one dict per trial with its profile and 'chosen' (whether a
    choice took its lr, or grid values, at its own fraction: the choice's tuned_at)."""
    out = []
    for profile, rec in sorted((tuning.get("profiles") or {}).items()):
        grid = [_short(k) for k in (rec.get("grid") or {"model.lr": []})]
        choices = rec.get("choices") or []
        for t in rec.get("trials") or []:
            chosen = any(c.get("family") == t.get("family") and c.get("recipe", "default") == t.get("recipe", "default")
                         and _same(c.get("tuned_at", c.get("fraction")), t.get("fraction"))
                         and all(_same(c.get(k), t.get(k)) for k in grid) for c in choices)
            out.append({"profile": profile, **t, "chosen": chosen})
    return out


def rejudged(tuning: dict, runs: dict[str, Run]) -> dict:
    """tuning.json with each trial's plateau judged again by today's rule from its run's record (the
    record keeps the curve; the flag in tuning.json is the rule of the day the trial ran)."""
    def trial(t: dict) -> dict:
        run = runs.get(t.get("run")) if isinstance(t, dict) and isinstance(t.get("run"), str) else None
        s = run.summary if run else None
        return {**t, "plateaued": (judged(s) or {}).get("plateaued")} if s and s.get("val_history") else t
    return {**tuning, "profiles": {p: {**rec, "trials": [trial(t) for t in rec.get("trials") or []]}
                                   for p, rec in (tuning.get("profiles") or {}).items()}} if tuning else tuning


def write_tuning_csv(tuning: dict, path: Path) -> None:
    trials = tuning_trials(tuning)
    metrics, grid = [], []
    for rec in (tuning.get("profiles") or {}).values():
        metrics.append(rec.get("metric", "val_acc_best"))
        grid += [_short(k) for k in (rec.get("grid") or {"model.lr": []})]
    fixed = [*TUNING_COLUMNS, *dict.fromkeys(grid), *dict.fromkeys(metrics), "plateaued", "status", "run"]
    extra = sorted({k for t in trials for k in t} - set(fixed) - {"chosen"})
    write_csv(path, ({k: "" if v is None else str(v).lower() if isinstance(v, bool) else fmt(v)
                      for k, v in t.items()} for t in trials), [*fixed, *extra, "chosen"])


def render_tuning(tuning: dict) -> list[str]:
    """The section on the learning rates chosen on validation: per profile a grid (rows family x
    tuned fraction [x recipe], columns the grid's values, cells the validation metric, the chosen
    one in bold) and one line per family with the lr each fraction uses."""
    out = ["## Learning rate, chosen on validation accuracy only", ""]
    trials = tuning_trials(tuning)
    profiles = tuning.get("profiles") or {}
    order = {f: i for i, f in enumerate(FAMILIES)}
    for profile, rec in sorted(profiles.items()):
        grid_keys = list(rec.get("grid") or {"model.lr": []})
        short = [_short(k) for k in grid_keys]
        metric = rec.get("metric", "val_acc_best")
        mine = [t for t in trials if t["profile"] == profile]
        combos = list(itertools.product(*(rec.get("grid") or {}).values())) if rec.get("grid") else []
        for t in mine:
            c = tuple(t.get(k) for k in short)
            if not any(all(_same(a, b) for a, b in zip(c, x)) for x in combos):
                combos.append(c)
        recipes = list(dict.fromkeys(t.get("recipe", "default") for t in mine))
        seeds = sorted({t["seed"] for t in mine if t.get("seed") is not None}) or (
            [rec["seed"]] if rec.get("seed") is not None else [])
        out += [(f"Profile {profile}: each" if len(profiles) > 1 else "Each") + f" family trained at every "
                f"{' x '.join(short)} of the grid at the tuned fractions"
                + (f" (seed {', '.join(fmt(s) for s in seeds)})" if seeds else "") + "; "
                f"the cells are {metric} on the validation images, the test set is never read; **bold**: the "
                f"one chosen; {STILL_IMPROVING}: still improving at its last validation.", ""]
        head = ["family", *(["recipe"] if len(recipes) > 1 else []), "tuned fraction", "train images", "val images",
                *(", ".join(f"{k} {fmt(v)}" for k, v in zip(short, c)) for c in combos)]
        out += ["| " + " | ".join(head) + " |", "|---|" + ("---|" if len(recipes) > 1 else "")
                + "---:|" * (len(head) - 1 - (len(recipes) > 1))]
        cells = defaultdict(list)
        for t in mine:
            cells[t.get("family"), t.get("recipe", "default"), t.get("fraction")].append(t)
        for (family, recipe, fraction), ts in sorted(cells.items(), key=lambda kv: (
                order.get(kv[0][0], 99), str(kv[0][0]), recipes.index(kv[0][1]), kv[0][2] or 0)):
            line = [family, *([recipe] if len(recipes) > 1 else []), fmt(fraction),
                    count(_one(_values(ts, lambda t: t.get("train_size")))),
                    count(_one(_values(ts, lambda t: t.get("val_size"))))]
            for c in combos:
                hit = [t for t in ts if all(_same(t.get(k), v) for k, v in zip(short, c))]
                line.append("; ".join(_trial_cell(t, metric) for t in hit))
            out.append("| " + " | ".join(line) + " |")
        out += ["", "The learning rate each fraction uses (tuned at the nearest tuned fraction):", ""]
        by_family = defaultdict(list)
        for c in rec.get("choices") or []:
            by_family[c.get("family"), c.get("recipe", "default")].append(c)
        for (family, recipe), cs in sorted(by_family.items(), key=lambda kv: (order.get(kv[0][0], 99), str(kv[0][0]),
                                                                               str(kv[0][1]))):
            parts = defaultdict(list)
            for c in sorted(cs, key=lambda c: c.get("fraction") or 0):
                parts[json.dumps([c.get(k) for k in short]), json.dumps(c.get("tuned_at"))].append(c.get("fraction"))
            said = "; ".join(
                ", ".join(f"{k} {fmt(v)}" for k, v in zip(short, json.loads(vals))) + " at fraction"
                + ("s " if len(fs) > 1 else " ") + ", ".join(fmt(f) for f in fs)
                + (f" (tuned at {fmt(json.loads(at))})" if json.loads(at) is not None else "")
                for (vals, at), fs in parts.items())
            out.append(f"- {family}" + (f" ({recipe})" if len(recipes) > 1 else "") + f": {said}")
        out.append("")
    return out[:-1]


def _trial_cell(t: dict, metric: str) -> str:
    v = t.get(metric)
    if v is None:
        return t.get("status") or "n/a"
    mark = STILL_IMPROVING if t.get("plateaued") is False else ""
    return f"**{v:.4f}**{mark}" if t["chosen"] else f"{v:.4f}{mark}"


def _pm(value: float | None, ci: float | None, signed: bool = False) -> str:
    return "" if value is None else plus_minus(value, ci, signed)


def planned(summaries: list[dict], sweep: dict) -> tuple[list[dict], list[dict]]:
    """(runs the table covers, finished runs it leaves out). When the sweep recorded its main
    stage's runs (sweep.json, per profile), a finished run outside that plan, e.g. one trained at a
    learning rate an earlier tuning chose, is left out of the rows: one row per current choice."""
    plan = {name for rec in (sweep.get("profiles") or {}).values() for name in (rec.get("main_runs") or {}).values()}
    if not plan:
        return summaries, []
    out = [s for s in summaries if s.get("status") == "done" and s.get("run") not in plan]
    return [s for s in summaries if s not in out], out


def unfinished_line(summaries: list[dict], sweep: dict) -> list[str]:
    """The runs of the sweep's plan (sweep.json's main runs) not finished yet: a partial sweep's
    table shows its finished cells and names the missing ones. Before the first invocation has
    recorded its plan, the unfinished run folders (interrupted or still running) are named."""
    plan = {key: run for rec in (sweep.get("profiles") or {}).values() for key, run in (rec.get("main_runs") or {}).items()}
    if plan:
        done = {s.get("run") for s in summaries if s.get("status") == "done"}
        missing = sorted(key for key, run in plan.items() if run not in done)
        return [f"- not finished yet: {len(missing)} of the {plural(len(plan), 'run')} in the sweep's plan, so their "
                f"cells are missing: {', '.join(missing)}"] if missing else []
    started = sorted(s.get("run") for s in summaries if s.get("status") not in ("done", "fitted", "failed", "diverged"))
    return [f"- not finished yet: {', '.join(started)}; the sweep records its whole plan (sweep.json) when an "
            "invocation ends, so runs not started yet are not listed"] if started else []


def render_markdown(exp_dir: Path, rows, summaries, sweep: dict, plot: Path | None, tuning: dict | None = None,
                    left_out: list[dict] = (), unreadable: list[LeftOut] = ()) -> str:
    name = exp_dir.name
    threshold = _threshold(sweep)
    settings = list(dict.fromkeys(r["settings"] for r in rows))
    with_settings = any(settings)
    with_wd = any(isinstance(r["weight_decay"], str) for r in rows) or len({r["weight_decay"] for r in rows}) > 1
    wall = sum(s.get("wall_time_s") or 0 for s in summaries)
    out = [f"# {name}: test accuracy against training-set size", "",
           f"Generated by `make tables` from {exp_dir.as_posix()}/*/summary.json; do not edit by hand.",
           whose_runs(exp_dir), "",
           f"- every run: {_common_settings(summaries)}"]
    by_family = _family_settings(summaries)
    if by_family:
        out.append(f"- by family: {'; '.join(by_family)}")
    keys = varying_settings([s for s in summaries if s.get("status") == "done"])
    if keys:
        out.append(f"- settings that differ between rows: {', '.join(keys)} (never averaged together)")
    statuses = defaultdict(int)
    for s in summaries:
        statuses[s.get("status")] += 1
    out.append(f"- runs: {len(summaries)} ({', '.join(f'{n} {k}' for k, n in sorted(statuses.items()))}); "
               f"wall time summed over runs (fit only): {wall / 60:.1f} min"
               + ("; fitted: trained, never tested (tuning trials not chosen)" if statuses.get("fitted") else ""))
    out += unfinished_line(summaries, sweep)
    if unreadable:
        out.append(f"- {left_out_line(unreadable)}")
    packed = [s for s in summaries if s.get("engine")]
    if packed:
        groups = {s["engine"]["group"] for s in packed}
        out.append(f"- engine: {len(packed)} of the runs trained packed, in {len(groups)} groups (sweep --pack; "
                   "each member's record is the one its own fit would write)")
    if left_out:
        out.append(f"- not in the table: {len(left_out)} finished runs outside the sweep's current plan (trained at a "
                   f"learning rate an earlier tuning chose): {', '.join(sorted(s['run'] for s in left_out))}")
    for profile, rec in sorted((sweep.get("profiles") or {}).items()):
        last = rec.get("last_invocation")
        if last:
            # runs: its whole plan, finished ones included; trained: those it trained or tested itself
            if "trained" not in last:   # a record from before the count
                did = f"ended a plan of {plural(last['runs'], 'run')} (some may have finished before it)"
            elif last["trained"] < last["runs"]:
                did = (f"trained or tested {last['trained']} of the {plural(last['runs'], 'run')} in its plan "
                       "(the others had finished before)")
            else:
                did = f"ran {plural(last['runs'], 'run')}"
            out.append(f"- the last `sweep --profile {profile}` invocation {did} in "
                       f"{last['wall_time_s'] / 60:.1f} min with {last['jobs']} at a time"
                       + (f", up to {last['pack']} packed per process" if last.get("pack", 1) > 1 else ""))
    out += [*_provenance(summaries), ""]
    out += ["Test accuracy: mean over seeds ± the half-width of its 95% Student-t interval (n/a with one seed). "
            f"Δ vs {REFERENCE}: the mean paired difference to the {REFERENCE} of the same seed and training subset, "
            "± its 95% t-interval (the number of pairs in brackets when fewer than the seeds).", ""]
    head = ("| family | " + ("settings | " if with_settings else "") + "fraction | train images | val images | lr | "
            + ("weight decay | " if with_wd else "") + f"steps | test acc (mean ± 95% CI) | seeds | Δ vs {REFERENCE} | "
            "params | MFLOPs | train img/s | fit min |")
    out += [head, "|---|" + ("---|" if with_settings else "") + "---:|" * (head.count("|") - 2 - with_settings)]
    for r in rows:
        delta = _pm(r["delta_vs_resnet"], r["delta_vs_resnet_ci95"], signed=True)
        if delta and r["delta_pairs"] != r["seeds"]:
            delta += f" ({r['delta_pairs']})"
        if delta and r.get("_delta_improving"):
            delta += f" {STILL_IMPROVING}"
        acc = _pm(r["test_acc_mean"], r["test_acc_ci95"]) + (f" {STILL_IMPROVING}" if r["still_improving"] else "")
        out.append(f"| {r['family']} | " + (f"{r['settings']} | " if with_settings else "")
                   + f"{r['fraction']:g} | {r['train_size']:,} | {count(r['val_size'])} | "
                   + ("" if r["lr"] is None else fmt(r["lr"])) + " | "
                   + (f"{'' if r['weight_decay'] is None else fmt(r['weight_decay'])} | " if with_wd else "")
                   + f"{count(r['max_steps'])} | {acc} | {r['seeds']} | {delta} | {r['params']:,} | "
                   + ("" if r["flops_per_image"] is None else f"{r['flops_per_image'] / 1e6:.1f}")  # not counted
                   + f" | {r['images_per_sec']:,} | {r['wall_time_s'] / 60:.1f} |")
    improving = [s["run"] for r in rows for s in r["_runs"] if still_improving(s) and not plateau_unknown(s)]
    unknown = [s["run"] for r in rows for s in r["_runs"] if plateau_unknown(s)]
    if improving or unknown:
        out.append("")
    for runs, why in ((improving, "still improving at its last validation"),
                      (unknown, "too few validations to tell whether it plateaued")):
        if runs:
            out.append(f"{STILL_IMPROVING} {why}: {plural(len(runs), 'run')} ({', '.join(sorted(runs))})")
    if (improving or unknown) and any(r.get("_delta_improving") for r in rows):
        out.append(f"A Δ vs {REFERENCE} is marked {STILL_IMPROVING} when either of its rows is.")
    deit = [s for s in summaries if s.get("family") == "deit" and s.get("status") == "done" and s.get("test")]
    if deit:
        out += ["", "DeiT's heads on test (cls / distillation / the head the table reports):", ""]
        out += [f"- {s['run']}: {s['test'].get('acc_cls', float('nan')):.4f} / "
                f"{s['test'].get('acc_dist', float('nan')):.4f} / {s['test']['acc']:.4f}" for s in deit]
    out += ["", "## What the numbers say", "", *(f"{p}\n" for p in scaling_reading(rows))]
    slopes = error_slopes(rows) if len({r["train_size"] for r in rows}) > 1 else []  # one size: no slope
    out += [] if not slopes else ["## Slope of log test error vs log n", "",
            "Least squares over every finished run (seeds are separate points), ± the half-width of its 95% "
            "t-interval (df = points - 2; n/a with fewer than 3 points or one training-set size). More negative: "
            "the error falls faster as data grows; the paper's claim is a steeper slope for transformers.", "",
            "| family | " + ("settings | " if with_settings else "") + "slope (95% CI) | points | sizes |",
            "|---|" + ("---|" if with_settings else "") + "---:|---:|---:|"]
    for s in slopes:
        out.append(f"| {s['family']} | " + (f"{s['settings']} | " if with_settings else "")
                   + (_pm(s["slope"], s["slope_ci95"], signed=True) if s["slope"] is not None else "n/a")
                   + (f" {STILL_IMPROVING}" if s["still_improving"] and s["slope"] is not None else "")
                   + f" | {s['points']} | {len(s['train_sizes'].split())} |")
    out += ["", f"Sample efficiency: the smallest training set whose mean test accuracy reaches {threshold:.2f}.", "",
            "| family | " + " | ".join(s or "all runs" for s in settings) + " |", "|---|" + "---:|" * len(settings)]
    eff = sample_efficiency(rows, threshold)

    def unread(family: str, st: str) -> bool:  # a size up to the one found (any, if none) still improving
        size = eff[family, st]
        return any(r["still_improving"] for r in rows if (r["family"], r["settings"]) == (family, st)
                   and (size is None or r["train_size"] <= size))

    def cell(family: str, st: str) -> str:
        if (family, st) not in eff:
            return ""
        size = eff[family, st]
        return ("not reached" if size is None else f"{size:,}") + (f" {STILL_IMPROVING}" if unread(family, st) else "")
    for family in dict.fromkeys(r["family"] for r in rows):
        out.append(f"| {family} | " + " | ".join(cell(family, st) for st in settings) + " |")
    if any(unread(*key) for key in eff):
        out += ["", f"{STILL_IMPROVING}: runs at that size or a smaller one were still improving at their last "
                "validation (at any size, where never reached): a longer run could move it; shown, not read."]
    if tuning and (tuning.get("profiles") or {}):
        out += ["", *render_tuning(tuning)]
    bad = [s for s in summaries if s.get("status") in ("failed", "diverged")]
    if bad:
        out += ["", "Runs left out of the table:", ""] + [f"- {s['run']}: {s['status']} ({s.get('error', '')})" for s in bad]
    if plot is not None:
        out += ["", f"![test error against training images]({plot.name})"]
    return "\n".join(out) + "\n"


def _threshold(sweep: dict) -> float:
    values = [p.get("sample_efficiency_accuracy") for p in (sweep.get("profiles") or {}).values()]
    return next((v for v in values if v), 0.8)


def plot(rows: list[dict], summaries: list[dict], path: Path) -> "Figure":
    """Test error (1 - accuracy) against training images, log-log, one line per (family,
    settings), bars the 95% t-interval over seeds where there is one (cut at the axis floor)."""
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    settings = list(dict.fromkeys(r["settings"] for r in rows))
    for j, family in enumerate(dict.fromkeys(r["family"] for r in rows)):
        color = family_colour(family, f"C{j % 10}")
        for i, st in enumerate(settings):
            pts = [r for r in rows if r["family"] == family and r["settings"] == st]
            if not pts:
                continue
            err = [max(1.0 - p["test_acc_mean"], 1e-4) for p in pts]
            ci = [p["test_acc_ci95"] or 0.0 for p in pts]
            ax.errorbar([p["train_size"] for p in pts], err, yerr=[[min(c, 0.9 * e) for c, e in zip(ci, err)], ci],
                        marker="o", capsize=3, color=color, label=f"{family} ({st})" if st else family,
                        linestyle=("-", "--", ":", "-.")[i % 4])
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.set_xlabel("training images (log scale)")
    ax.set_ylabel("test error, 1 - accuracy (log scale)")
    ax.set_title(textwrap.fill(f"{_common_settings(summaries)}; mean over seeds, bars: 95% t-interval", 120),
                 fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path)
    return fig  # for TensorBoard, which closes it (log_figures)


def make_tables(exp_dir: Path, out_dir: Path) -> list[Path]:
    """<out>/<name>.csv, .md, _slopes.csv, and .png when the runs span more than one training-set
    size, _tuning.csv when the sweep left a tuning.json."""
    name = exp_dir.name
    runs, unreadable = read_runs(exp_dir)
    sweep, tuning = read_record(exp_dir / "sweep.json"), read_record(exp_dir / "tuning.json")
    summaries, left_out = planned(run_summaries(runs), sweep)
    tuning = rejudged(tuning, runs)
    rows = aggregate(summaries)
    if not rows:
        raise NothingFinished(f"no finished runs in {exp_dir}: run the experiment first")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.csv", out_dir / f"{name}.md"]
    write_rows_csv(rows, paths[0])
    png, figs = None, {}
    if len({r["train_size"] for r in rows}) > 1:
        png = out_dir / f"{name}.png"
        figs["test_error_by_train_size"] = plot(rows, summaries, png)
        paths.append(png)
    log_figures(figs, exp_dir / "tensorboard", name)  # beside the sweep's own view (write_sweep_view)
    text = render_markdown(exp_dir, rows, summaries, sweep, png, tuning, left_out, unreadable)
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
    ViT"): a trend only from the paired interval of the change."""
    sweep = read_record(exp_dir / "sweep.json")
    summaries, _ = planned(collect(exp_dir), sweep)
    rows = [r for r in aggregate(summaries) if r["family"] in ("vit", REFERENCE)]
    scope = min((r["_scope"] for r in rows), default=None)  # the first recipe where several ran
    by = {(r["family"], r["train_size"]): r for r in rows if r["_scope"] == scope and not r["settings"]}
    sizes = sorted(n for f, n in by if f == "vit" and (REFERENCE, n) in by)
    if not sizes:
        return []
    profiles = ", ".join(sorted((sweep.get("profiles") or {}))) or "?"
    small, large = sizes[0], sizes[-1]

    def behind(*ns):  # the rows a reading rests on: (runs still improving, runs)
        rows = [by[f, n] for f in ("vit", REFERENCE) for n in ns]
        return sum(r["still_improving"] for r in rows), sum(r["seeds"] for r in rows)
    used = [by[f, n] for f in ("vit", REFERENCE) for n in {small, large}]
    where = source("datascale", profiles, [s for r in used for s in r["_runs"]], whose(exp_dir))
    gap = paired_difference(_by_seed(by["vit", small]), _by_seed(by[REFERENCE, small]))
    out = [Finding("Scarce data: is ViT below the ResNet?",
                   "yes: ResNets ahead on ImageNet-1k and 9M-30M JFT images (ViT paper Fig. 3-4)",
                   f"ViT − ResNet at {small:,} images: {estimate_text(gap)}",
                   read(gap, "ViT above", "ViT below, as published", *behind(small)), where)]
    if large > small:
        improving, runs = behind(small, large)
        change = _trend(by["vit", small], by[REFERENCE, small], by["vit", large], by[REFERENCE, large])
        out.append(Finding("As data grows, does ViT catch up?",
                           "yes: ViT overtakes from ~100M images, ResNets plateau sooner (ViT paper Fig. 4)",
                           f"change of ViT − ResNet from {small:,} to {large:,} images: {estimate_text(change)}",
                           read(change, "ViT catches up, as published", "ViT falls behind", improving, runs), where))
    return out

