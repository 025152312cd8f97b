"""Callbacks that stop their own run from inside once training has passed a given step, for the
exact-resume and interruption tests: SIGKILL (a crash: no handler, no clean-up), or SIGINT or SIGTERM
sent to the run itself, to its process group (what Ctrl-C in a terminal does) or to the process that
started it (`kill <sweep pid>`)."""
import os
import signal
import time
from pathlib import Path

from lightning.pytorch.callbacks import Callback


class KillAfterStep(Callback):
    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class SignalAfterStep(Callback):
    """`signum` once, at training step `step` (or, with step -1, at the first test batch), sent to
    `to`: self, group or parent. With `together` > 1, runs training side by side wait for each other:
    each marks in the folder `barrier` that it reached the step, and sends only once `together` runs
    have (every one then past its first checkpoint, whichever started first)."""

    def __init__(self, step: int, signum: int = signal.SIGTERM, to: str = "self", together: int = 1,
                 barrier: str = ""):
        self.step, self.signum, self.to = step, signum, to
        self.together, self.barrier = together, barrier
        self.sent = False

    def _wait_for_the_others(self) -> None:
        if self.together <= 1:
            return
        folder = Path(self.barrier)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / str(os.getpid())).touch()
        deadline = time.monotonic() + 300
        while len(list(folder.iterdir())) < self.together and time.monotonic() < deadline:
            time.sleep(0.05)

    def _send(self) -> None:
        if self.sent:
            return
        self.sent = True
        self._wait_for_the_others()
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
