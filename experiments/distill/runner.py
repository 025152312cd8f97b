"""`python -m experiments distill`: DeiT students against CNN and transformer teachers (experiments/distill/spec.yaml).

Four stages, each resumable (finished runs are skipped, interrupted ones resume, failed ones are
retried; one failing run never stops the others):
1. tune: every teacher family, and the student with no teacher (variant none) unless the spec's
   student_lr_of names the teacher family whose lr the students take, at each learning rate of the
   grid at the tuned fractions (first seed); the winner on validation accuracy is used at the
   nearest tuned fraction. The trial that won is the main run of its configuration.
2. teachers: every teacher family x fraction x seed, tested.
3. students: every variant/teacher of the profile x fraction x seed, distilling from the teacher
   run of the same subset and seed, tested by each head (cls, dist, cls+dist).
4. probes: per finished student, on the first `probe_images` test images: agreement of each head
   with every teacher of its subset and seed, and the cls-dist token cosine after each block
   (<student run>/distill_probes.json).
<runs_dir>/distill/distill.json records the profile's axes, the tuning trials and choices, and which
run folders form the table; `make tables` (experiments/distill/tables.py) reads only these files.
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import torch
from rich.progress import Progress

from datamodules import ImageClassificationDataModule
from datamodules.splits import resolve_train_size
from modules.budgets import FAMILIES, distils, names
from modules.distillation import DISTILLATION_TYPES, INFERENCE_HEADS, deit_probe

from experiments.distill import MATCHED, matched_name
from experiments.runs.run.provenance import git_commit, hardware, versions
from modules.files import write_json

from experiments.runs.run.record import read_json, write_profile_record
from experiments.runs.run.run_folder import RunFolder
from experiments.runs.sweep.cluster import options_from
from experiments.runs.sweep.shared import entry
from experiments.runs.sweep.slurm import print_status, run_then_tables
from experiments.runs.sweep.spec import (Run, Schema, plan_run, batch_sizes, check_axes, check_probe_images,
                                         count_setting, default_jobs, steps_for,
                                         load_spec, nearest_tuned, number_list, precision_of, runner_parser,
                                         tuned_fractions, with_folders)
from experiments.runs.sweep.execute import TUNED, run_status
from experiments.runs.sweep.sweep import AnyLr, choose_lrs, launching, print_plan, whole_profile
from experiments.runs.run.run_config import load_config
from experiments.runs.run.trained import load_classifier, test_images

NAME = "distill"
RECORD = "distill.json"
PROBES = "distill_probes.json"
TOP_KEYS = {"dataset", "student", "student_lr_of", "variants", "profiles"}
PROFILE_KEYS = {"teachers", "matched", "matched_val_interval", "students", "budget", "fractions", "seeds", "epochs",
                "min_steps", "max_steps", "val_checks", "val_size", "batch_size", "precision", "lrs", "tuned_fractions",
                "probe_images", "jobs", "cluster"}
PROFILE_REQUIRED = ("teachers", "students", "budget", "fractions", "seeds", "epochs", "min_steps", "val_checks",
                    "lrs", "probe_images")
STAGES = ("tune", "teachers", "matched", "students", "probes")
NO_TEACHER = "none"   # the student variant trained alone


# ---------------- the spec ----------------
def load_distill_spec(name_or_path: str = NAME) -> dict:
    return load_spec(name_or_path, SCHEMA)


def _check_variants(spec: dict, label: str) -> None:
    variants = spec["variants"]
    if not isinstance(variants, dict) or NO_TEACHER not in variants:
        raise ValueError(f"variants in {label}: allowed a mapping of {', '.join(DISTILLATION_TYPES)} to fit options, "
                         f"with {NO_TEACHER!r} among them")
    for v, args in variants.items():
        if v not in DISTILLATION_TYPES or not isinstance(args, dict) or args.get("model.distillation") != v:
            raise ValueError(f"variant {v!r} in {label}: allowed {', '.join(DISTILLATION_TYPES)}, each a mapping "
                             f"of fit options that sets model.distillation to its own name")


SCHEMA = Schema(NAME, frozenset(TOP_KEYS), ("name", "dataset", "student", "variants", "profiles"),
                frozenset(PROFILE_KEYS), PROFILE_REQUIRED, check=_check_variants)


def resolve_axes(spec: dict, profile: str, *, fractions=None, seeds=None) -> dict:
    """The profile's axes with command-line overrides, every value checked."""
    if profile not in spec["profiles"]:
        raise ValueError(f"unknown profile {profile!r}: allowed {', '.join(spec['profiles'])}")
    p, where = spec["profiles"][profile], f"profile {profile!r}"
    for key in ("teachers", "students"):
        if not isinstance(p[key], list) or not p[key]:
            raise ValueError(f"{key}={p[key]!r} in {where}: allowed a non-empty list")
    if not isinstance(p.get("matched") or {}, dict):
        raise ValueError(f"matched={p['matched']!r} in {where}: allowed a mapping of a teacher family to the teacher "
                         "family whose best validation accuracy it is stopped at, e.g. {resnet: vit}")
    axes = {"profile": profile, "dataset": spec["dataset"], "student": spec["student"], "budget": p["budget"],
            "teachers": list(p["teachers"]), "students": list(p["students"]), "variants": spec["variants"],
            "fractions": sorted(number_list(fractions or p["fractions"], "fractions", where)),
            "seeds": number_list(seeds if seeds is not None else p["seeds"], "seeds", where, integers=True),
            "lrs": sorted(number_list(p["lrs"], "lrs", where)), "epochs": p["epochs"], "min_steps": p["min_steps"],
            "max_steps": p.get("max_steps"),
            "val_checks": p["val_checks"], "val_size": p.get("val_size"),
            "batch_size": batch_sizes(p.get("batch_size", 128), where),
            "precision": precision_of(p, where), "probe_images": count_setting(p["probe_images"], "probe_images", where),
            "jobs": count_setting(p.get("jobs", default_jobs()), "jobs", where), "matched": dict(p.get("matched") or {}),
            "matched_val_interval": p.get("matched_val_interval"), "student_lr_of": spec.get("student_lr_of")}
    if p.get("tuned_fractions"):
        axes["tuned_fractions"] = sorted(number_list(p["tuned_fractions"], "tuned_fractions", where))
    for f in [*axes["teachers"], axes["student"]]:
        if f not in FAMILIES:
            raise ValueError(f"unknown family {f!r}: allowed {', '.join(FAMILIES)}")
    if not distils(axes["student"]):
        allowed = ", ".join(map(repr, names(distillation_token=True)))
        raise ValueError(f"student {axes['student']!r}: allowed {allowed} (the family with a distillation token)")
    check_axes(axes)
    if axes["student_lr_of"] is not None and axes["student_lr_of"] not in axes["teachers"]:
        raise ValueError(f"student_lr_of {axes['student_lr_of']!r}: allowed a teacher family of profile {profile!r} "
                         f"({', '.join(axes['teachers'])}), whose chosen learning rate the students use")
    interval = axes["matched_val_interval"]
    if interval is not None and (isinstance(interval, bool) or not isinstance(interval, int) or interval < 1):
        raise ValueError(f"matched_val_interval={interval!r} in profile {profile!r}: allowed an integer >= 1 "
                         "(steps between a matched teacher's validations)")
    for family, target in axes["matched"].items():
        if family not in axes["teachers"] or target not in axes["teachers"] or family == target:
            raise ValueError(f"matched {family}: {target} in profile {profile!r}: allowed a teacher family mapped to "
                             f"another teacher family of the profile ({', '.join(axes['teachers'])}), whose best "
                             "validation accuracy it is stopped at")
    teachers = [*axes["teachers"], *(matched_name(f, t) for f, t in axes["matched"].items())]
    for student in axes["students"]:
        variant, _, teacher = student.partition("/")
        if variant not in axes["variants"] or (variant == NO_TEACHER) != (teacher == "") \
                or (teacher and teacher not in teachers):
            raise ValueError(f"student {student!r}: allowed {NO_TEACHER!r} or variant/teacher with a variant of "
                             f"{', '.join(v for v in axes['variants'] if v != NO_TEACHER)} and a teacher of the "
                             f"profile ({', '.join(teachers)})")
    return axes


def check_matched_interval(axes: dict, pool: int) -> None:
    """A matched teacher validates every matched_val_interval steps; past its run's steps it never
    would, and would leave no best checkpoint for its students and the probes."""
    interval = axes["matched_val_interval"]
    if interval is None or not axes["matched"]:
        return
    steps, family, fraction = min((steps_for(resolve_train_size(f, None, pool), axes, family, matched_name(family, to)),
                                   family, f) for family, to in axes["matched"].items() for f in axes["fractions"])
    if interval > steps:
        raise ValueError(f"matched_val_interval={interval} in profile {axes['profile']!r}: allowed at most {steps}, "
                         f"the steps of the shortest matched teacher run ({family} at {fraction:g}), so that it "
                         "validates")


# ---------------- the runs ----------------
def _variant(student: str) -> str:
    """The run-name suffix and variant key of a student: none, hard-resnet, soft-vit, ..."""
    return student.replace("/", "-")


def _view(spec: dict, axes: dict) -> dict:
    """The sweep's view of this spec: each student is a variant (its distillation type's fit options)."""
    variants = {"default": {}}
    for student in axes["students"]:
        variants[_variant(student)] = axes["variants"][student.partition("/")[0]]
    return {"name": spec["name"], "variant_args": variants}


def tuning_runs(spec: dict, axes: dict, runs_dir: Path, pool: int) -> list[Run]:
    """Each teacher family at every lr, at the tuned fractions, first seed; also the no-teacher
    student unless the spec's student_lr_of names the teacher family whose lr the students take."""
    view, seed = _view(spec, axes), axes["seeds"][0]
    tuned = [(t, "default") for t in axes["teachers"]]
    if axes.get("student_lr_of") is None:
        tuned.append((axes["student"], NO_TEACHER))
    runs = [plan_run(view, axes, runs_dir, pool, family, f, seed, variant, lr, "tune")
            for family, variant in tuned for f in tuned_fractions(axes) for lr in axes["lrs"]]
    return with_folders(runs)


def lr_of(choices: dict, axes: dict, family: str, fraction: float) -> float | None:
    variant = "default"
    if family == axes["student"]:
        family, variant = (axes["student_lr_of"], "default") if axes.get("student_lr_of") else (family, NO_TEACHER)
    return choices.get((family, variant, nearest_tuned(fraction, axes)))


def teacher_runs(spec: dict, axes: dict, runs_dir: Path, pool: int, choices: dict) -> list[Run]:
    view = _view(spec, axes)
    runs = [plan_run(view, axes, runs_dir, pool, t, f, s, "default", lr_of(choices, axes, t, f), "main")
            for t in axes["teachers"] for f in axes["fractions"] for s in axes["seeds"]
            if lr_of(choices, axes, t, f) is not None]
    return with_folders(runs)


def target_acc(run: Run) -> float | None:
    """The best validation accuracy of a finished teacher run (what its matched teacher stops at)."""
    s = RunFolder(run.run_dir).summary()
    return s.val_acc_best if s is not None and s.status in ("fitted", "done") else None


def matched_runs(spec: dict, axes: dict, runs_dir: Path, pool: int, choices: dict, teachers: list[Run]) -> list[Run]:
    """For each matched pair (e.g. resnet: vit) x fraction x seed: the family's teacher run again,
    same configuration and schedule, stopped at the first validation whose accuracy reaches the
    target teacher's best validation accuracy (fit --stop_at_val_acc), its checkpoint the validation
    closest to that accuracy; chosen on validation only. Listed once the target teacher has finished."""
    target = {(r.family, r.fraction, r.seed): r for r in teachers}
    runs = []
    for family, to in axes["matched"].items():
        name = matched_name(family, to)
        for f in axes["fractions"]:
            for s in axes["seeds"]:
                t, lr = target.get((to, f, s)), lr_of(choices, axes, family, f)
                acc = target_acc(t) if t is not None else None
                if acc is None or lr is None:
                    continue
                view = {"name": spec["name"], "variant_args": {name: {"stop_at_val_acc": acc}}}
                # validated often (matched_val_interval), so that a validation lands close to the target
                runs.append(plan_run(view, axes, runs_dir, pool, family, f, s, name, lr, "main",
                                 val_interval=axes.get("matched_val_interval")))
    return with_folders(runs)


def student_runs(spec: dict, axes: dict, runs_dir: Path, pool: int, choices: dict,
                 teachers: list[Run]) -> list[Run]:
    """Every student of the profile x fraction x seed at the no-teacher student's lr, each
    distilling from the teacher run of its subset and seed (teachers: the family teachers and the
    matched ones, whose variant is their teacher name)."""
    view, family = _view(spec, axes), axes["student"]
    teacher_dir = {(r.variant if MATCHED in r.variant else r.family, r.fraction, r.seed): r.run_dir for r in teachers}
    runs = []
    for f in axes["fractions"]:
        lr = lr_of(choices, axes, family, f)
        if lr is None:
            continue
        for s in axes["seeds"]:
            for student in axes["students"]:
                run = plan_run(view, axes, runs_dir, pool, family, f, s, _variant(student), lr, "main")
                teacher = student.partition("/")[2]
                if teacher:
                    t = teacher_dir.get((teacher, f, s))
                    if t is None:
                        continue  # its teacher has no chosen lr yet
                    run = replace(run, args=run.args + ("--model.teacher_checkpoint", str(RunFolder(t).best_checkpoint)),
                                  teacher=entry(t, spec["name"]))
                runs.append(run)
    return with_folders(runs)


def teacher_name(run: Run) -> str:
    """resnet, vit, or a matched teacher's name (resnet-at-vit)."""
    return run.variant if MATCHED in run.variant else run.family


def student_of(run: Run) -> str:
    """The profile's student name (none, hard/resnet, ...) of a student run."""
    variant = run.variant
    return variant if variant == NO_TEACHER else variant.replace("-", "/", 1)


# ---------------- probes ----------------
def _load(run_dir: Path):
    return load_classifier(run_dir)


def probe_images(run_dir: Path, limit: int) -> torch.Tensor:
    """The first `limit` normalised test images (N, C, H, W) of a run's data (its config.yaml)."""
    return test_images(load_config(run_dir)["data"], limit)[0]


@torch.inference_mode()
def _predictions(model, x: torch.Tensor, batch: int = 500) -> torch.Tensor:
    """(N,) argmax classes of a model over x, in batches."""
    return torch.cat([model(xb).argmax(1) for xb in x.split(batch)])


@torch.inference_mode()
def probe_student(student_dir: Path, teacher_dirs: dict[str, Path], x: torch.Tensor,
                  teacher_preds: dict[str, torch.Tensor] | None = None, batch: int = 500) -> dict:
    """Agreement of each head of the student with each teacher, and the per-block cls-dist token
    cosine, on images x (N, C, H, W); one forward pass per batch. teacher_preds caches a teacher's
    predictions by folder name."""
    cache = {} if teacher_preds is None else teacher_preds
    student = _load(student_dir).model
    preds, cosine = {h: [] for h in INFERENCE_HEADS}, 0.0
    for xb in x.split(batch):
        cls, dist, cos = deit_probe(student, xb)
        for head, logits in (("cls", cls), ("dist", dist), ("both", (cls + dist) / 2)):
            preds[head].append(logits.argmax(1))
        cosine = cosine + cos * len(xb)           # (depth,), weighted by the batch's images
    heads = {h: torch.cat(p) for h, p in preds.items()}
    agreement = {}
    for family, t_dir in sorted(teacher_dirs.items()):
        if t_dir.name not in cache:
            cache[t_dir.name] = _predictions(_load(t_dir).model, x, batch)
        agreement[family] = {h: round(float((p == cache[t_dir.name]).float().mean()), 6) for h, p in heads.items()}
    return {"images": len(x), "split": "test", "teacher_runs": {f: d.name for f, d in sorted(teacher_dirs.items())},
            "agreement": agreement, "token_cosine": [round(float(c), 6) for c in cosine / len(x)],
            "commit": git_commit(), "versions": versions(), "hardware": hardware()}


def probes_stage(students: list[Run], teachers: list[Run], limit: int) -> dict[str, str]:
    """distill_probes.json for every tested student that lacks one for its current teachers;
    returns run name -> probed (now) or done (before)."""
    teacher_dir = {(teacher_name(r), r.fraction, r.seed): r.run_dir for r in teachers if run_status(r) == "done"}
    cache: dict[str, torch.Tensor] = {}
    images: torch.Tensor | None = None
    results = {}
    todo = []
    for r in students:
        if run_status(r) != "done":
            continue
        mine = {fam: d for (fam, f, s), d in teacher_dir.items() if f == r.fraction and s == r.seed}
        old = read_json(r.run_dir / PROBES)
        if old.get("images") == limit and old.get("teacher_runs") == {f: d.name for f, d in sorted(mine.items())}:
            results[r.name] = "done"  # probed before
        else:
            todo.append((r, mine))
    with Progress() as progress:
        task = progress.add_task("probes", total=len(todo))
        for r, mine in todo:
            if images is None:  # the test split is the same for every run of the dataset
                images = probe_images(r.run_dir, limit)
            write_json(r.run_dir / PROBES, probe_student(r.run_dir, mine, images, cache))
            results[r.name] = "probed"
            progress.advance(task)
    return results


# ---------------- the command ----------------
def write_record(exp_dir: Path, spec: dict, axes: dict, pool: int, trials: list[Run], choices: dict,
                 teachers: list[Run], students: list[Run], invocation: dict | None, ran: bool = True) -> Path:
    _, records = choose_lrs(trials)
    uses = [{"family": fam, "fraction": f, "lr": lr_of(choices, axes, fam, f), "tuned_at": nearest_tuned(f, axes)}
            for fam in [*axes["teachers"], axes["student"]] for f in axes["fractions"]
            if lr_of(choices, axes, fam, f) is not None]
    entry = {
        "axes": {**{k: v for k, v in axes.items() if k not in ("profile", "jobs")},
                 "tuned_fractions": tuned_fractions(axes), "pool_size": pool},
        "tuning": {"trials": records, "choices": uses},
        "teachers": [{"family": teacher_name(r), "fraction": r.fraction, "seed": r.seed, "run": r.entry}
                     for r in teachers],
        "students": [{"student": student_of(r), "variant": student_of(r).partition("/")[0],
                      "teacher": student_of(r).partition("/")[2] or None, "fraction": r.fraction, "seed": r.seed,
                      "run": r.entry, "teacher_run": r.teacher} for r in students],
    }
    return write_profile_record(exp_dir / RECORD, spec["name"], axes["profile"], entry, invocation,
                                hint=f": delete it and run make exp-{NAME} again", ran=ran)


def main(argv: list[str]) -> int:
    p = runner_parser(NAME, __doc__)
    p.add_argument("--fractions", nargs="+", type=float, help="override the training fractions, each in (0, 1]")
    a = p.parse_args(argv)
    spec = load_distill_spec(a.spec)
    axes = resolve_axes(spec, a.profile or ("gpu" if torch.cuda.is_available() else "cpu"),
                        fractions=a.fractions, seeds=a.seeds)
    jobs = axes["jobs"] if a.jobs is None else a.jobs  # --jobs 0 is refused, not the profile's
    if jobs < 1:
        raise ValueError(f"--jobs {jobs}: allowed integers >= 1")
    cluster = options_from(a, spec["profiles"][axes["profile"]].get("cluster"), NAME, argv, jobs)
    runs_dir, exp_dir = Path(a.runs_dir), Path(a.runs_dir) / spec["name"]
    read_json(exp_dir / RECORD, hint=f": delete it and run make exp-{NAME} again")  # corrupt: stop before any work
    dm = ImageClassificationDataModule(axes["dataset"], val_size=axes["val_size"])
    check_probe_images(axes["probe_images"], dm.test_size, f"profile {axes['profile']!r}")
    pool = len(dm._splits["pool"])
    check_matched_interval(axes, pool)
    return run_then_tables(lambda: _stages(a, spec, axes, runs_dir, exp_dir, pool, jobs, cluster), cluster,
                           spec["name"], runs_dir, planning_only=a.dry_run or a.status)


def every_run(spec: dict, axes: dict, runs_dir: Path, pool: int) -> list[Run]:
    """Every run the profile will train, the ones waiting for their lr planned at any lr; not the
    matched teachers, which stop where their training reaches the target (a few hundred steps on the
    cpu profile); their students, planned here against a stand-in folder. Planning parses each run's
    fit options, so a variant the suite refuses stops the command here, before anything trains."""
    anyway = AnyLr(axes["lrs"][0])
    every_teacher = teacher_runs(spec, axes, runs_dir, pool, anyway)
    stand_ins = [replace(r, variant=matched_name(r.family, to), run_dir=r.run_dir.with_name(
        r.run_dir.name + MATCHED + to)) for fam, to in axes["matched"].items() for r in every_teacher
        if r.family == fam]
    return [*tuning_runs(spec, axes, runs_dir, pool), *every_teacher,
            *student_runs(spec, axes, runs_dir, pool, anyway, every_teacher + stand_ins)]


def _stages(a, spec: dict, axes: dict, runs_dir: Path, exp_dir: Path, pool: int, jobs: int, cluster) -> int:
    a.dry_run = a.dry_run or a.status
    planned = every_run(spec, axes, runs_dir, pool)  # before the lock: a refused variant leaves nothing behind
    with launching(exp_dir, _launcher(jobs), jobs, a.dry_run, cluster) as run:
        start = time.perf_counter()
        results, launched = run.results, run.launched  # launched: only then is its wall time the experiment's

        trials = tuning_runs(spec, axes, runs_dir, pool)
        run(trials)
        choices, _ = choose_lrs(trials)
        teachers = teacher_runs(spec, axes, runs_dir, pool, choices)
        run(teachers)
        matched = matched_runs(spec, axes, runs_dir, pool, choices, teachers)
        run(matched)
        teachers = teachers + matched
        students = student_runs(spec, axes, runs_dir, pool, choices, teachers)
        run(students)
        if a.dry_run:
            stages = (("tune", trials), ("teachers", teachers[:len(teachers) - len(matched)]), ("matched", matched),
                      ("students", students))
            waiting = [f for f in [*axes["teachers"], axes["student"]]
                       if any(lr_of(choices, axes, f, fr) is None for fr in axes["fractions"])]
            if a.status:
                return print_status(list(stages), [f"main runs of {', '.join(waiting)}: listed once their tuning "
                                                   "is done"] if waiting else [], exp_dir)
            for title, runs in stages:
                if runs or not waiting:  # an empty stage that waits on tuning is named below, not as "0 runs"
                    print_plan(title, runs, axes, jobs=jobs)
            if waiting:
                print(f"## {', '.join(t for t, runs in stages[1:] if not runs)} of {', '.join(waiting)}: "
                      "listed once their tuning trials are done")
            whole_profile(planned, axes, jobs)
            return 0
        probed = probes_stage(students, teachers, axes["probe_images"])
        results.update({f"probes {k}": v for k, v in probed.items()})
        wall = time.perf_counter() - start
        counts = {s: list(results.values()).count(s) for s in sorted(set(results.values()))}
        print(f"distill ({axes['profile']}): {len(results)} runs and probes in {wall:.0f} s: "
              + ", ".join(f"{n} {s}" for s, n in counts.items()))
        # the wall time of a whole profile that trained something (a rerun that only finds finished runs keeps it)
        ran = bool(launched) or any(v == "probed" for v in probed.values())
        whole = a.fractions is None and a.seeds is None and ran
        timed = {"wall_time_s": round(wall), "runs": len(launched), "statuses": counts, "jobs": jobs}
        write_record(exp_dir, spec, axes, pool, trials, choices, teachers, students, timed if whole else None, ran=ran)
        ok = all(s in ("done", "diverged", "probed", *TUNED) for s in results.values())
        return 0 if ok and not _missing(axes, teachers, students) else 1


def _missing(axes: dict, teachers: list[Run], students: list[Run]) -> bool:
    """Whether some planned run could not even be listed (no lr chosen for its family, or no
    finished target for a matched teacher)."""
    n = len(axes["fractions"]) * len(axes["seeds"])
    return len(teachers) < n * (len(axes["teachers"]) + len(axes["matched"])) or len(students) < n * len(axes["students"])


def _launcher(jobs: int):
    from experiments.runs.sweep.execute import Workers, launch
    workers = Workers(jobs)
    return lambda r: launch(r, workers)
