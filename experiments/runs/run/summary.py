"""Summary: a run's summary.json as a typed record, and the one migration of older records.

A summary says what ran and how it ended: written by record_summary after a fit or a test (every
single run and every member of a packed group), and by the sweep for a run that ended without
writing its own (execute._record). Readers take its fields as attributes; `from_json` and
`to_json` read and write the file's own text (keys sorted, one space of indent), so a record read
and written again is the same bytes, keys of no field (an older or a newer writer's) included.

A field is None both when the record lacks its key and when it holds null; `nulls` keeps which
keys held null, so that a record is written back as it was read. Reading needs no torch or
Lightning: a scheduler's task process reads these records.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from pathlib import PurePath

from experiments.runs.run.identity import HASH_CHARS, RUN_FOLDER, run_variant
from modules.files import parse_json

# 3: a run records its own variant ("variant": its spec's variant, "default" for none), and a DeiT
#    student's teacher structure takes the teacher's variant from the teacher's record.
# 2: a DeiT student's teacher is recorded as a structure ("teacher": Teacher.record()), and the
#    summary says its schema.
# 1 (no "schema" key): the teacher only as the checkpoint path in identity.json.
SUMMARY_SCHEMA = 3
TEACHER_KEYS = ("run", "family", "budget", "variant", "checkpoint")


@dataclass(frozen=True)
class Teacher:
    """The run a DeiT student distils from, as the student's summary records it: the teacher's
    folder name, family, budget and variant (its spec's variant as the teacher's own record says
    it, such as a matched teacher's 'resnet-at-vit'; None for the default one), so that no reader
    parses them out of a path."""
    run: str | None         # the teacher's folder name; None for a checkpoint outside the suite's run folders
    family: str | None
    budget: str | None
    variant: str | None
    checkpoint: str         # as the student's identity names it (identity.teacher_identity)

    def label(self) -> str:
        """How the tables name the teacher of a group of students: family-budget, then its variant
        (the checkpoint's path for a teacher outside the suite's run folders)."""
        if self.family is None:
            return self.checkpoint
        return "-".join(filter(None, (self.family, self.budget))) + (f"_{self.variant}" if self.variant else "")

    def record(self) -> dict:
        return {k: getattr(self, k) for k in TEACHER_KEYS}

    @classmethod
    def from_record(cls, record) -> Teacher | None:
        if not isinstance(record, dict):
            return None
        return cls(**{k: record.get(k) for k in TEACHER_KEYS})


@dataclass(frozen=True)
class Summary:
    """summary.json's fields (see the module's docstring); the comments say who writes each."""
    schema: int | None = SUMMARY_SCHEMA  # None: a record from before the schema had a number (schema 1)
    # what ran (record_summary; the sweep's own record of a run that wrote none: experiment, run,
    # family, fraction, seed and variant)
    experiment: str | None = None
    run: str | None = None               # the run's folder name
    variant: str | None = None           # the spec's variant of the run ("default" for none; null: not a spec's run)
    config_hash: str | None = None       # of its identity
    test_settings: str | None = None     # hash of the evaluation settings its own test result is for
    family: str | None = None
    budget: str | None = None
    dataset: str | None = None
    fraction: float | None = None
    train_size: int | None = None
    seed: int | str | None = None        # data.seed
    val_size: int | None = None
    status: str | None = None            # fitted, done, failed, diverged, interrupted
    params: int | None = None
    flops_per_image: int | None = None
    precision: str | None = None
    devices: int | None = None
    commit: str | None = None
    versions: dict | None = None         # package -> version
    hardware: str | None = None
    engine: dict | None = None           # a packed group's member: its group, packed, member, loop...
    # the fit (RunRecord, MemberRecords)
    steps: int | None = None
    wall_time_s: float | None = None
    epochs: int | None = None
    images_per_sec: float | None = None
    val_acc_best: float | None = None
    max_steps: int | None = None
    val_history: list | None = None      # [[step, validation accuracy], ...]
    teacher_labels: dict | None = None   # DeiT with a teacher: how often its hard label was not the true one
    stopped: dict | None = None          # fit --stop_at_val_acc: its target, and where it stopped
    plateau: dict | None = None          # convergence.plateau of val_history, when fitted
    error: str | None = None             # failed or diverged: why
    # the test
    test: dict | None = None             # acc, acc_top5, loss, ece (and DeiT's heads' acc_cls, acc_dist...)
    test_acc: float | None = None
    teacher: Teacher | None = None       # DeiT's teacher (anything else a record holds there is kept as read)
    identity: dict | None = None         # the run's settings, as a record from before identity.json held them
    extra: dict = field(default_factory=dict)  # keys of no field, kept as read
    nulls: frozenset = frozenset()       # the fields the record holds as null

    @classmethod
    def from_record(cls, record: dict) -> Summary:
        """The Summary of a record as json.loads reads it (a mapping)."""
        if not isinstance(record, dict):
            raise ValueError(f"a summary is a mapping of a run's fields, not {type(record).__name__}")
        known = {k: v for k, v in record.items() if k in KEYS}
        if isinstance(known.get("teacher"), dict):
            known["teacher"] = Teacher.from_record(known["teacher"])
        return cls(**{"schema": None, **known}, extra={k: v for k, v in record.items() if k not in KEYS},
                   nulls=frozenset(k for k, v in known.items() if v is None))

    @classmethod
    def from_json(cls, text: str | bytes) -> Summary:
        """summary.json's text read: a ValueError for one that is not JSON or not a mapping."""
        return cls.from_record(parse_json(text))

    def updated(self, **values) -> Summary:
        """The summary with these keys set, as a dict's update sets them: a None is recorded as null;
        a key of no field goes to `extra`."""
        fields_ = {k: v for k, v in values.items() if k in KEYS}
        return replace(self, **fields_, extra={**self.extra, **{k: v for k, v in values.items() if k not in KEYS}},
                       nulls=(self.nulls - set(values)) | {k for k, v in fields_.items() if v is None})

    def without(self, *keys: str) -> Summary:
        """The summary without these keys, as a dict's pop drops them."""
        return replace(self, **{k: None for k in keys if k in KEYS}, nulls=self.nulls - set(keys),
                       extra={k: v for k, v in self.extra.items() if k not in keys})

    def to_record(self) -> dict:
        """The record as json.dumps writes it: every field the record holds, then the unknown keys."""
        out = {}
        for k in KEYS:
            v = getattr(self, k)
            if v is not None or k in self.nulls:
                out[k] = v.record() if isinstance(v, Teacher) else v
        return {**out, **self.extra}

    def to_json(self) -> str:
        return json.dumps(self.to_record(), indent=1, sort_keys=True) + "\n"


KEYS = tuple(f.name for f in fields(Summary) if f.name not in ("extra", "nulls"))  # a record's keys of a field


def migrate(summary: Summary, identity: dict | None, folder: str) -> Summary:
    """A summary of an older schema, of the run folder named `folder`, as SUMMARY_SCHEMA reads it.
    The older records' variants are read from the names a spec gave its runs, as
    <family>-<budget>_..._lr<lr>[_<variant>]_<hash> (identity.run_name): schema 1 and 2 did not
    record a run's own variant (taken from `folder` against its identity), and schema 1 named a
    DeiT teacher only by its checkpoint path in the identity (<teacher folder>/checkpoints/best.ckpt)."""
    if summary.schema == SUMMARY_SCHEMA:
        return summary
    checkpoint = (identity or {}).get("model.teacher_checkpoint")
    teacher = summary.teacher
    if checkpoint and teacher is None and "teacher" not in summary.nulls:
        name = PurePath(checkpoint).parent.parent.name
        readable = name[:-(HASH_CHARS + 1)] if RUN_FOLDER.fullmatch(name) else name
        family_budget, _, rest = readable.partition("_")
        family, _, budget = family_budget.partition("-")
        lr_at = rest.find("_lr")
        variant = rest[lr_at + 3:].partition("_")[2] if lr_at >= 0 else ""
        teacher = Teacher(name if RUN_FOLDER.fullmatch(name) else None, family, budget or None, variant or None,
                          checkpoint)
    if summary.variant is None and "variant" not in summary.nulls and identity is not None:
        summary = summary.updated(variant=run_variant(folder, identity))
    return replace(summary, schema=SUMMARY_SCHEMA, teacher=teacher)
