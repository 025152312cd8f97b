"""`python -m experiments probe`: every applicable probe on trained run folders, into probes.json,
figures and the run's TensorBoard; bad input is one line."""
from __future__ import annotations

import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from datamodules import ImageClassificationDataModule
from experiments.__main__ import main
from experiments.runs.run.run_config import load_config


@pytest.mark.parametrize("family, figures", [
    ("vit", {"robustness", "cka", "attention_distance", "attention_maps", "pos_embed_similarity"}),
    ("resnet", {"robustness", "cka"}),
])
def test_probe_writes_results_figures_and_tensorboard(cli, family, figures):
    code, run_dir = cli("fit", "--model.family", family, "--test_after_fit", "false")
    assert code == 0
    assert main(["probe", str(run_dir), "--images", "40"]) == 0
    r = json.loads((run_dir / "probes.json").read_text())
    assert r["family"] == family and r["images"] == 40 and r["split"] == "test"
    assert {f"probes/{f}.png" for f in figures} == set(r["figures"])
    assert all((run_dir / f).stat().st_size > 5_000 for f in r["figures"])
    rob = r["robustness"]
    assert rob["drop_fractions"][0] == 0 and rob["patchdrop_accuracy"][0] == rob["clean_accuracy"]
    # blanked black: the run's data normalised 0 (Naseer et al.'s fill), not the mean colour (0.0)
    mean, std = ImageClassificationDataModule(**load_config(run_dir)["data"]).normalization
    assert rob["fill"] == "black" and rob["fill_value"] == pytest.approx([float(-mean[0] / std[0])], abs=1e-5)
    assert rob["fill_value"][0] < -0.5
    assert len(r["cka"]["matrix"]) == len(r["cka"]["layers"])
    assert all(abs(r["cka"]["matrix"][i][i] - 1) < 1e-4 for i in range(len(r["cka"]["layers"])))
    if family == "vit":
        assert len(r["attention_distance"]) == 4 and not r["not_applicable"]  # 4 blocks in vit-tiny
        assert {"horizontal_mean", "vertical_mean", "far_mean", "bands", "two_d"} <= set(r["pos_embed"])
        # how concentrated, beside how far: entropy over uniform attention's, one per layer and head
        assert len(r["attention_entropy"]) == 4 and all(0 < v <= 1 for row in r["attention_entropy"] for v in row)
    else:
        assert set(r["not_applicable"]) == {"attention", "maps", "pos_embed"}
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0}).Reload()
    assert {f"probes/{f}" for f in figures} <= set(events.Tags()["images"])


def test_probe_bad_input_is_one_line(cli, tmp_path, capsys):
    assert main(["probe", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "config.yaml' is missing or has no data section" in err[0]
    code, run_dir = cli("fit", "--model.family", "resnet", "--test_after_fit", "false")
    assert main(["probe", str(run_dir), "--images", "2"]) == 2
    assert "--images 2: allowed integers >= 4" in capsys.readouterr().err
    assert not (run_dir / "probes.json").exists()


def test_the_fill_benchmark_measures_patchdrop_and_shifts_under_both_fills(cli, capsys):
    """benchmarks/probe_fill.py: the numbers behind the probes' black fill (docs/history.md), on a run."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from probe_fill import main as probe_fill
    code, run_dir = cli("fit", "--model.family", "resnet", "--test_after_fit", "false")
    assert code == 0 and probe_fill([str(run_dir), "--images", "40"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if " fill: PatchDrop at 0.1/0.3/0.5/0.7/0.9: " in line]
    assert [line.split(" fill:")[0].strip() for line in lines] == ["mean colour", "black"]
    assert all(len(line.split("share above chance kept: ")[1].split(";")[0].split()) == 5 for line in lines)
