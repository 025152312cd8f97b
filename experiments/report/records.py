"""The records as the tables read them: data, never markup, and never a traceback.

A run folder may come from elsewhere, so its summary.json is read as typed data: every key the
tables format is checked against what the suite writes (experiments/runs/run/summary_check.py), and
a record that is not valid JSON, not a file, or holds a wrong value is left out with its reason, which every table built from its experiment
states ("runs left out: <run> (<why>)") and `tables` prints, instead of a traceback or a silently
shorter table. Every text of every record the tables read (summaries, identities, the experiments'
own records and probes) is made markdown-safe here (table_format.plain), so no value from a record
reaches a table, a reading or the README as markup; the CSVs beside them carry the same text.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from experiments.report.record_fields import check, fields_of
from experiments.report.table_format import one_line, plain
from experiments.runs.run.record import read_json
from experiments.runs.run.run_folder import IDENTITY_FILE, RunFolder
from experiments.runs.run.summary import Summary, migrate
from experiments.runs.run.summary_check import BadRecord, checked_summary, non_finite
from experiments.runs.sweep.shared import located, shared_entries
from modules.files import parse_json


@dataclass(frozen=True)
class Run:
    name: str                # as the experiment's records name it: <folder>, or <experiment>/<folder> when shared
    summary: Summary         # at SUMMARY_SCHEMA (an older record migrated)
    identity: dict | None    # identity.json's settings; None for a run without one (a record from before it)


@dataclass(frozen=True)
class LeftOut:
    name: str                # as Run.name
    path: Path               # the file that could not be read
    why: str

    def __str__(self) -> str:  # as a table says it
        return f"{self.name} ({plain(self.why)})"

    def warning(self) -> str:  # as `tables` prints it
        return one_line(f"warning: {self.path.parent}: {self.why}; left out of the tables")


def left_out_line(left: list[LeftOut]) -> str:
    """The sentence of a table that names the runs it could not read, and why."""
    return f"runs left out: {'; '.join(map(str, left))}"


def markdown_safe(value):
    """The record with every text in it, keys included, made plain (table_format.plain)."""
    if isinstance(value, str):
        return plain(value)
    if isinstance(value, dict):
        return {markdown_safe(k): markdown_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [markdown_safe(v) for v in value]
    return value


def read_record(path: Path, hint: str = ""):
    """An experiment's own record or probes (record.read_json: {} when absent, a corrupt one is one
    error line), each key the tables read checked against what its writer writes (record_fields.py:
    a wrong one is one error line too), its texts markdown-safe."""
    record, fields = read_json(path, hint), fields_of(path)
    return markdown_safe(check(record, fields, path, hint) if fields and record else record)


def _load(path: Path):
    if path.is_dir():
        raise BadRecord("a folder, not a file")
    try:
        return parse_json(path.read_text())
    except UnicodeDecodeError:
        raise BadRecord("not UTF-8 text") from None
    except ValueError as e:
        raise BadRecord(f"not valid JSON ({e})") from None
    except OSError as e:
        raise BadRecord(f"unreadable ({e.strerror or e})") from None


def _identity(folder: RunFolder) -> dict | None:
    path = folder.identity_file
    if not path.exists():
        return None
    ident = _load(path)
    ident = ident.get("identity") if isinstance(ident, dict) else None
    if not isinstance(ident, dict):
        raise BadRecord("holds no mapping 'identity' of settings")
    bad = non_finite(ident)
    if bad:
        raise BadRecord(f"{bad} is not a finite number")
    return ident


def read_run(run_dir: Path, name: str | None = None) -> Run | LeftOut | None:
    """The run in `run_dir`, its texts markdown-safe; a LeftOut saying why it cannot be read; None
    for a folder without a summary.json (not a run, or one that has not written its record yet)."""
    folder, name = RunFolder(run_dir), name or Path(run_dir).name
    path = folder.summary_file
    if not path.exists() and not path.is_symlink():
        return None
    try:
        summary = checked_summary(_load(path))
    except BadRecord as e:
        return LeftOut(name, path, f"{path.name}: {e}")
    try:
        identity = _identity(folder)
    except BadRecord as e:
        return LeftOut(name, folder.identity_file, f"{IDENTITY_FILE}: {e}")
    summary = migrate(Summary.from_record(summary), identity, folder.name)
    return Run(name, Summary.from_record(markdown_safe(summary.to_record())), markdown_safe(identity))


def read_runs(exp_dir: Path) -> tuple[dict[str, Run], list[LeftOut]]:
    """Every run of the experiment, by the name its records give it (its own folders, and the other
    experiments' runs its records name: shared.located), and those left out with their reasons."""
    exp_dir = Path(exp_dir)
    if not exp_dir.is_dir():
        return {}, []
    folders = [(d.name, d) for d in sorted(exp_dir.iterdir()) if d.is_dir()]
    # named as the records (read_record: plain texts) name them
    read = [read_run(d, plain(n)) for n, d in [*folders, *((e, located(exp_dir, e)) for e in shared_entries(exp_dir))]]
    return ({r.name: r for r in read if isinstance(r, Run)}, [r for r in read if isinstance(r, LeftOut)])
