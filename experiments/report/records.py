"""The records as the tables read them: data, never markup, and never a traceback.

A run folder may come from elsewhere, so its summary.json is read as typed data: every key the
tables format is checked against what the suite writes (a finite number in its range, text where
text is written, a mapping where one is read), and a record that is not valid JSON, not a file, or
holds a wrong value is left out with its reason, which every table built from its experiment
states ("runs left out: <run> (<why>)") and `tables` prints, instead of a traceback or a silently
shorter table. Every text of every record the tables read (summaries, identities, the experiments'
own records and probes) is made markdown-safe here (table_format.plain), so no value from a record
reaches a table, a reading or the README as markup; the CSVs beside them carry the same text.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from experiments.report.table_format import one_line, plain
from experiments.runs.run.record import read_json
from experiments.runs.run.run_folder import IDENTITY_FILE, RunFolder
from experiments.runs.run.summary import TEACHER_KEYS, Summary, migrate
from experiments.runs.sweep.shared import located, shared_entries
from modules.files import parse_json


LARGEST = 1e18  # beyond any count or time the suite records; a float holds it (a longer JSON integer overflows one)


class BadRecord(ValueError):
    """A record the tables cannot read as the suite writes it; the message says which key and why."""


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


def _number(lo: float = -LARGEST, hi: float = LARGEST, integer: bool = False):
    """A check: a finite number (an integer when `integer`), bool excluded, within [lo, hi]."""
    kind = "an integer" if integer else "a number"
    allowed = f"{kind} from {lo:g} to {hi:g}"

    def check(v) -> str | None:
        ok = isinstance(v, int if integer else (int, float)) and not isinstance(v, bool) and lo <= v <= hi
        return None if ok else allowed  # NaN compares false: refused
    return check


def _text(v) -> str | None:
    return None if isinstance(v, str) else "text"


def _mapping(value_check=None, of: str = ""):
    def check(v) -> str | None:
        if not isinstance(v, dict) or not all(isinstance(k, str) for k in v):
            return "a mapping" + of
        return "a mapping" + of if value_check and any(value_check(x) for x in v.values()) else None
    return check


def _history(v) -> str | None:
    """val_history: [[step, validation accuracy], ...]."""
    def pair(p) -> bool:
        return isinstance(p, list) and len(p) == 2 and not INTEGER(p[0]) and not ACCURACY(p[1])
    return None if isinstance(v, list) and all(pair(p) for p in v) else "a list of (step, accuracy from 0 to 1) pairs"


def _test(v) -> str | None:
    """test: {acc, acc_top5, acc_cls, ..., loss, ece}: accuracies in [0, 1], the rest finite numbers."""
    if _mapping()(v) or any((ACCURACY if k.startswith("acc") else NUMBER)(x) for k, x in v.items()):
        return "a mapping of finite numbers (accuracies from 0 to 1)"
    return None


def _seed(v) -> str | None:
    return None if isinstance(v, str) or not COUNT(v) else "an integer >= 0 or text"


def _plateau(v) -> str | None:
    return None if isinstance(v, dict) and v.get("plateaued") in (True, False, None) else \
        "a mapping whose 'plateaued' is true, false or null"


def _engine(v) -> str | None:
    ok = isinstance(v, dict) and isinstance(v.get("group"), (str, int, type(None))) and not isinstance(v.get("group"), bool) \
        and not COUNT(v.get("packed", 1))
    return None if ok else "a mapping with a text or integer 'group' and an integer 'packed'"


def _teacher(v) -> str | None:
    ok = isinstance(v, dict) and all(v.get(k) is None or isinstance(v[k], str) for k in TEACHER_KEYS)
    return None if ok else f"a mapping of texts or nulls ({', '.join(TEACHER_KEYS)})"


NUMBER, INTEGER, ACCURACY, COUNT = _number(), _number(integer=True), _number(0, 1), _number(0, integer=True)
# every key of summary.json that a table formats, compares or indexes, and what it must hold (null
# allowed, as record_summary writes it where it knows nothing); other keys are kept as they are
SUMMARY_FIELDS = {
    "family": _text, "status": _text, "run": _text, "experiment": _text, "budget": _text, "dataset": _text,
    "commit": _text, "hardware": _text, "precision": _text, "error": _text, "config_hash": _text,
    "test_settings": _text, "versions": _mapping(_text, " of texts"),
    "fraction": _number(0, 1), "train_size": COUNT, "val_size": COUNT, "seed": _seed, "params": COUNT,
    "flops_per_image": _number(0), "devices": COUNT, "steps": COUNT, "epochs": COUNT, "max_steps": INTEGER,
    "wall_time_s": _number(0), "images_per_sec": _number(0), "val_acc_best": ACCURACY, "test_acc": ACCURACY,
    "test": _test, "val_history": _history, "plateau": _plateau, "engine": _engine, "identity": _mapping(),
    "stopped": _mapping(), "schema": COUNT, "teacher": _teacher,
}
REQUIRED = ("family", "status")                 # every table groups by them
REQUIRED_DONE = ("fraction", "train_size")      # and places a finished run by them


def _show(v) -> str:
    text = json.dumps(v)
    return text if len(text) <= 60 else text[:57] + "..."


def checked_summary(summary, finished: tuple[str, ...] = REQUIRED_DONE) -> dict:
    """`summary` when it holds what the tables read, else a BadRecord naming the first wrong key;
    `finished`: the keys a finished run must have besides."""
    if not isinstance(summary, dict):
        raise BadRecord(f"holds {type(summary).__name__} {_show(summary)}, not a mapping of a run's fields")
    needed = REQUIRED + (finished if summary.get("status") == "done" else ())
    for key in needed:
        if summary.get(key) is None:
            raise BadRecord(f"no {key!r}" + (" in a finished run's record" if key in REQUIRED_DONE else ""))
    for key, check in SUMMARY_FIELDS.items():
        value = summary.get(key)
        allowed = check(value) if value is not None else None
        if allowed:
            raise BadRecord(f"{key} is {_show(value)}: allowed {allowed}")
    bad = _non_finite(summary)
    if bad:
        raise BadRecord(f"{bad} is not a finite number")
    return summary


def _non_finite(value, where: str = "") -> str | None:
    """The first key holding NaN or an infinity, anywhere in the record."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "a value"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return next((b for k, v in items if (b := _non_finite(v, f"{where}.{k}" if where else str(k)))), None)


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
    error line), its texts markdown-safe."""
    return markdown_safe(read_json(path, hint))


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
    bad = _non_finite(ident)
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
