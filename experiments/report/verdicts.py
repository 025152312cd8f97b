"""The one vocabulary every generated reading uses to put a paired difference into words.

A paired difference (seed_statistics.Estimate: mean, 95% half-width, pairs) earns
- a direction (the caller's words: "higher"/"lower", "widens"/"narrows", ...) only when its 95%
  interval excludes 0;
- "no difference" only when the whole interval lies inside an equivalence margin, stated in the
  sentence (default ±0.01 accuracy, one point);
- otherwise "cannot tell", with the interval ("one seed, no interval" where there is none).
"""
from __future__ import annotations

from experiments.report.statistics import Estimate

MARGIN = 0.01  # one accuracy point: the smallest difference the readings call a difference
STILL_IMPROVING = "†"  # the mark of a number from a run still improving at its last validation


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


def verdict(est: Estimate | None, higher: str = "higher", lower: str = "lower", margin: float = MARGIN) -> str:
    """`higher` / `lower` when the interval excludes 0 on that side, else "no difference" when it
    lies inside ±margin, else "cannot tell"."""
    s = side(est)
    if s:
        return higher if s > 0 else lower
    return no_difference(est, margin) if equivalent(est, margin) else cannot_tell(est, margin)
