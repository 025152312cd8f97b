"""Bad input: one line on stderr (`error: ...`) naming the bad value and what is allowed, exit status 2,
and no folder created in the runs dir."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from experiments.__main__ import main

from tests.conftest import SMOKE
SPEC = {"name": "tiny", "dataset": "fashion_mnist", "families": ["vit"], "recipe_args": {"default": {}},
        "profiles": {"cpu": {"budget": "tiny", "fractions": [1.0], "seeds": [0], "epochs": 0.1,
                             "min_steps": 4, "val_checks": 2, "lrs": [0.003]}}}


def one_error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    return lines[0]


def assert_rejected(code: int, capsys, runs: Path, *expected: str) -> None:
    assert code == 2
    line = one_error_line(capsys)
    for text in expected:
        assert text in line, line
    assert not runs.exists() or not any(runs.iterdir()), sorted(runs.rglob("*"))


def image_folder(root: Path) -> Path:
    """cat/ holds images, dog/ only a text file."""
    for name in ("cat", "dog"):
        (root / name).mkdir(parents=True)
    for i in range(4):
        Image.fromarray(np.full((8, 8), 40 * i, dtype=np.uint8)).save(root / "cat" / f"{i}.png")
    (root / "dog" / "notes.txt").write_text("no images here")
    return root


@pytest.mark.parametrize("args, expected", [
    (["--data.fraction", "abc"], ["data.fraction='abc'", "allowed a float"]),
    (["--model.foo", "1"], ["unknown key 'model.foo'", "allowed model.family, model.budget"]),
    (["--model.familly", "vit"], ["unknown key 'model.familly' (did you mean 'model.family'?)",
                                  "allowed model.family"]),
    (["--data.seed", "-1"], ["seed=-1", "allowed integers >= 0"]),
    (["--data.split_seed", "-1"], ["split_seed=-1", "allowed integers >= 0"]),
    (["--seed_everything", "-1"], ["seed_everything=-1", "allowed true, false or integers 0..4294967295"]),
    (["--trainer.max_steps", "0"], ["trainer.max_steps=0", "allowed -1 (no limit) or integers >= 1"]),
    (["--trainer.max_epochs", "0"], ["trainer.max_epochs=0", "allowed -1 (no limit) or integers >= 1"]),
    (["--data.dataset", "{images}"], ["class folder '{images}/dog' holds no images", "allowed image files", ".png"]),
    (["--runs_dir", "{file}/runs"], ["cannot write to runs_dir '{file}/runs'", "is not a folder"]),
    (["--model.family", "deit", "--model.teacher_checkpoint", "{file}"],
     ["teacher_checkpoint '{file}' is not a readable checkpoint of this suite"]),
    (["--model.family", "deit", "--model.teacher_checkpoint", "{file}.missing"],
     ["teacher_checkpoint '{file}.missing' does not exist"]),
    (["--model.lr", "-1"], ["lr=-1.0: allowed a learning rate > 0"]),
])
def test_bad_fit_input_is_one_line(fmnist_dir, make_dm, tmp_path, capsys, args, expected):
    make_dm().num_classes  # the dataset decoded once beforehand: its first-use progress is not an error
    capsys.readouterr()
    runs, file = tmp_path / "runs", tmp_path / "file"
    file.write_text("a file, not a folder")
    names = {"images": str(image_folder(tmp_path / "images")), "file": str(file)}
    base = ["--config", SMOKE, "--data.data_dir", str(fmnist_dir), "--runs_dir", str(runs),
            "--trainer.enable_progress_bar", "false"]
    code = main(["fit", *base, *[a.format(**names) for a in args]])
    assert_rejected(code, capsys, runs, *[e.format(**names) for e in expected])
    assert not (file.parent / "file" / "runs").exists() and file.is_file()


@pytest.mark.parametrize("text, expected", [
    ("name: [unclosed\n", ["is not valid YAML (line 2)", "bad.yaml"]),
    ("- a\n- b\n", ["spec bad.yaml is a list, not a mapping", "allowed keys dataset, families, name"]),
    (yaml.safe_dump({**SPEC, "profiles": {}}), ["spec bad.yaml has no profiles", "batch_size, budget, epochs, families, fractions"]),
    (yaml.safe_dump({**SPEC, "profiles": {"cpu": {"budget": "tiny", "fractions": [1.0], "seeds": [0]}}}),
     ["profile 'cpu' of bad.yaml lacks the key 'epochs'", "required budget, fractions, seeds, epochs"]),
    (yaml.safe_dump({k: v for k, v in SPEC.items() if k != "name"}),
     ["spec bad.yaml lacks the key 'name'", "required name, dataset, families, profiles, recipe_args"]),
])
def test_bad_spec_is_one_line(tmp_path, capsys, text, expected):
    path, runs = tmp_path / "bad.yaml", tmp_path / "runs"
    path.write_text(text)
    assert_rejected(main(["sweep", "--spec", str(path), "--runs_dir", str(runs)]), capsys, runs, *expected)


@pytest.mark.parametrize("args, expected", [
    (["--jobs", "0"], ["--jobs 0: allowed integers >= 1"]),
    (["--jobs", "-3"], ["--jobs -3: allowed integers >= 1"]),
    (["--jobs", "abc"], ["argument --jobs: invalid int value: 'abc'"]),
    (["--seeds", "-1"], ["seed -1 is negative: allowed integers >= 0"]),
    (["--runs_dir", "{file}/runs"], ["cannot write to runs_dir '{file}/runs'", "is not a folder"]),
])
def test_bad_sweep_options_are_one_line(fmnist_dir, tmp_path, monkeypatch, capsys, args, expected):
    monkeypatch.setenv("FASHION_MNIST_DIR", str(fmnist_dir))
    path, runs, file = tmp_path / "tiny.yaml", tmp_path / "runs", tmp_path / "file"
    path.write_text(yaml.safe_dump(SPEC))
    file.write_text("a file, not a folder")
    code = main(["sweep", "--spec", str(path), "--runs_dir", str(runs), *[a.format(file=file) for a in args]])
    assert_rejected(code, capsys, runs, *[e.format(file=file) for e in expected])


def test_help_still_prints_everything(capsys):
    with pytest.raises(SystemExit) as e:
        main(["fit", "--help"])
    assert e.value.code == 0 and "--data.fraction" in capsys.readouterr().out


def test_a_folder_that_cannot_be_written_is_one_line(monkeypatch, capsys):
    import experiments.families

    def fail(argv):
        raise PermissionError(13, "Permission denied", "/runs/t")
    monkeypatch.setattr(experiments.families, "main", fail)
    assert main(["families"]) == 2 and one_error_line(capsys) == "error: cannot write '/runs/t': permission denied"
