"""RunFolder: the records of a run folder read at today's summary schema (an older one migrated),
a DeiT teacher recorded as a structure, shared runs found in the records' data, and every JSON
record written atomically (a planted link replaced, never followed)."""
from __future__ import annotations

import ast
import json
from pathlib import Path

from modules.files import write_json

from experiments.datascale.numbers import grouping_identity
from experiments.runs.run.identity import config_hash, run_name
from experiments.runs.run.run_folder import RunFolder, teacher_of
from experiments.runs.run.summary import SUMMARY_SCHEMA, Summary, Teacher, migrate
from experiments.runs.sweep.shared import shared_entries

ROOT = Path(__file__).resolve().parents[1]
# a student and its teacher as the reference held them before the summary schema had a number
OLD_RECORDS = Path(__file__).resolve().parent / "old_schema_records" / "distill"
STUDENT = OLD_RECORDS / "deit-tiny_fashion_mnist_f0.002_s0_lr0.003_hard-resnet-at-vit_7191c08a"
SECRET = b"a file outside the experiment folder: not one byte of it may change\n"


def test_a_committed_summary_of_the_old_schema_reads_as_today_with_its_teacher_as_a_structure():
    stored = json.loads((STUDENT / "summary.json").read_text())
    assert "schema" not in stored and "teacher" not in stored  # written before the schema had a number
    summary = RunFolder(STUDENT).summary()
    assert summary.schema == SUMMARY_SCHEMA
    assert summary.teacher == Teacher("resnet-tiny_fashion_mnist_f0.002_s0_lr0.003_resnet-at-vit_28174dca",
                                      "resnet", "tiny", "resnet-at-vit",
                                      RunFolder(STUDENT).identity()["model.teacher_checkpoint"])
    assert summary.variant == "hard-resnet-at-vit"  # its own, from its folder's name: the old schemas had none
    record = summary.to_record()
    assert {k: v for k, v in record.items() if k not in ("schema", "teacher", "variant")} == stored  # nothing else moves
    assert RunFolder(OLD_RECORDS / summary.teacher.run).summary().variant == "resnet-at-vit"


IDENT = {"model.family": "resnet", "model.budget": "tiny", "data.dataset": "fashion_mnist",
         "data.fraction": 0.01, "data.seed": 1, "model.lr": 0.003}


def _teacher_folder(runs: Path, variant: str, record: dict | None, seed: int = 1) -> Path:
    """A teacher's folder named as a spec names its `variant`, with its identity and `record` as its summary."""
    ident = {**IDENT, "data.seed": seed}
    name = run_name("resnet", "tiny", "fashion_mnist", 0.01, seed, variant, 0.003)
    folder = RunFolder(runs / "distill" / f"{name}_{config_hash(ident)}")
    folder.path.mkdir(parents=True)
    folder.write_identity(ident, config_hash(ident))
    if record is not None:
        write_json(folder.summary_file, record)
    return folder.path


def test_a_teacher_is_recorded_as_a_structure_and_read_back_as_written(tmp_path):
    runs = tmp_path / "runs"
    for variant, label in (("default", "resnet-tiny"), ("resnet-at-vit", "resnet-tiny_resnet-at-vit")):
        # the teacher's own record says its variant (as record_summary writes it today)
        teacher_dir = _teacher_folder(runs, variant, {"status": "done", "variant": variant, "schema": SUMMARY_SCHEMA})
        student_ident = {"model.family": "deit", "model.distillation": "hard",
                         "model.teacher_checkpoint": f"{teacher_dir.name}/checkpoints/best.ckpt"}
        # the student trains in another experiment: the pool finds its teacher's folder there
        teacher = teacher_of(student_ident, runs)
        assert teacher == Teacher(teacher_dir.name, "resnet", "tiny", None if variant == "default" else variant,
                                  student_ident["model.teacher_checkpoint"])
        student = RunFolder(runs / "datascale" / f"deit-{variant}")
        student.path.mkdir(parents=True)
        student.write_summary(Summary(status="done", family="deit", teacher=teacher))
        read = student.summary()
        assert read.teacher == teacher and read.schema == SUMMARY_SCHEMA
        assert json.loads(student.summary_file.read_text())["teacher"] == teacher.record()
        assert grouping_identity(student_ident, read.teacher)["model.teacher_checkpoint"] == label
        # a record of the old schema names the same teacher alike: old and new students group together
        assert migrate(Summary.from_record({"status": "done"}), student_ident, student.name).teacher == teacher
    assert teacher_of({"model.family": "vit", "model.teacher_checkpoint": None}, runs) is None


def test_a_teachers_variant_is_the_one_its_own_record_says(tmp_path):
    """The student takes its teacher's variant from the teacher's summary, never from the teacher's
    folder name: a record of an older schema, which did not say it, is migrated from its own name."""
    runs = tmp_path / "runs"

    def taught_by(teacher_dir: Path) -> Teacher:
        return teacher_of({"model.teacher_checkpoint": f"{teacher_dir.name}/checkpoints/best.ckpt"}, runs)
    # named as the default variant, recorded as another: the record wins
    assert taught_by(_teacher_folder(runs, "default", {"variant": "strong", "schema": SUMMARY_SCHEMA},
                                     seed=2)).variant == "strong"
    assert taught_by(_teacher_folder(runs, "resnet-at-vit", {"status": "done"}, seed=3)).variant == "resnet-at-vit"
    assert taught_by(_teacher_folder(runs, "resnet-at-vit", {"status": "done", "schema": 2}, seed=4)).variant \
        == "resnet-at-vit"
    # a teacher that recorded nothing (killed before its summary) says no variant
    assert taught_by(_teacher_folder(runs, "resnet-at-vit", None, seed=5)).variant is None


def test_shared_runs_are_the_entries_a_record_holds_not_a_substring_of_its_text(tmp_path):
    runs = tmp_path / "runs"
    for name in ("datascale/a_0123abcd", "datascale/a_0123abcd-b_4567cdef", "datascale/other_89abcdef"):
        (runs / name).mkdir(parents=True)
        (runs / name / "summary.json").write_text("{}")
    exp = runs / "distill"
    exp.mkdir()
    # "datascale/a_0123abcd" occurs in the text only inside another entry and as part of a longer text
    (exp / "distill.json").write_text(json.dumps({"students": [{"run": "datascale/a_0123abcd-b_4567cdef"}],
                                                  "note": "trained after \"datascale/a_0123abcd\" finished",
                                                  "datascale/other_89abcdef": 1}))
    (exp / "broken.json").write_text('{"run": "datascale/a_0123abcd"')  # not JSON: names nothing
    assert shared_entries(exp) == ["datascale/a_0123abcd-b_4567cdef", "datascale/other_89abcdef"]


def test_every_json_record_is_written_through_the_atomic_write():
    """No module writes JSON but through files.write_json or files.write_atomic (a temporary file
    renamed over the name): json.dump to an open file, or json.dumps into write_text or a file's
    write, would write through a planted link, and a kill would leave half a record."""
    offenders = []
    for path in sorted((*ROOT.glob("experiments/**/*.py"), *ROOT.glob("modules/**/*.py"),
                        *ROOT.glob("datamodules/**/*.py"))):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            writes = node.func.attr in ("write_text", "write_bytes", "write")
            dumps = any(isinstance(n, ast.Attribute) and n.attr == "dumps" for a in node.args for n in ast.walk(a))
            json_dump = node.func.attr == "dump" and isinstance(node.func.value, ast.Name) and node.func.value.id == "json"
            if json_dump or writes and dumps:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    # the decoded-data cache's row counts: the user's own cache folder, not a record (docs/safety.md)
    assert offenders == ["datamodules/sources.py:70"], offenders


def test_sweep_tuning_and_members_records_replace_a_planted_link(tmp_path):
    from modules.files import write_json
    from experiments.runs.sweep.execute import _members_file
    from experiments.runs.sweep.spec import Run
    victim = tmp_path / "outside" / "victim.txt"
    victim.parent.mkdir()
    victim.write_bytes(SECRET)
    exp = tmp_path / "runs" / "datascale"
    group = [Run(k, f"r{k}", "vit", 0.1, k, "default", ("--seed_everything", str(k)), run_dir=exp / f"r{k}_0000000{k}")
             for k in range(2)]
    from experiments.runs.packed.fit import group_dir
    members = group_dir([r.run_dir for r in group]) / "members.json"
    for link in (exp / "sweep.json", exp / "tuning.json", members):
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(victim)
    write_json(exp / "sweep.json", {"spec": "datascale", "profiles": {}}, sort_keys=False)
    write_json(exp / "tuning.json", {"spec": "datascale", "profiles": {}})
    assert _members_file(group, tmp_path / "log.txt") == members
    assert victim.read_bytes() == SECRET
    for record in (exp / "sweep.json", exp / "tuning.json", members):
        assert not record.is_symlink() and json.loads(record.read_text())
    assert json.loads(members.read_text()) == {"members": [list(r.args) for r in group]}
