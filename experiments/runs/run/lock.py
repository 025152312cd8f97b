"""The lock a spec runner (sweep, distill, inductive_bias) holds on its experiment folder while it
plans, runs and records, so that two invocations never enter the same run folders; and the check,
before it is taken, that the folder holds no symbolic link for a write to follow out of it."""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

from modules.files import open_in_place, refuse_links

SUBMITIT_DIR = "submitit"  # <experiment>/submitit: the scheduler's files (runs/slurm.py)


def refuse_experiment_links(exp_dir: Path) -> None:
    """One line naming a symbolic link in the experiment folder, its run folders included; but for
    the contents of submitit/, where submitit links each submission script to its job's copy (the
    suite writes only its slot locks there, never through a link)."""
    refuse_links(exp_dir, skip=(SUBMITIT_DIR,))


def try_lock(handle) -> bool:
    """Take the exclusive flock on an open file without waiting: False when another process holds it.
    The one place the suite calls flock: experiment locks, run-folder locks and the local executor's
    slots all go through here. The OS drops the lock when its holder's file is closed or it dies."""
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def held(path: Path) -> bool:
    """Whether some live process holds the lock file at `path` (a run folder's .lock: the run is training)."""
    if not path.exists():
        return False
    with open_in_place(path, append=True) as h:
        return not try_lock(h)  # closing the file drops the lock it just took


def _name_holder(handle) -> None:
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()


@contextmanager
def hold_experiment(exp_dir: Path):
    """An exclusive lock on <experiment>/.lock while a runner plans, runs and records: a second
    invocation on the experiment (any profile: both rewrite its record) waits, then finds the first
    one's runs finished instead of entering the same run folders. The OS drops the lock if the holder dies.
    An experiment folder holding a symbolic link is refused first: its runs and records are written there."""
    exp_dir.mkdir(parents=True, exist_ok=True)
    refuse_experiment_links(exp_dir)
    with open_in_place(exp_dir / ".lock") as handle:  # a file, not a folder: never read as a run
        if not try_lock(handle):
            handle.seek(0)
            print(f"another sweep of {exp_dir.name} (pid {handle.read().strip() or 'unknown'}) is running; "
                  "waiting", flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        _name_holder(handle)
        try:
            yield
        finally:  # emptied on release: a finished experiment names no holder, and a no-op rerun leaves it as it was
            handle.seek(0)
            handle.truncate()
        # closing the file releases the lock


def lock_run_folder(run_dir: Path):
    """An exclusive lock on <run>/.lock for this process's lifetime (the OS drops it when the process
    dies, even by SIGKILL); a second process into the same folder gets one clear line. A folder
    holding a symbolic link is refused first: Lightning and TensorBoard write there through any
    link (config.yaml, hparams.yaml, events), and the lock itself is written in place."""
    run_dir.mkdir(parents=True, exist_ok=True)
    refuse_links(run_dir)
    handle = open_in_place(run_dir / ".lock")
    if not try_lock(handle):
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise ValueError(f"run folder {str(run_dir)!r} is in use by another process (pid {holder}): "
                         "wait for it to finish") from None
    _name_holder(handle)
    return handle
