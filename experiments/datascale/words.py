"""exp-datascale's words: results/datascale.md from the rows of numbers.py, its reading of who wins
and whether the transformer-CNN gap narrows (one Claim per verdict, its fixed words in claims.yaml,
read through the shared vocabulary: experiments/report/verdicts.py), and the learning-rate tuning.
"""
from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path

from modules.budgets import FAMILIES, kind_of, reading_order

from experiments.datascale.numbers import (CLAIMS, REFERENCE, SHOWN_COMMON, GapTrend, Result, best_row, efficiency_threshold,
                                           error_slopes, gap_trend, sample_efficiency, same_value, settings_label,
                                           shared_value, short_key, tuning_trials, values_of, varying_keys,
                                           varying_settings, winner_claim)
from experiments.report.records import LeftOut, left_out_line
from experiments.statistics import Estimate
from experiments.report.table_format import count, fmt, plural, plus_minus
from experiments.report.verdicts import STILL_IMPROVING, cannot_tell, marked_runs, tail_climbs
from experiments.runs.run.convergence import TIE, still_improving
from experiments.runs.sweep.reference import whose_runs

WINNER = CLAIMS["winner"].said  # the words before each size's winner

def _provenance(runs: list[Result]) -> list[str]:
    def values(key):
        recorded = [getattr(r.summary, key) for r in runs]
        return sorted({json.dumps(v, sort_keys=True) if isinstance(v, dict) else str(v) for v in recorded if v is not None})
    lines = [f"- hardware: {'; '.join(values('hardware'))}",
             f"- code: commit {', '.join(values('commit'))}"]
    for v in values("versions"):
        lines.append("- versions: " + ", ".join(f"{k} {x}" for k, x in json.loads(v).items()))
    return lines


def common_settings(runs: list[Result]) -> str:
    """The settings every run of the table shares, of those a reader needs to place it."""
    idents = [r.settings for r in runs if r.settings is not None]
    shown = []
    for k in SHOWN_COMMON:
        vals = {json.dumps(i.get(k)) for i in idents}
        if idents and len(vals) == 1 and idents[0].get(k) not in (None, -1):
            shown.append(f"{k.split('.', 1)[1]} {fmt(idents[0][k])}")
    seeds = sorted({r.summary.seed for r in runs if r.summary.seed is not None})
    return ", ".join(shown) + f"; seeds {seeds}"


def _family_settings(runs: list[Result]) -> list[str]:
    """Shown settings that differ between families but not within one (e.g. a precision that
    depended on the machine a family was rerun on)."""
    known = [r for r in runs if r.settings is not None]
    families = list(dict.fromkeys(r.summary.family for r in known))
    out = []
    for k in SHOWN_COMMON:
        values = {f: {json.dumps(r.settings.get(k)) for r in known if r.summary.family == f} for f in families}
        if all(len(v) == 1 for v in values.values()) and len({next(iter(v)) for v in values.values()}) > 1:
            by_value = defaultdict(list)
            for f, v in values.items():
                by_value[json.loads(next(iter(v)))].append(f)
            out.append(f"{k.split('.', 1)[1]} " + "; ".join(f"{fmt(v)} ({', '.join(fs)})" for v, fs in by_value.items()))
    return out


def scaling_reading(rows: list[dict]) -> list[str]:
    """Sentences from the numbers, one paragraph per comparison scope (variant; rows carry it as
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
    keys = varying_keys(list(parsed.values())) if len(scopes) > 1 else []
    return {s: settings_label(p, keys) if keys else "" for s, p in parsed.items()}


def _reading(rows: list[dict]) -> str:
    sizes = sorted({r["train_size"] for r in rows})
    settings = defaultdict(set)
    for r in rows:
        settings[r["family"]].add(r.get("settings"))

    def _name(row):  # its settings only where the family has several in this scope
        return f"{row['family']} ({row['settings']})" if len(settings[row["family"]]) > 1 else row["family"]
    silent = [n for n in sizes if not winner_claim(rows, [n]).converged]  # converged or silent: no winner read here
    wins = []
    for n in (n for n in sizes if n not in silent):
        at = [r for r in rows if r["train_size"] == n]
        best = best_row(at)
        tied = [r for r in at if r["test_acc_mean"] == best["test_acc_mean"]]
        wins.append((" and ".join(_name(r) for r in tied), n, best["test_acc_mean"]))
    if len(sizes) > 1 and not silent and len({w for w, _, _ in wins}) == 1:
        text = (f"{WINNER}: {wins[0][0]} at every training-set size ("
                + ", ".join(f"{a:.4f} at {n:,} images" for _, n, a in wins) + ").")
    else:
        text = (f"{WINNER}: " + "; ".join(f"{w} at {n:,} images ({a:.4f})" for w, n, a in wins) + "."
                if wins else "")
    if silent:
        where = ", ".join(f"{n:,}" for n in silent) + " images"
        unread = winner_claim(rows, silent).not_read_at(where)
        if not wins:  # no size's winner said before it: the sentence names what it does not read
            unread = f"{WINNER}: n{unread[1:]}"
        text = f"{text} {unread}".strip()
    kinds = {kind_of(r["family"]) for r in rows} - {None}
    if kinds != {"transformer", "CNN"}:
        have = ", ".join(sorted({r["family"] for r in rows if kind_of(r["family"])}))
        lacking = "CNN" if "CNN" not in kinds else "transformer"
        missing = f"no {lacking} ({', '.join(f for f in reading_order() if kind_of(f) == lacking)})"
        return text + f" Transformers against CNNs can't be compared here: {missing} ran" + (f" (only {have})." if have
                                                                                              else ".")
    trend = gap_trend(rows)
    if trend is None:
        return text + " Transformers against CNNs can't be compared: no training-set size has both."
    return text + _gap_text(trend, silent, _name)


def _gap_text(trend: GapTrend, silent: list[int], name) -> str:
    """The gap at both ends and the verdict on its change (converged or silent: nothing while a run
    behind it still improved, beyond the "Not read at ..." of sizes already named)."""
    small, large = trend.sizes[0], trend.sizes[-1]
    claim = trend.claim
    if not claim.converged:  # its sizes all named already: say only that the gap goes unread too
        return (" Best transformer minus best CNN: not read there either." if set(trend.sizes) <= set(silent)
                else " " + claim.not_read())

    def said(t, c):  # with each one's steps where they differ (each trained to its own plateau)
        n, steps = t["train_size"], (t.get("max_steps"), c.get("max_steps"))
        at = (lambda r: f" at {r['max_steps']:,} steps") if steps[0] != steps[1] and all(
            isinstance(x, int) for x in steps) else (lambda r: "")
        return (f"{t['test_acc_mean'] - c['test_acc_mean']:+.4f} at {n:,} images ({name(t)} {t['test_acc_mean']:.4f}"
                f"{at(t)} vs {name(c)} {c['test_acc_mean']:.4f}{at(c)})")
    best = "Best transformer minus best CNN (each chosen by mean validation accuracy)"
    if small == large:
        return (f" {best}: {said(*trend.small)}; both kinds ran at this one training-set "
                "size only, so whether the gap narrows can't be told.")
    words, change = claim.wording, claim.estimate
    text = (f" {best}: {said(*trend.small)}, {said(*trend.large)}. The change of the gap from "
            f"{small:,} to {large:,} images, paired by seed: {_signed(change)}: ")
    text += {"no difference": f"{claim.said()}: {words.same}.",
             "cannot tell": f"{cannot_tell(change, words.margin_value)}; {words.unsure}."}.get(
        trend.verdict, f"{claim.said()}; {_trend_words(trend.start, trend.end, words.published)}")
    text += _each_transformer(trend, name)
    used = [*trend.small, *trend.large]
    if any(r.get("test_acc_ci95") is None for r in used):
        text += " Some of these means rest on one seed (no interval): a single draw, not a measured trend."
    else:
        text += f" The 95% intervals of these means are up to ±{max(r['test_acc_ci95'] for r in used):.4f}."
    return text


def _trend_words(d1: float, d2: float, published: str) -> str:
    """What a trend of the transformer − CNN gap from d1 (smallest size) to d2 (largest) says of the
    paper's claim (`published`)."""
    paper, opposite = "as the paper says.", f"the opposite of the paper's claim that {published}."
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


def _each_transformer(trend: GapTrend, name) -> str:
    """With several transformers: each one's difference to the best CNN at the smallest and the
    largest size, so that the best transformer's trend is not read as every transformer's."""
    if len(trend.each) < 2:
        return ""
    (_, c0), (_, c1) = trend.small, trend.large
    text = (f" Each transformer minus the best CNN, {c0['train_size']:,} to {c1['train_size']:,} images, and the change "
            "paired by seed: " + ", ".join(
                f"{name(t0)} {t0['test_acc_mean'] - c0['test_acc_mean']:+.4f} to "
                f"{t1['test_acc_mean'] - c1['test_acc_mean']:+.4f} ({_signed(claim.estimate)}: {claim.read()})"
                for t0, t1, claim in trend.each) + ".")
    if {claim.category for *_, claim in trend.each} >= {"higher", "lower"}:
        text += " They disagree: the best transformer's trend is not every transformer's."
    return text


def _signed(est: Estimate | None) -> str:
    if est is None:
        return "no seed ran at both sizes"
    return f"{est.value:+.4f}" + (f" ± {est.ci95:.4f}" if est.ci95 is not None else "") + \
        f" ({est.n} pair{'s' if est.n != 1 else ''})"


def render_tuning(tuning: dict) -> list[str]:
    """The section on the learning rates chosen on validation: per profile a grid (rows family x
    tuned fraction [x variant], columns the grid's values, cells the validation metric, the chosen
    one in bold) and one line per family with the lr each fraction uses."""
    out = ["## Learning rate, chosen on validation accuracy only", ""]
    trials = tuning_trials(tuning)
    profiles = tuning.get("profiles") or {}
    order = {f: i for i, f in enumerate(FAMILIES)}
    for profile, rec in sorted(profiles.items()):
        grid_keys = list(rec.get("grid") or {"model.lr": []})
        short = [short_key(k) for k in grid_keys]
        metric = rec.get("metric", "val_acc_best")
        mine = [t for t in trials if t["profile"] == profile]
        combos = list(itertools.product(*(rec.get("grid") or {}).values())) if rec.get("grid") else []
        for t in mine:
            c = tuple(t.get(k) for k in short)
            if not any(all(same_value(a, b) for a, b in zip(c, x)) for x in combos):
                combos.append(c)
        variants = list(dict.fromkeys(t.get("variant", "default") for t in mine))
        seeds = sorted({t["seed"] for t in mine if t.get("seed") is not None}) or (
            [rec["seed"]] if rec.get("seed") is not None else [])
        out += [(f"Profile {profile}: each" if len(profiles) > 1 else "Each") + f" family trained at every "
                f"{' x '.join(short)} of the grid at the tuned fractions"
                + (f" (seed {', '.join(fmt(s) for s in seeds)})" if seeds else "") + "; "
                f"the cells are {metric} on the validation images, the test set is never read; **bold**: the "
                f"one chosen (the best; within {TIE * 100:g} point of it, a tie, a trial that plateaued is "
                f"preferred); {STILL_IMPROVING}: still improving at its last validation.", ""]
        head = ["family", *(["variant"] if len(variants) > 1 else []), "tuned fraction", "train images", "val images",
                *(", ".join(f"{k} {fmt(v)}" for k, v in zip(short, c)) for c in combos)]
        out += ["| " + " | ".join(head) + " |", "|---|" + ("---|" if len(variants) > 1 else "")
                + "---:|" * (len(head) - 1 - (len(variants) > 1))]
        cells = defaultdict(list)
        for t in mine:
            cells[t.get("family"), t.get("variant", "default"), t.get("fraction")].append(t)
        for (family, variant, fraction), ts in sorted(cells.items(), key=lambda kv: (
                order.get(kv[0][0], 99), str(kv[0][0]), variants.index(kv[0][1]), kv[0][2] or 0)):
            line = [family, *([variant] if len(variants) > 1 else []), fmt(fraction),
                    count(shared_value(values_of(ts, lambda t: t.get("train_size")))),
                    count(shared_value(values_of(ts, lambda t: t.get("val_size"))))]
            for c in combos:
                hit = [t for t in ts if all(same_value(t.get(k), v) for k, v in zip(short, c))]
                line.append("; ".join(_trial_cell(t, metric) for t in hit))
            out.append("| " + " | ".join(line) + " |")
        out += ["", "The learning rate each fraction uses (tuned at the nearest tuned fraction):", ""]
        by_family = defaultdict(list)
        for c in rec.get("choices") or []:
            by_family[c.get("family"), c.get("variant", "default")].append(c)
        for (family, variant), cs in sorted(by_family.items(), key=lambda kv: (order.get(kv[0][0], 99), str(kv[0][0]),
                                                                               str(kv[0][1]))):
            parts = defaultdict(list)
            for c in sorted(cs, key=lambda c: c.get("fraction") or 0):
                parts[json.dumps([c.get(k) for k in short]), json.dumps(c.get("tuned_at"))].append(c.get("fraction"))
            said = "; ".join(
                ", ".join(f"{k} {fmt(v)}" for k, v in zip(short, json.loads(vals))) + " at fraction"
                + ("s " if len(fs) > 1 else " ") + ", ".join(fmt(f) for f in fs)
                + (f" (tuned at {fmt(json.loads(at))})" if json.loads(at) is not None else "")
                for (vals, at), fs in parts.items())
            out.append(f"- {family}" + (f" ({variant})" if len(variants) > 1 else "") + f": {said}")
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


def unfinished_line(runs: list[Result], sweep: dict) -> list[str]:
    """The runs of the sweep's plan (sweep.json's main runs) not finished yet: a partial sweep's
    table shows its finished cells and names the missing ones. Before the first invocation has
    recorded its plan, the unfinished run folders (interrupted or still running) are named."""
    plan = {key: run for rec in (sweep.get("profiles") or {}).values() for key, run in (rec.get("main_runs") or {}).items()}
    if plan:
        done = {r.run for r in runs if r.summary.status == "done"}
        missing = sorted(key for key, run in plan.items() if run not in done)
        return [f"- not finished yet: {len(missing)} of the {plural(len(plan), 'run')} in the sweep's plan, so their "
                f"cells are missing: {', '.join(missing)}"] if missing else []
    started = sorted(r.run for r in runs if r.summary.status not in ("done", "fitted", "failed", "diverged"))
    return [f"- not finished yet: {', '.join(started)}; the sweep records its whole plan (sweep.json) when an "
            "invocation ends, so runs not started yet are not listed"] if started else []


def not_run_line(runs: list[Result], sweep: dict, spec_name: str) -> list[str]:
    """The cells of each recorded profile, as its spec stands now (families x fractions x seeds x
    variants), that no finished run fills and the recorded plan does not name (unfinished_line names
    those): a family or size added to the spec since the last invocation, or a sweep stopped before
    it recorded its plan. Families in spec order, each with its missing sizes and run count."""
    from experiments.runs.run.identity import plan_key, run_name
    from datamodules.splits import resolve_train_size
    from experiments.runs.sweep.spec import load_spec, resolve_axes
    try:
        spec = load_spec(spec_name)
    except (OSError, ValueError):
        return []  # a folder no spec plans (a hand-made experiment): nothing to compare with
    planned = {key for rec in (sweep.get("profiles") or {}).values() for key in (rec.get("main_runs") or {})}
    out = []
    for profile in (sweep.get("profiles") or {}):
        if profile not in spec.get("profiles", {}):
            continue
        ax = resolve_axes(spec, profile)
        done = {(r.summary.family, r.summary.fraction, str(r.summary.seed), r.summary.variant or "default")
                for r in runs if r.summary.status == "done" and r.summary.budget in (None, ax["budget"])
                and r.summary.dataset in (None, ax["dataset"])}  # None: a record older than those fields
        missing = defaultdict(list)
        for family, fraction, seed, variant in itertools.product(ax["families"], ax["fractions"], ax["seeds"],
                                                                 ax["variants"]):
            key = plan_key(run_name(family, ax["budget"], ax["dataset"], fraction, seed, variant, 1.0))
            if (family, fraction, str(seed), variant) not in done and key not in planned:
                missing[family].append(fraction)
        if missing:
            pool = (sweep["profiles"][profile].get("pool_size") or 59_000)
            parts = [f"{f} at {', '.join(f'{resolve_train_size(x, None, pool):,}' for x in dict.fromkeys(fs))} images "
                     f"({plural(len(fs), 'run')})" for f, fs in missing.items()]
            out.append(f"- not run yet in the {profile} profile as its spec stands: {'; '.join(parts)}")
    return out


def render_markdown(exp_dir: Path, rows, runs: list[Result], sweep: dict, plot: Path | None, tuning: dict | None = None,
                    left_out: list[Result] = (), unreadable: list[LeftOut] = ()) -> str:
    name = exp_dir.name
    threshold = efficiency_threshold(sweep)
    settings = list(dict.fromkeys(r["settings"] for r in rows))
    with_settings = any(settings)
    with_wd = any(isinstance(r["weight_decay"], str) for r in rows) or len({r["weight_decay"] for r in rows}) > 1
    wall = sum(r.summary.wall_time_s or 0 for r in runs)
    sizes = sorted({r["train_size"] for r in rows})
    out = [f"# {name}: test accuracy " + ("against training-set size" if len(sizes) != 1
                                          else f"per family on {sizes[0]:,} training images"), "",
           f"Generated by `make tables` from {exp_dir.as_posix()}/*/summary.json; do not edit by hand.",
           whose_runs(exp_dir), "",
           f"- every run: {common_settings(runs)}"]
    by_family = _family_settings(runs)
    if by_family:
        out.append(f"- by family: {'; '.join(by_family)}")
    keys = varying_settings([r for r in runs if r.summary.status == "done"])
    if keys:
        out.append(f"- settings that differ between rows: {', '.join(keys)} (never averaged together)")
    statuses = defaultdict(int)
    for r in runs:
        statuses[r.summary.status] += 1
    out.append(f"- runs: {len(runs)} ({', '.join(f'{n} {k}' for k, n in sorted(statuses.items()))}); "
               f"wall time summed over runs (fit only): {wall / 60:.1f} min"
               + ("; fitted: trained, never tested (tuning trials not chosen)" if statuses.get("fitted") else ""))
    out += unfinished_line(runs, sweep) + not_run_line(runs, sweep, name)
    if unreadable:
        out.append(f"- {left_out_line(unreadable)}")
    packed = [r.summary for r in runs if r.summary.engine]
    if packed:
        groups = {s.engine["group"] for s in packed}
        out.append(f"- engine: {len(packed)} of the runs trained packed, in {len(groups)} groups (sweep --pack; "
                   "each member's record is the one its own fit would write)")
    if left_out:
        out.append(f"- not in the table: {len(left_out)} finished runs outside the sweep's current plan (trained at a "
                   f"learning rate or for steps an earlier plan chose; other experiments may read them): "
                   f"{', '.join(sorted(r.run for r in left_out))}")
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
    out += [*_provenance(runs), ""]
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
    notes = [[speed]] if (speed := _speed_machines(rows)) else []
    notes += marked_runs([(x.run, x.summary) for r in rows for x in r["_runs"] if still_improving(x.summary)])
    if notes and any(r.get("_delta_improving") for r in rows):
        notes.append([f"A Δ vs {REFERENCE} is marked {STILL_IMPROVING} when either of its rows is."])
    flat = tail_climbs([x.summary for r in rows for x in r["_runs"]])
    notes += [[flat]] if flat else []
    out += [line for note in notes for line in ("", *note)]
    deit = [r for r in runs if r.summary.family == "deit" and r.summary.status == "done" and r.summary.test]
    if deit:
        out += ["", "DeiT's heads on test (cls / distillation / the head the table reports):", ""]
        out += [f"- {r.run}: {r.summary.test.get('acc_cls', float('nan')):.4f} / "
                f"{r.summary.test.get('acc_dist', float('nan')):.4f} / {r.summary.test['acc']:.4f}"
                + (f" {STILL_IMPROVING}" if still_improving(r.summary) else "") for r in deit]
    out += ["", "## What the numbers say", "", *(f"{p}\n" for p in scaling_reading(rows))]
    slopes = error_slopes(rows) if len({r["train_size"] for r in rows}) > 1 else []  # one size: no slope
    out += [] if not slopes else ["## Slope of log test error vs log n", "",
            "Least squares over every finished run (seeds are separate points), ± the half-width of its 95% "
            "t-interval (df = points - 2; n/a with fewer than 3 points or one training-set size). More negative: "
            "the error falls faster as data grows; the paper's claim is a steeper slope for transformers. The "
            "table pools seeds and compares no two families: the paired reading of the same claim is "
            "each family's change of its gap to the ResNet from the smallest to the largest size, by seed (the "
            "README's Findings, \"does it catch up\").", "",
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

    largest = {}  # (family or None: every family, settings) -> the largest training set run
    for r in rows:
        for key in ((r["family"], r["settings"]), (None, r["settings"])):
            largest[key] = max(largest.get(key, 0), r["train_size"])

    def cell(family: str, st: str) -> str:
        if (family, st) not in eff:
            return ""
        size, run_to = eff[family, st], largest[family, st]
        # a family not yet run at the column's largest sizes may reach it there: say how far it was run
        missed = "not reached" + (f" up to {run_to:,}" if run_to < largest[None, st] else "")
        return (missed if size is None else f"{size:,}") + (f" {STILL_IMPROVING}" if unread(family, st) else "")
    for family in dict.fromkeys(r["family"] for r in rows):
        out.append(f"| {family} | " + " | ".join(cell(family, st) for st in settings) + " |")
    if any(unread(*key) for key in eff):
        out += ["", f"{STILL_IMPROVING}: runs at that size or a smaller one were still improving at their last "
                "validation (at any size, where never reached): a longer run could move it; shown, not read."]
    if tuning and (tuning.get("profiles") or {}):
        out += ["", *render_tuning(tuning)]
    bad = [r for r in runs if r.summary.status in ("failed", "diverged")]
    if bad:
        out += ["", "Runs left out of the table:", ""] + [f"- {r.run}: {r.summary.status} ({r.summary.error or ''})"
                                                           for r in bad]
    if plot is not None:
        out += ["", f"![test error against training images]({plot.name})"]
    return "\n".join(out) + "\n"


def _speed_machines(rows: list[dict]) -> str:
    """Where rows trained on different machines, which trained where: their img/s and minutes are each
    machine's own, so they compare in speed only within one. '' when every row trained on one."""
    sizes = len({r["fraction"] for r in rows}) > 1
    by: dict[str, list[str]] = {}
    for r in rows:
        machines = "; ".join(sorted({x.summary.hardware for x in r["_runs"] if x.summary.hardware})) or "unrecorded"
        by.setdefault(machines, []).append(r["family"] + (f" at {r['fraction']:g}" if sizes else ""))
    if len(by) < 2:
        return ""
    return ("train img/s and fit min are measured where each row trained, and rows trained on different machines "
            "do not compare in speed: " + "; ".join(f"{', '.join(names)} on {m}" for m, names in by.items()) + ".")

