"""One pool of runs: exp-distill takes exp-datascale's ResNet and ViT runs as its teachers instead
of training them again, adds a ResNet teacher stopped at the ViT teacher's validation accuracy, and
its records, tables and reference name the shared runs where they live."""
from __future__ import annotations

import csv
import json

import pytest
import yaml

from experiments.__main__ import main
from experiments.runs.sweep import reference
from experiments.runs.sweep.shared import located

# one protocol for both experiments: the same family, subset, seed, lr and schedule is the same run
PROTOCOL = {"budget": "tiny", "fractions": [0.5], "seeds": [0], "epochs": 0.25, "min_steps": 4, "val_checks": 2,
            "batch_size": 32, "lrs": [0.003], "tuned_fractions": [0.5], "jobs": 1}
DATASCALE = {"name": "datascale", "dataset": "fashion_mnist", "families": ["resnet", "vit", "deit"],
             "variant_args": {"default": {}}, "profiles": {"cpu": PROTOCOL}}
DISTILL = {"name": "distill", "runner": "distill", "dataset": "fashion_mnist", "student": "deit", "student_lr_of": "vit",
           "variants": {"none": {"model.distillation": "none"},
                        "hard": {"model.distillation": "hard", "model.distill_alpha": 0.5}},
           "profiles": {"cpu": {**PROTOCOL, "teachers": ["resnet", "vit"], "matched": {"resnet": "vit"},
                                "matched_val_interval": 1,
                                "students": ["none", "hard/resnet", "hard/resnet-at-vit", "hard/vit"],
                                "probe_images": 32}}}


@pytest.fixture
def specs(fmnist_dir, tmp_path, monkeypatch, in_process_launches):
    """Both specs on the small IDX data, fitted in this process; returns (datascale spec, distill
    spec, runs_dir, the run folders each fit was launched for)."""
    import experiments.runs.sweep.execute as execute
    monkeypatch.setenv("FASHION_MNIST_DIR", str(fmnist_dir))
    launched, fit = [], execute._run_logged

    def counted(command, shown, folder, threads):
        launched.append(f"{folder.parent.name}/{folder.name}")
        return fit(command, shown, folder, threads)
    monkeypatch.setattr(execute, "_run_logged", counted)
    paths = []
    for spec in (DATASCALE, DISTILL):
        paths.append(tmp_path / f"{spec['name']}.yaml")
        paths[-1].write_text(yaml.safe_dump(spec))
    return paths[0], paths[1], tmp_path / "runs", launched


def test_distill_takes_the_datascale_runs_and_trains_only_what_is_new(specs, tmp_path, monkeypatch):
    ds_spec, distill_spec, runs, launched = specs
    assert main(["sweep", "--spec", str(ds_spec), "--runs_dir", str(runs)]) == 0
    datascale = {p.parent.name for p in (runs / "datascale").glob("*/summary.json")}
    assert len(datascale) == 3 and launched  # resnet, vit and deit (distilled from that resnet): tuned, then tested
    launched.clear()

    assert main(["distill", "--spec", str(distill_spec), "--runs_dir", str(runs)]) == 0
    # trained now: the no-teacher student, the matched teacher and two distilled students; every
    # ResNet and ViT run is exp-datascale's, and the students are not tuned (they take ViT's lr);
    # the hard/resnet student is exp-datascale's DeiT, the same configuration under another name
    assert all(f.startswith("distill/") for f in launched)
    trained = {f.split("/")[1] for f in launched}
    assert len(trained) == 4 and not trained & datascale
    record = json.loads((runs / "distill" / "distill.json").read_text())["profiles"]["cpu"]
    teachers = {t["family"]: t["run"] for t in record["teachers"]}
    assert teachers["resnet"].startswith("datascale/") and teachers["vit"].startswith("datascale/")
    assert {t["run"].split("/")[-1] for t in record["tuning"]["trials"]} <= datascale
    assert "deit" not in {t["family"] for t in record["tuning"]["trials"]}
    choices = {c["family"]: c["lr"] for c in record["tuning"]["choices"]}
    assert choices["deit"] == choices["vit"]

    # the matched teacher: the ResNet configuration, stopped at the ViT teacher's best validation accuracy
    vit = json.loads((located(runs / "distill", teachers["vit"]) / "summary.json").read_text())
    matched_dir = located(runs / "distill", teachers["resnet-at-vit"])
    matched = json.loads((matched_dir / "summary.json").read_text())
    assert matched_dir.parent.name == "distill" and matched["family"] == "resnet"
    # each run records its own variant; a student's teacher takes it from the teacher's record
    assert matched["variant"] == "resnet-at-vit" and vit["variant"] == "default"
    assert matched["stopped"]["at_val_acc"] == vit["val_acc_best"] and matched["plateau"] is None
    ident = json.loads((matched_dir / "identity.json").read_text())["identity"]
    resnet_ident = json.loads((located(runs / "distill", teachers["resnet"]) / "identity.json").read_text())["identity"]
    assert ident.pop("stop_at_val_acc") == vit["val_acc_best"]
    # validated at every step (matched_val_interval: 1) instead of every second (val_checks: 2 of 4 steps)
    assert ident.pop("trainer.val_check_interval") == 1 and resnet_ident.pop("trainer.val_check_interval") == 2
    assert ident == resnet_ident  # else the same run
    accs, target = [a for _, a in matched["val_history"]], round(vit["val_acc_best"], 6)  # history: 6 decimals
    if matched["stopped"]["reached"]:  # stopped at the first validation at or above the target
        assert accs[-1] >= target and all(a < target for a in accs[:-1])
        assert matched["steps"] == matched["stopped"]["step"] == matched["val_history"][-1][0]
    students = {s["student"]: s for s in record["students"]}
    deit = next(d for d in datascale if d.startswith("deit-"))
    assert students["hard/resnet"]["run"] == f"datascale/{deit}" and not any("hard-resnet_" in f for f in launched)
    for s in students.values():
        student_cfg = yaml.safe_load((located(runs / "distill", s["run"]) / "config.yaml").read_text())
        assert student_cfg["model"]["lr"] == choices["vit"]
    cfg = yaml.safe_load((runs / "distill" / students["hard/resnet-at-vit"]["run"] / "config.yaml").read_text())
    assert cfg["model"]["teacher_checkpoint"] == str(matched_dir / "checkpoints" / "best.ckpt")
    student = json.loads((runs / "distill" / students["hard/resnet-at-vit"]["run"] / "summary.json").read_text())
    assert student["variant"] == "hard-resnet-at-vit" and student["teacher"]["run"] == matched_dir.name
    assert student["teacher"]["variant"] == "resnet-at-vit" and student["teacher"]["family"] == "resnet"
    cfg = yaml.safe_load((runs / "distill" / students["hard/vit"]["run"] / "config.yaml").read_text())
    assert cfg["model"]["teacher_checkpoint"] == str(runs / teachers["vit"] / "checkpoints" / "best.ckpt")

    # asking again trains nothing, in either experiment
    launched.clear()
    assert main(["distill", "--spec", str(distill_spec), "--runs_dir", str(runs)]) == 0
    assert main(["sweep", "--spec", str(ds_spec), "--runs_dir", str(runs)]) == 0
    assert launched == []

    # the tables read the shared runs where they live
    out = tmp_path / "results"
    assert main(["tables", "--experiment", "distill", "datascale", "--runs_dir", str(runs), "--out", str(out),
                 "--readme", ""]) == 0
    rows = list(csv.DictReader(open(out / "distill.csv")))
    assert {r["student"] for r in rows if r["role"] == "teacher"} == {"resnet", "vit", "resnet-at-vit"}
    md = (out / "distill.md").read_text()
    assert "resnet-at-vit: the resnet teacher run again and stopped" in md
    agreement = md.split("### Agreement with each teacher", 1)[1].split("###", 1)[0]
    assert "| hard/vit |" in agreement and "no run" not in agreement  # the shared teachers' probes are read

    # the reference of distill alone carries the datascale runs it reads, beside datascale's own
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "runs").parent.mkdir(exist_ok=True)
    copied = reference.refresh("distill", runs=runs, reference=tmp_path / "ref")
    assert copied and (tmp_path / "ref" / teachers["vit"] / "summary.json").is_file()
    assert not (tmp_path / "ref" / teachers["vit"] / "checkpoints").exists()


def test_a_fit_stopped_at_an_accuracy_keeps_the_validation_closest_to_it(tmp_path):
    """The first validation reaching the target may overshoot it by more than an earlier one fell
    short: the stop still comes there, but best.ckpt (the matched teacher's weights) and the record
    take the closest validation. A real Trainer with the fit's callbacks, on scripted accuracies."""
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import EarlyStopping

    from experiments.runs.run.checkpoint import RunCheckpoint
    from experiments.runs.run.checkpoint import TargetGap
    from experiments.runs.run.record_callback import RunRecord
    from modules.checkpoint_io import read_checkpoint

    target, accs = 0.64, [0.30, 0.55, 0.62, 0.71, 0.50, 0.64]  # reached at step 4 (+0.07); step 3 is 0.02 under

    class Scripted(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def training_step(self, batch, i):
            return (self.w - batch.float().mean()).pow(2).sum()

        def validation_step(self, batch, i):
            self.log("val/acc", accs[self.global_step - 1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.DataLoader(torch.arange(8), batch_size=1)
    record = RunRecord(tmp_path, "t", evaluation={}, stop_at_val_acc=target)
    record.on_fit_end = lambda *a: None  # the summary needs a DataModule; the history is what is read here
    trainer = L.Trainer(max_steps=len(accs), val_check_interval=1, limit_val_batches=1, num_sanity_val_steps=0,
                        logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[EarlyStopping(monitor="val/acc", mode="max", stopping_threshold=target - 1e-6,
                                                 patience=2**31, check_on_train_epoch_end=False),
                                   TargetGap(target), record,
                                   RunCheckpoint(dirpath=tmp_path, filename="best", monitor=TargetGap.KEY, mode="max")])
    record.identity = {}
    trainer.fit(Scripted(), data, data)
    assert trainer.global_step == 4                                     # stopped at the first reaching it
    assert read_checkpoint(tmp_path / "best.ckpt")["global_step"] == 3  # kept the closest: 0.62
    assert record._closest() == 0.62 and [s for s, _ in record.val_history] == [1, 2, 3, 4]


@pytest.mark.parametrize("name", ["../x", "a/../../b", "a/b/c", "/etc", "a/.."])
def test_a_record_cannot_lead_a_read_outside_the_runs(tmp_path, name):
    with pytest.raises(ValueError):
        located(tmp_path / "distill", name)


def test_a_fit_stopped_at_an_accuracy_is_its_own_run(cli):
    code, full = cli("fit", "--model.family", "resnet", "--trainer.val_check_interval", "2",
                     "--trainer.limit_val_batches", "1")
    code2, stopped = cli("fit", "--model.family", "resnet", "--trainer.val_check_interval", "2",
                         "--trainer.limit_val_batches", "1", "--stop_at_val_acc", "0.001")
    assert code == code2 == 0 and stopped != full
    s, f = (json.loads((d / "summary.json").read_text()) for d in (stopped, full))
    assert f["steps"] == 4 and s["steps"] == 2  # the first validation reaches any accuracy above 0
    assert s["stopped"] == {"at_val_acc": 0.001, "step": 2, "reached": True, "checkpoint_step": 2}
    assert s["plateau"] is None
    assert "stopped" not in f
    code, _ = cli("fit", "--model.family", "resnet", "--stop_at_val_acc", "1.5")
    assert code == 2


def test_the_same_configuration_under_a_variant_s_name_is_taken_only_when_it_is_that_finished_run(tmp_path):
    """A planned folder takes another experiment's folder of the same hash only when that folder's
    readable name is the planned one without its variant, its identity.json hashes to that hash and
    it finished: a copied or hand-made folder with a matching suffix, a tuning trial never tested, the
    reverse direction and a folder behind a link out of the runs are not the same run. The command
    then names the folder taken."""
    from experiments.runs.run.identity import config_hash
    from experiments.runs.sweep.shared import home, same_configuration, share
    from experiments.runs.sweep.spec import Run
    ident = {"model.family": "deit", "seed_everything": 0}
    digest = config_hash(ident)
    runs = tmp_path / "runs"

    def folder(experiment, name, identity=ident, status="done", root=runs):
        d = root / experiment / f"{name}_{digest}"
        d.mkdir(parents=True)
        (d / "identity.json").write_text(json.dumps({"hash": digest, "identity": identity}))
        (d / "summary.json").write_text(json.dumps({"status": status}))
        return d
    planned = runs / "distill" / f"deit-tiny_fmnist_f0.5_s0_lr0.003_hard-resnet_{digest}"
    assert home(planned) == planned and same_configuration(planned) == []
    folder("other", "vit-tiny_fmnist_f0.5_s0_lr0.003")                                         # another readable name
    folder("forged", "deit-tiny_fmnist_f0.5_s0_lr0.003", {**ident, "seed_everything": 1})      # hashes elsewhere
    folder("distill", "deit-tiny_fmnist_f0.5_s0_lr0.003")                                      # the planning experiment's own
    folder("trials", "deit-tiny_fmnist_f0.5_s0_lr0.003", status="fitted")                      # a trial, never tested
    outside = folder("elsewhere", "deit-tiny_fmnist_f0.5_s0_lr0.003", root=tmp_path / "outside")
    (runs / "linked").symlink_to(outside.parent)                                               # a link out of the runs
    loop = runs / "looped" / f"deit-tiny_fmnist_f0.5_s0_lr0.003_{digest}"
    loop.parent.mkdir()
    loop.symlink_to(loop)                                                                      # a link to itself
    assert same_configuration(planned) == [] and home(planned) == planned
    mine = folder("datascale", "deit-tiny_fmnist_f0.5_s0_lr0.003")
    assert same_configuration(planned) == [mine] and home(planned) == mine
    # one way only: a run named without a variant does not take a variant's finished folder
    variant_only = tmp_path / "reverse"
    folder("distill", "deit-tiny_fmnist_f0.5_s0_lr0.003_hard-resnet", root=variant_only)
    plain = variant_only / "datascale" / f"deit-tiny_fmnist_f0.5_s0_lr0.003_{digest}"
    assert same_configuration(plain) == [] and home(plain) == plain
    args = ("fit", "--experiment", "distill", "--runs_dir", str(runs), "--run_name", planned.name[:-9], "--seed_everything", "0")
    run = share(Run(index=0, name=planned.name[:-9], family="deit", fraction=0.5, seed=0, variant="hard-resnet",
                    args=args, run_dir=planned))
    assert run.run_dir == mine and run.args[run.args.index("--experiment") + 1] == "datascale"
    assert run.args[run.args.index("--run_name") + 1] == "deit-tiny_fmnist_f0.5_s0_lr0.003"   # a fit of it writes there
