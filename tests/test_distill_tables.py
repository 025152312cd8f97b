"""results/distill.{md,csv,png} from hand-written run folders and a hand-written distill.json (no
training): the DeiT-style table per head, none's single head, the paired differences of DeiT's three
claims, agreement and token cosine, the runs outside the record, the generated reading, byte-identical
regeneration and the one-line errors. Every expected number is computed here by hand (statistics.stdev
and a printed t quantile), not by the code under test."""
from __future__ import annotations

import csv
import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from experiments.__main__ import main
from experiments.distill.numbers import CLAIMS, NAME, RECORD
from experiments.distill.tables import make_tables
from experiments.distill.words import judge
from experiments.report.claim import Claim
from experiments.statistics import Estimate
from experiments.report.verdicts import size_against

from .test_tensorboard import events
from .conftest import val_curve

T975_DF2 = 4.302652729911275  # t_{0.975, 2}: three seeds
FRACTIONS = (0.01, 0.05)
SEEDS = (0, 1, 2)
SIZES = {0.01: 590, 0.05: 2950}
STEPS = {0.01: 150, 0.05: 231}
TEACHERS = {("resnet", 0.01): (0.80, 0.82, 0.84), ("vit", 0.01): (0.60, 0.62, 0.64),     # 0.20 apart
            ("resnet", 0.05): (0.88, 0.89, 0.90), ("vit", 0.05): (0.875, 0.885, 0.905)}  # similar
STUDENTS = ("none", "soft/resnet", "hard/resnet", "hard/vit")
# the reported head of each seed: cls+dist for a distilled student, cls for none
REPORTED = {("none", 0.01): (0.70, 0.72, 0.74), ("soft/resnet", 0.01): (0.71, 0.74, 0.74),
            ("hard/resnet", 0.01): (0.74, 0.78, 0.82), ("hard/vit", 0.01): (0.72, 0.75, 0.77),
            ("none", 0.05): (0.80, 0.81, 0.83), ("soft/resnet", 0.05): (0.82, 0.83, 0.84),
            ("hard/resnet", 0.05): (0.85, 0.86, 0.86), ("hard/vit", 0.05): (0.84, 0.84, 0.86)}
CLS, DIST = -0.01, 0.005   # a distilled student's cls and dist heads, relative to its cls+dist
# agreement of the reported head with a teacher; every other (student, teacher, fraction): 0.5 + 0.01 * seed
AGREE = {("hard/resnet", "resnet", 0.01): (0.90, 0.92, 0.94), ("none", "resnet", 0.01): (0.80, 0.81, 0.82)}
STILL_IMPROVING = ("hard/vit", 0.05, 2)
UNPLANNED = "deit_0badc0de"


def ci(values) -> float:
    return T975_DF2 * statistics.stdev(values) / math.sqrt(len(values))


def diffs(a, b) -> list[float]:
    return [x - y for x, y in zip(a, b)]


def _summary(run: str, family: str, fraction: float, seed: int, test: dict, *, status="done", plateaued=True) -> dict:
    return {"run": run, "family": family, "fraction": fraction, "seed": seed, "train_size": SIZES[fraction],
            "val_size": 1000, "status": status, "test": test, "test_acc": test.get("acc"), "val_acc_best": 0.5,
            "val_history": val_curve(STEPS[fraction], plateaued), "steps": STEPS[fraction], "wall_time_s": 60.0, "images_per_sec": 300.0,
            "params": 1000, "hardware": "test-cpu (2 cores)", "versions": {"python": "3.11.2", "torch": "2.3.0"},
            "commit": "abc1234"}


def _write(exp: Path, run: str, summary: dict, probes: dict | None = None) -> None:
    (exp / run).mkdir(parents=True)
    (exp / run / "summary.json").write_text(json.dumps(summary))
    if probes is not None:
        (exp / run / "distill_probes.json").write_text(json.dumps(probes))


def _probes(student: str, fraction: float, seed: int, teacher_runs: dict) -> dict:
    agreement = {}
    for t in teacher_runs:
        v = AGREE.get((student, t, fraction), (0.50, 0.51, 0.52))[seed]
        agreement[t] = {"cls": v, "dist": round(v - 0.02, 6), "both": v}
    cosine = [0.10 + 0.01 * seed, 0.40, 0.70, 0.90 + 0.01 * seed] if student == "hard/resnet" \
        else [0.05, 0.10, 0.20, 0.30]
    return {"images": 2000, "split": "test", "teacher_runs": teacher_runs, "agreement": agreement,
            "token_cosine": cosine}


def write_experiment(exp: Path, improving: tuple | None = STILL_IMPROVING, students_run: tuple = STUDENTS,
                     student_lr_of: str | None = None) -> None:
    """2 fractions x 3 seeds, teachers resnet and vit, students none, soft/resnet, hard/resnet,
    hard/vit; one finished run the record does not list, one tuning trial that was never tested,
    and a gpu profile with nothing finished. `improving`: the (student, fraction, seed) whose run
    was still improving at its last validation (None: every run plateaued). `students_run`: the
    profile's students; `student_lr_of`: the family whose lr the students take (its runs are then the
    students' no-distillation baseline too)."""
    teachers, students, names = [], [], {}
    for (family, f), accs in TEACHERS.items():
        for seed in SEEDS:
            run = names[family, f, seed] = f"{family}_{len(names):08x}"
            _write(exp, run, _summary(run, family, f, seed, {"acc": accs[seed]}))
            teachers.append({"family": family, "fraction": f, "seed": seed, "run": run})
    for (student, f), accs in ((k, v) for k, v in REPORTED.items() if k[0] in students_run):
        variant, _, teacher = student.partition("/")
        for seed in SEEDS:
            run = f"deit_{len(names) + len(students):08x}"
            a = accs[seed]
            test = {"acc": a, "acc_cls": a, "acc_dist": 0.1} if variant == "none" else \
                {"acc": a, "acc_cls": round(a + CLS, 6), "acc_dist": round(a + DIST, 6)}
            plateaued = (student, f, seed) != improving
            mine = {t: names[t, f, seed] for t in ("resnet", "vit")}
            _write(exp, run, _summary(run, "deit", f, seed, test, plateaued=plateaued), _probes(student, f, seed, mine))
            students.append({"student": student, "variant": variant, "teacher": teacher or None, "fraction": f,
                             "seed": seed, "run": run, "teacher_run": names[teacher, f, seed] if teacher else None})
    _write(exp, UNPLANNED, _summary(UNPLANNED, "deit", 0.01, 0, {"acc": 0.99, "acc_cls": 0.99, "acc_dist": 0.99}))
    trial = "resnet_7e57e57e"
    _write(exp, trial, {**_summary(trial, "resnet", 0.01, 0, {}, status="fitted"), "wall_time_s": 30.0})
    choices = [{"family": fam, "fraction": f, "lr": lr, "tuned_at": 0.01}
               for fam, lr in (("resnet", 0.003), ("vit", 0.01), ("deit", 0.003)) for f in FRACTIONS]
    axes = {"dataset": "fashion_mnist", "budget": "tiny", "fractions": list(FRACTIONS), "seeds": list(SEEDS),
            "teachers": ["resnet", "vit"], "students": list(students_run),
            **({"student_lr_of": student_lr_of} if student_lr_of else {}),
            "variants": {"none": {"model.distillation": "none"},
                         "soft": {"model.distillation": "soft", "model.distill_tau": 3, "model.distill_alpha": 0.1},
                         "hard": {"model.distillation": "hard", "model.distill_alpha": 0.5}},
            "lrs": [0.003, 0.01], "tuned_fractions": [0.01], "batch_size": 64, "epochs": 5, "min_steps": 150,
            "val_checks": 10, "val_size": 1000, "probe_images": 2000, "pool_size": 59000}
    cpu = {"axes": axes, "tuning": {"trials": [{"family": "resnet", "fraction": 0.01, "seed": 0, "lr": 0.01,
                                                "status": "fitted", "run": trial}], "choices": choices},
           "teachers": teachers, "students": students,
           "last_invocation": {"wall_time_s": 1700, "runs": 40, "statuses": {"done": 38, "fitted": 2}, "jobs": 2}}
    gpu = {"axes": {**axes, "seeds": [0]}, "tuning": {"trials": [], "choices": []},
           "teachers": [{"family": "resnet", "fraction": 0.01, "seed": 0, "run": "resnet_90909090"}],
           "students": [{"student": "none", "variant": "none", "teacher": None, "fraction": 0.01, "seed": 0,
                         "run": "deit_90909090", "teacher_run": None}]}
    (exp / RECORD).write_text(json.dumps({"spec": "distill", "profiles": {"cpu": cpu, "gpu": gpu}}))


def _made(root: Path, improving: tuple | None) -> dict:
    exp, out = root / "runs" / "distill", root / "results"
    write_experiment(exp, improving)
    paths = make_tables(exp, out)
    with (out / f"{NAME}.csv").open() as f:
        rows = list(csv.DictReader(f))
    return {"exp": exp, "out": out, "paths": paths, "md": (out / f"{NAME}.md").read_text(), "rows": rows}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """One run still improving: its cells are marked and nothing is read."""
    return _made(tmp_path_factory.mktemp("distill"), STILL_IMPROVING)


@pytest.fixture(scope="module")
def converged(tmp_path_factory):
    """The same runs, every one plateaued: the readings and verdicts are written."""
    return _made(tmp_path_factory.mktemp("distill-converged"), None)


def section(md: str, title: str) -> str:
    return md.split(f"### {title}\n", 1)[1].split("\n###", 1)[0]


def table(text: str) -> dict[str, dict[str, str]]:
    """The first markdown table in text, by its first cell."""
    lines = [ln for ln in text.split("\n\n") if ln.startswith("|")][0].splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]
    return {r[0]: dict(zip(head, r)) for r in rows}


def csv_row(rows, student: str, fraction: float, head: str) -> dict:
    (row,) = [r for r in rows if r["student"] == student and float(r["fraction"]) == fraction and r["head"] == head]
    return row


def test_outputs_and_the_table_per_head(made):
    assert made["paths"] == [made["out"] / f"{NAME}.csv", made["out"] / f"{NAME}.md", made["out"] / f"{NAME}.png"]
    main = table(section(made["md"], "Test accuracy by inference head"))
    hard = REPORTED["hard/resnet", 0.01]                       # 0.74, 0.78, 0.82: mean 0.78, sd 0.04
    assert main["hard/resnet"]["cls+dist, 0.01"] == f"0.7800 ± {ci(hard):.4f}" == "0.7800 ± 0.0994"
    assert main["hard/resnet"]["cls, 0.01"] == f"0.7700 ± {ci(hard):.4f}"
    assert main["hard/resnet"]["dist, 0.01"] == f"0.7850 ± {ci(hard):.4f}"
    assert main["hard/resnet"]["teacher"] == "resnet"
    assert main["teacher resnet"]["cls, 0.01"] == "0.8200 ± 0.0497" and main["teacher resnet"]["dist, 0.01"] == "—"
    assert main["teacher vit"]["cls, 0.05"] == f"{statistics.fmean(TEACHERS['vit', 0.05]):.4f} ± " \
                                               f"{ci(TEACHERS['vit', 0.05]):.4f}"
    # a run still improving marks its cells, and the footnote names it
    assert main["hard/vit"]["cls+dist, 0.05"].endswith(" †")
    assert not main["hard/vit"]["cls+dist, 0.01"].endswith("†")
    assert "† still improving at its last validation: 1 run, each with what the plateau rule read" in made["md"]
    (named,) = [ln for ln in made["md"].splitlines() if ln.startswith("- ") and "last quarter" in ln]
    # the footnote names the student and says what the rule read: val_curve's climb of 2 points a quarter
    assert named.startswith("- deit_") and ": fails its gain and its slope: last quarter's mean +2.01 points" in named
    assert named.endswith("last validation 0.800, best 0.800 at step 231 of 231")
    # ... and every paired difference resting on it, in the claims' table
    claims = section(made["md"], "DeiT's claims: paired differences by seed")
    rows = {ln.split(" | ")[0].lstrip("| ") + ", " + ln.split(" | ")[1]: ln.split(" | ")[2]
            for ln in claims.splitlines() if ln.startswith("| hard/")}
    assert rows["hard/vit (cls+dist) − none (cls), 0.05"].endswith(" †")
    assert not rows["hard/vit (cls+dist) − none (cls), 0.01"].endswith("†")
    assert not rows["hard/resnet (cls+dist) − none (cls), 0.05"].endswith("†")
    assert "† rests on a run still improving at its last validation: shown, not read." in claims
    # the csv: mean, interval and the paired difference to none's cls by seed
    row = csv_row(made["rows"], "hard/resnet", 0.01, "both")
    d = diffs(hard, REPORTED["none", 0.01])                    # 0.04, 0.06, 0.08
    assert float(row["test_acc_mean"]) == pytest.approx(0.78, abs=1e-6)
    assert float(row["test_acc_ci95"]) == pytest.approx(ci(hard), abs=1e-6)
    assert float(row["delta_vs_none"]) == pytest.approx(0.06, abs=1e-6)
    assert float(row["delta_vs_none_ci95"]) == pytest.approx(ci(d), abs=1e-6)
    assert float(row["delta_vs_none_ci95"]) == pytest.approx(0.049683, abs=1e-6)
    assert row["delta_pairs"] == "3" and row["seeds"] == "3" and row["teacher"] == "resnet" and row["variant"] == "hard"
    assert float(row["teacher_acc_mean"]) == pytest.approx(0.82, abs=1e-6)
    assert (row["train_size"], row["val_size"], row["lr"], row["steps"], row["still_improving"]) == \
        ("590", "1000", "0.003", "150", "0")
    dist = csv_row(made["rows"], "hard/resnet", 0.01, "dist")
    assert float(dist["delta_vs_none"]) == pytest.approx(0.06 + DIST, abs=1e-6)
    teacher = csv_row(made["rows"], "resnet", 0.05, "-")
    assert teacher["role"] == "teacher" and teacher["lr"] == "0.003" and teacher["delta_vs_none"] == ""
    assert float(teacher["test_acc_mean"]) == pytest.approx(0.89, abs=1e-6)
    assert csv_row(made["rows"], "hard/vit", 0.05, "cls")["still_improving"] == "1"


def test_none_reports_only_its_cls_head(made):
    heads = [(r["fraction"], r["head"]) for r in made["rows"] if r["student"] == "none"]
    assert heads == [("0.01", "cls"), ("0.05", "cls")]
    none = csv_row(made["rows"], "none", 0.05, "cls")
    assert float(none["test_acc_mean"]) == pytest.approx(statistics.fmean((0.80, 0.81, 0.83)), abs=1e-6)
    assert none["delta_vs_none"] == none["teacher"] == none["agreement_with_teacher_mean"] == ""
    row = table(section(made["md"], "Test accuracy by inference head"))["none"]
    assert row["dist, 0.01"] == row["cls+dist, 0.01"] == row["dist, 0.05"] == row["cls+dist, 0.05"] == "—"
    assert row["cls, 0.01"] == f"0.7200 ± {ci(REPORTED['none', 0.01]):.4f}" and row["teacher"] == "—"
    assert "0.1000" not in section(made["md"], "Test accuracy by inference head")  # none's untrained dist head


def test_claims_agreement_and_token_cosine(converged):
    md = converged["md"]
    claims = section(md, "DeiT's claims: paired differences by seed")
    hard_soft = diffs(REPORTED["hard/resnet", 0.01], REPORTED["soft/resnet", 0.01])       # 0.03, 0.04, 0.08
    assert f"| hard/resnet − soft/resnet (cls+dist) | 0.01 | +0.0500 ± {ci(hard_soft):.4f} | 3 |" in claims
    cnn = diffs(REPORTED["hard/resnet", 0.01], REPORTED["hard/vit", 0.01])                 # 0.02, 0.03, 0.05
    assert (f"| hard/resnet − hard/vit (cls+dist) | 0.01 | +{statistics.fmean(cnn):.4f} ± {ci(cnn):.4f} | 3 | "
            f"resnet 0.8200 ± 0.0497 | vit 0.6200 ± 0.0497 | +0.2000 ± 0.0000 |") in claims
    agree = table(section(md, "Agreement with each teacher"))
    assert agree["hard/resnet"]["resnet, 0.01"] == f"0.9200 ± {ci((0.90, 0.92, 0.94)):.4f}"
    assert agree["none"]["resnet, 0.01"] == f"0.8100 ± {ci((0.80, 0.81, 0.82)):.4f}"
    raised = diffs((0.90, 0.92, 0.94), (0.80, 0.81, 0.82))                                # 0.10, 0.11, 0.12
    assert (f"- hard/resnet against none, agreement with resnet at 590 images: +0.1100 ± {ci(raised):.4f} (3 pairs): "
            "distilling from resnet raises agreement with resnet, as DeiT reports") in md
    row = csv_row(converged["rows"], "hard/resnet", 0.01, "both")
    assert float(row["agreement_with_teacher_mean"]) == pytest.approx(0.92, abs=1e-6)
    assert float(row["agreement_with_teacher_ci95"]) == pytest.approx(ci((0.90, 0.92, 0.94)), abs=1e-6)
    assert float(csv_row(converged["rows"], "hard/resnet", 0.01, "dist")["agreement_with_teacher_mean"]) == \
        pytest.approx(0.90, abs=1e-6)
    # hard/resnet's cosine per seed: (0.10, 0.40, 0.70, 0.90) + 0.01 * seed at blocks 1 and 4
    cosine = table(section(md, "Class and distillation tokens"))
    assert [cosine["hard/resnet"][f"block {b}, 0.05"] for b in (1, 2, 4)] == ["0.1100", "0.4000", "0.9100"]
    assert cosine["none"]["block 4, 0.01"] == "0.3000"


def test_runs_outside_the_plan_are_left_out_and_named(made):
    assert f"- not in the table: 1 finished run that {RECORD} does not list: {UNPLANNED}" in made["md"]
    assert "resnet_7e57e57e" not in made["md"].split("## Profile")[0]    # a tuning trial is in the record
    assert not any(r["test_acc_mean"].startswith("0.99") for r in made["rows"])
    none = csv_row(made["rows"], "none", 0.01, "cls")
    assert float(none["test_acc_mean"]) == pytest.approx(0.72, abs=1e-6) and none["seeds"] == "3"
    # the gpu profile has no finished student: no section of its own
    assert "## Profile cpu" in made["md"] and "Profile gpu" not in made["md"]
    assert {r["profile"] for r in made["rows"]} == {"cpu"}


def _teacher_claims(made: dict) -> dict:
    """fraction -> the claim that the resnet and vit teachers match in accuracy."""
    from experiments.distill.numbers import claims, load
    (p,) = load(made["exp"])[2]
    return {c["fraction"]: c["teachers"] for c in claims(p) if c["claim"] == "c"}


def test_reading_says_confounds_and_cannot_tell(converged):
    reading = section(converged["md"], "What the numbers say")
    soft = diffs(REPORTED["soft/resnet", 0.01], REPORTED["none", 0.01])     # 0.01, 0.02, 0.00: includes 0
    assert (f"soft/resnet (cls+dist) − none (cls) at 590 images: +0.0100 ± {ci(soft):.4f} (3 pairs): cannot tell: "
            f"the 95% interval [{0.01 - ci(soft):+.4f}, {0.01 + ci(soft):+.4f}] includes 0 and reaches beyond "
            "±0.0100") in reading
    hard = diffs(REPORTED["hard/resnet", 0.01], REPORTED["none", 0.01])
    assert (f"hard/resnet (cls+dist) − none (cls) at 590 images: +0.0600 ± {ci(hard):.4f} (3 pairs): hard/resnet "
            "beats the student trained alone, as DeiT reports") in reading
    (at_590,) = [ln for ln in reading.splitlines() if ln.startswith("- CNN against") and "590 images" in ln]
    cnn = diffs(REPORTED["hard/resnet", 0.01], REPORTED["hard/vit", 0.01])
    assert f"{statistics.fmean(cnn):+.4f} ± {ci(cnn):.4f} (3 pairs)" in at_590
    matched = _teacher_claims(converged)
    assert matched[0.01].estimate == Estimate(pytest.approx(0.2), pytest.approx(0), 3)
    assert matched[0.01].category == "higher" and matched[0.01].runs == 6
    assert f"+0.2000 ± 0.0000, {matched[0.01].reasoned()}." in at_590
    assert matched[0.01].reasoned().endswith(", " + CLAIMS["teacher_accuracy"].apart)
    (at_2950,) = [ln for ln in reading.splitlines() if ln.startswith("- CNN against") and "2,950 images" in ln]
    teachers = diffs(TEACHERS["resnet", 0.05], TEACHERS["vit", 0.05])       # 0.005, 0.005, -0.005
    cnn = diffs(REPORTED["hard/resnet", 0.05], REPORTED["hard/vit", 0.05])  # 0.01, 0.02, 0.00
    # teachers within a point of each other on average, but their interval reaches past the accuracy margin
    assert matched[0.05].estimate.value == pytest.approx(statistics.fmean(teachers))
    assert matched[0.05].estimate.ci95 == pytest.approx(ci(teachers)) and matched[0.05].category == "cannot tell"
    assert f"{statistics.fmean(cnn):+.4f} ± {ci(cnn):.4f} (3 pairs)" in at_2950
    assert (f"{statistics.fmean(teachers):+.4f} ± {ci(teachers):.4f}, {matched[0.05].reasoned()}." in at_2950
            and matched[0.05].reasoned().endswith(": " + CLAIMS["teacher_accuracy"].unsure))
    assert "Not read" not in converged["md"]


def test_a_run_still_improving_silences_the_readings_that_rest_on_it(made):
    """Converged or silent, per claim: with one run still improving (hard/vit at 2,950 images, seed
    2), every claim that rests on it says "not read" with its count and no verdict, the claims whose
    runs all plateaued are read; the agreement reading and the comparison with DeiT, which pool the
    whole profile, give their numbers and the profile's one "Not read" sentence."""
    reading = section(made["md"], "What the numbers say").strip().splitlines()
    on_it = [ln for ln in reading if "hard/vit" in ln and "2,950 images" in ln]
    assert len(on_it) == 2 and all("not read: 1 of the " in ln and "still improving" in ln for ln in on_it)
    for ln in on_it:  # a: hard/vit − none (6 runs); c: hard/resnet − hard/vit with both teachers (12 runs)
        assert ("not read: 1 of the 6 runs" in ln) if ln.startswith("- Distillation") else ("1 of the 12 runs" in ln)
        assert not any(w in ln for w in ("as DeiT reports", "not distinguishable", "cannot tell", "beats")), ln
    read = [ln for ln in reading if ln not in on_it]
    assert read and all("not read" not in ln for ln in read)
    assert any("hard/resnet beats the student trained alone, as DeiT reports" in ln for ln in read)
    gate = ("Not read: 1 of the 36 runs behind these numbers were still improving at their last validation (†); "
            "the numbers are shown, and no conclusion is drawn from unconverged models.")
    assert f"- {gate}" in section(made["md"], "Agreement with each teacher")
    published = section(made["md"], "DeiT (published)")
    assert gate in published and "at 0.01: +0.0600 ± 0.0497;" in published
    ours = [d for ln in published.splitlines() if "; ours: " in ln for d in ln.split("; ours: ", 1)[1].split("; ")
            if d.startswith(("hard/vit", "hard/resnet − hard/vit"))]
    on_it = [d for d in ours if " at 0.05: " in d]   # each difference beside DeiT's effects carries the dagger of its run
    assert on_it and all(d.endswith(" †") for d in on_it)
    assert all(not d.endswith("†") for d in ours if d not in on_it)
    for name in ("Agreement with each teacher", "Class and distillation tokens"):  # the probes of that run too
        table = {ln.split(" | ")[0][2:]: ln.strip("|").split(" | ")[1:] for ln in section(made["md"], name).splitlines()
                 if ln.startswith("| ") and not ln.startswith("| student")}
        head = next(ln for ln in section(made["md"], name).splitlines() if ln.startswith("| student")).strip("|").split(" | ")[1:]
        marked = {(s, h.strip()) for s, cells in table.items() for h, c in zip(head, cells) if "†" in c}
        assert marked and all(s == "hard/vit" and h.endswith("0.05") for s, h in marked), (name, marked)
        assert "†: a run behind the cell was still improving" in section(made["md"], name)
    from experiments.distill.tables import findings
    rows = {f.question: f for f in findings(made["exp"])}
    assert rows["Does a CNN teacher beat a transformer teacher?"].verdict == "not read: 1 of 12 runs still improving (†)"
    assert not rows["Does distillation beat training alone?"].verdict.startswith("not read")


def test_published_comparison(converged):
    published = section(converged["md"], "DeiT (published)")
    assert "Touvron et al. 2021" in published
    assert table(published)["hard, with token: cls+dist"] == {"method": "hard, with token: cls+dist", "DeiT-Ti": "74.5",
                                                               "DeiT-S": "81.2", "DeiT-B": "83.4"}
    lines = {ln.split(":")[0][2:]: ln for ln in published.splitlines() if ln.startswith("- ")}
    assert "published +2.3 / +1.4 / +1.6 points" in lines["hard distillation with token (cls+dist) − no distillation"]
    from experiments.distill.numbers import load, published_effects, claims
    (p,) = load(converged["exp"])[2]
    effects = {what: (points, ours) for what, points, ours in published_effects(p, claims(p))}
    points, ours = effects["hard distillation with token (cls+dist) − no distillation"]
    hard = next(claim for c, claim in ours if c["label"] == "hard/resnet (cls+dist) − none (cls)" and c["fraction"] == 0.01)
    assert points == (2.3, 1.4, 1.6) and hard.wording.size == pytest.approx((0.023, 0.014, 0.016))
    assert hard.estimate.value == pytest.approx(0.06) and hard.category == "higher"
    assert hard.against_published() == (f"in direction: agree, ours {hard.said()}; in size: consistent, the published "
                                        "+0.0140 to +0.0230 lies within our interval [+0.0103, +0.1097]")
    assert f"hard/resnet (cls+dist) − none (cls) at 0.01: +0.0600 ± 0.0497 ({hard.against_published()})" in \
        lines["hard distillation with token (cls+dist) − no distillation"]
    # soft − none: differences 0.01, 0.02, 0.00, an interval that includes 0 but reaches past ±0.01: cannot tell
    soft = diffs(REPORTED["soft/resnet", 0.01], REPORTED["none", 0.01])
    points, ours = effects["soft distillation − no distillation"]
    (claim,) = [claim for c, claim in ours if c["fraction"] == 0.01]
    assert points == (0.0, 0.0, 0.0) and claim.category == "cannot tell"
    assert claim.estimate.value == pytest.approx(0.01) and claim.estimate.ci95 == pytest.approx(ci(soft))
    assert f"at 0.01: +0.0100 ± 0.0248 (in direction: cannot tell, ours {claim.said()})" \
        in lines["soft distillation − no distillation"]
    points, ours = effects["convnet teacher − transformer teacher (DeiT-B student)"]
    assert points == (0.8, 1.2) and "published +0.8 / +1.2 points" in lines[
        "convnet teacher − transformer teacher (DeiT-B student)"]
    assert ours and all(claim.category == "cannot tell" and f"({claim.against_published()})" in lines[
        "convnet teacher − transformer teacher (DeiT-B student)"] for _, claim in ours)


def test_no_difference_agrees_with_deit_only_inside_the_margin():
    """DeiT's "soft distillation makes no difference": agreed with only when our whole interval
    lies within ±0.01; an interval that excludes 0 outside the margin disagrees. An effect DeiT
    finds is read in direction and in size apart."""
    def against(est: Estimate | None, published: tuple, improving: int = 0) -> Claim:
        words = replace(CLAIMS["published_effect"], size=tuple(x / 100 for x in published))
        return Claim(words, est, runs=6, improving=improving)
    none = (0.0, 0.0, 0.0)
    inside = against(Estimate(0.002, 0.005, 3), none)
    assert inside.category == "no difference" and inside.against_published() == f"in direction: agree, ours {inside.said()}"
    beyond = against(Estimate(0.002, 0.0081, 3), none)
    assert beyond.category == "cannot tell" and beyond.against_published() == (
        f"in direction: cannot tell, ours {beyond.said()}")
    apart = against(Estimate(0.05, 0.02, 3), none)
    assert apart.category == "higher" and apart.against_published() == f"in direction: disagree, ours {apart.said()}"
    assert against(Estimate(0.05, None, 1), none).against_published() == "one pair, no interval"
    assert against(None, none).against_published() == "no pair"
    # DeiT's +1.4 to +2.3 points: the same direction but a larger size, or "no difference" against it
    larger = against(Estimate(0.1, 0.02, 3), (2.3, 1.4, 1.6))
    assert larger.against_published() == (f"in direction: agree, ours {larger.said()}; "
                                           f"{size_against(larger.estimate, (0.023, 0.014, 0.016))}")
    assert size_against(larger.estimate, (0.023, 0.014, 0.016)).startswith("in size: disagrees")
    flat = against(Estimate(0.001, 0.002, 3), (2.3, 1.4, 1.6))
    assert flat.category == "no difference" and flat.against_published().startswith("in direction: disagree, ours")
    # converged or silent: no agreement is read while a run behind ours still improves
    still = against(Estimate(0.1, 0.02, 3), (2.3, 1.4, 1.6), improving=1)
    assert still.against_published() == still.not_read_clause() and "agree" not in still.against_published()
    # the readings' sentence: "no difference" said only inside the margin
    words = CLAIMS["hard_soft"].filled(teacher="x")
    inside, beyond = (Claim(words, Estimate(0.002, ci, 3), runs=6) for ci in (0.005, 0.0081))
    assert (inside.category, beyond.category) == ("no difference", "cannot tell")
    assert judge(inside) == f"+0.0020 ± 0.0050 (3 pairs): {inside.said()}"
    assert judge(beyond) == f"+0.0020 ± 0.0081 (3 pairs): {beyond.said()}"
    assert judge(Claim(words, Estimate(0.03, 0.01, 3), runs=6)).endswith(
        "hard distillation from x beats soft, as DeiT reports: the 95% interval [+0.0200, +0.0400] excludes 0 and "
        "reaches beyond ±0.0100")


def test_teachers_match_only_when_their_whole_interval_lies_inside_the_accuracy_margin():
    """The teacher-type claim's confound is read from the interval of the teachers' paired
    difference: similar only inside ±0.01 (the accuracy margin, as every accuracy difference), different when it excludes 0, else cannot tell (a mean
    of +0.016 whose interval reaches +0.032 is not a match)."""
    from experiments.distill.words import confound

    def teachers(diff: Estimate, improving: int = 0) -> Claim:
        return Claim(CLAIMS["teacher_accuracy"], diff, runs=6, improving=improving)
    c = {"cnn": "resnet-at-vit", "transformer": "vit"}
    similar = teachers(Estimate(0.005, 0.005, 3))
    assert similar.category == "no difference" and similar.reasoned().endswith(": " + CLAIMS["teacher_accuracy"].same)
    assert confound({**c, "teachers": similar}) == (
        f"The resnet-at-vit teacher minus the vit teacher: +0.0050 ± 0.0050, {similar.reasoned()}.")
    for diff in (Estimate(0.005, 0.014, 3), Estimate(0.0161, 0.0162, 3)):   # past the accuracy margin
        unsettled = teachers(diff)
        assert unsettled.category == "cannot tell" and unsettled.reasoned() in confound({**c, "teachers": unsettled})
    for diff in (Estimate(0.03, 0.02, 3), Estimate(0.015, 0.01, 3)):
        apart = teachers(diff)
        assert apart.category == "higher" and apart.reasoned() in confound({**c, "teachers": apart})
    assert confound({**c, "teachers": teachers(None)}) == "The teachers' accuracies can't be paired with it."


def test_the_teachers_match_is_not_read_while_a_teacher_still_improves():
    """Converged or silent: the teachers' claim says no verdict while a run behind it still improved."""
    from experiments.distill.words import confound
    still = Claim(CLAIMS["teacher_accuracy"], Estimate(0.03, 0.02, 3), runs=6, improving=1)
    said = confound({"cnn": "resnet", "transformer": "vit", "teachers": still})
    assert still.category is None and still.not_read_clause() in said
    assert "differ in accuracy" not in said and "confounds" not in said


def test_regeneration_is_byte_identical(made, tmp_path):
    first = {p.name: p.read_bytes() for p in made["paths"]}
    assert first[f"{NAME}.png"].startswith(b"\x89PNG")
    out = tmp_path / "again"
    again = make_tables(made["exp"], out)
    assert {p.name: p.read_bytes() for p in again} == first
    for p in again:
        p.unlink()
    make_tables(made["exp"], out)
    assert {p.name: p.read_bytes() for p in again} == first
    # the figure is in TensorBoard too; three runs of the tables leave one events file, not three
    (tb,) = (made["exp"] / "tensorboard" / "cpu").glob("events.out.tfevents.*")
    assert events(tb.parent).Tags()["images"] == [f"{NAME}/accuracy_and_token_cosine"]


def test_the_readme_findings_block_is_rebuilt_from_every_experiment(made, tmp_path):
    """`tables --readme` replaces only the Findings block, with DeiT's three claims from these runs."""
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- tables:findings -->\nOLD ROWS\n<!-- /tables:findings -->\nend\n")
    args = ["tables", "--experiment", NAME, "--runs_dir", str(made["exp"].parent), "--out", str(tmp_path / "out"),
            "--readme", str(readme)]
    assert main(args) == 0
    text = readme.read_text()
    assert text.startswith("intro\n<!-- tables:findings -->\n| question |") and text.endswith("-->\nend\n")
    assert "OLD ROWS" not in text
    rows = [line for line in text.splitlines() if line.startswith("| Does") or line.startswith("| Hard")]
    assert [r.split(" | ")[0] for r in rows] == ["| Does distillation beat training alone?",
                                                  "| Hard or soft distillation?",
                                                  "| Does a CNN teacher beat a transformer teacher?"]
    assert all("(results/distill.md) cpu; " in r for r in rows)


@pytest.mark.parametrize("record, message", [
    (None, "no finished distill runs in"),
    ("{not json", "is not valid JSON"),
    (json.dumps({"spec": "distill", "profiles": {"cpu": {"teachers": [], "students": [
        {"student": "none", "fraction": 0.01, "seed": 0, "run": "deit_00000000"}]}}}), "no finished distill runs in"),
    (json.dumps({"spec": "distill", "profiles": {"cpu": {"teachers": [{"family": "resnet", "run": "resnet_0"}]}}}),
     "profile 'cpu' has a teacher entry lacking one of family, fraction, seed, run"),
    (json.dumps(["not", "a", "record"]), "distill.json holds list, not a JSON object"),
])
def test_missing_or_corrupt_record_is_one_line_and_writes_nothing(tmp_path, record, message):
    exp, out = tmp_path / "runs" / "distill", tmp_path / "results"
    exp.mkdir(parents=True)
    out.mkdir()
    if record is not None:
        (exp / RECORD).write_text(record)
    (out / f"{NAME}.md").write_text("sentinel\n")
    with pytest.raises(ValueError) as e:
        make_tables(exp, out)
    assert message in str(e.value) and "\n" not in str(e.value) and "make exp-distill" in str(e.value)
    assert [p.name for p in out.iterdir()] == [f"{NAME}.md"] and (out / f"{NAME}.md").read_text() == "sentinel\n"
    if record is not None:
        assert (exp / RECORD).read_text() == record   # left as it is


def test_the_plain_family_is_a_no_distillation_baseline(tmp_path):
    """With student_lr_of (the students take ViT's lr; DeiT is ViT with a distillation token), each
    distilled student is also read against the ViT teacher run of its subset and seed: DeiT's own
    no-distillation baseline, from the shared pool, paired by seed."""
    exp = tmp_path / "runs" / "distill"
    write_experiment(exp, None)
    record = json.loads((exp / RECORD).read_text())
    record["profiles"]["cpu"]["axes"]["student_lr_of"] = "vit"
    (exp / RECORD).write_text(json.dumps(record))
    make_tables(exp, tmp_path / "results")
    md = (tmp_path / "results" / f"{NAME}.md").read_text()
    over_vit = diffs(REPORTED["hard/resnet", 0.01], TEACHERS["vit", 0.01])    # 0.14, 0.16, 0.18
    assert (f"| hard/resnet (cls+dist) − vit | 0.01 | +0.1600 ± {ci(over_vit):.4f} | 3 |"
            in section(md, "DeiT's claims: paired differences by seed"))
    assert (f"hard/resnet (cls+dist) − vit at 590 images: +0.1600 ± {ci(over_vit):.4f} (3 pairs): hard/resnet beats "
            "vit (no distillation token) trained alone, as DeiT reports") in section(md, "What the numbers say")
    # the DeiT student trained alone stays a baseline beside it
    assert "hard/resnet (cls+dist) − none (cls) at 590 images" in md
    # a baseline trained another number of steps (each to its plateau) says so beside its verdict
    for path in exp.glob("vit_*/summary.json"):
        s = json.loads(path.read_text())
        if s["fraction"] == 0.01:
            path.write_text(json.dumps({**s, "steps": 75}))
    make_tables(exp, tmp_path / "results")
    md = (tmp_path / "results" / f"{NAME}.md").read_text()
    assert ("hard/resnet beats vit (no distillation token) trained alone (75 steps, the students 150, each to its "
            "plateau), as DeiT reports") in section(md, "What the numbers say")
    # without student_lr_of there is no such row
    assert "(cls+dist) − vit |" not in make_and_read(tmp_path / "plain")


def make_and_read(root: Path) -> str:
    write_experiment(root / "runs" / "distill", None)
    make_tables(root / "runs" / "distill", root / "results")
    return (root / "results" / f"{NAME}.md").read_text()


def test_a_profile_without_none_reads_its_students_against_the_vit_run(tmp_path):
    """The cpu profile runs no DeiT alone: each distilled student is read against DeiT's own
    no-distillation baseline (the ViT run of its subset and seed), and agreement with a teacher
    against the students of the other family's teacher; nothing speaks of none."""
    exp, out = tmp_path / "runs" / "distill", tmp_path / "results"
    write_experiment(exp, None, students_run=("soft/resnet", "hard/resnet", "hard/vit"), student_lr_of="vit")
    make_tables(exp, out)
    md = (out / f"{NAME}.md").read_text()
    for of_none in ("| none |", "none (cls)", "against none", "none's", "cls for none"):  # no row, claim or sentence
        assert of_none not in md, of_none
    assert "(a) each distilled student (cls+dist) minus vit trained alone" in md
    reading = section(md, "What the numbers say")
    against = diffs(REPORTED["hard/resnet", 0.01], TEACHERS["vit", 0.01])    # 0.14, 0.16, 0.18
    assert (f"hard/resnet (cls+dist) − vit at 590 images: +0.1600 ± {ci(against):.4f} (3 pairs): hard/resnet beats "
            "vit (no distillation token) trained alone, as DeiT reports") in reading
    assert sum(ln.startswith("- Distillation against training alone") for ln in reading.splitlines()) == 3 * 2
    agreement = section(md, "Agreement with each teacher")
    raised = diffs(AGREE["hard/resnet", "resnet", 0.01], (0.50, 0.51, 0.52))  # 0.40, 0.41, 0.42
    assert (f"- hard/resnet against hard/vit, agreement with resnet at 590 images: +0.4100 ± {ci(raised):.4f} "
            "(3 pairs): distilling from resnet raises agreement with resnet, as DeiT reports") in agreement
    pairs = [ln.split(",")[0] for ln in agreement.splitlines() if ln.startswith("- ")]
    assert sorted(set(pairs)) == ["- hard/resnet against hard/vit", "- hard/vit against hard/resnet",
                                  "- hard/vit against soft/resnet", "- soft/resnet against hard/vit"]


def test_what_each_teacher_can_hand_on_is_shown_where_recorded():
    """summary.json's teacher_labels (ImageClassifier counts them while training): the share of
    augmented training images whose teacher label is not the true one, per distilled student and
    size, mean over the seeds that have it; 'not recorded' for runs trained before it was counted;
    nothing for the student trained alone."""
    from experiments.distill.numbers import Profile
    from experiments.distill.words import teacher_labels
    from experiments.runs.run.summary import Summary

    def run(seed, rate=None):
        labels = {"differs": round(rate * 1000), "images": 1000, "rate": rate} if rate else None
        return Summary(train_size=590, seed=seed, teacher_labels=labels)
    p = Profile("cpu", {"axes": {"students": ["none", "hard/resnet", "hard/vit"], "fractions": [0.01]}}, {}, {},
                {("none", 0.01): {0: run(0)}, ("hard/resnet", 0.01): {0: run(0, 0.1), 1: run(1, 0.2), 2: run(2)},
                 ("hard/vit", 0.01): {0: run(0)}}, {}, {}, {})
    lines = teacher_labels(p)
    assert lines[0] == "### What each teacher can hand on"
    assert ("- hard/resnet at 590 images: the teacher's hard label differs from the true label on 15.0% of the "
            "augmented training images (mean over 2 seeds); not recorded for 1 more") in lines
    assert "- hard/vit at 590 images: not recorded" in lines and not any(ln.startswith("- none") for ln in lines)
    p.students[("hard/vit", 0.01)] = {0: run(0, 0.03), 1: Summary(train_size=590, seed=1, teacher_labels={
        "differs": 0, "images": 1000, "rate": 0.0})}
    assert ("- hard/vit at 590 images: the teacher's hard label differs from the true label on 1.5% of the "
            "augmented training images (mean over 2 seeds); none in seed 1") in teacher_labels(p)


def test_a_claim_whose_teacher_gave_only_the_true_labels_says_so(tmp_path):
    """A teacher trained on the students' images may give the true label on every augmented training
    image (the cpu profile's fully trained ResNet and ViT at 118 images did: teacher_labels rate 0):
    the Findings row of a claim resting on its student says it had nothing to hand on, in every seed,
    or in the seeds where it did (the cpu profile's ViT teacher in 2 of 3); a student whose teacher's
    labels differed in every seed is not named, nor a seed whose rate was not recorded."""
    from experiments.distill.tables import findings
    exp = tmp_path / "runs" / "distill"
    write_experiment(exp, None, students_run=("hard/resnet", "hard/vit"), student_lr_of="vit")
    record = json.loads((exp / RECORD).read_text())
    for s in record["profiles"]["cpu"]["students"]:
        path = exp / s["run"] / "summary.json"
        rate = 0.0 if s["student"] == "hard/vit" else 0.12
        path.write_text(json.dumps({**json.loads(path.read_text()),
                                    "teacher_labels": {"differs": round(rate * 1000), "images": 1000, "rate": rate}}))
    rows = {f.question: f for f in findings(exp)}
    teacher = rows[CLAIMS["teacher"].question].ours
    alone = rows[CLAIMS["distillation"].question].ours
    assert teacher.endswith("; the teacher of hard/vit gave the true label on every augmented training image: "
                            "nothing to hand on beyond the labels")
    assert "gave the true label" not in alone   # hard/resnet's teacher differed on 12%
    largest = {s["seed"]: exp / s["run"] / "summary.json" for s in record["profiles"]["cpu"]["students"]
               if s["student"] == "hard/vit" and s["fraction"] == FRACTIONS[-1]}
    path = largest[2]
    path.write_text(json.dumps({**json.loads(path.read_text()),
                                "teacher_labels": {"differs": 18, "images": 1000, "rate": 0.018}}))
    assert {f.question: f for f in findings(exp)}[CLAIMS["teacher"].question].ours.endswith(
        "; the teacher of hard/vit gave the true label on every augmented training image in seeds 0 and 1: "
        "nothing to hand on beyond the labels there")
    path = largest[1]
    path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "teacher_labels"}))
    assert {f.question: f for f in findings(exp)}[CLAIMS["teacher"].question].ours.endswith(
        "; the teacher of hard/vit gave the true label on every augmented training image in seed 0: "
        "nothing to hand on beyond the labels there")
    for path in largest.values():
        path.write_text(json.dumps({**json.loads(path.read_text()),
                                    "teacher_labels": {"differs": 5, "images": 1000, "rate": 0.005}}))
    assert "gave the true label" not in {f.question: f for f in findings(exp)}[CLAIMS["teacher"].question].ours


def test_training_alone_is_read_from_a_student_whose_teacher_handed_something_on(tmp_path):
    """"Does distillation beat training alone?" asks what a teacher hands on: a hard student whose
    teacher gave the true label on every augmented training image (the cpu profile's ResNet at 118
    images) trained as the baseline did, so the Findings row reads the first hard student whose
    teacher differed from the labels in every seed, and names the one it passed over and why; with
    none such, the first hard student as before."""
    from experiments.distill.tables import findings
    exp = tmp_path / "runs" / "distill"
    write_experiment(exp, None, students_run=("hard/resnet", "hard/vit"), student_lr_of="vit")
    record = json.loads((exp / RECORD).read_text())

    def rates(resnet: float, vit: float) -> str:
        for s in record["profiles"]["cpu"]["students"]:
            path = exp / s["run"] / "summary.json"
            rate = resnet if s["student"] == "hard/resnet" else vit
            path.write_text(json.dumps({**json.loads(path.read_text()),
                                        "teacher_labels": {"differs": round(rate * 1000), "images": 1000, "rate": rate}}))
        return {f.question: f for f in findings(exp)}[CLAIMS["distillation"].question].ours
    alone = rates(0.0, 0.12)
    assert alone.startswith("hard/vit (cls+dist) − ") and alone.endswith(
        "; read from hard/vit, as the teacher of hard/resnet gave the true label on every augmented training image: "
        "nothing to hand on beyond the labels")
    assert rates(0.12, 0.12).startswith("hard/resnet (cls+dist) − ") and "read from" not in rates(0.12, 0.12)
    both = rates(0.0, 0.0)   # no teacher handed anything on: the first hard student, and what it lacked
    assert both.startswith("hard/resnet (cls+dist) − ") and "read from" not in both and both.endswith(
        "; the teacher of hard/resnet gave the true label on every augmented training image: nothing to hand on "
        "beyond the labels")
