"""What each experiment's own record must hold for the tables to read it: sweep.json, tuning.json,
distill.json, inductive_bias.json, a run's probes.json and distill_probes.json, cka/*.json and
measurements_*.json, each checked when `tables` reads it (report/records.read_record) as a run's
summary.json is (runs/run/summary_check.py). A record may come from elsewhere: a key of the wrong
kind (text where a number goes, a list where a mapping goes, null where the suite never writes one),
or a key a table indexes that is missing, is one error line naming the file, the key and what is
allowed, never a traceback or a table built on it.

A field is declared by the shape the writer gives it:
  a check          a leaf: TEXT, NUMBER, COUNT, ... (a function returning what is allowed, or None)
  {key: field}     a mapping; each declared key that is present is checked, other keys are kept as they are
  [field]          a list, each item checked
  each(field)      a mapping of any keys, each value checked
  maybe(field)     null, or the field (where the writer writes null: a trial not finished, no teacher)
  need(field)      a key its mapping must hold (a reader indexes it); any other declared key may be absent
  either(a, b)     a or b
  agree(field, rule)  a mapping that fits `field` and whose keys agree with one another (rule: a CKA
                   matrix has a row per layer and a column per reference layer)
"""
from __future__ import annotations

import math
from fnmatch import fnmatch
from pathlib import Path

from experiments.runs.run.summary_check import ACCURACY, COUNT, INTEGER, NONNEGATIVE, NUMBER, BadRecord, shown


def TEXT(v) -> str | None:
    return None if isinstance(v, str) else "text"


def BOOL(v) -> str | None:
    return None if isinstance(v, bool) else "true or false"


def MEASURE(v) -> str | None:
    """A probe's number: finite, or NaN where the probe writes that it is undefined (a head with no
    keys to attend, a constant embedding's correlation, a mean over nothing)."""
    ok = (isinstance(v, float) and math.isnan(v)) or NUMBER(v) is None
    return None if ok else "a number or NaN"


def ANY(v) -> None:
    """Any value: a run's options as its spec gives them (a variant's fit options), which the tables show as given."""
    return None


FRACTION = ACCURACY               # a share of the training pool, from 0 to 1


class each:
    def __init__(self, field):
        self.field = field


class maybe:
    def __init__(self, field):
        self.field = field


class need:
    def __init__(self, field):
        self.field = field


class agree:
    """`field`, and then `rule(mapping)`: None, or (key, what it is, what is allowed) where keys disagree."""
    def __init__(self, field, rule):
        self.field, self.rule = field, rule


class described(str):
    """A value told in words (a matrix's shape), not shown as JSON."""


MISSING = object()  # where a needed key is absent


class either:
    def __init__(self, *fields):
        self.fields = fields


def _said(field) -> str:
    """What a field allows, in words."""
    if isinstance(field, dict):
        return "a mapping" + (f" of {', '.join(field)}" if len(field) <= 4 else "")
    if isinstance(field, list):
        return f"a list (of {_said(field[0])})"
    if isinstance(field, each):
        return f"a mapping whose values are each {_said(field.field)}"
    if isinstance(field, maybe):
        return f"null or {_said(field.field)}"
    if isinstance(field, (need, agree)):
        return _said(field.field)
    if isinstance(field, either):
        return " or ".join(_said(f) for f in field.fields)
    return field(None) or "null"  # a leaf says what it allows when given nothing it accepts


def wrong(value, field, where: str) -> tuple[str, object, str] | None:
    """(where, value, allowed) of the first key of `value` that `field` does not allow; None if all fit."""
    if isinstance(field, maybe):
        return None if value is None else wrong(value, field.field, where)
    if isinstance(field, need):
        return wrong(value, field.field, where)
    if isinstance(field, agree):
        if (found := wrong(value, field.field, where)) or (found := field.rule(value)) is None:
            return found
        key, value, allowed = found
        return f"{where}.{key}" if where else key, described(value), allowed
    if isinstance(field, either):
        if any(wrong(value, f, where) is None for f in field.fields):
            return None
        return where, value, _said(field)
    if isinstance(field, (dict, each)):
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            return where, value, _said(field)
        needed = field.items() if isinstance(field, dict) else ()
        absent = [k for k, f in needed if isinstance(f, need) and k not in value]
        if absent:
            return f"{where}.{absent[0]}" if where else absent[0], MISSING, _said(field[absent[0]])
        items = ((k, value[k], f) for k, f in field.items() if k in value) if isinstance(field, dict) \
            else ((k, v, field.field) for k, v in value.items())
        return next((w for k, v, f in items if (w := wrong(v, f, f"{where}.{k}" if where else k))), None)
    if isinstance(field, list):
        if not isinstance(value, list):
            return where, value, _said(field)
        return next((w for i, v in enumerate(value) if (w := wrong(v, field[0], f"{where}[{i}]"))), None)
    allowed = field(value)
    return None if allowed is None else (where, value, allowed)


def check(record: dict, fields: dict, path: Path, hint: str = "") -> dict:
    """`record` when every declared key fits; else one error line naming the first that does not."""
    found = wrong(record, fields, "")
    if found:
        where, value, allowed = found
        said = "is missing" if value is MISSING else f"is {value if isinstance(value, described) else shown(value)}"
        raise BadRecord(f"{path}: {where or 'the record'} {said}: allowed {allowed}{hint}")
    return record


SEED = COUNT
STEPS = either(COUNT, each(either(COUNT, each(COUNT))))   # one count, or per family (and per training-set size)
PER_FAMILY = either(NUMBER, each(either(NUMBER, each(NUMBER))))  # epochs: one, per family, per family and size
VERSIONS = each(TEXT)
INVOCATION = {"wall_time_s": need(NONNEGATIVE), "runs": need(COUNT), "trained": COUNT, "statuses": each(COUNT),
              "jobs": need(COUNT), "pack": COUNT}
TRIAL = {"family": need(TEXT), "variant": TEXT, "budget": TEXT, "fraction": FRACTION, "seed": SEED, "lr": NONNEGATIVE,
         "train_size": maybe(COUNT), "val_size": maybe(COUNT), "status": maybe(TEXT), "val_acc_best": maybe(ACCURACY),
         "plateaued": maybe(BOOL), "run": TEXT}
CHOICE = {"family": need(TEXT), "variant": TEXT, "budget": TEXT, "fraction": need(FRACTION), "lr": need(NONNEGATIVE),
          "tuned_at": FRACTION}
TUNING = {"metric": TEXT, "seed": SEED, "fractions": [FRACTION], "grid": each([NUMBER]), "choices": [CHOICE],
          "trials": [TRIAL]}
AXES = {"families": [TEXT], "fractions": [FRACTION], "seeds": [SEED], "lrs": [NONNEGATIVE],
        "variants": either([TEXT], each(each(ANY))), "budget": TEXT, "budgets": [TEXT], "dataset": TEXT,
        "precision": maybe(TEXT), "epochs": PER_FAMILY, "min_steps": STEPS, "max_steps": maybe(STEPS),
        "val_checks": COUNT, "val_size": maybe(COUNT), "batch_size": either(COUNT, each(COUNT)), "pool_size": COUNT,
        "tuned_fractions": maybe([FRACTION]), "probe_images": COUNT}


def _profiles(profile: dict) -> dict:
    return {"spec": TEXT, "profiles": each({**profile, "last_invocation": INVOCATION})}


def _matrix(entry, said: str):
    """Rows of equal length, each entry passing `entry`."""
    def check(v) -> str | None:
        ok = isinstance(v, list) and all(isinstance(r, list) and len(r) == len(v[0]) for r in v) \
            and all(entry(x) is None for r in v for x in r)
        return None if ok else f"a matrix: rows of equal length of {said}"
    return check


MATRIX = _matrix(MEASURE, "numbers or NaN")  # a CKA record's
# a run's probes.json writes NaN as null (runs/run/probe._rounded): a CKA of a constant block, an undefined similarity
PROBE_MATRIX = _matrix(lambda v: None if v is None else MEASURE(v), "numbers or null")


def matrix_shape(rows: str, columns: str):
    """A rule: `matrix` has one row per entry of the list `rows` and one column per entry of `columns`
    (both at least one: a figure labels each row and column, and a caption reads the corners)."""
    def rule(record: dict) -> tuple[str, str, str] | None:
        if not all(k in record for k in ("matrix", rows, columns)):
            return None  # a key left out: not drawn
        m, n_rows, n_cols = record["matrix"], len(record[rows]), len(record[columns])
        if n_rows and n_cols and len(m) == n_rows and all(len(r) == n_cols for r in m):
            return None
        return ("matrix", f"{len(m)} rows of {len(m[0]) if m else 0}",
                f"one row per entry of {rows} and one column per entry of {columns} ({n_rows} x {n_cols}, "
                "at least 1 x 1)")
    return rule


def whole(fields: dict) -> dict:
    """A mapping that must hold every declared key (a table indexes each)."""
    return {k: f if isinstance(f, need) else need(f) for k, f in fields.items()}


PROVENANCE = whole({"commit": TEXT, "date": TEXT, "device": TEXT, "hardware": TEXT, "seconds": NONNEGATIVE,
                    "threads": COUNT, "versions": VERSIONS})
TIMING = {"model": need(TEXT), "device": TEXT, "batch_size": COUNT, "resolution": need(COUNT),
          **{f"{phase}_{k}": maybe(f) for phase in ("train", "infer")
             for k, f in (("img_s", NONNEGATIVE), ("peak_mib", NONNEGATIVE), ("reps", COUNT), ("seconds", NONNEGATIVE),
                          ("step_ms", NONNEGATIVE))},
          "train_status": need(TEXT), "infer_status": need(TEXT)}
COSTS = {"flops": need([whole({"attention_gflops": NONNEGATIVE, "gflops": NONNEGATIVE, "resolution": COUNT})]),
         "timing": need([TIMING]), "model": need(TEXT), "budget": TEXT, "timm_name": TEXT}
RUN_PROBES = {"commit": TEXT, "hardware": TEXT, "versions": VERSIONS, "split": TEXT, "images": COUNT}

# each record by its file name (and folder, for cka/): what its writer writes, as far as the tables read it
RECORDS = {
    "sweep.json": _profiles({**AXES, "tuning_seed": SEED, "main_runs": each(TEXT), "pack": COUNT, "jobs": COUNT,
                             "sample_efficiency_accuracy": maybe(ACCURACY)}),
    "tuning.json": _profiles(TUNING),
    "distill.json": _profiles({
        "axes": {**AXES, "students": [TEXT], "teachers": [TEXT], "student": TEXT, "student_lr_of": maybe(TEXT),
                 "matched": each(TEXT)},
        "students": [{"student": TEXT, "teacher": maybe(TEXT), "variant": TEXT, "fraction": FRACTION, "seed": SEED,
                      "run": TEXT, "teacher_run": maybe(TEXT)}],
        "teachers": [{"family": TEXT, "fraction": FRACTION, "seed": SEED, "run": TEXT}],
        "tuning": {"choices": [CHOICE], "trials": [TRIAL]}}),
    "inductive_bias.json": _profiles({
        "axes": need({**AXES, "ablated": TEXT, "ablation_args": each(each(ANY)),
                 "ablations": each([FRACTION]), "family_fractions": [FRACTION], "probes": each([TEXT]),
                 "probe_patch": need(COUNT)}),
        "families": need([{"family": need(TEXT), "budget": TEXT, "fraction": FRACTION, "seed": SEED, "run": TEXT,
                      "teacher_run": maybe(TEXT)}]),
        "ablations": [{"variant": need(TEXT), "budget": TEXT, "fraction": FRACTION, "seed": SEED, "run": TEXT}],
        "cka": [TEXT], "tuning": {"choices": [CHOICE], "trials": [TRIAL]}}),
    "probes.json": {
        **RUN_PROBES, "family": TEXT, "seed": SEED, "patch": COUNT, "precision": maybe(TEXT), "parts": [TEXT],
        "figures": [TEXT], "not_applicable": each(TEXT),
        **{k: [[maybe(MEASURE)]] for k in ("attention_distance", "attention_distance_uniform", "attention_entropy")},
        "robustness": {**whole({"clean_accuracy": ACCURACY, "patch": COUNT, "drop_fractions": [FRACTION],
                                "patchdrop_accuracy": [ACCURACY], "shifts": [INTEGER], "shift_accuracy": [ACCURACY],
                                "shift_consistency": ACCURACY, "shuffle_grids": [COUNT],
                                "shuffle_accuracy": [ACCURACY]}),
                       "majority_rate": ACCURACY, "n_images": COUNT, "max_shift": COUNT, "fill": TEXT,
                       "fill_value": [NUMBER],
                       "patchdrop_top_share": [MEASURE], "shift_accuracy_circular": [ACCURACY],
                       "shift_is_patch_multiple": [BOOL], "shift_consistency_circular": ACCURACY},
        "attention_maps": {**whole({"images": [PROBE_MATRIX], "cls": [PROBE_MATRIX], "rollout": [PROBE_MATRIX]}),
                           "labels": [INTEGER]},
        "cka": agree({"layers": [TEXT], "matrix": PROBE_MATRIX}, matrix_shape("layers", "layers")),
        "pos_embed": {"similarity": [[PROBE_MATRIX]], "bands": [MEASURE], "two_d": BOOL,
                      **{k: MEASURE for k in ("far_mean", "gap", "grid_correlation", "horizontal_mean",
                                                    "neighbour_mean", "raster_correlation", "vertical_mean")}}},
    "distill_probes.json": {**RUN_PROBES, "agreement": each({"cls": ACCURACY, "dist": ACCURACY, "both": ACCURACY}),
                            "teacher_runs": each(TEXT), "token_cosine": [MEASURE]},
    "cka/*.json": agree({**RUN_PROBES, **whole({"family": TEXT, "reference": TEXT, "fraction": FRACTION,
                                                "layers": [TEXT], "reference_layers": [TEXT], "matrix": MATRIX}),
                         "seed": SEED, "run": TEXT, "reference_run": TEXT},
                        matrix_shape("layers", "reference_layers")),
    "measurements_*.json": {"experiment": TEXT, "profile": need(TEXT), "parts": need({
        "ours": {"batch_size": need(COUNT), "budget": TEXT, "in_chans": COUNT, "crossover": need([[TEXT]]),
                 "models": need([COSTS]), "provenance": need(PROVENANCE)},
        "scaling": {"batch_size": need(COUNT), "crossover": need([[TEXT]]), "models": need([COSTS]),
                    "provenance": need(PROVENANCE)},
        "paper": whole({"image_size": COUNT, "published_source": TEXT, "provenance": PROVENANCE,
                        "models": [whole({"label": TEXT, "timm_name": TEXT, "image_size": COUNT, "params": COUNT,
                                          **{k: NUMBER for k in ("attention_gflops", "gflops", "gmacs", "params_m")},
                                          # null at a size other than 224, where timm publishes no figure
                                          **{k: maybe(NUMBER) for k in ("gmacs_rel_diff", "params_rel_diff",
                                                                        "published_gmacs", "published_params_m")}})],
                        "seed_claims": [{"claim": need(TEXT), "timm_name": TEXT, "verdict": need(TEXT), "depth": COUNT,
                                         "image_size": COUNT,
                                         **{k: maybe(NUMBER) for k in ("claimed_params_m", "formula_layer_g",
                                                                       "formula_model_g")},
                                         **{k: need(maybe(NUMBER)) for k in ("claimed_g", "measured_gflops",
                                                                             "measured_gmacs")},
                                         "measured_params_m": maybe(NUMBER)}]}),
        "interpolation": whole({"batch_size": COUNT, "eval_images": COUNT, "finetune_steps": COUNT, "lr": NONNEGATIVE,
                                "source_run": TEXT, "target_size": COUNT, "provenance": PROVENANCE,
                                "rows": [whole({"method": TEXT, "phase": TEXT, "resolution": COUNT,
                                                "finetune_steps": COUNT, "val_acc": ACCURACY, "val_images": COUNT,
                                                "test_acc": ACCURACY, "test_images": COUNT})]})})},
}


def fields_of(path: Path) -> dict | agree | None:
    """The declared fields of the record at `path` (by its name, and for cka/ its folder); None for another file."""
    path = Path(path)
    name = f"{path.parent.name}/{path.name}" if path.parent.name == "cka" else path.name
    return next((f for pattern, f in RECORDS.items() if fnmatch(name, pattern)), None)
