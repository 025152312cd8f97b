"""exp-distill's numbers: distill.json and the runs it lists read into profiles (teachers and students
by fraction and seed), their accuracies, agreement and token cosine, and DeiT's claims as Claims
(paired differences by seed, with the runs behind them). No sentence is made here (words.py)."""
from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from modules.budgets import kind_of

from experiments.distill import family_of
from experiments.report.claim import Claim, load_claims, load_published
from experiments.report.records import read_record, read_runs
from experiments.statistics import Estimate, mean_ci, paired_difference
from experiments.report.table_format import fmt
from experiments.runs.run.convergence import still_improving
from experiments.runs.run.summary import Summary
from experiments.runs.sweep.reference import NothingFinished
from experiments.runs.sweep.shared import located

CLAIMS = load_claims("distill")  # the claims' fixed words (claims.yaml)
DEIT_PUBLISHED = load_published("distill")  # DeiT's published numbers (claims.yaml: published)
NAME = "distill"

RECORD = "distill.json"

PROBES = "distill_probes.json"

HINT = f": delete it and run make exp-{NAME} again"

NO_TEACHER = "none"                    # the student trained alone

HEADS = ("cls", "dist", "both")        # DeiT Table 3: class head, distillation head, mean of their logits

HEAD_LABEL = {"cls": "cls", "dist": "dist", "both": "cls+dist"}

TEST_KEY = {"cls": "acc_cls", "dist": "acc_dist", "both": "acc"}  # a summary's test: acc is cls+dist when distilled

VERSIONS = ("python", "torch", "timm", "lightning")

ENTRY_KEYS = {"teachers": ("family", "fraction", "seed", "run"), "students": ("student", "fraction", "seed", "run")}

COLUMNS = ("profile", "role", "student", "variant", "teacher", "fraction", "train_size", "val_size", "head",
           "test_acc_mean", "test_acc_ci95", "seeds", "delta_vs_none", "delta_vs_none_ci95", "delta_pairs",
           "teacher_acc_mean", "agreement_with_teacher_mean", "agreement_with_teacher_ci95", "still_improving", "lr",
           "steps", "wall_time_s_mean")

def _finished(s: Summary | None) -> bool:
    return s is not None and s.status == "done" and _test_acc(s) is not None


def _test_acc(s: Summary):
    return s.test_acc if s.test_acc is not None else (s.test or {}).get("acc")


@dataclass
class Profile:
    """One profile of distill.json with its finished runs: teachers[(family, fraction)] and
    students[(student, fraction)] map seed -> summary, entries and probes[(student, fraction)] seed
    -> a student's entry in the record and its probes ({} without)."""
    name: str
    rec: dict
    runs: dict              # every folder's summary, by folder name
    teachers: dict
    students: dict
    plan_teacher: dict      # (family, fraction, seed) -> the teacher folder the record lists
    entries: dict
    probes: dict

    @property
    def axes(self) -> dict:
        return self.rec.get("axes") or {}

    def _entries(self, role: str) -> list[dict]:
        return [e for e in self.rec.get(role) or [] if isinstance(e, dict) and e.get("run")]

    @property
    def fractions(self) -> list[float]:
        listed = {float(e["fraction"]) for r in ("teachers", "students") for e in self._entries(r)}
        return sorted(listed | {float(f) for f in self.axes.get("fractions") or []})

    @property
    def teacher_families(self) -> list[str]:
        listed = [e["family"] for e in self._entries("teachers")]
        return list(dict.fromkeys([*(self.axes.get("teachers") or []), *listed]))

    @property
    def student_names(self) -> list[str]:
        listed = [e["student"] for e in self._entries("students")]
        return list(dict.fromkeys([*(self.axes.get("students") or []), *listed]))

    @property
    def trains_alone(self) -> bool:
        """Whether the profile trains the student alone (none); the cpu profile reads its distilled
        students against the ViT run only, and says nothing of none."""
        return NO_TEACHER in self.student_names

    def planned_runs(self) -> list[str]:
        return [e["run"] for r in ("teachers", "students") for e in self._entries(r)]

    def finished_runs(self) -> list[Summary]:
        return [s for cells in (self.teachers, self.students) for cell in cells.values() for s in cell.values()]

    def runs_at(self, fraction: float) -> list[Summary]:
        return [s for cells in (self.teachers, self.students) for (_, f), cell in cells.items() if f == fraction
                for s in cell.values()]

    def train_size(self, fraction: float):
        sizes = sorted({s.train_size for s in self.runs_at(fraction) if s.train_size})
        return sizes[0] if len(sizes) == 1 else None

    def size_label(self, fraction: float) -> str:
        n = self.train_size(fraction)
        return f"{n:,} images" if n else f"fraction {fraction:g}"


def variant_of(student: str) -> str:
    return student.partition("/")[0]


def teacher_of(student: str) -> str | None:
    return student.partition("/")[2] or None


def heads_of(student: str) -> tuple[str, ...]:
    """The heads a student reports: none's distillation head never trains, so only its cls."""
    return ("cls",) if variant_of(student) == NO_TEACHER else HEADS


def reported(student: str) -> str:
    return "cls" if variant_of(student) == NO_TEACHER else "both"


def collect(exp_dir: Path) -> dict[str, Summary]:
    """Every readable run's summary (records.read_runs), by folder name, and every shared run the
    record names, by <experiment>/<folder>."""
    return {name: run.summary for name, run in read_runs(exp_dir)[0].items()}


def check_record(record, path: Path) -> None:
    """A one-line error for a record the runner would not write (the tables index its entries)."""
    profiles = record.get("profiles", {}) if isinstance(record, dict) else None
    if not isinstance(profiles, dict) or not all(isinstance(r, dict) for r in profiles.values()):
        raise ValueError(f"{path} is not a {NAME} record (no mapping of profiles){HINT}")
    for name, rec in profiles.items():
        for role, keys in ENTRY_KEYS.items():
            for e in rec.get(role) or []:
                if not isinstance(e, dict) or any(e.get(k) is None for k in keys) \
                        or not isinstance(e["fraction"], (int, float)):
                    raise ValueError(f"{path}: profile {name!r} has a {role[:-1]} entry lacking one "
                                     f"of {', '.join(keys)}: {json.dumps(e)[:120]}{HINT}")


def load_profile(name: str, rec: dict, runs: dict, exp_dir: Path) -> Profile:
    teachers, students, plan_teacher, entries, probed = defaultdict(dict), defaultdict(dict), {}, defaultdict(dict), defaultdict(dict)
    for e in rec.get("teachers") or []:
        key = (e["family"], float(e["fraction"]), e["seed"])
        plan_teacher[key] = e["run"]
        if _finished(runs.get(e["run"])):
            teachers[key[:2]][e["seed"]] = runs[e["run"]]
    for e in rec.get("students") or []:
        if _finished(runs.get(e["run"])):
            probes = read_record(located(exp_dir, e["run"]) / PROBES, HINT)   # {} when absent
            key = (e["student"], float(e["fraction"]))
            students[key][e["seed"]], entries[key][e["seed"]] = runs[e["run"]], e
            probed[key][e["seed"]] = probes if isinstance(probes, dict) else {}
    return Profile(name, rec, runs, dict(teachers), dict(students), plan_teacher, dict(entries), dict(probed))


def left_out(record: dict, runs: dict) -> list[str]:
    """Finished folders the record does not mention at all (not a profile's teacher, student or
    tuning trial): an older plan's runs, never averaged in."""
    named = {e.get("run") for rec in (record.get("profiles") or {}).values()
             for part in (rec.get("teachers"), rec.get("students"), (rec.get("tuning") or {}).get("trials"))
             for e in part or [] if isinstance(e, dict)}
    return sorted(n for n, s in runs.items() if s.status == "done" and n not in named)
def student_accs(p: Profile, student: str, fraction: float, head: str) -> dict:
    """seed -> test accuracy of one head (None heads, e.g. none's dist, are absent)."""
    if head not in heads_of(student):
        return {}
    out = {}
    for seed, s in p.students.get((student, fraction), {}).items():
        test = s.test or {}
        # none reports cls as its acc; an older record may lack acc_cls
        v = test.get(TEST_KEY[head], test.get("acc") if variant_of(student) == NO_TEACHER else None)
        if v is not None:
            out[seed] = v
    return out



def teacher_accs_runs(p: Profile, teacher: str, fraction: float) -> list[Summary]:
    return [p.teachers[teacher, fraction][seed] for seed in sorted(p.teachers.get((teacher, fraction)) or {})]


def teacher_accs(p: Profile, family: str, fraction: float) -> dict:
    return {seed: _test_acc(s) for seed, s in p.teachers.get((family, fraction), {}).items()}


def own_teacher_accs(p: Profile, student: str, fraction: float) -> dict:
    """seed -> test accuracy of the teacher run each student run distilled from."""
    out = {}
    for seed, e in p.entries.get((student, fraction), {}).items():
        t = p.runs.get((e.get("teacher_run") or ""))
        if _finished(t):
            out[seed] = _test_acc(t)
    return out


def agreement(p: Profile, student: str, fraction: float, family: str, head: str) -> dict:
    """seed -> share of probe images where the student's head and that teacher (the record's run of
    the same fraction and seed) predict the same class; probes of another teacher run are stale."""
    out = {}
    for seed, probes in p.probes.get((student, fraction), {}).items():
        value = ((probes.get("agreement") or {}).get(family) or {}).get(head)
        planned = p.plan_teacher.get((family, fraction, seed)) or ""  # a shared teacher: <experiment>/<folder>
        if value is not None and (probes.get("teacher_runs") or {}).get(family) == planned.rsplit("/", 1)[-1]:
            out[seed] = value
    return out


def token_cosine(p: Profile, student: str, fraction: float) -> list[float]:
    """Mean over seeds of cos(cls token, dist token) after each block ([] without probes)."""
    curves = [probes["token_cosine"] for _, probes in sorted(p.probes.get((student, fraction), {}).items(),
                                                              key=lambda kv: str(kv[0]))
              if probes.get("token_cosine")]
    return [statistics.fmean(block) for block in zip(*curves)] if curves else []


def estimate_of(values: dict) -> Estimate | None:
    return mean_ci([values[k] for k in sorted(values, key=str)]) if values else None


def improving_runs(cell: dict) -> list[str]:
    return sorted(s.run or "" for s in cell.values() if still_improving(s))


def lr_of(p: Profile, family: str, fraction: float):
    lrs = sorted({c.get("lr") for c in (p.rec.get("tuning") or {}).get("choices") or []
                  if c.get("family") == family_of(family) and c.get("fraction") is not None
                  and float(c["fraction"]) == fraction and c.get("lr") is not None})
    return lrs[0] if len(lrs) == 1 else "/".join(fmt(v) for v in lrs) or None


def shared_value(values):
    """The value the runs share; None when none has one; 'a/b' when they differ."""
    values = sorted({v for v in values if v is not None}, key=lambda v: (str(type(v)), v))
    return None if not values else values[0] if len(values) == 1 else "/".join(fmt(v) for v in values)


def _row(p: Profile, role: str, name: str, fraction: float, head: str, cell: dict, accs: dict) -> dict:
    acc = estimate_of(accs)
    runs = list(cell.values())
    return {"profile": p.name, "role": role, "student": name, "variant": "", "teacher": "", "fraction": fraction,
            "train_size": shared_value(s.train_size for s in runs), "val_size": shared_value(s.val_size for s in runs),
            "head": head, "test_acc_mean": acc and acc.value, "test_acc_ci95": acc and acc.ci95,
            "seeds": len(accs), "still_improving": len(improving_runs(cell)),
            "steps": shared_value(s.steps for s in runs),
            "wall_time_s_mean": statistics.fmean(s.wall_time_s or 0 for s in runs) if runs else None}


def csv_rows(p: Profile) -> list[dict]:
    """The teachers (head "-"), then each student x fraction x reported head; the student's
    head against none's cls by seed (delta_vs_none) and its agreement with its own teacher."""
    rows = []
    for t in p.teacher_families:
        for f in p.fractions:
            cell = p.teachers.get((t, f), {})
            rows.append({**_row(p, "teacher", t, f, "-", cell, teacher_accs(p, t, f)), "lr": lr_of(p, t, f)})
    student_family = p.axes.get("student", "deit")
    for s in p.student_names:
        teacher = teacher_of(s)
        for f in p.fractions:
            cell, none = p.students.get((s, f), {}), student_accs(p, NO_TEACHER, f, "cls")
            for head in heads_of(s):
                accs = student_accs(p, s, f, head)
                row = {**_row(p, "student", s, f, head, cell, accs), "variant": variant_of(s),
                       "teacher": teacher or "", "lr": lr_of(p, student_family, f)}
                if teacher:
                    d = paired_difference(accs, none)
                    t_acc, agree = estimate_of(own_teacher_accs(p, s, f)), estimate_of(agreement(p, s, f, teacher, head))
                    row.update(delta_vs_none=d and d.value, delta_vs_none_ci95=d and d.ci95, delta_pairs=d and d.n,
                               teacher_acc_mean=t_acc and t_acc.value,
                               agreement_with_teacher_mean=agree and agree.value,
                               agreement_with_teacher_ci95=agree and agree.ci95)
                rows.append(row)
    return rows


def _steps_apart(student: dict | None, baseline: dict | None, name: str) -> str:
    """Where the students and the baseline they are compared with trained different numbers of steps
    (each to its own plateau: a claim is read only when both plateaued), the words that say so."""
    steps = [{r.steps for r in (cell or {}).values()} for cell in (student, baseline)]
    if any(len(st) != 1 or None in st for st in steps) or steps[0] == steps[1]:
        return ""
    return f" ({next(iter(steps[1])):,} steps, the students {next(iter(steps[0])):,}, each to its plateau)"


def _behind(p: Profile, fraction: float, students: tuple = (), teachers: tuple = ()) -> dict:
    """{improving, runs}: the finished runs a claim's numbers rest on, and how many still improved."""
    runs = [r for cells, names in ((p.students, students), (p.teachers, teachers)) for n in names
            for r in (cells.get((n, fraction)) or {}).values()]
    return {"improving": sum(still_improving(r) for r in runs), "runs": len(runs)}


def label_rates(p: Profile, student: str, fraction: float) -> list[float]:
    """How often the teacher's hard label differed from the true label on the augmented training
    batches (summary.json's teacher_labels), one rate per seed of `student` that recorded it."""
    runs = p.students.get((student, fraction), {}).values()
    return [r.teacher_labels["rate"] for r in runs if isinstance(r.teacher_labels, dict)]


def _seed_order(seed) -> tuple:
    """Seeds in numeric order (2 before 10), any that are text after them."""
    return (0, seed, "") if isinstance(seed, int) else (1, 0, str(seed))


def label_copies(p: Profile, students: list[str], fraction: float) -> dict[str, list]:
    """Of `students`, those whose teacher's hard labels were the true labels on every augmented
    training image in one seed or more, with those seeds: distilling them there hands on nothing
    beyond the labels, so a claim about what a teacher hands on cannot rest on those seeds."""
    out = {}
    for s in students:
        seeds = [seed for seed, r in sorted(p.students.get((s, fraction), {}).items(), key=lambda kv: _seed_order(kv[0]))
                 if isinstance(r.teacher_labels, dict) and r.teacher_labels.get("rate") == 0]
        if seeds:
            out[s] = seeds
    return out


def seeds_said(seeds: list) -> str:
    """'seed 0', 'seeds 0 and 1'."""
    return ("seed " if len(seeds) == 1 else "seeds ") + " and ".join(map(str, seeds))


def claims(p: Profile) -> list[dict]:
    """DeiT's three claims per fraction, each a paired difference by seed (its Claim, "read"): (a)
    each distilled student's cls+dist minus none's cls; (b) hard minus soft per teacher that has both;
    (c) a CNN teacher's hard student minus a transformer teacher's, with the two teachers' accuracies
    and the claim that they match ("teachers")."""
    out, names = [], p.student_names
    # the family the student is without its distillation token (DeiT: ViT), trained alone at the lr the
    # students take: DeiT's own no-distillation baseline, a teacher run of the same subset and seed
    plain = p.axes.get("student_lr_of")
    for f in p.fractions:
        none = student_accs(p, NO_TEACHER, f, "cls")
        for s in names:
            if teacher_of(s):
                if p.trains_alone:
                    baseline = "the student trained alone"
                    out.append({"claim": "a", "fraction": f, "label": f"{s} (cls+dist) − none (cls)", "student": s,
                                "baseline": baseline,
                                "read": _claim("distillation", paired_difference(student_accs(p, s, f, "both"), none),
                                               _behind(p, f, (s, NO_TEACHER)), student=s, baseline=baseline)})
                if plain in p.teacher_families:
                    baseline = (f"{plain} (no distillation token) trained alone"
                                + _steps_apart(p.students.get((s, f)), p.teachers.get((plain, f)), plain))
                    out.append({"claim": "a", "fraction": f, "label": f"{s} (cls+dist) − {plain}", "student": s,
                                "baseline": baseline,
                                "read": _claim("distillation", paired_difference(student_accs(p, s, f, "both"),
                                                                                 teacher_accs(p, plain, f)),
                                               _behind(p, f, (s,), (plain,)), student=s, baseline=baseline)})
        for t in p.teacher_families:
            if f"hard/{t}" in names and f"soft/{t}" in names:
                out.append({"claim": "b", "fraction": f, "label": f"hard/{t} − soft/{t} (cls+dist)", "teacher": t,
                            "read": _claim("hard_soft", paired_difference(student_accs(p, f"hard/{t}", f, "both"),
                                                                          student_accs(p, f"soft/{t}", f, "both")),
                                           _behind(p, f, (f"hard/{t}", f"soft/{t}")), teacher=t)})
        for c in (t for t in p.teacher_families if kind_of(family_of(t)) == "CNN" and f"hard/{t}" in names):
            for v in (t for t in p.teacher_families if kind_of(t) == "transformer" and f"hard/{t}" in names):
                ca, va = teacher_accs(p, c, f), teacher_accs(p, v, f)
                out.append({"claim": "c", "fraction": f, "label": f"hard/{c} − hard/{v} (cls+dist)", "cnn": c,
                            "transformer": v, "cnn_acc": estimate_of(ca), "transformer_acc": estimate_of(va),
                            "teachers": Claim(CLAIMS["teacher_accuracy"], paired_difference(ca, va),
                                              **_behind(p, f, teachers=(c, v))),
                            "read": _claim("teacher", paired_difference(student_accs(p, f"hard/{c}", f, "both"),
                                                                        student_accs(p, f"hard/{v}", f, "both")),
                                           # a matched teacher stops on purpose: its plateau is not asked (record_summary)
                                           _behind(p, f, (f"hard/{c}", f"hard/{v}"), (c, v)), cnn=c, transformer=v)})
    return out


def _claim(name: str, est: Estimate | None, behind: dict, **names: str) -> Claim:
    """Claim `name` of claims.yaml, its sentence naming the runs compared, read from `est`."""
    return Claim(CLAIMS[name].filled(**names), est, **behind)


def head_effects(p: Profile, head: str) -> list[dict]:
    return [{"label": f"{s} {HEAD_LABEL[head]} − cls", "fraction": f,
             "read": _claim("heads", paired_difference(student_accs(p, s, f, head), student_accs(p, s, f, "cls")),
                            _behind(p, f, (s,)), head=HEAD_LABEL[head])}
            for s in p.student_names if variant_of(s) == "hard" for f in p.fractions]


def published_effects(p: Profile, cl: list[dict]) -> list[tuple[str, tuple[float, ...], list[tuple[dict, Claim]]]]:
    """Each of DeiT's published effects (claims.yaml: published, effects): what it is, its points one
    per published model, and each of our claims that estimates it, worded against it."""
    ours = {"distillation": [c for c in cl if c["claim"] == "a" and variant_of(c["student"]) == "hard"],
            "soft": [c for c in cl if c["claim"] == "a" and variant_of(c["student"]) == "soft"],
            "hard_soft": [c for c in cl if c["claim"] == "b"], "dist_head": head_effects(p, "dist"),
            "both_heads": head_effects(p, "both"), "teacher": [c for c in cl if c["claim"] == "c"]}
    out = []
    for name, (what, taken, taken_from) in DEIT_PUBLISHED["effects"].items():
        points = _points(taken, taken_from)
        words = replace(CLAIMS["published_effect"], question=what, size=tuple(x / 100 for x in points))
        out.append((what, points, [(c, replace(c["read"], wording=words)) for c in ours[name]]))
    return out


def _points(taken: str, taken_from: str) -> tuple[float, ...]:
    """DeiT's effect in points, one per model: row `taken` − row `taken_from` (a range of teachers
    against one teacher: each against it)."""
    table = {**DEIT_PUBLISHED["rows"], **DEIT_PUBLISHED["teacher_choice"]}
    a, b = (tuple(v) if isinstance(v, list) else (v,) for v in (table[taken], table[taken_from]))
    return tuple(round(x - y, 1) for x, y in zip(a, b * len(a) if len(b) == 1 else b))


def csv_value(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v).lower()
    return repr(round(v, 6)) if isinstance(v, float) else str(v)


def load(exp_dir: Path) -> tuple[dict, dict, list[Profile]]:
    """distill.json, the finished runs and each profile with students (ValueError naming what is missing)."""
    record = read_record(exp_dir / RECORD, HINT)
    check_record(record, exp_dir / RECORD)
    runs = collect(exp_dir)
    profiles = [load_profile(n, rec, runs, exp_dir) for n, rec in (record.get("profiles") or {}).items()]
    profiles = [p for p in profiles if p.students]
    if not profiles:
        raise NothingFinished(f"no finished distill runs in {exp_dir}: run make exp-{NAME} first")
    return record, runs, profiles
