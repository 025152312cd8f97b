"""results/inductive_bias.{md,csv} and figures from hand-written run folders, probes.json files and
a hand-written inductive_bias.json (no training): the ablation table with paired differences to
`learn`, the per-family probe numbers, the generated readings, byte-identical regeneration and the
one-line errors. Expected numbers are computed here by hand (statistics.stdev and a printed t
quantile), not by the code under test."""
from __future__ import annotations

import csv
import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from experiments.__main__ import main
from experiments.inductive_bias.figures import verdict
from experiments.inductive_bias.numbers import (FIGURES, NAME, RECORD, family_rows, growth_claim,
                                                robustness_claims)
from experiments.inductive_bias.tables import make_tables
from experiments.statistics import Estimate
from experiments.report.verdicts import misread
from experiments.runs.run.summary import Summary
from modules.probes import pos_embed_2d_structure
from .conftest import val_curve

T975_DF2 = 4.302652729911275  # t_{0.975, 2}: three seeds
SEEDS = (0, 1, 2)
SIZES = {0.01: 590, 1.0: 59000}
ABLATION = {("learn", 0.01): (0.60, 0.62, 0.64), ("none", 0.01): (0.55, 0.60, 0.62),
            ("learn", 1.0): (0.70, 0.72, 0.74), ("none", 1.0): (0.69, 0.70, 0.74)}
FAMILY = {"resnet": (0.80, 0.81, 0.82), "vit": ABLATION[("learn", 1.0)], "swin": (0.65, 0.66, 0.70)}
# PatchDrop at 0.5 and clean accuracy per family (the same for every seed but one offset)
DROP = {"resnet": 0.20, "vit": 0.50, "swin": 0.40}
CLEAN = {"resnet": 0.80, "vit": 0.70, "swin": 0.65}
# attention distance (layers x heads) of seed s: + s
DIST = {"vit": [[4.0, 12.0], [10.0, 14.0]], "swin": [[2.0, float("nan")], [3.0, 5.0]]}
IMPROVING = ("none", 1.0, 2)


def ci(values) -> float:
    return T975_DF2 * statistics.stdev(values) / math.sqrt(len(values))


def _robustness(family: str, seed: int) -> dict:
    drop = DROP[family] + 0.01 * seed
    return {"n_images": 100, "patch": 4, "clean_accuracy": CLEAN[family], "drop_fractions": [0.0, 0.5, 0.9],
            "patchdrop_accuracy": [CLEAN[family], drop, 0.1], "shuffle_grids": [1, 2, 4, 7],
            "shuffle_accuracy": [CLEAN[family], 0.5, 0.3, 0.2], "shifts": [0, 1, 2, 3, 4, 5, 6, 7, 8],
            "shift_is_patch_multiple": [True, False, False, False, True, False, False, False, True],
            "shift_accuracy": [CLEAN[family]] * 9, "shift_accuracy_circular": [CLEAN[family]] * 9, "max_shift": 4,
            "shift_consistency": 0.9, "shift_consistency_circular": 0.95, "fill": "black", "fill_value": [-0.8]}


def _probes(family: str, seed: int, parts) -> dict:
    out = {"parts": list(parts), "family": family, "images": 100, "patch": 4, "commit": "abc1234"}
    if "robustness" in parts:
        out["robustness"] = _robustness(family, seed)
    if "attention" in parts and family in DIST:
        out["attention_distance"] = [[None if v != v else v + seed for v in row] for row in DIST[family]]
        out["attention_distance_uniform"] = [[16.0, 16.0], [16.0, 16.0]]
        out["attention_entropy"] = [[0.9, 0.9], [0.5 + 0.01 * seed, 0.5 + 0.01 * seed]]
    if "pos_embed" in parts and family == "vit":
        # probed under an older rule (no 2D anywhere): the tables judge the recorded similarity again
        out["pos_embed"] = {"grid_correlation": 0.4 + 0.1 * seed, "raster_correlation": 0.1, "two_d": False,
                            "neighbour_mean": 0.5, "far_mean": 0.1, "gap": 0.4, "similarity": _similarity(seed)}
    if "maps" in parts and family == "vit":
        out["attention_maps"] = {"images": [[[0.0] * 4] * 4] * 2, "labels": [0, 1],
                                 "cls": [[[0.7, 0.1], [0.1, 0.1]]] * 2, "rollout": [[[0.25] * 2] * 2] * 2}
    return out


def _similarity(seed: int, side: int = 4) -> list:
    """A side x side position table's similarity, exp(-distance): seed 0 by raster order only (a 1D
    table: a vertical neighbour is `side` apart, as far as a far patch), the others by grid distance
    (2D: row and column neighbours alike) a little sharper with each seed."""
    def sim(r, c, r2, c2):
        d = abs((r * side + c) - (r2 * side + c2)) if seed == 0 else abs(r - r2) + abs(c - c2)
        return round(math.exp(-d * (1 + 0.1 * seed)), 6)
    return [[[[sim(r, c, r2, c2) for c2 in range(side)] for r2 in range(side)] for c in range(side)]
            for r in range(side)]


def _summary(run: str, family: str, fraction: float, seed: int, acc: float, plateaued: bool = True) -> dict:
    return {"run": run, "family": family, "fraction": fraction, "seed": seed, "train_size": SIZES[fraction],
            "val_size": 1000, "status": "done", "test_acc": acc, "steps": 200, "val_history": val_curve(200, plateaued),
            "identity": {"model.lr": 0.003}, "hardware": "test-cpu (2 cores)", "commit": "abc1234",
            "versions": {"python": "3.11.7", "torch": "2.14.1"}}


def _write(exp: Path, run: str, summary: dict, probes: dict | None) -> None:
    (exp / run).mkdir(parents=True, exist_ok=True)
    (exp / run / "summary.json").write_text(json.dumps(summary))
    if probes is not None:
        (exp / run / "probes.json").write_text(json.dumps(probes))


@pytest.fixture
def experiment(tmp_path) -> Path:
    """Every run plateaued but the IMPROVING one."""
    return write_experiment(tmp_path / "runs" / NAME, IMPROVING)


@pytest.fixture
def converged(tmp_path) -> Path:
    """The same runs, every one plateaued: the readings and verdicts are written."""
    return write_experiment(tmp_path / "runs" / NAME, None)


def write_experiment(exp: Path, improving: tuple | None) -> Path:
    families, ablations = [], []
    all_parts = ("robustness", "cka", "attention", "maps", "pos_embed")
    for fam, accs in FAMILY.items():
        for seed, acc in zip(SEEDS, accs):
            run = f"{fam}_f1_s{seed}_{'%08x' % seed}"
            _write(exp, run, _summary(run, fam, 1.0, seed, acc), _probes(fam, seed, all_parts))
            families.append({"family": fam, "fraction": 1.0, "seed": seed, "run": run})
    for (variant, f), accs in ABLATION.items():
        for seed, acc in zip(SEEDS, accs):
            run = f"vit_f1_s{seed}_{'%08x' % seed}" if (variant, f) == ("learn", 1.0) else f"vit_{variant}_f{f}_s{seed}"
            if (variant, f) != ("learn", 1.0):
                _write(exp, run, _summary(run, "vit", f, seed, acc, plateaued=(variant, f, seed) != improving),
                       _probes("vit", seed, ["pos_embed"]) if variant == "learn" else None)
            ablations.append({"variant": variant, "fraction": f, "seed": seed, "run": run})
    (exp / "cka").mkdir()
    for fam in ("vit", "swin"):
        (exp / "cka" / f"{fam}.json").write_text(json.dumps(
            {"family": fam, "run": f"{fam}_f1_s0_{0:08x}", "reference_run": f"resnet_f1_s0_{0:08x}",
             "reference": "resnet", "fraction": 1.0, "seed": 0, "layers": ["a", "b"],
             "reference_layers": ["x", "y", "z"], "matrix": [[0.9, 0.5, 0.2], [0.3, 0.4, 0.6]]}))
    record = {"spec": NAME, "profiles": {"cpu": {
        "axes": {"dataset": "fashion_mnist", "budget": "tiny", "batch_size": 64, "seeds": list(SEEDS),
                 "lrs": [0.003, 0.01], "probe_images": 100, "probe_patch": 4,
                 "ablation_args": {"learn": {}, "none": {"model.pos_embed": "none"}}},
        "tuning": {"choices": [{"family": "vit", "fraction": 1.0, "lr": 0.003}]},
        "families": families, "ablations": ablations, "cka": ["cka/vit.json", "cka/swin.json"],
        "last_invocation": {"wall_time_s": 1500, "runs": 30, "jobs": 2}}}}
    (exp / RECORD).write_text(json.dumps(record))
    return exp


def _rows(out: Path) -> dict:
    return {(r["table"], r["name"], float(r["fraction"])): r for r in csv.DictReader(open(out / f"{NAME}.csv"))}


def _profile(experiment: Path):
    from experiments.inductive_bias.numbers import load_profiles
    (p,) = load_profiles("cpu", json.loads((experiment / RECORD).read_text())["profiles"]["cpu"], experiment)
    return p


def test_tables_from_hand_written_records(converged, tmp_path):
    experiment, out = converged, tmp_path / "results"
    make_tables(experiment, out)
    rows = _rows(out)
    for (variant, f), accs in ABLATION.items():
        r = rows[("ablation", variant, f)]
        assert float(r["test_acc_mean"]) == pytest.approx(statistics.fmean(accs), abs=1e-6)
        assert float(r["test_acc_ci95"]) == pytest.approx(ci(accs), abs=1e-6)
        if variant == "none":
            d = [a - b for a, b in zip(accs, ABLATION[("learn", f)])]
            assert float(r["delta_vs_learn"]) == pytest.approx(statistics.fmean(d), abs=1e-6)
            assert float(r["delta_vs_learn_ci95"]) == pytest.approx(ci(d), abs=1e-6)
        else:
            assert r["delta_vs_learn"] == ""
    assert rows[("ablation", "none", 1.0)]["still_improving"] == "0"
    # judged again from each record's similarity, not from the numbers it was probed with
    grid = [pos_embed_2d_structure(torch.tensor(_similarity(s), dtype=torch.float64))["grid_correlation"]
            for s in SEEDS]
    assert float(rows[("ablation", "learn", 0.01)]["pos_grid_correlation_mean"]) == pytest.approx(statistics.fmean(grid),
                                                                                                  abs=1e-6)
    assert float(rows[("ablation", "learn", 0.01)]["pos_grid_correlation_ci95"]) == pytest.approx(ci(grid), abs=1e-6)
    assert rows[("ablation", "learn", 0.01)]["pos_two_d_seeds"] == "2/3"
    for fam in FAMILY:
        r = rows[("family", fam, 1.0)]
        drops = [DROP[fam] + 0.01 * s for s in SEEDS]
        assert float(r["patchdrop_0.5_mean"]) == pytest.approx(statistics.fmean(drops))
        assert float(r["patchdrop_0.5_ci95"]) == pytest.approx(ci(drops), abs=1e-6)
        assert float(r["shuffle_grid4_mean"]) == pytest.approx(0.3)
    # vit: layer means (4+12)/2 = 8 and (10+14)/2 = 12, + seed: growth 4 in every seed; swin's NaN head left out
    assert float(rows[("family", "vit", 1.0)]["attention_distance_first_mean"]) == pytest.approx(8 + 1)
    assert float(rows[("family", "vit", 1.0)]["attention_distance_growth_mean"]) == pytest.approx(4)
    assert float(rows[("family", "swin", 1.0)]["attention_distance_first_mean"]) == pytest.approx(2 + 1)
    assert float(rows[("family", "swin", 1.0)]["attention_distance_last_mean"]) == pytest.approx(4 + 1)
    assert float(rows[("family", "vit", 1.0)]["cka_last_vs_resnet_last"]) == pytest.approx(0.6)
    assert rows[("family", "resnet", 1.0)]["attention_distance_first_mean"] == ""
    text = (out / f"{NAME}.md").read_text()
    # PatchDrop retention: resnet 0.21/0.80 = 0.26, swin 0.41/0.65 = 0.63, vit 0.51/0.70 = 0.73
    assert "resnet 0.26" in text and "vit 0.73" in text
    # read from the paired interval of the shares by seed: vit (0.50 + 0.01 s) / 0.70 − resnet (0.20 + 0.01 s) / 0.80
    kept_diff = [(DROP["vit"] + 0.01 * s) / CLEAN["vit"] - (DROP["resnet"] + 0.01 * s) / CLEAN["resnet"] for s in SEEDS]
    p = _profile(experiment)
    claims = {(t, c): claim for t, c, claim in robustness_claims(p, 1.0, "patchdrop")}
    vit_resnet = claims["vit", "resnet"]
    assert vit_resnet.estimate.value == pytest.approx(statistics.fmean(kept_diff))
    assert vit_resnet.estimate.ci95 == pytest.approx(ci(kept_diff))
    assert vit_resnet.category == "higher" and vit_resnet.runs == 6 and vit_resnet.wording.margin == "robustness"
    assert (f"vit − resnet, paired by seed: +{statistics.fmean(kept_diff):.3f} ± {ci(kept_diff):.3f}: "
            f"{vit_resnet.said()}") in text and vit_resnet.said().startswith("vit keeps more: ")
    growth = growth_claim(next(r for r in family_rows(p) if r["name"] == "vit" and r["fraction"] == 1.0))
    assert growth.estimate.value == pytest.approx(4) and growth.estimate.ci95 == pytest.approx(0)
    assert growth.category == "higher" and growth.wording.margin == "attention growth"
    assert f"vit +4.0 ± 0.0 px ({growth.said()}" in text
    # layer means over uniform attention's 16 px: (8, 9, 10) / 16 and (12, 13, 14) / 16
    assert "layer 1 at 0.56 and the last layer at 0.81 of the uniform-attention distance" in text
    assert "9.0 ± 2.5 (16.0)" in text and "**Caveat**" not in text   # 0.56 of uniform: attention learned
    assert "[CLS] attention" in text and "top-10% patches hold 0.70" in text   # one patch of four holds 0.7
    # concentration read apart from distance: entropy over uniform's by seed, and the [CLS] share
    assert ("- **Concentration of attention**, apart from its distance: attention entropy over uniform attention's "
            "(1: uniform, lower: on fewer patches): vit layer 1 0.90 ± 0.00, last layer 0.51 ± 0.02") in text
    assert "held by the top 10% of patches at 1 (59,000 images) (0.10: uniform): vit 0.70 (seed 0)" in text
    assert "Not read" not in text
    assert ("*Verdict*: in direction, whether it agrees with the paper's loss without a position embedding: cannot "
            "tell: the 95% interval of each of the 2 differences includes 0; none − learn at 0.01 (590 images): cannot "
            "tell: the 95% interval") in text
    assert misread(text) == []   # every "cannot tell", a figure's verdict over several differences too, with its intervals
    # seed 0's table is 1D (a column neighbour as far as a far patch), seeds 1 and 2 are 2D; both sizes alike
    assert ("*Verdict*: partly: the learned 1D table has 2D structure in 4 of 6 runs (row and column neighbours "
            "both at least 0.1 of cosine above far patches): at 0.01 (590 images), cosine of neighbours in a row") in text
    assert text.count("*Verdict*: At 1 (59,000 images): agrees in direction: every transformer keeps more of its "
                      "accuracy than every CNN;") == 2
    assert "in size: disagrees, our interval [+0.4616, +0.4705] lies wholly below the published +0.8800" in text
    assert "in size: the paper gives no number to hold ours against" in text   # shuffle: "far less hurt" only
    assert "*Verdict*: agrees for vit: distance grows with depth." in text
    assert "1500" not in text and "25.0 min" in text
    for name in FIGURES:
        assert (out / f"{name}.png").stat().st_size > 1000, name
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    make_tables(experiment, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first   # regenerated byte for byte
    events = list((experiment / "tensorboard" / "cpu").glob("events.out.tfevents.*"))
    assert len(events) == 1                                          # one event file, the current figures


UNDECIDED = "in direction, whether it agrees with the paper's loss without a position embedding: cannot tell: "


@pytest.mark.parametrize("deltas, expected, said", [
    ([(-0.03, 0.01), (-0.02, 0.01)], "in direction agrees with the paper's loss without a position embedding",
     ["lower", "lower"]),
    ([(-0.03, 0.01), (0.02, 0.01)], "in direction disagrees with the paper's loss without a position embedding",
     ["lower", "higher"]),
    ([(0.002, 0.005), (-0.003, 0.004)], "in direction disagrees with the paper's loss without a position embedding",
     ["no difference", "no difference"]),
    ([(0.002, 0.005), (-0.003, None)], UNDECIDED + "one seed, no interval, for 1 of the 2 differences",
     ["no difference", "cannot tell"]),
    ([(-0.03, 0.01), (-0.003, 0.02)], UNDECIDED + "the 95% interval of 1 of the 2 differences includes 0",
     ["lower", "cannot tell"]),
    ([(-0.03, 0.03), (0.01, 0.02)], UNDECIDED + "the 95% interval of each of the 2 differences includes 0",
     ["cannot tell", "cannot tell"]),  # touches 0
])
def test_position_embedding_verdict_says_only_what_the_intervals_allow(deltas, expected, said):
    """In direction against Table 8's loss, from every size's none − learn interval in the shared
    vocabulary; in size apart, each interval against the published -0.0283. The figure's verdict
    says each size's claim as the claim reads it."""
    from experiments.inductive_bias.numbers import Profile, position_claims
    rows = [{"name": "none", "fraction": f, "delta": Estimate(v, hw, 1 if hw is None else 3)}
            for f, (v, hw) in zip((0.01, 1.0), deltas)]
    p = Profile("cpu", {}, Path("."))
    claims = [c for _, c in position_claims(p, rows)]
    assert [c.category for c in claims] == said and [c.wording.size for c in claims] == [-0.0283, -0.0283]
    text = verdict(p, "ablation", rows, [])
    assert text.startswith(f"{expected}; none − learn") and misread(text) == []
    assert all(c.said() in text for c in claims) and "published -0.0283" in text


def test_corrupt_records_are_one_line_and_write_nothing(experiment, tmp_path, capsys):
    out = tmp_path / "results"
    (experiment / "vit_none_f0.01_s1" / "probes.json").write_text("{")
    (experiment / "vit_learn_f0.01_s1" / "probes.json").write_text("{")
    args = ["tables", "--experiment", NAME, "--runs_dir", str(experiment.parent), "--out", str(out), "--readme", ""]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "probes.json is not valid JSON" in err[0] and not out.exists()
    (experiment / "vit_learn_f0.01_s1" / "probes.json").write_text("{}")
    (experiment / RECORD).write_text("[1")
    assert main(args) == 2
    assert "inductive_bias.json is not valid JSON" in capsys.readouterr().err and not out.exists()


def test_a_run_still_improving_silences_the_readings_that_rest_on_it(experiment, tmp_path):
    """Converged or silent, per reading: one ablation run still improving (none at the full set)
    marks its cells and is named as not read; no reading uses that row (nor the learn row it is
    paired with), the rows whose runs all plateaued are read; every figure's *Here* names the row
    left out and reads the same rows as the reading does, its numbers and verdict from none of that row."""
    out = tmp_path / "results"
    make_tables(experiment, out)
    assert _rows(out)[("ablation", "none", 1.0)]["still_improving"] == "1"
    text = (out / f"{NAME}.md").read_text()
    head, _, *body = [ln.strip("|").split(" | ") for ln in text.split("### ViT ablations", 1)[1].splitlines()
                      if ln.startswith("| ")]
    none = dict(zip([h.strip() for h in head], [c.strip() for c in next(r for r in body if r[0].strip() == "none")]))
    assert none["Δ vs learn at 1"].endswith(" †") and not none["Δ vs learn at 0.01"].endswith("†")  # a Δ rests on both cells
    reading = text.split("### What the numbers say\n\n", 1)[1].split("\n\n", 1)[0]
    assert reading.startswith("- Not read: none at 1, where a run was still improving at its last validation (†)")
    none = next(line for line in reading.splitlines() if line.startswith("- **ViT without a position embedding**"))
    assert "at 0.01 (590 images)" in none and "59,000" not in none   # read at 590 images only
    assert "- **Attention distance with depth**" in reading          # the family runs all plateaued
    apart = "*Here* (not read: none at 1, where a run was still improving at its last validation (†)): "
    assert text.count(apart) == len(FIGURES) and "*Here*: Not read" not in text
    ablation = next(ln for ln in text.splitlines() if ln.startswith("*Measures*: ViT's test accuracy"))
    assert ablation.count("none − learn") == 2   # at 590 images only, in what it shows and in its verdict
    assert "none − learn at 0.01 (590 images)" in ablation.split("*Verdict*")[1] and "at 1 (" not in \
        ablation.split("*Verdict*")[1]
    # the README's row rests on none − learn at the full set: not read
    from experiments.inductive_bias.tables import findings
    (row,) = findings(experiment)
    assert row.verdict == "not read: 1 of 6 runs still improving (†)"


def test_a_family_still_improving_is_in_no_robustness_pair(converged, tmp_path):
    """The reading pairs transformers with CNNs only among rows whose runs all plateaued: a ResNet
    run still improving takes resnet out of every robustness comparison (vit − resnet was read)."""
    out = tmp_path / "results"
    make_tables(converged, out)
    robust = [line for line in (out / f"{NAME}.md").read_text().splitlines() if line.startswith("- **Robustness to")]
    assert robust and all("vit − resnet" in line for line in robust)
    summary = next(converged.glob("resnet_f1_s1_*")) / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "val_history": val_curve(200, False)}))
    make_tables(converged, out)
    reading = (out / f"{NAME}.md").read_text().split("### What the numbers say\n\n", 1)[1].split("\n\n", 1)[0]
    assert reading.startswith("- Not read: resnet at 1, where a run was still improving")
    robust = [line for line in reading.splitlines() if line.startswith("- **Robustness to")]
    assert robust and not any("resnet" in line.split("CNNs?")[1] for line in robust)
    # its row of probes is marked as a whole, the others are not
    family_rows = [ln for ln in (out / f"{NAME}.md").read_text().split("### Probes per family", 1)[1]
                   .split("###", 1)[0].splitlines() if ln.startswith("| ") and not ln.startswith("| family")]
    marked = [ln.split(" | ")[:2] for ln in family_rows if ln.startswith("| resnet †")]
    assert marked == [["| resnet †", "1"]] and sum("†" in ln for ln in family_rows) == 1
    # the figures' captions read the same rows: resnet named as not read, in no pair, shift or CKA of theirs
    captions = [ln for ln in (out / f"{NAME}.md").read_text().split("### Figures", 1)[1].splitlines()
                if ln.startswith("*Measures*")]
    assert captions and all("*Here* (not read: resnet at 1, where a run was still improving" in c for c in captions)
    heres = [c.split("*Here*", 1)[1].split("*Verdict*")[0].split("): ", 1)[1] for c in captions]
    assert not any("resnet" in h for h in heres), [h for h in heres if "resnet" in h]
    # the figures show its numbers, named with the mark the tables give them
    from experiments.inductive_bias.figures import _named
    from experiments.inductive_bias.numbers import load
    (p,) = load(converged)
    assert _named(p, "resnet", 1.0) == "resnet †" and _named(p, "vit", 1.0) == "vit"


def test_a_verdict_says_at_how_many_sizes_it_was_measured(converged):
    """None − learn below 0 at the one size it ran is not "at every training-set size"."""
    from experiments.inductive_bias.numbers import load_profiles
    (p,) = load_profiles("cpu", json.loads((converged / RECORD).read_text())["profiles"]["cpu"], converged)
    one = [{"name": "none", "fraction": 0.01, "delta": Estimate(-0.03, 0.01, 3)}]
    assert verdict(p, "ablation", one, []) == (
        "in direction agrees with the paper's loss without a position embedding; none − learn at 0.01 (590 images): "
        "worse without: the 95% interval [-0.0400, -0.0200] excludes 0 and reaches beyond ±0.0100, in size: "
        "consistent, the published -0.0283 lies within our interval [-0.0400, -0.0200] (ViT-B/16, ImageNet 5-shot).")
    two = [*one, {"name": "none", "fraction": 1.0, "delta": Estimate(-0.08, 0.01, 3)}]
    assert "; at 1 (59,000 images): worse without" in verdict(p, "ablation", two, []) and \
        "our interval [-0.0900, -0.0700] lies wholly below the published -0.0283" in verdict(p, "ablation", two, [])


def test_uniform_attention_is_named_as_a_caveat(converged, tmp_path):
    """Where every layer attends as far as uniform attention would, the reading says the attention
    is untrained rather than reading the shuffle results as a learned bias."""
    experiment = converged
    for path in experiment.glob("*/probes.json"):
        probes = json.loads(path.read_text())
        if probes.get("attention_distance"):
            probes["attention_distance_uniform"] = probes["attention_distance"]
            path.write_text(json.dumps(probes))
    make_tables(experiment, tmp_path / "results")
    text = (tmp_path / "results" / f"{NAME}.md").read_text()
    assert "**Caveat**: Every attention layer of vit, swin attends on average as far as uniform attention" in text
    assert text.count("no local heads have formed") == 2      # the reading and the shuffle figure
    # what the JFT-300M paper found is not held against 118-295 images (Raghu et al.: fewer with less data)
    assert ("*Verdict*: no local heads at this budget: vit attend on average as far as uniform attention would in "
            "their first and last layers (the layer means within 5% of it); the paper finds local heads after "
            "JFT-300M pre-training, and Raghu et al. 2021 fewer with less data, so this is not held against it") in text
    assert "disagrees on local heads" not in text
    assert "no growth with depth" not in text   # growth is read per family with its interval, not from the means


def test_a_profile_with_several_budgets_gets_a_section_and_figures_each(experiment, tmp_path):
    record = json.loads((experiment / RECORD).read_text())
    cpu = record["profiles"]["cpu"]
    for table in ("families", "ablations"):
        cpu[table] = [{**e, "budget": b} for b in ("tiny", "small") for e in cpu[table]]
    cpu["axes"]["budgets"] = ["tiny", "small"]
    (experiment / RECORD).write_text(json.dumps(record))
    out = tmp_path / "results"
    make_tables(experiment, out)
    text = (out / f"{NAME}.md").read_text()
    assert "## Profile cpu, budget tiny" in text and "## Profile cpu, budget small" in text
    assert (out / "ablation.png").exists() and (out / "ablation_cpu_small.png").exists()
    budgets = [r["budget"] for r in csv.DictReader(open(out / f"{NAME}.csv"))]
    assert budgets.count("tiny") == budgets.count("small") > 0


def test_robustness_is_chance_corrected_and_a_model_answering_one_class_is_named():
    from experiments.inductive_bias.numbers import kept, single_class
    from experiments.inductive_bias.words import _single_class_text
    from experiments.statistics import Estimate

    def e(v):
        return Estimate(v, 0.01, 3)
    fams = [{"name": "resnet", "clean": e(0.80), "patchdrop": e(0.20), "majority": e(0.135), "top_share": e(0.4)},
            {"name": "vit", "clean": e(0.45), "patchdrop": e(0.135), "majority": e(0.135), "top_share": e(1.0)}]
    shares, words = kept(fams, "patchdrop")
    assert shares == pytest.approx({"resnet": (0.20 - 0.135) / (0.80 - 0.135), "vit": 0.0})
    assert words.startswith("share of its clean accuracy above chance")
    assert single_class(fams) == ["vit"]
    assert _single_class_text(fams).startswith(" vit answers one class for 99% or more of the images with 50%")
    old = [{**f, "majority": None, "top_share": None} for f in fams]   # records made before chance was probed
    shares, words = kept(old, "patchdrop")
    assert shares == pytest.approx({"resnet": 0.25, "vit": 0.3}) and "uncorrected for chance" in words
    assert single_class(old) == [] and _single_class_text(old) == ""


@pytest.mark.parametrize("ratios, expected", [
    # ViT's mean distance / uniform at 118 and at 590 images, per seed
    (((1.00, 0.99, 1.01), (0.90, 0.88, 0.92)), "lower"),            # more local with more data
    (((0.90, 0.88, 0.92), (1.00, 0.99, 1.01)), "higher"),           # less local with more data
    (((1.000, 0.990, 1.010), (1.002, 0.991, 1.013)), "no difference"),
    (((1.00, 0.95, 1.02), (0.99, 0.99, 0.99)), "cannot tell"),
])
def test_locality_against_training_set_size_is_read_from_the_paired_change(ratios, expected):
    """The change of ViT's attention distance over the uniform distance, largest size − smallest,
    paired by seed (hand-made probes: uniform distance 10 px in every layer)."""
    from experiments.inductive_bias.numbers import Profile, locality, locality_claim
    from experiments.inductive_bias.words import locality_text
    rec, runs, probes = {"families": []}, {}, {}
    for f, by_seed in zip((0.002, 0.01), ratios):
        for seed, r in enumerate(by_seed):
            name = f"vit_f{f}_s{seed}"
            rec["families"].append({"family": "vit", "fraction": f, "seed": seed, "run": name})
            runs[name] = Summary(train_size=int(f * 59000))
            probes[name] = {"attention_distance": [[10 * r, 10 * r], [10 * r, 10 * r]],
                            "attention_distance_uniform": [[10.0, 10.0], [10.0, 10.0]]}
    p = Profile("cpu", rec, Path("."), runs=runs, probes=probes)
    loc = locality(p)
    diffs = [b - a for a, b in zip(*ratios)]
    half = T975_DF2 * statistics.stdev(diffs) / math.sqrt(3)
    assert loc["change"].value == pytest.approx(statistics.fmean(diffs))
    assert loc["change"].ci95 == pytest.approx(half)
    assert loc["per_size"][0.002].value == pytest.approx(statistics.fmean(ratios[0]))
    claim = locality_claim(p, loc)
    assert claim.estimate == loc["change"] and claim.category == expected and claim.wording.margin == "locality"
    text = locality_text(p, loc, claim)
    assert text.startswith("vit's mean attention distance over the uniform-attention distance")
    assert "0.002 (118 images)" in text and "0.01 (590 images)" in text and text.endswith(claim.said())


def test_robustness_is_read_from_paired_intervals(tmp_path):
    """A transformer whose kept share is above the CNN's on average but not in every seed: the
    interval includes 0, so the reading cannot tell (no direction from the means alone)."""
    exp = write_experiment(tmp_path / "runs" / NAME, None)
    for seed, drop in zip(SEEDS, (0.10, 0.50, 0.15)):   # vit shares 0.14, 0.71, 0.21 vs resnet 0.25, 0.26, 0.28
        run = exp / f"vit_f1_s{seed}_{'%08x' % seed}" / "probes.json"
        probes = json.loads(run.read_text())
        probes["robustness"]["patchdrop_accuracy"][1] = drop
        run.write_text(json.dumps(probes))
    make_tables(exp, tmp_path / "out")
    text = (tmp_path / "out" / f"{NAME}.md").read_text()
    diff = [d / CLEAN["vit"] - (DROP["resnet"] + 0.01 * s) / CLEAN["resnet"] for s, d in zip(SEEDS, (0.10, 0.50, 0.15))]
    assert (f"vit − resnet, paired by seed: {statistics.fmean(diff):+.3f} ± {ci(diff):.3f}: cannot tell: the 95% "
            "interval") in text
    assert ("*Verdict*: At 1 (59,000 images): in direction, cannot tell: the 95% interval of 1 of the 2 differences "
            "includes 0; no direction is read over the transformer − CNN pairs; vit − resnet in size: disagrees, our "
            "interval") in text
    assert "lies wholly below the published +0.8800" in text


def test_patchdrop_and_shifts_probed_with_the_older_mean_colour_fill_are_not_read(converged, tmp_path):
    """A record without `fill` blanked with the dataset's mean colour (0.0 in normalised space), a grey
    square on Fashion-MNIST's black background: its PatchDrop and shift numbers are not read (the table
    shows —, the reading and captions say why, no verdict is drawn, the figures draw no curve); the
    shuffle, which blanks nothing, is read as before."""
    make_tables(converged, tmp_path / "black")
    black = (tmp_path / "black" / f"{NAME}.md").read_text()
    for run in converged.glob("*/probes.json"):
        probes = json.loads(run.read_text())
        for key in ("fill", "fill_value"):
            probes.get("robustness", {}).pop(key, None)
        run.write_text(json.dumps(probes))
    make_tables(converged, tmp_path / "older")
    older = (tmp_path / "older" / f"{NAME}.md").read_text()
    assert "**Robustness to PatchDrop 0.5** (share of its clean accuracy" in black
    assert "**Robustness to PatchDrop 0.5**: not read: these runs' probes blanked PatchDrop's cells and a shift's " \
           "border with the dataset's mean colour, not black (0 before normalisation)" in older
    assert older.count("PatchDrop's cells and a shift's border with the dataset's mean colour") == 3  # reading, 2 captions
    assert "lies wholly below the published" in black and "lies wholly below the published" not in older
    row = next(line for line in older.splitlines() if line.startswith("| vit | 1 |")).split(" | ")
    assert row[3] == "—" and row[5] == row[6] == "—" and row[4] != "—"   # PatchDrop, shifts; shuffle read
    assert [line for line in black.splitlines() if "Robustness to 4x4 shuffle" in line] == \
           [line for line in older.splitlines() if "Robustness to 4x4 shuffle" in line]
    # no robustness probed at all (a profile whose probes leave it out): nothing is owed to a fill
    for run in converged.glob("*/probes.json"):
        probes = json.loads(run.read_text())
        probes.pop("robustness", None)
        run.write_text(json.dumps(probes))
    make_tables(converged, tmp_path / "none")
    assert "a shift's border with the dataset's mean colour" not in (tmp_path / "none" / f"{NAME}.md").read_text()


def test_uniform_attention_caveat_names_each_family_once_with_its_sizes():
    """Rows are one per family and size: a family flat at two sizes is named once, with both sizes;
    at one size only, without sizes."""
    from experiments.inductive_bias.numbers import still_uniform
    from experiments.statistics import Estimate

    def row(name, size, rel):
        est = Estimate(rel, None, 1) if rel is not None else None
        return {"name": name, "train_size": size, "rel_first": est, "rel_last": est}
    rows = [row("vit", 118, 0.99), row("vit", 295, 1.01), row("resnet", 118, None),
            row("deit", 118, 0.80), row("deit", 295, 1.00)]
    assert still_uniform(rows) == ["vit (at 118 and 295 images)", "deit (at 295 images)"]
    assert still_uniform([row("vit", 590, 0.99)]) == ["vit"]


def test_growth_and_robustness_claims_are_silent_while_a_run_behind_them_still_improves(converged):
    """Converged or silent, per claim: a vit run still improving leaves vit's attention growth and
    each vit − CNN robustness claim unread, in the reading's words and in the figures' verdicts alike
    (whatever the profile's own gate says)."""
    from experiments.inductive_bias.words import growth_text, robustness_text, robustness_verdict
    summary = next(converged.glob("vit_f1_s1_*")) / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "val_history": val_curve(200, False)}))
    p = _profile(converged)
    families = family_rows(p)
    vit = next(r for r in families if r["name"] == "vit" and r["fraction"] == 1.0)
    growth = growth_claim(vit)
    assert (growth.runs, growth.improving, growth.category) == (3, 1, None)
    said = growth_text(p, vit, "vit")
    assert growth.not_read_clause() in said and "grows" not in said
    assert verdict(p, "attention_distance", [], families) == ""
    for key in ("patchdrop", "shuffle4"):
        claims = [(t, c, claim) for t, c, claim in robustness_claims(p, 1.0, key) if t == "vit"]
        assert claims and all(claim.improving == 1 and claim.category is None for _, _, claim in claims)
        assert "keeps more" not in robustness_text(claims) and "not read: 1 of the 6 runs" in robustness_text(claims)
        assert robustness_verdict(claims) == ""


def test_locality_is_not_read_while_a_run_behind_it_still_improves():
    """The locality bullet says its claim's short not-read form, with no verdict, while one of the vit
    runs at its two sizes still improves; read once they all plateaued."""
    from experiments.inductive_bias.numbers import Profile, locality, locality_claim
    from experiments.inductive_bias.words import reading
    rec, runs, probes = {"families": []}, {}, {}
    for f, ratio in ((0.002, 1.0), (0.01, 0.9)):
        for seed in SEEDS:
            name = f"vit_f{f}_s{seed}"
            rec["families"].append({"family": "vit", "fraction": f, "seed": seed, "run": name})
            runs[name] = Summary(train_size=int(f * 59000), status="done", test_acc=0.8, identity={}, steps=200,
                                 val_history=val_curve(200, plateaued=(f, seed) != (0.01, 2)))
            probes[name] = {"attention_distance": [[10 * (ratio + 0.01 * seed)] * 2] * 2,
                            "attention_distance_uniform": [[10.0, 10.0], [10.0, 10.0]]}
    p = Profile("cpu", rec, Path("."), runs=runs, probes=probes)
    claim = locality_claim(p, locality(p))
    assert (claim.runs, claim.improving, claim.category) == (6, 1, None)
    said = next(line for line in reading(p, [], family_rows(p)) if line.startswith("- **Locality"))
    assert said == f"- **Locality against training-set size**: {claim.silence()}."
    runs["vit_f0.01_s2"] = replace(runs["vit_f0.01_s2"], val_history=val_curve(200))
    claim = locality_claim(p, locality(p))
    assert claim.converged and claim.category == "lower"
    said = next(line for line in reading(p, [], family_rows(p)) if line.startswith("- **Locality"))
    assert claim.said() in said and "not read" not in said


def test_the_report_names_the_spec_s_families_not_probed_yet(converged, tmp_path, monkeypatch):
    """A family the spec's profile lists whose runs have no probes on record (added to the spec, not
    trained yet) is named with its sizes under the probes table; none when every one is probed."""
    import experiments.inductive_bias.runner as runner
    spec = {"profiles": {"cpu": {"families": ["resnet", "vit", "deit", "swin"], "family_fractions": [1.0]}}}
    monkeypatch.setattr(runner, "load_ib_spec", lambda name=NAME: spec)
    out = tmp_path / "results"
    make_tables(converged, out)
    said = (out / f"{NAME}.md").read_text()
    assert "\nNot probed yet in the cpu profile as its spec stands: deit at 1 (59,000 images).\n" in said
    spec["profiles"]["cpu"]["families"] = ["resnet", "vit", "swin"]
    make_tables(converged, out)
    assert "Not probed yet" not in (out / f"{NAME}.md").read_text()


def test_each_findings_row_states_the_steps_of_the_runs_it_compares():
    """A claim compares like with like, or runs each trained to its own plateau with the steps
    stated: the committed rows compare none (12,000 steps) with learned 1D (8,000), and ViT at 295
    images (14,760) with ViT at 118 (8,000)."""
    from experiments.inductive_bias.tables import _steps, findings
    rows = findings(Path(__file__).resolve().parents[1] / "results" / "reference" / "inductive_bias")
    assert rows and all("(steps: " in r.ours for r in rows)
    position = next(r for r in rows if r.ours.startswith("none − learned 1D"))
    assert "(steps: none 12,000, learned 1D 8,000)" in position.ours
    locality = next(r for r in rows if r.ours.startswith("attention distance"))
    assert "(steps: ViT 14,760 / 8,000)" in locality.ours
    assert _steps({"none": 8000, "learned 1D": 8000}) == "steps: 8,000 each"
    assert _steps({"none": "varies", "learned 1D": 8000}) == "steps: none varies, learned 1D 8,000"


def test_the_steps_per_run_name_each_row_where_they_differ():
    """'varies' told a reader nothing: the committed profile's rows trained 2,000 to 14,760 steps,
    each to its own plateau, and the provenance names each family's and variant's."""
    from experiments.inductive_bias.numbers import load
    from experiments.inductive_bias.words import provenance
    (p,) = load(Path(__file__).resolve().parents[1] / "results" / "reference" / "inductive_bias")
    (line,) = [ln for ln in provenance(p) if ln.startswith("- steps per run: ")]
    assert "varies" not in line
    assert "at 0.002 (118 images): resnet 2,000, vit 8,000," in line and "none 12,000" in line
    assert "at 0.005 (295 images): resnet 2,000, vit 14,760," in line
