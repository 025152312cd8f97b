"""`fit_packed` and `sweep --pack`: K runs trained at once leave what K single `fit`s leave (same
folders and identities, same subsets, same validation curves and tests, weights and losses equal
up to fp32 rounding), an interrupted group resumes, and bad groups are one line."""
from __future__ import annotations

import json
import warnings
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from experiments.__main__ import main
from experiments.runs.packed.fit import fit_packed
from experiments.runs.sweep.execute import pack_groups
from experiments.runs.run.record import read_progress
from modules import ImageClassifier

from .conftest import SMOKE
from .test_tensorboard import run_hparams

SEEDS = (0, 1)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*(does not have many workers|log_every_n_steps|LeafSpec|weights_only).*")
        yield


def _args(fmnist_dir, runs: Path, seed: int, *extra: str) -> list[str]:
    return ["--config", SMOKE, "--data.data_dir", str(fmnist_dir), "--runs_dir", str(runs), "--experiment", "p",
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
            "--trainer.precision", "32-true", "--trainer.max_steps", "6", "--trainer.max_epochs", "-1",
            "--trainer.limit_train_batches", "null", "--trainer.val_check_interval", "3",
            "--trainer.check_val_every_n_epoch", "null", "--model.warmup_fraction", "0.3",
            "--seed_everything", str(seed), "--data.seed", str(seed), "--data.train_size", "96", *extra]


def _scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def _folders(runs: Path) -> dict[str, Path]:
    return {d.name: d for d in (runs / "p").iterdir() if d.is_dir() and d.name != "packed"}


@pytest.mark.parametrize("family", ["vit", "resnet"])
def test_packed_fit_leaves_what_single_fits_leave(family, fmnist_dir, tmp_path):
    single_runs, packed_runs = tmp_path / "single", tmp_path / "packed"
    for s in SEEDS:
        assert main(["fit", *_args(fmnist_dir, single_runs, s, "--model.family", family)]) == 0
    members = [_args(fmnist_dir, packed_runs, s, "--model.family", family) for s in SEEDS]
    status = fit_packed(members)
    assert set(status.values()) == {"done"}
    single, packed = _folders(single_runs), _folders(packed_runs)
    assert sorted(single) == sorted(packed) and len(single) == 2  # the same folder names: the same identities
    for name in single:
        a, b = single[name], packed[name]
        assert json.loads((a / "identity.json").read_text()) == json.loads((b / "identity.json").read_text())
        assert json.loads((a / "train_indices.json").read_text()) == json.loads((b / "train_indices.json").read_text())
        sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
        assert set(sa) - {"reused_from"} <= set(sb) and sb["engine"]["packed"] == 2
        for key in ("status", "steps", "train_size", "val_size", "seed", "max_steps", "params", "config_hash"):
            assert sa[key] == sb[key], key
        assert [s for s, _ in sa["val_history"]] == [s for s, _ in sb["val_history"]] == [3, 6]
        for (_, x), (_, y) in zip(sa["val_history"], sb["val_history"]):
            assert abs(x - y) <= 0.011  # accuracy on 100 images: at most one prediction flips by rounding
        assert abs(sa["test_acc"] - sb["test_acc"]) <= 0.011 and sa["plateau"] == sb["plateau"] is None  # 2 validations
        # where each run got to, for a sweep's display: its last step of all and its last validation
        pa, pb = read_progress(a), read_progress(b)
        assert pa["step"] == pb["step"] == pa["steps"] == pb["steps"] == sa["steps"] == 6
        assert (pa["val_acc"], pb["val_acc"]) == (sa["val_history"][-1][1], sb["val_history"][-1][1])
        # every member tested in one vmapped pass: the metrics of its own Lightning test, on the same images
        assert sa["test"].keys() == sb["test"].keys() and {"acc", "acc_top5", "ece", "loss"} <= set(sb["test"])
        for key in sa["test"]:
            assert abs(sa["test"][key] - sb["test"][key]) <= 0.011, key
        la, lb = _scalars(a, "train/loss_step"), _scalars(b, "train/loss_step")
        assert [s for s, _ in la] == [s for s, _ in lb] and len(la) >= 5
        torch.testing.assert_close(torch.tensor([v for _, v in lb]), torch.tensor([v for _, v in la]),
                                   rtol=1e-4, atol=1e-5)
        assert len(_scalars(b, "val/acc")) == 2
        # TensorBoard as a single fit's logger: the same readable hparams, val/acc also under the size
        assert run_hparams(b) == run_hparams(a) and run_hparams(b)["family"] == family
        assert _scalars(b, "by_train_size/val_acc_n96") == _scalars(b, "val/acc")
        x = torch.randn(64, 1, 28, 28, generator=torch.Generator().manual_seed(0))
        for ckpt in ("best.ckpt", "last.ckpt"):  # ordinary checkpoints of the same model
            ma, mb = (ImageClassifier.load_from_checkpoint(d / "checkpoints" / ckpt, map_location="cpu").eval()
                      for d in (a, b))
            # Adam divides by sqrt(v): where a gradient is near 0 (BatchNorm shifts, dead units) it turns
            # the rounding of batched vs single convolutions into up to ~2 lr steps on single elements;
            # the network as a whole and its outputs stay equal to ~1e-3 and ~1e-4
            va, vb = (torch.cat([t.flatten().float() for t in m.model.state_dict().values()]) for m in (ma, mb))
            assert (va - vb).norm() / va.norm() < 5e-3, ckpt
            with torch.no_grad():
                torch.testing.assert_close(mb(x), ma(x), rtol=1e-3, atol=1e-4, msg=ckpt)
    # run again: nothing to train or test
    before = {n: (d / "summary.json").read_text() for n, d in packed.items()}
    assert set(fit_packed(members).values()) == {"done"}
    assert before == {n: (d / "summary.json").read_text() for n, d in packed.items()}


STRONG = ("--data.randaugment", "true", "--data.mixup_alpha", "0.8", "--data.cutmix_alpha", "1.0",
          "--data.random_erasing", "0.25")   # experiments/datascale/spec.yaml's strong variant


def test_variants_pack_together(fmnist_dir, tmp_path):
    """A default and a strong-augmentation member (RandAugment, Random Erasing, MixUp/CutMix: soft
    targets) packed train as their own fits do: the strong member's numbers, drawn inside the group's
    step, are its single fit's; the default member's labels become one-hot targets, the same loss."""
    variants = [("--test_after_fit", "false"), (*STRONG, "--test_after_fit", "false")]
    for extra in variants:
        assert main(["fit", *_args(fmnist_dir, tmp_path / "single", 0, *extra)]) == 0
    assert set(fit_packed([_args(fmnist_dir, tmp_path / "packed", 0, *e) for e in variants]).values()) == {"fitted"}
    single, packed = _folders(tmp_path / "single"), _folders(tmp_path / "packed")
    assert sorted(single) == sorted(packed) and len(single) == 2
    for name in single:
        la, lb = _scalars(single[name], "train/loss_step"), _scalars(packed[name], "train/loss_step")
        torch.testing.assert_close(torch.tensor([v for _, v in lb]), torch.tensor([v for _, v in la]),
                                   rtol=1e-4, atol=1e-5)
    losses = [[v for _, v in _scalars(d, "train/loss_step")] for d in packed.values()]
    assert losses[0] != losses[1]  # the variants did differ


class _CrashAt:
    """A hook of the group's loop (packed_loop.GroupLoop) that fails before step `step`."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, loop, step: int) -> None:
        if step == self.step:
            raise RuntimeError("crash")


# 0.5: each member's stochastic-depth stream resumes; strong: the strong variant's draws (the batch's place)
@pytest.mark.parametrize("drop_path, variant", [("0.0", ()), ("0.5", ()), ("0.0", STRONG)],
                         ids=["default", "drop_path", "strong"])
def test_interrupted_group_resumes_to_the_same_end(drop_path, variant, fmnist_dir, tmp_path):
    """A group that crashed after its first validation resumes from its group checkpoint and ends
    where an uninterrupted group ends, bit for bit."""
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    extra = ("--test_after_fit", "false", "--trainer.max_steps", "8", "--trainer.val_check_interval", "4",
             "--model.drop_path_rate", drop_path, *variant)
    fit_packed([_args(fmnist_dir, whole, s, *extra) for s in SEEDS])
    members = [_args(fmnist_dir, cut, s, *extra) for s in SEEDS]
    with pytest.raises(RuntimeError, match="crash"):
        # a group checkpoint after every batch (a zero timer), then a crash mid-epoch (3 batches per epoch)
        fit_packed(members, callbacks=(_CrashAt(5),), checkpoint_every=timedelta(0))
    (gdir,) = (cut / "p" / "packed").iterdir()
    assert (gdir / "checkpoints" / "last.ckpt").exists()
    assert not any((d / "summary.json").exists() for d in _folders(cut).values())
    saves = _CountSaves()
    assert set(fit_packed(members, callbacks=(saves,)).values()) == {"fitted"}
    assert saves.count == 1   # the default timer (10 min) never fired in this short group: its end only
    for name, d in _folders(whole).items():
        a, b = (json.loads((x / "summary.json").read_text()) for x in (d, _folders(cut)[name]))
        assert a["val_history"] == b["val_history"] and b["steps"] == 8
        wa = ImageClassifier.load_from_checkpoint(d / "checkpoints" / "last.ckpt").model.state_dict()
        wb = ImageClassifier.load_from_checkpoint(_folders(cut)[name] / "checkpoints" / "last.ckpt").model.state_dict()
        for n in wa:
            assert torch.equal(wb[n], wa[n]), n


class _CountSaves:
    """How many group checkpoints the loop wrote."""
    count = 0

    def on_save_checkpoint(self, loop, checkpoint) -> None:
        self.count += 1


class _Poison:
    """Member `k`'s weights (all members' when k is None) become NaN before step 2."""

    def __init__(self, k: int | None):
        self.k = k

    def on_train_batch_start(self, loop, step: int) -> None:
        if step == 2:
            for p in loop.state["params"].values():
                p[slice(None) if self.k is None else self.k].fill_(float("nan"))


def test_diverged_members_are_recorded_and_the_others_go_on(fmnist_dir, tmp_path):
    members = [_args(fmnist_dir, tmp_path / "one", s, "--test_after_fit", "false") for s in SEEDS]
    status = fit_packed(members, callbacks=(_Poison(1),))
    assert list(status.values()) == ["fitted", "diverged"]
    bad = json.loads((_folders(tmp_path / "one")[list(status)[1]] / "summary.json").read_text())
    assert "diverged: loss is nan at step 2" in bad["error"] and bad["engine"]["packed"] == 2
    assert not (_folders(tmp_path / "one")[list(status)[1]] / "checkpoints" / "last.ckpt").exists()
    members = [_args(fmnist_dir, tmp_path / "all", s) for s in SEEDS]
    with pytest.raises(FloatingPointError):
        fit_packed(members, callbacks=(_Poison(None),))
    assert all(json.loads((d / "summary.json").read_text())["status"] == "diverged"
               for d in _folders(tmp_path / "all").values())
    assert set(fit_packed(members).values()) == {"diverged"}  # final: not run again


def test_members_that_differ_in_more_than_their_seed_are_refused(fmnist_dir, tmp_path, capsys):
    runs = tmp_path / "runs"
    members = [_args(fmnist_dir, runs, 0), _args(fmnist_dir, runs, 1, "--model.weight_decay", "0.1")]
    path = tmp_path / "members.json"
    path.write_text(json.dumps({"members": members}))
    assert main(["fit_packed", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.weight_decay" in err[0] and "seed_everything" in err[0]
    assert not (runs / "p").exists()  # nothing written
    path.write_text("{not json")
    assert main(["fit_packed", str(path)]) == 2
    assert "is not a members file" in capsys.readouterr().err


def _packed_spec(fmnist_dir, tmp_path, monkeypatch, name: str, families: list[str], **profile) -> Path:
    """A tiny spec packing 2 runs to a group: 3 seeds, 2 lrs, a few steps on the test data."""
    from .test_sweep import ROOT
    monkeypatch.setenv("FASHION_MNIST_DIR", str(fmnist_dir))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    spec = {"name": name, "dataset": "fashion_mnist", "families": families, "variants": ["default"],
            "variant_args": {"default": {}},
            "profiles": {"cpu": {"budget": "tiny", "fractions": [1.0], "seeds": [0, 1, 2], "epochs": 0.25,
                                 "min_steps": 4, "val_checks": 2, "batch_size": 32, "lrs": [0.003, 0.01],
                                 "pack": 2, **profile}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_sweep_packs_seeds_and_learning_rates(fmnist_dir, tmp_path, monkeypatch, in_process_launches):
    """pack 2: the tuning grid's two lrs of each family train as one group, then the main stage's
    two seeds; the records are those of single runs."""
    path = _packed_spec(fmnist_dir, tmp_path, monkeypatch, "tiny", ["resnet", "deit"])
    runs = tmp_path / "runs"
    assert main(["sweep", "--spec", str(path), "--runs_dir", str(runs), "--stage", "tune"]) == 0
    assert main(["sweep", "--spec", str(path), "--runs_dir", str(runs)]) == 0
    summaries = {p.parent.name: json.loads(p.read_text()) for p in (runs / "tiny").glob("*/summary.json")}
    assert len(summaries) == 8 and all(s["engine"]["packed"] == 2 for s in summaries.values())
    trials = {n: s for n, s in summaries.items() if "_s0_" in n}
    assert len(trials) == 4 and {s["engine"]["group"] for s in trials.values()} == {  # lrs packed per family
        s["engine"]["group"] for n, s in trials.items() if "lr0.003" in n}
    seeds = {n: s for n, s in summaries.items() if "_s0_" not in n}  # seeds 1 and 2 packed per family
    assert len({s["engine"]["group"] for s in seeds.values()}) == 2
    tuning = json.loads((runs / "tiny" / "tuning.json").read_text())["profiles"]["cpu"]["trials"]
    assert {t["lr"] for t in tuning} == {0.003, 0.01} and all(t["val_acc_best"] is not None for t in tuning)
    for n, s in summaries.items():  # each member's checkpoint records its own lr
        lr = float(n.split("_lr")[1].split("_")[0])
        ckpt = torch.load(runs / "tiny" / n / "checkpoints" / "best.ckpt", weights_only=True)
        assert ckpt["hyper_parameters"]["lr"] == lr
    assert sum(s["status"] == "done" for s in summaries.values()) == 6  # 2 trials chosen (then tested), 4 main runs
    deit = next(s for n, s in summaries.items() if n.startswith("deit") and "_s1_" in n)
    teacher = next(n for n in summaries if n.startswith("resnet") and "_s1_" in n)
    cfg = yaml.safe_load((runs / "tiny" / deit["run"] / "config.yaml").read_text())  # as `fit` writes it
    assert cfg["model"]["teacher_checkpoint"] == str(runs / "tiny" / teacher / "checkpoints" / "best.ckpt")
    assert cfg["seed_everything"] == 1 and cfg["data"]["seed"] == 1
    (group,) = [g for g in (runs / "tiny" / "packed").iterdir() if g.name.startswith("deit") and "_s1_" in g.name]
    members = json.loads((group / "members.json").read_text())["members"]
    teachers = {a[a.index("--model.teacher_checkpoint") + 1] for a in members}
    assert len(members) == 2 and len(teachers) == 2  # seeds 1 and 2, each with the ResNet of its own seed
    out = tmp_path / "results"
    assert main(["tables", "--runs_dir", str(runs), "--out", str(out), "--readme", ""]) == 0
    md = (out / "tiny.md").read_text()
    assert "- engine: 8 of the runs trained packed, in 4 groups" in md and ", up to 2 packed per process" in md
    assert "| resnet | 1 | 540 |" in md and "| deit | 1 | 540 |" in md  # 3 seeds each


def test_pack_groups_by_everything_but_the_seed_and_lr():
    from experiments.runs.sweep.spec import Run
    def run(seed, lr="0.003", fraction="1"):
        args = ("--run_name", f"x_s{seed}", "--seed_everything", str(seed), "--data.seed", str(seed),
                "--model.lr", lr, "--data.fraction", fraction)
        return Run(0, f"x_s{seed}_{lr}_{fraction}", "vit", float(fraction), seed, "default", args)
    runs = [run(0), run(1), run(2), run(0, lr="0.01"), run(1, fraction="0.5"), run(2, fraction="0.5")]
    groups = pack_groups(runs, 3)
    assert [[r.name for r in g] for g in groups] == [
        ["x_s0_0.003_1", "x_s1_0.003_1", "x_s2_0.003_1"], ["x_s0_0.01_1"], ["x_s1_0.003_0.5", "x_s2_0.003_0.5"]]
    assert [len(g) for g in pack_groups(runs, 1)] == [1] * 6


def test_a_run_only_tested_joins_the_packed_group_of_its_configuration(monkeypatch):
    """Packing, a tuning winner (fitted: only its test left) goes into the group of its configuration
    without taking a trained member's place, or into a group of its own, never a `fit` process of
    its own; without packing it stays a run alone, first, as before."""
    import experiments.runs.sweep.execute as execute
    from experiments.runs.sweep.execute import packed_process, phase_units
    from experiments.runs.sweep.spec import Run

    def run(seed, fraction="1"):
        args = ("--run_name", f"x_s{seed}_{fraction}", "--seed_everything", str(seed), "--data.fraction", fraction)
        return Run(0, f"x_s{seed}_{fraction}", "vit", float(fraction), seed, "default", args)
    runs = [run(1), run(2), run(0), run(1, "0.5"), run(0, "0.5"), run(0, "0.2")]
    fitted = {"x_s0_1", "x_s0_0.5", "x_s0_0.2"}
    monkeypatch.setattr(execute, "run_status", lambda r: "fitted" if r.name in fitted else None)
    units = phase_units(runs, 2)
    assert [[r.name for r in u] for u in units] == [
        ["x_s0_1", "x_s1_1", "x_s2_1"], ["x_s0_0.5", "x_s1_0.5"], ["x_s0_0.2"]]
    assert all(packed_process(u, 2) for u in units)
    alone = phase_units(runs, 1)
    assert [u[0].name for u in alone] == ["x_s0_1", "x_s0_0.5", "x_s0_0.2", "x_s1_1", "x_s2_1", "x_s1_0.5"]
    assert not any(packed_process(u, 1) for u in alone)


def test_compiled_group_trains_as_the_eager_group(fmnist_dir, tmp_path, monkeypatch):
    """The group's loop with its step compiled whole (torch.compile(fullgraph=True): a graph break,
    such as a host sync inside the step, fails) leaves the members the eager loop leaves. A ResNet
    of one block per stage keeps inductor's compilation short."""
    import modules.budgets as budgets
    monkeypatch.setitem(budgets.ARCHS, ("resnet", "tiny"), {**budgets.ARCHS["resnet", "tiny"], "depths": (1, 1, 1)})
    extra = ("--model.family", "resnet", "--test_after_fit", "false")
    for compiled in (False, True):
        status = fit_packed([_args(fmnist_dir, tmp_path / str(compiled), s, *extra) for s in SEEDS], compile=compiled)
        assert set(status.values()) == {"fitted"}
    eager, compiled = _folders(tmp_path / "False"), _folders(tmp_path / "True")
    assert sorted(eager) == sorted(compiled)
    for name in eager:
        a, b = (json.loads((d / "summary.json").read_text()) for d in (eager[name], compiled[name]))
        assert a["engine"]["compiled"] is None and b["engine"]["compiled"] == "default"
        one = 1 / a["val_size"] + 1e-6   # at most one of the validation images flips by rounding
        assert all(abs(x - y) <= one for (_, x), (_, y) in zip(a["val_history"], b["val_history"]))
        la, lb = _scalars(eager[name], "train/loss_step"), _scalars(compiled[name], "train/loss_step")
        assert [s for s, _ in la] == [s for s, _ in lb] and len(la) == 6
        torch.testing.assert_close(torch.tensor([v for _, v in lb]), torch.tensor([v for _, v in la]),
                                   rtol=1e-4, atol=1e-5)


def test_a_trainer_setting_the_loop_cannot_honour_is_one_line(fmnist_dir, tmp_path, capsys):
    runs = tmp_path / "runs"
    path = tmp_path / "members.json"
    for option, value in (("accumulate_grad_batches", "2"), ("gradient_clip_algorithm", "value"),
                          ("precision", "16-mixed")):
        path.write_text(json.dumps({"members": [_args(fmnist_dir, runs, s, f"--trainer.{option}", value)
                                                for s in SEEDS]}))
        assert main(["fit_packed", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"trainer.{option}=" in err[0] and "allowed" in err[0], err
        assert not (runs / "p").exists()  # nothing written


def test_a_stage_trains_its_packed_groups_in_one_process(fmnist_dir, tmp_path, monkeypatch, in_process_launches):
    """One run at a time and several packed groups in a phase: one `fit_packed` process (one log
    line) trains them all, one after another, each member recorded as its own fit."""
    path = _packed_spec(fmnist_dir, tmp_path, monkeypatch, "stage", ["resnet", "vit"], jobs=1)  # a GPU's default
    runs = tmp_path / "runs"
    assert main(["sweep", "--spec", str(path), "--runs_dir", str(runs)]) == 0
    log = (runs / "stage" / "packed" / "log.txt").read_text()
    launched = [line for line in log.splitlines() if line.startswith("$ python -m experiments fit_packed")]
    assert len(launched) == 2 and all(len(line.split()[5:]) == 2 for line in launched)  # tune, then main: 2 groups each
    summaries = [json.loads(p.read_text()) for p in (runs / "stage").glob("*/summary.json")]
    assert len(summaries) == 8 and all(s["engine"]["packed"] == 2 and s["engine"]["loop"] == "fabric" for s in summaries)
    assert len({s["engine"]["group"] for s in summaries}) == 4
    assert sum(s["status"] == "done" for s in summaries) == 6  # 2 chosen trials (then tested), 4 main runs
    assert not any((g / "log.txt").exists() for g in (runs / "stage" / "packed").iterdir() if g.is_dir())


def test_a_failing_group_of_a_stage_does_not_stop_the_next(fmnist_dir, tmp_path, capsys):
    runs = tmp_path / "runs"
    bad, good = tmp_path / "bad.json", tmp_path / "good.json"
    bad.write_text(json.dumps({"members": [_args(fmnist_dir, runs, s, "--trainer.accumulate_grad_batches", "2")
                                           for s in SEEDS]}))
    good.write_text(json.dumps({"members": [_args(fmnist_dir, runs, s, "--test_after_fit", "false") for s in SEEDS]}))
    assert main(["fit_packed", str(bad), str(good), "--compile", "false"]) == 1
    err = capsys.readouterr().err
    assert f"fit_packed: group {bad} failed: ValueError: fit_packed: trainer.accumulate_grad_batches=2" in err
    assert sorted(json.loads((d / "summary.json").read_text())["status"] for d in _folders(runs).values()) == [
        "fitted", "fitted"]
    assert main(["fit_packed", str(good), str(tmp_path / "missing.json")]) == 2  # every file read before any trains
    assert "missing.json' does not exist" in capsys.readouterr().err


def test_distilled_deit_members_equal_their_single_fits(fmnist_dir, tmp_path):
    """DeiT members, each distilled from the ResNet of its own seed (the teachers' forward inside the
    group's step, on each member's augmented images), train as their single fits do."""
    teachers = tmp_path / "teachers"
    for s in SEEDS:
        assert main(["fit", *_args(fmnist_dir, teachers, s, "--model.family", "resnet", "--test_after_fit", "false")]) == 0
    ckpt = {json.loads((d / "summary.json").read_text())["seed"]: d / "checkpoints" / "best.ckpt"
            for d in _folders(teachers).values()}

    def args(runs: Path, s: int) -> list[str]:
        return _args(fmnist_dir, runs, s, "--model.family", "deit", "--model.distillation", "hard",
                     "--model.teacher_checkpoint", str(ckpt[s]), "--test_after_fit", "false")
    for s in SEEDS:
        assert main(["fit", *args(tmp_path / "single", s)]) == 0
    assert set(fit_packed([args(tmp_path / "packed", s) for s in SEEDS]).values()) == {"fitted"}
    single, packed = _folders(tmp_path / "single"), _folders(tmp_path / "packed")
    assert sorted(single) == sorted(packed) and len(single) == 2
    for name in single:
        la, lb = _scalars(single[name], "train/loss_step"), _scalars(packed[name], "train/loss_step")
        assert [s for s, _ in la] == [s for s, _ in lb] and len(la) == 6
        torch.testing.assert_close(torch.tensor([v for _, v in lb]), torch.tensor([v for _, v in la]),
                                   rtol=1e-4, atol=1e-5)


def test_a_stage_compiles_once_per_family_and_member_count(fmnist_dir, tmp_path, monkeypatch):
    """The groups of one stage process share a compiled step where they compute the same function:
    seeds, learning rates and lengths are inputs, not constants of the graph. Four groups, ResNet of
    2 members for 6 steps, 2 other members for 9 steps at another lr, 3 members, then ViT of 2:
    three compilations (dynamo's frames, counted by an eager backend so the test stays fast). The
    second group, on the first one's step, trains as it does alone and eager: its own schedule."""
    import modules.budgets as budgets
    from torch._dynamo.testing import CompileCounter

    import experiments.runs.packed.loop as packed_loop
    for family in ("resnet", "vit"):
        row = {"depths": (1, 1, 1)} if family == "resnet" else {"depth": 1}
        monkeypatch.setitem(budgets.ARCHS, (family, "tiny"), {**budgets.ARCHS[family, "tiny"], **row})
    counter, compile_ = CompileCounter(), torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, fullgraph, mode: compile_(fn, fullgraph=fullgraph, backend=counter))
    monkeypatch.setattr(packed_loop, "_COMPILED", {})
    torch._dynamo.reset()
    quick = ("--test_after_fit", "false")
    groups = [("resnet", (0, 1), ()), ("resnet", (2, 3), ("--trainer.max_steps", "9", "--model.lr", "0.01")),
              ("resnet", (0, 1, 2), ()), ("vit", (0, 1), ())]
    frames = []
    for family, seeds, extra in groups:
        args = [_args(fmnist_dir, tmp_path / "stage", s, "--model.family", family, *quick, *extra) for s in seeds]
        assert set(fit_packed(args, compile=True).values()) == {"fitted"}
        frames.append(counter.frame_count)
    assert frames == [1, 1, 2, 3]
    # the dry run counts the compilations of such a stage as the engine made them (estimate.compilations)
    from experiments.runs.sweep.estimate import compilations
    from experiments.runs.sweep.spec import Run
    units = [[Run(0, f"{family}_s{s}", family, 1.0, s, "default", (), batch_size=32) for s in seeds]
             for family, seeds, _ in groups]
    assert len(compilations(units, 1)) == frames[-1]
    alone = [_args(fmnist_dir, tmp_path / "alone", s, "--model.family", "resnet", *quick, *groups[1][2]) for s in (2, 3)]
    assert set(fit_packed(alone, compile=False).values()) == {"fitted"}
    shared, eager = _folders(tmp_path / "stage"), _folders(tmp_path / "alone")
    for name in eager:
        la, lb = _scalars(eager[name], "train/loss_step"), _scalars(shared[name], "train/loss_step")
        assert len(la) == 9
        torch.testing.assert_close(torch.tensor([v for _, v in lb]), torch.tensor([v for _, v in la]),
                                   rtol=1e-5, atol=1e-6)
    torch._dynamo.reset()


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_a_packed_sweep_tests_its_tuning_winners_in_its_packed_groups(fmnist_dir, tmp_path, monkeypatch,
                                                                      in_process_launches):
    """pack 2, both stages, one run at a time (a GPU's default): every process is a `fit_packed`.
    Each tuning winner, a main run trained in the tune stage, is tested in the main stage's group
    of its configuration beside the seeds it trains (no process only tests), and records what its
    single test process (`fit` of the trained folder) records; every main run ends done with the
    test of a single `test` of its best checkpoint."""
    import shutil

    import experiments.runs.sweep.execute as execute
    path = _packed_spec(fmnist_dir, tmp_path, monkeypatch, "tested", ["resnet", "vit"], jobs=1)
    launched, logged = [], execute._run_logged
    monkeypatch.setattr(execute, "_run_logged", lambda command, *a: launched.append(command[3]) or logged(command, *a))
    runs, single = tmp_path / "runs", tmp_path / "single"
    assert main(["sweep", "--spec", str(path), "--runs_dir", str(runs), "--stage", "tune"]) == 0
    shutil.copytree(runs, single)   # the winners trained, only their tests left: as the main stage finds them
    assert main(["sweep", "--spec", str(path), "--runs_dir", str(runs)]) == 0
    assert launched == ["fit_packed", "fit_packed"]   # the tune stage's process, then the main stage's
    mains = sorted(json.loads((runs / "tested" / "sweep.json").read_text())["profiles"]["cpu"]["main_runs"].values())
    winners = [n for n in mains if (single / "tested" / n).exists() and _summary(single / "tested" / n)["status"] == "fitted"]
    assert len(mains) == 6 and len(winners) == 2   # one winner per family, tested in its family's main group
    main_args = {a[a.index("--run_name") + 1]: a for f in (runs / "tested" / "packed").glob("*/members.json")
                 for a in json.loads(f.read_text())["members"] if "--test_after_fit" not in a}
    for name in winners:   # the single test process each winner had: its `fit`, which finds it trained
        args = main_args[name.rsplit("_", 1)[0]]
        args[args.index("--runs_dir") + 1] = str(single)
        assert main(["fit", *args]) == 0
        packed, alone = _summary(runs / "tested" / name), _summary(single / "tested" / name)
        assert {k: v for k, v in packed.items() if k not in ("test", "test_acc")} == \
            {k: v for k, v in alone.items() if k not in ("test", "test_acc")}
    checked = tmp_path / "checked"
    shutil.copytree(runs, checked)
    for name in mains:   # every main run: its packed test against a single test of its best checkpoint
        packed = _summary(runs / "tested" / name)
        assert packed["status"] == "done" and packed["engine"]["packed"] == 2, name
        assert main(["test", "--ckpt_path", str(checked / "tested" / name / "checkpoints" / "best.ckpt"),
                     "--trainer.enable_progress_bar", "false"]) == 0
        alone = _summary(checked / "tested" / name)
        assert not (checked / "tested" / name / "evaluations").exists()   # the test is the run's own: in its summary
        assert alone["test"].keys() == packed["test"].keys() and {"acc", "acc_top5", "ece", "loss"} <= set(packed["test"])
        for key in packed["test"]:
            assert abs(alone["test"][key] - packed["test"][key]) <= 0.011, (name, key)


class _CountHostOps:
    """Counts the aten ops the group's loop runs outside its step's call (loop.run: the function that
    compiles into one graph) from the start of step `step` to the start of the next: one step's host
    part (its batches, their draws, the losses' watch)."""

    def __init__(self, step: int):
        from torch.utils._python_dispatch import TorchDispatchMode

        class Count(TorchDispatchMode):
            def __torch_dispatch__(mode, func, types, args=(), kwargs=None):
                self.ops.append(str(func))
                return func(*args, **(kwargs or {}))
        self.step, self.ops, self.mode = step, [], Count()

    def on_train_batch_start(self, loop, step: int) -> None:
        if step == self.step:
            self.run = run = loop.run
            mode = self.mode

            def uncounted(*args, **kwargs):
                mode.__exit__(None, None, None)
                try:
                    return run(*args, **kwargs)
                finally:
                    mode.__enter__()
            loop.run = uncounted
            mode.__enter__()
        elif step == self.step + 1:
            self.mode.__exit__(None, None, None)
            loop.run = self.run


def test_the_strong_variants_draws_take_a_fixed_number_of_host_ops_per_step(fmnist_dir, tmp_path, monkeypatch):
    """The strong variant's random numbers (RandAugment, Random Erasing, MixUp/CutMix) add the same
    few ops per step to the host part of a group's step at 2 and at 8 members: they are drawn for all
    members at once, inside the step. (The crop and flip draws stay each member's own, from its loader
    generator, as in the default variant: the count is the strong variant's over the default's.)
    Before the counter-based draws, each member drew its own: 324 ops more at 2 members, 1,266 at 8."""
    import modules.budgets as budgets
    monkeypatch.setitem(budgets.ARCHS, ("resnet", "tiny"), {**budgets.ARCHS["resnet", "tiny"], "depths": (1, 1, 1)})
    counts = {}
    for k in (2, 8):
        for name, variant in (("default", ()), ("strong", STRONG)):
            counter = _CountHostOps(1)
            args = [_args(fmnist_dir, tmp_path / f"{name}{k}", s, "--model.family", "resnet", "--test_after_fit",
                          "false", "--data.batch_size", "8", "--trainer.max_steps", "3",
                          "--trainer.val_check_interval", "3", *variant) for s in range(k)]
            assert set(fit_packed(args, callbacks=(counter,), compile=False).values()) == {"fitted"}
            counts[name, k] = len(counter.ops)
    extra = {k: counts["strong", k] - counts["default", k] for k in (2, 8)}
    print(f"host ops per step: {counts}; the strong variant's over the default's: {extra}")
    assert counts["default", 8] > counts["default", 2] > 0   # the count sees each member's own host work
    assert extra[2] == extra[8] <= 4, (counts, extra)
