"""Checkpoints are safe by construction: a planted pickle never runs when any command reads it (it
is refused in one line naming the file), and a run folder moved elsewhere resumes under the names
best.ckpt and last.ckpt with the weights an uninterrupted run ends with."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from experiments.__main__ import main
from experiments.runs.packed.fit import group_dir, resolve_members

from .conftest import ROOT, SMOKE


class _Planted:
    """Unpickled by an ordinary pickle loader, this creates the file `marker`: code run by a read."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def _plant(path: Path, marker: Path) -> Path:
    """A file shaped like a training checkpoint whose hyper-parameters are the attack."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {}, "loops": {}, "global_step": 3, "hyper_parameters": _Planted(marker),
                "epoch": 0}, path)
    return path


@pytest.fixture
def marker(tmp_path):
    m = tmp_path / "MARKER"
    probe = _plant(tmp_path / "probe.ckpt", m)
    torch.load(probe, weights_only=False)  # the attack is real: an unsafe read runs it
    assert m.exists()
    m.unlink()
    probe.unlink()
    return m


@pytest.fixture(scope="module")
def trained(fmnist_dir, tmp_path_factory) -> Path:
    """A finished resnet smoke run folder (copied per test before it is tampered with)."""
    runs = tmp_path_factory.mktemp("runs")
    assert main(["fit", "--config", SMOKE, "--data.data_dir", str(fmnist_dir), "--runs_dir", str(runs),
                 "--experiment", "t", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary",
                 "false", "--model.family", "resnet", "--test_after_fit", "false"]) == 0
    (run_dir,) = (runs / "t").iterdir()
    return run_dir


def _one_line(capsys, path: Path) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "refused" in err[0], err
    return err[0]


def test_planted_teacher_checkpoint(cli, marker, tmp_path, capsys):
    bad = _plant(tmp_path / "teacher.ckpt", marker)
    capsys.readouterr()
    code, _ = cli("fit", "--model.family", "deit", "--model.teacher_checkpoint", str(bad))
    assert code == 2 and not marker.exists()
    assert _one_line(capsys, bad).startswith(f"error: teacher_checkpoint {str(bad)!r} is refused")


def test_planted_last_checkpoint_is_not_resumed(cli, marker, capsys):
    code, run_dir = cli("fit", "--model.family", "resnet", "--test_after_fit", "false")
    assert code == 0
    (run_dir / "summary.json").unlink()  # as if killed: the next fit resumes from last.ckpt
    bad = _plant(run_dir / "checkpoints" / "last.ckpt", marker)
    capsys.readouterr()
    code, _ = cli("fit", "--model.family", "resnet", "--test_after_fit", "false")
    assert code == 2 and not marker.exists()
    _one_line(capsys, bad)  # refused, not silently replaced by best.ckpt
    assert not (run_dir / "summary.json").exists()


def test_planted_checkpoint_for_test_probe_and_interpolation(trained, marker, tmp_path, capsys):
    from experiments.complexity.pos_embed_interpolation import load_source
    run_dir = Path(shutil.copytree(trained, tmp_path / "runs" / "t" / trained.name))
    bad = _plant(run_dir / "checkpoints" / "best.ckpt", marker)
    capsys.readouterr()
    assert main(["test", "--ckpt_path", str(bad), "--trainer.enable_progress_bar", "false"]) == 2
    _one_line(capsys, bad)
    assert main(["probe", str(run_dir), "--images", "8"]) == 2
    _one_line(capsys, bad)
    with pytest.raises(ValueError, match="refused") as e:
        load_source(run_dir)
    assert str(bad) in str(e.value) and "\n" not in str(e.value)
    assert not marker.exists() and not (run_dir / "probes.json").exists()


def test_planted_packed_group_checkpoint(fmnist_dir, marker, tmp_path, capsys):
    from experiments.runs.packed.fit import fit_packed
    args = [["--config", SMOKE, "--data.data_dir", str(fmnist_dir), "--runs_dir", str(tmp_path / "runs"),
             "--experiment", "p", "--seed_everything", str(s), "--data.seed", str(s),
             "--trainer.enable_progress_bar", "false"] for s in (0, 1)]
    gdir = group_dir([m.run_dir for m in resolve_members(args)])
    bad = _plant(gdir / "checkpoints" / "last.ckpt", marker)
    with pytest.raises(ValueError, match="refused") as e:
        fit_packed(args)
    assert str(bad) in str(e.value) and "\n" not in str(e.value) and not marker.exists()


def test_entry_point_forces_weights_only_reads(marker, tmp_path):
    """`python -m experiments` sets TORCH_FORCE_WEIGHTS_ONLY_LOAD: even a read asking for a full
    unpickle in that process reads weights only."""
    bad = _plant(tmp_path / "x.ckpt", marker)
    code = ("import runpy, sys, torch; sys.argv = ['experiments', 'families', '--help'];\n"
            "try: runpy.run_module('experiments', run_name='__main__')\n"
            "except SystemExit: pass\n"
            f"torch.load({str(bad)!r}, weights_only=False)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "UnpicklingError" in out.stderr and not marker.exists()


def _mount_tmpfs(folder: Path, size: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"needs a small tmpfs as a full disk, and mounting one is not permitted here: "
                    f"{out.stderr.strip()[:200]}")


def test_full_disk_leaves_no_torn_checkpoint_and_resumes(cli, make_dm, tmp_path, capsys):
    """runs_dir on a 2 MB disk: the config and records fit, a ~6 MB checkpoint does not. The fit
    stops with one line naming the checkpoint, leaves neither a temporary nor a truncated file, and
    the same command finishes once the disk is larger."""
    make_dm().num_classes  # the data decoded and cached before the command (its progress is not the error)
    disk = tmp_path / "runs"  # the cli fixture's runs_dir
    _mount_tmpfs(disk, "2m")
    try:
        capsys.readouterr()
        code, run_dir = cli("fit", "--model.family", "resnet")
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1, err
        assert "no space left on device" in err[0] and f"{run_dir / 'checkpoints'}" in err[0] and ".ckpt'" in err[0]
        assert not list(disk.rglob("*.tmp")) and not list(disk.rglob("*.ckpt"))
        assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        code, again = cli("fit", "--model.family", "resnet")
        assert code == 0 and again == run_dir
        assert json.loads((run_dir / "summary.json").read_text())["status"] == "done"
        assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
        assert not list(disk.rglob("*.tmp"))
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_json_record_on_a_full_disk_is_one_line_and_keeps_the_old_record(tmp_path):
    from modules.files import write_json
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "64k")
    try:
        path = disk / "summary.json"
        write_json(path, {"status": "fitted"})
        with pytest.raises(OSError) as e:
            write_json(path, {"status": "done", "filler": "x" * 200_000})
        assert e.value.filename == str(path) and "No space" in e.value.strerror
        assert json.loads(path.read_text()) == {"status": "fitted"} and not list(disk.glob("*.tmp"))
    finally:
        subprocess.run(["umount", str(disk)], check=False)


FIT = ["--model.family", "resnet", "--data.train_size", "160", "--trainer.limit_train_batches", "null",
       "--trainer.precision", "32-true", "--trainer.max_steps", "12", "--trainer.max_epochs", "-1",
       "--trainer.val_check_interval", "3", "--trainer.check_val_every_n_epoch", "null", "--test_after_fit", "false"]


def test_moved_run_folder_resumes_under_its_own_names(fmnist_dir, tmp_path):
    """Killed after step 6's checkpoint, moved to another runs_dir and resumed there: the folder
    holds best.ckpt and last.ckpt only, with the weights of the same run uninterrupted (that one
    runs in this process; the killed and resumed ones are real processes)."""
    args = ["fit", "--config", SMOKE, "--data.data_dir", str(fmnist_dir),
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false", *FIT]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def fit(runs, *extra):
        return subprocess.run([sys.executable, "-m", "experiments", *args, "--runs_dir", str(runs),
                               "--experiment", "m", *extra], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=600)
    assert main([*args, "--runs_dir", str(tmp_path / "whole"), "--experiment", "m"]) == 0
    killed = fit(tmp_path / "before", "--trainer.callbacks+=tests.kill_switch.KillAfterStep",
                 "--trainer.callbacks.step=6")
    assert killed.returncode == -9, killed.stderr[-2000:]
    (old,) = (tmp_path / "before" / "m").iterdir()
    (tmp_path / "after" / "m").mkdir(parents=True)
    moved = Path(shutil.move(old, tmp_path / "after" / "m" / old.name))
    resumed = fit(tmp_path / "after")
    assert resumed.returncode == 0 and "resuming from" in resumed.stderr, resumed.stderr[-2000:]

    (whole,) = (tmp_path / "whole" / "m").iterdir()
    assert sorted(p.name for p in (moved / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    for name in ("best.ckpt", "last.ckpt"):
        a, b = (torch.load(d / "checkpoints" / name, weights_only=True) for d in (whole, moved))
        assert a["global_step"] == b["global_step"], name
        assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"]), name
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (whole, moved))
    assert sa["val_acc_best"] == sb["val_acc_best"] and sa["val_history"] == sb["val_history"]


def test_resume_from_best_after_a_torn_last_keeps_the_names(cli, capsys):
    code, run_dir = cli("fit", *FIT)
    assert code == 0
    (run_dir / "summary.json").unlink()
    last = run_dir / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:1000])
    capsys.readouterr()
    code, _ = cli("fit", *FIT)
    assert code == 0 and "resuming from best.ckpt" in capsys.readouterr().err
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert torch.load(last, weights_only=True)["global_step"] == 12


def test_a_checkpoint_that_does_not_fit_keeps_the_old_one(tmp_path):
    """atomic_save (every checkpoint, packed members' too) over an existing checkpoint on a full
    disk: OSError naming the file, the old checkpoint whole, no temporary file."""
    from modules.checkpoint_io import atomic_save
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "256k")
    try:
        path = disk / "best.ckpt"
        atomic_save({"global_step": 4, "state_dict": {"w": torch.ones(8)}}, path)
        with pytest.raises(OSError) as e:
            atomic_save({"global_step": 6, "state_dict": {"w": torch.zeros(200_000)}}, path)
        assert e.value.filename == str(path) and "No space" in e.value.strerror
        old = torch.load(path, weights_only=True)
        assert old["global_step"] == 4 and torch.equal(old["state_dict"]["w"], torch.ones(8))
        assert sorted(p.name for p in disk.iterdir()) == ["best.ckpt"]
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_planted_best_checkpoint_of_a_trained_run_is_not_tested(cli, marker, capsys):
    code, run_dir = cli("fit", "--model.family", "resnet", "--test_after_fit", "false")
    assert code == 0 and json.loads((run_dir / "summary.json").read_text())["status"] == "fitted"
    bad = _plant(run_dir / "checkpoints" / "best.ckpt", marker)
    summary = (run_dir / "summary.json").read_bytes()
    capsys.readouterr()
    code, _ = cli("fit", "--model.family", "resnet")  # only the test of best.ckpt is left
    assert code == 2 and not marker.exists()
    _one_line(capsys, bad)
    assert (run_dir / "summary.json").read_bytes() == summary


class _Shell:
    """Unpickled by an ordinary loader, this runs a shell command (os.system): a blocked module."""

    def __reduce__(self):
        return os.system, ("true",)


def test_a_pickle_calling_a_blocked_module_is_refused_as_code_and_never_advises_unsafe_loading(tmp_path):
    """torch names os.system 'unsupported GLOBAL posix.system whose module posix is blocked' and
    advises loading with weights_only=False; the line says the file holds code, nothing else."""
    from modules.checkpoint_io import UnsafeCheckpointError, read_checkpoint
    torch.save({"state_dict": {}, "hyper_parameters": _Shell()}, tmp_path / "shell.ckpt")
    with pytest.raises(UnsafeCheckpointError, match=r"is refused: it holds code .*GLOBAL \S+system") as e:
        read_checkpoint(tmp_path / "shell.ckpt")
    assert "weights_only` set to `False`" not in str(e.value) and "\n" not in str(e.value)
