"""The checkpoint callbacks of a run folder: RunCheckpoint, TargetGap (which validation best.ckpt
keeps when a fit stops at a target accuracy) and FinalCheckpoint (last.ckpt at the final step).

RunCheckpoint is the ModelCheckpoint whose files are always checkpoints/best.ckpt and
checkpoints/last.ckpt, also when the folder was moved or copied elsewhere and resumed there.

Lightning's ModelCheckpoint restores its best score and paths only when the saved dirpath equals
the current one, and it appends -v1 to a name whose file already exists; so a moved run folder
resumed would write best-v1.ckpt and last-v1.ckpt beside a best.ckpt that no longer follows the
best validation. Here the saved paths are re-rooted onto the current folder and names never get
a version suffix. And best.ckpt is always chosen at the end of a validation: Lightning otherwise
saves at the end of the training epoch when val_check_interval == 1, which it reads as "once an
epoch" even where it means every step, and compares only the epoch's last validation.

Two more things a resume at the last validation needs from Lightning 2.6: last.ckpt written at every
validation (it writes it only where best.ckpt improved, so a kill after a validation that did not
improve resumed from an older one), and the training loader's saved position handed to it when the
loader was set up before the checkpoint was restored (an epoch budget makes the optimiser's schedule
ask for the steps, which sets the loader up early, and Lightning then never loads its state: a run
killed inside an epoch could not resume).
"""
from __future__ import annotations

import os

from pathlib import Path

from lightning.pytorch.callbacks import Callback, ModelCheckpoint


class RunCheckpoint(ModelCheckpoint):
    def __init__(self, **kwargs):
        kwargs.setdefault("save_on_train_epoch_end", False)
        super().__init__(**kwargs, enable_version_counter=False)  # best.ckpt is overwritten, never best-v1.ckpt

    @property
    def state_key(self) -> str:
        # stored under ModelCheckpoint's own key: checkpoints written before this class resume with their state
        return "ModelCheckpoint" + super().state_key.removeprefix(type(self).__qualname__)

    def on_validation_end(self, trainer, pl_module) -> None:
        super().on_validation_end(trainer, pl_module)
        if self.save_last and not self._should_skip_saving_checkpoint(trainer) \
                and not self._should_save_on_train_epoch_end(trainer):  # not saved there: best did not improve
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_train_start(self, trainer, pl_module) -> None:
        # the restored loader state, still pending where the loader was set up before the restore
        # (fit_loop.setup_data returns early then); a no-op when it was loaded or nothing is restored
        trainer.fit_loop._load_combined_loader_states()

    def load_state_dict(self, state_dict: dict) -> None:
        old = state_dict.get("dirpath")
        if old and self.dirpath and os.path.normpath(old) != os.path.normpath(self.dirpath):
            state_dict = self._rerooted(state_dict, old)
        super().load_state_dict(state_dict)

    def _rerooted(self, state: dict, old: str) -> dict:
        """The state with every path under the old folder moved under the current one (a path elsewhere
        is kept: it is no file of this run)."""
        def move(path):
            if not path or os.path.dirname(os.path.normpath(path)) != os.path.normpath(old):
                return path
            return os.path.join(self.dirpath, os.path.basename(path))
        state = dict(state, dirpath=self.dirpath)
        for key in ("best_model_path", "last_model_path", "kth_best_model_path"):
            if key in state:
                state[key] = move(state[key])
        if "best_k_models" in state:
            state["best_k_models"] = {move(p): v for p, v in state["best_k_models"].items()}
        return state


class TargetGap(Callback):
    """Logs -|val/acc - target| at every validation, for the checkpoint of a run stopped at a target
    accuracy (fit --stop_at_val_acc) to keep the closest validation: the first one reaching the
    target can overshoot it by several points (a ResNet early in training jumps 2-6 points between
    two validations 10 steps apart). Lightning runs checkpoint callbacks after the others, so the
    value is there when RunCheckpoint looks."""
    KEY = "val/target_gap"

    def __init__(self, target: float):
        self.target = float(target)

    def on_validation_end(self, trainer, pl_module) -> None:
        acc = trainer.callback_metrics.get("val/acc")
        if acc is not None and not trainer.sanity_checking:
            trainer.callback_metrics[self.KEY] = -(acc.detach().float() - self.target).abs()


class FinalCheckpoint(Callback):
    """last.ckpt holds the final step even when training stops between two validations."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def on_train_end(self, trainer, pl_module) -> None:
        if not trainer.interrupted:
            trainer.save_checkpoint(self.path)
