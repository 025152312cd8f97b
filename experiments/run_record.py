"""The small records a run leaves beside its checkpoints: train_indices.json and summary.json."""
from __future__ import annotations

import json
import time
from pathlib import Path

from lightning.pytorch.callbacks import Callback

from .provenance import git_commit, hardware, versions

STRONG_AUGMENT = ("randaugment", "random_erasing", "mixup_alpha", "cutmix_alpha")


def read_summary(run_dir: Path) -> dict | None:
    try:
        return json.loads((Path(run_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        return None


def write_summary(run_dir: Path, summary: dict) -> None:
    tmp = Path(run_dir) / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    tmp.replace(Path(run_dir) / "summary.json")  # atomic: a killed run never leaves half a file


class RunRecord(Callback):
    """Writes train_indices.json at fit start and summary.json after fit and after test.

    Wall time is kept in the checkpoint (callback state), so a resumed run reports its total."""

    def __init__(self, run_dir: Path, experiment: str):
        self.run_dir, self.experiment = Path(run_dir), experiment
        self.commit = git_commit()  # the code this process loaded, whatever HEAD becomes later
        self.wall_time_s, self._start = 0.0, None
        self.images_per_sec: float | None = None

    def state_dict(self) -> dict:
        return {"wall_time_s": self._elapsed()}

    def load_state_dict(self, state: dict) -> None:
        self.wall_time_s = state.get("wall_time_s", 0.0)

    def _elapsed(self) -> float:
        return self.wall_time_s + (time.perf_counter() - self._start if self._start else 0.0)

    def on_fit_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()
        if trainer.is_global_zero and trainer.datamodule is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            trainer.datamodule.save_train_indices(self.run_dir / "train_indices.json")

    def on_fit_end(self, trainer, pl_module) -> None:
        ips = trainer.callback_metrics.get("train/images_per_sec")  # the last epoch's
        self.images_per_sec = float(ips) if ips is not None else None
        self.wall_time_s, self._start = self._elapsed(), None
        self._write(trainer, pl_module, status="fitted")

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if isinstance(exception, KeyboardInterrupt):
            return  # interrupted, not failed: the next start resumes from last.ckpt
        self.wall_time_s, self._start = self._elapsed(), None
        status = "diverged" if isinstance(exception, FloatingPointError) else "failed"
        self._write(trainer, pl_module, status=status, error=f"{type(exception).__name__}: {exception}")

    def on_test_end(self, trainer, pl_module) -> None:
        test = {k.removeprefix("test/"): float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}
        self._write(trainer, pl_module, status="done", test=test)

    def _write(self, trainer, pl_module, status: str, test: dict | None = None, error: str | None = None) -> None:
        if not trainer.is_global_zero:
            return
        previous = read_summary(self.run_dir) or {}
        dm, h = trainer.datamodule, pl_module.hparams
        dh = dict(dm.hparams) if dm is not None else {}
        best = trainer.checkpoint_callback.best_model_score if trainer.checkpoint_callback else None
        summary = {
            **previous,
            "experiment": self.experiment, "run": self.run_dir.name,
            "family": h.family, "budget": h.budget,
            "dataset": dh.get("dataset"), "fraction": dh.get("fraction"),
            "train_size": dm.train_size if dm is not None else None, "seed": dh.get("seed"),
            "recipe": "strong" if any(dh.get(k) for k in STRONG_AUGMENT) else "default",
            "status": status,
            "params": pl_module.complexity["params"], "flops_per_image": pl_module.complexity["flops"],
            "precision": str(trainer.precision), "devices": trainer.world_size,
            "commit": self.commit, "versions": versions(), "hardware": hardware(),
        }
        summary.pop("error", None)
        if error is not None:
            summary.update(error=error[:500], steps=trainer.global_step, wall_time_s=round(self.wall_time_s, 1))
        if status == "fitted":
            summary.update(epochs=trainer.current_epoch, steps=trainer.global_step,
                           wall_time_s=round(self.wall_time_s, 1), images_per_sec=self.images_per_sec,
                           val_acc_best=float(best) if best is not None else None)
            summary.pop("test", None)  # a new fit makes any older test result stale
        if test is not None:
            summary["test"] = test
            summary["test_acc"] = test.get("acc")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_summary(self.run_dir, summary)
