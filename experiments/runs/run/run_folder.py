"""RunFolder: one run's folder, <runs_dir>/<experiment>/<readable name>_<config hash>, and the files
the suite keeps in it. Every reader and writer of a run (the CLI, the sweep, the packed engine, the
pool of shared runs, the tables) names them through here:

- identity.json: the settings the folder's hash covers, written before training;
- summary.json: what ran and how it ended (its `status`), a record of schema SUMMARY_SCHEMA
  (runs/run/summary.py: the typed Summary; older records are brought up to it by `summary.migrate`);
- config.yaml (Lightning's resolved config), train_indices.json, progress.json, evaluations/;
- checkpoints/last.ckpt (where a fit resumes) and checkpoints/best.ckpt (what is tested and taught);
- .lock, held by the one process that trains in the folder (runs/lock.py).

Records are written atomically and never through a link (modules/files.write_atomic). Reading
needs no torch or Lightning: a scheduler's task process reads these records.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path, PurePath

from modules.files import parse_json, write_atomic, write_json

from experiments.runs.run.identity import RUN_FOLDER
from experiments.runs.run.lock import held, lock_run_folder
from experiments.runs.run.summary import SUMMARY_SCHEMA, Summary, Teacher, migrate

SUMMARY_FILE = "summary.json"
IDENTITY_FILE = "identity.json"
CONFIG_FILE = "config.yaml"
TRAIN_INDICES_FILE = "train_indices.json"
PROGRESS_FILE = "progress.json"  # where a training run is: read by the sweep's display, never by the tables
EVALUATIONS = "evaluations"      # test results whose settings differ from the run's own
CHECKPOINTS = "checkpoints"
LAST, BEST = "last.ckpt", "best.ckpt"
LOCK_FILE = ".lock"
# the files a fit writes in its folder, each through a .tmp beside it
RUN_FILES = (SUMMARY_FILE, IDENTITY_FILE, TRAIN_INDICES_FILE, CONFIG_FILE, f"{CHECKPOINTS}/{LAST}",
             f"{CHECKPOINTS}/{BEST}")


def _read_json(path: Path):
    try:
        return parse_json(Path(path).read_text())
    except (OSError, ValueError):
        return None


def teacher_of(identity: dict | None, runs_dir: Path) -> Teacher | None:
    """The teacher a student of `identity` distils from, read from the teacher's own run folder
    (in any experiment of `runs_dir`: the pool shares runs); None for a run without one."""
    checkpoint = (identity or {}).get("model.teacher_checkpoint")
    if not checkpoint:  # kept with distillation none too: the checkpoint is part of the identity
        return None
    folder = PurePath(checkpoint).parent.parent.name
    found = sorted(Path(runs_dir).glob(f"*/{folder}")) if RUN_FOLDER.fullmatch(folder) else []
    teacher = RunFolder(found[0]) if found else None
    ident = teacher.identity() if teacher is not None else None
    if ident is None:
        return Teacher(None, None, None, None, checkpoint)
    own = teacher.summary()  # the teacher's own record says its variant (None without one: it recorded nothing)
    variant = own.variant if own is not None and own.variant != "default" else None
    return Teacher(folder, ident.get("model.family"), ident.get("model.budget"), variant, checkpoint)


class RunFolder:
    """The files of one run folder (see the module's docstring); nothing is read until asked."""

    def __init__(self, path):
        self.path = Path(path)
        self.name = self.path.name
        self.summary_file = self.path / SUMMARY_FILE
        self.identity_file = self.path / IDENTITY_FILE
        self.config_file = self.path / CONFIG_FILE
        self.train_indices_file = self.path / TRAIN_INDICES_FILE
        self.progress_file = self.path / PROGRESS_FILE
        self.evaluations = self.path / EVALUATIONS
        self.checkpoints = self.path / CHECKPOINTS
        self.last_checkpoint = self.checkpoints / LAST  # where a fit resumes: written at every validation and the end
        self.best_checkpoint = self.checkpoints / BEST  # what the run is tested with, and what teaches a DeiT student
        self.lock_file = self.path / LOCK_FILE

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    # ---------------- records ----------------
    def summary(self) -> Summary | None:
        """summary.json at SUMMARY_SCHEMA (an older one migrated), or None when absent or unreadable."""
        s = _read_json(self.summary_file)
        return migrate(Summary.from_record(s), self.identity(), self.name) if isinstance(s, dict) else None

    def status(self) -> str | None:
        """The summary's status (fitted, done, failed, diverged, interrupted), None for no record."""
        summary = self.summary()
        return summary.status if summary is not None else None

    def write_summary(self, summary: Summary) -> None:
        """summary.json at SUMMARY_SCHEMA; and the run's hparams session follows it (its status a column of HPARAMS)."""
        summary = replace(summary, schema=SUMMARY_SCHEMA)
        write_atomic(self.summary_file, summary.to_json())
        identity = self.identity()
        if identity is not None:
            from experiments.runs.run.tensorboard import recorded_hparams, write_session  # TensorBoard: imported when used
            write_session(self.path, recorded_hparams(identity, summary))

    def identity(self) -> dict | None:
        record = _read_json(self.identity_file)
        ident = record.get("identity") if isinstance(record, dict) else None
        return ident if isinstance(ident, dict) else None

    def write_identity(self, ident: dict, config_hash: str) -> None:
        write_json(self.identity_file, {"hash": config_hash, "identity": ident})

    def is_run(self) -> bool:
        """Whether a run started here: it wrote a summary or a checkpoint folder."""
        return self.summary_file.is_file() or self.checkpoints.is_dir()

    # ---------------- the lock ----------------
    def lock(self):
        """The folder's exclusive lock for this process's lifetime (lock.lock_run_folder): close it to release."""
        return lock_run_folder(self.path)

    def held(self) -> bool:
        """Whether a live process trains in the folder now."""
        return held(self.lock_file)

    def check_files(self) -> None:
        """One line, before a fit trains, for a folder (or anything but a file) where the run writes one
        of its files: summary.json's write would otherwise fail only once training is done."""
        for name in RUN_FILES:
            for path in (self.path / name, self.path / f"{name}.tmp"):
                if path.exists() and not path.is_file():
                    raise ValueError(f"{str(path)!r} is {'a folder' if path.is_dir() else 'not a file'}: the run "
                                     "writes its file there; allowed a file or nothing (remove it, and run again)")


def run_of_checkpoint(path) -> RunFolder | None:
    """The run folder of <run>/checkpoints/<name>.ckpt, or None for a checkpoint elsewhere."""
    if not path:
        return None
    p = Path(path)
    run = RunFolder(p.parent.parent)
    return run if p.parent.name == CHECKPOINTS and run.config_file.exists() else None
