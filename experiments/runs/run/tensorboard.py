"""What TensorBoard shows of the runs: hparams, curves by training-set size, the sweep's layout.

- Each run's hparams are its identity (identity.json) under readable names ("family", "fraction",
  "lr", ...; a trainer setting keeps its "trainer." prefix) plus its parameter count, FLOPs and
  Status (running, fitted, done, interrupted, failed, diverged), as one hparams session start named
  after the run's folder (the HPARAMS table's "Trial ID", instead of a hash of the values); no
  metric values are written with them (no placeholder 0s). It lives alone in SESSION_FILE, rewritten
  whenever the run's status changes (write_session).
- Every run also logs its val/acc under a tag naming its training-set size (SIZE_TAG,
  "by_train_size/val_acc_n590"): custom scalars select series by tag, never by run, so this is the
  only way to one chart per size. Its group, "by_train_size", sorts before "test", "train" and
  "val" (TensorBoard orders tag groups by name), so SCALARS and TIME SERIES open on every family's
  validation curve, one chart per size, rather than on the test's single points.
- A sweep writes, into an events file of <runs_dir>/<experiment>/ itself, the custom-scalars
  layout (every family's val/acc, one chart per size) and the hparams experiment: which hparams
  (marked `differs` where the sweep's runs differ: TensorBoard 2.21 puts those first, then sorts
  by name) and which metrics (val/acc_best, and test/acc when the sweep tests).
- The tables' figures are images in TensorBoard too: experiments/figures.py.
"""
from __future__ import annotations

import io
import time
from pathlib import Path

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

from experiments.runs.run.summary import Summary

SIZE_TAG = "by_train_size/val_acc_n{}"  # val/acc again, under the run's training-set size; sorts first
SESSION_FILE = "events.out.tfevents.0.session"  # a run's hparams session; sorts before its curves' files


def readable_hparams(identity: dict, complexity: dict | None = None) -> dict:
    """identity.json's settings as TensorBoard hparams: "model.lr" -> "lr", "data.seed" -> "seed"
    (both names kept in full where model and data share one); values TensorBoard can hold. The
    session start holds them as a map: only the sweep's experiment (hparams_experiment) orders them."""
    short = {k: k.split(".", 1)[1] if k.startswith(("model.", "data.")) else k for k in identity}
    taken = list(short.values())
    out = {(s if taken.count(s) == 1 else k): _value(identity[k]) for k, s in short.items()}
    if complexity:
        out["params"] = int(complexity["params"])
        if complexity["flops"] is not None:  # None: the counter failed (modules/complexity.py)
            out["flops_per_image"] = int(complexity["flops"])
    return out


STATUS = "Status"  # capitalised: TensorBoard shows five hparams at first, those that differ, by name; this one first


def session_hparams(identity: dict, status: str, complexity: dict | None = None) -> dict:
    """A run's row of HPARAMS: its readable identity and complexity, and its status."""
    return {**readable_hparams(identity, complexity), STATUS: status}


def recorded_hparams(identity: dict, summary: Summary | None) -> dict:
    """session_hparams from what a run recorded: its summary's status, params and FLOPs ("running"
    while it has no summary: a run writes its summary when it ends)."""
    if summary is None:
        return session_hparams(identity, "running")
    complexity = {"params": summary.params, "flops": summary.flops_per_image} if summary.params is not None else None
    return session_hparams(identity, summary.status or "running", complexity)


def write_session(run_dir: Path, hparams: dict) -> None:
    """<run_dir>/SESSION_FILE: the run's hparams session start, alone in its events file and rewritten
    whole (atomically) when the status in `hparams` changes. TensorBoard keeps the first session start
    it reads of a run, so a later one appended to the curves' events (a resumed run's "done" after
    "interrupted") would never show; a TensorBoard already running shows the new status once restarted."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.summary.writer.record_writer import RecordWriter

    from modules.files import write_atomic
    run_dir, now, data = Path(run_dir), time.time(), io.BytesIO()
    records = RecordWriter(data)
    records.write(Event(wall_time=now, file_version="brain.Event:2").SerializeToString())
    records.write(Event(wall_time=now, summary=session_start(hparams, trial_id=run_dir.name)).SerializeToString())
    write_atomic(run_dir / SESSION_FILE, data.getvalue())


def _value(v):
    return v if isinstance(v, (bool, int, float, str)) else str(v)  # None and lists as text


def session_start(hparams: dict, trial_id: str | None = None):
    """The hparams session start of a run (a Summary proto), without any metric value; `trial_id`
    (the run's folder name) is what HPARAMS shows as the trial, else a hash of the values."""
    from tensorboard.plugins.hparams import summary_v2
    return summary_v2.hparams_pb(hparams, trial_id=trial_id, start_time_secs=time.time())


class SuiteTensorBoardLogger(TensorBoardLogger):
    """Lightning's TensorBoardLogger, but a fit's hparams are its `hparams` (session_hparams,
    status running) in the run's session file with no initial metric values, its val/acc is also logged
    under SIZE_TAG, and the `epoch` Lightning adds to every logged step is not written (the x axis
    is the step)."""

    def __init__(self, *args, hparams: dict | None, train_size: int | None, **kwargs):
        super().__init__(*args, default_hp_metric=False, **kwargs)
        self.run_hparams, self.train_size, self._session_written = hparams, train_size, False

    @rank_zero_only
    def log_hyperparams(self, params, metrics=None) -> None:
        super().log_hyperparams(params)  # hparams.yaml only (no metrics: nothing in the events)
        if self.run_hparams and not self._session_written:  # once: Lightning calls this per stage
            write_session(self.log_dir, self.run_hparams)
            self._session_written = True

    @rank_zero_only
    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        metrics = {k: v for k, v in metrics.items() if k != "epoch"}
        if "val/acc" in metrics and self.train_size is not None:
            metrics[SIZE_TAG.format(self.train_size)] = metrics["val/acc"]
        super().log_metrics(metrics, step)


def sweep_layout(experiment: str, sizes: list[int]) -> dict:
    """Custom scalars, as torch's summary.custom_scalars takes them ({category: {chart: ["Multiline",
    [tag regex]]}}): one chart per training-set size holding every run's val/acc at that size."""
    return {f"{experiment}: val/acc by training-set size": {
        f"val/acc, {n} training images": ["Multiline", [f"^{SIZE_TAG.format(n)}$"]] for n in sorted(set(sizes))}}


def hparams_experiment(run_hparams: list[dict], metrics: list[str]):
    """The hparams experiment (a Summary proto) over the runs' hparams: names in first-seen order,
    `differs` where the runs' values differ, and for STATUS always (a column shown at first even
    when every run is done); `metrics` are the table's metric columns."""
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2, summary_v2
    from tensorboard.plugins.hparams.metadata import EXPERIMENT_TAG
    names = list(dict.fromkeys(k for h in run_hparams for k in h))
    kinds = {bool: api_pb2.DATA_TYPE_BOOL, int: api_pb2.DATA_TYPE_FLOAT64, float: api_pb2.DATA_TYPE_FLOAT64}
    infos = []
    for name in names:
        values = [h.get(name) for h in run_hparams]
        types = {kinds.get(type(v), api_pb2.DATA_TYPE_STRING) for v in values if v is not None}
        infos.append(api_pb2.HParamInfo(name=name, type=types.pop() if len(types) == 1 else api_pb2.DATA_TYPE_STRING,
                                        differs=name == STATUS or len({repr(v) for v in values}) > 1))
    experiment = api_pb2.Experiment(hparam_infos=infos, metric_infos=[  # no time: the same runs, the same bytes
        api_pb2.MetricInfo(name=api_pb2.MetricName(tag=m)) for m in metrics])
    return summary_v2._summary_pb(EXPERIMENT_TAG, plugin_data_pb2.HParamsPluginData(experiment=experiment))


def write_sweep_view(exp_dir: Path, sizes: list[int], hparams: list[dict], tested: bool,
                     keep_existing: bool = False) -> bool:
    """<experiment>/events.out.tfevents.*: the sweep's custom-scalars layout and, over `hparams` (a
    row per run that has an identity.json so far: record.session_rows), its hparams experiment (a
    file of the experiment folder, which the tables never read as a run). Replaces an earlier such file unless it holds the same (a rerun
    that runs nothing changes no file) or `keep_existing`. Returns whether it wrote."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto.event_pb2 import Event
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import custom_scalars

    exp_dir = Path(exp_dir)
    old = sorted(exp_dir.glob("events.out.tfevents.*"))
    if old and keep_existing:
        return False
    metrics = ["val/acc_best", *(["test/acc"] if tested else [])]
    summaries = [custom_scalars(sweep_layout(exp_dir.name, sizes)),
                 *([hparams_experiment(hparams, metrics)] if hparams else [])]
    if len(old) == 1:  # raw: TensorBoard's own loader rewrites the metadata it reads
        written = [e.summary for e in map(Event.FromString, RawEventFileLoader(str(old[0])).Load())
                   if e.HasField("summary")]
        if written == summaries:
            return False
    exp_dir.mkdir(parents=True, exist_ok=True)
    for path in old:
        path.unlink()
    writer = SummaryWriter(log_dir=str(exp_dir))
    for summary in summaries:
        writer._get_file_writer().add_summary(summary)
    writer.close()
    return True
