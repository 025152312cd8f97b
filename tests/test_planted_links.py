"""Issue #45: no write leaves its place. A run or experiment folder from elsewhere may hold symbolic
links named like the files the suite writes there (.lock, config.yaml, summary.json.tmp,
checkpoints/last.ckpt.tmp, ...); each is refused in one line naming it, or replaced, and the file it
points at keeps every byte. `reference` copies plain files only. The battery (tests/bad_inputs.py)
plants the same links in a fresh fit's folder and a sweep's experiment folder."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from experiments.__main__ import main
from experiments.runs.sweep.reference import REFERENCE, RUNS

from .conftest import SMOKE
from .test_tables import _run

SECRET = b"a file outside the run folder: not one byte of it may change\n"


@pytest.fixture
def victim(tmp_path) -> Path:
    """An outside file that planted links point at."""
    path = tmp_path / "outside" / "victim.txt"
    path.parent.mkdir()
    path.write_bytes(SECRET)
    return path


@pytest.fixture(scope="module")
def finished(fmnist_dir, tmp_path_factory) -> Path:
    """A finished (trained and tested) resnet smoke run, copied per test before links are planted."""
    runs = tmp_path_factory.mktemp("runs")
    assert main(["fit", *_base(fmnist_dir, runs), "--model.family", "resnet"]) == 0
    (run_dir,) = (runs / "t").iterdir()
    return run_dir


def _base(fmnist_dir: Path, runs: Path) -> list[str]:
    return ["--config", SMOKE, "--data.data_dir", str(fmnist_dir), "--runs_dir", str(runs), "--experiment", "t",
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def _copy(run_dir: Path, runs: Path) -> Path:
    return Path(shutil.copytree(run_dir, runs / "t" / run_dir.name))


def _plant(link: Path, target: Path) -> Path:
    if link.exists() or link.is_symlink():
        link.unlink()
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link


def _refused(code: int, capsys, link: Path) -> None:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: {str(link)!r} is a symbolic link to "), lines[0]


# ---------------- the writers themselves: a link is replaced or refused, never followed ----------------
def test_records_and_checkpoints_replace_a_planted_link_and_leave_its_target(tmp_path, victim, make_dm):
    """write_json (every record), atomic_save (every checkpoint) and the training subset: a link
    under the temporary name or the final name is replaced by the file; its target keeps every byte."""
    from modules.files import write_json
    from modules.checkpoint_io import atomic_save, read_checkpoint
    run = tmp_path / "run"
    for name in ("summary.json", "identity.json.tmp", "checkpoints/last.ckpt.tmp", "checkpoints/best.ckpt",
                 "train_indices.json.tmp"):
        _plant(run / name, victim)
    write_json(run / "summary.json", {"status": "done"})
    write_json(run / "identity.json", {"identity": {}})
    atomic_save({"global_step": 4}, run / "checkpoints" / "last.ckpt")
    atomic_save({"global_step": 5}, run / "checkpoints" / "best.ckpt")
    make_dm(train_size=64).save_train_indices(run / "train_indices.json")
    assert victim.read_bytes() == SECRET
    files = sorted(p.relative_to(run).as_posix() for p in run.rglob("*") if not p.is_dir())
    assert files == ["checkpoints/best.ckpt", "checkpoints/last.ckpt", "identity.json", "summary.json",
                     "train_indices.json"]  # no link and no temporary file left
    assert not any(p.is_symlink() for p in run.rglob("*"))
    assert json.loads((run / "summary.json").read_text()) == {"status": "done"}
    assert read_checkpoint(run / "checkpoints" / "best.ckpt")["global_step"] == 5
    assert len(json.loads((run / "train_indices.json").read_text())["indices"]) == 64


def test_locks_and_logs_refuse_a_link_or_a_fifo(tmp_path, victim):
    """Kept and written in place, a lock or a log is never opened through a link, nor blocks on a FIFO."""
    from experiments.runs.run.lock import lock_run_folder
    from experiments.runs.sweep.execute import _run_logged
    from experiments.runs.run.lock import hold_experiment
    from modules.files import open_in_place
    run = tmp_path / "exp" / "run"
    run.mkdir(parents=True)
    os.mkfifo(run / ".lock")
    with pytest.raises(ValueError, match=r"\.lock' is not a plain file"):
        lock_run_folder(run)
    with pytest.raises(ValueError, match=r"\.lock' is not a plain file"):
        open_in_place(run / ".lock", append=True)
    (run / ".lock").unlink()
    _plant(run / "log.txt", victim)
    with pytest.raises(ValueError, match=r"log\.txt' is a symbolic link to "):
        _run_logged(["false"], "false", run, None)  # no process is started
    _plant(tmp_path / "exp" / ".lock", victim)
    with pytest.raises(ValueError, match=r"exp/\.lock' is a symbolic link"):
        with hold_experiment(tmp_path / "exp"):
            pass
    assert victim.read_bytes() == SECRET


def test_a_link_anywhere_in_a_folder_is_named(tmp_path, victim):
    from modules.files import refuse_links
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    refuse_links(run)
    refuse_links(tmp_path / "missing")  # nothing there yet: nothing to refuse
    _plant(run / "evaluations", victim.parent)
    with pytest.raises(ValueError, match=r"run/evaluations' is a symbolic link to '.*outside'") as e:
        refuse_links(run)
    assert "\n" not in str(e.value)
    (run / "evaluations").unlink()
    with pytest.raises(ValueError, match=r"run' is a symbolic link"):
        refuse_links(_plant(tmp_path / "linked-run", run))


def test_submitits_own_links_do_not_stop_a_sweep(tmp_path, victim):
    """A SLURM submission leaves <experiment>/submitit/.submission_file_*.sh linked to its job's
    script: the next invocation (the continuation job, --status, tables) goes ahead; the folder
    itself as a link does not."""
    from experiments.runs.run.lock import hold_experiment
    scripts = tmp_path / "exp" / "submitit"
    scripts.mkdir(parents=True)
    (scripts / "4242_submission.sh").write_text("#!/bin/sh\n")
    (scripts / ".submission_file_0f3a.sh").symlink_to(scripts / "4242_submission.sh")
    with hold_experiment(tmp_path / "exp"):
        pass
    shutil.rmtree(scripts)
    _plant(scripts, victim.parent)
    with pytest.raises(ValueError, match=r"exp/submitit' is a symbolic link"):
        with hold_experiment(tmp_path / "exp"):
            pass


# ---------------- the commands: fit, test, probe, fit_packed, tables, reference ----------------
@pytest.mark.parametrize("name", [".lock", "config.yaml", "summary.json.tmp", "checkpoints/last.ckpt.tmp"])
def test_fit_of_a_finished_or_interrupted_run_never_writes_through_a_link(finished, fmnist_dir, tmp_path, victim,
                                                                          capsys, name):
    """A finished run (.lock: any fit truncated the target and wrote its pid there), or one
    interrupted after its last checkpoint (a resume rewrote config.yaml, summary.json and last.ckpt
    through their names): refused in one line naming the link, nothing in the folder changed."""
    run = _copy(finished, tmp_path / "runs")
    if name != ".lock":
        (run / "summary.json").unlink()  # as if killed: the next fit resumes from last.ckpt
    link = _plant(run / name, victim)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    capsys.readouterr()
    _refused(main(["fit", *_base(fmnist_dir, tmp_path / "runs"), "--model.family", "resnet"]), capsys, link)
    assert victim.read_bytes() == SECRET
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("command", ["test", "validate"])
def test_evaluating_a_run_with_a_link_writes_nothing_through_it(finished, tmp_path, victim, capsys, command):
    """test/validate of a run's checkpoint write its summary (or evaluations/) and events there."""
    run = _copy(finished, tmp_path / "runs")
    link = _plant(run / "summary.json.tmp", victim)
    capsys.readouterr()
    code = main([command, "--ckpt_path", str(run / "checkpoints" / "best.ckpt"),
                 "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"])
    _refused(code, capsys, link)
    assert victim.read_bytes() == SECRET


def test_probe_of_a_run_with_a_link_writes_nothing_through_it(finished, tmp_path, victim, capsys):
    run = _copy(finished, tmp_path / "runs")
    link = _plant(run / "probes", victim.parent)  # its figures would go into the outside folder
    capsys.readouterr()
    _refused(main(["probe", str(run), "--images", "8"]), capsys, link)
    assert sorted(victim.parent.iterdir()) == [victim] and victim.read_bytes() == SECRET
    assert not (run / "probes.json").exists()


def test_fit_packed_refuses_a_link_in_a_member_or_its_group(fmnist_dir, tmp_path, victim, capsys):
    from experiments.runs.packed.fit import group_dir, resolve_members
    args = [[*_base(fmnist_dir, tmp_path / "runs"), "--seed_everything", str(s), "--data.seed", str(s)]
            for s in (0, 1)]
    members = resolve_members(args)
    gdir = group_dir([m.run_dir for m in members])
    listed = tmp_path / "members.json"
    listed.write_text(json.dumps({"members": args}))
    for link, target in ((members[1].run_dir / "config.yaml", victim),
                         (gdir / "checkpoints", victim.parent)):
        _plant(link, target)
        capsys.readouterr()
        _refused(main(["fit_packed", str(listed)]), capsys, link)
        link.unlink()
    assert sorted(victim.parent.iterdir()) == [victim] and victim.read_bytes() == SECRET


def test_tables_refuse_an_experiment_folder_with_a_link(tmp_path, victim, capsys):
    """The tables write their figures' events into <experiment>/tensorboard and read every record there."""
    runs = tmp_path / "runs"
    _run(runs / "datascale", "resnet", 0.01, 0, 0.70)
    link = _plant(runs / "datascale" / "tensorboard", victim.parent)
    capsys.readouterr()
    _refused(main(["tables", "--runs_dir", str(runs), "--out", str(tmp_path / "results"), "--readme", ""]),
             capsys, link)
    assert sorted(victim.parent.iterdir()) == [victim] and not (tmp_path / "results").exists()


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A checkout's results/ with one reference run of datascale, and one run of the user's."""
    monkeypatch.chdir(tmp_path)
    _run(tmp_path / REFERENCE / "datascale", "resnet", 0.01, 0, 0.70)
    return RUNS / "datascale" / _run(tmp_path / RUNS / "datascale", "vit", 0.01, 0, 0.60)  # as reference names it


@pytest.mark.parametrize("name", ["summary.json", "probes.json", "evaluations"])
def test_reference_copies_plain_files_only(checkout, victim, capsys, name):
    """A record that is a link would put an outside file's contents into the committed reference:
    refused in one line naming it, before the reference is touched."""
    secret = victim.with_name("secret.json")
    secret.write_text('{"token": "outside"}')
    link = _plant(checkout / name, secret if name.endswith(".json") else victim.parent)
    before = {p: p.read_bytes() for p in REFERENCE.rglob("*") if p.is_file()}
    capsys.readouterr()
    _refused(main(["reference", "--experiment", "datascale"]), capsys, link)
    assert {p: p.read_bytes() for p in REFERENCE.rglob("*") if p.is_file()} == before
    assert not any(b"outside" in p.read_bytes() for p in REFERENCE.rglob("*") if p.is_file())


def test_reference_writes_no_copy_through_a_link_in_the_reference(checkout, victim, capsys):
    target = REFERENCE / "datascale"
    shutil.rmtree(target)
    link = _plant(target, victim.parent)  # the committed folder, made a link
    capsys.readouterr()
    _refused(main(["reference", "--experiment", "datascale"]), capsys, link)
    assert sorted(victim.parent.iterdir()) == [victim]


def test_lightning_checkpoints_replace_planted_links(tmp_path, victim):
    """SafeCheckpointIO (every Trainer's and the packed groups'): links planted as last.ckpt and as its
    temporary file are replaced by the checkpoint (the temporary one took its 6 MB before)."""
    from modules.checkpoint_io import SafeCheckpointIO
    link = _plant(tmp_path / "checkpoints" / "last.ckpt", victim)
    _plant(tmp_path / "checkpoints" / "last.ckpt.tmp", victim)
    SafeCheckpointIO().save_checkpoint({"global_step": 7, "state_dict": {"w": torch.ones(2)}}, link)
    assert not link.is_symlink() and torch.load(link, weights_only=True)["global_step"] == 7
    assert sorted(p.name for p in link.parent.iterdir()) == ["last.ckpt"] and victim.read_bytes() == SECRET


def test_reference_leaves_submitit_and_linked_files_behind(checkout, victim):
    """submitit/ holds a scheduler's files and its own links (a sweep allows them there): `reference`
    copies nothing of it, and nothing reached through a link, so no outside file's contents enter the
    committed reference."""
    secret = victim.with_name("secret.yaml")
    secret.write_text("token: outside\n")
    _plant(RUNS / "datascale" / "submitit" / "leak.yaml", secret)
    (RUNS / "datascale" / "submitit" / "job.yaml").write_text("scheduler: its own\n")
    assert main(["reference", "--experiment", "datascale"]) == 0
    copied = [p for p in REFERENCE.rglob("*") if p.is_file()]
    assert copied and not any("submitit" in p.parts for p in copied)
    assert not any(b"outside" in p.read_bytes() for p in copied)


def test_tables_replace_a_link_planted_as_the_runs_folder_s_step_times(tmp_path, victim):
    """The step times of a runs folder other than the reference are written into it: a link planted
    there is replaced, and the file it points at keeps every byte."""
    runs = tmp_path / "runs"
    _run(runs / "datascale", "resnet", 0.01, 0, 0.70)
    link = _plant(runs / "step_times.csv", victim)
    assert main(["tables", "--runs_dir", str(runs), "--out", str(tmp_path / "results"), "--readme", ""]) == 0
    assert not link.is_symlink() and link.read_text().startswith("device,") and victim.read_bytes() == SECRET


def test_a_run_folder_named_like_a_figure_link_removes_no_figure(tmp_path):
    """A report lists the runs it leaves out by name: a folder named 'x](datascale.png)' printed there
    once made the stale-figure check read datascale.png as a figure of that report, and a second
    `make tables` deleted it. A name's brackets are written as entities, and only an image's whole
    markup (![...](name.png)) counts as a figure shown."""
    from experiments.report.table_format import plain
    from experiments.tables import linked_figures
    assert "](" not in plain("x](datascale.png)") and "[" not in plain("![a](b.png)")
    report = tmp_path / "distill.md"
    report.write_text(f"left out: {plain('x](datascale.png)')}; x](other.png)\n\n![distill](distill.png)\n"
                      "![last-layer [CLS] attention](attention_maps.png)\n")   # a caption may hold brackets
    assert linked_figures(report) == {"distill.png", "attention_maps.png"}
