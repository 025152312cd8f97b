"""Experiments are declared, not wired: a folder experiments/<name>/ with a spec.yaml is an
experiment. Its spec names its runner (none: the sweep) and its place (order), and from the specs
alone `python -m experiments`, the README's Findings and the Makefile's `exp-%` know it. A narrow
`tables --experiment Y` changes Y's rows only."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import experiments
from experiments.__main__ import main

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "Does a throwaway experiment reach the Findings?"

TABLES = f'''
import json
from pathlib import Path

from experiments.report.findings import Finding


def make_tables(exp_dir, out):
    value = json.loads((Path(exp_dir) / "record.json").read_text())["value"]
    path = Path(out) / "throwaway.md"
    path.write_text(f"# Throwaway\\n\\nvalue {{value}}\\n")
    return [path]


def findings(exp_dir):
    value = json.loads((Path(exp_dir) / "record.json").read_text())["value"]
    return [Finding("{QUESTION}", "yes (nobody)", f"value {{value}}", "yes",
                    "[throwaway](results/throwaway.md) cpu; test machine; commit abc; your runs")]
'''

RUNNER = '''
from pathlib import Path


def main(argv):
    Path(argv[-1]).write_text(" ".join(argv))
    return 0
'''


@pytest.fixture
def throwaway(tmp_path, monkeypatch):
    """An experiment of its own: a folder beside the suite's (the experiments package's __path__
    extended, as a folder of experiments/ is found), with a spec, tables, findings and a runner."""
    root = tmp_path / "more_experiments"
    folder = root / "throwaway"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "tables.py").write_text(TABLES)
    (folder / "runner.py").write_text(RUNNER)
    (folder / "spec.yaml").write_text(spec_text("throwaway", runner="throwaway", order=0, make_help="a throwaway experiment",
                                                make_options=["PROFILE", "SEEDS"]) + "profiles: {cpu: {}}\n")
    monkeypatch.setattr(experiments, "__path__", [*experiments.__path__, str(root)])
    runs = tmp_path / "runs" / "throwaway"
    runs.mkdir(parents=True)
    (runs / "record.json").write_text(json.dumps({"value": 7}))
    return tmp_path


def spec_text(name: str, **keys) -> str:
    """A spec's lines as a person writes them: lists in brackets, make_help in double quotes."""
    def value(v):
        return f"[{', '.join(v)}]" if isinstance(v, list) else f'"{v}"' if isinstance(v, str) and " " in v else v
    return "".join(f"{k}: {value(v)}\n" for k, v in {"name": name, **keys}.items())


def _rows(readme: Path) -> list[str]:
    return [line for line in readme.read_text().splitlines() if line.startswith("| ") and "?" in line]


def test_a_declared_experiment_s_findings_row_reaches_the_readme_in_its_place(throwaway):
    readme = throwaway / "README.md"
    shutil.copy(ROOT / "README.md", readme)
    (throwaway / "out").mkdir()
    before = _rows(readme)
    args = ["tables", "--runs_dir", str(throwaway / "runs"), "--out", str(throwaway / "out"), "--readme", str(readme)]
    assert main([*args, "--experiment", "throwaway"]) == 0
    rows = _rows(readme)
    assert rows[0].startswith(f"| {QUESTION} | yes (nobody) | value 7 | yes | [throwaway](results/throwaway.md)")
    assert rows[1:] == before  # every other experiment's rows kept as they were
    assert (throwaway / "out" / "throwaway.md").read_text().endswith("value 7\n")
    from experiments.runs.sweep.spec import declared
    assert [d.name for d in declared()][:2] == ["throwaway", "datascale"]  # order 0: before datascale's 1


def test_a_declared_runner_is_a_command_of_its_own(throwaway):
    from experiments.runs.sweep.spec import declared_runners
    assert declared_runners()["throwaway"].path.parent.name == "throwaway"
    out = throwaway / "ran.txt"
    assert main(["throwaway", "--profile", "cpu", str(out)]) == 0
    assert out.read_text() == f"--profile cpu {out}"


def test_make_runs_a_declared_experiment_with_its_spec_s_runner_options_and_help(tmp_path):
    """The Makefile reads each spec's runner, make_options, order and make_help (sed, never a shell)."""
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    for name, spec in {"throwaway": {"runner": "throwaway", "order": 2, "make_options": ["PROFILE", "SEEDS"],
                                     "make_help": "a throwaway experiment: its own runner"},
                       "swept": {"make_options": ["FAMILIES", "PROFILE"], "order": 1,
                                 "make_help": "a sweep of its own; then tables"},
                       "unplaced": {"runner": "throwaway", "make_help": "runs throwaway's runner on its spec"}}.items():
        (tmp_path / "experiments" / name).mkdir(parents=True)
        (tmp_path / "experiments" / name / "spec.yaml").write_text(spec_text(name, **spec))

    def make(*args: str) -> str:
        return subprocess.run(["make", "-n", "-s", *args], cwd=tmp_path, capture_output=True, text=True,
                              check=True).stdout

    def command(out: str) -> str:
        return " ".join(next(x for x in out.splitlines() if "-m experiments" in x and "tables" not in x).split())
    assert command(make("exp-throwaway", "SEEDS=0 1", "PROFILE=gpu", "FAMILIES=vit")) == \
        ".venv/bin/python -m experiments throwaway --profile $PROFILE --seeds $SEEDS || failed=1; \\"
    assert command(make("exp-swept", "SEEDS=0 1", "PROFILE=gpu", "FAMILIES=vit")) == \
        ".venv/bin/python -m experiments sweep --spec swept --families $FAMILIES --profile $PROFILE || failed=1; \\"
    # each value reaches the runner as its exported variable's expansion (tests/test_help.py: never as a command)
    assert command(make("exp-unplaced")) == ".venv/bin/python -m experiments throwaway --spec unplaced || failed=1; \\"
    assert ".venv/bin/python -m experiments tables --experiment swept;" in make("exp-swept")
    assert re.search(r"for t in (.*); do", make("exp-all")).group(1).split() == ["exp-swept", "exp-throwaway", "exp-unplaced"]
    listed = subprocess.run(["make", "-s", "help"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert re.findall(r"^  (exp-\S+) +(.*)$", listed, re.M)[:3] == [
        ("exp-swept", "a sweep of its own; then tables"), ("exp-throwaway", "a throwaway experiment: its own runner"),
        ("exp-unplaced", "runs throwaway's runner on its spec")]


@pytest.mark.parametrize("line, message", [
    ("order: first", "order='first' in throwaway/spec.yaml: allowed an integer >= 0"),
    ("runner: ../x", "runner in throwaway/spec.yaml='../x' is not valid"),
    ("runner: Mine", "runner='Mine' in throwaway/spec.yaml: allowed letters a-z, digits and _"),
    ("runner: nothing", "runner='nothing' in throwaway/spec.yaml: allowed sweep (or no runner key), or an experiment"),
    ("make_help: 'say: hi'", "make_help='say: hi' in throwaway/spec.yaml: allowed one line of text in double quotes"),
    ("make_options:\n- PROFILE", "make_options=['PROFILE'] in throwaway/spec.yaml: allowed a list of the Makefile's"),
])
def test_a_bad_declaration_is_one_line(throwaway, capsys, line, message):
    """A declaration the Makefile would read otherwise than the YAML says is refused too; the
    commands that list the runners say so in one line."""
    from experiments.runs.sweep.spec import declared
    spec = throwaway / "more_experiments" / "throwaway" / "spec.yaml"
    key = line.split(":")[0]
    spec.write_text("".join(x for x in spec.read_text().splitlines(keepends=True) if not x.startswith(key)) + line + "\n")
    with pytest.raises(ValueError) as e:
        declared()
    assert message in str(e.value) and "\n" not in str(e.value)
    readme = throwaway / "README.md"
    readme.write_text("<!-- tables:findings -->\n<!-- /tables:findings -->\n")
    (throwaway / "out").mkdir()
    tables = ["tables", "--runs_dir", str(throwaway / "runs"), "--out", str(throwaway / "out"), "--readme", str(readme)]
    for command in (["--help"], tables):
        assert main(command) == 2
        assert capsys.readouterr().err == f"error: {e.value}\n"
    assert not any((throwaway / "out").iterdir())  # refused before any report was written


def test_every_runner_s_spec_is_read_by_the_one_loader_with_its_schema():
    from experiments.runs.sweep.spec import declared, load_spec
    from experiments.complexity.runner import SCHEMA as COMPLEXITY
    from experiments.distill.runner import SCHEMA as DISTILL
    from experiments.inductive_bias.runner import SCHEMA as INDUCTIVE_BIAS
    schemas = {s.runner: s for s in (COMPLEXITY, DISTILL, INDUCTIVE_BIAS)}
    for d in declared():
        assert load_spec(d.name, schemas.get(d.runner))["name"] == d.name
    with pytest.raises(ValueError, match="spec distill/spec.yaml is run by `python -m experiments distill`"):
        load_spec("distill", COMPLEXITY)


def test_a_narrow_tables_call_changes_only_its_experiment(tmp_path):
    """`tables --runs_dir X --experiment Y`, X holding Y alone: Y's Findings rows and runtimes, every
    other row as it was; no step times (a measure over whole runs folders)."""
    runs, out, readme = tmp_path / "runs", tmp_path / "out", tmp_path / "README.md"
    shutil.copytree(ROOT / "results" / "reference" / "complexity", runs / "complexity")
    out.mkdir()
    shutil.copy(ROOT / "README.md", readme)
    shutil.copy(ROOT / "results" / "runtimes.md", out / "runtimes.md")
    before, runtimes = _rows(readme), (out / "runtimes.md").read_text()
    assert main(["tables", "--runs_dir", str(runs), "--experiment", "complexity", "--out", str(out),
                 "--readme", str(readme)]) == 0
    after = _rows(readme)
    assert [r for r in after if "[complexity](" not in r] == [r for r in before if "[complexity](" not in r]
    assert len(after) == len(before) > 1 and after[-1].endswith("; your runs |")  # complexity's, from runs/
    # the rest of the README too (its default-profile sentence is datascale's)
    assert readme.read_text() == (ROOT / "README.md").read_text().replace(before[-1], after[-1])
    assert (out / "runtimes.md").read_text() == runtimes.replace(
        "4 parts: interpolation, ours, paper, scaling | reference runs |", "4 parts: interpolation, ours, paper, scaling | your runs |")
    assert not (runs / "step_times.csv").exists() and not (out / "step_times.csv").exists()


def test_every_committed_spec_s_make_options_are_variables_the_makefile_maps():
    from experiments.runs.sweep.spec import declared, read_spec
    makefile = (ROOT / "Makefile").read_text()
    block = re.search(r"^OPTIONS := ((?:.*\\\n)*.*)$", makefile, re.M).group(1)
    mapped = {"LAUNCHER", *re.findall(r"([A-Z_]+):[a-z_]+", block)}
    for d in declared():
        options = read_spec(d.path).get("make_options", [])
        assert options and set(options) <= mapped, (d.name, set(options) - mapped)
        assert all(f"\n{v} ?=" in makefile for v in options), d.name  # each a variable of the Makefile
