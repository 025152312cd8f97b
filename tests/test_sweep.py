"""Sweeps: a tiny spec end to end into tables and plot, kill and resume, divergence, the table
generator on hand-written run folders, and every committed spec for one batch."""
from __future__ import annotations

import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml

from experiments.__main__ import main
from experiments.runs.run.cli import resolve_run_dirs
from experiments.runs.sweep.spec import load_spec, main_runs, nearest_tuned, resolve_axes, tuned_fractions, tuning_runs
from experiments.runs.sweep.execute import _record, launch, run_status
from experiments.runs.sweep.sweep import print_plan, run_sweep, whole_left
from experiments.datascale.numbers import aggregate, collect, sample_efficiency
from experiments.datascale.tables import findings, make_tables

from .conftest import started_together, tree_hashes, val_curve
from .test_tensorboard import events, run_hparams, sweep_view

ROOT = Path(__file__).resolve().parents[1]

TINY_SPEC = {
    "name": "tiny", "dataset": "fashion_mnist", "families": ["deit", "resnet"],
    "variants": ["default"], "sample_efficiency_accuracy": 0.2, "variant_args": {"default": {}},
    "profiles": {"cpu": {"budget": "tiny", "fractions": [0.5, 1.0], "seeds": [0], "epochs": 0.25, "min_steps": 4,
                         "val_checks": 2, "batch_size": 32, "lrs": [0.003],
                         "jobs": 1}},  # one run at a time: the kill-and-resume tests rely on it
}


@pytest.fixture
def sweep_env(fmnist_dir, tmp_path, monkeypatch):
    """The tiny spec on the small IDX data; run subprocesses find the data through the env."""
    monkeypatch.setenv("FASHION_MNIST_DIR", str(fmnist_dir))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(TINY_SPEC))
    return spec, tmp_path / "runs"


def _summaries(exp_dir: Path) -> dict[str, dict]:
    """readable run name (the folder without its config hash) -> summary"""
    return {_readable(p.parent): json.loads(p.read_text()) for p in exp_dir.glob("*/summary.json")}


def _readable(run_dir: Path) -> str:
    name, config_hash = run_dir.name.rsplit("_", 1)
    assert len(config_hash) == 8
    return name


def _folder(exp_dir: Path, readable: str) -> Path:
    (folder,) = exp_dir.glob(f"{readable}_????????")
    return folder


def test_tiny_sweep_end_to_end_into_tables(sweep_env, tmp_path, in_process_launches, capsys):
    spec, runs = sweep_env
    assert main(["sweep", "--spec", str(spec), "--runs_dir", str(runs)]) == 0
    # each run's line counts it in its whole stage: DeiT's tuning trials after the ResNet's
    printed = capsys.readouterr().out
    assert "[tune 1/4] resnet-tiny_fashion_mnist_f0.5_s0_lr0.003: fitted" in printed
    assert "[tune 3/4] deit-tiny_fashion_mnist_f0.5_s0_lr0.003: fitted" in printed
    done = _summaries(runs / "tiny")
    assert sorted(done) == ["deit-tiny_fashion_mnist_f0.5_s0_lr0.003", "deit-tiny_fashion_mnist_f1_s0_lr0.003",
                            "resnet-tiny_fashion_mnist_f0.5_s0_lr0.003", "resnet-tiny_fashion_mnist_f1_s0_lr0.003"]
    assert all(s["status"] == "done" for s in done.values())
    # S(n) = max(4, 0.25 * n / 32) rounded up to a multiple of 2 validations: n=270 -> 4, n=540 -> 6
    assert {(s["train_size"], s["steps"]) for s in done.values()} == {(270, 4), (540, 6)}
    assert all(len(s["val_history"]) == 2 for s in done.values())
    plan = json.loads((runs / "tiny" / "sweep.json").read_text())["profiles"]["cpu"]["main_runs"]
    assert sorted(plan) == sorted(name.replace("_lr0.003", "") for name in done)  # run name without lr -> folder
    tuning = json.loads((runs / "tiny" / "tuning.json").read_text())["profiles"]["cpu"]
    assert {(c["family"], c["fraction"], c["lr"]) for c in tuning["choices"]} == {
        (f, fr, 0.003) for f in ("deit", "resnet") for fr in (0.5, 1.0)}
    deit_cfg = yaml.safe_load((_folder(runs / "tiny", "deit-tiny_fashion_mnist_f0.5_s0_lr0.003") / "config.yaml").read_text())
    teacher = _folder(runs / "tiny", "resnet-tiny_fashion_mnist_f0.5_s0_lr0.003")
    assert deit_cfg["model"]["teacher_checkpoint"] == str(teacher / "checkpoints" / "best.ckpt")
    # TensorBoard: one chart per training-set size of every run's val/acc; the hparams table's columns
    layout, experiment = sweep_view(runs / "tiny")
    (category,) = layout.category
    charts = {c.title: list(c.multiline.tag) for c in category.chart}
    assert charts == {f"val/acc, {n} training images": [f"^by_train_size/val_acc_n{n}$"] for n in (270, 540)}
    for s in done.values():
        assert f"by_train_size/val_acc_n{s['train_size']}" in events(_folder(runs / "tiny", s["run"].rsplit("_", 1)[0])).Tags()["scalars"]
    assert [m.name.tag for m in experiment.metric_infos] == ["val/acc_best", "test/acc"]
    shown = sorted(experiment.hparam_infos, key=lambda i: (not i.differs, i.name))  # TensorBoard's column order
    assert [i.name for i in shown[:2]] == ["Status", "family"] and "fraction" in {i.name for i in shown if i.differs}

    out = tmp_path / "results"
    assert main(["tables", "--runs_dir", str(runs), "--out", str(out), "--readme", ""]) == 0
    rows = list(csv.DictReader(open(out / "tiny.csv")))
    assert [(r["family"], r["fraction"]) for r in rows] == [("deit", "0.5"), ("deit", "1.0"),
                                                           ("resnet", "0.5"), ("resnet", "1.0")]
    md = (out / "tiny.md").read_text()
    assert "| resnet | 1 | 540 |" in md and "![" in md and "Learning rate, chosen on validation" in md
    assert (out / "tiny.png").stat().st_size > 10_000
    # deleting the generated files and regenerating gives the same files back
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for p in out.iterdir():
        p.unlink()
    assert main(["tables", "--runs_dir", str(runs), "--out", str(out), "--readme", ""]) == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # the figure also in TensorBoard under the experiment (not the sweep's own events file): after
    # the rerun still one events file, holding the current figure
    (figures,) = (runs / "tiny" / "tensorboard").glob("events.out.tfevents.*")
    assert events(figures.parent).Tags()["images"] == ["tiny/test_error_by_train_size"]
    assert sweep_view(runs / "tiny")[0].category  # the sweep's layout is still there


def test_killed_sweep_resumes_without_redoing_finished_runs(sweep_env, in_process_launches):
    spec, runs = sweep_env
    longer = yaml.safe_load(spec.read_text())
    longer["profiles"]["cpu"]["epochs"] = 1.0  # 18 steps at n=540, a checkpoint after 9: time to kill in between
    longer["families"] = ["resnet"]
    spec.write_text(yaml.safe_dump(longer))
    cmd = [sys.executable, "-m", "experiments", "sweep", "--spec", str(spec), "--runs_dir", str(runs)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and not list((runs / "tiny").glob("resnet-tiny_fashion_mnist_f1_s0_lr0.003_*/checkpoints/last.ckpt")):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and the run it had started, mid-training
    proc.wait()
    first = _folder(runs / "tiny", "resnet-tiny_fashion_mnist_f0.5_s0_lr0.003")
    second = _folder(runs / "tiny", "resnet-tiny_fashion_mnist_f1_s0_lr0.003")
    assert json.loads((first / "summary.json").read_text())["status"] == "fitted"  # tuned, not yet tested
    trained_at = (first / "checkpoints" / "best.ckpt").stat().st_mtime_ns
    assert run_status_of(second) not in ("fitted", "done"), "the kill came too late to test anything"

    assert main(["sweep", "--spec", str(spec), "--runs_dir", str(runs)]) == 0
    assert (first / "checkpoints" / "best.ckpt").stat().st_mtime_ns == trained_at  # not trained again
    assert "trained; testing its best checkpoint" in (first / "log.txt").read_text()  # only its test was left
    assert "resuming from" in (second / "log.txt").read_text()  # continued from its last checkpoint
    assert json.loads((second / "summary.json").read_text())["steps"] == 18
    assert {n: s["status"] for n, s in _summaries(runs / "tiny").items()} == {
        "resnet-tiny_fashion_mnist_f0.5_s0_lr0.003": "done", "resnet-tiny_fashion_mnist_f1_s0_lr0.003": "done"}


def _stopped_sweep(spec: Path, runs: Path, signum: int, to: str, jobs: int) -> subprocess.CompletedProcess:
    """The tiny spec's ResNet tuning trials (f0.5, f1) as a real sweep, `jobs` at a time, in a process
    group of its own, as a terminal starts it; the first run to reach step 5 sends `signum` to `to`
    (its process group, as Ctrl-C does, or the sweep, as `kill <pid>` does); with two at a time, once
    both have reached it, so that each has a checkpoint to resume from however the two starts fall."""
    stopped = yaml.safe_load(spec.read_text())
    stopped["families"] = ["resnet"]
    stopped["profiles"]["cpu"].update(epochs=1.0, val_checks=4, jobs=jobs)  # 12 and 20 steps; checkpoints every 3, 5
    stopped["variant_args"]["default"] = {"trainer.callbacks+": "tests.kill_switch.SignalAfterStep",
                                         "trainer.callbacks.step": 5, "trainer.callbacks.signum": int(signum),
                                         "trainer.callbacks.to": to, "trainer.callbacks.together": jobs,
                                         "trainer.callbacks.barrier": str(runs.parent / "barrier")}
    spec.write_text(yaml.safe_dump(stopped))
    cmd = [sys.executable, "-m", "experiments", "sweep", "--spec", str(spec), "--runs_dir", str(runs), "--stage", "tune"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, start_new_session=True, timeout=600)


def _one_interruption_line(p: subprocess.CompletedProcess, signum: int, spec: Path, runs: Path, names: list[str]) -> None:
    """The sweep ended by `signum` (a shell sees 128 + it) after one line on stderr, naming the
    interrupted runs and the command that resumes them, and no traceback."""
    assert p.returncode == -signum, p.stderr[-3000:]
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, p.stderr[-3000:]
    head, _, tail = lines[0].partition(" (")
    assert head == f"interrupted by {signal.Signals(signum).name}: {len(names)} run(s) stopped and recorded as interrupted"
    assert sorted(tail.partition(")")[0].split(", ")) == sorted(names), lines[0]
    assert lines[0].endswith(f"; run the same command again to resume: python -m experiments sweep --spec {spec} "
                             f"--runs_dir {runs} --stage tune")


def test_ctrl_c_stops_a_sweep_in_one_line_and_the_rerun_resumes(sweep_env, make_dm, in_process_launches, capsys):
    """Ctrl-C (SIGINT to the sweep and its runs) with two runs training: each run records itself as
    interrupted, the sweep says so in one line and ends by SIGINT; the bar does not count them done,
    --status lists them as interrupted, and the same command resumes them from their checkpoints."""
    spec, runs = sweep_env
    make_dm().num_classes  # decoded beforehand: a first use's decoding progress is no part of the answer
    p = _stopped_sweep(spec, runs, signal.SIGINT, "group", jobs=2)
    trials = {_readable(d): d for d in (runs / "tiny").glob("resnet-*")}
    _one_interruption_line(p, signal.SIGINT, spec, runs, sorted(trials))
    assert "0/2" in p.stdout and "2/2" not in p.stdout and "interrupted in" not in p.stdout, p.stdout
    for run_dir in trials.values():
        assert run_status_of(run_dir) == "interrupted" and (run_dir / "checkpoints" / "last.ckpt").exists()
        assert "Traceback" not in (run_dir / "log.txt").read_text()

    capsys.readouterr()
    assert main(["sweep", "--spec", str(spec), "--runs_dir", str(runs), "--stage", "tune", "--status"]) == 0
    rows = {x.split()[3]: x.split()[2] for x in capsys.readouterr().out.splitlines() if x.startswith("tune ")}
    assert rows == {d.name: "interrupted" for d in trials.values()}
    # TensorBoard's HParams over the interrupted runs: their identity and the stage's metric as columns
    _, experiment = sweep_view(runs / "tiny")
    assert [m.name.tag for m in experiment.metric_infos] == ["val/acc_best"]
    assert {"family", "lr", "fraction", "Status"} <= {i.name for i in experiment.hparam_infos}
    assert {run_hparams(d)["Status"] for d in trials.values()} == {"interrupted"}  # each run's row says so

    resumed = yaml.safe_load(spec.read_text())
    resumed["variant_args"]["default"] = {}  # no switch: the same runs (callbacks are no part of a run's identity)
    spec.write_text(yaml.safe_dump(resumed))
    assert main(["sweep", "--spec", str(spec), "--runs_dir", str(runs), "--stage", "tune"]) == 0
    for run_dir in trials.values():
        assert "resuming from" in (run_dir / "log.txt").read_text() and run_status_of(run_dir) == "fitted"
        assert run_hparams(run_dir)["Status"] == "fitted"


def test_sigterm_to_a_sweep_stops_its_run_and_starts_no_other(sweep_env, make_dm):
    """SIGTERM to the sweep alone (`kill <pid>`; its runs never see it): it hands the signal to the
    run training, which records itself interrupted; the next run never starts; one line; exit by SIGTERM."""
    spec, runs = sweep_env
    make_dm().num_classes
    p = _stopped_sweep(spec, runs, signal.SIGTERM, "parent", jobs=1)
    (first,) = (runs / "tiny").glob("resnet-*")  # one at a time, the cheaper run first
    _one_interruption_line(p, signal.SIGTERM, spec, runs, [_readable(first)])
    assert run_status_of(first) == "interrupted"
    assert json.loads((first / "summary.json").read_text())["steps"] == 5


def test_two_sweeps_together_train_each_run_once_and_a_rerun_changes_no_record(sweep_env, tmp_path):
    """The second sweep of an experiment waits for the first (its lock), then finds every run
    finished. A further rerun has nothing to train or test: every file of the experiment, and the
    report fed by its sweep.json (the last invocation's wall time), stays byte for byte."""
    spec, runs = sweep_env
    one = yaml.safe_load(spec.read_text())
    # one run (the lock is the experiment's, whatever its runs): a tuning trial that wins, so the
    # main stage only tests it
    one["families"], one["profiles"]["cpu"]["fractions"] = ["resnet"], [1.0]
    spec.write_text(yaml.safe_dump(one))
    folders = started_together("sweep", spec, runs, "tiny")
    assert [_readable(f) for f in folders] == ["resnet-tiny_fashion_mnist_f1_s0_lr0.003"]
    report = tmp_path / "out" / "tiny.md"
    tables = ["tables", "--experiment", "tiny", "--runs_dir", str(runs), "--out", str(tmp_path / "out"), "--readme", ""]
    assert main(tables) == 0
    before, block = tree_hashes(runs / "tiny"), report.read_text()
    assert {"sweep.json", "tuning.json"} <= set(before) and "invocation ran 1 run in" in block
    assert sum(p.endswith(("/summary.json", "/identity.json", "/config.yaml")) for p in before) == 1 * 3
    assert main(["sweep", "--spec", str(spec), "--runs_dir", str(runs)]) == 0
    assert tree_hashes(runs / "tiny") == before
    assert main(tables) == 0 and report.read_text() == block


def test_a_sweep_away_from_the_project_runs_where_it_was_started(sweep_env, tmp_path, monkeypatch):
    """Started in another folder with a relative runs_dir and image folder, the run processes read
    and write what those names mean there (they ran in the project root: the runs went into the
    project, read 'pets' as a hub name, and the sweep recorded them as failed)."""
    from tests.test_data import _write_image_folder
    spec, _ = sweep_env
    here = tmp_path / "elsewhere"
    _write_image_folder(here / "pets", ["cat", "dog", "eel"], 8, size=(8, 8))
    one = yaml.safe_load(spec.read_text())
    one["name"], one["families"] = "tiny_elsewhere", ["resnet"]
    one["profiles"]["cpu"].update(fractions=[1.0], val_size=3, batch_size=4)
    (here / "tiny.yaml").write_text(yaml.safe_dump(one))
    monkeypatch.chdir(here)
    assert main(["sweep", "--spec", "tiny.yaml", "--dataset", "pets", "--runs_dir", "runs"]) == 0
    (folder,) = (here / "runs" / "tiny_elsewhere").glob("resnet-tiny_pets_f1_s0_lr0.003_????????")
    assert run_status_of(folder) == "done"
    assert not any((ROOT / d / "tiny_elsewhere").exists() for d in ("runs", "results/runs"))


def run_status_of(run_dir: Path) -> str | None:
    p = run_dir / "summary.json"
    return json.loads(p.read_text()).get("status") if p.exists() else None


def test_diverging_run_is_recorded_and_the_sweep_goes_on(sweep_env, in_process_launches):
    spec_path, runs = sweep_env
    spec = load_spec(str(spec_path))
    axes = resolve_axes(spec, "cpu", families=["resnet", "vit"], fractions=[1.0])
    plan = main_runs(spec, axes, runs, 540, lambda family, variant, fraction: 0.003)
    assert [r.family for r in plan] == ["resnet", "vit"]
    # the ResNet gets an absurd learning rate (another configuration, so another folder): its loss becomes NaN
    args = plan[0].args + ("--model.lr", "1e30")
    plan[0] = replace(plan[0], args=args, run_dir=resolve_run_dirs([list(args)])[0])
    launched = []

    def launcher(run):
        launched.append(run.name)
        return launch(run)
    results = run_sweep(plan, launcher=launcher)
    assert results == {plan[0].name: "diverged", plan[1].name: "done"}
    s = json.loads((plan[0].run_dir / "summary.json").read_text())
    assert s["status"] == "diverged" and "loss is nan" in s["error"].lower()
    # a diverged run is final: the next sweep does not launch it again
    launched.clear()
    assert run_sweep(plan, launcher=launcher) == results and launched == []


def test_failed_runs_are_retried(sweep_env, in_process_launches):
    spec_path, runs = sweep_env
    spec = load_spec(str(spec_path))
    plan = main_runs(spec, resolve_axes(spec, "cpu", families=["vit"], fractions=[1.0]), runs, 540, lambda *key: 0.003)
    assert run_sweep(plan, launcher=lambda run: 1) == {plan[0].name: "failed"}
    assert run_status(plan[0]) == "failed"
    assert run_sweep(plan, launcher=launch) == {plan[0].name: "done"}


def test_a_student_named_alone_plans_its_teachers_and_never_distils_from_a_record_without_weights(sweep_env, capsys):
    """FAMILIES=deit (a piece of a profile) plans the ResNet teachers of its subsets and seeds too,
    so no DeiT trains without a teacher; a teacher whose record came without its best checkpoint
    (the reference keeps none) stops its student with a line saying so, in the dry run and the sweep,
    and nothing is launched or retrained over the record."""
    spec_path, runs = sweep_env
    spec = load_spec(str(spec_path))
    axes = resolve_axes(spec, "cpu", families=["deit"], fractions=[1.0])
    assert axes["families"] == ["resnet", "deit"]
    assert resolve_axes(spec, "cpu", families=["resnet", "vit"])["families"] == ["resnet", "vit"]  # no student: as named
    plan = main_runs(spec, axes, runs, 540, lambda *key: 0.003)
    teacher, student = plan
    assert (teacher.family, student.family) == ("resnet", "deit") and student.teacher.endswith(teacher.run_dir.name)
    _record(teacher, "done")  # a finished record, as copied from results/reference: no checkpoints/
    launched = []
    assert run_sweep([student], launcher=lambda run: launched.append(run) or 0) == {student.name: "failed"}
    assert launched == []
    error = json.loads((student.run_dir / "summary.json").read_text())["error"]
    assert error == f"teacher run {student.teacher}: it has a record but no best checkpoint: move {teacher.run_dir} " \
                    "aside to retrain it"
    assert json.loads((teacher.run_dir / "summary.json").read_text())["status"] == "done"  # the record untouched
    print_plan("main stage", [student], axes)
    assert "no best checkpoint" in capsys.readouterr().out
    (teacher.run_dir / "checkpoints").mkdir()
    (teacher.run_dir / "checkpoints" / "best.ckpt").write_bytes(b"weights")
    assert run_sweep([student], launcher=lambda run: launched.append(run) or 1) == {student.name: "failed"}
    assert launched == [student]  # with its weights there the student is launched
    print_plan("main stage", [student], axes)
    assert "no best checkpoint" not in capsys.readouterr().out
    # a student planned with no teacher (its ResNet's tuning unfinished) never trains on labels alone
    orphan = replace(student, teacher=None, name="orphan", run_dir=student.run_dir.parent / "orphan")
    assert run_sweep([orphan], launcher=lambda run: launched.append(run) or 0) == {orphan.name: "failed"}
    assert launched == [student] and "no teacher run is planned" in json.loads(
        (orphan.run_dir / "summary.json").read_text())["error"]
    alone = replace(orphan, args=orphan.args + ("--model.distillation", "none"), name="alone",
                    run_dir=student.run_dir.parent / "alone")   # DeiT trained alone (exp-distill's "none")
    assert run_sweep([alone], launcher=lambda run: launched.append(run) or 1) == {alone.name: "failed"}
    assert launched[-1] == alone


def test_parallel_sweep_trains_one_family_after_another_costliest_runs_first(sweep_env):
    """With jobs > 1 the sweep trains one family after another, the teachers' (ResNet) first, so that a
    sweep stopped early leaves whole families to read against the ResNet; within a family the runs
    start costliest first (steps x forward FLOPs per image), so that it does not end on one long run
    while the other workers idle; each run still gets its status."""
    spec_path, runs = sweep_env
    spec = load_spec(str(spec_path))
    axes = resolve_axes(spec, "cpu", families=["vit", "resnet"], fractions=[0.5, 1.0], seeds=[0, 1])
    assert axes["jobs"] == 1  # the profile's
    without = {**spec, "profiles": {"cpu": {k: v for k, v in spec["profiles"]["cpu"].items() if k != "jobs"}}}
    assert resolve_axes(without, "cpu")["jobs"] == (1 if torch.cuda.is_available() else os.cpu_count())  # per core
    plan = main_runs(spec, {**axes, "epochs": 8}, runs, 540, lambda *key: 0.003)
    assert [(r.family, r.fraction, r.seed) for r in plan][:2] == [("resnet", 0.5, 0), ("vit", 0.5, 0)]
    started = []

    def launcher(run):
        started.append((run.family, run.fraction))
        time.sleep(0.2)  # both workers busy: starts follow the queue's order
        return 1
    assert run_sweep(plan, jobs=2, launcher=launcher) == {r.name: "failed" for r in plan}
    # each family's 136-step runs (1.0) before its 68-step ones (0.5); within a pair the two workers race
    assert started == [("resnet", 1.0)] * 2 + [("resnet", 0.5)] * 2 + [("vit", 1.0)] * 2 + [("vit", 0.5)] * 2



def test_parallel_sweep_starts_the_next_family_when_a_worker_frees(sweep_env):
    """No worker idles at a family's end: with 3 ResNet runs on 2 workers, the first ViT run starts
    while the last ResNet run is still training (a barrier between families would leave one worker
    idle for a whole run), and every ResNet run starts before any ViT run."""
    spec_path, runs = sweep_env
    spec = load_spec(str(spec_path))
    axes = resolve_axes(spec, "cpu", families=["vit", "resnet"], fractions=[1.0], seeds=[0, 1, 2])
    plan = main_runs(spec, {**axes, "epochs": 8}, runs, 540, lambda *key: 0.003)
    events, lock = [], threading.Lock()

    def launcher(run):
        with lock:
            events.append(("start", run.family, run.seed))
        time.sleep({("resnet", 1): 0.2, ("resnet", 2): 0.5}.get((run.family, run.seed), 0.1))  # ends apart
        with lock:
            events.append(("end", run.family, run.seed))
        return 1
    run_sweep(plan, jobs=2, launcher=launcher)
    starts = [f for kind, f, _ in events if kind == "start"]
    assert starts == ["resnet"] * 3 + ["vit"] * 3
    assert events.index(("start", "vit", 0)) < events.index(("end", "resnet", 2))

def _write_run(exp: Path, family, fraction, seed, acc, train_size, status="done"):
    d = exp / f"{family}_f{fraction}_s{seed}"
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({
        "run": d.name, "family": family, "variant": "default", "fraction": fraction, "seed": seed, "status": status,
        "train_size": train_size, "test_acc": acc, "params": 1000, "flops_per_image": 2e6, "wall_time_s": 60,
        "hardware": "test machine", "commit": "abc", "versions": {"torch": "x"}, "precision": "32-true",
        "steps": 200, "val_history": val_curve(200)}))  # without it, a run is not known to have plateaued: not read


def test_table_generator_on_hand_written_runs(tmp_path):
    exp = tmp_path / "runs" / "hand"
    accs = {("vit", 0.1): [0.60, 0.64, 0.65], ("vit", 1.0): [0.88, 0.90, 0.89],
            ("resnet", 0.1): [0.80, 0.81, 0.79], ("resnet", 1.0): [0.91, 0.91, 0.91]}
    for (family, fraction), values in accs.items():
        for seed, acc in enumerate(values):
            _write_run(exp, family, fraction, seed, acc, int(fraction * 1000))
    _write_run(exp, "vit", 0.5, 0, None, 500, status="diverged")
    rows = aggregate(collect(exp))
    assert [(r["family"], r["fraction"]) for r in rows] == [("vit", 0.1), ("vit", 1.0), ("resnet", 0.1), ("resnet", 1.0)]
    for r in rows:
        values = accs[r["family"], r["fraction"]]
        assert r["test_acc_mean"] == pytest.approx(statistics.fmean(values))
        assert r["test_acc_std"] == pytest.approx(statistics.stdev(values))
        assert r["seeds"] == 3
    assert rows[0]["test_acc_mean"] == pytest.approx(0.63) and rows[0]["test_acc_std"] == pytest.approx(0.0264575, rel=1e-5)
    assert sample_efficiency(rows, 0.75) == {("vit", ""): 1000, ("resnet", ""): 100}
    assert sample_efficiency(rows, 0.95) == {("vit", ""): None, ("resnet", ""): None}
    paths = make_tables(exp, tmp_path / "out")
    md = paths[1].read_text()
    assert "| vit | 0.1 | 100 |  |  | 200 | 0.6300 ± 0.0657 | 3 | -0.1700 ± 0.0745 |" in md
    assert "vit_f0.5_s0: diverged" in md and "test machine" in md
    # the README's Findings rows: ViT − ResNet at the smallest size, and its change to the largest, paired by seed
    scarce, grows = findings(exp)
    assert scarce.ours == "ViT − ResNet at 100 images: -0.1700 ± 0.0745 (3 pairs)"
    below = "ViT below, as published: the 95% interval [-0.2445, -0.0955] excludes 0 and reaches beyond ±0.0100"
    assert scarce.verdict == below
    assert grows.ours == "change of ViT − ResNet from 100 to 1,000 images: +0.1500 ± 0.0657 (3 pairs)"
    assert grows.verdict == ("ViT catches up, as published: the 95% interval [+0.0843, +0.2157] excludes 0 and "
                             "reaches beyond ±0.0100") and "test machine; commit abc; your runs" in grows.source
    # ViT trained longer than the ResNet at the largest size: the change says both families' steps
    for seed in range(3):
        f = exp / f"vit_f1.0_s{seed}" / "summary.json"
        f.write_text(json.dumps({**json.loads(f.read_text()), "steps": 800, "val_history": val_curve(800)}))
    scarce, grows = findings(exp)
    assert scarce.ours == "ViT − ResNet at 100 images: -0.1700 ± 0.0745 (3 pairs)"   # the same steps: nothing said
    assert grows.ours == ("change of ViT − ResNet from 100 to 1,000 images (steps: ViT 200 / 800, ResNet 200 / 200): "
                          "+0.1500 ± 0.0657 (3 pairs)")
    # converged or silent, per reading: a run still improving at the largest size silences the trend only
    s = json.loads((exp / "vit_f1.0_s2" / "summary.json").read_text())
    (exp / "vit_f1.0_s2" / "summary.json").write_text(json.dumps({**s, "val_history": val_curve(200, False)}))
    scarce, grows = findings(exp)
    assert scarce.verdict == below
    assert grows.verdict == "not read: 1 of 12 runs still improving (†)"


@pytest.mark.parametrize("bad, match", [
    ({"epochz": 1}, "unknown key 'epochz' in spec"),
    ({"protocol": "equal_steps"}, "unknown key 'protocol' in spec"),
    ({"profiles": {"cpu": {**TINY_SPEC["profiles"]["cpu"], "min_steps": 0}}}, "min_steps=0 in profile 'cpu'"),
    ({"profiles": {"cpu": {k: v for k, v in TINY_SPEC["profiles"]["cpu"].items() if k != "lrs"}}},
     "lacks the key 'lrs'"),
    ({"profiles": {"cpu": {**TINY_SPEC["profiles"]["cpu"], "tuned_fractions": [0.25]}}},
     "tuned fraction 0.25 of profile 'cpu' is not one of its fractions 0.5, 1"),
    ({"profiles": {"cpu": {**TINY_SPEC["profiles"]["cpu"], "pack": 0}}}, "pack=0 in profile 'cpu'"),
    ({"profiles": {"cpu": {**TINY_SPEC["profiles"]["cpu"], "jobs": 0}}}, "jobs=0 in profile 'cpu'"),
])
def test_spec_keys_are_checked(tmp_path, bad, match):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**TINY_SPEC, **bad}))
    with pytest.raises(ValueError, match=match):
        resolve_axes(load_spec(str(path)), "cpu")


def test_a_profile_swept_in_pieces_keeps_every_pieces_tuning(sweep_env, in_process_launches):
    """tuning.json after two pieces (one fraction each) holds both pieces' trials and choices; the
    whole profile swept after them finds everything done and leaves the record as it was."""
    spec, runs = sweep_env
    for fraction in ("0.5", "1.0"):
        assert main(["sweep", "--spec", str(spec), "--runs_dir", str(runs), "--families", "resnet",
                     "--fractions", fraction]) == 0
    path = runs / "tiny" / "tuning.json"
    tuning = json.loads(path.read_text())["profiles"]["cpu"]
    assert [(t["family"], t["fraction"]) for t in tuning["trials"]] == [("resnet", 0.5), ("resnet", 1.0)]
    assert [(c["family"], c["fraction"], c["tuned_at"]) for c in tuning["choices"]] == [
        ("resnet", 0.5, 0.5), ("resnet", 1.0, 1.0)]
    assert tuning["fractions"] == [0.5, 1.0]
    before = path.read_bytes()
    assert main(["sweep", "--spec", str(spec), "--runs_dir", str(runs), "--families", "resnet"]) == 0
    assert path.read_bytes() == before


def test_tuned_fractions_of_a_profile():
    spec = {**TINY_SPEC, "profiles": {"cpu": {**TINY_SPEC["profiles"]["cpu"], "tuned_fractions": [0.5]}}}
    assert tuned_fractions(resolve_axes(spec, "cpu")) == [0.5]
    # other fractions on the command line: still tuned where the profile tunes (a piece of its plan)
    assert tuned_fractions(resolve_axes(spec, "cpu", fractions=[0.1, 0.3, 1.0])) == [0.5]
    assert tuned_fractions(resolve_axes(spec, "cpu", fractions=[0.1, 0.5, 1.0])) == [0.5]
    # a profile that does not name them: the fractions' smallest and largest
    assert tuned_fractions(resolve_axes(TINY_SPEC, "cpu", fractions=[0.1, 0.3, 1.0])) == [0.1, 1.0]


def test_a_piece_of_the_fractions_or_seeds_plans_the_profiles_runs(tmp_path):
    """Training a profile fraction by fraction or seed by seed gives the runs the whole profile would:
    the same tuning trials, and each main run at the lr of the same tuned fraction (pieces compose)."""
    spec = load_spec("datascale")
    whole = resolve_axes(spec, "cpu")
    assert whole.get("tuned_fractions"), "datascale's cpu profile names where it tunes"
    lr_at = {f: lr for f, lr in zip(whole["fractions"], whole["lrs"] * len(whole["fractions"]))}  # an lr per fraction

    def names(runs):
        return {r.name for r in runs}

    def plan(axes):
        return main_runs(spec, axes, tmp_path, 55_000, lambda fam, var, f: lr_at[nearest_tuned(f, axes)])
    untuned = [f for f in whole["fractions"] if f not in whole["tuned_fractions"]]
    pieces = [{"fractions": [untuned[-1]]}, {"fractions": untuned[:1] + whole["tuned_fractions"]},  # with and without a tuned fraction
              {"seeds": whole["seeds"][1:]}, {"seeds": whole["seeds"][1:], "fractions": [untuned[-1]]}]   # without the first seed
    for overrides in pieces:
        piece = resolve_axes(spec, "cpu", **overrides)
        assert names(tuning_runs(spec, piece, tmp_path, 55_000, piece["families"])) == \
            names(tuning_runs(spec, whole, tmp_path, 55_000, whole["families"])), overrides
        assert names(plan(piece)) < names(plan(whole)), overrides


def test_sweep_overrides_are_checked():
    spec = load_spec("datascale")
    with pytest.raises(ValueError, match="fraction 1.5 is outside"):
        resolve_axes(spec, "cpu", fractions=[1.5])
    with pytest.raises(ValueError, match="unknown family 'cnn'"):
        resolve_axes(spec, "cpu", families=["cnn"])
    with pytest.raises(ValueError, match="unknown profile 'tpu': allowed cpu, gpu"):
        resolve_axes(spec, "tpu")
    with pytest.raises(ValueError, match="unknown experiment spec 'nope'"):
        load_spec("nope")


# the sweep's specs (exp-complexity's spec has its own runner and test: tests/test_complexity_experiment.py)
SPECS = sorted(p.parent.name for p in (ROOT / "experiments").glob("*/spec.yaml")
               if yaml.safe_load(p.read_text()).get("runner", "sweep") == "sweep")


@pytest.mark.parametrize("profile", ["cpu", "gpu"])
@pytest.mark.parametrize("name", SPECS)
def test_every_spec_runs_one_batch(name, profile, fmnist_dir, tmp_path, capsys):
    """Every committed spec and profile expands into runs whose commands the CLI accepts and that
    train one batch of each family on CPU (DeiT without its teacher, which this test does not train)."""
    spec = load_spec(name)
    axes = resolve_axes(spec, profile)
    plan = main_runs(spec, axes, tmp_path / "runs", 55_000, lambda *key: axes["lrs"][0])
    assert len(plan) == len(axes["families"]) * len(axes["fractions"]) * len(axes["seeds"]) * len(axes["variants"])
    trials = tuning_runs(spec, axes, tmp_path / "runs", 55_000, axes["families"])
    assert len(trials) == len(axes["families"]) * len(tuned_fractions(axes)) * len(axes["lrs"]) * len(axes["variants"])
    assert all("--test_after_fit" in t.args for t in trials) and not any("--test_after_fit" in r.args for r in plan)
    order = [r.family for r in plan]
    assert "deit" not in order or order.index("resnet") < order.index("deit")
    firsts = {r.family: r for r in reversed(plan)}
    for run in firsts.values():
        args = list(run.args)
        if "--model.teacher_checkpoint" in args:
            i = args.index("--model.teacher_checkpoint")
            del args[i:i + 2]
        code = main(["fit", *args, "--data.data_dir", str(fmnist_dir), "--data.fraction", "1", "--data.val_size", "100",
                     "--trainer.fast_dev_run", "1", "--trainer.enable_model_summary", "false"])
        assert code == 0, capsys.readouterr().err[-2000:]


def test_dry_run_lists_every_command(fmnist_dir, monkeypatch, capsys, tmp_path):
    import experiments.runs.sweep.estimate as est
    monkeypatch.setenv("FASHION_MNIST_DIR", str(fmnist_dir))
    # no packed step measured anywhere (results/packed_steps_cpu.json prices them on the CPU that made it)
    monkeypatch.setattr(est, "COMPILE_TIMES", tmp_path / "none.json")
    monkeypatch.setattr(est, "CPU_GROUP_TIMES", tmp_path / "none.json")
    monkeypatch.setattr(est, "BENCH_STEP_TIMES", tmp_path / "none.json")
    spec = load_spec("datascale")
    spec["profiles"]["gpu"]["val_size"] = 100  # the test data has 600 training images
    (tmp_path / "datascale.yaml").write_text(yaml.safe_dump(spec))
    assert main(["sweep", "--spec", str(tmp_path / "datascale.yaml"), "--profile", "gpu", "--dry_run"]) == 0
    out = capsys.readouterr().out.splitlines()
    commands = [line for line in out if line.startswith("python -m experiments fit")]
    assert len(commands) == 6 * 2 * 4 * 2  # families x tuned fractions x lrs x variants: the tuning stage
    assert all("--trainer.max_steps" in c and "--test_after_fit false" in c for c in commands)
    # 6 families x 7 fractions x 3 seeds x 2 variants; 6 x 2 tuned fractions x 2 variants are tuning trials (seed 0)
    assert out[-2].startswith("## main stage of resnet, vit, deit, swin, convnext, hybrid: 252 runs (24 of them tuning trials")
    # packed 8 (tuning: 4 lrs x 2 variants) and 6 (3 seeds x 2 variants): no such group measured here
    assert out[-1].startswith("## the whole profile: no step time") and out[-1].endswith("so no estimate")


def test_the_dry_run_estimates_wall_time_from_step_times_measured_on_this_device(tmp_path, monkeypatch):
    """Steps x the measured ms per step of the run's model configuration (family, budget, FLOPs per
    image) and batch on this device, over the runs at a time; finished runs cost nothing; no guess
    for what was never measured here (a ViT at patch 2 is not priced as one at patch 4)."""
    CPU = "2 CPU cores (dev, AVX2), no GPU"  # as provenance.hardware names a machine without a GPU
    from experiments.runs.sweep.estimate import estimate, measured, read_step_times
    from experiments.runs.sweep.spec import Run
    runs = [Run(i, f"{f}_{i}", f, 0.1, 0, "default", (), run_dir=tmp_path / f"{f}_{i}", steps=6000, batch_size=32)
            for i, f in enumerate(("vit", "vit", "resnet", "swin"))]
    vit, resnet = 52_158_800, 90_742_560  # forward FLOPs per image at 28x28x1, as their summaries record them
    table = {(CPU, "vit", "tiny", vit, 32, 1): 100.0, (CPU, "resnet", "tiny", resnet, 32, 1): 50.0}
    # vit 2 x 6000 x 100 ms = 2 x 10 min, resnet 6000 x 50 ms = 5 min; two at a time the ViTs train
    # together and the ResNet then alone: 15 min (not the work over the jobs, 12.5); with 8 or 16 cores
    # the longest run (a ViT's 10 min)
    assert estimate(runs[:3], 2, CPU, table) == ("; about 15 min on this device (2 at a time), about 10 min "
                                                   "with 8 such cores, about 10 min with 16 such cores")
    assert estimate(runs, 1, CPU, table) == ("; about 25 min on this device (1 at a time), about 10 min with 8 "
                                               "such cores, about 10 min with 16 such cores, not counting swin-tiny at "
                                               "batch 32 (no step time measured)")
    # phases one after the other: a DeiT student starts after every teacher, a main stage after its
    # tuning; so a ResNet and a DeiT of 5 min take 10 min on 2 jobs, as do two ViTs of different stages
    from experiments.runs.sweep.execute import flops_per_image
    deit = Run(9, "deit_0", "deit", 0.1, 0, "default", (), run_dir=tmp_path / "deit_0", steps=6000, batch_size=32)
    assert estimate([runs[2], deit], 2, CPU, {**table, (CPU, "deit", "tiny", flops_per_image(deit), 32, 1): 50.0}) \
        .startswith("; about 10 min on this device (2 at a time)")
    assert estimate([runs[2], replace(runs[2], name="resnet_9", run_dir=tmp_path / "r9")], 2, CPU, table) \
        .startswith("; about 5 min on this device (2 at a time)")   # the same phase: side by side
    assert estimate([replace(runs[2], stage="tune"), replace(runs[2], name="resnet_9", run_dir=tmp_path / "r9")], 2,
                    CPU, table).startswith("; about 10 min on this device (2 at a time)")
    # 20 ViT runs of 10 min: 3 rounds on 8 jobs, 2 on 16
    assert estimate(runs[:1] * 20, 8, CPU, table) == ("; about 30 min on this device (8 at a time), about 20 min "
                                                        "with 16 such cores")
    assert estimate(runs[3:], 1, CPU, table) == ("; no step time measured on this device for swin-tiny at batch "
                                                   "32 (make bench-steps JOBS=1 times each family's tiny step at batch 32 here), so no estimate")
    assert estimate(runs, 1, "an H200", table) == ("; no step times measured on an H200 "
                                                   "(results/step_times.csv), so no estimate")
    # each run at its own batch size: a ViT at batch 128 has no step time measured
    big = [replace(r, batch_size=128) if i == 1 else r for i, r in enumerate(runs[:3])]
    assert estimate(big, 2, CPU, table) == ("; about 10 min on this device (2 at a time), about 10 min with 8 such "
                                              "cores, about 10 min with 16 such cores, not counting vit-tiny at batch "
                                              "128 (no step time measured)")
    # packed: the runs as the sweep groups them, each group at its measured group step time
    seeds = [Run(i, f"vit_s{i}", "vit", 0.1, i, "default", ("--seed_everything", str(i)),
                 run_dir=tmp_path / f"vit_s{i}", steps=6000, batch_size=32) for i in range(4)]
    groups = {**table, (CPU, "vit", "tiny", vit, 32, 4): 200.0}   # one group of 4: 6000 x 200 ms = 20 min
    assert estimate(seeds, 1, CPU, groups, pack=4) == ("; about 20 min on this device (1 at a time), "
                                                         "about 20 min with 8 such cores, about 20 min with 16 such cores")
    assert estimate(seeds, 1, CPU, groups, pack=3) == ("; about 10 min on this device (1 at a time), about "
                                                         "10 min with 8 such cores, about 10 min with 16 such cores, "
                                                         "not counting vit-tiny at batch 32 packed 3 (no step time "
                                                         "measured)")
    # ViT at patch 2 (196 tokens, 251 MFLOPs an image) is not ViT at patch 4 (52): no step time measured for it
    patch2 = replace(runs[0], args=("--model.patch_size", "2"))
    assert estimate([patch2], 1, CPU, table) == ("; no step time measured on this device for vit-tiny (251 MFLOPs "
                                                   "an image) at batch 32 (make bench-steps JOBS=1 times each family's "
                                                   "tiny step at batch 32 here), so no estimate")
    assert estimate([patch2], 1, CPU, {**table, (CPU, "vit", "tiny", 251_373_200, 32, 1): 500.0}) == (
        "; about 50 min on this device (1 at a time), about 50 min with 8 such cores, about 50 min with 16 such cores")
    _write_run(tmp_path / "x", "vit", 0.1, 0, 0.7, 100)  # a finished run: nothing left to train
    done = Run(9, "vit_f0.1_s0", "vit", 0.1, 0, "default", (), run_dir=tmp_path / "x" / "vit_f0.1_s0", steps=6000)
    assert estimate([done], 1, CPU, table) == "; nothing left to train"
    # the dry run's last line: once a run of the plan has finished, what it prices is what is left
    # the dry run's device and step times, as this test's table measured them (whatever machine runs it)
    import experiments.runs.sweep.estimate as est
    monkeypatch.setattr(est, "run_hardware", lambda jobs: CPU)
    monkeypatch.setattr(est, "read_step_times", lambda path=None: table)
    assert whole_left([runs[0]], 1).startswith("## the whole profile: about ")  # nothing finished: all of it
    assert whole_left([done, runs[0]], 1).startswith("## the whole profile, what is left (1 of 2 runs finished): about ")
    # the same run planned twice (a trial and its main run), once in another folder not trained: one finished run
    elsewhere = replace(done, run_dir=tmp_path / "not-trained")
    assert whole_left([done, elsewhere], 1).startswith("## the whole profile, what is left (1 of 1 runs finished): ")
    assert whole_left([done, done], 1) == "## the whole profile, what is left (1 of 1 runs finished): nothing left to train"
    # a piece (FAMILIES=, FRACTIONS=, ...) is not read as the whole profile
    assert whole_left([runs[0]], 1, piece=True).startswith("## this piece of the profile: about ")
    # the table make tables writes: the median ms per step over a device's single runs of one configuration
    exp = tmp_path / "runs" / "exp"
    for seed, (wall, steps) in enumerate(((60, 600), (90, 600), (300, 1000))):
        d = exp / f"vit_s{seed}"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"status": "done", "family": "vit", "budget": "tiny", "steps": steps,
                                                    "wall_time_s": wall, "hardware": CPU, "flops_per_image": vit}))
        (d / "identity.json").write_text(json.dumps({"identity": {"data.batch_size": 32}}))
    for k in range(2):  # a packed group of 2 (its own loop): one sample, from either member
        d = exp / f"vit_packed_m{k}"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({
            "status": "done", "family": "vit", "budget": "tiny", "steps": 600, "wall_time_s": 120, "hardware": CPU,
            "flops_per_image": vit, "engine": {"packed": 2, "member": k, "group": "g", "loop": "fabric"}}))
        (d / "identity.json").write_text(json.dumps({"identity": {"data.batch_size": 32}}))
    d = exp / "vit_patch2"  # another model configuration of the same family and budget: a row of its own
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({"status": "done", "family": "vit", "budget": "tiny", "steps": 100,
                                                "wall_time_s": 50, "hardware": CPU, "flops_per_image": 251_373_200}))
    (d / "identity.json").write_text(json.dumps({"identity": {"data.batch_size": 32}}))
    patch2, single, group = measured([exp])
    assert single == {"device": CPU, "family": "vit", "budget": "tiny", "flops_per_image": vit, "batch_size": 32,
                      "members": 1, "ms_per_step": 150.0, "runs": 3, "experiments": "exp"}
    assert group == {**single, "members": 2, "ms_per_step": 200.0, "runs": 1}
    assert patch2 == {**single, "flops_per_image": 251_373_200, "ms_per_step": 500.0, "runs": 1}
    assert read_step_times(tmp_path / "none.csv") == {}


def test_tables_never_average_different_configurations(tmp_path):
    """Runs that differ in anything but the seed (budget, a learning-rate-only variant) are rows of
    their own, labelled by what differs; seeds of one configuration are averaged."""
    exp = tmp_path / "runs" / "mixed"
    base = {"model.family": "vit", "data.fraction": 1.0, "model.budget": "tiny", "model.lr": 0.003}
    cases = [({}, 0, 0.80), ({}, 1, 0.82), ({"model.budget": "small"}, 0, 0.90), ({"model.lr": 0.001}, 0, 0.70)]
    for i, (change, seed, acc) in enumerate(cases):
        _write_run(exp, "vit", 1.0, f"{seed}_{i}", acc, 1000)
        ident = {**base, **change, "seed_everything": seed, "data.seed": seed}
        (exp / f"vit_f1.0_s{seed}_{i}" / "identity.json").write_text(json.dumps({"identity": ident}))
    rows = aggregate(collect(exp))
    assert {(r["settings"], r["seeds"], round(r["test_acc_mean"], 4)) for r in rows} == {
        ("budget=tiny, lr=0.003", 2, 0.81), ("budget=small, lr=0.003", 1, 0.9), ("budget=tiny, lr=0.001", 1, 0.7)}


def test_a_family_the_profile_does_not_list_is_named_with_the_protocol_it_gets(sweep_env, capsys):
    """--families naming a family outside the profile's list (a piece of a family not joined yet)
    trains it at the profile's default epochs and steps: the dry run and the sweep say so first."""
    from experiments.__main__ import main
    spec_path, runs = sweep_env
    assert main(["sweep", "--spec", str(spec_path), "--runs_dir", str(runs), "--families", "vit", "resnet",
                 "--dry_run"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "note: vit not among the cpu profile's families (deit, resnet): it trains at the profile's default "
        "epochs and steps")
    assert main(["sweep", "--spec", str(spec_path), "--runs_dir", str(runs), "--families", "resnet", "--dry_run"]) == 0
    assert "note:" not in capsys.readouterr().out
