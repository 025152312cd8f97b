"""The one vocabulary every generated reading uses to put a paired difference into words.

A paired difference (statistics.Estimate: mean, 95% half-width, pairs) of one kind of quantity
(MARGINS: each kind's equivalence margin, declared here once and listed in the README's legend) earns
- "no difference" whenever the whole 95% interval lies inside [-margin, +margin], bounds included
  (even an interval that excludes 0: a difference smaller than the margin is none the readings name);
- else a direction (the caller's words: "higher"/"lower", "widens"/"narrows", ...) when its 95%
  interval excludes 0;
- otherwise "cannot tell" ("one seed, no interval" where there is none).
Each of the three says its interval and margin in one fixed form (`READING`), so that every
committed reading can be checked against this rule from its text (tests/test_vocabulary.py).
"""
from __future__ import annotations

import re
import statistics
from typing import NamedTuple

from experiments.statistics import Estimate
from experiments.report.table_format import plural
from experiments.runs.run.convergence import (CLIMB, RULE_SAID, how_it_climbed, judged, plateau_unknown, points_said,
                                               scatter, still_improving)


class Margin(NamedTuple):
    quantity: str   # what the differences of this kind are differences of
    value: float    # the equivalence margin: a whole interval inside ±value is "no difference"
    why: str        # where the margin's size comes from


MARGINS = {
    "accuracy": Margin("test accuracy (0-1), a difference paired by seed", 0.01,
                       "one accuracy point, the smallest difference a reading names"),
    "robustness": Margin("chance-corrected robustness: the share of its above-chance accuracy a model keeps under "
                         "a probe (0-1), a transformer − CNN difference paired by seed", 0.05,
                         "5% of the clean accuracy above chance"),
    "locality": Margin("attention distance over the uniform-attention distance (a ratio, 1 = uniform), a change "
                       "paired by seed", 0.02, "2% of the uniform distance"),
    "attention growth": Margin("mean attention distance, last layer − first (input pixels)", 1.0,
                               "one pixel, a quarter of a 4-pixel patch"),
    "resolution exponent": Margin("k of FLOPs ∝ resolution^k (counted: no interval; every local k is read)", 0.1,
                                  "a twentieth of the way from 2 (linear in the patches) to 4 (quadratic)"),
}
MARGIN = MARGINS["accuracy"].value  # the kind most readings compare
STILL_IMPROVING = "†"  # the mark of a number from a run still improving at its last validation

# the fixed form in which every verdict read from an interval says it: the interval, the rule it met, the margin
RULES = {"lies within": "no difference", "excludes 0 and reaches beyond": "a direction",
         "includes 0 and reaches beyond": "cannot tell"}
READING = re.compile(r"95% interval \[(?P<lo>[+-]\d+\.\d+), (?P<hi>[+-]\d+\.\d+)\] "
                     r"(?P<rule>" + "|".join(RULES) + r") ±(?P<margin>\d+\.\d+)")
ROUNDING = 5e-5  # the written bounds have 4 decimals: one within this of 0 or the margin may be on either side


def marked_runs(runs: list[tuple[str, object]]) -> list[list[str]]:
    """A report's paragraphs on its runs marked †, each given as (name as the report names it,
    Summary): those still improving by the plateau rule, each with what the rule read (from it a
    longer protocol is chosen), then those with too few validations for the rule to tell."""
    unknown = sorted(name for name, s in runs if plateau_unknown(s))
    improving = sorted((r for r in runs if r[0] not in unknown), key=lambda r: r[0])
    out = [[f"{STILL_IMPROVING} still improving at its last validation: {plural(len(improving), 'run')}, "
            f"each with what the plateau rule read ({RULE_SAID}):", "",
            *(f"- {name}: {how_it_climbed(summary)}" for name, summary in improving)]] if improving else []
    if unknown:
        out.append([f"{STILL_IMPROVING} too few validations to tell whether it plateaued: "
                    f"{plural(len(unknown), 'run')} ({', '.join(unknown)})"])
    return out


def tail_climbs(summaries: list) -> str | None:
    """What the plateau rule let through: of the finished runs read as plateaued, how many still rose
    over their last half by its least-squares slope, and how many by at least CLIMB a quarter (the
    rule passes those whose slope's 95% interval reaches below CLIMB), so a reader sees how flat
    the readings' runs are; then how far their validations stray from that slope (convergence.scatter),
    the noise the rule's numbers are set against (None without such runs)."""
    read = [(s, p) for s in summaries if not still_improving(s) and not s.stopped and (p := judged(s))]
    if not read:
        return None
    rising = [p["climb"] for _, p in read if p["climb"] > 0]
    steep = sum(c >= CLIMB for c in rising)
    spread = sorted(100 * scatter(s) for s, _ in read)
    q1, _, q3 = statistics.quantiles(spread, n=4, method="inclusive") if len(spread) > 1 else (None,) * 3
    return (f"How flat the plateaued runs are: of the {plural(len(read), 'run')} read as plateaued, {len(rising)} "
            f"still rose over their last half by its least-squares slope"
            + (f" (mean {100 * sum(rising) / len(rising):+.2f} points a quarter), {steep} of them by at least "
               f"{points_said(CLIMB)} a quarter, passed because their slope's 95% interval reached below it"
               if rising else "")
            + f". A validation strays from its run's last-half slope by a standard deviation of "
            f"{statistics.median(spread):.2f} points (the median over these runs"
            + (f"; quartiles {q1:.2f} and {q3:.2f}" if q1 is not None else "") + ").")


def not_read(improving: int, runs: int, unknown: int = 0) -> str | None:
    """Converged or silent: the one sentence that stands in for every reading and verdict of a
    profile while any of the `runs` behind it was still improving, `unknown` of them by too few
    validations to tell (None when all plateaued)."""
    if not improving:
        return None
    return (f"Not read: {improving} of the {runs} runs behind these numbers {were_improving(unknown)} "
            f"({STILL_IMPROVING}); the numbers are shown, and no conclusion is drawn from unconverged models.")


def were_improving(unknown: int = 0) -> str:
    return "were still improving at their last validation" + (
        " or had too few validations to tell whether they plateaued" if unknown else "")


def _r(x: float) -> float:
    return round(x, 9)  # a bound within float noise of 0 or of the margin is on it


def side(est: Estimate | None) -> int | None:
    """+1 / -1 when the 95% interval excludes 0 on that side, 0 when it includes (or touches) 0,
    None without an interval."""
    if est is None or est.ci95 is None:
        return None
    value, ci = _r(est.value), _r(est.ci95)
    return 0 if abs(value) <= ci else 1 if value > 0 else -1


def equivalent(est: Estimate | None, margin: float = MARGIN) -> bool:
    """The whole 95% interval lies inside [-margin, +margin] (bounds included)."""
    return side(est) is not None and _r(abs(est.value) + est.ci95) <= _r(margin)


def interval(est: Estimate) -> str:
    return f"[{est.value - est.ci95:+.4f}, {est.value + est.ci95:+.4f}]"


def no_difference(est: Estimate, margin: float = MARGIN) -> str:
    return f"no difference: the whole 95% interval {interval(est)} lies within ±{margin:.4f}"


def cannot_tell(est: Estimate | None, margin: float = MARGIN) -> str:
    if est is None:
        return "cannot tell: no pair"
    if est.ci95 is None:
        return "cannot tell: one seed, no interval"
    return f"cannot tell: the 95% interval {interval(est)} includes 0 and reaches beyond ±{margin:.4f}"


def direction(est: Estimate, words: str, margin: float = MARGIN) -> str:
    return f"{words}: the 95% interval {interval(est)} excludes 0 and reaches beyond ±{margin:.4f}"


def category(est: Estimate | None, margin: float = MARGIN) -> str:
    """The rule alone: "no difference" when the interval lies inside ±margin, else "higher" /
    "lower" when it excludes 0 on that side, else "cannot tell"."""
    if equivalent(est, margin):
        return "no difference"
    return {1: "higher", -1: "lower"}.get(side(est), "cannot tell")


def verdict(est: Estimate | None, higher: str = "higher", lower: str = "lower", margin: float = MARGIN) -> str:
    """The rule's words (`higher` / `lower` for a direction), each with its interval and margin."""
    said = category(est, margin)
    if said == "no difference":
        return no_difference(est, margin)
    if said == "cannot tell":
        return cannot_tell(est, margin)
    return direction(est, higher if said == "higher" else lower, margin)


def size_against(est: Estimate | None, published: float | tuple[float, ...]) -> str:
    """Agreement in size, apart from direction: whether a published difference (or the range of
    several, one per published model) meets our 95% interval, or our whole interval lies above or
    below it. An interval that holds 0 as well as the published size cannot tell the two apart: it
    is consistent with no effect too, so it says "cannot tell", not "consistent"."""
    pub = tuple(published) if isinstance(published, tuple) else (published,)
    low, high = min(pub), max(pub)
    said = f"{low:+.4f}" if low == high else f"{low:+.4f} to {high:+.4f}"
    if est is None or est.ci95 is None:
        return f"in size: not comparable with the published {said} (no interval)"
    lo, hi = est.value - est.ci95, est.value + est.ci95
    if _r(lo) <= _r(high) and _r(low) <= _r(hi):
        if _r(lo) <= 0 <= _r(hi):
            return f"in size: cannot tell: the 95% interval {interval(est)} holds both 0 and the published {said}"
        return f"in size: consistent, the published {said} lies within our interval {interval(est)}"
    where = "above" if _r(lo) > _r(high) else "below"
    return f"in size: disagrees, our interval {interval(est)} lies wholly {where} the published {said}"


def legend() -> list[str]:
    """The vocabulary and its margins, one line each: the README's legend under the Findings."""
    return ["Verdicts: \"no difference\" whenever the whole 95% interval lies inside the margin of its kind of "
            "quantity; else a direction when the interval excludes 0; else \"cannot tell\". Where a published size "
            "exists, agreement in direction and in size are said apart. Margins, one per kind of quantity:",
            *(f"- {m.quantity}: ±{m.value:g} ({m.why})" for m in MARGINS.values())]


def rule_met(lo: float, hi: float, margin: float) -> set[str]:
    """The rules a written interval [lo, hi] meets under `margin` (two only where a bound sits
    within ROUNDING of 0 or of the margin, where the 4 written decimals cannot say which side)."""
    out = set()
    for inside in (-ROUNDING, ROUNDING):
        for excludes in (-ROUNDING, ROUNDING):
            out.add("lies within" if max(abs(lo), abs(hi)) <= margin + inside else
                    "excludes 0 and reaches beyond" if lo > excludes or hi < -excludes else
                    "includes 0 and reaches beyond")
    return out


def misread(text: str) -> list[str]:
    """Every verdict in `text` whose words do not follow from its interval and margin, or whose
    margin is not one of MARGINS, one line each (empty: the text follows the vocabulary)."""
    margins = {f"{m.value:.4f}" for m in MARGINS.values()}
    out = []
    for m in READING.finditer(text):
        lo, hi = float(m["lo"]), float(m["hi"])
        if m["margin"] not in margins:
            out.append(f"{m[0]}: ±{m['margin']} is no declared margin (allowed {', '.join(sorted(margins))})")
        elif m["rule"] not in rule_met(lo, hi, float(m["margin"])):
            out.append(f"{m[0]}: says {RULES[m['rule']]!r}, the interval gives "
                       + " or ".join(repr(RULES[r]) for r in sorted(rule_met(lo, hi, float(m['margin'])))))
    # a verdict's words without its interval (a quoted "no difference" names the word, it is no verdict)
    for words in re.finditer(r'(?<!")(no difference|cannot tell)(?!: (?:the (?:whole )?95% interval|one seed|no pair))',
                             text):
        out.append(f"{text[max(0, words.start() - 60):words.end() + 60]!r}: {words[1]!r} without its interval")
    return out
