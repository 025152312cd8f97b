"""A run is its whole configuration: its folder, skip and resume, exact resume after a kill at a
checkpoint, the lock, corrupt checkpoints, and test results that never rewrite a finished record."""
from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from experiments.__main__ import main
from experiments.runs.run.identity import config_hash, identity
from experiments.datascale.numbers import aggregate, collect

from tests.conftest import ROOT, SMOKE


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _files(run_dir: Path) -> dict:
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in run_dir.rglob("*") if p.is_file() and p.name != ".lock"}


@pytest.fixture
def done_run(cli):
    code, run_dir = cli("fit", "--model.family", "resnet")
    assert code == 0 and _summary(run_dir)["status"] == "done"
    return run_dir


def test_identity_covers_what_changes_results_only():
    base = {"seed_everything": 0, "trainer": {"max_steps": 10, "enable_progress_bar": True, "devices": "auto",
                                              "log_every_n_steps": 5, "limit_test_batches": None},
            "model": {"family": "vit", "lr": 0.003}, "data": {"fraction": 0.1, "data_dir": "/a"},
            "experiment": "x", "run_name": "y"}
    h = config_hash(identity(base, precision="32-true", world_size=1))
    same = {**base, "trainer": {**base["trainer"], "enable_progress_bar": False, "log_every_n_steps": 50,
                                "limit_test_batches": 1}, "data": {**base["data"], "data_dir": "/b"},
            "experiment": "z"}
    assert config_hash(identity(same, precision="32-true", world_size=1)) == h
    for changed, kw in [({**base, "model": {"family": "vit", "lr": 0.001}}, {}),
                        ({**base, "trainer": {**base["trainer"], "max_steps": 11}}, {}),
                        ({**base, "seed_everything": 1}, {}),
                        (base, {"precision": "bf16-mixed"}), (base, {"world_size": 2})]:
        args = {"precision": "32-true", "world_size": 1, **kw}
        assert config_hash(identity(changed, **args)) != h, (changed, kw)


def test_a_teacher_is_its_run_not_where_the_pool_keeps_it():
    """exp-all trains the ResNet teacher in runs/datascale, exp-distill alone in runs/distill: the
    same teacher run, so the same student folder; another teacher run is another student."""
    def student(ckpt):
        cfg = {"seed_everything": 0, "model": {"family": "deit", "teacher_checkpoint": ckpt}}
        return config_hash(identity(cfg, precision="32-true", world_size=1))
    run = "resnet-tiny_fashion_mnist_f0.002_s0_lr0.003_8b8eda8f/checkpoints/best.ckpt"
    assert student(f"results/runs/datascale/{run}") == student(f"/elsewhere/runs/distill/{run}")
    assert student(f"results/runs/datascale/{run}") != student(f"results/runs/datascale/{run.replace('8b8eda8f', '8b8eda8e')}")
    assert student(f"results/runs/datascale/{run}") != student(f"results/runs/datascale/{run.replace('best', 'last')}")
    # a checkpoint outside a run folder of this suite is known only by its path
    assert student("/a/teacher/checkpoints/best.ckpt") != student("/b/teacher/checkpoints/best.ckpt")


def test_one_knob_two_folders_two_rows(cli):
    code, a = cli("fit", "--model.family", "vit")
    assert code == 0
    code, b = cli("fit", "--model.family", "vit", "--model.pos_embed", "sincos")
    assert code == 0 and a != b and a.parent == b.parent
    assert a.name.rsplit("_", 1)[0] == b.name.rsplit("_", 1)[0]  # same readable name, another hash
    assert _summary(a)["status"] == _summary(b)["status"] == "done"
    rows = aggregate(collect(a.parent))
    assert len(rows) == 2 and {r["settings"] for r in rows} == {"pos_embed=None", "pos_embed=sincos"}


def test_finished_run_is_not_run_again(cli, done_run, capsys):
    before = _files(done_run)
    code, _ = cli("fit", "--model.family", "resnet")
    err = capsys.readouterr().err
    assert code == 0 and "is done" in err and "nothing to run" in err
    assert _files(done_run) == before


def test_other_settings_never_touch_a_finished_run(cli, done_run):
    before = _files(done_run)
    for args in (["--model.lr", "-1"], ["--model.lr", "1e-4"], ["--data.randaugment", "true"],
                 ["--model.pool", "avg"]):
        cli("fit", "--model.family", "resnet", *args)
        assert _files(done_run) == before, args


def test_test_with_other_settings_writes_beside_the_summary(cli, done_run):
    summary = (done_run / "summary.json").read_bytes()
    code, _ = cli("test", "--ckpt_path", str(done_run / "checkpoints" / "best.ckpt"),
                  "--trainer.limit_test_batches", "1")
    assert code == 0 and (done_run / "summary.json").read_bytes() == summary
    (record,) = (done_run / "evaluations").glob("best_*.json")
    r = json.loads(record.read_text())
    assert r["settings"]["trainer.limit_test_batches"] == 1 and 0 <= r["test_acc"] <= 1
    code, _ = cli("test", "--ckpt_path", str(done_run / "checkpoints" / "last.ckpt"))
    assert code == 0 and (done_run / "summary.json").read_bytes() == summary
    assert len(list((done_run / "evaluations").glob("last_*.json"))) == 1


def test_test_refuses_model_options_its_checkpoint_contradicts(cli, done_run, capsys):
    """test builds the model from the checkpoint: --model.family vit on a ResNet's checkpoint was
    silently tested as the ResNet; now one line, and nothing written. Options that agree pass."""
    ckpt = str(done_run / "checkpoints" / "best.ckpt")
    before = _files(done_run)
    capsys.readouterr()
    code, _ = cli("test", "--ckpt_path", ckpt, "--model.family", "vit")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--model.family='vit': test builds the model from ckpt_path" in err[0]
    assert "trained with family='resnet'" in err[0] and _files(done_run) == before
    code, _ = cli("test", "--ckpt_path", ckpt, "--model.family", "resnet", "--model.betas", "[0.9, 0.999]")
    assert code == 0
    before = _files(done_run)
    capsys.readouterr()
    for command, limit in (("test", "limit_test_batches"), ("validate", "limit_val_batches")):
        code, _ = cli(command, "--ckpt_path", ckpt, f"--trainer.{limit}", "0")  # evaluated nothing, said nothing
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and f"trainer.{limit}=0: {command} would evaluate no batch" in err[0]
    assert _files(done_run) == before


def test_test_uses_the_runs_own_data(tmp_path, fmnist_dir, make_dm, capsys):
    """A 3-class run from an image folder: `test` on its checkpoint needs no data arguments, and
    on another dataset says what is wrong in one line."""
    from experiments.__main__ import main
    from tests.test_data import _write_image_folder
    _write_image_folder(tmp_path / "pets", ["cat", "dog", "eel"], 12, size=(8, 8))
    runs = tmp_path / "runs"
    common = ["--runs_dir", str(runs), "--trainer.enable_progress_bar", "false",
              "--trainer.enable_model_summary", "false"]
    assert main(["fit", "--config", SMOKE, "--data.dataset", str(tmp_path / "pets"), "--data.train_size", "20",
                 "--data.val_size", "4", "--data.batch_size", "4", "--model.family", "resnet", *common]) == 0
    (run_dir,) = (runs / "single").iterdir()
    ckpt = str(run_dir / "checkpoints" / "best.ckpt")
    summary = (run_dir / "summary.json").read_bytes()
    assert main(["test", "--ckpt_path", ckpt, *common]) == 0
    assert (run_dir / "summary.json").read_bytes() == summary  # same settings, same result
    make_dm().num_classes  # the other dataset decoded and cached before the command
    capsys.readouterr()
    assert main(["test", "--ckpt_path", ckpt, "--data.dataset", "fashion_mnist", "--data.data_dir", str(fmnist_dir),
                 *common]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "num_classes=3" in err[0] and "num_classes=10" in err[0]


def test_an_image_folder_run_is_named_by_the_files(tmp_path, monkeypatch, capsys):
    """The same folder by a relative and an absolute path is one run (done: nothing to run); the
    folder with an image added is another run in another folder."""
    from experiments.__main__ import main
    from tests.test_data import _write_image_folder
    _write_image_folder(tmp_path / "pets", ["cat", "dog"], 8, size=(8, 8))
    monkeypatch.chdir(tmp_path)
    fit = ["fit", "--config", SMOKE, "--data.train_size", "8", "--data.val_size", "4", "--data.batch_size", "4",
           "--model.family", "resnet", "--runs_dir", "runs", "--trainer.enable_progress_bar", "false",
           "--trainer.enable_model_summary", "false"]
    assert main([*fit, "--data.dataset", "./pets/"]) == 0
    (run_dir,) = (tmp_path / "runs" / "single").iterdir()
    assert run_dir.name.startswith("resnet-tiny_pets_n8_s0_")
    capsys.readouterr()
    assert main([*fit, "--data.dataset", str(tmp_path / "pets")]) == 0
    assert f"{run_dir.name} is done" in capsys.readouterr().err
    ident = json.loads((run_dir / "identity.json").read_text())["identity"]
    assert ident["data.dataset"].startswith("image folder sha1:") and str(tmp_path) not in json.dumps(ident)
    _write_image_folder(tmp_path / "more", ["dog"], 1, size=(8, 8))
    (tmp_path / "more" / "dog" / "0.png").rename(tmp_path / "pets" / "dog" / "extra.png")
    assert main([*fit, "--data.dataset", "pets"]) == 0
    assert len(list((tmp_path / "runs" / "single").iterdir())) == 2


def test_corrupt_last_checkpoint(cli, capsys):
    """An interrupted run whose last.ckpt is garbage resumes from best.ckpt and says so; with no
    readable checkpoint it stops with one line and touches nothing."""
    code, run_dir = cli("fit", "--model.family", "resnet", "--test_after_fit", "false")
    assert code == 0
    (run_dir / "summary.json").unlink()  # as if killed before the end
    ckpts = run_dir / "checkpoints"
    (ckpts / "last.ckpt").write_bytes((ckpts / "last.ckpt").read_bytes()[:1000])  # truncated
    capsys.readouterr()
    code, again = cli("fit", "--model.family", "resnet", "--test_after_fit", "false")
    err = capsys.readouterr().err
    assert code == 0 and again == run_dir and "resuming from best.ckpt" in err
    assert _summary(run_dir)["status"] == "fitted"

    (run_dir / "summary.json").unlink()
    for name in ("last.ckpt", "best.ckpt"):
        (ckpts / name).write_bytes(b"garbage")
    before = _files(run_dir)
    code, _ = cli("fit", "--model.family", "resnet")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "no readable checkpoint" in err[0] and "delete" in err[0]
    assert _files(run_dir) == before


def test_lock_refuses_a_second_process(cli, done_run, capsys):
    (done_run / "summary.json").unlink()  # would resume, if the folder were free
    before = _files(done_run)
    with open(done_run / ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.seek(0)
        held.truncate()
        held.write("12345")
        held.flush()
        capsys.readouterr()
        code, _ = cli("fit", "--model.family", "resnet")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "in use by another process (pid 12345)" in err[0]
    assert _files(done_run) == before


PROTOCOLS = {  # 160 images / batch 32 = 5 steps an epoch
    "equal_steps": ["--trainer.max_steps", "12", "--trainer.max_epochs", "-1", "--trainer.val_check_interval", "3",
                    "--trainer.check_val_every_n_epoch", "null"],
    "fixed_epochs": ["--trainer.max_epochs", "3", "--trainer.check_val_every_n_epoch", "1"],
    # validations inside an epoch under an epoch budget: Lightning sets the loader up before the
    # checkpoint is restored (the optimiser's schedule asks for the steps), so a mid-epoch resume
    # must still hand the loader its saved state
    "fixed_epochs_validated_within": ["--trainer.max_epochs", "3", "--trainer.val_check_interval", "2"],
}


STOPS = {  # how a run is stopped after a step: the kill switch and the step of the checkpoint it resumes from
    signal.SIGKILL: lambda step: (["--trainer.callbacks+=tests.kill_switch.KillAfterStep",
                                   f"--trainer.callbacks.step={step}"], step),
    # SIGTERM (as `kill` or a scheduler sends it) one step after the checkpoint at step 3 (validations every 3)
    signal.SIGTERM: lambda step: (["--trainer.callbacks+=tests.kill_switch.SignalAfterStep",
                                   f"--trainer.callbacks.step={step}", "--trainer.callbacks.signum=15"], 3),
}


@pytest.mark.parametrize("protocol, kill_after, how", [("equal_steps", 3, signal.SIGKILL),
                                                       ("fixed_epochs", 5, signal.SIGKILL),
                                                       ("fixed_epochs_validated_within", 7, signal.SIGKILL),
                                                       ("equal_steps", 4, signal.SIGTERM)],
                         ids=["equal_steps-mid_epoch", "fixed_epochs-epoch_end", "fixed_epochs-mid_epoch",
                              "equal_steps-sigterm_between_checkpoints"])
def test_killed_at_a_checkpoint_resumes_exactly(fmnist_dir, tmp_path, protocol, kill_after, how):
    """Killed (SIGKILL) right after the checkpoint at step `kill_after`, or stopped by SIGTERM a step
    after one, and started again, a run ends with the same weights and metrics as the same run
    uninterrupted (fp32 on CPU). SIGTERM ends the process by that signal (a shell sees 143) after one
    line, the run recorded as interrupted. The stopped and resumed runs are real processes; the
    uninterrupted one runs in this process (same threads)."""
    args = ["fit", "--config", SMOKE, "--data.data_dir", str(fmnist_dir),
            "--model.family", "vit", "--data.train_size", "160", "--trainer.limit_train_batches", "null",
            "--trainer.precision", "32-true", "--data.randaugment", "true", "--model.drop_path_rate", "0.1",
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
            *PROTOCOLS[protocol]]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def fit(experiment, *extra):
        return subprocess.run([sys.executable, "-m", "experiments", *args, "--runs_dir", str(tmp_path),
                               "--experiment", experiment, *extra], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=600)
    assert main([*args, "--runs_dir", str(tmp_path), "--experiment", "whole"]) == 0
    switch, checkpoint_step = STOPS[how](kill_after)
    killed = fit("killed", *switch)
    assert killed.returncode == -how, killed.stderr[-2000:]
    (run_dir,) = (tmp_path / "killed").iterdir()
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == checkpoint_step
    if how == signal.SIGTERM:
        assert _summary(run_dir)["status"] == "interrupted" and _summary(run_dir)["steps"] == kill_after
        lines = [line for line in killed.stderr.splitlines() if line.strip()]
        assert "Traceback" not in killed.stderr and "KeyboardInterrupt" not in killed.stderr, killed.stderr[-2000:]
        assert lines[-1].startswith(f"interrupted by SIGTERM: {run_dir} stopped at step {kill_after}, recorded as "
                                    "interrupted; run the same command again to resume: python -m experiments fit ")
    resumed = fit("killed")
    assert resumed.returncode == 0 and "resuming from" in resumed.stderr, resumed.stderr[-2000:]

    (whole,) = (tmp_path / "whole").iterdir()
    assert whole.name == run_dir.name  # the kill switch is not part of the run's identity
    a = torch.load(whole / "checkpoints" / "last.ckpt", weights_only=True)
    b = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert a["global_step"] == b["global_step"] == {"equal_steps": 12}.get(protocol, 15)
    assert a["state_dict"].keys() == b["state_dict"].keys()
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    sa, sb = _summary(whole), _summary(run_dir)
    assert (sa["val_acc_best"], sa["test"]) == (sb["val_acc_best"], sb["test"])


def test_gpu_profile_dry_run_lists_no_cpu_run_as_finished(tmp_path, monkeypatch, capsys):
    """In a clone of the committed tree, the gpu profile finds none of the committed cpu-profile
    runs finished: their configurations differ, so their folders do; and neither does the cpu
    profile, whose runs the reference records are, since they are not the user's runs folder.
    (The dry runs run in this process, in the clone: their paths are relative to it.)"""
    if not Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").exists():
        pytest.skip("needs the real Fashion-MNIST pool (make data)")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    monkeypatch.delenv("FASHION_MNIST_DIR", raising=False)
    monkeypatch.chdir(clone)
    capsys.readouterr()
    assert main(["sweep", "--profile", "gpu", "--dry_run"]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("# ")]
    assert len(listed) == 6 * 2 * 4 * 2 and not [line for line in listed if "[new]" not in line]
    committed = list((clone / "results" / "reference" / "datascale").glob("*/summary.json"))
    assert committed, "the clone has no committed cpu-profile runs to confuse with"
    # a newcomer's first run is their own: the committed reference is not their runs folder, so the cpu
    # profile (the very configurations of the reference) has every run still to train as well
    assert not (clone / "results" / "runs").exists()
    assert main(["sweep", "--profile", "cpu", "--dry_run"]) == 0
    out = capsys.readouterr().out
    listed = [line for line in out.splitlines() if line.startswith("# ")]
    assert listed and not [line for line in listed if "[new]" not in line], out
    assert not (clone / "results" / "runs").exists()


def test_last_checkpoint_holds_the_final_step(cli, capsys):
    """max_steps off the validation grid: last.ckpt still ends at the final step, so the finished
    run started again has nothing left to train."""
    args = ("--model.family", "resnet", "--trainer.max_steps", "6", "--trainer.max_epochs", "-1",
            "--trainer.val_check_interval", "4", "--trainer.check_val_every_n_epoch", "null")
    code, run_dir = cli("fit", *args)
    assert code == 0
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 6
    assert torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=True)["global_step"] == 4


def test_a_folder_holding_another_configuration_is_refused(cli, done_run, capsys):
    """Should a folder's stored identity ever differ from the configuration that maps to it (a
    renamed folder, a hash collision), fit refuses it in one line instead of resuming it."""
    path = done_run / "identity.json"
    record = json.loads(path.read_text())
    record["identity"]["model.lr"] = 0.5
    path.write_text(json.dumps(record))
    (done_run / "summary.json").unlink()
    before = _files(done_run)
    capsys.readouterr()
    code, _ = cli("fit", "--model.family", "resnet")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "holds another configuration (model.lr: 0.5 there, 0.003 here" in err[0]
    assert _files(done_run) == before


def test_sigterm_during_a_test_exits_by_it_and_records_nothing(cli, done_run, capsys):
    """SIGTERM while `test` evaluates a checkpoint: 128 + 15, one line naming the run and the
    command again, and no result written anywhere (Lightning's own stop exited 0 with no result)."""
    before = _files(done_run)
    capsys.readouterr()
    code, _ = cli("test", "--ckpt_path", str(done_run / "checkpoints" / "best.ckpt"),
                  "--trainer.callbacks+=tests.kill_switch.SignalAfterStep", "--trainer.callbacks.step=-1",
                  "--trainer.callbacks.signum=15")
    err = capsys.readouterr().err
    assert code == 128 + signal.SIGTERM and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith(f"interrupted by SIGTERM: {done_run} stopped in its test; nothing "
                                                   "recorded; run the same command again to resume: python -m "
                                                   "experiments test --config ")
    after = _files(done_run)  # the test's TensorBoard log was opened before the signal came; nothing else changed
    assert all(p.name.startswith("events.out.tfevents") for p in after if after[p] != before.get(p)), sorted(after)
    assert not (done_run / "evaluations").exists()


def test_a_folder_where_a_run_writes_a_file_is_refused_before_training(cli, fmnist_dir, make_dm, tmp_path, capsys):
    """summary.json (or another file the fit writes) made a folder: one line before anything is
    trained or written (the run trained to its end, then failed on writing its summary)."""
    from experiments.runs.run.cli import resolve_run_dirs
    make_dm().num_classes  # decoded beforehand: a first use's decoding progress is no error line
    (run_dir,) = resolve_run_dirs([["--config", SMOKE, "--data.data_dir", str(fmnist_dir), "--runs_dir",
                                    str(tmp_path / "runs"), "--experiment", "t", "--model.family", "resnet"]])
    (run_dir / "summary.json").mkdir(parents=True)
    capsys.readouterr()
    code, _ = cli("fit", "--model.family", "resnet")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0] == (f"error: '{run_dir / 'summary.json'}' is a folder: the run writes its file there; allowed a "
                      "file or nothing (remove it, and run again)")
    assert sorted(p.name for p in run_dir.iterdir()) == ["summary.json"]


def test_an_update_that_overflows_is_a_divergence(cli):
    """An lr so large that AdamW's first update overflows float32 (lr / its bias correction 0.1): the
    run is recorded as diverged and exits 3, as a loss turned NaN does (it was 'failed')."""
    code, run_dir = cli("fit", "--model.family", "resnet", "--model.lr", "1e38")
    s = _summary(run_dir)
    assert code == 3 and s["status"] == "diverged", s
    assert s["error"].startswith("FloatingPointError: diverged: the optimiser's update overflowed at step 0")
    assert not (run_dir / "checkpoints" / "last.ckpt").exists()
