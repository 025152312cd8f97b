"""What a run's summary.json must hold for anything to read it: every key that a table formats,
compares or indexes, checked against what the suite writes (a finite number in its range, text where
text is written, a mapping where one is read). A run folder may come from elsewhere, so its record is
read as typed data; a wrong one is a BadRecord naming the first wrong key, never a traceback
(experiments/report/records.py leaves such a run out of the tables with its reason; the dry run's
step times leave it out: experiments/runs/sweep/estimate.py).
"""
from __future__ import annotations

import json
import math

from experiments.runs.run.summary import TEACHER_KEYS


LARGEST = 1e18  # beyond any count or time the suite records; a float holds it (a longer JSON integer overflows one)


class BadRecord(ValueError):
    """A record the tables cannot read as the suite writes it; the message says which key and why."""


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


def _teacher_labels(v) -> str | None:
    """teacher_labels: {differs, images, rate}, how often a distilled run's teacher label was not the true one."""
    ok = isinstance(v, dict) and not COUNT(v.get("differs")) and not COUNT(v.get("images")) and not ACCURACY(v.get("rate"))
    return None if ok else "a mapping of counts 'differs' and 'images' and a 'rate' from 0 to 1"


NUMBER, INTEGER, ACCURACY, COUNT = _number(), _number(integer=True), _number(0, 1), _number(0, integer=True)
NONNEGATIVE = _number(0)
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
    "stopped": _mapping(), "schema": COUNT, "teacher": _teacher, "teacher_labels": _teacher_labels,
}
REQUIRED = ("family", "status")                 # every table groups by them
REQUIRED_DONE = ("fraction", "train_size")      # and places a finished run by them


def shown(v) -> str:
    text = json.dumps(v)
    return text if len(text) <= 60 else text[:57] + "..."


def checked_summary(summary, finished: tuple[str, ...] = REQUIRED_DONE) -> dict:
    """`summary` when it holds what the tables read, else a BadRecord naming the first wrong key;
    `finished`: the keys a finished run must have besides."""
    if not isinstance(summary, dict):
        raise BadRecord(f"holds {type(summary).__name__} {shown(summary)}, not a mapping of a run's fields")
    needed = REQUIRED + (finished if summary.get("status") == "done" else ())
    for key in needed:
        if summary.get(key) is None:
            raise BadRecord(f"no {key!r}" + (" in a finished run's record" if key in REQUIRED_DONE else ""))
    for key, check in SUMMARY_FIELDS.items():
        value = summary.get(key)
        allowed = check(value) if value is not None else None
        if allowed:
            raise BadRecord(f"{key} is {shown(value)}: allowed {allowed}")
    bad = non_finite(summary)
    if bad:
        raise BadRecord(f"{bad} is not a finite number")
    return summary


def non_finite(value, where: str = "") -> str | None:
    """The first key holding NaN or an infinity, anywhere in the record."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "a value"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return next((b for k, v in items if (b := non_finite(v, f"{where}.{k}" if where else str(k)))), None)
