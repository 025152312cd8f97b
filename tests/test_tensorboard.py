"""What TensorBoard shows of a run and of a sweep: readable hparams without placeholder metrics,
no `epoch` or one-off scalars, val/acc under the training-set size, the sweep's layout and
hparams experiment (experiments/runs/run/tensorboard.py)."""
from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.hparams import metadata

from experiments.runs.run.record import session_rows
from experiments.runs.run.tensorboard import write_sweep_view


def events(folder: Path) -> EventAccumulator:
    """The events of `folder` itself (its run folders are other runs)."""
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return acc


def session(run_dir: Path):
    content = events(run_dir).PluginTagToContent("hparams")
    return metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])


def run_hparams(run_dir: Path) -> dict:
    start = session(run_dir)
    return {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for k, v in start.hparams.items()}


def sweep_view(exp_dir: Path) -> tuple[layout_pb2.Layout, object]:
    """The custom-scalars layout and the hparams experiment a sweep wrote into its folder."""
    acc = events(exp_dir)
    layout = layout_pb2.Layout.FromString(acc.Tensors("custom_scalars__config__")[0].tensor_proto.string_val[0])
    experiment = metadata.parse_experiment_plugin_data(acc.PluginTagToContent("hparams")[metadata.EXPERIMENT_TAG])
    return layout, experiment


def test_a_fit_logs_its_identity_as_hparams_and_no_placeholders(cli):
    code, untested = cli("fit", "--model.family", "resnet", "--test_after_fit", "false")
    assert code == 0
    h = run_hparams(untested)
    assert (h["family"], h["budget"], h["fraction"], h["train_size"], h["seed"]) == ("resnet", "tiny", 1.0, 512, 0)
    assert h["lr"] > 0 and h["params"] > 400_000 and h["flops_per_image"] > 0 and "trainer.max_steps" in h
    assert not [k for k in h if "_instantiator" in k or k.endswith(("cache_dir", "data_dir")) or "/" in k]
    # no test ran: no test/acc at all (not a 0); no epoch counter and no one-value scalars
    scalars = events(untested).Tags()["scalars"]
    assert {"val/acc", "val/acc_best", "by_train_size/val_acc_n512"} <= set(scalars)
    assert not [t for t in scalars if t.startswith("test/") or t == "epoch" or t.startswith("model/")]
    acc = events(untested)
    assert [e.value for e in acc.Scalars("by_train_size/val_acc_n512")] == [e.value for e in acc.Scalars("val/acc")]
    # HPARAMS names the trial after the run's folder, not a hash of its values
    assert session(untested).group_name == untested.name
    assert h["Status"] == "fitted"  # trained, its test not run

    code, tested = cli("fit", "--model.family", "vit")
    assert code == 0 and run_hparams(tested)["family"] == "vit" and run_hparams(tested)["Status"] == "done"
    assert "test/acc" in events(tested).Tags()["scalars"] and "epoch" not in events(tested).Tags()["scalars"]
    # SCALARS and TIME SERIES order tag groups (a tag's part before its first "/") by name: the
    # per-size validation curves come first, before the test's single points
    groups = sorted({t.split("/")[0] for t in events(tested).Tags()["scalars"]})
    assert groups[0] == "by_train_size" and {"test", "train", "val"} <= set(groups)

    # a sweep's view over these runs, tuning only: its hparams experiment declares val/acc_best alone
    assert write_sweep_view(untested.parent, [512], session_rows([untested, tested]), tested=False)
    layout, experiment = sweep_view(untested.parent)
    assert [m.name.tag for m in experiment.metric_infos] == ["val/acc_best"]
    differs = {i.name: i.differs for i in experiment.hparam_infos}
    assert differs["family"] and not differs["budget"] and not differs["lr"] and differs["Status"]
    # TensorBoard 2.21 shows five hparams at first: those that differ, by name (backend_context); Status first
    shown = sorted(experiment.hparam_infos, key=lambda i: (not i.differs, i.name))[:5]
    assert shown[0].name == "Status"
    assert [[list(c.multiline.tag) for c in cat.chart] for cat in layout.category] == [[["^by_train_size/val_acc_n512$"]]]


def test_a_runs_status_in_hparams_follows_its_summary(tmp_path):
    """The session file holds the run's hparams with its status, rewritten whole at every summary
    (TensorBoard keeps the first session start it reads: an appended one would never show)."""
    from experiments.runs.run.run_folder import RunFolder
    from experiments.runs.run.summary import Summary
    from experiments.runs.run.tensorboard import SESSION_FILE, session_hparams, write_session
    run_dir = tmp_path / "resnet-x"
    run_dir.mkdir()
    RunFolder(run_dir).write_identity({"model.family": "resnet", "data.seed": 1}, "x")
    write_session(run_dir, session_hparams({"model.family": "resnet", "data.seed": 1}, "running"))
    assert run_hparams(run_dir) == {"family": "resnet", "seed": 1, "Status": "running"}
    for status in ("interrupted", "done"):
        RunFolder(run_dir).write_summary(Summary(status=status, params=7))
        assert run_hparams(run_dir) == {"family": "resnet", "seed": 1, "params": 7, "Status": status}
    assert [p.name for p in run_dir.glob("*tfevents*")] == [SESSION_FILE]  # one file, replaced
    # a summary without identity.json (a folder that is no run) writes no session
    (tmp_path / "other").mkdir()
    RunFolder(tmp_path / "other").write_summary(Summary(status="failed"))
    assert not list((tmp_path / "other").glob("*tfevents*"))


def test_an_epoch_that_ends_before_any_step_logs_no_train_metric():
    """A fit resumed from a checkpoint taken at an epoch's end ends that epoch first, with no step:
    its train metrics are empty, and logging them wrote train/acc = 0 at the resume step (a spike in
    every train chart, and torchmetrics' 'compute called before update')."""
    import torch

    from modules import ImageClassifier
    model = ImageClassifier("resnet", "tiny")
    logged = {}
    model.log = lambda name, value, **kw: logged.__setitem__(name, value)
    model.log_dict = lambda values, **kw: logged.update(values)
    model.on_train_epoch_end()
    assert logged == {}
    # an epoch with steps logs them
    model.train_metrics.update(torch.eye(10)[:2], torch.tensor([0, 5]))
    model._loss_sum, model._loss_n = torch.tensor(3.0), 2
    model.on_train_epoch_end()
    assert logged["train/loss_epoch"] == 1.5 and logged["train/acc"] == 0.5
