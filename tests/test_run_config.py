"""A run folder from elsewhere is data, never code: `test`, `validate` and `probe` read its config.yaml
with yaml.safe_load, keep its data, model and evaluation settings as plain values and hand nothing
else to jsonargparse (experiments/runs/run/run_config.py). Each form in which that file could import
code or write outside its folder is planted here, with a module `h3evil` on the import path whose
import creates a file: the run is evaluated as usual, one note names what was left out, the module
is never imported and nothing is written outside. An included file and values of the wrong shape
are refused in one line instead (the battery, tests/bad_inputs.py)."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from experiments.__main__ import main

from .conftest import SMOKE, tree_hashes

# h3evil's import is the attack: it creates IMPORTED beside the module (its names only make it resolvable)
PLANTED = """from pathlib import Path
(Path(__file__).parent / "IMPORTED").touch()
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger
def hook(*args, **kwargs):
    pass
class Cb(Callback):
    pass
class Logger(CSVLogger):
    pass
"""
SIMPLE = {"class_path": "lightning.pytorch.profilers.SimpleProfiler", "init_args": {"dirpath": "{out}",
                                                                                    "filename": "profile"}}
FORMS = {  # a config entry as the issue found it importing code or writing outside -> the keys left out
    "callable argument": {"trainer.callbacks": [{"class_path": "lightning.pytorch.callbacks.LambdaCallback",
                                                 "init_args": {"on_test_start": "h3evil.hook"}}]},
    "class_path": {"trainer.callbacks": [{"class_path": "h3evil.Cb"}]},
    "bare string": {"trainer.logger": "h3evil.Logger", "trainer.callbacks": ["h3evil.Cb"]},
    "JSON string": {"trainer.logger": '{"class_path": "h3evil.Logger"}',
                    "trainer.callbacks": '[{"class_path": "h3evil.Cb"}]'},
    "where it runs": {"trainer.strategy": "h3evil.Strategy", "trainer.accelerator": {"class_path": "h3evil.Acc"},
                      "trainer.plugins": ["h3evil.Plugin"], "trainer.devices": 3},
    "logger writing outside": {"trainer.logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                                                  "init_args": {"save_dir": "{out}"}}},
    "profiler writing outside": {"trainer.profiler": SIMPLE},
    "root folder outside": {"trainer.default_root_dir": "{out}"},
    "cache writing outside": {"data.cache_dir": "{out}"},
}


@pytest.fixture(scope="module")
def trained(fmnist_dir, tmp_path_factory) -> Path:
    """A finished resnet smoke run, tested after its fit (copied per test before it is tampered with)."""
    runs = tmp_path_factory.mktemp("runs")
    assert main(["fit", "--config", SMOKE, "--data.data_dir", str(fmnist_dir), "--runs_dir", str(runs),
                 "--experiment", "t", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary",
                 "false", "--model.family", "resnet"]) == 0
    (run_dir,) = (runs / "t").iterdir()
    return run_dir


@pytest.fixture
def planted(tmp_path, monkeypatch) -> Path:
    """h3evil on the import path; returns the file its import would create."""
    folder = tmp_path / "plants"
    folder.mkdir()
    (folder / "h3evil.py").write_text(PLANTED)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "h3evil", raising=False)
    return folder / "IMPORTED"


def from_elsewhere(trained: Path, tmp_path: Path, entries: dict) -> Path:
    """A copy of the trained run whose config.yaml also holds `entries` (dotted keys; {out} is the
    folder outside)."""
    run = Path(shutil.copytree(trained, tmp_path / "elsewhere" / trained.name))
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    for key, value in json.loads(json.dumps(entries).replace("{out}", str(tmp_path / "outside"))).items():
        section, name = key.split(".")
        cfg[section][name] = value
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "outside").mkdir()
    return run


def notes(capsys) -> list[str]:
    """The note and error lines of the command's stderr (Lightning's own lines aside)."""
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith(("note:", "error:"))]


@pytest.mark.parametrize("form", FORMS)
def test_a_planted_entry_is_left_out_and_the_run_tested_as_usual(trained, tmp_path, planted, capsys, form):
    run = from_elsewhere(trained, tmp_path, FORMS[form])
    own = json.loads((trained / "summary.json").read_text())
    capsys.readouterr()
    code = main(["test", "--ckpt_path", str(run / "checkpoints" / "best.ckpt")])
    assert not planted.exists() and "h3evil" not in sys.modules
    assert not any((tmp_path / "outside").iterdir()), sorted((tmp_path / "outside").rglob("*"))
    (line,) = notes(capsys)
    assert code == 0 and line.startswith(f"note: run config {str(run / 'config.yaml')!r} sets ")
    assert "left out" in line and all(key in line for key in FORMS[form]), line
    # evaluated with the run's own settings: its result lands in its summary, as the fit's own test did
    summary = json.loads((run / "summary.json").read_text())
    assert summary["test_settings"] == own["test_settings"] and summary["test"]["acc"] == own["test"]["acc"]
    assert not (run / "evaluations").exists()


def test_validate_leaves_out_a_callable_too(trained, tmp_path, planted, capsys):
    run = from_elsewhere(trained, tmp_path, FORMS["callable argument"])
    capsys.readouterr()
    code = main(["validate", "--ckpt_path", str(run / "checkpoints" / "best.ckpt")])
    assert not planted.exists() and "h3evil" not in sys.modules
    (line,) = notes(capsys)
    assert code == 0 and "sets trainer.callbacks: left out" in line


def test_the_suites_own_config_is_read_without_a_note(trained, tmp_path, capsys):
    """What `fit` writes into config.yaml is read whole: no note, and the test's settings and result
    are those of the fit's own test."""
    run = from_elsewhere(trained, tmp_path, {})
    own = json.loads((trained / "summary.json").read_text())
    capsys.readouterr()
    assert main(["test", "--ckpt_path", str(run / "checkpoints" / "best.ckpt")]) == 0
    assert notes(capsys) == []
    summary = json.loads((run / "summary.json").read_text())
    assert summary["test_settings"] == own["test_settings"] and summary["test"]["acc"] == own["test"]["acc"]


def test_an_option_given_on_the_command_line_is_not_noted(trained, tmp_path, capsys):
    run = from_elsewhere(trained, tmp_path, {"trainer.devices": 1, "data.cache_dir": "{out}"})
    capsys.readouterr()
    assert main(["test", "--ckpt_path", str(run / "checkpoints" / "best.ckpt"), "--trainer.devices", "1"]) == 0
    (line,) = notes(capsys)
    assert "sets data.cache_dir: left out" in line


def test_probe_reads_the_config_as_data(trained, tmp_path, planted, capsys):
    """probe builds the run's data from its config: the cache folder named there is left out, and a
    planted logger is never imported."""
    run = from_elsewhere(trained, tmp_path, {**FORMS["bare string"], "data.cache_dir": "{out}"})
    capsys.readouterr()
    code = main(["probe", str(run), "--images", "8", "--parts", "cka"])
    assert not planted.exists() and "h3evil" not in sys.modules
    assert not any((tmp_path / "outside").iterdir()), sorted((tmp_path / "outside").rglob("*"))
    (line,) = notes(capsys)
    assert code == 0 and (run / "probes.json").exists()
    assert "left out" in line and all(k in line for k in ("trainer.logger", "trainer.callbacks", "data.cache_dir"))


def test_a_refused_config_stops_probe_before_any_folder_is_touched(trained, tmp_path, planted, capsys):
    good = Path(shutil.copytree(trained, tmp_path / "good"))
    bad = from_elsewhere(trained, tmp_path, {"data.fraction": "h3evil.Fraction"})
    before = tree_hashes(tmp_path)
    capsys.readouterr()
    assert main(["probe", str(good), str(bad), "--images", "8"]) == 2
    (line,) = notes(capsys)
    assert line == (f"error: run config {str(bad / 'config.yaml')!r} has data.fraction='h3evil.Fraction': "
                    "allowed a float (a run's config is read as plain values)")
    assert tree_hashes(tmp_path) == before and not planted.exists()


def test_the_options_checked_are_fits_own():
    """Every option of `fit`'s parser, and nothing else, is a key a run's config may hold."""
    from experiments.runs.run.cli import _ParseOnly
    from experiments.runs.run.identity import flatten
    from experiments.runs.run.run_config import options
    parser = _ParseOnly(args=["fit"])._subcommand_parsers["fit"]
    assert set(flatten(parser.get_defaults().as_dict())) - {"config", "__default_config__"} == set(options())


@pytest.mark.parametrize("value, kind, fits", [
    (0.9, float, True), (1, float, True), (True, float, False), ("0.1", float, False), (True, int, False),
    (None, int | None, True), ([0.9, 0.999], tuple[float, float], True), ([0.9], tuple[float, float], False),
    ((0.9, 0.999), tuple[float, float], False), ("warn", "deterministic", True), ("h3evil.X", "deterministic", False),
    ("bf16-mixed", "precision", True), (16, "precision", True), ("16", "precision", True), ({"a": 1}, str, False),
    ("h3evil.Logger", "logger", False), ([{"class_path": "h3evil.Cb"}], "callbacks", False),
])
def test_a_kept_value_fits_its_type_only_as_a_plain_value(value, kind, fits):
    from experiments.runs.run.run_config import _fits, options
    kind = options()[f"trainer.{kind}"][0] if isinstance(kind, str) else kind
    assert _fits(value, kind) is fits
