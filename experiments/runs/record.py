"""The small records a run leaves beside its checkpoints: identity.json (written by the CLI before
training), train_indices.json, summary.json, and evaluations/*.json for tests with other settings."""
from __future__ import annotations

import json
import time
from pathlib import Path

from lightning.pytorch.callbacks import Callback

from experiments.runs.convergence import plateau
from experiments.runs.provenance import git_commit, hardware, versions
from experiments.runs.identity import config_hash

IDENTITY_FILE = "identity.json"
EVALUATIONS = "evaluations"  # test results whose settings differ from the run's own


def read_summary(run_dir: Path) -> dict | None:
    try:
        return json.loads((Path(run_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        return None


def read_identity(run_dir: Path) -> dict | None:
    try:
        return json.loads((Path(run_dir) / IDENTITY_FILE).read_text())["identity"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_json(path: Path, hint: str = "") -> dict:
    """A record the tables or a runner reads back: {} when absent; a corrupt file is one error line."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path} is not valid JSON: {e}{hint}") from None


def write_json(path: Path, record: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        tmp.replace(path)  # atomic: a killed run never leaves half a file
    except OSError as e:  # a full disk: the old record stays whole, no half-written .tmp stays behind
        tmp.unlink(missing_ok=True)
        raise OSError(e.errno, e.strerror, str(path)) from None


def write_profile_record(path: Path, spec_name: str, profile: str, entry: dict, invocation: dict | None,
                         hint: str = "", ran: bool = True) -> Path:
    """Replaces one profile's entry of an experiment record ({spec, profiles}), keeping the other
    profiles and, when this invocation timed nothing (None), the profile's last timed invocation.
    An invocation that ran nothing (ran=False) leaves a recorded profile as it is: its runs' statuses
    may have moved on since (a tuning winner tested by the main stage), which is no news."""
    record = read_json(path, hint=hint)
    profiles = record.get("profiles", {})
    if not ran and profile in profiles:
        return Path(path)
    last = invocation or profiles.get(profile, {}).get("last_invocation")
    profiles[profile] = {**entry, **({"last_invocation": last} if last else {})}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"spec": spec_name, "profiles": profiles})
    return Path(path)


def write_summary(run_dir: Path, summary: dict) -> None:
    write_json(Path(run_dir) / "summary.json", summary)


class RunRecord(Callback):
    """Writes train_indices.json at fit start and summary.json after fit and after test.

    With `identity` (a fit) the summary is this run's. Without (validate/test of a checkpoint), a
    test result goes into the checkpoint's run summary only when its `evaluation` settings equal
    the run's own (same data, test batches, precision and checkpoint); otherwise it goes to
    evaluations/<checkpoint>_<settings hash>.json, and a finished record is never rewritten.
    Wall time is kept in the checkpoint (callback state), so a resumed run reports its total."""

    def __init__(self, run_dir: Path, experiment: str, *, evaluation: dict, identity: dict | None = None):
        self.run_dir, self.experiment = Path(run_dir), experiment
        self.identity, self.evaluation = identity, evaluation
        self.commit = git_commit()  # the code this process loaded, whatever HEAD becomes later
        self.wall_time_s, self._start = 0.0, None
        self.images_per_sec: float | None = None
        self.val_history: list[list] = []  # [step, val/acc] of every validation of the fit

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
        if isinstance(exception, KeyboardInterrupt) or self.identity is None:
            return  # interrupted, not failed (the next start resumes); or an evaluation, not this run's fit
        self.wall_time_s, self._start = self._elapsed(), None
        status = "diverged" if isinstance(exception, FloatingPointError) else "failed"
        self._write(trainer, pl_module, status=status, error=f"{type(exception).__name__}: {exception}")

    def on_test_end(self, trainer, pl_module) -> None:
        test = {k.removeprefix("test/"): float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}
        settings = config_hash(self.evaluation)
        own = read_summary(self.run_dir) or {}
        if self.identity is not None or (own.get("test_settings") == settings and own.get("status") in ("fitted", "done")):
            self._write(trainer, pl_module, status="done", test=test)
        elif trainer.is_global_zero:
            path = self.run_dir / EVALUATIONS / f"{Path(self.evaluation['checkpoint']).stem}_{settings}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, {"test": test, "test_acc": test.get("acc"), "settings": self.evaluation,
                              "commit": self.commit, "versions": versions(), "hardware": hardware()})

    def _write(self, trainer, pl_module, status: str, test: dict | None = None, error: str | None = None) -> None:
        if not trainer.is_global_zero:
            return
        best = trainer.checkpoint_callback.best_model_score if trainer.checkpoint_callback else None
        fit = None
        if status == "fitted" or error is not None:
            fit = {"steps": trainer.global_step, "wall_time_s": self.wall_time_s}
        if status == "fitted":
            fit.update(epochs=trainer.current_epoch, images_per_sec=self.images_per_sec,
                       val_acc_best=float(best) if best is not None else None, max_steps=trainer.max_steps,
                       val_history=self.val_history)
        record_summary(self.run_dir, status, experiment=self.experiment, identity=self.identity,
                       evaluation=self.evaluation, hparams=pl_module.hparams, complexity=pl_module.complexity,
                       datamodule=trainer.datamodule, precision=str(trainer.precision), devices=trainer.world_size,
                       commit=self.commit, fit=fit, test=test, error=error)


def record_summary(run_dir: Path, status: str, *, experiment: str, identity: dict | None, evaluation: dict,
                   hparams, complexity: dict, datamodule, precision: str, devices: int, commit: str,
                   fit: dict | None = None, test: dict | None = None, error: str | None = None,
                   extra: dict | None = None) -> None:
    """summary.json of a run (RunRecord, and each member of a packed fit): what ran, on what, with
    which code, and its `fit` (steps, wall_time_s; when fitted also epochs, images_per_sec,
    val_acc_best, max_steps, val_history: the plateau is derived here) and `test` results."""
    run_dir = Path(run_dir)
    previous = read_summary(run_dir) or {}
    dm, h = datamodule, hparams
    dh = dict(dm.hparams) if dm is not None else {}
    summary = {
        **previous,
        "experiment": experiment, "run": run_dir.name,
        "config_hash": config_hash(identity) if identity is not None else previous.get("config_hash"),
        "test_settings": previous.get("test_settings") or config_hash(evaluation),
        "family": h["family"], "budget": h["budget"],
        "dataset": dh.get("dataset"), "fraction": dh.get("fraction"),
        "train_size": dm.train_size if dm is not None else None, "seed": dh.get("seed"),
        "val_size": len(dm.val_indices) if dm is not None else None,
        "status": status,
        "params": complexity["params"], "flops_per_image": complexity["flops"],
        "precision": precision, "devices": devices,
        "commit": commit, "versions": versions(), "hardware": hardware(),
        **(extra or {}),
    }
    summary.pop("error", None)
    if fit is not None:
        summary.update(fit, wall_time_s=round(fit["wall_time_s"], 1))
    if error is not None:
        summary["error"] = error[:500]
    if status == "fitted":
        summary["plateau"] = plateau(fit["val_history"], fit["steps"])
        summary.pop("test", None)  # a new fit makes any older test result stale
    if test is not None:
        summary["test"] = test
        summary["test_acc"] = test.get("acc")
    run_dir.mkdir(parents=True, exist_ok=True)
    write_summary(run_dir, summary)
