"""exp-distill's words: results/distill.md from the numbers of numbers.py, each reading a Claim
(its fixed words claims.yaml's) said in the shared vocabulary (experiments/report/verdicts.py), and
DeiT's published numbers against ours."""
from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from datamodules.sources import FASHION_MNIST_CLASSES

from experiments.distill import MATCHED, family_of
from experiments.distill.numbers import (CLAIMS, label_copies, label_rates, seeds_said, DEIT_PUBLISHED, HEAD_LABEL, HEADS, NAME, NO_TEACHER, RECORD, VERSIONS,
                                         Profile, agreement, claims, estimate_of, heads_of,
                                         improving_runs, reported, shared_value, student_accs, teacher_accs,
                                         teacher_accs_runs, teacher_of, token_cosine, variant_of, published_effects)
from experiments.report.claim import Claim
from experiments.report.records import left_out_line, read_runs
from experiments.statistics import Estimate, paired_difference
from experiments.report.table_format import count, fmt, markdown_table, plural, plus_minus
from experiments.report.verdicts import (MARGIN, STILL_IMPROVING, marked_runs, not_read)
from experiments.runs.run.convergence import still_improving
from experiments.runs.sweep.reference import whose_runs
NA = "—"                               # not applicable (none's dist head; a teacher has one head)

MISSING = "no run"                     # applicable, but no finished run



def teacher_labels(p: Profile) -> list[str]:
    """Per distilled student and size: how often its teacher's hard label differed from the true
    label on the augmented training batches (summary.json's teacher_labels, counted by
    ImageClassifier), mean over the seeds that recorded it; "not recorded" for runs trained before
    it was counted. A teacher that agrees with every label has nothing to hand on beyond them."""
    out = []
    for s in (s for s in p.student_names if teacher_of(s)):
        for f in p.fractions:
            runs = list(p.students.get((s, f), {}).values())
            if not runs:
                continue
            rates = label_rates(p, s, f)
            said = (f"the teacher's hard label differs from the true label on {statistics.fmean(rates):.1%} of the "
                    f"augmented training images (mean over {plural(len(rates), 'seed')})" if rates else "not recorded")
            copied = label_copies(p, [s], f).get(s, [])
            out.append(f"- {s} at {p.size_label(f)}: {said}"
                       + (f"; not recorded for {len(runs) - len(rates)} more" if rates and len(rates) < len(runs)
                          else "")
                       + (f"; none in {seeds_said(copied)}" if 0 < len(copied) < len(rates) else ""))
    return ["### What each teacher can hand on", "",
            "How often the teacher's hard label differs from the true label on the students' augmented training "
            "batches: a teacher that agrees with every label has nothing to hand on beyond them.", "", *out, ""] \
        if out else []
def _est_text(est: Estimate | None, signed: bool = True) -> str:
    return MISSING if est is None else plus_minus(est.value, est.ci95, signed)



def judge(claim: Claim) -> str:
    """A reading's verdict on a claim DeiT says is positive (its sentence, `said`), with its estimate."""
    est = claim.estimate
    if est is None:
        return "no pair of finished runs"
    said = f"{plus_minus(est.value, est.ci95, signed=True)} ({plural(est.n, 'pair')})"
    if est.ci95 is None:
        return f"{said}: one pair has no interval; a single draw, not a finding"
    return f"{said}: " + claim.said(f"{claim.wording.said}, as DeiT reports",
                                    f"the opposite; the data contradict DeiT's claim that {claim.wording.said}")


def _cell(cell: dict, accs: dict) -> str:
    est = estimate_of(accs)
    return MISSING if est is None else plus_minus(est.value, est.ci95) + (f" {STILL_IMPROVING}" if improving_runs(cell) else "")


def provenance(p: Profile) -> list[str]:
    ax, runs = p.axes, p.finished_runs()
    steps = "; ".join(f"{fmt(shared_value(s.max_steps or s.steps for s in p.runs_at(f)))} at "
                      f"fraction {f:g} ({p.size_label(f)})" for f in p.fractions)
    variants = "; ".join(f"{v} (" + ", ".join(f"{k.split('.', 1)[-1]} {fmt(x)}" for k, x in args.items()) + ")"
                         for v, args in (ax.get("variants") or {}).items())
    out = [f"- data: {ax.get('dataset')}, budget {ax.get('budget')}, batch {ax.get('batch_size')}, "
           f"{count(shared_value(s.val_size for s in runs))} validation images; seeds {ax.get('seeds')}",
           f"- steps per run: {steps}", f"- variants: {variants}", *_lr_lines(p)]
    hardware = sorted({s.hardware for s in runs if s.hardware})
    versions = sorted({", ".join(f"{k} {v}" for k, v in (s.versions or {}).items() if k in VERSIONS)
                       for s in runs} - {""})
    commits = sorted({s.commit for s in runs if s.commit})
    for t in (t for t in p.teacher_families if MATCHED in t):
        stops = [(s.stopped or {}, s) for f in p.fractions for s in teacher_accs_runs(p, t, f)]
        out.append(f"- {t}: the {family_of(t)} teacher run again and stopped at the first validation reaching the "
                   f"{t.split(MATCHED)[1]} teacher's best validation accuracy of its subset and seed, its checkpoint "
                   "the validation closest to that target (chosen on validation only): " + "; ".join(
                       f"seed {s.seed} at step {st.get('checkpoint_step', st.get('step'))}"
                       + (f" of {st.get('step')}" if st.get("checkpoint_step", st.get("step")) != st.get("step") else "")
                       + f", validation {fmt(s.val_acc_best)} against {fmt(st.get('at_val_acc'))}"
                       + ("" if st.get("reached", True) else " (never reached)")
                       for st, s in stops))
    out += [f"- hardware: {'; '.join(hardware) or 'not recorded'}",
            f"- versions: {'; '.join(versions) or 'not recorded'}",
            f"- commit{'s' if len(commits) > 1 else ''}: {', '.join(commits) or 'not recorded'}"]
    trials = [t.get("run") for t in (p.rec.get("tuning") or {}).get("trials") or []]
    timed = [p.runs[n] for n in dict.fromkeys([*p.planned_runs(), *trials]) if n in p.runs]
    fit = sum(s.wall_time_s or 0 for s in timed) / 60
    last = p.rec.get("last_invocation")
    out.append((f"- the last `make exp-{NAME}` of this profile: {last.get('runs')} runs and probes in "
                f"{(last.get('wall_time_s') or 0) / 60:.1f} min, {last.get('jobs')} at a time ("
                + ", ".join(f"{n} {k}" for k, n in sorted((last.get("statuses") or {}).items())) + "); "
                if last else "- ")
               + f"fit time summed over its {len(timed)} runs (tuning trials included): {fit:.1f} min")
    statuses = defaultdict(list)
    for n in p.planned_runs():
        statuses[(p.runs[n].status if n in p.runs else None) or "not run"].append(n)
    out.append(f"- runs in the plan: {len(p.planned_runs())} ("
               + ", ".join(f"{len(v)} {k}" for k, v in sorted(statuses.items())) + ")")
    for k in ("failed", "diverged"):
        out += [f"- {n}: {k} ({(p.runs[n].error or '')[:200]})" for n in statuses.get(k, [])]
    return out


def _lr_lines(p: Profile) -> list[str]:
    ax, choices = p.axes, (p.rec.get("tuning") or {}).get("choices") or []
    student = ax.get("student", "deit")
    grid = ", ".join(fmt(x) for x in ax.get("lrs") or [])
    out = [f"- learning rate chosen on validation accuracy only (grid {grid} "
           f"at fraction{'s' if len(ax.get('tuned_fractions') or []) > 1 else ''} "
           f"{', '.join(fmt(x) for x in ax.get('tuned_fractions') or [])}, first seed; the test split is never read "
           f"by a choice); " + (f"the students take {ax['student_lr_of']}'s ({student} is {ax['student_lr_of']} with a distillation "
                                  "token), every variant the same:" if ax.get("student_lr_of") else
                                  "the student's on the no-teacher student, used by every variant:")]
    for family in dict.fromkeys([*p.teacher_families, student, *(c.get("family") for c in choices)]):
        mine = sorted((c for c in choices if c.get("family") == family), key=lambda c: c.get("fraction") or 0)
        if mine:
            out.append(f"  - {family}: " + ", ".join(f"{fmt(c.get('lr'))} at {fmt(c.get('fraction'))}"
                                                     + (f" (tuned at {fmt(c['tuned_at'])})"
                                                        if c.get("tuned_at") not in (None, c.get("fraction")) else "")
                                                     for c in mine))
    return out


def main_table(p: Profile) -> list[str]:
    head = ["student", "teacher", *(f"{HEAD_LABEL[h]}, {f:g}" for f in p.fractions for h in HEADS)]
    rows = []
    for t in p.teacher_families:
        cells = [c for f in p.fractions for c in (_cell(p.teachers.get((t, f), {}), teacher_accs(p, t, f)), NA, NA)]
        rows.append([f"teacher {t}", NA, *cells])
    for s in p.student_names:
        cells = [_cell(p.students.get((s, f), {}), student_accs(p, s, f, h)) if h in heads_of(s) else NA
                 for f in p.fractions for h in HEADS]
        rows.append([s, teacher_of(s) or NA, *cells])
    marked = {s.run: s for cells in (p.teachers, p.students) for cell in cells.values() for s in cell.values()
              if still_improving(s)}
    return markdown_table(head, rows, 2) + [line for note in marked_runs(list(marked.items())) for line in ("", *note)]


def _claim_text(c: dict) -> str:
    """A claim's paired difference, marked where a run behind it was still improving."""
    read = c["read"]
    return _est_text(read.estimate) + read.dagger()


def _pairs(c: dict) -> str:
    return str(c["read"].estimate.n if c["read"].estimate else 0)


def claims_tables(cl: list[dict]) -> list[str]:
    out = markdown_table(["comparison", "fraction", "difference (mean ± 95% CI)", "pairs"],
                 [[c["label"], f"{c['fraction']:g}", _claim_text(c), _pairs(c)]
                  for claim in "ab" for c in cl if c["claim"] == claim])
    third = [c for c in cl if c["claim"] == "c"]
    if third:
        out += ["", "(c) A CNN teacher against a transformer teacher; DeiT's claim is about teachers of similar "
                "accuracy, so the teachers' own accuracies and their paired difference are beside it:", ""]
        out += markdown_table(["comparison", "fraction", "student difference", "pairs", "CNN teacher", "transformer teacher",
                       "teacher difference"],
                      [[c["label"], f"{c['fraction']:g}", _claim_text(c), _pairs(c),
                        f"{c['cnn']} {_est_text(c['cnn_acc'], False)}",
                        f"{c['transformer']} {_est_text(c['transformer_acc'], False)}", _est_text(c["teachers"].estimate)]
                       for c in third])
    if any(c["read"].estimate is not None and not c["read"].converged for c in cl):
        out += ["", f"{STILL_IMPROVING} rests on a run still improving at its last validation: shown, not read."]
    return out


def _on_improving(p: Profile, student: str, fraction: float, teacher: str | None = None) -> str:
    """The dagger of a probe's cell whose student runs (or teacher runs) include one still improving."""
    cells = [p.students.get((student, fraction)) or {}, *([p.teachers.get((teacher, fraction)) or {}] if teacher else [])]
    return f" {STILL_IMPROVING}" if any(improving_runs(c) for c in cells) else ""


MARKED_PROBES = f"{STILL_IMPROVING}: a run behind the cell was still improving at its last validation: shown, not read."


def agreement_section(p: Profile) -> list[str]:
    head = ["student", *(f"{t}, {f:g}" for f in p.fractions for t in p.teacher_families)]
    rows = [[s, *(_est_text(estimate_of(agreement(p, s, f, t, reported(s))), False) + _on_improving(p, s, f, t)
                  for f in p.fractions for t in p.teacher_families)] for s in p.student_names]
    images = sorted({probes.get("images") for cell in p.probes.values() for probes in cell.values()
                     if probes.get("images")})
    out = [f"Share of {'/'.join(f'{n:,}' for n in images) or 'the'} test images on which the student's reported head "
           f"(cls+dist{'; cls for none' if p.trains_alone else ''}) predicts the same class as the teacher run of its "
           "fraction and seed; mean over seeds ± 95% CI.", "", *markdown_table(head, rows), ""]
    out += [MARKED_PROBES, ""] if any(STILL_IMPROVING in c for r in rows for c in r[1:]) else []
    gate = unsettled(p)
    return out + ([f"- {gate}"] if gate else agreement_reading(p))


def agreement_reading(p: Profile) -> list[str]:
    """Does distilling from a teacher raise agreement with that teacher above the none student's,
    or, in a profile without none, above that of the students distilled from another family's teacher?"""
    out, distilled = [], [s for s in p.student_names if teacher_of(s)]
    for s in distilled:
        t = teacher_of(s)
        others = [NO_TEACHER] if p.trains_alone else [o for o in distilled
                                                      if family_of(teacher_of(o)) != family_of(t)]
        for o, f in ((o, f) for o in others for f in p.fractions):
            d = paired_difference(agreement(p, s, f, t, "both"), agreement(p, o, f, t, reported(o)))
            out.append(f"- {s} against {o}, agreement with {t} at {p.size_label(f)}: "
                       # pooled over the profile, read under its one gate (unsettled)
                       + judge(Claim(CLAIMS["agreement"].filled(teacher=t), d, runs=d.n if d else 0)))
    return out


def cosine_section(p: Profile) -> list[str]:
    depth = max((len(token_cosine(p, s, f)) for s in p.student_names for f in p.fractions), default=0)
    if not depth:
        return ["No probes yet (distill_probes.json): the token cosine is measured after the students are tested."]
    blocks = list(dict.fromkeys((1, (depth + 1) // 2, depth)))
    head = ["student", *(f"block {b}, {f:g}" for f in p.fractions for b in blocks)]
    rows = []
    for s in p.student_names:
        cells = []
        for f in p.fractions:
            curve = token_cosine(p, s, f)
            cells += [f"{curve[b - 1]:.4f}{_on_improving(p, s, f)}" if len(curve) == depth else MISSING for b in blocks]
        rows.append([s, *cells])
    first, last = DEIT_PUBLISHED["token_cosine"]
    marked = ["", MARKED_PROBES] if any(STILL_IMPROVING in c for r in rows for c in r[1:]) else []
    return [f"cos(class token, distillation token) after blocks 1, {blocks[len(blocks) // 2]} and {depth}, mean over "
            f"images and seeds (DeiT-B: {first} between the learned tokens at the input, {last} after the last block)."
            + (" none's distillation token exists but no loss trains it." if p.trains_alone else ""),
            "", *markdown_table(head, rows), *marked]


def unsettled(p: Profile) -> str | None:
    """The sentence that stands in for this profile's readings while a run behind them still improves."""
    runs = p.finished_runs()
    return not_read(sum(still_improving(s) for s in runs), len(runs))


def reading(p: Profile, cl: list[dict]) -> list[str]:
    """One line per claim, each converged or silent on the runs behind it alone."""
    if unsettled(p) and not any(c["read"].runs and c["read"].converged for c in cl):
        return [f"- {unsettled(p)}"]

    def say(c: dict) -> str:
        return judge(c["read"]) if c["read"].converged else c["read"].not_read_clause()
    out = []
    for kind, what in (("a", "Distillation against training alone"), ("b", "Hard against soft"),
                       ("c", "CNN against transformer teacher")):
        for c in (c for c in cl if c["claim"] == kind):
            out.append(f"- {what}, {c['label']} at {p.size_label(c['fraction'])}: " + say(c)
                       # a claim not read says nothing of its teachers
                       + (". " + confound(c) if kind == "c" and c["read"].converged else ""))
    return out


def confound(c: dict) -> str:
    """Whether the CNN-transformer comparison is one of teachers of similar accuracy: the teachers'
    claim (their paired difference) with what follows from its verdict."""
    claim = c["teachers"]
    td = claim.estimate
    if td is None:
        return "The teachers' accuracies can't be paired with it."
    return (f"The {c['cnn']} teacher minus the {c['transformer']} teacher: {plus_minus(td.value, td.ci95, signed=True)}"
            f", {claim.reasoned()}.")


def soft_weighting(p: Profile) -> list[str]:
    """What DeiT's soft loss weighs at this dataset's class count: its KL sum is divided by B x C
    (modules/distillation.py, as DeiT's code), so against the cross-entropy (a mean over B) the KL
    term of one image weighs tau^2 / C. At ImageNet's 1,000 classes that is 1,000 / C times lighter."""
    soft = (p.axes.get("variants") or {}).get("soft")
    if not soft or not any(variant_of(s) == "soft" for s in p.student_names):
        return []
    classes = len(FASHION_MNIST_CLASSES) if p.axes.get("dataset") == "fashion_mnist" else None
    tau, alpha = soft.get("model.distill_tau", 1.0), soft.get("model.distill_alpha", 0.5)
    per = f"{tau * tau / classes:.2f}" if classes else "tau^2 / C"
    heavier = f"{1000 / classes:,.0f}x heavier than" if classes else "1,000 / C times what it weighs"
    return [f"Soft distillation's weight: DeiT's loss (1 − α) CE + α τ² KL / (B·C), here α = {alpha:g} and τ = "
            f"{tau:g}, divides the KL sum by the classes C as well as the batch, so per image the KL term weighs "
            f"τ²/C = {per} against the cross-entropy{f' at C = {classes}' if classes else ''}: {heavier} at "
            "ImageNet's 1,000 classes, with the same α and τ. A soft student here is pulled toward its teacher "
            "far harder than DeiT's were.", ""]


def published_section(p: Profile, cl: list[dict]) -> list[str]:
    pub, models = DEIT_PUBLISHED["rows"], DEIT_PUBLISHED["models"]
    out = [f"Source: {DEIT_PUBLISHED['source']} ({', '.join(models)}; teacher RegNetY-16GF unless named).", "",
           *markdown_table(["method", *models], [[k, *(f"{x:.1f}" for x in v)] for k, v in pub.items()]), "",
           *soft_weighting(p)]
    choice = DEIT_PUBLISHED["teacher_choice"]
    (tr_label, tr), (cnn_label, (lo, hi)) = choice.items()
    out += [f"Teacher choice, DeiT-B student, hard distillation: {tr_label} gives {tr}; {cnn_label} {lo}–{hi}.", "",
            "Each published effect against ours (accuracy 0–1, paired by seed), in direction and in size apart. "
            f"Direction: ours reads \"no difference\" when our whole 95% interval lies within ±{MARGIN:.4f}, else "
            "a direction when it excludes 0, else \"cannot tell\"; it agrees with an effect DeiT finds when it "
            "points the same way, and with an effect of 0 when it reads \"no difference\". Size: whether DeiT's "
            "effects (points / 100) lie inside our interval, or our whole interval lies above or below them; an "
            "interval that holds 0 as well reads \"cannot tell\", since it holds no effect too.", ""]
    gate = unsettled(p)
    if gate:
        out += [gate, ""]

    for what, published, ours in published_effects(p, cl):
        pub_text = " / ".join(f"{x:+.1f}" for x in published)
        said = "; ".join(f"{c['label']} at {c['fraction']:g}: {_est_text(claim.estimate)}" + claim.dagger()
                         + ("" if gate else f" ({claim.against_published()})") for c, claim in ours) or "not run here"
        out.append(f"- {what}: published {pub_text} points; ours: {said}")
    return out


def render_profile(p: Profile, png: str) -> list[str]:
    cl = claims(p)
    fractions = ", ".join(f"{f:g} = {p.size_label(f)}" for f in p.fractions)
    plain = p.axes.get("student_lr_of")
    if p.trains_alone:
        none_head = f" none's distillation head never trains: only its cls is reported ({NA})."
        alone = "the student trained alone (cls)" + (f" and minus {plain}" if plain in p.teacher_families else "")
    else:  # DeiT's own no-distillation baseline (its Table 3): the network without the distillation token
        none_head, alone = "", f"{plain} trained alone (DeiT without its distillation token, at the students' lr)"
    return [f"## Profile {p.name}", "", *provenance(p), "",
            "### Test accuracy by inference head", "",
            "Mean over seeds ± the half-width of its 95% Student-t interval (n/a with one seed); fractions "
            f"{fractions}. cls: the class head; dist: the distillation head; cls+dist: the mean of their logits (the "
            f"head DeiT reports).{none_head} Teacher rows: the teacher's own test accuracy, in the cls column.", "",
            *main_table(p), "",
            "### DeiT's claims: paired differences by seed", "",
            f"(a) each distilled student (cls+dist) minus {alone}; (b) hard minus soft from the "
            "same teacher; both on the same training subset and seed.", "", *claims_tables(cl), "",
            "### Agreement with each teacher", "", *agreement_section(p), "",
            "### Class and distillation tokens", "", *cosine_section(p), "",
            f"![test accuracy and token cosine]({png})", "",
            "### What the numbers say", "", *reading(p, cl), "", *teacher_labels(p),
            "### DeiT (published)", "", *published_section(p, cl), ""]


def render_markdown(profiles: list[Profile], pngs: list[str], exp_dir: Path, unplanned: list[str]) -> str:
    out = [f"# {NAME}: DeiT students against CNN and transformer teachers", "",
           f"Generated by `make tables` from {exp_dir.as_posix()}/{RECORD} and the run folders it lists; do not edit "
           "by hand.", whose_runs(exp_dir), ""]
    if unplanned:
        out += [f"- not in the table: {plural(len(unplanned), 'finished run')} that {RECORD} does not list: "
                f"{', '.join(unplanned)}", ""]
    unreadable = read_runs(exp_dir)[1]
    if unreadable:
        out += [f"- {left_out_line(unreadable)}", ""]
    for p, png in zip(profiles, pngs):
        out += render_profile(p, png)
    return "\n".join(out).rstrip() + "\n"
