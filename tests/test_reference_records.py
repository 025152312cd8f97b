"""A newcomer's first run is their own: the committed reference records (results/reference) are kept
apart from the user's runs (results/runs, git-ignored); the tables say whose runs they were built
from and prefer the user's; `python -m experiments reference` copies the user's records (never
checkpoints, event files or logs) over the reference."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from experiments.__main__ import main
from experiments.runs.run.identity import config_hash, teacher_identity
from experiments.runs.sweep.reference import REFERENCE, RUNS, has_records, whose_runs
from modules import FAMILIES

from . import training_digests

from .test_tables import _run


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A checkout's results/ with one reference run of datascale and nothing of the user's."""
    monkeypatch.chdir(tmp_path)
    _run(tmp_path / REFERENCE / "datascale", "resnet", 0.01, 0, 0.70)
    return tmp_path


def test_tables_come_from_the_reference_until_the_user_has_runs(checkout):
    assert main(["tables", "--readme", ""]) == 0
    text = Path("results/datascale.md").read_text()
    assert "Built from the committed reference records in results/reference/datascale" in text
    assert "`make exp-datascale` runs your own into results/runs/datascale" in text and "| 0.7000" in text
    _run(checkout / RUNS / "datascale", "resnet", 0.01, 0, 0.65)  # the user's own reproduction
    assert main(["tables", "--readme", ""]) == 0
    text = Path("results/datascale.md").read_text()
    assert text.splitlines()[3] == "Built from the runs in results/runs/datascale." and "| 0.6500" in text
    assert "0.7000" not in text


def test_refresh_copies_records_only_and_replaces_the_experiment(checkout):
    run = RUNS / "datascale" / _run(checkout / RUNS / "datascale", "vit", 0.01, 0, 0.60)
    for name in ("checkpoints/best.ckpt", "events.out.tfevents.1", "log.txt", "train_indices.json", ".lock",
                 "probes/shift.png"):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("not a record")
    (run / "probes.json").write_text("{}")
    old = {p.relative_to(REFERENCE) for p in REFERENCE.rglob("*") if p.is_file()}
    assert main(["reference", "--experiment", "datascale"]) == 0
    copied = {p.relative_to(REFERENCE / "datascale" / run.name).as_posix()
              for p in (REFERENCE / "datascale" / run.name).rglob("*") if p.is_file()}
    assert copied == {p.name for p in run.iterdir() if p.suffix in (".json", ".yaml")} - {"train_indices.json"}
    assert "probes.json" in copied and not any(o.parts[1] != run.name and (REFERENCE / o).exists() for o in old)
    assert json.loads((REFERENCE / "datascale" / run.name / "summary.json").read_text())["test_acc"] == 0.60


def test_refresh_of_an_experiment_without_runs_is_one_line(checkout, capsys):
    assert main(["reference", "--experiment", "distill"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: experiment 'distill' has no run records in results/runs/distill: allowed none (run an "
                   "experiment first)"]
    assert main(["reference", "--experiment", "../x"]) == 2 and not Path("results/x").exists()


def test_whose_runs_and_has_records(tmp_path):
    assert not has_records(tmp_path / "nothing") and not has_records(tmp_path)
    (tmp_path / "sweep.json").write_text("{}")
    assert has_records(tmp_path)
    assert whose_runs(tmp_path) == f"Built from the runs in {tmp_path.as_posix()}."
    assert whose_runs(REFERENCE / "fit-families").startswith(
        "Built from the committed reference records in results/reference/fit-families (hardware and commit below). "
        "`make fit-families` runs your own")


def test_the_committed_results_are_what_make_tables_makes_of_the_reference(tmp_path, monkeypatch):
    """results/ and the README's Findings block are regenerated from results/reference byte for
    byte: no committed table, plot or finding comes from older code than the tables' own."""
    root = Path(__file__).resolve().parents[1]
    shutil.copytree(root / REFERENCE, tmp_path / REFERENCE)
    shutil.copy(root / "README.md", tmp_path / "README.md")
    monkeypatch.chdir(tmp_path)
    assert main(["tables"]) == 0
    made = {p.name for p in (tmp_path / "results").iterdir() if p.is_file()}
    not_tables = {"safety.md", "benchmarks.txt", "cpu_levers.txt", "packed_stage.txt",  # make safety, bench, bench-levers, bench-stage
                  "step_profile.txt",  # make bench-profile
                  "gpu_check.json", "packed_steps_cpu.json",  # make gpu-check, bench-packed-cpu
                  "step_times_bench.json"}  # make bench-steps
    committed = {p.name for p in (root / "results").iterdir() if p.is_file()} - not_tables
    assert made == committed
    assert [n for n in sorted(made) if (tmp_path / "results" / n).read_bytes() != (root / "results" / n).read_bytes()] == []
    assert (tmp_path / "README.md").read_text() == (root / "README.md").read_text()


def test_every_committed_reference_record_belongs_to_a_run_the_tables_read():
    """No stale record hides in results/reference: every run folder has its summary.json (a probe
    file of a run whose configuration changed would otherwise sit beside nothing), and every CKA
    file pairs two runs that are there."""
    root = Path(__file__).resolve().parents[1] / REFERENCE
    runs = {d.name for d in root.glob("*/*") if (d / "summary.json").is_file()}
    orphans = [d.relative_to(root).as_posix() for d in root.glob("*/*")
               if d.is_dir() and d.name not in ("tensorboard", "cka") and d.name not in runs]
    assert orphans == []
    for f in root.glob("*/cka/*.json"):
        assert set(f.stem.split("__")) <= runs, f.name


def test_every_committed_reference_record_is_named_by_todays_identity():
    """A record's folder hash is the hash of its stored identity, and that identity is what today's
    code would store (a teacher named by its run folder, not by the path the pool kept it under), so
    the folders a user's `make exp-*` creates carry the names of the committed records."""
    root = Path(__file__).resolve().parents[1] / REFERENCE
    records = sorted(root.glob("*/*/identity.json"))
    assert records
    for f in records:
        stored = json.loads(f.read_text())
        ident = stored["identity"]
        assert f.parent.name.endswith("_" + stored["hash"]) and config_hash(ident) == stored["hash"], f
        teacher = ident.get("model.teacher_checkpoint")
        if teacher is not None:
            assert teacher == teacher_identity(teacher) and not teacher.startswith(("results/", "/")), f


@pytest.mark.skipif(not training_digests.has_history(), reason="needs the checkout's whole git history")
def test_every_committed_record_was_trained_by_code_that_trains_as_todays():
    """A record trained before its training's digest last changed (tests/training_digests.py) is
    from code that trains other weights than today's: its table is a table from older code."""
    changes = {f: training_digests.last_change(f) for f in (*FAMILIES, training_digests.DISTILLED)}
    root = Path(__file__).resolve().parents[1] / REFERENCE
    stale, checked = [], 0
    for f in sorted(root.rglob("summary.json")):
        summary = json.loads(f.read_text())
        ident_file = f.parent / "identity.json"
        if "family" not in summary or not ident_file.exists():
            continue
        identity = json.loads(ident_file.read_text())["identity"]
        commit = summary["commit"].removesuffix("-dirty")
        checked += 1
        for family in training_digests.trainings_of(summary, identity):
            if changes[family] and not training_digests.is_at_or_after(commit, changes[family]):
                stale.append(f"{f.parent.relative_to(root)} (commit {commit}; {family} changed at "
                             f"{changes[family][:12]})")
    assert checked and checked == len(list(root.rglob("identity.json")))  # every run record
    assert not stale, "records from before their family's training changed: rerun them\n" + "\n".join(stale)


def test_a_digest_changed_on_a_machine_it_had_is_a_change_and_a_new_machine_is_not(tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    def commit(digests: dict, message: str) -> str:
        (tmp_path / "tests" / "training_digests").mkdir(parents=True, exist_ok=True)
        (tmp_path / "tests" / "training_digests" / "vit.json").write_text(json.dumps(digests))
        git("add", "-A")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q")
    first = commit({"cpu A": "aaaa"}, "digest recorded")
    assert training_digests.last_change("vit", tmp_path) is None
    commit({"cpu A": "aaaa", "cpu B": "bbbb"}, "another machine")
    assert training_digests.last_change("vit", tmp_path) is None
    changed = commit({"cpu A": "cccc", "cpu B": "bbbb"}, "training changed")
    later = commit({"cpu A": "cccc", "cpu B": "bbbb", "cpu C": "dddd"}, "a third machine")
    assert training_digests.last_change("vit", tmp_path) == changed
    assert training_digests.is_at_or_after(later, changed, tmp_path)
    assert training_digests.is_at_or_after(changed, changed, tmp_path)
    assert not training_digests.is_at_or_after(first, changed, tmp_path)
    assert not training_digests.is_at_or_after("0123456789ab", changed, tmp_path)  # unknown: not after
    assert training_digests.last_change("swin", tmp_path) is None  # no file: never changed


def test_a_students_record_comes_from_its_teachers_training_too():
    of = training_digests.trainings_of
    assert of({"family": "vit"}, {}) == {"vit"}
    student = {"model.teacher_checkpoint": "resnet-tiny_fashion_mnist_f0.002_s0_lr0.003_0adbf6f3/checkpoints/best.ckpt"}
    assert of({"family": "deit"}, student) == {"deit", "resnet", training_digests.DISTILLED}
    assert of({"family": "deit"}, {**student, "model.distillation": "none"}) == {"deit"}
    assert of({"family": "deit"}, {"model.teacher_checkpoint": "/elsewhere/teacher.ckpt"}) == {
        "deit", training_digests.DISTILLED}  # a teacher outside the suite's run folders: no family to name
