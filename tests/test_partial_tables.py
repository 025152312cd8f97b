"""`make tables` after a partial run: each experiment is built from the user's runs where they have
finished ones, else from the committed reference, and says which; a partial sweep shows its finished
cells and names the missing ones; no figure outlives its table; a Findings row the user's runs cannot
give yet stays, from the reference, saying so; the user's step times never replace the reference's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.__main__ import main
from experiments.runs.sweep.reference import REFERENCE, RUNS

from .test_tables import _run

README = "intro\n<!-- tables:findings -->\n<!-- /tables:findings -->\nend\n"
SIZES = (0.01, 0.1)


def _sweep(exp: Path, plan: dict[str, str]) -> None:
    (exp / "sweep.json").write_text(json.dumps({"spec": "datascale", "profiles": {"cpu": {"main_runs": plan}}}))


def _experiment(exp: Path, fractions=SIZES, seeds=(0, 1, 2), shift: float = 0.0) -> dict[str, str]:
    """ViT and ResNet runs as a finished sweep leaves them; returns its plan (cell -> run folder)."""
    plan = {}
    for family, base in (("resnet", 0.70), ("vit", 0.60)):
        for fraction in fractions:
            for seed in seeds:
                acc = base + shift + fraction + 0.01 * seed
                plan[f"{family}_f{fraction:g}_s{seed}"] = _run(exp, family, fraction, seed, acc, plateaued=True)
    _sweep(exp, plan)
    return plan


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A checkout: the reference's datascale at two sizes, its tables built, and a README."""
    monkeypatch.chdir(tmp_path)
    _experiment(tmp_path / REFERENCE / "datascale")
    Path("README.md").write_text(README)
    assert main(["tables"]) == 0
    return tmp_path


def _findings() -> list[str]:
    return [line for line in Path("README.md").read_text().splitlines() if line.startswith("| ") and "?" in line]


def test_a_started_run_with_nothing_finished_leaves_the_reference_s_tables_and_says_so(checkout):
    user = RUNS / "datascale"
    _run(user, "vit", 0.01, 0, None, status="interrupted")
    before = Path("results/datascale.md").read_text()
    assert main(["tables"]) == 0
    text = Path("results/datascale.md").read_text()
    assert text.splitlines()[3].startswith("Built from the committed reference records in results/reference/datascale")
    assert ("Your runs in results/runs/datascale are not in it: none has finished yet" in text.splitlines()[3])
    assert text.replace(text.splitlines()[3], "") == before.replace(before.splitlines()[3], "")
    assert all("reference runs" in row for row in _findings()) and len(_findings()) == 2


def test_a_partial_sweep_shows_its_finished_cells_names_the_missing_and_drops_the_reference_figure(checkout):
    assert Path("results/datascale.png").is_file()  # the reference's: two sizes
    user = RUNS / "datascale"
    plan = _experiment(user, fractions=(0.01,), seeds=(0, 1, 2), shift=0.05)
    later = {f"{f}_f0.1_s{s}": f"{f}_f0.1_s{s}_lr0.003" for f in ("resnet", "vit") for s in (0, 1, 2)}
    _sweep(user, {**plan, **later})  # the plan's larger size has not trained yet
    assert main(["tables"]) == 0
    text = Path("results/datascale.md").read_text()
    assert text.splitlines()[3] == "Built from the runs in results/runs/datascale."
    assert ("- not finished yet: 6 of the 12 runs in the sweep's plan, so their cells are missing: "
            + ", ".join(sorted(later))) in text
    assert [r.split(" | ")[1:2] + r.split(" | ")[6:7] for r in text.splitlines() if r.startswith("| resnet | 0")] == [
        ["0.01", "0.7700 ± 0.0248"]]  # the finished cell, from the user's runs
    assert not Path("results/datascale.png").exists() and "datascale.png" not in text  # one size: no plot of it


def test_a_findings_row_the_user_s_runs_cannot_give_stays_from_the_reference_saying_so(checkout):
    reference_rows = _findings()
    assert [r.split(" | ")[0] for r in reference_rows] == ["| Scarce data: is ViT below the ResNet?",
                                                           "| As data grows, does ViT catch up?"]
    _experiment(RUNS / "datascale", fractions=(0.01,), shift=0.05)
    assert main(["tables"]) == 0
    scarce, grows = _findings()
    assert scarce.startswith("| Scarce data") and scarce.endswith("; your runs |")
    assert grows == reference_rows[1].replace(
        "; reference runs |", "; reference runs (results/runs/datascale has no finished runs for it yet) |")


def test_the_user_s_step_times_go_to_their_own_file(checkout):
    committed = Path("results/step_times.csv").read_text()
    assert "test machine" in committed
    run = RUNS / "datascale" / _run(RUNS / "datascale", "vit", 0.01, 0, 0.6, plateaued=True)
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "hardware": "a loaded machine", "wall_time_s": 420}))
    assert main(["tables"]) == 0
    assert Path("results/step_times.csv").read_text() == committed
    yours = (RUNS / "step_times.csv").read_text()
    assert "a loaded machine" in yours and "test machine" not in yours


def test_the_dry_run_reads_the_reference_s_step_time_where_both_have_one(tmp_path, monkeypatch):
    from experiments.runs.sweep import estimate
    head = ",".join(estimate.COLUMNS)
    for name, rows in (("reference.csv", ["cpu,vit,tiny,52158800,32,1,100.0,3,datascale"]),
                       ("yours.csv", ["cpu,vit,tiny,52158800,32,1,420.0,1,datascale",
                                      "cpu,resnet,tiny,90742560,32,1,50.0,1,datascale"])):
        (tmp_path / name).write_text("\n".join([head, *rows]) + "\n")
    monkeypatch.setattr(estimate, "STEP_TIMES", tmp_path / "reference.csv")
    monkeypatch.setattr(estimate, "YOUR_STEP_TIMES", tmp_path / "yours.csv")
    assert estimate.read_step_times() == {("cpu", "vit", "tiny", 52158800, 32, 1): 100.0,
                                          ("cpu", "resnet", "tiny", 90742560, 32, 1): 50.0}


def test_an_experiment_with_nothing_finished_anywhere_leaves_the_others_built(checkout, capsys):
    _run(RUNS / "mine", "vit", 0.01, 0, None, status="interrupted")  # a spec of the user's, just started
    assert main(["tables"]) == 0
    assert "mine: no finished runs in results/runs/mine" in capsys.readouterr().err
    assert not Path("results/mine.md").exists() and Path("results/datascale.md").is_file()
    assert main(["tables", "--experiment", "mine"]) == 2  # asked for by name: one error line
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: no finished runs in results/runs/mine: run the experiment first")


def test_before_the_sweep_records_its_plan_the_unfinished_run_folders_are_named(checkout):
    user = RUNS / "datascale"
    _run(user, "resnet", 0.01, 0, 0.7, plateaued=True)
    stopped = _run(user, "vit", 0.01, 0, None, status="interrupted")  # Ctrl-C before the sweep wrote sweep.json
    assert main(["tables"]) == 0
    text = Path("results/datascale.md").read_text()
    assert (f"- not finished yet: {stopped}; the sweep records its whole plan (sweep.json) when an invocation "
            "ends, so runs not started yet are not listed") in text
