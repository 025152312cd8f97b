"""RunRecord, the Lightning callback that writes a run's records (runs.run.record) while it trains:
train_indices.json at fit start, progress.json while it trains, summary.json after fit and after test."""
from __future__ import annotations

import time
from pathlib import Path

from lightning.pytorch.callbacks import Callback

from modules.files import write_json

from experiments.runs.run.identity import config_hash
from experiments.runs.run.provenance import git_commit, hardware, versions
from experiments.runs.run.record import PROGRESS_EVERY_S, record_summary, write_progress
from experiments.runs.run.run_folder import RunFolder


class RunRecord(Callback):
    """Writes train_indices.json at fit start and summary.json after fit and after test.

    With `identity` (a fit) the summary is this run's. Without (validate/test of a checkpoint), a
    test result goes into the checkpoint's run summary only when its `evaluation` settings equal
    the run's own (same data, test batches, precision and checkpoint); otherwise it goes to
    evaluations/<checkpoint>_<settings hash>.json, and a finished record is never rewritten.
    Wall time is kept in the checkpoint (callback state), so a resumed run reports its total."""

    def __init__(self, run_dir: Path, experiment: str, *, evaluation: dict, identity: dict | None = None,
                 stop_at_val_acc: float | None = None):
        self.run_dir, self.folder, self.experiment = Path(run_dir), RunFolder(run_dir), experiment
        self.stop_at_val_acc = stop_at_val_acc
        self.identity, self.evaluation = identity, evaluation
        self.commit = git_commit()  # the code this process loaded, whatever HEAD becomes later
        self.wall_time_s, self._start = 0.0, None
        self.images_per_sec: float | None = None
        self.val_history: list[list] = []  # [step, val/acc] of every validation of the fit
        self._progressed, self._shown = 0.0, []  # when progress.json was last written, and its validation

    def state_dict(self) -> dict:
        return {"wall_time_s": self._elapsed(), "val_history": self.val_history}

    def load_state_dict(self, state: dict) -> None:
        self.wall_time_s = state.get("wall_time_s", 0.0)
        self.val_history = [list(v) for v in state.get("val_history", [])]

    def on_validation_end(self, trainer, pl_module) -> None:
        acc = trainer.callback_metrics.get("val/acc")
        if self.identity is None or trainer.sanity_checking or acc is None or trainer.state.fn != "fit":
            return
        step = int(trainer.global_step)
        # a resumed fit may validate the restored step again: keep one entry per step
        self.val_history = [v for v in self.val_history if v[0] != step] + [[step, round(float(acc), 6)]]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # here, not at a validation's end: that comes before its checkpoint, which nothing should delay
        if self.identity is not None and (time.perf_counter() - self._progressed >= PROGRESS_EVERY_S
                                          or self._shown != self.val_history[-1:]):
            self._progress(trainer)

    def _progress(self, trainer) -> None:
        """progress.json: the step, the steps in all and the last validation accuracy."""
        self._progressed, self._shown = time.perf_counter(), self.val_history[-1:]
        if trainer.is_global_zero:
            steps = trainer.max_steps if trainer.max_steps > 0 else trainer.estimated_stepping_batches
            write_progress(self.run_dir, int(trainer.global_step), int(steps) if steps != float("inf") else 0,
                           self.val_history[-1][1] if self.val_history else None)

    def _closest(self) -> float | None:
        """The validation accuracy closest to stop_at_val_acc (the first on a tie, as the checkpoint)."""
        closest = min(self.val_history, key=lambda sa: abs(sa[1] - self.stop_at_val_acc), default=None)
        return closest[1] if closest else None

    def _elapsed(self) -> float:
        return self.wall_time_s + (time.perf_counter() - self._start if self._start else 0.0)

    def on_fit_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()
        if trainer.is_global_zero and trainer.datamodule is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            trainer.datamodule.save_train_indices(self.folder.train_indices_file)

    def on_fit_end(self, trainer, pl_module) -> None:
        self._progress(trainer)
        ips = trainer.callback_metrics.get("train/images_per_sec")  # the last epoch's
        self.images_per_sec = float(ips) if ips is not None else None
        self.wall_time_s, self._start = self._elapsed(), None
        self._write(trainer, pl_module, status="fitted")

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if isinstance(exception, KeyboardInterrupt):
            return self._interrupted(trainer, pl_module, exception)
        if self.identity is None:
            return  # an evaluation, not this run's fit
        self.wall_time_s, self._start = self._elapsed(), None
        status = "diverged" if isinstance(exception, FloatingPointError) else "failed"
        self._write(trainer, pl_module, status=status, error=f"{type(exception).__name__}: {exception}")

    def _interrupted(self, trainer, pl_module, stop: KeyboardInterrupt) -> None:
        """Ctrl-C or SIGTERM (runs.run.interruption): a fit is recorded as interrupted (the next start
        resumes it from its last checkpoint); a trained run stopped in its test stays fitted (only
        its test is left), and an evaluation records nothing. The command's line says which."""
        if self.identity is None or trainer.state.fn != "fit":
            what = f"{self.run_dir}, trained," if self.identity is not None else self.run_dir
            stop.what = f"{what} stopped in its {trainer.state.fn.value}; nothing recorded"
            return
        self.wall_time_s, self._start = self._elapsed(), None
        self._write(trainer, pl_module, status="interrupted")
        stop.what = f"{self.run_dir} stopped at step {trainer.global_step}, recorded as interrupted"

    def on_test_end(self, trainer, pl_module) -> None:
        test = {k.removeprefix("test/"): float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}
        settings = config_hash(self.evaluation)
        own = self.folder.summary()
        if self.identity is not None or (own is not None and own.test_settings == settings
                                         and own.status in ("fitted", "done")):
            self._write(trainer, pl_module, status="done", test=test)
        elif trainer.is_global_zero:
            path = self.folder.evaluations / f"{Path(self.evaluation['checkpoint']).stem}_{settings}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, {"test": test, "test_acc": test.get("acc"), "settings": self.evaluation,
                              "commit": self.commit, "versions": versions(), "hardware": hardware()})

    def _write(self, trainer, pl_module, status: str, test: dict | None = None, error: str | None = None) -> None:
        if not trainer.is_global_zero:
            return
        best = trainer.checkpoint_callback.best_model_score if trainer.checkpoint_callback else None
        if self.stop_at_val_acc is not None:  # best.ckpt holds the validation closest to the target (checkpoint.TargetGap)
            best = self._closest()
        fit = None
        if status in ("fitted", "interrupted") or error is not None:
            fit = {"steps": trainer.global_step, "wall_time_s": self.wall_time_s}
        if status == "fitted":
            fit.update(epochs=trainer.current_epoch, images_per_sec=self.images_per_sec,
                       val_acc_best=float(best) if best is not None else None, max_steps=trainer.max_steps,
                       val_history=self.val_history)
            labels = pl_module.teacher_labels() if hasattr(pl_module, "teacher_labels") else None
            if labels:  # DeiT with a teacher: how often its hard label was not the true one
                fit["teacher_labels"] = labels
            if self.stop_at_val_acc is not None:  # stopped on purpose: no plateau is asked of it (record_summary)
                closest = min(self.val_history, key=lambda sa: abs(sa[1] - self.stop_at_val_acc), default=None)
                fit["stopped"] = {"at_val_acc": self.stop_at_val_acc, "step": trainer.global_step,
                                  "reached": any(a >= self.stop_at_val_acc for _, a in self.val_history),
                                  "checkpoint_step": closest[0] if closest else None}
        record_summary(self.run_dir, status, experiment=self.experiment, identity=self.identity,
                       evaluation=self.evaluation, hparams=pl_module.hparams, complexity=pl_module.complexity,
                       datamodule=trainer.datamodule, precision=str(trainer.precision), devices=trainer.world_size,
                       commit=self.commit, fit=fit, test=test, error=error)
