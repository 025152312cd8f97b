"""Issue #20: names that would lead a write out of runs_dir, and values that were accepted silently,
crashed or left a folder behind: each is one `error: ...` line naming the value, exit status 2, and
nothing written."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from experiments.__main__ import main
from tests.conftest import SMOKE
from tests.test_messages import SPEC, assert_rejected, one_error_line


def options(fmnist_dir, make_dm, tmp_path) -> list[str]:
    """The fit options of test_messages (small IDX data, smoke config); the data decoded beforehand
    (its first-use progress is not an error: the caller clears it)."""
    make_dm().num_classes
    return ["--config", SMOKE, "--data.data_dir", str(fmnist_dir), "--runs_dir", str(tmp_path / "runs"),
            "--trainer.enable_progress_bar", "false"]


@pytest.fixture
def fit_base(fmnist_dir, make_dm, tmp_path, capsys):
    base = options(fmnist_dir, make_dm, tmp_path)
    capsys.readouterr()
    return base


@pytest.mark.parametrize("args, expected", [(["--data.val_size", "10000"], "val_size=10000"),
                                            (["--data.batch_size", "0"], "batch_size=0")])
def test_fit_packed_checks_the_data_before_any_folder(fit_base, tmp_path, capsys, args, expected):
    import json
    members = tmp_path / "members.json"
    members.write_text(json.dumps({"members": [[*fit_base, "--seed_everything", str(s), *args] for s in (0, 1)]}))
    assert_rejected(main(["fit_packed", str(members)]), capsys, tmp_path / "runs", expected)


def test_run_dir_command_checks_names_too(fit_base, tmp_path, capsys):
    assert_rejected(main(["run_dir", *fit_base, "--run_name", "../x"]), capsys, tmp_path / "runs", "run_name='../x'")


def test_swin_unshifted_window_only_when_asked():
    from modules.registry import ConfigError, build_model
    with pytest.raises(ConfigError, match=r"window_size=28: .* allowed 7, 14 "):
        build_model("swin", image_size=28, window_size=28)
    model = build_model("swin", image_size=28, window_size=28, allow_unshifted=True)
    assert all(max(b.shift_size) == 0 for layer in model.layers for b in layer.blocks)


def test_truncated_image_is_named(fit_base, tmp_path, capsys):
    root = tmp_path / "data" / "pets"
    for name in ("cat", "dog"):
        (root / name).mkdir(parents=True)
        for i in range(6):
            Image.fromarray(np.full((8, 8), 30 * i, dtype=np.uint8)).save(root / name / f"{i}.png")
    bad = root / "dog" / "3.png"
    bad.write_bytes(bad.read_bytes()[:30])  # cut inside the image data
    (root / "cat" / "notes.jpg").write_text("not an image")
    runs = tmp_path / "runs"
    code = main(["fit", *fit_base, "--data.dataset", str(root), "--data.train_size", "4", "--data.val_size", "2"])
    line = one_error_line(capsys)
    assert code == 2 and "is not a readable image" in line and ("3.png" in line or "notes.jpg" in line), line
    assert not runs.exists()


@pytest.mark.parametrize("command", ["test", "validate"])
def test_evaluation_needs_a_checkpoint(fit_base, tmp_path, capsys, command):
    assert_rejected(main([command, *fit_base]), capsys, tmp_path / "runs",
                    f"ckpt_path=None: {command} needs --ckpt_path")


def test_malformed_config_file_is_named(fit_base, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer: [unclosed\n")
    assert_rejected(main(["fit", *fit_base, "--config", str(bad)]), capsys, tmp_path / "runs", str(bad))


def test_checkpoint_data_mismatch_comes_before_the_trainer(fmnist_dir, make_dm, tmp_path, capfd, monkeypatch):
    """A 3-class checkpoint on the 10-class data: refused before the Trainer is built (it would print
    its accelerator lines, prepare the data and restore the checkpoint)."""
    from lightning.pytorch.cli import LightningCLI

    def no_trainer(*args, **kwargs):
        raise AssertionError("the Trainer was built before the mismatch was reported")
    monkeypatch.setattr(LightningCLI, "instantiate_trainer", no_trainer)
    fit_base = options(fmnist_dir, make_dm, tmp_path)
    ckpt = tmp_path / "three.ckpt"
    torch.save({"hyper_parameters": {"family": "resnet", "num_classes": 3, "image_size": 28, "in_chans": 1}}, ckpt)
    capfd.readouterr()
    code = main(["test", *fit_base, "--ckpt_path", str(ckpt)])
    lines = [l for l in capfd.readouterr().err.splitlines() if l.strip()]
    assert code == 2 and len(lines) == 1, lines
    assert "num_classes=3" in lines[0] and "num_classes=10" in lines[0]
    assert not (tmp_path / "runs").exists()


def test_checkpoint_data_mismatch_comes_before_decoding(fmnist_dir, tmp_path, capfd, monkeypatch):
    """Fashion-MNIST not yet decoded (a fresh cache): the mismatch is the only line, with no decoding
    progress (or hub download) before it, and nothing is decoded."""
    monkeypatch.setenv("VIT_FAMILIES_CACHE", str(tmp_path / "fresh-cache"))
    ckpt = tmp_path / "big.ckpt"
    torch.save({"hyper_parameters": {"family": "resnet", "num_classes": 10, "image_size": 32, "in_chans": 3}}, ckpt)
    code = main(["test", "--config", SMOKE, "--data.data_dir", str(fmnist_dir), "--runs_dir", str(tmp_path / "runs"),
                 "--ckpt_path", str(ckpt)])
    lines = [l for l in capfd.readouterr().err.splitlines() if l.strip()]
    assert code == 2 and len(lines) == 1 and "image_size=32" in lines[0] and "image_size=28" in lines[0], lines
    assert not (tmp_path / "fresh-cache").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command, name", [("sweep", "../../x"), ("sweep", "/abs/x"), ("distill", "a/b")])
def test_spec_name_is_one_folder(tmp_path, capsys, command, name):
    spec = {**SPEC, "name": name}
    if command == "distill":
        spec = {**yaml.safe_load(Path("experiments/distill/spec.yaml").read_text()), "name": name}
    path, runs = tmp_path / "bad.yaml", tmp_path / "runs"
    path.write_text(yaml.safe_dump(spec))
    assert_rejected(main([command, "--spec", str(path), "--runs_dir", str(runs)]), capsys, runs,
                    f"name in bad.yaml={name!r} is not valid")


def test_tables_experiment_is_one_folder(tmp_path, capsys):
    out = tmp_path / "results"
    assert_rejected(main(["tables", "--experiment", "../x", "--runs_dir", str(tmp_path / "runs"), "--out", str(out),
                          "--readme", ""]), capsys, out, "experiment='../x' is not valid")


def test_inside():
    from experiments.runs.run.names import inside
    assert inside("runs", "runs/a/b") == Path("runs/a/b")
    with pytest.raises(ValueError, match="is outside"):
        inside("runs", "runs/../x")
