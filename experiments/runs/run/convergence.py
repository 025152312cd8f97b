"""When a run has converged: the plateau rule every run is judged by.

A run plateaued when the validations of its last half of steps show no climb worth more steps:
  - the mean validation accuracy of its last quarter is less than TOLERANCE (one point) above the
    mean of the quarter before it, and
  - the least-squares slope of its last half of validations, as accuracy gained per quarter of the
    run, has a 95% t-interval whose lower end stays below CLIMB (half a point).

Why these numbers. TOLERANCE is the verdicts' margin for accuracy (verdicts.MARGIN): a last quarter
that gains less than a difference the readings would call "no difference" is no climb worth more
steps. One validation on 1,000 images near 70-90% accuracy has a sampling standard error of
sqrt(p(1 - p) / 1000) = 0.9-1.45 points against the model's true accuracy, but each validation of a
run reads the same images, so the validations stray from their trend far less: the datascale
report gives the measured standard deviation s about each run's last-half slope. Against it the
difference of two quarters' means of k validations each (k = 5 for the cpu profiles' 20) strays by
chance s * sqrt(2 / k), well under a point where s is under one, so a quarter's gain of a point is
seen. The slope over the last half uses twice the validations and asks for evidence, not a point
estimate: a curve whose climb is certain (95%) to exceed half a point per quarter is still climbing,
even when each quarter's gain alone stays under the tolerance. Asking for evidence lets a noisy
climb pass (tests/test_protocol.py shows one; the datascale report counts the plateaued runs that
still rose).

Why means and a slope, not maxima. The rule it replaces compared the best validation of the last
quarter with the best before it, so one lucky early peak hid a steady climb: ViT at 590 images,
seed 2 (+2.1 points of mean in its last quarter, its best at its last step) passed it. Under the
cosine schedule the learning rate of the last quarter is below 17% of its peak, so a climb there
is a sign of an unfinished run. Tested on the committed curves (tests/test_protocol.py).
"""
from __future__ import annotations

import math
import statistics

from experiments.statistics import ols_slope
from experiments.runs.run.summary import Summary

TOLERANCE = 0.01   # mean accuracy gained by the last quarter over the one before that still counts as a plateau
CLIMB = 0.005      # accuracy per quarter of the run: a last-half slope surely (95%) above this is a climb
TIE = TOLERANCE    # validation accuracies within this of the best (this much below it included) are a tie (sweep.choose_lrs)
MIN_HALF = 4       # validations in the last half (and one in each of its quarters) for the rule to tell


def exact(accuracy: float) -> float:
    """An accuracy, or a difference of mean accuracies, to six decimals: a validation accuracy is a
    count of images stored through float32 (0.688 as 0.68800002...), so a gain of exactly one point
    read 0.00999999... and passed "less than one point". Six decimals drop that error and are exact
    for a count over up to a million images; a gain of means over k1 and k2 validations of n images
    each is exact while k1 * k2 * n stays under a million or so (the cpu profiles': 5 x 5 x 1,000).
    Beyond that a gain within half a millionth below a point reads as a point: the rule errs towards
    marking a run, never towards passing one (0.01 has six decimals, and rounding keeps order)."""
    return round(accuracy, 6)


def points_said(accuracy: float) -> str:
    n = round(100 * accuracy, 6)
    return f"{n:g} point" + ("" if n == 1 else "s")


# the rule in the reports' words (a point is 0.01 of accuracy)
RULE_SAID = (f"a plateau: its last quarter's mean less than {points_said(TOLERANCE)} above the mean of the quarter "
             f"before (its gain), and its last half's least-squares slope not surely (95%) above {points_said(CLIMB)} "
             "a quarter (its slope)")


def _last_half(history: list[tuple[int, float]], steps: int) -> tuple[float, float, float] | None:
    """(gain, slope, slope's 95% low end) of a run's last half of validations: the last quarter's
    mean over the previous quarter's (exact), and the least-squares slope per quarter of the run (unrounded).
    None with too few validations in the last half to tell (fewer than MIN_HALF, or a quarter empty)."""
    half = [(s, a) for s, a in history if s > steps / 2]
    last = [a for s, a in half if s > steps * 3 / 4]
    before = [a for s, a in half if s <= steps * 3 / 4]
    if len(half) < MIN_HALF or not last or not before:
        return None
    slope = ols_slope([s / steps * 4 for s, _ in half], [a for _, a in half])  # x in quarters of the run
    if slope is None or slope.ci95 is None:
        return None
    return exact(statistics.fmean(last) - statistics.fmean(before)), slope.value, slope.value - slope.ci95


def plateau(history: list[tuple[int, float]], steps: int) -> dict | None:
    """{plateaued, best_step, tail_gain, climb, climb_low} for validations [(step, val_acc), ...] of a
    run of `steps` steps: tail_gain is the last quarter's mean over the previous quarter's, climb and
    climb_low the last half's slope per quarter of the run and the low end of its 95% interval.
    None with too few validations in the last half to tell."""
    read = _last_half(history, steps)
    if read is None:
        return None
    gain, climb, low = read
    best_step, _ = max(history, key=lambda sa: sa[1])  # the first step reaching the best
    return {"plateaued": gain < TOLERANCE and low < CLIMB, "best_step": int(best_step),
            "tail_gain": round(gain, 4), "climb": round(climb, 4), "climb_low": round(low, 4),
            "tolerance": TOLERANCE, "climb_floor": CLIMB}


def scatter(summary: Summary) -> float | None:
    """How far a run's validations stray from its trend: the standard deviation (df = points - 2) of its
    last half's validations about their least-squares line, in accuracy. None where the plateau rule
    cannot tell (too few validations, or no steps recorded)."""
    history, steps = [tuple(v) for v in summary.val_history or []], int(summary.steps or 0)
    if not steps or _last_half(history, steps) is None:
        return None
    half = [(s / steps * 4, a) for s, a in history if s > steps / 2]  # x in quarters of the run, as _last_half
    slope = ols_slope([x for x, _ in half], [a for _, a in half]).value
    mx, my = statistics.fmean(x for x, _ in half), statistics.fmean(a for _, a in half)
    return math.sqrt(sum((a - my - slope * (x - mx)) ** 2 for x, a in half) / (len(half) - 2))


def judged(summary: Summary) -> dict | None:
    """The plateau of a finished run by today's rule, from its recorded validations (a record keeps
    its curve, so a record made under an older rule is judged by this one)."""
    history, steps = summary.val_history, summary.steps
    if not history or not steps:
        return None
    return plateau([tuple(v) for v in history], int(steps))


def how_it_climbed(summary: Summary) -> str:
    """What the rule read in a run, in points of validation accuracy, for a report's list of runs
    still improving: which test it failed and by how much, and its last validation beside its best.
    A last validation near the best with the best at the last steps is a climb to the end; a flat
    tail after a low third quarter, or a best far earlier, is not, and a longer protocol may not help."""
    steps = int(summary.steps or 0)
    read = _last_half([tuple(v) for v in summary.val_history or []], steps) if steps else None
    if read is None:
        return "no plateau reading (too few validations, or no steps recorded)"
    gain, climb, low = read
    failed = [test for test, fails in (("its gain", gain >= TOLERANCE), ("its slope", low >= CLIMB)) if fails]
    best_step, best = max(summary.val_history, key=lambda sa: sa[1])
    return (f"fails {' and '.join(failed) or 'neither'}: last quarter's mean {100 * gain:+.2f} points over the "
            f"quarter before's, last half's slope {100 * climb:+.2f} points a quarter (95% low end {100 * low:+.2f}); "
            f"last validation {summary.val_history[-1][1]:.3f}, best {best:.3f} at step {best_step:,} of {steps:,}")


def still_improving(summary: Summary) -> bool:
    """A finished run whose numbers are shown with a dagger and not read: still improving by
    `plateau`, or with too few validations for the rule to tell: a number is read only from a run
    known to have plateaued. A run stopped on purpose at a target accuracy (fit --stop_at_val_acc;
    its summary says 'stopped') is judged by that target instead."""
    if summary.stopped:
        return False
    p = judged(summary)
    return p is None or not p["plateaued"]


def plateau_unknown(summary: Summary) -> bool:
    """Too few validations for the plateau rule, and not stopped at a target."""
    return not summary.stopped and judged(summary) is None
