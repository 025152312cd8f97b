"""Uncertainty over seeds for the tables: Student-t intervals of a mean, of a paired difference, and
of an ordinary-least-squares slope (the "catch-up" measure, log test error against log training
images). Pure Python (the t quantile comes from the regularized incomplete beta function), so the
tables need no scipy.

Every interval is a 95% half-width; None where it does not exist (one seed, a slope from fewer
than three points or from a single training-set size), never a fake 0.
"""
from __future__ import annotations

import math
import statistics
from typing import NamedTuple

CONFIDENCE = 0.95


class Estimate(NamedTuple):
    value: float                 # a mean, a mean difference or a slope
    ci95: float | None           # half-width of its 95% t-interval (None: not estimable)
    n: int                       # seeds, pairs or points it rests on


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"df={df}: allowed > 0")
    tail = 0.5 * _betai(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (bisection on t_cdf; exact to double precision)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p={p}: allowed 0 < p < 1")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _t95(df: int) -> float:
    return t_quantile(0.5 + CONFIDENCE / 2.0, df)


def mean_ci(values: list[float]) -> Estimate:
    """Mean over seeds with the half-width of its 95% Student-t interval (df = seeds - 1); the
    half-width is None with one seed."""
    values = list(values)
    if not values:
        raise ValueError("mean_ci of no values")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Estimate(mean, None, len(values))
    return Estimate(mean, _t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values)), len(values))


def paired_difference(a: dict, b: dict) -> Estimate | None:
    """Mean of a[k] - b[k] over the keys (seeds) both have, with its paired 95% t-interval
    (df = pairs - 1; None with one pair). None when they share no key."""
    keys = sorted(set(a) & set(b), key=str)
    if not keys:
        return None
    return mean_ci([a[k] - b[k] for k in keys])


def ols_slope(xs: list[float], ys: list[float]) -> Estimate | None:
    """Least-squares slope of ys on xs with its 95% t-interval (df = points - 2). None when the
    slope does not exist (no two distinct xs); the interval is None with fewer than 3 points."""
    n = len(xs)
    if n != len(ys):
        raise ValueError(f"{n} xs but {len(ys)} ys")
    if n < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0.0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    if n < 3:
        return Estimate(slope, None, n)
    intercept = my - slope * mx
    ssr = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys))
    return Estimate(slope, _t95(n - 2) * math.sqrt(ssr / (n - 2) / sxx), n)


def loglog_error_slope(points: list[tuple[int, float]]) -> Estimate | None:
    """Slope of log(test error) against log(training images), every (train_size, test accuracy)
    point a run (seeds separate); points with no error (accuracy 1) have no logarithm and are
    left out. None with fewer than 3 points or one distinct training-set size."""
    pts = [(n, 1.0 - acc) for n, acc in points if n and n > 0 and acc is not None and acc < 1.0]
    if len(pts) < 3 or len({n for n, _ in pts}) < 2:
        return None
    return ols_slope([math.log(n) for n, _ in pts], [math.log(e) for _, e in pts])
