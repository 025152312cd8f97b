"""`fit_packed` and `sweep --pack`: K runs trained at once leave what K single `fit`s leave (same
folders and identities, same subsets, same validation curves and tests, weights and losses equal
up to fp32 rounding), an interrupted group resumes, and bad groups are one line."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from lightning.pytorch.callbacks import Callback
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from experiments.__main__ import main
from experiments.packed_fit import fit_packed, group_dir
from experiments.sweep import pack_groups, run_sweep
from modules import ImageClassifier

from .conftest import SMOKE

SEEDS = (0, 1)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*(does not have many workers|log_every_n_steps|LeafSpec|weights_only).*")
        yield


def _args(fmnist_dir, runs: Path, seed: int, *extra: str) -> list[str]:
    return ["--config", SMOKE, "--data.data_dir", str(fmnist_dir), "--runs_dir", str(runs), "--experiment", "p",
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
            "--trainer.precision", "32-true", "--trainer.max_steps", "6", "--trainer.max_epochs", "-1",
            "--trainer.limit_train_batches", "null", "--trainer.val_check_interval", "3",
            "--trainer.check_val_every_n_epoch", "null", "--model.warmup_fraction", "0.3",
            "--seed_everything", str(seed), "--data.seed", str(seed), "--data.train_size", "96", *extra]


def _scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def _folders(runs: Path) -> dict[str, Path]:
    return {d.name: d for d in (runs / "p").iterdir() if d.is_dir() and d.name != "packed"}


@pytest.mark.parametrize("family", ["vit", "resnet"])
def test_packed_fit_leaves_what_single_fits_leave(family, fmnist_dir, tmp_path):
    single_runs, packed_runs = tmp_path / "single", tmp_path / "packed"
    for s in SEEDS:
        assert main(["fit", *_args(fmnist_dir, single_runs, s, "--model.family", family)]) == 0
    members = [_args(fmnist_dir, packed_runs, s, "--model.family", family) for s in SEEDS]
    status = fit_packed(members)
    assert set(status.values()) == {"done"}
    single, packed = _folders(single_runs), _folders(packed_runs)
    assert sorted(single) == sorted(packed) and len(single) == 2  # the same folder names: the same identities
    for name in single:
        a, b = single[name], packed[name]
        assert json.loads((a / "identity.json").read_text()) == json.loads((b / "identity.json").read_text())
        assert json.loads((a / "train_indices.json").read_text()) == json.loads((b / "train_indices.json").read_text())
        sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
        assert set(sa) - {"reused_from"} <= set(sb) and sb["engine"]["packed"] == 2
        for key in ("status", "steps", "train_size", "val_size", "seed", "max_steps", "params", "config_hash"):
            assert sa[key] == sb[key], key
        assert [s for s, _ in sa["val_history"]] == [s for s, _ in sb["val_history"]] == [3, 6]
        for (_, x), (_, y) in zip(sa["val_history"], sb["val_history"]):
            assert abs(x - y) <= 0.011  # accuracy on 100 images: at most one prediction flips by rounding
        assert abs(sa["test_acc"] - sb["test_acc"]) <= 0.011 and sa["plateau"].keys() == sb["plateau"].keys()
        la, lb = _scalars(a, "train/loss_step"), _scalars(b, "train/loss_step")
        assert [s for s, _ in la] == [s for s, _ in lb] and len(la) >= 5
        torch.testing.assert_close(torch.tensor([v for _, v in lb]), torch.tensor([v for _, v in la]),
                                   rtol=1e-4, atol=1e-5)
        assert len(_scalars(b, "val/acc")) == 2
        x = torch.randn(64, 1, 28, 28, generator=torch.Generator().manual_seed(0))
        for ckpt in ("best.ckpt", "last.ckpt"):  # ordinary checkpoints of the same model
            ma, mb = (ImageClassifier.load_from_checkpoint(d / "checkpoints" / ckpt, map_location="cpu").eval()
                      for d in (a, b))
            # Adam divides by sqrt(v): where a gradient is near 0 (BatchNorm shifts, dead units) it turns
            # the rounding of batched vs single convolutions into up to ~2 lr steps on single elements;
            # the network as a whole and its outputs stay equal to ~1e-3 and ~1e-4
            va, vb = (torch.cat([t.flatten().float() for t in m.model.state_dict().values()]) for m in (ma, mb))
            assert (va - vb).norm() / va.norm() < 5e-3, ckpt
            with torch.no_grad():
                torch.testing.assert_close(mb(x), ma(x), rtol=1e-3, atol=1e-4, msg=ckpt)
    # run again: nothing to train or test
    before = {n: (d / "summary.json").read_text() for n, d in packed.items()}
    assert set(fit_packed(members).values()) == {"done"}
    assert before == {n: (d / "summary.json").read_text() for n, d in packed.items()}


class _CrashAt(Callback):
    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError("crash")


def test_interrupted_group_resumes_to_the_same_end(fmnist_dir, tmp_path):
    """A group that crashed after its first validation resumes from its group checkpoint and ends
    where an uninterrupted group ends."""
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    fit_packed([_args(fmnist_dir, whole, s, "--test_after_fit", "false", "--trainer.max_steps", "8",
                      "--trainer.val_check_interval", "4") for s in SEEDS])
    members = [_args(fmnist_dir, cut, s, "--test_after_fit", "false", "--trainer.max_steps", "8",
                     "--trainer.val_check_interval", "4") for s in SEEDS]
    with pytest.raises(RuntimeError, match="crash"):
        fit_packed(members, callbacks=(_CrashAt(5),))  # mid-epoch (3 batches per epoch), after step 4's checkpoint
    (gdir,) = (cut / "p" / "packed").iterdir()
    assert (gdir / "checkpoints" / "last.ckpt").exists()
    assert not any((d / "summary.json").exists() for d in _folders(cut).values())
    assert set(fit_packed(members).values()) == {"fitted"}
    for name, d in _folders(whole).items():
        a, b = (json.loads((x / "summary.json").read_text()) for x in (d, _folders(cut)[name]))
        assert a["val_history"] == b["val_history"] and b["steps"] == 8
        wa = ImageClassifier.load_from_checkpoint(d / "checkpoints" / "last.ckpt").model.state_dict()
        wb = ImageClassifier.load_from_checkpoint(_folders(cut)[name] / "checkpoints" / "last.ckpt").model.state_dict()
        for n in wa:
            torch.testing.assert_close(wb[n], wa[n], msg=n)


def test_members_that_differ_in_more_than_their_seed_are_refused(fmnist_dir, tmp_path, capsys):
    runs = tmp_path / "runs"
    members = [_args(fmnist_dir, runs, 0), _args(fmnist_dir, runs, 1, "--model.lr", "0.01")]
    path = tmp_path / "members.json"
    path.write_text(json.dumps({"members": members}))
    assert main(["fit_packed", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.lr" in err[0] and "seed_everything" in err[0]
    assert not (runs / "p").exists()  # nothing written
    path.write_text("{not json")
    assert main(["fit_packed", str(path)]) == 2
    assert "is not a members file" in capsys.readouterr().err


def test_sweep_packs_seeds_of_one_configuration(fmnist_dir, tmp_path, monkeypatch):
    """sweep --pack 2: the main stage's two seeds of each (family, fraction) train as one group; the
    tuning trials (one seed) train alone; the records are those of single runs."""
    from .test_sweep import ROOT
    monkeypatch.setenv("FASHION_MNIST_DIR", str(fmnist_dir))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    spec = {"name": "tiny", "dataset": "fashion_mnist", "families": ["resnet", "deit"], "recipes": ["default"],
            "recipe_args": {"default": {}},
            "profiles": {"cpu": {"budget": "tiny", "fractions": [1.0], "seeds": [0, 1], "epochs": 0.25,
                                 "min_steps": 4, "val_checks": 2, "batch_size": 32, "lrs": [0.003], "pack": 2}}}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(spec))
    runs = tmp_path / "runs"
    assert main(["sweep", "--spec", str(path), "--runs_dir", str(runs), "--stage", "tune"]) == 0
    assert main(["sweep", "--spec", str(path), "--runs_dir", str(runs)]) == 0
    summaries = {p.parent.name: json.loads(p.read_text()) for p in (runs / "tiny").glob("*/summary.json")}
    assert len(summaries) == 4 and {s["status"] for s in summaries.values()} == {"done"}
    packed = {n for n, s in summaries.items() if "engine" in s}
    assert len(packed) == 2 and all("_s1_" in n for n in packed)  # seed 0's run was the tuning trial
    deit = next(s for n, s in summaries.items() if n.startswith("deit") and "_s1_" in n)
    teacher = next(n for n in summaries if n.startswith("resnet") and "_s1_" in n)
    cfg = yaml.safe_load((runs / "tiny" / deit["run"] / "config.yaml").read_text())  # as `fit` writes it
    assert cfg["model"]["teacher_checkpoint"] == str(runs / "tiny" / teacher / "checkpoints" / "best.ckpt")
    assert cfg["seed_everything"] == 1 and cfg["data"]["seed"] == 1
    # the group: seed 0 (only its test was left) and seed 1, each with its own teacher
    groups = [g for g in (runs / "tiny" / "packed").iterdir() if g.name.startswith("deit")]
    members = [json.loads((g / "members.json").read_text())["members"] for g in groups]
    assert sorted(len(m) for m in members) == [1, 2]
    teachers = {a[a.index("--model.teacher_checkpoint") + 1] for m in members for a in m}
    assert len(teachers) == 2


def test_pack_groups_by_everything_but_the_seed():
    from experiments.spec import Run
    def run(seed, lr="0.003", fraction="1"):
        args = ("--run_name", f"x_s{seed}", "--seed_everything", str(seed), "--data.seed", str(seed),
                "--model.lr", lr, "--data.fraction", fraction)
        return Run(0, f"x_s{seed}_{lr}_{fraction}", "vit", float(fraction), seed, "default", args)
    runs = [run(0), run(1), run(2), run(0, lr="0.01"), run(1, fraction="0.5"), run(1, lr="0.01")]
    groups = pack_groups(runs, 2)
    assert [[r.name for r in g] for g in groups] == [
        ["x_s0_0.003_1", "x_s1_0.003_1"], ["x_s2_0.003_1"], ["x_s0_0.01_1", "x_s1_0.01_1"], ["x_s1_0.003_0.5"]]
    assert [len(g) for g in pack_groups(runs, 1)] == [1] * 6
