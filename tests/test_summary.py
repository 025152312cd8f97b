"""Summary: summary.json as a typed record that reads and writes the file's own bytes (unknown keys
and nulls kept), and the one migration of the records written before the schema had a number."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.runs.run.summary import KEYS, SUMMARY_SCHEMA, Summary, Teacher, migrate

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted((ROOT / "results" / "reference").glob("*/*/summary.json"))


def test_every_committed_summary_is_written_back_byte_for_byte():
    assert len(COMMITTED) >= 50  # every experiment's reference runs
    for path in COMMITTED:
        text = path.read_text()
        summary, record = Summary.from_json(text), json.loads(text)
        assert summary.to_json() == text, path
        assert summary.extra == {} and summary.schema == record.get("schema"), path  # every key a field
        assert summary.status == record["status"] and summary.test_acc == record.get("test_acc"), path


def test_unknown_keys_and_nulls_are_kept_and_an_absent_key_stays_absent():
    record = {"status": "fitted", "plateau": None, "from_a_newer_writer": {"x": [1, 2.5]}, "extra": 3,
              "nulls": "a key named like an attribute", "schema": SUMMARY_SCHEMA, "test_acc": 0.25}
    summary = Summary.from_record(record)
    assert summary.plateau is None and summary.test is None and summary.test_acc == 0.25
    assert summary.extra == {"from_a_newer_writer": {"x": [1, 2.5]}, "extra": 3, "nulls": "a key named like an attribute"}
    assert summary.to_record() == record and "test" not in summary.to_record()
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    assert Summary.from_json(text).to_json() == text
    assert Summary.from_record({"schema": None}).to_record() == {"schema": None}  # a null schema stays null


def test_a_teacher_is_read_as_a_structure_and_written_as_it_was():
    teacher = Teacher("resnet-tiny_x_f0.1_s0_lr0.003_1234abcd", "resnet", "tiny", None,
                      "resnet-tiny_x_f0.1_s0_lr0.003_1234abcd/checkpoints/best.ckpt")
    summary = Summary.from_record({"status": "done", "teacher": teacher.record(), "schema": SUMMARY_SCHEMA})
    assert summary.teacher == teacher and summary.to_record()["teacher"] == teacher.record()


def test_a_record_that_is_not_a_mapping_is_one_error():
    for text in ("[1, 2]", "7", "null"):
        with pytest.raises(ValueError, match="a summary is a mapping"):
            Summary.from_json(text)
    with pytest.raises(ValueError):
        Summary.from_json('{"status": ')


def test_every_field_but_the_bookkeeping_is_a_key_a_record_holds():
    assert "extra" not in KEYS and "nulls" not in KEYS and {"status", "teacher", "schema", "variant"} <= set(KEYS)


IDENT = {"model.family": "vit", "model.budget": "tiny", "data.dataset": "fashion_mnist", "data.fraction": 0.1,
         "data.seed": 0, "model.lr": 0.001, "model.teacher_checkpoint": None}


def test_migration_leaves_todays_records_alone_and_names_no_teacher_without_a_checkpoint():
    today = Summary(status="done", family="vit")
    assert migrate(today, {"model.teacher_checkpoint": "x/checkpoints/best.ckpt"}, "x_1234abcd") is today
    old = Summary.from_record({"status": "done", "family": "vit"})
    migrated = migrate(old, IDENT, "vit-tiny_fashion_mnist_f0.1_s0_lr0.001_1234abcd")
    assert migrated.schema == SUMMARY_SCHEMA and migrated.teacher is None
    assert migrated.to_record() == {"status": "done", "family": "vit", "variant": "default", "schema": SUMMARY_SCHEMA}
    # a record that says it has no teacher keeps saying so; one without an identity gets no variant
    assert migrate(Summary.from_record({"teacher": None}), None, "a_1234abcd").to_record() \
        == {"teacher": None, "schema": SUMMARY_SCHEMA}


def test_an_older_records_own_variant_is_read_from_the_name_its_spec_gave_it():
    for schema in (None, 2):
        old = Summary.from_record({"status": "done"} if schema is None else {"status": "done", "schema": schema})
        assert migrate(old, IDENT, "vit-tiny_fashion_mnist_f0.1_s0_lr0.001_strong_1234abcd").variant == "strong"
        # a name no spec made (a fit's own readable name has no lr) says none, recorded as null
        unnamed = migrate(old, IDENT, "vit-tiny_fashion_mnist_f0.1_s0_1234abcd")
        assert unnamed.variant is None and unnamed.to_record()["variant"] is None
    # a record that says its variant keeps it
    assert migrate(Summary.from_record({"variant": "mine"}), IDENT, "vit-tiny_fashion_mnist_f0.1_s0_lr0.001_1234abcd"
                   ).variant == "mine"


def test_updated_and_without_set_and_drop_keys_as_a_dicts_update_and_pop_do():
    record = {"status": "fitted", "error": "x", "test": {"acc": 0.5}, "kept": 1}
    summary = Summary.from_record(record).updated(status="done", plateau=None, later=2).without("error", "kept")
    assert summary.to_record() == {"status": "done", "test": {"acc": 0.5}, "plateau": None, "later": 2}
    assert summary.plateau is None and summary.error is None and summary.extra == {"later": 2}
