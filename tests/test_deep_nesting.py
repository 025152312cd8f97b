"""What the suite reads back may come from anywhere (a colleague's runs folder, an archive): a file
nested deeper than Python's parsers go (200,000 '[': json and yaml raise RecursionError there) is
read as any malformed file is, by every reader, never a traceback (modules.files.parse_json and
parse_yaml)."""
from __future__ import annotations

import pytest
import yaml

from experiments.__main__ import main
from modules.files import parse_json, parse_yaml

from tests.bad_inputs import TINY_SPEC

DEEP = "[" * 200_000 + "]" * 200_000
MALFORMED = "{not json"
# every file of an experiment's folder and of its runs' folders that a sweep or the tables read
EXPERIMENT_FILES = ("tuning.json", "sweep.json")
RUN_FILES = ("summary.json", "identity.json", "progress.json", "config.yaml", "train_indices.json")


def test_the_parsers_raise_the_error_of_a_malformed_text():
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_json(DEEP)
    with pytest.raises(yaml.YAMLError, match="nested too deeply"):
        parse_yaml(DEEP)
    assert parse_json('{"a": [1]}') == {"a": [1]} and parse_yaml("a: [1]") == {"a": [1]}


def _planted(folders, files, text: str) -> None:
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        for f in files:
            (folder / f).write_text(text)


def test_a_dry_run_reads_deep_files_as_malformed_ones(fmnist_dir, monkeypatch, capsys, tmp_path):
    """A sweep's dry run over runs whose folders and experiment files are deep prints what it prints
    over malformed ones (a malformed record is no record: the run is planned anew)."""
    import shlex

    from experiments.runs.run.cli import resolve_run_dirs
    monkeypatch.setenv("FASHION_MNIST_DIR", str(fmnist_dir))
    spec, runs = tmp_path / "tiny.yaml", tmp_path / "runs"
    spec.write_text(yaml.safe_dump(TINY_SPEC))
    argv = ["sweep", "--spec", str(spec), "--runs_dir", str(runs), "--dry_run"]
    assert main(argv) == 0
    fits = [shlex.split(line)[4:] for line in capsys.readouterr().out.splitlines()
            if line.startswith("python -m experiments fit")]
    folders = resolve_run_dirs(fits)   # the folders `fit` would use, which the dry run reads
    assert folders

    def dry_run(text: str) -> tuple[int, str, str]:
        _planted(folders, RUN_FILES, text)
        _planted([runs / TINY_SPEC["name"]], EXPERIMENT_FILES, text)
        code, out = main(argv), capsys.readouterr()
        return code, out.out, out.err

    malformed, deep = dry_run(MALFORMED), dry_run(DEEP)
    assert deep == malformed and deep[0] == 0


def test_the_tables_name_a_deep_record_as_they_name_a_malformed_one(capsys, tmp_path):
    runs = tmp_path / "runs"
    argv = ["tables", "--runs_dir", str(runs), "--experiment", "datascale", "--out", str(tmp_path / "out"),
            "--readme", str(tmp_path / "README.md")]

    def tables(text: str) -> tuple[int, str]:
        _planted([runs / "datascale" / "vit-tiny_fashion_mnist_f0.002_s0_lr0.001_0a1b2c3d"], RUN_FILES, text)
        _planted([runs / "datascale"], EXPERIMENT_FILES, text)
        code, out = main(argv), capsys.readouterr()
        return code, out.out + out.err

    (code, said), (deep_code, deep_said) = tables(MALFORMED), tables(DEEP)
    assert deep_code == code and "Traceback" not in deep_said and "RecursionError" not in deep_said
    # one line, the same file named as not valid JSON, the reason its own
    assert len(deep_said.strip().splitlines()) == 1 and "nested too deeply to read" in deep_said
    assert deep_said.split("not valid JSON")[0] == said.split("not valid JSON")[0] != said
