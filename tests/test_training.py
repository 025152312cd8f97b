"""End to end through `python -m experiments`: every family fits and tests, DeiT's teacher stays
frozen and out of the checkpoint, DDP on CPU, bad input. Run folders and records:
tests/test_run_records.py."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from experiments.__main__ import main
from modules import FAMILIES, ImageClassifier

from tests import training_digests
from tests.conftest import ROOT, SMOKE


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_fits_and_tests(cli, family):
    code, run_dir = cli("fit", "--model.family", family)
    assert code == 0
    assert re.fullmatch(f"{family}-tiny_fashion_mnist_n512_s0_[0-9a-f]{{8}}", run_dir.name)
    for f in ("config.yaml", "train_indices.json", "checkpoints/best.ckpt", "checkpoints/last.ckpt"):
        assert (run_dir / f).exists(), f
    assert list(run_dir.glob("events.out.tfevents.*"))
    s = _summary(run_dir)
    assert s["status"] == "done" and s["family"] == family and s["train_size"] == 512 and s["steps"] == 4
    assert 0.0 <= s["test"]["acc"] <= 1.0 and "ece" in s["test"] and s["params"] > 400_000
    if family == "deit":
        assert {"acc_cls", "acc_dist"} <= set(s["test"])
    assert s["images_per_sec"] > 0 and s["commit"] and s["versions"]["timm"] and s["hardware"]
    training_digests.check(family, run_dir / "checkpoints" / "last.ckpt")


@pytest.fixture
def resnet_ckpt(cli):
    code, run_dir = cli("fit", "--model.family", "resnet", "--test_after_fit", "false", experiment="teacher")
    assert code == 0
    return run_dir / "checkpoints" / "last.ckpt"


def test_teacher_frozen_and_out_of_checkpoint(resnet_ckpt, make_dm, tmp_path):
    dm = make_dm(train_size=128, batch_size=32)
    student = ImageClassifier("deit", teacher_checkpoint=str(resnet_ckpt))
    trainer = L.Trainer(max_steps=3, limit_val_batches=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    calls = []
    trainer.fit(student, dm)
    teacher = student.teacher
    reference = ImageClassifier.load_from_checkpoint(resnet_ckpt).model.state_dict()
    teacher.register_forward_hook(lambda *a: calls.append(1))
    student.train()
    student.training_loss(torch.randn(4, 1, 28, 28), torch.tensor([0, 1, 2, 3]))
    assert calls, "the teacher is not used by the DeiT loss"
    assert not teacher.training
    assert all(not p.requires_grad for p in teacher.parameters())
    assert all(torch.equal(v, reference[k]) for k, v in teacher.state_dict().items())  # unchanged by training
    teacher_ids = {id(p) for p in teacher.parameters()}
    optimised = {id(p) for g in trainer.optimizers[0].param_groups for p in g["params"]}
    assert not teacher_ids & optimised
    trainer.save_checkpoint(tmp_path / "student.ckpt")
    saved = torch.load(tmp_path / "student.ckpt", weights_only=True)["state_dict"]
    assert set(saved) == set(student.state_dict()) and not any("teacher" in k for k in saved)
    assert sum(v.numel() for k, v in saved.items() if k.startswith("model.")) == sum(
        p.numel() for p in student.model.parameters()) + sum(b.numel() for b in student.model.buffers())


def test_deit_through_the_cli_with_a_teacher(cli, resnet_ckpt):
    code, run_dir = cli("fit", "--model.family", "deit", "--model.teacher_checkpoint", str(resnet_ckpt))
    assert code == 0 and _summary(run_dir)["status"] == "done"
    training_digests.check(training_digests.DISTILLED, run_dir / "checkpoints" / "last.ckpt")
    # the teacher's hard labels against the true ones, counted on every augmented training image
    labels = _summary(run_dir)["teacher_labels"]
    assert labels["images"] > 0 and 0 <= labels["differs"] <= labels["images"]
    assert labels["rate"] == round(labels["differs"] / labels["images"], 6)


def test_corrupt_or_missing_checkpoints_fail_with_one_line(cli, tmp_path, capsys):
    bad = tmp_path / "corrupt.ckpt"
    bad.write_bytes(b"not a checkpoint")
    code, _ = cli("fit", "--model.family", "deit", "--model.teacher_checkpoint", str(bad))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and f"teacher_checkpoint {str(bad)!r} is not a readable checkpoint" in err[-1]
    code, _ = cli("test", "--ckpt_path", str(bad))
    assert code == 2 and "is not a readable checkpoint" in capsys.readouterr().err
    code, _ = cli("test", "--ckpt_path", str(tmp_path / "missing.ckpt"))
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_test_subcommand_evaluates_a_checkpoint(cli, resnet_ckpt):
    run_dir = resnet_ckpt.parent.parent
    assert "test" not in _summary(run_dir)  # fitted with --test_after_fit false
    code, _ = cli("test", "--ckpt_path", str(run_dir / "checkpoints" / "best.ckpt"))  # family from the checkpoint
    assert code == 0
    s = _summary(run_dir)  # the run's own test (its data, its best checkpoint) goes to its summary
    assert s["family"] == "resnet" and s["status"] == "done" and 0 <= s["test"]["acc"] <= 1


@pytest.mark.parametrize("args, message", [
    (["--data.fraction", "2"], "fraction=2.0 is outside (0, 1]"),
    (["--model.family", "transformer"], "unknown family 'transformer': allowed vit, deit, swin, convnext, hybrid, resnet"),
    (["--model.family", "vit", "--model.patch_size", "5"], "patch size 5 does not divide image size 28"),
    (["--data.dataset", "./missing-folder"], "dataset folder './missing-folder' does not exist"),
])
def test_bad_input_is_one_clear_line(cli, capsys, args, message):
    code, run_dir = cli("fit", *args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and message in err[-1] and err[-1].startswith("error: ")
    assert run_dir is None  # nothing was created


def test_unknown_keys_rejected(cli, capsys):
    code, run_dir = cli("fit", "--model.familly", "vit")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and run_dir is None and "familly" in err[-1] and "did you mean 'model.family'" in err[-1]


def test_bad_input_does_not_touch_finished_runs(cli, resnet_ckpt):
    before = {p: p.stat().st_mtime_ns for p in resnet_ckpt.parent.parent.rglob("*") if p.is_file()}
    code, _ = cli("fit", "--model.family", "resnet", "--data.fraction", "0", experiment="teacher")
    assert code == 2
    assert before == {p: p.stat().st_mtime_ns for p in resnet_ckpt.parent.parent.rglob("*") if p.is_file()}


def test_help_explains_the_options(capsys):
    with pytest.raises(SystemExit) as done:
        main(["fit", "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    for text in ("--model.family", "vit, deit, swin, convnext, hybrid or resnet", "--data.fraction",
                 "share of the training pool", "--test_after_fit", "--help_all"):
        assert text in out
    with pytest.raises(SystemExit):  # Lightning's Trainer options behind --help_all
        main(["fit", "--help_all"])
    assert "--trainer.max_epochs" in capsys.readouterr().out
    assert "families" in subprocess.run([sys.executable, "-m", "experiments", "--help"], cwd=ROOT,
                                        capture_output=True, text=True).stdout


def test_families_table(capsys):
    assert main(["families", "--budget", "tiny"]) == 0
    out = capsys.readouterr().out
    assert all(f in out for f in FAMILIES) and "MFLOPs" in out


def test_ddp_two_processes_on_cpu(fmnist_dir, tmp_path):
    """2 CPU processes (gloo): each rank trains on its own half of every epoch's batches."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "experiments", "fit", "--config", SMOKE, "--data.data_dir", str(fmnist_dir),
           "--runs_dir", str(tmp_path), "--experiment", "ddp", "--data.train_size", "128",
           "--trainer.limit_train_batches", "null", "--trainer.accelerator", "cpu", "--trainer.devices", "2",
           "--trainer.strategy", "ddp", "--trainer.enable_progress_bar", "false"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = next((tmp_path / "ddp").glob("*"))
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == 2  # 128 images / batch 32 = 4 batches, 2 per rank
    s = _summary(run_dir)
    assert s["devices"] == 2 and s["status"] == "done"


def test_teacher_labels_count_soft_targets_by_their_largest_share_and_survive_a_resume():
    """The count of teacher labels that differ from the true ones: a MixUp target's true label is its
    largest share; the count goes into the checkpoint and a resumed fit counts on from it (a model
    loaded for evaluation or as a teacher does not take it)."""
    from types import SimpleNamespace

    from modules.classifier import ImageClassifier
    clf = ImageClassifier("deit")
    teacher = torch.eye(10)[[1, 2, 3, 4]] * 5              # the teacher says 1, 2, 3, 4
    clf._count_teacher_labels(teacher, torch.tensor([1, 2, 0, 0]))              # differs on 2 of 4
    soft = torch.eye(10)[[1, 5, 3, 4]] * 0.7 + torch.eye(10)[[0, 2, 0, 0]] * 0.3   # largest shares 1, 5, 3, 4
    clf._count_teacher_labels(teacher, soft)                                     # differs on 1 of 4
    assert clf.teacher_labels() == {"differs": 3, "images": 8, "rate": 0.375}
    checkpoint = {}
    clf.on_save_checkpoint(checkpoint)
    resumed, evaluated = ImageClassifier("deit"), ImageClassifier("deit")
    resumed._trainer = SimpleNamespace(state=SimpleNamespace(fn="fit"))
    resumed.on_load_checkpoint(checkpoint)
    evaluated.on_load_checkpoint(checkpoint)
    resumed._count_teacher_labels(teacher, torch.tensor([1, 2, 3, 0]))
    assert resumed.teacher_labels() == {"differs": 4, "images": 12, "rate": round(4 / 12, 6)}
    assert evaluated.teacher_labels() is None and ImageClassifier("resnet").teacher_labels() is None


def test_an_interval_past_max_steps_is_refused_unless_accumulation_reaches_it(cli, capsys):
    """An integer val_check_interval counts training batches and max_steps optimiser steps: past
    max_steps * accumulate_grad_batches the run would never validate (no best checkpoint), within it
    it does."""
    common = ("--model.family", "resnet", "--trainer.max_epochs", "-1", "--trainer.limit_train_batches", "null",
              "--trainer.check_val_every_n_epoch", "null", "--test_after_fit", "false")
    code, _ = cli("fit", *common, "--trainer.max_steps", "4", "--trainer.val_check_interval", "6")
    assert code == 2
    assert "trainer.val_check_interval=6 with trainer.max_steps=4: allowed at most max_steps" in capsys.readouterr().err
    code, run_dir = cli("fit", *common, "--trainer.max_steps", "4", "--trainer.accumulate_grad_batches", "2",
                        "--trainer.val_check_interval", "6")
    assert code == 0 and (run_dir / "checkpoints" / "best.ckpt").is_file() and _summary(run_dir)["val_history"]
