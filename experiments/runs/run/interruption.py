"""Ctrl-C (SIGINT) and SIGTERM (`kill`, a scheduler): what was running stops, is recorded as
interrupted (not failed), and the command ends with one line saying what stopped and the command
that resumes it, then by the signal itself (status 130 or 143), so that a shell or make running
it stops too instead of going on with its next command.

The first signal raises `Interrupted` (a KeyboardInterrupt, which Lightning's Trainer turns into
its graceful stop); a second one while the first one's records are written is ignored. A sweep
defers it instead (`deferred`): its runs are processes of their own, which are handed the signal
and waited for, so that each records itself; no new run starts.
"""
from __future__ import annotations

import logging
import os
import shlex
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A signal stopped the command; `what` says what stopped (set by whoever recorded it)."""

    def __init__(self, signum: int, what: str = ""):
        super().__init__(signal.Signals(signum).name)
        self.signum, self.what = signum, what

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_status(self) -> int:
        return 128 + self.signum

    def line(self, argv: list[str]) -> str:
        """The one line printed for it, with the command that resumes what stopped."""
        return (f"interrupted by {self.name}" + (f": {self.what}" if self.what else "")
                + f"; run the same command again to resume: {shlex.join(['python', '-m', 'experiments', *argv])}")


_state: dict = {"received": None, "defer": None}


def received() -> Interrupted | None:
    """The interruption this command got, if any."""
    return _state["received"]


def _on_signal(signum: int, frame) -> None:
    if _state["received"] is not None:
        return  # the first signal is being handled: its records are being written
    _state["received"] = Interrupted(signum)
    if _state["defer"] is not None:
        return _state["defer"](signum)
    raise _state["received"]


class _QuietTrainerStop(logging.Filter):
    """Lightning's 'Received SIGTERM: 15' and 'Detected KeyboardInterrupt, attempting graceful
    shutdown ...': the command's own line says what stopped (and a SIGTERM is no keyboard)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return "Detected KeyboardInterrupt" not in message and "Received SIGTERM" not in message


_QUIET = _QuietTrainerStop()
_LIGHTNING_LOGS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero",
                   "lightning.pytorch.trainer.connectors.signal_connector")


@contextmanager
def catching() -> Iterator[None]:
    """SIGINT and SIGTERM raise Interrupted inside the block (the first one only); the previous
    handlers come back after it. Only the main thread receives signals: elsewhere (a command run
    in a thread of a test) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _on_signal) for s in SIGNALS}
    _state["received"] = None
    for name in _LIGHTNING_LOGS:
        logging.getLogger(name).addFilter(_QUIET)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for name in _LIGHTNING_LOGS:
            logging.getLogger(name).removeFilter(_QUIET)


@contextmanager
def deferred(stop: Callable[[int], None]) -> Iterator[None]:
    """Inside the block a signal calls stop(signum) instead of raising: the work in flight ends on
    its own (stop hands the signal on to it); Interrupted is raised when the block ends."""
    _state["defer"] = stop
    try:
        yield
    finally:
        _state["defer"] = None
    if _state["received"] is not None:
        raise _state["received"]


def end_process(code: int) -> None:
    """Exits with `code`, or, after an interruption, by the same signal (flushed first: nothing
    runs after it), as Python does for an uncaught KeyboardInterrupt."""
    stop = received()
    if stop is None:
        sys.exit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(stop.signum, signal.SIG_DFL)
    os.kill(os.getpid(), stop.signum)
    sys.exit(stop.exit_status)  # only where the signal could not end the process
