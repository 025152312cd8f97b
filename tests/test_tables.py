"""The tables' statistics and what they print, on hand-written run folders (no training): Student-t
intervals over seeds, paired differences to the ResNet, the log-log error slope, the generated
reading, the plateau mark, the size columns and the learning-rate tuning section. Every expected
number is computed here by hand, not by the code under test."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from experiments.statistics import loglog_error_slope, mean_ci, ols_slope, paired_difference, t_quantile
from experiments.datascale.numbers import Result, aggregate, collect, gap_trend, winner_claim
from experiments.runs.run.summary import Summary
from experiments.datascale.tables import make_tables
from experiments.datascale.words import scaling_reading
from .conftest import val_curve

T975_DF2 = 4.302653  # t_{0.975, 2} from a printed table


@pytest.mark.parametrize("df, expected", [(1, 12.706205), (2, 4.302653), (4, 2.776445), (10, 2.228139),
                                          (30, 2.042272)])
def test_t_quantile_matches_printed_tables(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-6)
    assert t_quantile(0.025, df) == pytest.approx(-expected, abs=1e-6)


def test_mean_and_t_interval_over_seeds():
    est = mean_ci([0.80, 0.82, 0.84])
    # sample sd 0.02, df 2
    assert est.value == pytest.approx(0.82)
    assert est.ci95 == pytest.approx(0.02 * T975_DF2 / math.sqrt(3), rel=1e-6)
    assert est.ci95 == pytest.approx(0.049683, abs=1e-6)
    assert est.n == 3
    one = mean_ci([0.7])
    assert one.value == 0.7 and one.ci95 is None and one.n == 1


def test_paired_difference_uses_only_shared_seeds_and_beats_the_unpaired_interval():
    family = {0: 0.80, 1: 0.85, 2: 0.90, 3: 0.99}   # seed 3 has no ResNet: left out
    resnet = {0: 0.78, 1: 0.84, 2: 0.87}
    d = paired_difference(family, resnet)
    # differences 0.02, 0.01, 0.03: mean 0.02, sd 0.01
    assert d.value == pytest.approx(0.02) and d.n == 3
    assert d.ci95 == pytest.approx(0.01 * T975_DF2 / math.sqrt(3), rel=1e-6)
    # unpaired (Welch-style) half-width from the two sds 0.05 and sqrt(0.0021): far wider, because
    # the seed effect (a seed that is easy for one family is easy for the other) is not cancelled
    unpaired_se = math.sqrt(0.05 ** 2 / 3 + 0.0021 / 3)
    assert d.ci95 < 0.5 * T975_DF2 * unpaired_se
    assert paired_difference({0: 0.9}, {1: 0.8}) is None
    single = paired_difference({0: 0.9}, {0: 0.8})
    assert single.value == pytest.approx(0.1) and single.ci95 is None


def test_slope_of_an_exact_power_law():
    points = [(n, 1 - 0.5 * n ** -0.3) for n in (100, 1000, 10000)]
    est = loglog_error_slope(points)
    assert est.value == pytest.approx(-0.3, abs=1e-9)
    assert est.ci95 == pytest.approx(0.0, abs=1e-6) and est.n == 3


def test_slope_of_noisy_points_with_its_t_interval():
    # x = log n = 1, 2, 3, 4 and y = log error = (1, 3, 2, 5) - 6. By hand: mean x 2.5, mean y -3.25,
    # Sxx = 5, Sxy = 5.5, slope 1.1, intercept -6, residuals -0.1, 0.8, -1.3, 0.6, SSR 2.7,
    # se = sqrt(2.7 / 2 / 5), half-width t_{0.975,2} * se
    xs, ys = [1, 2, 3, 4], [-5, -3, -4, -1]
    expected_hw = T975_DF2 * math.sqrt(2.7 / 2 / 5)
    est = ols_slope(xs, ys)
    assert est.value == pytest.approx(1.1) and est.ci95 == pytest.approx(expected_hw, rel=1e-6)
    points = [(math.exp(x), 1 - math.exp(y)) for x, y in zip(xs, ys)]
    est = loglog_error_slope(points)
    assert est.value == pytest.approx(1.1) and est.ci95 == pytest.approx(expected_hw, rel=1e-6) and est.n == 4


def test_slope_is_not_available_from_too_little():
    assert loglog_error_slope([(100, 0.8), (1000, 0.9)]) is None             # two points
    assert loglog_error_slope([(100, 0.8), (100, 0.81), (100, 0.82)]) is None  # one training-set size
    two_sizes = loglog_error_slope([(100, 0.8), (100, 0.82), (1000, 0.9)])
    assert two_sizes is not None and two_sizes.ci95 is not None


def _rows(accs: dict, seeds: int = 1) -> list[dict]:
    """Rows of the given means; with seeds=3 each mean a is the seeds a - 0.001, a, a + 0.001 (seed
    offsets shared by every row, so a paired change is the change of the means with interval 0),
    or accs gives a row's seeds as a list."""
    def runs(a):
        accs = a if isinstance(a, list) else [a] if seeds == 1 else [a - 0.001, a, a + 0.001]
        return [Result(None, Summary(seed=k, test_acc=x), None, None) for k, x in enumerate(accs)]
    return [{"family": f, "settings": "", "train_size": n, "_runs": runs(a),
             "test_acc_mean": sum(r.summary.test_acc for r in runs(a)) / len(runs(a)),
             "_val_acc_mean": sum(r.summary.test_acc for r in runs(a)) / len(runs(a)),  # validation as test, unless set
             "test_acc_ci95": None if len(runs(a)) == 1 else 0.01} for (f, n), a in accs.items()]


def _gaps(trend) -> list[float]:
    """Best transformer − best CNN at the smallest and the largest size."""
    return [t["test_acc_mean"] - c["test_acc_mean"] for t, c in (trend.small, trend.large)]


NARROWS = {("resnet", 100): 0.80, ("resnet", 1000): 0.85, ("vit", 100): 0.70, ("vit", 1000): 0.84}


def test_reading_says_the_cnn_lead_narrows():
    rows = _rows(NARROWS, seeds=3)
    trend = gap_trend(rows)
    assert _gaps(trend) == pytest.approx([-0.1, -0.01])
    assert tuple(trend.claim.estimate) == pytest.approx((0.09, 0.0, 3))
    assert (trend.start, trend.end, trend.verdict) == (-0.1, -0.01, "higher")
    (text,) = scaling_reading(rows)
    assert "resnet at every training-set size" in text
    assert trend.claim.said() in text and "narrows from 0.1000 to 0.0100" in text and "as the paper says" in text


def test_reading_draws_no_trend_from_one_seed():
    """Two single runs per family: the endpoints are reported, the change too, but no direction."""
    rows = _rows(NARROWS)
    trend = gap_trend(rows)
    assert _gaps(trend) == pytest.approx([-0.1, -0.01])
    assert trend.claim.estimate == (pytest.approx(0.09), None, 1) and trend.verdict == "cannot tell"
    (text,) = scaling_reading(rows)
    assert trend.claim.said() in text and trend.claim.wording.unsure in text
    assert "narrows" not in text and "paper" not in text


def test_reading_reads_the_trend_from_the_paired_interval_not_the_endpoints():
    # per seed, gap at 100 images: -0.10, -0.10, -0.10; at 1,000: -0.05, -0.15, -0.13 -> changes
    # +0.05, -0.05, -0.03: mean -0.01, sd sqrt(0.0028), interval -0.01 ± 4.302653 * sqrt(0.0028 / 3)
    rows = _rows({("resnet", 100): [0.80, 0.80, 0.80], ("resnet", 1000): [0.85, 0.85, 0.85],
                  ("vit", 100): [0.70, 0.70, 0.70], ("vit", 1000): [0.80, 0.70, 0.72]})
    (text,) = scaling_reading(rows)
    hw = T975_DF2 * math.sqrt(0.0028 / 3)
    trend = gap_trend(rows)
    assert tuple(trend.claim.estimate) == pytest.approx((-0.01, hw, 3)) and trend.verdict == "cannot tell"
    assert trend.claim.said() in text and trend.claim.wording.unsure in text
    assert "widens" not in text and "opposite" not in text
    # changes -0.005, 0, -0.001: mean -0.002, sd sqrt(7e-6), the whole interval inside ±0.01: no difference
    rows = _rows({("resnet", 100): [0.80, 0.80, 0.80], ("resnet", 1000): [0.85, 0.85, 0.85],
                  ("vit", 100): [0.70, 0.70, 0.70], ("vit", 1000): [0.745, 0.750, 0.749]})
    (text,) = scaling_reading(rows)
    hw = T975_DF2 * math.sqrt(7e-6 / 3)
    assert -0.01 < -0.002 - hw and -0.002 + hw < 0.01
    trend = gap_trend(rows)
    assert tuple(trend.claim.estimate) == pytest.approx((-0.002, hw, 3)) and trend.verdict == "no difference"
    assert f"{trend.claim.said()}: {trend.claim.wording.same}." in text
    assert "widens" not in text and "opposite" not in text


def test_reading_flags_unconverged_runs():
    rows = _rows({("resnet", 100): 0.80, ("resnet", 1000): 0.85, ("vit", 100): 0.70, ("vit", 1000): 0.84})
    (text,) = scaling_reading(rows)
    assert "still improving" not in text and gap_trend(rows).claim.converged
    rows[3]["still_improving"] = 1  # vit at 1,000 images
    assert not gap_trend(rows).claim.converged and gap_trend(rows).claim.category is None
    (text,) = scaling_reading(rows)
    assert "still improving at their last validation" in text and "unconverged" in text
    winner = winner_claim(rows, [1000])
    assert (winner.runs, winner.improving, winner.converged) == (2, 1, False)
    assert winner.not_read_at("1,000 images") in text and "narrows" not in text and "widens" not in text  # converged or silent


def test_reading_draws_no_gap_from_a_still_improving_run_at_one_size():
    """make fit-families: every family at one size; a best CNN still improving gives no gap."""
    rows = _rows({("resnet", 1000): 0.91, ("hybrid", 1000): 0.88, ("vit", 1000): 0.81})
    (text,) = scaling_reading(rows)
    assert "Best transformer minus best CNN (each chosen by mean validation accuracy): -0.0300 at 1,000 images" in text
    rows[0]["still_improving"] = 1  # the resnet
    (text,) = scaling_reading(rows)
    unread = winner_claim(rows, [1000]).not_read_at("1,000 images")  # no winner read anywhere: the sentence names its claim
    assert text == (f"Highest mean test accuracy: n{unread[1:]} "
                    "Best transformer minus best CNN: not read there either.")
    assert "-0.0300" not in text


def test_reading_chooses_the_best_of_a_kind_on_validation_and_waits_for_all_of_them():
    """The best transformer is the one highest on validation (hybrid), not on test (vit); a
    transformer still improving at an end size (swin) leaves the best of its kind unknown: no gap,
    no trend and no transformer's own trend is read, though the rows chosen plateaued."""
    rows = _rows({("resnet", 100): 0.80, ("resnet", 1000): 0.85, ("hybrid", 100): 0.70, ("hybrid", 1000): 0.80,
                  ("vit", 100): 0.72, ("vit", 1000): 0.82, ("swin", 100): 0.60, ("swin", 1000): 0.65}, seeds=3)
    for r in rows:
        r["_val_acc_mean"] += 0.05 if r["family"] == "hybrid" else 0
    trend = gap_trend(rows)
    assert [(t["family"], c["family"]) for t, c in (trend.small, trend.large)] == [("hybrid", "resnet")] * 2
    assert _gaps(trend) == pytest.approx([-0.1, -0.05]) and (trend.start, trend.end) == (-0.1, -0.05)
    assert [(t0["family"], c.estimate.value) for t0, _, c in trend.each] == [("hybrid", pytest.approx(0.05)),
                                                                              ("vit", pytest.approx(0.05)),
                                                                              ("swin", pytest.approx(0.0))]
    (text,) = scaling_reading(rows)
    assert "(hybrid 0.7000 vs resnet 0.8000)" in text and "swin -0.2000 to -0.2000" in text
    for r in rows:  # each family trained to its own plateau: a gap between different steps says both
        r["max_steps"] = 4000 if r["family"] == "hybrid" else 1000
    (text,) = scaling_reading(rows)
    assert "-0.1000 at 100 images (hybrid 0.7000 at 4,000 steps vs resnet 0.8000 at 1,000 steps)" in text
    next(r for r in rows if r["family"] == "swin" and r["train_size"] == 1000)["still_improving"] = 1
    (text,) = scaling_reading(rows)
    assert winner_claim(rows, [1000]).not_read_at("1,000 images") in text
    assert "Best transformer" not in text and "narrows" not in text and "Each transformer" not in text


def test_reading_takes_the_trend_s_words_from_the_seeds_it_pairs():
    """A fourth ViT seed at 1,000 images with no ResNet beside it moves the ViT mean, not the
    paired change: the words follow the pairs (+0.0120 over seeds 0-2), never the unpaired means."""
    rows = _rows({("resnet", 100): [0.80, 0.80, 0.80], ("resnet", 1000): [0.85, 0.86, 0.85],
                  ("vit", 100): [0.70, 0.70, 0.70], ("vit", 1000): [0.761, 0.773, 0.762, 0.60]})
    trend = gap_trend(rows)
    assert trend.claim.estimate.n == 3 and trend.verdict == "higher"
    assert (trend.start, trend.end) == (-0.1, -0.088)


def test_reading_says_plainly_when_the_gap_widens():
    rows = _rows({("convnext", 100): 0.80, ("convnext", 1000): 0.88, ("swin", 100): 0.75, ("swin", 1000): 0.70}, seeds=3)
    trend = gap_trend(rows)
    assert (trend.start, trend.end, trend.verdict) == (-0.05, -0.18, "lower")
    (text,) = scaling_reading(rows)
    assert "widens from 0.0500 to 0.1800" in text and f"opposite of the paper's claim that {trend.claim.wording.published}" \
        in text


def test_no_winner_is_read_at_a_size_while_a_run_there_still_improves():
    """Converged or silent, per size: the winner claim at 1,000 images rests on every run there; one
    still improving (or too few validations to tell) leaves that size's winner unread, not the
    other's, and the sizes not read are named once with the runs behind them."""
    rows = _rows({("resnet", 100): 0.80, ("resnet", 1000): 0.85, ("resnet", 10000): 0.86,
                  ("vit", 100): 0.55, ("vit", 1000): 0.90, ("vit", 10000): 0.91}, seeds=3)
    for r in rows:
        r["seeds"] = 3
    rows[1]["still_improving"], rows[5]["still_improving"], rows[5]["_plateau_unknown"] = 1, 2, 2
    assert winner_claim(rows, [100]).converged and winner_claim(rows, [1000]).category is None
    silent = winner_claim(rows, [1000, 10000])
    assert (silent.runs, silent.improving, silent.unknown) == (12, 3, 2)
    (text,) = scaling_reading(rows)
    assert text.startswith(f"Highest mean test accuracy: resnet at 100 images (0.8000). "
                           f"{silent.not_read_at('1,000, 10,000 images')}")
    assert "vit at" not in text and "or had too few validations to tell" in text


def test_reading_names_the_winner_at_each_size():
    rows = _rows({("resnet", 100): 0.80, ("resnet", 1000): 0.85, ("resnet", 10000): 0.86,
                  ("deit", 100): 0.60, ("deit", 1000): 0.86, ("deit", 10000): 0.90,
                  ("vit", 100): 0.55, ("vit", 1000): 0.80, ("vit", 10000): 0.91}, seeds=3)
    (text,) = scaling_reading(rows)
    assert ("resnet at 100 images (0.8000); deit at 1,000 images (0.8600); vit at 10,000 images (0.9100)"
            in text)
    # best transformer - best CNN: 0.60 - 0.80 at 100, 0.91 - 0.86 at 10,000
    assert "-0.2000 at 100 images" in text and "+0.0500 at 10,000 images" in text
    assert "turns into a transformer lead of 0.0500" in text
    assert "up to ±0.0100" in text


def test_reading_gives_each_transformer_when_they_disagree():
    """The best transformer (hybrid) catches up while ViT falls further behind: the reading says both."""
    rows = _rows({("resnet", 100): 0.73, ("resnet", 1000): 0.83, ("hybrid", 100): 0.68, ("hybrid", 1000): 0.80,
                  ("vit", 100): 0.65, ("vit", 1000): 0.72}, seeds=3)
    trend = gap_trend(rows)
    assert (trend.start, trend.end, trend.verdict) == (-0.05, -0.03, "higher")
    assert [(t0["family"], tuple(c.estimate), c.category) for t0, _, c in trend.each] == [
        ("hybrid", pytest.approx((0.02, 0.0, 3)), "higher"), ("vit", pytest.approx((-0.03, 0.0, 3)), "lower")]
    (text,) = scaling_reading(rows)
    assert "hybrid -0.0500 to -0.0300" in text and "vit -0.0800 to -0.1100" in text
    assert all(c.said() in text for *_, c in trend.each) and "They disagree" in text
    # a change inside the margin is no difference, and no disagreement with one that gains
    rows_ = _rows({**{(r["family"], r["train_size"]): r["test_acc_mean"] for r in rows}, ("vit", 1000): 0.74}, seeds=3)
    (text,) = scaling_reading(rows_)
    assert [c.category for *_, c in gap_trend(rows_).each] == ["higher", "no difference"]
    assert "They disagree" not in text
    # one seed: the same endpoints, no direction and no disagreement claimed
    rows_ = _rows({(r["family"], r["train_size"]): r["test_acc_mean"] for r in rows})
    (text,) = scaling_reading(rows_)
    assert [c.category for *_, c in gap_trend(rows_).each] == ["cannot tell", "cannot tell"]
    assert "gains on it" not in text and "They disagree" not in text
    # one transformer only: its line would repeat the best-transformer sentence
    (text,) = scaling_reading([r for r in rows if r["family"] != "vit"])
    assert "Each transformer" not in text


def test_reading_with_one_kind_of_family():
    (text,) = scaling_reading(_rows({("resnet", 100): 0.80, ("convnext", 100): 0.82}))
    assert "convnext at 100 images (0.8200)" in text and "can't be compared" in text and "no transformer" in text


BASE_IDENTITY = {"data.dataset": "fashion_mnist", "model.budget": "tiny", "data.batch_size": 128,
                 "data.train_size": None, "model.weight_decay": 0.05, "trainer.precision": "32-true",
                 "data.randaugment": False, "model.teacher_checkpoint": None}


def _run(exp: Path, family, fraction, seed, acc, *, lr=0.003, steps=200, variant=None, status="done", val_size=1000,
         plateaued=None, old=False) -> str:
    """A run folder as the sweep leaves it: summary.json and identity.json (old=True: a summary
    from before val_size, max_steps, val_history and plateau were recorded)."""
    name = f"{family}_f{fraction:g}_s{seed}_lr{lr:g}" + (f"_{variant}" if variant else "")
    d = exp / name
    d.mkdir(parents=True)
    summary = {"run": name, "family": family, "fraction": fraction, "seed": seed, "status": status,
               "train_size": int(fraction * 10000), "test_acc": acc if status == "done" else None, "params": 1000,
               "flops_per_image": 2e6, "wall_time_s": 60, "hardware": "test machine", "commit": "abc",
               "versions": {"torch": "x"}, "val_acc_best": acc}
    if not old:
        summary.update(val_size=val_size, max_steps=steps, steps=steps,
                       val_history=[[steps // 2, 0.5], [steps, acc or 0.5]] if plateaued is None
                       else val_curve(steps, plateaued, acc or 0.5))
    (d / "summary.json").write_text(json.dumps(summary))
    ident = {**BASE_IDENTITY, "model.family": family, "data.fraction": fraction, "model.lr": lr,
             "trainer.max_steps": steps, "trainer.val_check_interval": steps // 2, "data.val_size": val_size,
             "seed_everything": seed, "data.seed": seed, "data.randaugment": variant == "strong"}
    (d / "identity.json").write_text(json.dumps({"identity": ident}))
    return name


def _table(md: str, first_cell: str) -> list[str]:
    return [line for line in md.splitlines() if line.startswith(f"| {first_cell} |")]


def test_rows_show_sizes_plateau_marks_and_paired_differences(tmp_path):
    """lr and steps chosen per fraction do not split a family into settings; a variant does. A
    run still improving marks its row; val images beside train images; an old summary leaves
    its new columns blank; a fitted (untested) tuning run counts among the runs, not the rows."""
    exp = tmp_path / "runs" / "hand"
    plan = {  # (family, fraction): lr, steps, accuracies of seeds 0, 1, 2
        ("vit", 0.01): (0.001, 100, [0.60, 0.64, 0.65]), ("vit", 0.1): (0.003, 400, [0.80, 0.83, 0.83]),
        ("resnet", 0.01): (0.003, 100, [0.70, 0.73, 0.72]), ("resnet", 0.1): (0.001, 400, [0.85, 0.86, 0.86])}
    improving = None
    for (family, fraction), (lr, steps, accs) in plan.items():
        for seed, acc in enumerate(accs):
            name = _run(exp, family, fraction, seed, acc, lr=lr, steps=steps,
                        plateaued=not (family == "vit" and fraction == 0.1 and seed == 1))
            if family == "vit" and fraction == 0.1 and seed == 1:
                improving = name
    _run(exp, "vit", 0.01, 0, None, lr=0.01, steps=100, status="fitted", plateaued=True)  # a trial not chosen
    for seed, acc in enumerate([0.66, 0.70, 0.71]):   # another variant: its own settings line
        _run(exp, "vit", 0.01, seed, acc, lr=0.001, steps=100, variant="strong", plateaued=True)
    for seed, acc in enumerate([0.75, 0.76, 0.77]):
        _run(exp, "resnet", 0.01, seed, acc, lr=0.001, steps=100, variant="strong", old=True)

    rows = aggregate(collect(exp))
    assert sorted((r["family"], r["settings"], r["fraction"]) for r in rows) == [
        ("resnet", "randaugment=False", 0.01), ("resnet", "randaugment=False", 0.1),
        ("resnet", "randaugment=True", 0.01),
        ("vit", "randaugment=False", 0.01), ("vit", "randaugment=False", 0.1), ("vit", "randaugment=True", 0.01)]
    by = {(r["family"], r["settings"], r["fraction"]): r for r in rows}
    vit = by["vit", "randaugment=False", 0.01]
    assert vit["seeds"] == 3 and vit["test_acc_mean"] == pytest.approx(0.63)
    # sd of 0.60, 0.64, 0.65 = sqrt(0.0014 / 2)
    assert vit["test_acc_ci95"] == pytest.approx(math.sqrt(0.0014 / 2) * T975_DF2 / math.sqrt(3), rel=1e-6)
    # paired with the ResNet of each seed: -0.10, -0.09, -0.07: mean -0.0866.., sd sqrt(0.000466../2)
    diffs = [-0.10, -0.09, -0.07]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / 2)
    assert vit["delta_vs_resnet"] == pytest.approx(mean)
    assert vit["delta_vs_resnet_ci95"] == pytest.approx(sd * T975_DF2 / math.sqrt(3), rel=1e-6)
    strong = by["vit", "randaugment=True", 0.01]   # paired with the strong-variant ResNet: -0.09, -0.06, -0.06
    assert strong["delta_vs_resnet"] == pytest.approx(-0.07)
    assert by["resnet", "randaugment=False", 0.01]["delta_vs_resnet"] is None
    assert (vit["lr"], vit["max_steps"], vit["val_size"]) == (0.001, 100, 1000)
    assert by["vit", "randaugment=False", 0.1]["still_improving"] == 1 and vit["still_improving"] == 0

    paths = make_tables(exp, tmp_path / "out")
    md = paths[1].read_text()
    assert "- runs: 19 (18 done, 1 fitted)" in md
    every = next(line for line in md.splitlines() if line.startswith("- every run:"))
    assert "lr" not in every and "max_steps" not in every and "batch_size 128" in every
    assert "- settings that differ between rows: data.randaugment (never averaged together)" in md
    head = next(line for line in md.splitlines() if line.startswith("| family | settings |"))
    assert "| fraction | train images | val images | lr | steps | test acc (mean ± 95% CI) | seeds | Δ vs resnet |" in head
    ci = math.sqrt(0.0014 / 2) * T975_DF2 / math.sqrt(3)
    assert (f"| vit | randaugment=False | 0.01 | 100 | 1,000 | 0.001 | 100 | 0.6300 ± {ci:.4f} | 3 | "
            f"{mean:+.4f} ± {sd * T975_DF2 / math.sqrt(3):.4f} |") in md
    (improving_row,) = [line for line in _table(md, "vit") if "| 0.1 |" in line]
    assert "† | 3 |" in improving_row and "| 1,000 | 0.003 | 400 |" in improving_row
    assert not any("†" in line for line in _table(md, "resnet") if "randaugment=False" in line)
    assert ("† still improving at its last validation: 1 run, each with what the plateau rule read (a plateau: "
            "its last quarter's mean less than 1 point above the mean of the quarter before (its gain), and its last "
            "half's least-squares slope not surely (95%) above 0.5 points a quarter (its slope)):") in md
    # val_curve's climb: 2 points a quarter, every validation on the line, the last one its best
    assert (f"- {improving}: fails its gain and its slope: last quarter's mean +2.00 points over the quarter "
            "before's, last half's slope +2.00 points a quarter (95% low end +2.00); last validation 0.830, best "
            "0.830 at step 400 of 400") in md
    (old_row,) = [line for line in _table(md, "resnet") if "randaugment=True | 0.01" in line]
    assert "| resnet | randaugment=True | 0.01 | 100 |  | 0.001 | 100 | 0.7600 ± " in old_row
    # old summaries (no plateau recorded) are not known to have plateaued: marked, and so is a Δ on them
    assert "† | 3 |" in old_row and "† too few validations to tell whether it plateaued: 3 runs (resnet_f0.01_s0_lr0.001_strong" in md
    (strong_vit,) = [line for line in _table(md, "vit") if "randaugment=True | 0.01" in line]
    assert "-0.0700 ± " in strong_vit and strong_vit.split("|")[10].strip().endswith("†")
    assert "| 0.6300 ± " in md and f"{mean:+.4f} ± {sd * T975_DF2 / math.sqrt(3):.4f} |" in md  # plateaued: unmarked
    rows_csv = {(r["family"], r["settings"], r["fraction"]): r for r in csv.DictReader(open(paths[0]))}
    assert rows_csv["vit", "randaugment=False", "0.1"]["still_improving"] == "1"
    assert rows_csv["vit", "randaugment=False", "0.01"]["test_acc_ci95"] == f"{ci:.4f}"
    assert rows_csv["vit", "randaugment=False", "0.01"]["seeds"] == "3"
    assert rows_csv["resnet", "randaugment=True", "0.01"]["val_size"] == ""
    assert rows_csv["resnet", "randaugment=False", "0.01"]["delta_vs_resnet"] == ""
    slopes = {(r["family"], r["settings"]): r for r in csv.DictReader(open(tmp_path / "out" / "hand_slopes.csv"))}
    assert slopes["vit", "randaugment=False"]["points"] == "6"
    assert slopes["vit", "randaugment=True"]["slope"] == ""           # one training-set size
    assert "## Slope of log test error vs log n" in md and "| vit | randaugment=True | n/a | 3 | 1 |" in md
    # one reading per variant
    # a vit run at 1,000 images still improves: converged or silent, no winner read there
    assert ("randaugment=False: Highest mean test accuracy: resnet at 100 images (0.7167). Not read at 1,000 images: "
            "1 of the runs there were still improving") in md
    assert ("randaugment=True: Highest mean test accuracy: not read at 100 images: 3 of the runs there were still "
            "improving at their last validation or had too few validations to tell whether they plateaued (†).") in md
    assert not (tmp_path / "out" / "hand_tuning.csv").exists() and "Learning rate, chosen" not in md

    # the same files again, byte for byte (the PNG included)
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    for p in (tmp_path / "out").iterdir():
        p.unlink()
    make_tables(exp, tmp_path / "out")
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before


def test_pairs_are_by_seed_and_subset_and_a_teacher_is_named_by_its_variant(tmp_path):
    """A Δ pairs runs of the same (seed_everything, data.seed) only: two runs of one data.seed are
    two pairs; another val_size draws the training subset from another pool, so it is not paired;
    DeiT students of a fully trained and of a matched (stopped) ResNet teacher are two rows."""
    exp = tmp_path / "runs" / "pairs"

    def seeds(name, everything, data_seed):
        path = exp / name / "identity.json"
        ident = json.loads(path.read_text())["identity"]
        path.write_text(json.dumps({"identity": {**ident, "seed_everything": everything, "data.seed": data_seed}}))
        summary = exp / name / "summary.json"  # a run's summary holds its data.seed as "seed"
        summary.write_text(json.dumps({**json.loads(summary.read_text()), "seed": data_seed}))
    for k, (everything, data_seed) in enumerate(((0, 0), (1, 0), (2, 1))):
        for family, acc in (("vit", 0.60 + 0.01 * k), ("resnet", 0.70)):
            seeds(_run(exp, family, 0.01, k, acc, plateaued=True), everything, data_seed)
        _run(exp, "swin", 0.01, k, 0.65, plateaued=True, val_size=500)
    for variant in ("", "_resnet-at-vit"):
        for k in range(2):
            name = _run(exp, "deit", 0.01, k, 0.6, plateaued=True, variant=f"t{variant}")
            path = exp / name / "identity.json"
            ident = json.loads(path.read_text())["identity"]
            teacher = f"runs/pairs/resnet-tiny_fashion_mnist_f0.01_s{k}_lr0.003{variant}_0123abcd/checkpoints/best.ckpt"
            path.write_text(json.dumps({"identity": {**ident, "data.randaugment": False,
                                                     "model.teacher_checkpoint": teacher}}))
    rows = aggregate(collect(exp))
    by = {(r["family"], r["settings"]): r for r in rows}
    vit = next(r for r in rows if r["family"] == "vit")
    assert vit["delta_pairs"] == 3 and vit["delta_vs_resnet"] == pytest.approx(-0.09)
    assert next(r for r in rows if r["family"] == "swin")["delta_vs_resnet"] is None
    assert sorted(k[1] for k in by if k[0] == "deit") == ["teacher_checkpoint=resnet-tiny",
                                                          "teacher_checkpoint=resnet-tiny_resnet-at-vit"]


def test_single_seed_rows_say_n_a_not_zero(tmp_path):
    exp = tmp_path / "runs" / "one"
    _run(exp, "vit", 0.01, 0, 0.6, old=True)
    _run(exp, "resnet", 0.01, 0, 0.7, old=True)
    rows = aggregate(collect(exp))
    assert all(r["test_acc_ci95"] is None and r["test_acc_std"] is None for r in rows)
    md = make_tables(exp, tmp_path / "out")[1].read_text()
    # summaries from before the plateau was recorded: not known to have plateaued, so marked
    assert "| 0.6000 ± n/a † | 1 | -0.1000 ± n/a † |" in md
    assert "† too few validations to tell whether it plateaued: 2 runs" in md


TUNING = {"spec": "datascale", "profiles": {"cpu": {
    "metric": "val_acc_best", "seed": 0, "fractions": [0.01, 0.1], "grid": {"model.lr": [0.001, 0.003]},
    "trials": [
        {"family": "vit", "variant": "default", "fraction": 0.01, "train_size": 100, "val_size": 1000, "lr": 0.001,
         "val_acc_best": 0.712, "plateaued": True, "run": "vit_f0.01_s0_lr0.001"},
        {"family": "vit", "variant": "default", "fraction": 0.01, "train_size": 100, "val_size": 1000, "lr": 0.003,
         "val_acc_best": 0.655, "plateaued": False, "run": "vit_f0.01_s0_lr0.003"},
        {"family": "vit", "variant": "default", "fraction": 0.1, "train_size": 1000, "val_size": 1000, "lr": 0.001,
         "val_acc_best": 0.801, "plateaued": True, "run": "vit_f0.1_s0_lr0.001"},
        {"family": "vit", "variant": "default", "fraction": 0.1, "train_size": 1000, "val_size": 1000, "lr": 0.003,
         "val_acc_best": 0.834, "plateaued": True, "run": "vit_f0.1_s0_lr0.003"},
        {"family": "resnet", "variant": "default", "fraction": 0.01, "train_size": 100, "val_size": 1000,
         "lr": 0.001, "val_acc_best": 0.70, "plateaued": True, "run": "resnet_f0.01_s0_lr0.001"},
        {"family": "resnet", "variant": "default", "fraction": 0.01, "train_size": 100, "val_size": 1000,
         "lr": 0.003, "val_acc_best": 0.74, "plateaued": True, "run": "resnet_f0.01_s0_lr0.003"}],
    "choices": [{"family": "vit", "variant": "default", "fraction": 0.01, "lr": 0.001, "tuned_at": 0.01},
                {"family": "vit", "variant": "default", "fraction": 0.02, "lr": 0.001, "tuned_at": 0.01},
                {"family": "vit", "variant": "default", "fraction": 0.1, "lr": 0.003, "tuned_at": 0.1},
                {"family": "resnet", "variant": "default", "fraction": 0.01, "lr": 0.003, "tuned_at": 0.01}]}}}


def test_tuning_section_and_csv(tmp_path):
    exp = tmp_path / "runs" / "tuned"
    _run(exp, "vit", 0.01, 0, 0.70, lr=0.001, plateaued=True)
    _run(exp, "vit", 0.1, 0, 0.83, lr=0.003, plateaued=True)
    _run(exp, "resnet", 0.01, 0, 0.74, lr=0.003, plateaued=True)
    (exp / "tuning.json").write_text(json.dumps(TUNING))
    paths = make_tables(exp, tmp_path / "out")
    md = paths[1].read_text()
    assert "## Learning rate, chosen on validation accuracy only" in md
    assert "| family | tuned fraction | train images | val images | lr 0.001 | lr 0.003 |" in md
    assert "| vit | 0.01 | 100 | 1,000 | **0.7120** | 0.6550† |" in md
    assert "| vit | 0.1 | 1,000 | 1,000 | 0.8010 | **0.8340** |" in md
    assert "| resnet | 0.01 | 100 | 1,000 | 0.7000 | **0.7400** |" in md
    assert "- vit: lr 0.001 at fractions 0.01, 0.02 (tuned at 0.01); lr 0.003 at fraction 0.1 (tuned at 0.1)" in md
    assert "- resnet: lr 0.003 at fraction 0.01 (tuned at 0.01)" in md
    assert "settings" not in md.split("| family |", 1)[1].split("\n", 1)[0]   # lr per fraction: no settings column
    trials = list(csv.DictReader(open(tmp_path / "out" / "tuned_tuning.csv")))
    assert len(trials) == 6
    assert {(t["family"], t["fraction"], t["lr"]) for t in trials if t["chosen"] == "true"} == {
        ("vit", "0.01", "0.001"), ("vit", "0.1", "0.003"), ("resnet", "0.01", "0.003")}
    assert {t["chosen"] for t in trials} == {"true", "false"} and trials[1]["plateaued"] == "false"
    assert trials[0]["val_acc_best"] == "0.712" and trials[0]["run"] == "vit_f0.01_s0_lr0.001"


@pytest.mark.parametrize("value, cell", [
    ('=HYPERLINK("http://x","y")', "'=HYPERLINK(\"http://x\",\"y\")"), ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"),
    ("+x", "'+x"), ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"), ("-0.0123", "-0.0123"), ("1e-05", "1e-05"),
    ("-", "-"), (-0.5, "-0.5"), ("vit", "vit")])
def test_a_csv_cell_never_starts_a_formula(tmp_path, value, cell):
    """A text from a record that a spreadsheet would run as a formula is written as text (a leading
    apostrophe); numbers, as numbers or as text, and the empty cell's lone '-' are written as they are."""
    from experiments.report.table_format import write_csv
    write_csv(tmp_path / "t.csv", [{"a": value}], ["a"])
    assert list(csv.reader(open(tmp_path / "t.csv", newline=""))) == [["a"], [cell]]


def test_a_run_name_from_a_tuning_record_is_no_formula_in_its_csv(tmp_path):
    exp = tmp_path / "runs" / "tuned"
    _run(exp, "vit", 0.01, 0, 0.70, lr=0.001, plateaued=True)
    tuning = json.loads(json.dumps(TUNING))
    tuning["profiles"]["cpu"]["trials"][0]["run"] = "=HYPERLINK(1)"
    (exp / "tuning.json").write_text(json.dumps(tuning))
    make_tables(exp, tmp_path / "out")
    trials = list(csv.DictReader(open(tmp_path / "out" / "tuned_tuning.csv")))
    assert trials[0]["run"] == "'=HYPERLINK(1)"


def test_reading_says_when_cnns_catch_up():
    (text,) = scaling_reading(_rows({("resnet", 100): 0.70, ("resnet", 1000): 0.85,
                                     ("hybrid", 100): 0.80, ("hybrid", 1000): 0.87}, seeds=3))
    assert "hybrid at every training-set size" in text
    assert "the transformer lead narrows from 0.1000 to 0.0200" in text and "opposite of the paper" in text


def test_rows_follow_the_sweeps_current_plan(tmp_path):
    """A run trained at the lr an earlier tuning chose stays on disk but leaves the table once
    sweep.json's plan names the run of the new choice; without a plan every finished run is a row."""
    exp = tmp_path / "runs" / "plan"
    old = _run(exp, "resnet", 0.1, 0, 0.80, lr=0.003)
    new = _run(exp, "resnet", 0.1, 0, 0.82, lr=0.01)
    vit = _run(exp, "vit", 0.1, 0, 0.70, lr=0.003)
    (exp / "sweep.json").write_text(json.dumps({"spec": "plan", "profiles": {"cpu": {"main_runs": {
        "resnet_f0.1_s0": new, "vit_f0.1_s0": vit}}}}))
    md = make_tables(exp, tmp_path / "out")[1].read_text()
    rows = [r for r in _table(md, "resnet") if "± n/a" in r]  # the main table's rows
    assert len(rows) == 1 and "0.8200" in rows[0] and "| 0.01 |" in rows[0]
    assert "not in the table: 1 finished runs outside the sweep's current plan" in md and old in md
    (exp / "sweep.json").unlink()
    assert len([r for r in _table(make_tables(exp, tmp_path / "out")[1].read_text(), "resnet") if "± n/a" in r]) == 2


@pytest.mark.parametrize("last, expected", [
    ({"runs": 20, "trained": 20}, "invocation ran 20 runs in 10.0 min"),
    ({"runs": 20, "trained": 3}, "invocation trained or tested 3 of the 20 runs in its plan (the others had "
                                 "finished before) in 10.0 min"),
    ({"runs": 20}, "invocation ended a plan of 20 runs (some may have finished before it) in 10.0 min"),
])
def test_the_last_sweep_says_how_many_runs_it_trained(tmp_path, last, expected):
    """A sweep over a pool of finished runs trains a few: its wall time is theirs, not the plan's."""
    import shutil
    ref = Path(__file__).resolve().parents[1] / "results" / "reference" / "datascale"
    exp = tmp_path / "runs" / "datascale"
    shutil.copytree(ref, exp)
    record = json.loads((exp / "sweep.json").read_text())
    record["profiles"]["cpu"]["last_invocation"] = {"wall_time_s": 600, "jobs": 2, "pack": 1, **last}
    (exp / "sweep.json").write_text(json.dumps(record))
    make_tables(exp, tmp_path / "out")
    assert expected in (tmp_path / "out" / "datascale.md").read_text()


def test_a_run_bounded_by_epochs_shows_the_steps_it_took(tmp_path):
    """fit-families trains for epochs (max_steps -1): its steps column is the steps its epochs set,
    read from a done run; a run that did not finish has no budget to show."""
    exp = tmp_path / "runs" / "epochs"
    for family, status in (("vit", "done"), ("resnet", "failed")):
        name = _run(exp, family, 1.0, 0, 0.8 if status == "done" else None, steps=-1, status=status)
        summary = json.loads((exp / name / "summary.json").read_text())
        (exp / name / "summary.json").write_text(json.dumps({**summary, "steps": 2145}))
    by = {r["family"]: r for r in aggregate(collect(exp))}
    assert by["vit"]["max_steps"] == 2145
    assert "resnet" not in by or by["resnet"]["max_steps"] is None


def test_sample_efficiency_marks_a_size_whose_runs_were_still_improving(tmp_path):
    exp = tmp_path / "runs" / "eff"
    for family, plateaued in (("vit", False), ("resnet", True)):
        _run(exp, family, 1.0, 0, 0.85, plateaued=plateaued)
    md = make_tables(exp, tmp_path / "out")[1].read_text()
    assert "| vit | 10,000 † |" in md and "| resnet | 10,000 |" in md
    assert ("†: runs at that size or a smaller one were still improving at their last validation (at any size, "
            "where never reached): a longer run could move it; shown, not read.") in md
    # a smaller size still improving could reach the threshold if trained longer; never reached: any size
    _run(exp, "resnet", 0.1, 0, 0.70, plateaued=False)
    _run(exp, "swin", 0.1, 0, 0.70, plateaued=False)
    _run(exp, "swin", 1.0, 0, 0.75, plateaued=True)
    md = make_tables(exp, tmp_path / "out")[1].read_text()
    assert "| resnet | 10,000 † |" in md and "| swin | not reached † |" in md
    # a family not run at the largest size is not said to miss the threshold there
    _run(exp, "convnext", 0.1, 0, 0.70, plateaued=True)
    md = make_tables(exp, tmp_path / "out")[1].read_text()
    assert "| convnext | not reached up to 1,000 |" in md and "| swin | not reached † |" in md


def test_findings_give_every_family_its_catch_up_row_against_the_resnet(tmp_path):
    """Every family with runs at two sizes beside the ResNet's gets a Findings row on the change of
    its paired gap, worded by its kind (a transformer catching up, a CNN gaining), in the family
    table's order after ViT's two rows; a family at one size only gets none."""
    from experiments.datascale.tables import findings
    exp = tmp_path / "runs" / "datascale"
    accs = {"resnet": ([0.70, 0.72, 0.71], [0.85, 0.86, 0.85]), "vit": ([0.60, 0.63, 0.61], [0.80, 0.82, 0.81]),
            "swin": ([0.62, 0.64, 0.63], [0.84, 0.85, 0.86]), "convnext": ([0.72, 0.73, 0.72], [0.86, 0.87, 0.86])}
    for family, (small, large) in accs.items():
        for seed in range(3):
            _run(exp, family, 0.01, seed, small[seed], plateaued=True)
            _run(exp, family, 0.1, seed, large[seed], plateaued=True)
    _run(exp, "hybrid", 0.01, 0, 0.7, plateaued=True)
    rows = findings(exp)
    assert [r.question for r in rows] == [
        "Scarce data: is ViT below the ResNet?", "As data grows, does ViT catch up?",
        "As data grows, does Swin catch up with the ResNet?", "As data grows, does ConvNeXt gain on the ResNet?"]
    swin, convnext = rows[2], rows[3]
    assert swin.ours.startswith("change of Swin − ResNet from 100 to 1,000 images: +0.0767 ± 0.0287 (3 pairs)")
    assert "Swin catches up, as published" in swin.verdict and "ConViT" in swin.published
    assert convnext.published == "not published: a CNN against a CNN" and "as published" not in convnext.verdict


def test_tables_name_the_cells_the_spec_plans_that_never_ran(tmp_path):
    """A family or size added to the spec since the last invocation (or a sweep stopped before it
    recorded its plan) is named by family and size; a cell of the recorded plan not finished yet is
    unfinished_line's, not repeated; with every cell finished the line is gone."""
    exp = tmp_path / "runs" / "datascale"   # exp-datascale's spec: cpu profile, its families x 4 sizes x 3 seeds
    from experiments.runs.sweep.spec import load_spec, resolve_axes
    ax = resolve_axes(load_spec("datascale"), "cpu")
    plan = {f"vit-tiny_fashion_mnist_f{ax['fractions'][-1]:g}_s0": "vit_f0.05_s0_lr0.001"}   # not finished
    for family in ax["families"]:
        for seed in ax["seeds"]:
            for fraction in ax["fractions"][:-1]:
                plan[f"{family}-tiny_fashion_mnist_f{fraction:g}_s{seed}"] = _run(exp, family, fraction, seed, 0.7,
                                                                                plateaued=True)
    (exp / "sweep.json").write_text(json.dumps({"spec": "datascale", "profiles": {"cpu": {
        "pool_size": 59_000, "main_runs": plan}}}))
    md = make_tables(exp, tmp_path / "out")[1].read_text()
    (line,) = [ln for ln in md.splitlines() if ln.startswith("- not run yet")]
    largest = f"{round(ax['fractions'][-1] * 59_000):,}"   # 2,950
    assert line == "- not run yet in the cpu profile as its spec stands: " + "; ".join(
        f"{family} at {largest} images ({2 if family == 'vit' else 3} runs)" for family in ax["families"])
    for family in ax["families"]:
        for seed in ax["seeds"]:
            plan[f"{family}-tiny_fashion_mnist_f{ax['fractions'][-1]:g}_s{seed}"] = _run(
                exp, family, ax["fractions"][-1], seed, 0.8, lr=0.001, plateaued=True)
    (exp / "sweep.json").write_text(json.dumps({"spec": "datascale", "profiles": {"cpu": {
        "pool_size": 59_000, "main_runs": plan}}}))
    md = make_tables(exp, tmp_path / "out")[1].read_text()
    assert "not run yet" not in md and "not finished yet" not in md


def test_deit_s_heads_are_marked_where_its_run_still_improved(tmp_path):
    """The per-run list of DeiT's heads on test shows each run's numbers, a run still improving with
    its dagger like every other number resting on it."""
    exp = tmp_path / "runs" / "hand"
    names = {}
    for seed, acc in enumerate([0.70, 0.72, 0.71]):
        _run(exp, "resnet", 0.01, seed, acc, steps=400, plateaued=True)
        names[seed] = _run(exp, "deit", 0.01, seed, acc - 0.05, steps=400, plateaued=seed != 1)
        summary = json.loads((exp / names[seed] / "summary.json").read_text())
        summary["test"] = {"acc": acc - 0.05, "acc_cls": acc - 0.04, "acc_dist": acc - 0.06}
        (exp / names[seed] / "summary.json").write_text(json.dumps(summary))
    md = make_tables(exp, tmp_path / "out")[1].read_text()
    heads = md.split("DeiT's heads on test", 1)[1].split("##", 1)[0]
    lines = {seed: next(ln for ln in heads.splitlines() if ln.startswith(f"- {name}:")) for seed, name in names.items()}
    assert lines[1].endswith(" †") and not lines[0].endswith("†") and not lines[2].endswith("†")
    assert lines[0] == f"- {names[0]}: 0.6600 / 0.6400 / 0.6500"


def test_rows_trained_on_different_machines_say_which_trained_where(tmp_path):
    """img/s and minutes are each machine's own: where rows trained on different machines the table
    says which trained where (fit-families' ConvNeXt on another CPU than the others); one machine, no note."""
    exp = tmp_path / "runs" / "hand"
    for family in ("vit", "resnet"):
        for seed in range(3):
            _run(exp, family, 0.01, seed, 0.7, plateaued=True)
    one = make_tables(exp, tmp_path / "one")[1].read_text()
    assert "do not compare in speed" not in one
    for d in exp.glob("resnet_*"):
        summary = json.loads((d / "summary.json").read_text())
        (d / "summary.json").write_text(json.dumps({**summary, "hardware": "other machine"}))
    two = make_tables(exp, tmp_path / "two")[1].read_text()
    assert ("train img/s and fit min are measured where each row trained, and rows trained on different machines do "
            "not compare in speed: vit on test machine; resnet on other machine.") in two
