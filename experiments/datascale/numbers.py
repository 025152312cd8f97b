"""exp-datascale's numbers: its run records grouped into rows (one configuration over its seeds),
the paired differences to the ResNet, the slopes of log test error against log training images, the
learning-rate tuning, and the claims the reading and the Findings read (the gap between the best
transformer and the best CNN, and its change with data: GapTrend). No sentence is made here
(words.py); the statistics are experiments/statistics.py's.
"""
from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from modules.budgets import FAMILIES, kind_of

from experiments.report.claim import Claim, load_claims
from experiments.report.records import Run, read_runs
from experiments.statistics import Estimate, loglog_error_slope, mean_ci, paired_difference
from experiments.report.table_format import fmt, write_csv
from experiments.runs.run.convergence import judged, plateau_unknown, still_improving
from experiments.runs.run.summary import Summary, Teacher

CLAIMS = load_claims("datascale")  # the claims' fixed words and published results (claims.yaml)

SEED_KEYS = ("seed_everything", "data.seed")   # what varies within a row

AXIS_KEYS = ("model.family", "data.fraction", "data.train_size")  # shown in their own columns

# chosen per training-set size (the tuning stage, the schedule): columns of their own, not settings
SIZE_KEYS = ("model.lr", "model.weight_decay", "trainer.max_steps", "trainer.val_check_interval", "data.val_size")

# what one family sets differently from another without it being another variant
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

TUNING_COLUMNS = ("profile", "family", "variant", "fraction", "train_size", "val_size", "seed")



@dataclass(frozen=True)
class Result:
    """A run as the tables read it: its summary, and what its identity says of it."""
    run: str | None          # its name: the summary's own, or <experiment>/<folder> for a shared run (as the records name it)
    summary: Summary
    settings: dict | None    # what groups it into a row: its identity without the seed (grouping_identity); a
                             # record from before identity.json, the settings it held itself; None without either
    seeds: list | None       # its (seed_everything, data.seed), from its identity


def collect(exp_dir: Path) -> list[Result]:
    """Each readable run (records.read_runs) as a Result."""
    return results(read_runs(exp_dir)[0])


def results(runs: dict[str, Run]) -> list[Result]:
    out = []
    for name, run in runs.items():
        s, ident = run.summary, run.identity
        out.append(Result(name if "/" in name else s.run, s,
                          s.identity if ident is None else grouping_identity(ident, s.teacher),
                          None if ident is None else [ident.get(k) for k in SEED_KEYS]))
    return out


def grouping_identity(ident: dict, teacher: Teacher | None) -> dict:
    """The identity without the seed; a DeiT teacher is named by the student's record of it
    (`teacher`, summary.Teacher): its family-budget and variant (a matched teacher's
    'resnet-at-vit'), not by its own fraction, seed and lr, which follow the student's."""
    out = {k: v for k, v in ident.items() if k not in SEED_KEYS}
    if out.get("model.teacher_checkpoint") and isinstance(teacher, Teacher):
        out["model.teacher_checkpoint"] = teacher.label()
    return out


def _key(ident: dict) -> str:
    return json.dumps(ident, sort_keys=True)


def varying_settings(runs: list[Result]) -> list[str]:
    """Identity keys (other than the seed and the row axes) whose values differ between runs of
    one family (a DeiT teacher is not a difference from a ResNet). A size key (SIZE_KEYS: the
    learning rate chosen per fraction, the steps, the validation images) is one only where two runs
    of the family at the same training-set size and otherwise equal settings differ in it."""
    keys = set()
    for family in {r.summary.family for r in runs}:
        idents = [r.settings for r in runs if r.settings is not None and r.summary.family == family]
        varying = varying_keys(idents)
        plain = [k for k in varying if k not in SIZE_KEYS]
        keys |= set(plain)
        keys |= {k for k in varying if k in SIZE_KEYS and _splits_a_size(idents, k, plain)}
    return sorted(keys)


def varying_keys(idents: list[dict]) -> list[str]:
    keys = sorted({k for i in idents for k in i} - set(AXIS_KEYS))
    return [k for k in keys if len({json.dumps(i.get(k)) for i in idents}) > 1]


def _splits_a_size(idents: list[dict], key: str, plain: list[str]) -> bool:
    values = defaultdict(set)
    for i in idents:
        values[json.dumps([i.get(k) for k in (*AXIS_KEYS, *plain)])].add(json.dumps(i.get(key)))
    return any(len(v) > 1 for v in values.values())


def settings_label(ident: dict, keys: list[str]) -> str:
    return ", ".join(f"{k.split('.', 1)[-1]}={fmt(ident.get(k))}" for k in keys)


def comparison_scope(run: Result) -> str:
    """What a run shares with the runs of other families it is compared with (the variant, budget,
    dataset, split...): its identity without the family's own keys, the size keys and the axes;
    the summary's variant for a run without identity."""
    ident = run.settings
    if ident is None:
        return json.dumps({"variant": run.summary.variant})
    # data.val_size stays: it sets the pool a training subset is drawn from, so the same seed at
    # another val_size trains on other images, and a pair across them would not be paired
    return _key({k: v for k, v in ident.items()
                 if k not in (*FAMILY_KEYS, *AXIS_KEYS) and (k not in SIZE_KEYS or k == "data.val_size")})


def _steps(run: Result):
    """A run's step budget: its max_steps, or for a run bounded by epochs (max_steps -1, as
    fit-families trains) the steps it took once done, which its epochs set."""
    s, ident = run.summary, run.settings or {}
    done_steps = s.steps if s.status == "done" else None
    for v in (s.max_steps, ident.get("trainer.max_steps"), done_steps):
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def values_of(runs: list[dict], get) -> list:
    return sorted({v for v in (get(r) for r in runs) if v is not None}, key=lambda v: (str(type(v)), v))


def shared_value(values: list):
    """The value the runs of a row share; None when none has one; 'a/b' when they differ."""
    if not values:
        return None
    return values[0] if len(values) == 1 else "/".join(fmt(v) for v in values)


def aggregate(runs: list[Result]) -> list[dict]:
    """One row per configuration over its finished seeds: the mean test accuracy with its 95%
    t-interval half-width (test_acc_ci95, None with one seed) and sample standard deviation (None
    with one seed), the paired difference to the ResNet of the same seeds, training subset and
    scope (delta_vs_resnet, delta_vs_resnet_ci95, delta_pairs; None for the ResNet or when no
    pair exists), the validation images, learning rate and steps, and how many of its runs were
    still improving at their last validation. Runs without an identity group by family and
    fraction. Keys starting with "_" are for the other tables (the runs, Results, and their scope)."""
    done = [r for r in runs if r.summary.status == "done" and r.summary.test_acc is not None]
    families = {r.summary.family for r in done}
    keys = {f: varying_settings([r for r in done if r.summary.family == f]) for f in families}
    groups = defaultdict(list)
    for r in done:
        ident = r.settings or {"model.family": r.summary.family, "data.fraction": float(r.summary.fraction)}
        groups[_key(ident)].append(r)
    rows = []
    for group in groups.values():
        summaries = [r.summary for r in group]
        accs = [s.test_acc for s in summaries]
        first = summaries[0]
        acc = mean_ci(accs)
        lr = shared_value(values_of(group, lambda r: (r.settings or {}).get("model.lr")))
        rows.append({"family": first.family, "settings": settings_label(group[0].settings or {}, keys[first.family]),
                     "fraction": float(first.fraction), "train_size": first.train_size,
                     "val_size": shared_value(values_of(summaries, lambda s: s.val_size)), "lr": lr,
                     "weight_decay": shared_value(values_of(group, lambda r: (r.settings or {}).get("model.weight_decay"))),
                     "max_steps": shared_value(values_of(group, _steps)),
                     "test_acc_mean": acc.value, "test_acc_ci95": acc.ci95,
                     "test_acc_std": statistics.stdev(accs) if len(accs) > 1 else None, "seeds": len(accs),
                     "delta_vs_resnet": None, "delta_vs_resnet_ci95": None, "delta_pairs": None,
                     "still_improving": sum(map(still_improving, summaries)),
                     "_plateau_unknown": sum(map(plateau_unknown, summaries)),
                     "params": first.params, "flops_per_image": first.flops_per_image,
                     "images_per_sec": round(statistics.fmean(s.images_per_sec or 0 for s in summaries)),
                     "wall_time_s": round(statistics.fmean(s.wall_time_s or 0 for s in summaries)),
                     "config_hashes": " ".join(sorted({s.config_hash or "" for s in summaries})),
                     "_val_acc_mean": statistics.fmean(s.val_acc_best or 0 for s in summaries),
                     "_runs": sorted(group, key=lambda r: str(r.summary.seed)), "_scope": comparison_scope(group[0])})
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
        d = paired_difference(by_seed(r), by_seed(cands[0]))
        if d is not None:  # a difference is read only where both rows' runs plateaued
            r.update(delta_vs_resnet=d.value, delta_vs_resnet_ci95=d.ci95, delta_pairs=d.n,
                     _delta_improving=bool(r["still_improving"] or cands[0]["still_improving"]))


def by_seed(row: dict) -> dict:
    """seed -> test accuracy, the seed being (seed_everything, data.seed) where the identity is known:
    two runs of one data.seed are two pairs' worth, not one overwriting the other."""
    return {json.dumps(r.summary.seed if r.seeds is None else r.seeds): r.summary.test_acc for r in row["_runs"]}


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
        pts = [(run.summary.train_size, run.summary.test_acc) for r in rs for run in r.get("_runs", [])]
        est = loglog_error_slope(pts)
        used = [(n, a) for n, a in pts if a < 1]  # an error of 0 has no log: loglog_error_slope drops it
        out.append({"family": family, "settings": settings, "slope": est.value if est else None,
                    "slope_ci95": est.ci95 if est else None, "points": len(used),
                    "train_sizes": " ".join(str(n) for n in sorted({n for n, _ in used})),
                    "still_improving": sum(r["still_improving"] for r in rs)})
    return out


def best_row(rows: list[dict], on: str = "test_acc_mean") -> dict:
    """The row with the highest mean `on`: test accuracy to report who is highest, validation
    accuracy ('_val_acc_mean') to choose which rows a comparison reads."""
    return max(rows, key=lambda r: (r[on], -list(FAMILIES).index(r["family"]) if r["family"] in FAMILIES else 0))


def sizes_with_both(rows: list[dict]) -> list[int]:
    """The training-set sizes at which both a transformer and a CNN ran, smallest first."""
    return sorted(n for n in {r["train_size"] for r in rows}
                  if {kind_of(r["family"]) for r in rows if r["train_size"] == n} >= {"transformer", "CNN"})


def best_of_kinds(rows: list[dict], n: int) -> tuple[dict, dict]:
    """The best transformer and the best CNN at `n` images by mean validation accuracy: a choice,
    so never made on test."""
    at = [r for r in rows if r["train_size"] == n]
    return tuple(best_row([r for r in at if kind_of(r["family"]) == kind], on="_val_acc_mean")
                 for kind in ("transformer", "CNN"))


@dataclass(frozen=True)
class GapTrend:
    """Best transformer − best CNN at the smallest and the largest size both kinds ran at, and the
    claim on its change (`claim`; no estimate at one size) and on each transformer's change against
    the best CNN (`each`: its rows at both ends and its claim). `start`/`end`: the mean gaps over the
    seeds the change pairs, rounded as written; `sizes`: every size both kinds ran at."""
    sizes: tuple[int, ...]
    small: tuple[dict, dict]
    large: tuple[dict, dict]
    claim: Claim
    start: float
    end: float
    each: tuple[tuple[dict, dict, Claim], ...]

    @property
    def verdict(self) -> str | None:
        """The claim's category, where a direction counts only when the written endpoints move the
        same way as the paired interval (a trend only from the interval, never from the endpoints)."""
        said = self.claim.category
        moved = (self.end > self.start) - (self.end < self.start)
        if said in ("higher", "lower") and {"higher": 1, "lower": -1}[said] != moved:
            return "cannot tell"
        return said


def winner_claim(rows: list[dict], sizes: list[int]) -> Claim:
    """Which family has the highest mean test accuracy at `sizes`: a ranking of means, no paired
    difference, resting on every run of those sizes (a winner is known only when all plateaued)."""
    there = [r for r in rows if r["train_size"] in sizes]
    return Claim(CLAIMS["winner"], None, runs=sum(r.get("seeds", 1) for r in there),
                 improving=sum(r.get("still_improving") or 0 for r in there),
                 unknown=sum(r.get("_plateau_unknown") or 0 for r in there))


def gap_trend(rows: list[dict]) -> GapTrend | None:
    """The transformer − CNN gap of one comparison scope's rows and its change with data (None where
    no size has both kinds). Its claims rest on every row of either kind at both ends: the best of a
    kind is known only when all of them have plateaued."""
    both = sizes_with_both(rows)
    if not both:
        return None
    small, large = best_of_kinds(rows, both[0]), best_of_kinds(rows, both[-1])
    used = [r for r in rows if r["train_size"] in (both[0], both[-1]) and kind_of(r["family"])]
    behind = dict(runs=sum(r.get("seeds", 1) for r in used), improving=sum(r.get("still_improving") or 0 for r in used),
                  unknown=sum(r.get("_plateau_unknown") or 0 for r in used))
    ends = (*small, *large)
    change = gap_change(*ends) if len(both) > 1 else None
    each = tuple((t0, t1, Claim(CLAIMS["each_transformer"], gap_change(t0, small[1], t1, large[1]), **behind))
                 for t0, t1 in _transformer_ends(rows, both[0], both[-1])) if len(both) > 1 else ()
    return GapTrend(tuple(both), small, large, Claim(CLAIMS["gap_trend"], change, **behind), *paired_gaps(*ends), each)


def _transformer_ends(rows: list[dict], small: int, large: int) -> list[tuple[dict, dict]]:
    """Each transformer (family and settings, first-seen order) with a row at both sizes: its two rows."""
    out = []
    for key in dict.fromkeys((r["family"], r.get("settings")) for r in rows):
        ends = [next((r for r in rows if (r["family"], r.get("settings")) == key and r["train_size"] == n), None)
                for n in (small, large)]
        if kind_of(key[0]) == "transformer" and None not in ends:
            out.append(tuple(ends))
    return out


def gap_change(t_small: dict, c_small: dict, t_large: dict, c_large: dict) -> Estimate | None:
    """(transformer − CNN at the largest size) − (the same at the smallest), paired by seed (a
    seed also draws the training subset): only seeds all four rows ran enter."""
    small, large = _gaps_by_seed(t_small, c_small, t_large, c_large)
    return paired_difference(large, small)


def paired_gaps(t_small: dict, c_small: dict, t_large: dict, c_large: dict) -> tuple[float, float]:
    """The mean gap at the smallest and the largest size over the seeds `gap_change` pairs, rounded as
    printed: the words of a trend ("narrows from .. to ..") agree with its paired interval."""
    small, large = _gaps_by_seed(t_small, c_small, t_large, c_large)
    return (round(statistics.fmean(small.values()), 4), round(statistics.fmean(large.values()), 4)) if small else (0.0, 0.0)


def _gaps_by_seed(t_small: dict, c_small: dict, t_large: dict, c_large: dict) -> tuple[dict, dict]:
    """{seed: transformer − CNN} at the smallest and the largest size, over the seeds all four rows ran."""
    small, large = by_seed(t_small), by_seed(t_large)
    c_s, c_l = by_seed(c_small), by_seed(c_large)
    keys = sorted(set(small) & set(large) & set(c_s) & set(c_l))
    return {k: small[k] - c_s[k] for k in keys}, {k: large[k] - c_l[k] for k in keys}


def same_value(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def short_key(key: str) -> str:
    return key.split(".", 1)[-1]


def tuning_trials(tuning: dict) -> list[dict]:
    """Every trial of tuning.json, one dict per trial with its profile and 'chosen' (whether a
    choice took its lr, or grid values, at its own fraction: the choice's tuned_at)."""
    out = []
    for profile, rec in sorted((tuning.get("profiles") or {}).items()):
        grid = [short_key(k) for k in (rec.get("grid") or {"model.lr": []})]
        choices = rec.get("choices") or []
        for t in rec.get("trials") or []:
            chosen = any(c.get("family") == t.get("family") and c.get("variant", "default") == t.get("variant", "default")
                         and same_value(c.get("tuned_at", c.get("fraction")), t.get("fraction"))
                         and all(same_value(c.get(k), t.get(k)) for k in grid) for c in choices)
            out.append({"profile": profile, **t, "chosen": chosen})
    return out


def rejudged(tuning: dict, runs: dict[str, Run]) -> dict:
    """tuning.json with each trial's plateau judged again by today's rule from its run's record (the
    record keeps the curve; the flag in tuning.json is the rule of the day the trial ran)."""
    def trial(t: dict) -> dict:
        run = runs.get(t.get("run")) if isinstance(t, dict) and isinstance(t.get("run"), str) else None
        s = run.summary if run else None
        return {**t, "plateaued": (judged(s) or {}).get("plateaued")} if s and s.val_history else t
    return {**tuning, "profiles": {p: {**rec, "trials": [trial(t) for t in rec.get("trials") or []]}
                                   for p, rec in (tuning.get("profiles") or {}).items()}} if tuning else tuning


def planned(runs: list[Result], sweep: dict, tuning: dict | None = None) -> tuple[list[Result], list[Result]]:
    """(runs the table covers, finished runs it leaves out). When the sweep recorded its main
    stage's runs (sweep.json, per profile), a finished run outside that plan and outside its tuning
    trials (tuning.json), e.g. one trained at a learning rate or for steps an earlier plan chose, is
    left out of the rows and the counts: one row per current choice. (Other experiments may read
    such a run: exp-distill's teachers, exp-inductive-bias's family runs.)"""
    plan = {name for rec in (sweep.get("profiles") or {}).values() for name in (rec.get("main_runs") or {}).values()}
    if not plan:
        return runs, []
    trials = {t.get("run") for rec in ((tuning or {}).get("profiles") or {}).values() for t in rec.get("trials") or []
              if isinstance(t, dict)}
    out = [r for r in runs if r.summary.status in ("done", "fitted") and r.run not in plan | trials]
    return [r for r in runs if r not in out], out


def efficiency_threshold(sweep: dict) -> float:
    values = [p.get("sample_efficiency_accuracy") for p in (sweep.get("profiles") or {}).values()]
    return next((v for v in values if v), 0.8)


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


def write_tuning_csv(tuning: dict, path: Path) -> None:
    trials = tuning_trials(tuning)
    metrics, grid = [], []
    for rec in (tuning.get("profiles") or {}).values():
        metrics.append(rec.get("metric", "val_acc_best"))
        grid += [short_key(k) for k in (rec.get("grid") or {"model.lr": []})]
    fixed = [*TUNING_COLUMNS, *dict.fromkeys(grid), *dict.fromkeys(metrics), "plateaued", "status", "run"]
    extra = sorted({k for t in trials for k in t} - set(fixed) - {"chosen"})
    write_csv(path, ({k: "" if v is None else str(v).lower() if isinstance(v, bool) else fmt(v)
                      for k, v in t.items()} for t in trials), [*fixed, *extra, "chosen"])
