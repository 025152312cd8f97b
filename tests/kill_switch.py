"""A callback that kills its own process (SIGKILL: no handler, no clean-up) once training has
passed a given step: a crash right after a checkpoint, for the exact-resume tests."""
import os
import signal

from lightning.pytorch.callbacks import Callback


class KillAfterStep(Callback):
    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)
