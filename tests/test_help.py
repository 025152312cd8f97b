"""Help that helps: `fit --help` leads with the suite's own options and leaves Lightning's Trainer
options to --help_all; `make help` fits in 100 columns."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from experiments.__main__ import COMMANDS, main, runners
from experiments.runs.sweep.spec import declared, read_spec

ROOT = Path(__file__).resolve().parents[1]


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    assert e.value.code == 0
    return capsys.readouterr().out


def test_fit_help_leads_with_the_suites_options(capsys):
    short = _help(capsys, "fit", "--help")
    lines = short.splitlines()
    assert lines[0] == "usage: python -m experiments fit [options]"
    for option in ("--experiment", "--runs_dir", "--model.family", "--model.budget", "--data.dataset",
                   "--data.fraction", "--data.train_size", "--data.seed", "--ckpt_path"):
        assert re.search(rf"^  {re.escape(option)} ", short, re.M), option
    assert "--trainer." not in short.replace("--trainer.* options", "")
    assert " ".join(short.split()).endswith("python -m experiments fit --help_all")
    assert len(lines) < 250
    # every section title whole (the model's is its docstring's first sentence, once cut at a comma)
    titles = [x for x in lines if x and not x.startswith(" ") and x.endswith(":")]
    assert "The model: any family, trained by one recipe:" in titles
    assert not [t for t in titles if t.endswith(",:")], titles

    full = _help(capsys, "fit", "--help_all")
    assert full.index("--model.family") < full.index("--data.batch_size") < full.index("--trainer.max_steps")
    assert len(re.findall(r"^  --trainer\.\w+", full, re.M)) >= 40
    assert "--ckpt_path" in _help(capsys, "test", "-h")


@pytest.mark.parametrize("command", [*COMMANDS, *runners()])
def test_every_command_s_help_is_its_own(command, capsys):
    """`python -m experiments COMMAND --help` prints that command's usage (run_dir once printed fit's)."""
    try:
        status = main([command, "--help"])
    except SystemExit as e:
        status = e.code
    assert status == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m experiments {command} ")


def test_make_help_fits_in_100_columns():
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert [x for x in out.splitlines() if len(x) > 100] == []
    targets = re.findall(r"^([a-zA-Z_%-]+):.*## ", (ROOT / "Makefile").read_text(), re.M)
    # the pattern rule exp-% stands for each experiment, in its spec's order, with its spec's make_help
    experiments = [d.make_target for d in declared()]
    at = targets.index("exp-%")
    targets[at:at + 1] = experiments
    # every target on a line of its own, its description wrapped under it
    assert [x.split()[0] for x in out.splitlines() if not x.startswith("   ")] == targets
    described = " ".join(out.split())
    for d in declared():
        assert " ".join(f"{d.make_target} {read_spec(d.path)['make_help']}".split()) in described


@pytest.mark.parametrize("argv", [
    ["exp-datascale-commands", "SEEDS=0; touch {planted}"],
    ["exp-datascale-commands", "PROFILE=cpu; touch {planted};", "FAMILIES=resnet"],
    ["exp-datascale-commands", "LAUNCHER=local`touch {planted}`"],
    ["exp-bogus;touch {planted}"],
    ["exp-nope;touch {planted};false datascale"],   # a word of it a spec's name: still not a target
    ["exp-%"],
    ["wheels-folder", "WHEELS=x' ] ; touch {planted} ; [ '"],
    ["wheelhouse", "WHEELS={planted}_w", "PY_VERSION=3.12; touch {planted}"],
])
def test_a_make_variable_or_target_is_a_value_never_a_command(argv, tmp_path):
    """Make's variables reach a command as the shell's expansion of an exported variable, and an
    experiment target is checked against the specs before anything runs: a ';' or '$(...)' in a
    value is words for the runner to refuse in one line, never a second command (a '$(...)' is make's
    own syntax, expanded by make before any shell sees it)."""
    planted = tmp_path / "planted"
    done = subprocess.run(["make", "-s", *(a.format(planted=planted) for a in argv)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode != 0 and not planted.exists()
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower() or "***" in line]
    assert errors and "Traceback" not in done.stderr, done.stderr
