"""The experiments' own records are read as typed data (experiments/report/record_fields.py): every
committed record fits its declared fields, every declared field of the wrong kind is refused naming
its key, every record `tables` reads is declared, and a wrong record ends `tables` in one line."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from experiments.__main__ import main
from experiments.report import records
from experiments.report.record_fields import RECORDS, agree, check, each, either, fields_of, maybe, need
from experiments.runs.run.summary_check import BadRecord

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference"
COMMITTED = sorted(p for p in REFERENCE.rglob("*.json") if fields_of(p) is not None)


def test_every_declared_kind_has_a_committed_record():
    """Each declared record kind is checked against a real one below (a kind no experiment writes is dead)."""
    kinds = {next(k for k in RECORDS if fields_of(p) is RECORDS[k]) for p in COMMITTED}
    assert kinds == set(RECORDS)


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(REFERENCE)))
def test_every_committed_record_fits_its_fields(path):
    check(json.loads(path.read_text()), fields_of(path), path)


def _declared(value, field, where=(), needed=False):
    """(key path, field, needed) of every declared key present in `value`, lists by their first item;
    needed: its mapping must hold it."""
    needed = needed or isinstance(field, need)
    while isinstance(field, (maybe, need, agree)):
        field = field.field
    yield where, field, needed
    if isinstance(field, either) or value is None:
        return
    if isinstance(field, dict) and isinstance(value, dict):
        for k, f in field.items():
            if k in value:
                yield from _declared(value[k], f, (*where, k))
    elif isinstance(field, each) and isinstance(value, dict) and value:
        k = next(iter(value))
        yield from _declared(value[k], field.field, (*where, k))
    elif isinstance(field, list) and isinstance(value, list) and value:
        yield from _declared(value[0], field[0], (*where, 0))


def _wrong_kinds(value) -> list:
    """Values of another kind than `value`'s, as a record from elsewhere might hold."""
    if isinstance(value, bool):
        return ["yes", 1.5]
    if isinstance(value, (int, float)):
        return ["abc", [1], -1e30]
    if isinstance(value, str):
        return [5, ["a"]]
    if isinstance(value, list):
        return [3, {"a": 1}]
    if isinstance(value, dict):
        return [[1, 2], "abc"]
    return []


def _one_of_each_kind() -> list[Path]:
    return [next(p for p in COMMITTED if fields_of(p) is f) for f in RECORDS.values()]


def _mutations():
    for path in _one_of_each_kind():
        record = json.loads(path.read_text())
        for where, field, _ in _declared(record, fields_of(path)):
            if not where:
                continue
            value = record
            for k in where:
                value = value[k]
            if isinstance(field, either):  # alternatives of several kinds (a count or one per family): not one kind
                continue
            for bad in _wrong_kinds(value):
                yield pytest.param(path, where, bad, id=f"{path.name}:{'.'.join(map(str, where))}={bad!r}")


@pytest.mark.parametrize("path, where, bad", list(_mutations()))
def test_a_declared_key_of_another_kind_is_refused_naming_it(path, where, bad):
    """Every declared key present in a committed record, given a value of another kind (or out of
    its range), is refused in one line naming the file and the key; nothing else passes for it."""
    record = json.loads(path.read_text())
    target = record
    for k in where[:-1]:
        target = target[k]
    target[where[-1]] = bad
    field = fields_of(path)
    try:
        check(record, field, path)
    except BadRecord as e:
        key = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in where).lstrip(".")
        assert str(e).startswith(f"{path}: {key} is ") and "allowed" in str(e), str(e)
    else:
        pytest.fail(f"{'.'.join(map(str, where))}={bad!r} passed")


def _needed():
    for path in _one_of_each_kind():
        for where, _, needed in _declared(json.loads(path.read_text()), fields_of(path)):
            if needed:
                yield pytest.param(path, where, id=f"{path.name}:{'.'.join(map(str, where))}")


@pytest.mark.parametrize("path, where", list(_needed()))
def test_a_needed_key_that_is_absent_is_refused_naming_it(path, where):
    """A key a table indexes (need), deleted from a committed record: one line naming it, where a
    KeyError or a join over None ended `tables`."""
    record = json.loads(path.read_text())
    target = record
    for k in where[:-1]:
        target = target[k]
    del target[where[-1]]
    key = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in where).lstrip(".")
    with pytest.raises(BadRecord, match=rf"^{re.escape(str(path))}: {re.escape(key)} is missing: allowed "):
        check(record, fields_of(path), path)


def test_null_where_the_writer_never_writes_one_is_refused(tmp_path):
    path = next(p for p in COMMITTED if p.name == "tuning.json")
    record = json.loads(path.read_text())
    profile = next(iter(record["profiles"]))
    record["profiles"][profile]["trials"][0]["fraction"] = None
    with pytest.raises(BadRecord, match=rf"profiles\.{profile}\.trials\[0\]\.fraction is null: allowed a number from 0 to 1"):
        check(record, fields_of(path), path)
    record = json.loads(path.read_text())
    record["profiles"][profile]["trials"][0]["val_acc_best"] = None  # a trial not finished: written as null
    check(record, fields_of(path), path)


def test_every_record_tables_reads_is_declared(monkeypatch, tmp_path):
    """`make tables` over the committed reference reads each experiment record through read_record,
    and every file it reads has declared fields: a new record kind shows up here until declared."""
    read = []
    real = records.read_json

    def spy(path, hint=""):
        read.append(Path(path))
        return real(path, hint)
    monkeypatch.setattr(records, "read_json", spy)
    assert main(["tables", "--runs_dir", str(REFERENCE), "--out", str(tmp_path), "--readme", ""]) == 0
    present = [p for p in read if p.exists()]
    assert present and all(fields_of(p) is not None for p in present), [p for p in present if fields_of(p) is None]
    assert {p.name for p in present} >= {"sweep.json", "tuning.json", "distill.json", "inductive_bias.json",
                                         "probes.json", "distill_probes.json", "measurements_cpu.json"}


@pytest.mark.parametrize("experiment, record, where, bad, said", [
    ("datascale", "tuning.json", ("profiles", "cpu", "trials", 0, "fraction"), "abc",
     "profiles.cpu.trials[0].fraction is \"abc\": allowed a number from 0 to 1"),
    ("datascale", "sweep.json", ("profiles", "cpu", "families"), 3, "profiles.cpu.families is 3: allowed a list"),
    ("distill", "distill.json", ("profiles", "cpu", "last_invocation", "wall_time_s"), None,
     "profiles.cpu.last_invocation.wall_time_s is null: allowed a number from 0"),
    ("inductive_bias", "inductive_bias.json", ("profiles", "cpu", "families", 0, "run"), 5,
     "profiles.cpu.families[0].run is 5: allowed text"),
    ("complexity", "measurements_cpu.json", ("parts", "ours", "provenance", "seconds"), "abc",
     "parts.ours.provenance.seconds is \"abc\": allowed a number from 0"),
])
def test_a_wrong_record_ends_tables_in_one_line(tmp_path, capsys, experiment, record, where, bad, said):
    """What ended `tables` in a traceback (TypeError, AttributeError) is one error line naming the
    file and the key, exit 2, and the committed tables are not touched."""
    runs = tmp_path / "runs"
    shutil.copytree(REFERENCE / experiment, runs / experiment)
    path = runs / experiment / record
    data = json.loads(path.read_text())
    target = data
    for k in where[:-1]:
        target = target[k]
    target[where[-1]] = bad
    path.write_text(json.dumps(data))
    code = main(["tables", "--experiment", experiment, "--runs_dir", str(runs), "--out", str(tmp_path / "out"),
                 "--readme", ""])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: {path}: {said}"), err
    assert "Traceback" not in "\n".join(err)


CKA = next(p for p in COMMITTED if p.parent.name == "cka")


@pytest.mark.parametrize("change, said", [
    (lambda r: r["matrix"].pop(), "matrix is {n} rows of {cols}: allowed one row per entry of layers and one column "
                                  "per entry of reference_layers ({rows} x {cols}, at least 1 x 1)"),
    (lambda r: [row.pop() for row in r["matrix"]], "matrix is {rows} rows of {k}: allowed"),
    (lambda r: r["reference_layers"].append("extra"), "matrix is {rows} rows of {cols}: allowed"),
    (lambda r: r.update(layers=[], matrix=[]), "matrix is 0 rows of 0: allowed one row per entry of layers and "
                                               "one column per entry of reference_layers (0 x {cols}, at least 1 x 1)"),
], ids=["a row short", "a column short", "a reference layer more", "no layers"])
def test_a_cka_matrix_whose_shape_disagrees_with_its_layers_ends_tables_in_one_line(tmp_path, capsys, change, said):
    """A CKA matrix of the wrong size was drawn with rows labelled by the wrong layers (or read at
    [-1][-1] when empty): its layer lists and its matrix must agree, one error line where not."""
    runs = tmp_path / "runs"
    shutil.copytree(REFERENCE / "inductive_bias", runs / "inductive_bias")
    path = runs / "inductive_bias" / "cka" / CKA.name
    record = json.loads(path.read_text())
    rows, cols = len(record["layers"]), len(record["reference_layers"])
    change(record)
    path.write_text(json.dumps(record))
    n, k = len(record["matrix"]), len(record["matrix"][0]) if record["matrix"] else 0
    code = main(["tables", "--experiment", "inductive_bias", "--runs_dir", str(runs), "--out", str(tmp_path / "out"),
                 "--readme", ""])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: {path}: "
                                                             + said.format(n=n, k=k, rows=rows, cols=cols)), err


def test_a_self_cka_of_a_probe_is_square_over_its_layers():
    path = next(p for p in COMMITTED if p.name == "probes.json" and "cka" in json.loads(p.read_text()))
    record = json.loads(path.read_text())
    record["cka"]["layers"].pop()
    with pytest.raises(BadRecord, match=rf"{re.escape(str(path))}: cka\.matrix is (\d+) rows of \1: allowed one row "
                                        "per entry of layers and one column per entry of layers"):
        check(record, fields_of(path), path)


def test_a_probe_record_with_nan_written_as_null_is_read(tmp_path, capsys):
    """probes.json writes an undefined number as null (a CKA of a constant block, a similarity or an
    attention map with NaN): the record fits, and exp-inductive-bias's tables read it without a word."""
    runs = tmp_path / "runs"
    for experiment in ("datascale", "inductive_bias"):
        shutil.copytree(REFERENCE / experiment, runs / experiment)
    for path in runs.glob("*/*/probes.json"):
        record = json.loads(path.read_text())
        if "cka" in record:
            record["cka"]["matrix"][0][0] = None
        for key in ("cls", "rollout"):
            if "attention_maps" in record:
                record["attention_maps"][key][0][0][0] = None
        if "pos_embed" in record:
            record["pos_embed"]["similarity"][0][0][0][0] = None
        path.write_text(json.dumps(record))
        check(record, fields_of(path), path)
    assert main(["tables", "--experiment", "inductive_bias", "--runs_dir", str(runs), "--out", str(tmp_path / "out"),
                 "--readme", ""]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_the_paper_table_away_from_224_fits_and_is_rendered():
    """At another paper_image_size timm publishes no figure: the writer writes null there, the record
    fits, and the table says there is nothing to differ from."""
    from experiments.complexity.paper_models import paper_table
    from experiments.complexity.tables import render_paper
    path = next(p for p in COMMITTED if p.name.startswith("measurements_"))
    record = json.loads(path.read_text())
    record["parts"]["paper"]["models"] = paper_table(384)
    check(record, fields_of(path), path)
    text = "\n".join(render_paper(record["parts"]["paper"]))
    assert "timm's published figures are for 224x224: no difference to read at this size." in text
