"""exp-complexity: the committed spec's profiles are runnable, a tiny spec runs every part end to
end into its tables, a part run again replaces only its own entry, and bad input is one line."""
from __future__ import annotations

import math

import csv
import json
from pathlib import Path

import pytest
import torch
import yaml

from experiments.__main__ import main
from experiments.complexity.runner import PARTS, load_complexity_spec, record_path, source_run
from experiments.complexity.tables import make_tables
from experiments.complexity.paper_models import PAPER_MODELS, build_paper_model
from modules import build_model

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "experiments" / "configs" / "smoke.yaml")


def tiny_spec() -> dict:
    return {"name": "complexity", "runner": "complexity", "paper_image_size": 224, "profiles": {"cpu": {
        "scaling": {"models": ["DeiT-Ti", "Swin-T"], "resolutions": [32, 64], "flop_resolutions": [32, 48, 64],
                    "batch_size": 1, "crossover": [["DeiT-Ti", "Swin-T"]]},
        "ours": {"families": ["vit", "swin"], "budget": "tiny", "in_chans": 1, "resolutions": [28, 56],
                 "batch_size": 2, "crossover": [["vit", "swin"]]},
        "timing": {"warmup": 1, "reps": 1, "max_point_seconds": 60, "memory_limit_gib": 8},
        "interpolation": {"source": {"family": "vit", "budget": "tiny", "max_epochs": 1, "args": ["--config", SMOKE, "--data.crop_padding", "0"]},
                          "target_size": 56, "methods": ["bicubic", "none"], "finetune_steps": 2, "lr": 1e-4,
                          "batch_size": 8, "eval_images": 50}}}}


@pytest.fixture
def spec_env(fmnist_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("FASHION_MNIST_DIR", str(fmnist_dir))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    path = tmp_path / "complexity.yaml"
    path.write_text(yaml.safe_dump(tiny_spec()))
    return path, tmp_path / "runs"


@pytest.mark.parametrize("profile", ["cpu", "gpu"])
def test_committed_profiles_are_runnable(profile, tmp_path, capsys):
    """Every model and resolution of the committed spec builds (on meta: no compute) and the
    interpolation source's `fit` options are accepted by the CLI."""
    spec = load_complexity_spec()
    p = spec["profiles"][profile]
    labels = {m.label: m.timm_name for m in PAPER_MODELS}
    for label in p["scaling"]["models"]:
        for r in sorted(set(p["scaling"]["resolutions"]) | set(p["scaling"]["flop_resolutions"])):
            build_paper_model(labels[label], r, device="meta")
    with torch.device("meta"):
        for family in p["ours"]["families"]:
            for r in p["ours"]["resolutions"]:
                build_model(family, p["ours"]["budget"], image_size=r, in_chans=p["ours"]["in_chans"])
    for a, b in p["scaling"]["crossover"] + p["ours"]["crossover"]:
        assert {a, b} <= set(p["scaling"]["models"]) | set(p["ours"]["families"])
    run = source_run(tmp_path / "runs", p["interpolation"]["source"])
    assert run.run_dir.parent == tmp_path / "runs" / "complexity"
    assert main(["run_dir", *run.args]) == 0 and capsys.readouterr().out.strip() == str(run.run_dir)


def test_tiny_spec_end_to_end(spec_env, tmp_path, in_process_launches):
    spec, runs = spec_env
    assert main(["complexity", "--spec", str(spec), "--profile", "cpu", "--runs_dir", str(runs)]) == 0
    record = json.loads(record_path(runs, "cpu").read_text())
    assert set(record["parts"]) == set(PARTS)
    for part in PARTS:
        assert record["parts"][part]["provenance"]["seconds"] > 0
    ours = {m["model"]: m for m in record["parts"]["ours"]["models"]}
    assert [t["resolution"] for t in ours["vit"]["timing"]] == [28, 56]
    assert all(t["train_status"] == "ok" and t["train_img_s"] > 0 for t in ours["vit"]["timing"])
    vit = [f["gflops"] for f in ours["vit"]["flops"]]
    assert vit[1] > 4 * vit[0]  # 4x the patches, and attention's N^2 term on top

    out = tmp_path / "results"
    paths = make_tables(runs / "complexity", out)
    md = (out / "complexity.md").read_text()
    for heading in ("Paper-scale models at 224", "cost against resolution", "position-embedding interpolation"):
        assert heading in md
    assert (out / "complexity_scaling_cpu.png").stat().st_size > 10_000
    rows = list(csv.DictReader((out / "complexity_interpolation.csv").open()))
    assert {(r["method"], r["phase"]) for r in rows} >= {("bicubic", "after fine-tune"), ("none", "before fine-tune")}
    assert out / "complexity.csv" in paths and len(list(csv.DictReader((out / "complexity.csv").open()))) == len(PAPER_MODELS)

    # a part measured again replaces its own entry only; the source run is reused, not retrained
    before = json.loads(record_path(runs, "cpu").read_text())
    source_ckpt = next((runs / "complexity").glob("*/checkpoints/best.ckpt"))
    mtime = source_ckpt.stat().st_mtime_ns
    assert main(["complexity", "--spec", str(spec), "--runs_dir", str(runs), "--parts", "interpolation"]) == 0
    after = json.loads(record_path(runs, "cpu").read_text())
    assert source_ckpt.stat().st_mtime_ns == mtime
    for part in ("paper", "scaling", "ours"):
        assert after["parts"][part] == before["parts"][part]


def test_bad_input_is_one_line(spec_env, capsys):
    spec, runs = spec_env
    cases = [(["--parts", "speed"], "unknown part 'speed': allowed paper, scaling, ours, interpolation"),
             (["--profile", "tpu"], "unknown profile 'tpu': allowed cpu"),
             (["--profile", "gpu"], "unknown profile 'gpu'")]
    for args, message in cases:
        assert main(["complexity", "--spec", str(spec), "--runs_dir", str(runs), *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    bad = tiny_spec()
    bad["profiles"]["cpu"]["timing"]["repeats"] = 3
    spec.write_text(yaml.safe_dump(bad))
    assert main(["complexity", "--spec", str(spec), "--runs_dir", str(runs)]) == 2
    assert "unknown key 'repeats' in timing of profile 'cpu'" in capsys.readouterr().err
    assert not runs.exists()  # rejected before anything was measured or written
    # the interpolation part's settings, refused before its source run trains (they were refused after)
    for key, value, said in (("methods", ["bicubic", "cubic"], "methods=['bicubic', 'cubic']: allowed a non-empty list"),
                             ("lr", "abc", "lr='abc': allowed a learning rate > 0"),
                             ("finetune_steps", -1, "finetune_steps=-1: allowed integers >= 0"),
                             ("target_size", 0, "target_size=0: allowed integers >= 1")):
        bad = tiny_spec()
        bad["profiles"]["cpu"]["interpolation"][key] = value
        spec.write_text(yaml.safe_dump(bad))
        assert main(["complexity", "--spec", str(spec), "--runs_dir", str(runs), "--parts", "interpolation"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: interpolation of profile 'cpu' of {spec.name}: {said}"), err
        assert not runs.exists()
    spec.write_text(yaml.safe_dump(tiny_spec()))
    record = record_path(runs, "cpu")
    record.parent.mkdir(parents=True)
    record.write_text("{half a record")
    assert main(["complexity", "--spec", str(spec), "--runs_dir", str(runs), "--parts", "paper"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "is not valid JSON" in err[-1] and "move it away to measure afresh" in err[-1]
    assert record.read_text() == "{half a record"  # nothing measured over it
    assert main(["sweep", "--spec", "complexity", "--dry_run"]) == 2
    assert "is run by `python -m experiments complexity`" in capsys.readouterr().err


def test_exponents_are_fitted_over_window_aligned_sizes_and_read_from_every_local_exponent():
    """Counted FLOPs have no sampling error: k is a least-squares fit, and the regime is read from
    the local exponents between neighbouring sizes (how far the curve bends), not from an interval."""
    from experiments.complexity.tables import exponent, regime, window_alignment
    assert window_alignment("Swin-T") == 224 and window_alignment("ViT-B/16") is None
    sizes = [224, 256, 448, 512, 896, 1024]
    swin = [x * x * (1.3 if x % 224 else 1.0) for x in sizes]  # padding inflates the unaligned sizes
    e = exponent("Swin-T", sizes, swin)
    assert e.sizes == [224, 448, 896] and e.k == pytest.approx(2.0) and regime(e) == "linear in the patches"
    e = exponent("DeiT-S", sizes, [x ** 4 for x in sizes])
    assert e.sizes == [512, 896, 1024] and regime(e) == "quadratic in the patches"
    e = exponent("DeiT-S", sizes, [x ** 2 + (x / 300) ** 4 * 1e4 for x in sizes])
    local = [math.log(b[1] / a[1]) / math.log(b[0] / a[0]) for a, b in
             zip(*(lambda p: (p, p[1:]))([(x, x ** 2 + (x / 300) ** 4 * 1e4) for x in (512, 896, 1024)]))]
    assert (e.local_low, e.local_high) == pytest.approx((min(local), max(local)))
    assert 2.1 < e.local_low < e.k < e.local_high < 3.9 and regime(e) == "between linear and quadratic"
    bent = [x ** 3 * f for x, f in zip(sizes, (1, 1, 1, 0.5, 2.0, 0.6))]  # local exponents 5.48 and -6.02
    assert regime(exponent("DeiT-S", sizes, bent)).startswith("cannot tell: its local exponents -")
    assert regime(exponent("DeiT-S", [512, 1024], [1.0, 4.0])).startswith("cannot tell: fewer than 3 sizes")


def test_the_interpolation_study_is_marked_where_its_source_run_is_not_known_to_have_plateaued(tmp_path):
    """Every number of the study rests on its source run: one trained an epoch with a single
    validation (the committed cpu record's) is marked †, its numbers shown and nothing concluded; a
    plateaued source is not marked; a source_run naming no plain folder of the experiment is not read."""
    from experiments.complexity.tables import render_interpolation, source_summary
    rows = [{"method": "source", "phase": "source", "resolution": 28, "val_acc": 0.71, "test_acc": 0.70,
             "val_images": 1500, "test_images": 1500},
            *({"method": m, "phase": ph, "resolution": 56, "val_acc": 0.6, "test_acc": 0.6, "val_images": 1500,
               "test_images": 1500} for m in ("bicubic", "native") for ph in ("before fine-tune", "after fine-tune"))]
    part = {"rows": rows, "source_run": "vit_src", "target_size": 56, "finetune_steps": 40, "lr": 1e-4, "batch_size": 64}

    exp = tmp_path / "runs" / "complexity"

    def plant(folder, history, steps):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "summary.json").write_text(json.dumps({"family": "vit", "status": "done", "fraction": 1.0,
                                                         "train_size": 100, "steps": steps, "val_history": history}))

    def source(history, steps):
        plant(exp / "vit_src", history, steps)
        return "\n".join(render_interpolation(part, source_summary(exp, part)))

    one = source([[429, 0.721]], 429)
    assert "val 0.7100 †, test 0.7000 †" in one and "no conclusion is drawn from them" in one
    assert "† too few validations to tell whether it plateaued: 1 run (vit_src)" in one
    flat = source([[s, 0.72] for s in range(100, 2100, 100)], 2000)
    assert "†" not in flat and "val 0.7100, test 0.7000" in flat and "not compared" in flat
    plant(tmp_path / "runs" / "elsewhere", [[429, 0.721]], 429)  # a readable record outside the experiment
    for bad in ("../elsewhere", str(tmp_path / "runs" / "elsewhere"), "..", "", ["vit_src"], None):
        assert source_summary(exp, {**part, "source_run": bad}) is None
    assert source_summary(exp, part) is not None
    unknown = "\n".join(render_interpolation(part, None))
    assert "whether it plateaued is not known" in unknown
