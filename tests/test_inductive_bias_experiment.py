"""exp-inductive-bias: the spec's checks, a tiny spec end to end (tuning on validation, family runs,
ViT ablations, probes, CKA against the ResNet, the record) into its tables, and reuse of a finished
run of another experiment with the same configuration."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from datamodules import ImageClassificationDataModule
from experiments.__main__ import main

from .conftest import tree_hashes

ROOT = Path(__file__).resolve().parents[1]

TINY = {
    "name": "inductive_bias", "runner": "inductive_bias", "dataset": "fashion_mnist", "ablated": "vit",
    "ablations": {"learn": {}, "none": {"model.pos_embed": "none"}, "sincos": {"model.pos_embed": "sincos"},
                  "patch7": {"model.patch_size": 7}},
    "profiles": {"cpu": {"families": ["resnet", "vit", "deit"], "family_fractions": [1.0],
                         "ablations": {"learn": [0.5, 1.0], "none": [0.5, 1.0], "sincos": [1.0], "patch7": [0.5]},
                         "budget": "tiny", "seeds": [0, 1], "epochs": 0.25, "min_steps": 4, "val_checks": 2,
                         "batch_size": 32, "lrs": [0.003], "probe_images": 16, "probe_patch": 4,
                         "probes": {"families": ["robustness", "cka", "attention", "maps", "pos_embed"],
                                    "ablations": ["pos_embed"]},
                         "jobs": 1}},
}


@pytest.fixture
def tiny_spec(fmnist_dir, tmp_path, monkeypatch):
    """The tiny spec on the small IDX data; each run is fitted in this process (no start-up cost)."""
    import experiments.inductive_bias.runner as ib
    monkeypatch.setenv("FASHION_MNIST_DIR", str(fmnist_dir))
    ImageClassificationDataModule("fashion_mnist").test_size  # decoded once: a first use's progress is no answer's
    launched = []

    def launcher(jobs, runs_dir):
        def in_process(run):
            launched.append(run.name)
            return main(["fit", *run.args, "--trainer.enable_model_summary", "false"])
        return in_process
    monkeypatch.setattr(ib, "_launcher", launcher)
    path = tmp_path / "inductive_bias.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path, tmp_path / "runs", launched


def test_tiny_spec_end_to_end(tiny_spec, tmp_path):
    spec, runs, launched = tiny_spec
    assert main(["inductive_bias", "--spec", str(spec), "--runs_dir", str(runs)]) == 0
    exp = runs / "inductive_bias"
    record = json.loads((exp / "inductive_bias.json").read_text())["profiles"]["cpu"]
    # tune: resnet, vit, deit at 1.0 and vit at 0.5 (one lr: each trial wins); main: 3 families x 2
    # seeds, the ablations (learn at 1.0 is vit's family run); winners of tuning are tested only
    assert {(c["family"], c["fraction"]) for c in record["tuning"]["choices"]} == {
        ("resnet", 1.0), ("vit", 1.0), ("vit", 0.5), ("deit", 1.0)}
    fams = {(r["family"], r["seed"]): r["run"] for r in record["families"]}
    assert sorted(fams) == [(f, s) for f in ("deit", "resnet", "vit") for s in (0, 1)]
    abl = {(r["variant"], r["fraction"], r["seed"]): r["run"] for r in record["ablations"]}
    assert len(abl) == 2 * (2 + 2 + 1 + 1)
    assert abl[("learn", 1.0, 0)] == fams[("vit", 0)]                 # the same run, trained once
    # launched: 4 tuning trials, then every other run once, and the 4 winners again for their test only
    assert len(launched) == len(set(launched)) + 4 and len(set(launched)) == len(set(fams.values()) | set(abl.values()))
    for (variant, fraction, seed), name in abl.items():
        cfg = yaml.safe_load((exp / name / "config.yaml").read_text())
        want = TINY["ablations"][variant]
        assert all(str(cfg["model"][k.split(".")[1]]) == str(v) for k, v in want.items())
        assert cfg["data"]["fraction"] == fraction and cfg["seed_everything"] == seed
        assert json.loads((exp / name / "summary.json").read_text())["status"] == "done"
    # the ablation variants use vit's lr of their fraction, chosen on validation
    for (variant, fraction, seed), name in abl.items():
        assert yaml.safe_load((exp / name / "config.yaml").read_text())["model"]["lr"] == 0.003
    # probes: every part on family runs, the position table only on ablation runs
    vit = json.loads((exp / fams[("vit", 0)] / "probes.json").read_text())
    assert vit["images"] == 16 and len(vit["attention_distance"]) == 4
    assert len(vit["attention_maps"]["cls"]) == 4 and len(vit["pos_embed"]["similarity"]) == 7
    resnet = json.loads((exp / fams[("resnet", 0)] / "probes.json").read_text())
    assert set(resnet["not_applicable"]) == {"attention", "maps", "pos_embed"}
    none = json.loads((exp / abl[("none", 0.5, 0)] / "probes.json").read_text())
    assert none["parts"] == ["pos_embed"] and "pos_embed" in none["not_applicable"] and none["images"] == 0
    sincos = json.loads((exp / abl[("sincos", 1.0, 1)] / "probes.json").read_text())
    assert sincos["pos_embed"]["two_d"] is True  # a fixed 2D sin-cos table has 2D structure by construction
    # CKA against the ResNet of the first seed, for every other family
    cka = [json.loads((exp / p).read_text()) for p in record["cka"]]
    assert sorted(c["family"] for c in cka) == ["deit", "vit"]
    assert all(c["reference_run"] == fams[("resnet", 0)] and len(c["matrix"]) == len(c["layers"]) for c in cka)
    # again: nothing to train, nothing to probe, no record rewritten
    launched.clear()
    before, hashes = (exp / fams[("vit", 0)] / "probes.json").read_text(), tree_hashes(exp)
    assert main(["inductive_bias", "--spec", str(spec), "--runs_dir", str(runs)]) == 0 and launched == []
    assert (exp / fams[("vit", 0)] / "probes.json").read_text() == before
    assert tree_hashes(exp) == hashes

    out = tmp_path / "results"
    assert main(["tables", "--experiment", "inductive_bias", "--runs_dir", str(runs), "--out", str(out),
                 "--readme", ""]) == 0
    for name in ("inductive_bias.md", "inductive_bias.csv", "attention_distance.png", "pos_embed_similarity.png",
                 "occlusion.png", "shuffle.png", "shift.png", "cka.png", "attention_maps.png"):
        assert (out / name).stat().st_size > 500, name


def test_a_finished_run_of_another_experiment_is_not_trained_again(tiny_spec, tmp_path):
    """A planned run whose configuration another experiment already trained is that run: the record
    names it where it lives, nothing is trained or copied, its summary is left as it was."""
    spec, runs, launched = tiny_spec
    small = json.loads(json.dumps(TINY))
    small["profiles"]["cpu"].update(families=["resnet"], ablations={"learn": [1.0]}, seeds=[0])
    spec.write_text(yaml.safe_dump(small))
    first = tmp_path / "other.yaml"
    other = json.loads(json.dumps(small))
    other["name"] = "elsewhere"
    first.write_text(yaml.safe_dump(other))
    assert main(["inductive_bias", "--spec", str(first), "--runs_dir", str(runs)]) == 0
    done = {p.parent.name: p.read_bytes() for p in sorted((runs / "elsewhere").glob("*/summary.json"))}
    n = len(launched)
    launched.clear()
    assert main(["inductive_bias", "--spec", str(spec), "--runs_dir", str(runs)]) == 0
    assert launched == [] and n > 0                                   # every run came from the other experiment
    assert not list((runs / "inductive_bias").glob("*/summary.json"))  # and none was copied
    record = json.loads((runs / "inductive_bias" / "inductive_bias.json").read_text())["profiles"]["cpu"]
    named = {e["run"] for t in ("families", "ablations") for e in record[t]}
    assert named == {f"elsewhere/{name}" for name in done}
    assert {p.parent.name: p.read_bytes() for p in sorted((runs / "elsewhere").glob("*/summary.json"))} == done
    out = tmp_path / "results"
    assert main(["tables", "--experiment", "inductive_bias", "--runs_dir", str(runs), "--out", str(out),
                 "--readme", ""]) == 0
    assert "resnet" in (out / "inductive_bias.csv").read_text()


@pytest.mark.parametrize("change, message", [
    ({"families": ["cnn"]}, "unknown family 'cnn': allowed vit, deit, swin, convnext, hybrid, resnet"),
    ({"families": ["deit", "vit"]}, "deit distils from resnet, which must be among them"),
    ({"ablations": {"learn": [0, 1]}}, "fraction 0 is outside (0, 1]"),
    ({"ablations": {"patch3": [1.0]}}, "unknown ablation 'patch3': allowed"),
    ({"probes": {"families": ["saliency"], "ablations": []}}, "probe part 'saliency' in profile 'cpu': allowed"),
    ({"seed": [0]}, "unknown key 'seed' in profile 'cpu'"),
    ({"tuned_fractions": [0.5]}, "tuned_fractions [0.5] in profile 'cpu': allowed a non-empty subset of family_fractions"),
    # values that were refused, or went wrong, only once the runs before them had trained
    ({"probe_patch": 5}, "probe_patch=5 in profile 'cpu': allowed an integer >= 1 that divides the 28x28 image"),
    ({"probe_patch": "abc"}, "probe_patch='abc' in profile 'cpu': allowed an integer >= 1"),
    ({"probe_images": 100_000}, "probe_images=100000 in profile 'cpu': allowed at most"),
    ({"budget": []}, "budget=[] in profile 'cpu': allowed a budget (tiny, small, base) or a non-empty list of them"),
    ({"family_fractions": ["abc"]}, "family_fractions=['abc'] in profile 'cpu': allowed a non-empty list of numbers"),
])
def test_bad_spec_is_one_line_and_writes_nothing(tiny_spec, capsys, change, message):
    spec, runs, launched = tiny_spec
    bad = json.loads(json.dumps(TINY))
    bad["profiles"]["cpu"].update(change)
    spec.write_text(yaml.safe_dump(bad))
    assert main(["inductive_bias", "--spec", str(spec), "--runs_dir", str(runs)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not runs.exists() and launched == []


def test_an_ablation_the_registry_refuses_is_one_line_before_any_run(tiny_spec, capsys):
    spec, runs, launched = tiny_spec
    bad = json.loads(json.dumps(TINY))
    bad["ablations"]["patch7"] = {"model.patch_size": 5}
    spec.write_text(yaml.safe_dump(bad))
    assert main(["inductive_bias", "--spec", str(spec), "--runs_dir", str(runs)]) == 2
    # the check needs the data's image size: the first load of the test data may print the
    # datasets library's cache progress before it; the error itself is one line
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln.strip() and "Saving the dataset" not in ln]
    assert len(err) == 1 and "ablation 'patch7': vit: patch size 5 does not divide image size 28" in err[0], err
    assert not runs.exists() and launched == []


def test_bad_variant_on_the_command_line_is_one_line(tiny_spec, capsys):
    spec, runs, launched = tiny_spec
    assert main(["inductive_bias", "--spec", str(spec), "--runs_dir", str(runs), "--ablations", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown ablation 'nope': allowed ")
    assert set(err.split("allowed ")[1].split(" (")[0].split(", ")) == {"learn", "none", "sincos", "patch7"}
    assert not runs.exists()


def test_corrupt_record_stops_before_any_run(tiny_spec, capsys):
    spec, runs, launched = tiny_spec
    (runs / "inductive_bias").mkdir(parents=True)
    (runs / "inductive_bias" / "inductive_bias.json").write_text("{not json")
    assert main(["inductive_bias", "--spec", str(spec), "--runs_dir", str(runs)]) == 2
    assert "inductive_bias.json is not valid JSON" in capsys.readouterr().err and launched == []
    assert (runs / "inductive_bias" / "inductive_bias.json").read_text() == "{not json"


def test_the_committed_spec_expands(fmnist_dir, monkeypatch, capsys, tmp_path):
    """Both profiles of the committed spec list their tuning stage, and every ablation's options
    build a model at 28x28 (e.g. a patch size that divides the image)."""
    from modules import build_model
    monkeypatch.setenv("FASHION_MNIST_DIR", str(fmnist_dir))
    spec = yaml.safe_load((ROOT / "experiments" / "inductive_bias" / "spec.yaml").read_text())
    for options in spec["ablations"].values():
        build_model(spec["ablated"], "tiny", image_size=28, in_chans=1, **{k.split(".")[1]: v for k, v in options.items()})
    for profile in spec["profiles"].values():
        profile["val_size"] = 100  # the test data hold 600 training images
        profile["probe_images"] = 100  # and 200 test images
    path = tmp_path / "inductive_bias.yaml"
    path.write_text(yaml.safe_dump(spec))
    for name, profile in spec["profiles"].items():
        assert main(["inductive_bias", "--spec", str(path), "--profile", name, "--dry_run",
                     "--runs_dir", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert ": 0 runs" not in out and "main runs listed once their tuning trials are done" in out  # before any run
        tuned = set(profile.get("tuned_fractions") or [f for fs in profile["ablations"].values() for f in fs]
                    + profile["family_fractions"])
        fractions = set(profile["family_fractions"]) & tuned
        extra = {f for fs in profile["ablations"].values() for f in fs} & tuned - fractions
        tuning = len(profile["lrs"]) * (len(fractions) * len(profile["families"]) + len(extra))
        budgets = profile["budget"] if isinstance(profile["budget"], list) else [profile["budget"]]
        for b in budgets:
            assert (f"## tune (budget {b}): {tuning} runs" if len(budgets) > 1 else f"## tune: {tuning} runs") in out
        assert len(budgets) == (3 if name == "gpu" else 1)   # the gpu profile covers every budget
        # the whole profile before any run: trials, family runs and ablations, each configuration once
        # (the first seed's main run at a tuned fraction is its trial at the grid's first lr)
        seeds = len(profile["seeds"])
        runs = len(budgets) * (tuning + seeds * len(profile["families"]) * len(profile["family_fractions"])
                               - len(profile["families"]) * len(fractions)
                               + seeds * sum(len(fs) for v, fs in profile["ablations"].items() if v != "learn"))
        # DeiT's trials are listed before their teacher's lr is chosen, so without a teacher; its first
        # seed's main run at a tuned fraction is still one of them, counted once
        assert f"## the whole profile from scratch ({runs} runs, " in out, out[-300:]
    assert not (tmp_path / "inductive_bias").exists()  # a dry run writes nothing


def test_untuned_fractions_take_the_lr_of_the_nearest_tuned_one():
    from experiments.inductive_bias.runner import lr_of, tuned_at
    axes = {"families": ["resnet", "vit"], "family_fractions": [1.0], "ablated": "vit",
            "ablations": {"learn": [0.01, 1.0], "none": [0.01]}, "tuned_fractions": [1.0]}
    choices = {("vit", "default", 1.0): 0.003, ("resnet", "default", 1.0): 0.01}
    assert tuned_at(axes, "vit") == [1.0] and lr_of(choices, axes, "vit", 0.01) == 0.003
    every = {k: v for k, v in axes.items() if k != "tuned_fractions"}   # default: tuned where each trains
    assert tuned_at(every, "vit") == [0.01, 1.0] and tuned_at(every, "resnet") == [1.0]
    assert lr_of(choices, every, "vit", 0.01) is None and lr_of(choices, every, "vit", 1.0) == 0.003


def test_a_family_the_profile_does_not_list_is_named_before_its_dry_run(tiny_spec, capsys):
    """--families naming a family the profile does not list: it would train at the profile's default
    epochs and steps, and the runner says so first."""
    path, runs, launched = tiny_spec
    assert main(["inductive_bias", "--spec", str(path), "--runs_dir", str(runs), "--families", "resnet", "vit",
                 "hybrid", "--dry_run"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "note: hybrid not among the cpu profile's families (resnet, vit, deit): it trains at the profile's default "
        "epochs and steps")
    assert launched == []
