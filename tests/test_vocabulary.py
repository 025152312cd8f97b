"""One vocabulary everywhere (issue 41, item 4): every verdict that a committed report or the README's
Findings reads from an interval says its interval, the rule it met and its margin in one form, and
the words follow from the numbers: "no difference" whenever the whole interval lies inside the margin
of its kind, else a direction when it excludes 0, else "cannot tell"; every margin one of
verdicts.MARGINS, which the README's legend lists."""
from __future__ import annotations

from pathlib import Path

import pytest

from experiments.statistics import Estimate
from experiments.report.verdicts import MARGINS, legend, misread, verdict

ROOT = Path(__file__).resolve().parents[1]
# every generated reading: the reports, rebuilt from results/reference byte for byte
# (test_reference_records), and the README's Findings block
READINGS = sorted((ROOT / "results").glob("*.md")) + [ROOT / "README.md"]


@pytest.mark.parametrize("page", READINGS, ids=lambda p: p.name)
def test_every_committed_reading_follows_the_vocabulary(page):
    assert misread(page.read_text()) == []


def test_the_readme_lists_every_margin():
    findings = (ROOT / "README.md").read_text().split("<!-- tables:findings -->")[1].split("<!-- /tables:findings")[0]
    assert all(line in findings for line in legend())
    assert all(f"±{m.value:g} ({m.why})" in findings for m in MARGINS.values())


@pytest.mark.parametrize("text, wrong", [
    # a whole interval inside ±0.01 is "no difference", whatever else it says
    ("cannot tell: the 95% interval [-0.0030, +0.0070] includes 0 and reaches beyond ±0.0100", "'no difference'"),
    ("higher: the 95% interval [+0.0020, +0.0080] excludes 0 and reaches beyond ±0.0100", "'no difference'"),
    # "no difference" outside the margin, a direction from an interval that includes 0
    ("no difference: the whole 95% interval [-0.0030, +0.0170] lies within ±0.0100", "'cannot tell'"),
    ("vit keeps more: the 95% interval [-0.0100, +0.1300] excludes 0 and reaches beyond ±0.0500", "'cannot tell'"),
    # a margin no kind of quantity declares
    ("no difference: the whole 95% interval [-0.0100, +0.0100] lies within ±0.0300", "no declared margin"),
    # the words without the interval they were read from
    ("teachers: no difference, as DeiT's claim requires", "without its interval"),
])
def test_a_mismatch_is_found(text, wrong):
    found = misread(text)
    assert len(found) == 1 and wrong in found[0]


@pytest.mark.parametrize("est", [Estimate(0.005, 0.001, 3), Estimate(0.05, 0.02, 3), Estimate(-0.05, 0.1, 3),
                                 Estimate(0.03, 0.03, 3), Estimate(0.0, None, 1), None])
def test_the_vocabulary_reads_its_own_words_back(est):
    for m in MARGINS.values():
        assert misread(verdict(est, "up", "down", m.value)) == []


def test_a_bound_written_on_the_margin_may_be_read_either_way():
    """4 written decimals cannot say on which side of ±0.0100 a bound of -0.0100 lay: both readings pass,
    a bound one written step beyond does not."""
    on = "95% interval [-0.0100, +0.0050]"
    assert misread(f"no difference: the whole {on} lies within ±0.0100") == []
    assert misread(f"cannot tell: the {on} includes 0 and reaches beyond ±0.0100") == []
    assert misread("no difference: the whole 95% interval [-0.0102, +0.0050] lies within ±0.0100") != []


def test_size_is_read_apart_from_direction():
    from experiments.report.verdicts import size_against
    assert size_against(Estimate(-0.03, 0.01, 3), -0.0283) == (
        "in size: consistent, the published -0.0283 lies within our interval [-0.0400, -0.0200]")
    assert size_against(Estimate(-0.109, 0.065, 3), -0.0283).endswith("lies wholly below the published -0.0283")
    assert size_against(Estimate(0.1, 0.02, 3), (0.014, 0.023)).endswith(
        "lies wholly above the published +0.0140 to +0.0230")
    assert size_against(Estimate(0.02, None, 1), 0.016) == "in size: not comparable with the published +0.0160 (no interval)"
