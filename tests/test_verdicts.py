"""The shared verdict vocabulary (experiments/report/verdicts.py) on hand-made estimates: "no difference"
whenever the 95% interval lies inside the stated margin, else a direction when it excludes 0, "cannot
tell" otherwise, and the edges (an interval touching 0 or the margin, no interval, no pair)."""
from __future__ import annotations

import pytest

from experiments.statistics import Estimate
from experiments.report.verdicts import MARGIN, equivalent, side, verdict


@pytest.mark.parametrize("est, expected", [
    (Estimate(0.05, 0.02, 3), "up: the 95% interval [+0.0300, +0.0700] excludes 0 and reaches beyond ±0.0100"),
    (Estimate(-0.05, 0.02, 3), "down: the 95% interval [-0.0700, -0.0300] excludes 0 and reaches beyond ±0.0100"),
    # excludes 0 but lies inside the margin: "no difference" whenever the whole interval is inside (#41 item 4)
    (Estimate(0.005, 0.001, 3), "no difference: the whole 95% interval [+0.0040, +0.0060] lies within ±0.0100"),
])
def test_a_direction_only_when_the_interval_excludes_zero_and_reaches_beyond_the_margin(est, expected):
    assert verdict(est, "up", "down") == expected


def test_an_interval_touching_zero_gives_no_direction():
    est = Estimate(0.03, 0.03, 3)                          # [0, 0.06]
    assert side(est) == 0
    assert verdict(est) == "cannot tell: the 95% interval [+0.0000, +0.0600] includes 0 and reaches beyond ±0.0100"
    assert side(Estimate(0.1 + 0.2 - 0.3, 0.0, 2)) == 0    # float noise of 0 is 0, not a direction


def test_no_difference_only_when_the_whole_interval_is_inside_the_margin():
    assert MARGIN == 0.01
    assert verdict(Estimate(0.002, 0.005, 3)) == ("no difference: the whole 95% interval [-0.0030, +0.0070] "
                                                  "lies within ±0.0100")
    # the soft − none case of the distillation reading: an interval far wider than the margin
    assert verdict(Estimate(-0.0564, 0.1842, 2)).startswith("cannot tell: the 95% interval [-0.2406, +0.1278]")
    # a stated margin is used and said
    assert verdict(Estimate(0.01, 0.02, 3), margin=0.05) == ("no difference: the whole 95% interval "
                                                             "[-0.0100, +0.0300] lies within ±0.0500")


@pytest.mark.parametrize("value, ci, inside", [
    (0.004, 0.006, True),      # upper bound exactly on +margin: inside
    (-0.004, 0.006, True),     # lower bound exactly on -margin: inside
    (0.0041, 0.006, False),    # just beyond
    (-0.0041, 0.006, False),
    (0.0, 0.0101, False),
])
def test_margin_boundaries(value, ci, inside):
    assert equivalent(Estimate(value, ci, 3)) is inside
    assert verdict(Estimate(value, ci, 3)).startswith("no difference" if inside else "cannot tell")


def test_no_interval_or_no_pair_cannot_tell():
    one = Estimate(0.0089, None, 1)
    assert side(one) is None and not equivalent(one)
    assert verdict(one, "widens", "narrows") == "cannot tell: one seed, no interval"
    assert verdict(Estimate(0.0, None, 1)) == "cannot tell: one seed, no interval"   # not "no difference"
    assert verdict(None) == "cannot tell: no pair"


def test_a_size_is_consistent_only_where_the_interval_also_excludes_zero():
    """The README's teacher row: [-0.0425, +0.0667] holds DeiT's +0.008 to +0.012 and 0 alike, so it
    cannot tell the published size from no effect; an interval off 0 that holds it is consistent;
    one wholly beside it disagrees."""
    from experiments.report.verdicts import misread, size_against
    wide = size_against(Estimate(0.0121, 0.0546, 3), (0.008, 0.012))
    assert wide == ("in size: cannot tell: the 95% interval [-0.0425, +0.0667] holds both 0 and the published "
                    "+0.0080 to +0.0120")
    assert not misread(wide)  # the vocabulary's "cannot tell" comes with its interval
    assert size_against(Estimate(0.0100, 0.0050, 3), (0.008, 0.012)).startswith("in size: consistent")
    assert size_against(Estimate(0.0500, 0.0100, 3), (0.008, 0.012)).startswith("in size: disagrees")
    assert size_against(Estimate(-0.0050, 0.0100, 3), -0.028).startswith("in size: disagrees")
