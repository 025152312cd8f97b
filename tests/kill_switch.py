"""Callbacks that stop their own run from inside once training has passed a given step, for the
exact-resume and interruption tests: SIGKILL (a crash: no handler, no clean-up), or SIGINT or SIGTERM
sent to the run itself, to its process group (what Ctrl-C in a terminal does) or to the process that
started it (`kill <sweep pid>`)."""
import os
import signal

from lightning.pytorch.callbacks import Callback


class KillAfterStep(Callback):
    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class SignalAfterStep(Callback):
    """`signum` once, at training step `step` (or, with step -1, at the first test batch), sent to
    `to`: self, group or parent."""

    def __init__(self, step: int, signum: int = signal.SIGTERM, to: str = "self"):
        self.step, self.signum, self.to = step, signum, to
        self.sent = False

    def _send(self) -> None:
        if self.sent:
            return
        self.sent = True
        if self.to == "group":
            os.killpg(os.getpgrp(), self.signum)
        else:
            os.kill(os.getppid() if self.to == "parent" else os.getpid(), self.signum)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            self._send()

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        if self.step == -1:
            self._send()
