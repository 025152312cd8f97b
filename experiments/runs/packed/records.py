"""What each member of a packed group leaves in its own run folder, as its single `fit` would.

Per member: config.yaml and train_indices.json at the start; TensorBoard curves (train/loss_step,
train/lr, val/acc, val/acc under its training-set size, val/acc_best) and its readable hparams;
checkpoints/best.ckpt whenever its validation accuracy improves; last.ckpt and summary.json (with
its val_history, from which the plateau is derived) at the end. A diverged member gets a summary
with status "diverged" and no checkpoint. The state (best accuracies, histories, training time)
goes into the group checkpoint, so a resumed group goes on where it was.
"""
from __future__ import annotations

import time

from torch.utils.tensorboard import SummaryWriter

from modules.files import write_atomic

from experiments.runs.run.identity import evaluation_identity
from experiments.runs.run.record import record_summary, write_progress
from experiments.runs.run.run_folder import BEST, RunFolder
from experiments.runs.run.tensorboard import SIZE_TAG, session_hparams, write_session


class MemberRecords:
    def __init__(self, members: list, dms: list, commit: str, group: str):
        self.members, self.dms, self.commit, self.group = members, dms, commit, group
        self.best: list[float | None] = [None] * len(members)
        self.history: list[list[list]] = [[] for _ in members]
        self.wall_time_s, self._start, self._writers = 0.0, None, None
        self._images, self._seconds = 0, 0.0   # training images per member and their seconds (no validation)

    def state_dict(self) -> dict:
        return {"best": self.best, "history": self.history, "wall_time_s": self._elapsed()}

    def load_state_dict(self, state: dict) -> None:
        self.best, self.history = list(state["best"]), [[list(v) for v in h] for h in state["history"]]
        self.wall_time_s = state["wall_time_s"]

    def _elapsed(self) -> float:
        return self.wall_time_s + (time.perf_counter() - self._start if self._start else 0.0)

    def writers(self) -> list[SummaryWriter]:
        if self._writers is None:
            self._writers = [SummaryWriter(log_dir=str(m.run_dir)) for m in self.members]
        return self._writers

    def start(self, complexity: dict, resumed: bool = False) -> None:
        """The clock; each member's hparams session (status running); and, unless the group
        resumes, each member's config and subset."""
        self._start = time.perf_counter()
        for m, dm in zip(self.members, self.dms):
            folder = RunFolder(m.run_dir)
            if not resumed:
                folder.checkpoints.mkdir(parents=True, exist_ok=True)
                write_atomic(folder.config_file, m.config_yaml)
                dm.save_train_indices(folder.train_indices_file)
            write_session(m.run_dir, session_hparams(m.identity, "running", complexity))  # as a single fit's logger

    def trained(self, images: int, seconds: float) -> None:
        """`images` per member trained in `seconds` (between host syncs, less the first step after
        each: no compilation, no validation)."""
        self._images, self._seconds = self._images + images, self._seconds + seconds

    @property
    def images_per_sec(self) -> float | None:
        """Each member's own training images per second."""
        return self._images / self._seconds if self._seconds else None

    def train_logged(self, step: int, losses: list[float], lrs: list[float]) -> None:
        """Step `step`'s (0-based, as a single run's logger numbers it) losses and learning rates."""
        for k, w in enumerate(self.writers()):
            w.add_scalar("train/loss_step", losses[k], step)
            w.add_scalar("train/lr", lrs[k], step)

    def validated(self, step: int, accs: list[float], packed, diverged: dict) -> None:
        """Validation accuracies after `step` steps; best.ckpt of every member that improved (the
        members' weights are in `packed`)."""
        for k, m in enumerate(self.members):
            if k in diverged:
                continue
            acc = accs[k]
            self.history[k] = [v for v in self.history[k] if v[0] != step] + [[step, round(acc, 6)]]
            if self.best[k] is None or acc > self.best[k]:
                self.best[k] = acc
                packed.save_member_checkpoint(k, RunFolder(m.run_dir).best_checkpoint,
                                              extra={"val_acc_best": acc, "global_step": step})
            w = self.writers()[k]
            w.add_scalar("val/acc", acc, step)
            w.add_scalar(SIZE_TAG.format(self.dms[k].train_size), acc, step)
            w.add_scalar("val/acc_best", self.best[k], step)
            w.flush()

    def progress(self, step: int, steps: int) -> None:
        """Each member's progress.json (the sweep's display): the group's step, and its own last
        validation accuracy."""
        for m, history in zip(self.members, self.history):
            write_progress(m.run_dir, step, steps, history[-1][1] if history else None)

    def finish(self, packed, diverged: dict, *, steps: int, epochs: int, max_steps: int, precision: str,
               engine: dict) -> None:
        """summary.json of every member (last.ckpt of those that did not diverge)."""
        self.wall_time_s, self._start = self._elapsed(), None
        ips = self.images_per_sec
        for k, (m, dm) in enumerate(zip(self.members, self.dms)):
            extra = {"engine": {**engine, "packed": len(self.members), "member": k, "group": self.group,
                                "group_images_per_sec": ips * len(self.members) if ips else None}}
            common = dict(experiment=m.config["experiment"], identity=m.identity,
                          evaluation=evaluation_identity(m.config, precision=precision, checkpoint=BEST),
                          hparams={**packed.template.hparams, "lr": packed.member_lr(k)},
                          complexity=packed.complexity, datamodule=dm, precision=precision, devices=1,
                          commit=self.commit, extra=extra)
            fit = {"steps": steps, "wall_time_s": self.wall_time_s}
            if k in diverged:
                record_summary(m.run_dir, "diverged", fit=fit, error=f"FloatingPointError: {diverged[k]}", **common)
                continue
            packed.save_member_checkpoint(k, RunFolder(m.run_dir).last_checkpoint,
                                          extra={"val_acc_best": self.best[k], "global_step": steps})
            fit.update(epochs=epochs, images_per_sec=ips, val_acc_best=self.best[k], max_steps=max_steps,
                       val_history=self.history[k])
            record_summary(m.run_dir, "fitted", fit=fit, **common)
        for w in self.writers():
            w.close()
