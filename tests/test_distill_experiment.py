"""exp-distill: DeiT's inference heads, the cls-dist token cosine, the teacher seeing the student's
augmented batch, the spec's checks, and a tiny distill spec end to end into its table."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from datamodules import ImageClassificationDataModule
from experiments.__main__ import main
from modules import ImageClassifier, build_model
from modules.distillation import deit_predict, deit_probe, token_cosine

from .conftest import tree_hashes

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def deit():
    torch.manual_seed(0)
    return build_model("deit", "tiny", image_size=28, in_chans=1, num_classes=10).eval()


def test_every_inference_head_returns_its_head(deit):
    x = torch.randn(3, 1, 28, 28)
    with torch.no_grad():
        tokens = deit.forward_features(x)                  # (B, 2 + N, D): [cls, dist, patches...]
        cls, dist = deit.head(tokens[:, 0]), deit.head_dist(tokens[:, 1])
        assert torch.equal(deit_predict(deit, x, "cls"), cls)
        assert torch.equal(deit_predict(deit, x, "dist"), dist)
        assert torch.allclose(deit_predict(deit, x, "both"), (cls + dist) / 2)
        assert torch.allclose(deit_predict(deit, x, "both"), deit(x), atol=1e-6)  # timm's own eval forward
        assert not torch.allclose(cls, dist)
        probe_cls, probe_dist, cosine = deit_probe(deit, x)      # the probes' single pass: same heads
        assert torch.equal(probe_cls, cls) and torch.equal(probe_dist, dist)
        assert torch.equal(cosine, token_cosine(deit, x))
    with pytest.raises(ValueError, match="inference head 'mean': allowed cls, dist, both"):
        deit_predict(deit, x, "mean")


def test_token_cosine_is_one_per_block_when_the_two_tokens_start_equal(deit):
    x = torch.randn(4, 1, 28, 28)
    cos = token_cosine(deit, x)
    assert cos.shape == (len(deit.blocks),) and (cos < 0.999).any()   # distinct tokens: not all 1
    twin = build_model("deit", "tiny", image_size=28, in_chans=1, num_classes=10).eval()
    twin.load_state_dict(deit.state_dict())
    with torch.no_grad():  # same token and same position: every block maps both alike
        twin.dist_token.copy_(twin.cls_token)
        twin.pos_embed[:, 1].copy_(twin.pos_embed[:, 0])
    assert torch.allclose(token_cosine(twin, x), torch.ones(len(deit.blocks)), atol=1e-5)
    # by hand for the last block: the tokens leaving it, cosine per image, mean
    with torch.no_grad():
        feats = []
        h = deit.blocks[-1].register_forward_hook(lambda m, i, o: feats.append(o))
        deit.forward_features(x)
        h.remove()
        t = feats[0]
        expected = torch.nn.functional.cosine_similarity(t[:, 0], t[:, 1], dim=-1).mean()
    assert torch.allclose(cos[-1], expected)


def test_teacher_sees_the_students_augmented_batch_in_eval_mode(make_dm, tmp_path):
    fit = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, limit_val_batches=1, default_root_dir=tmp_path)
    fit.fit(ImageClassifier("resnet"), make_dm(train_size=64, batch_size=32))
    ckpt = tmp_path / "teacher.ckpt"
    fit.save_checkpoint(ckpt)
    student = ImageClassifier("deit", teacher_checkpoint=str(ckpt), distillation="hard")
    dm = make_dm(train_size=64, batch_size=32, crop_padding=4, hflip=True, random_erasing=1.0)  # random per batch
    seen = {"student": [], "teacher": [], "teacher_training": []}
    student.model.register_forward_pre_hook(lambda m, args: seen["student"].append(args[0].clone()) and None)

    def teacher_hook(m, args):
        seen["teacher"].append(args[0].clone())
        seen["teacher_training"].append(m.training)

    class Hook(L.Callback):
        def on_train_start(self, trainer, module):
            module.teacher.register_forward_pre_hook(teacher_hook)
    trainer = L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                        callbacks=[Hook()], default_root_dir=tmp_path)
    trainer.fit(student, dm)
    assert len(seen["teacher"]) == 3 and len(seen["student"]) == 3
    for s, t in zip(seen["student"], seen["teacher"]):
        assert torch.equal(s, t)           # the very batch the student trained on, augmentation included
    assert not torch.equal(seen["student"][0], seen["student"][1])
    assert seen["teacher_training"] == [False] * 3


TINY = {
    "name": "distill", "runner": "distill", "dataset": "fashion_mnist", "student": "deit",
    "variants": {"none": {"model.distillation": "none"},
                 "soft": {"model.distillation": "soft", "model.distill_tau": 3.0, "model.distill_alpha": 0.1},
                 "hard": {"model.distillation": "hard", "model.distill_alpha": 0.5}},
    "profiles": {"cpu": {"teachers": ["resnet"], "students": ["none", "hard/resnet"], "budget": "tiny",
                         "fractions": [0.5, 1.0], "seeds": [0], "epochs": 0.25, "min_steps": 4, "val_checks": 2,
                         "batch_size": 32, "lrs": [0.003], "tuned_fractions": [0.5], "probe_images": 64,
                         "jobs": 1}},
}


@pytest.fixture
def tiny_spec(fmnist_dir, tmp_path, monkeypatch):
    """The tiny spec on the small IDX data; each run is fitted in this process (no start-up cost)."""
    import experiments.distill.runner as distill
    monkeypatch.setenv("FASHION_MNIST_DIR", str(fmnist_dir))
    ImageClassificationDataModule("fashion_mnist").test_size  # decoded once: a first use's progress is no answer's
    launched = []

    def in_process(run):
        launched.append(run.name)
        return main(["fit", *run.args, "--trainer.enable_model_summary", "false"])
    monkeypatch.setattr(distill, "_launcher", lambda jobs: in_process)
    path = tmp_path / "distill.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path, tmp_path / "runs", launched


def test_tiny_distill_spec_end_to_end_into_its_table(tiny_spec, tmp_path):
    spec, runs, launched = tiny_spec
    assert main(["distill", "--spec", str(spec), "--runs_dir", str(runs)]) == 0
    # tune: resnet and the no-teacher student at 0.5 (2 launches); main: 2 teachers and 4 students,
    # two of which are the tuning winners, launched again for their test only
    assert len(launched) == 2 + 2 + 4
    record = json.loads((runs / "distill" / "distill.json").read_text())["profiles"]["cpu"]
    assert {(c["family"], c["fraction"], c["tuned_at"]) for c in record["tuning"]["choices"]} == {
        ("resnet", 0.5, 0.5), ("resnet", 1.0, 0.5), ("deit", 0.5, 0.5), ("deit", 1.0, 0.5)}
    students = {(s["student"], s["fraction"]): s for s in record["students"]}
    assert sorted(students) == [("hard/resnet", 0.5), ("hard/resnet", 1.0), ("none", 0.5), ("none", 1.0)]
    teachers = {(t["fraction"], t["seed"]): t["run"] for t in record["teachers"]}
    for (name, fraction), s in students.items():
        summary = json.loads((runs / "distill" / s["run"] / "summary.json").read_text())
        assert summary["status"] == "done" and {"acc_cls", "acc_dist", "acc"} <= set(summary["test"])
        cfg = yaml.safe_load((runs / "distill" / s["run"] / "config.yaml").read_text())["model"]
        assert cfg["distillation"] == name.partition("/")[0]
        if name == "hard/resnet":   # distils from the ResNet of its own subset and seed
            assert s["teacher_run"] == teachers[(fraction, 0)]
            assert cfg["teacher_checkpoint"].endswith(f"{teachers[(fraction, 0)]}/checkpoints/best.ckpt")
        probes = json.loads((runs / "distill" / s["run"] / "distill_probes.json").read_text())
        assert probes["images"] == 64 and probes["teacher_runs"] == {"resnet": teachers[(fraction, 0)]}
        assert set(probes["agreement"]["resnet"]) == {"cls", "dist", "both"}
        assert all(0 <= a <= 1 for a in probes["agreement"]["resnet"].values())
        assert len(probes["token_cosine"]) == 4  # deit-tiny's depth
    # run again: nothing left to train, nothing re-probed, no record rewritten
    launched.clear()
    before = tree_hashes(runs / "distill")
    assert main(["distill", "--spec", str(spec), "--runs_dir", str(runs)]) == 0 and launched == []
    assert tree_hashes(runs / "distill") == before

    out = tmp_path / "results"
    assert main(["tables", "--experiment", "distill", "--runs_dir", str(runs), "--out", str(out), "--readme", ""]) == 0
    rows = list(csv.DictReader(open(out / "distill.csv")))
    assert {(r["student"], r["fraction"], r["head"]) for r in rows if r["role"] == "student"} == {
        ("none", "0.5", "cls"), ("none", "1.0", "cls"),
        *{("hard/resnet", f, h) for f in ("0.5", "1.0") for h in ("cls", "dist", "both")}}
    assert (out / "distill.md").read_text().count("hard/resnet") >= 2 and (out / "distill.png").exists()


@pytest.mark.parametrize("change, message", [
    ({"students": ["hard/convnext"]}, "student 'hard/convnext': allowed 'none' or variant/teacher"),
    ({"students": ["none/resnet"]}, "student 'none/resnet': allowed"),
    ({"fractions": [0, 1]}, "fraction 0 is outside (0, 1]"),
    ({"teachers": ["cnn"]}, "unknown family 'cnn': allowed vit, deit, swin, convnext, hybrid, resnet"),
    ({"teacher": ["resnet"]}, "unknown key 'teacher' in profile 'cpu'"),
    ({"matched_val_interval": 0}, "matched_val_interval=0 in profile 'cpu': allowed an integer >= 1"),
    ({"student_lr_of": "vit"}, "student_lr_of 'vit': allowed a teacher family of profile 'cpu' (resnet)"),
    # values that were refused, or went wrong, only once the runs before them had trained
    ({"probe_images": 0}, "probe_images=0 in profile 'cpu': allowed an integer >= 1"),
    ({"probe_images": 100_000}, "probe_images=100000 in profile 'cpu': allowed at most"),
    ({"jobs": "abc"}, "jobs='abc' in profile 'cpu': allowed an integer >= 1"),
    ({"seeds": [2.5]}, "seeds=[2.5] in profile 'cpu': allowed a non-empty list of integers"),
    ({"lrs": ["abc"]}, "lrs=['abc'] in profile 'cpu': allowed a non-empty list of numbers"),
    ({"matched": ["resnet"]}, "matched=['resnet'] in profile 'cpu': allowed a mapping of a teacher family"),
    ({"teachers": ["resnet", "vit"], "matched": {"resnet": "vit"}, "matched_val_interval": 1000},
     "matched_val_interval=1000 in profile 'cpu': allowed at most"),
])
def test_bad_spec_is_one_line_and_writes_nothing(tiny_spec, capsys, change, message):
    spec, runs, launched = tiny_spec
    bad = json.loads(json.dumps(TINY))
    change = dict(change)
    top = {k: change.pop(k) for k in list(change) if k in ("student_lr_of",)}  # a key of the spec, not the profile
    bad.update(top)
    bad["profiles"]["cpu"].update(change)
    spec.write_text(yaml.safe_dump(bad))
    assert main(["distill", "--spec", str(spec), "--runs_dir", str(runs)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not runs.exists() and launched == []


def test_corrupt_record_stops_before_any_run(tiny_spec, capsys):
    spec, runs, launched = tiny_spec
    (runs / "distill").mkdir(parents=True)
    (runs / "distill" / "distill.json").write_text("{not json")
    assert main(["distill", "--spec", str(spec), "--runs_dir", str(runs)]) == 2
    assert "distill.json is not valid JSON" in capsys.readouterr().err and launched == []
    assert (runs / "distill" / "distill.json").read_text() == "{not json"


def test_the_committed_spec_expands(fmnist_dir, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("FASHION_MNIST_DIR", str(fmnist_dir))
    spec = yaml.safe_load((ROOT / "experiments" / "distill" / "spec.yaml").read_text())
    for profile in spec["profiles"].values():
        profile["val_size"] = 100  # the test data hold 600 training images
        profile["probe_images"] = 100  # and 200 test images
    path = tmp_path / "distill.yaml"
    path.write_text(yaml.safe_dump(spec))
    for name, profile in spec["profiles"].items():
        assert main(["distill", "--spec", str(path), "--profile", name, "--dry_run", "--runs_dir", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        tuning = len(profile["lrs"]) * len(profile.get("tuned_fractions") or {profile["fractions"][0],
                                                                                profile["fractions"][-1]})
        # the no-teacher student is tuned too unless the students take a teacher family's lr
        student_tuned = spec.get("student_lr_of") is None
        assert f"## tune: {tuning * (len(profile['teachers']) + student_tuned)} runs" in out
        assert ("--model.distillation none" in out) == student_tuned
        # stages that wait on the tuning are named as waiting, not planned as "0 runs"
        assert ": 0 runs" not in out
        assert "## teachers, matched, students of " in out and "listed once their tuning trials are done" in out
        # the whole profile before any run: the trials, every teacher (the trial at the grid's first lr
        # is the first seed's main run) and every student, a matched teacher's too
        cells, n_tuned = len(profile["fractions"]) * len(profile["seeds"]), tuning // len(profile["lrs"])
        runs = (tuning * (len(profile["teachers"]) + student_tuned) + cells * len(profile["teachers"])
                + cells * len(profile["students"]) - n_tuned * (len(profile["teachers"]) + student_tuned))
        assert f"## the whole profile from scratch ({runs} runs, " in out
    assert not (tmp_path / "distill").exists()  # a dry run writes nothing


def test_matched_teacher_validates_at_its_own_interval(tmp_path, monkeypatch):
    """The matched teacher is its family's run again with stop_at_val_acc = the target's best
    validation accuracy, validated every matched_val_interval steps (the rest of its schedule as the
    family's run); without the key it validates val_checks times like every run."""
    import experiments.distill.runner as distill
    spec = distill.load_distill_spec()
    axes = distill.resolve_axes(spec, "cpu")
    vit = distill.plan_run({"name": "distill", "variant_args": {"default": {}}}, axes, tmp_path, 59_000, "vit", 0.002, 0,
                            "default", 0.003, "main")
    monkeypatch.setattr(distill, "target_acc", lambda run: 0.66)
    monkeypatch.setattr(distill, "lr_of", lambda choices, axes, family, fraction: 0.003)
    monkeypatch.setattr(distill, "with_folders", lambda runs: runs)
    [matched] = distill.matched_runs(spec, {**axes, "seeds": [0]}, tmp_path, 59_000, {}, [vit])
    args = dict(zip(matched.args[::2], matched.args[1::2]))
    interval = axes["matched_val_interval"]
    assert interval < 100  # denser than the family run's validation, else the test shows nothing
    assert args["--trainer.val_check_interval"] == str(interval) and args["--trainer.max_steps"] == "2000"
    assert args["--stop_at_val_acc"] == "0.66" and matched.variant == "resnet-at-vit"
    [plain] = distill.matched_runs(spec, {**axes, "seeds": [0], "matched_val_interval": None}, tmp_path, 59_000, {},
                                   [vit])
    assert dict(zip(plain.args[::2], plain.args[1::2]))["--trainer.val_check_interval"] == "100"
