"""`python -m experiments inductive_bias`: what each family's architecture assumes (experiments/inductive_bias/spec.yaml).

Four stages, each resumable (finished runs are skipped, interrupted ones resume, failed ones are
retried; one failing run never stops the others):
1. tune: every family at each learning rate of the grid at each fraction it trains at (first seed),
   ViT also at the ablations' fractions; the winner on validation accuracy is that family's lr at
   that fraction. The trial that won is the main run of its configuration (only its test is left).
2. families: every family x family fraction x seed, tested (DeiT distils from the ResNet run of
   its subset and seed); these are the models the probes compare.
3. ablations: every variant of the ablated family (ViT) x its fractions x seed at ViT's chosen lr
   (position embedding, pooling, patch size); `learn` is ViT as the registry builds it, the same
   run as the family run wherever the fractions meet.
4. probes, on the first `probe_images` test images (reporting only): the spec's probe parts on each
   family run and each ablation run (<run>/probes.json, figures, TensorBoard), and minibatch CKA of
   every family against the ResNet of the first seed (<runs_dir>/inductive_bias/cka/*.json).
A planned run whose configuration another experiment in runs_dir already trained (exp-datascale's
ResNet and ViT runs) is not trained again: the record names it where it lives (runs/shared.py).
<runs_dir>/inductive_bias/inductive_bias.json records the axes, the tuning trials and choices, and
which run folders form the tables; `make tables` (experiments/inductive_bias/tables.py) reads only
these files and the runs' summary.json and probes.json.
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import torch
from rich.progress import Progress

from datamodules import ImageClassificationDataModule
from modules.budgets import BUDGET_TARGETS, FAMILIES, distils

from experiments.runs.run.probe import PARTS, RESULT, probe_run
from modules.probes.robustness import FILL
from experiments.runs.run.provenance import git_commit, hardware, versions
from modules.files import write_json

from experiments.inductive_bias.numbers import CKA_DIR
from experiments.runs.run.record import read_json, write_profile_record
from experiments.runs.run.run_folder import RunFolder
from experiments.runs.sweep.cluster import options_from
from experiments.runs.sweep.slurm import print_status, run_then_tables
from experiments.runs.sweep.spec import (Run, Schema, plan_run, batch_sizes, check_axes, count_setting, default_jobs,
                                         check_probe_images, load_spec, main_runs, nearest_tuned, number_list, outside_profile,
                                         precision_of, runner_parser, with_folders)
from experiments.runs.sweep.execute import TUNED, run_status
from experiments.runs.sweep.sweep import AnyLr, choose_lrs, launching, print_plan, tuning_stage, whole_profile

NAME = "inductive_bias"
RECORD = "inductive_bias.json"
HINT = ": delete it and run make exp-inductive-bias again"
BASELINE = "learn"     # the ablated family as the registry builds it: its runs use the variant "default"
REFERENCE = "resnet"   # every family's CKA is computed against this family
TOP_KEYS = {"dataset", "ablated", "ablations", "profiles"}
PROFILE_KEYS = {"families", "family_fractions", "ablations", "budget", "seeds", "epochs", "min_steps", "max_steps",
                "val_checks", "val_size", "batch_size", "precision", "lrs", "tuned_fractions", "probe_images", "probe_patch",
                "probes", "jobs", "cluster"}
PROFILE_REQUIRED = ("families", "family_fractions", "ablations", "budget", "seeds", "epochs", "min_steps",
                    "val_checks", "lrs", "probe_images", "probes")


# ---------------- the spec ----------------
def load_ib_spec(name_or_path: str = NAME) -> dict:
    return load_spec(name_or_path, SCHEMA)


def _check_ablations(spec: dict, label: str) -> None:
    if spec["ablated"] not in FAMILIES:
        raise ValueError(f"ablated family {spec['ablated']!r}: allowed {', '.join(FAMILIES)}")
    ablations = spec["ablations"]
    if not isinstance(ablations, dict) or ablations.get(BASELINE, None) != {} \
            or not all(isinstance(v, dict) for v in ablations.values()):
        raise ValueError(f"ablations in {label}: allowed a mapping of variant names to fit options, with "
                         f"{BASELINE!r}: {{}} (the family as the registry builds it) among them")


SCHEMA = Schema(NAME, frozenset(TOP_KEYS), ("name", "dataset", "ablated", "ablations", "profiles"),
                frozenset(PROFILE_KEYS), PROFILE_REQUIRED, check=_check_ablations)


def resolve_axes(spec: dict, profile: str, *, seeds=None, families=None, variants=None, budgets=None) -> dict:
    """The profile's axes with command-line overrides, every value checked. `budget` may be one
    budget or a list of them (every family and ablation is run at each); axes["budget"] is the first."""
    if profile not in spec["profiles"]:
        raise ValueError(f"unknown profile {profile!r}: allowed {', '.join(spec['profiles'])}")
    p = spec["profiles"][profile]
    where = f"profile {profile!r}"
    if not isinstance(p["ablations"], dict) or not all(isinstance(v, list) and v for v in p["ablations"].values()):
        raise ValueError(f"ablations in {where}: allowed a mapping of variants to non-empty lists of fractions")
    chosen = list(variants or p["ablations"])
    for v in chosen:
        if v not in spec["ablations"] or v not in p["ablations"]:
            known = ", ".join(x for x in p["ablations"] if x in spec["ablations"])
            raise ValueError(f"unknown ablation {v!r}: allowed {known}")
    probes = p["probes"]
    if not isinstance(probes, dict) or set(probes) != {"families", "ablations"}:
        raise ValueError(f"probes in {where}: allowed {{families: [parts], ablations: [parts]}} with parts of "
                         f"{', '.join(PARTS)}")
    for part in [*probes["families"], *probes["ablations"]]:
        if part not in PARTS:
            raise ValueError(f"probe part {part!r} in {where}: allowed {', '.join(PARTS)}")
    budgets = list(budgets or (p["budget"] if isinstance(p["budget"], list) else [p["budget"]]))
    if not budgets or not all(isinstance(b, str) for b in budgets):
        raise ValueError(f"budget={p['budget']!r} in {where}: allowed a budget ({', '.join(BUDGET_TARGETS)}) or a "
                         "non-empty list of them")
    axes = {"profile": profile, "dataset": spec["dataset"], "ablated": spec["ablated"], "budgets": budgets,
            "budget": budgets[0],
            "families": list(families or p["families"]),
            "family_fractions": sorted(number_list(p["family_fractions"], "family_fractions", where)),
            "ablations": {v: sorted(number_list(p["ablations"][v], f"ablations of {v!r}", where)) for v in chosen},
            "seeds": number_list(seeds if seeds is not None else p["seeds"], "seeds", where, integers=True),
            "lrs": sorted(number_list(p["lrs"], "lrs", where)), "epochs": p["epochs"], "min_steps": p["min_steps"],
            "max_steps": p.get("max_steps"),
            "val_checks": p["val_checks"], "val_size": p.get("val_size"),
            "batch_size": batch_sizes(p.get("batch_size", 128), where), "precision": precision_of(p, where),
            "probe_images": count_setting(p["probe_images"], "probe_images", where, 4),
            "probe_patch": count_setting(p.get("probe_patch", 4), "probe_patch", where),
            "probes": {k: list(v) for k, v in probes.items()},
            "jobs": count_setting(p.get("jobs", default_jobs()), "jobs", where)}
    if p.get("tuned_fractions") is not None:
        axes["tuned_fractions"] = sorted(number_list(p["tuned_fractions"], "tuned_fractions", where))
        outside = [f for f in axes["tuned_fractions"] if f not in axes["family_fractions"]]
        if outside or not axes["tuned_fractions"]:
            raise ValueError(f"tuned_fractions {p['tuned_fractions']} in {where}: allowed a non-empty subset of "
                             f"family_fractions {axes['family_fractions']}")
    for f in axes["families"]:
        if f not in FAMILIES:
            raise ValueError(f"unknown family {f!r}: allowed {', '.join(FAMILIES)}")
    student = next((f for f in axes["families"] if distils(f)), None)
    if student and REFERENCE not in axes["families"]:
        raise ValueError(f"families {axes['families']}: {student} distils from {REFERENCE}, which must be among them")
    # check_axes reads "fractions": every fraction of the profile is checked, at every budget
    for b in budgets:
        check_axes({**axes, "budget": b, "fractions": sorted({*axes["family_fractions"], *_ablation_fractions(axes)})})
    return axes


def check_ablations(spec: dict, axes: dict, image_size: int, in_chans: int, num_classes: int) -> None:
    """Builds each variant's model once (milliseconds for these budgets), so an option the registry
    refuses (a patch that does not divide the image, a knob of another family) is one line before
    any run, not a failed run per seed."""
    from modules.registry import Knobs, build_model
    knobs = set(Knobs.__dataclass_fields__)
    for v in axes["ablations"]:
        options = {k.split(".", 1)[1]: x for k, x in spec["ablations"][v].items()
                   if k.startswith("model.") and k.split(".", 1)[1] in knobs}
        for budget in axes["budgets"]:
            try:
                build_model(axes["ablated"], budget, image_size=image_size, in_chans=in_chans,
                            num_classes=num_classes, **options)
            except ValueError as e:
                raise ValueError(f"ablation {v!r}: {e}") from None


def _ablation_fractions(axes: dict) -> list[float]:
    return sorted({f for fractions in axes["ablations"].values() for f in fractions})


# ---------------- the runs ----------------
def _variant(variant: str) -> str:
    return "default" if variant == BASELINE else variant


def _view(spec: dict, axes: dict) -> dict:
    """The sweep's view of this spec: each ablation is a variant (its fit options)."""
    return {"name": spec["name"], "variant_args": {_variant(v): spec["ablations"][v] for v in spec["ablations"]}}


def _family_axes(axes: dict) -> dict:
    return {**axes, "fractions": axes["family_fractions"], "tuned_fractions": _tuned(axes, axes["family_fractions"]),
            "variants": ["default"]}


def _tuned(axes: dict, fractions: list[float]) -> list[float]:
    """Of these fractions, those where learning rates are tuned: every one, or the profile's
    tuned_fractions only (the other fractions take the lr of the nearest tuned one)."""
    limit = axes.get("tuned_fractions")
    return [f for f in fractions if limit is None or f in limit]


def tuned_at(axes: dict, family: str) -> list[float]:
    """Where `family`'s lr is tuned: at each fraction it trains at, within the profile's tuned_fractions."""
    trains = set(axes["family_fractions"]) if family in axes["families"] else set()
    if family == axes["ablated"]:
        trains |= set(_ablation_fractions(axes))
    return sorted(_tuned(axes, sorted(trains)) or axes.get("tuned_fractions") or trains)


def _unique(runs: list[Run]) -> list[Run]:
    """The runs with each folder once (the ablated family's baseline is also a family run)."""
    seen, out = set(), []
    for r in runs:
        if r.run_dir not in seen:
            seen.add(r.run_dir)
            out.append(replace(r, index=len(out)))
    return out


def plan_tuning(spec: dict, axes: dict, runs_dir: Path, pool: int, run=None) -> tuple[dict, list[Run]]:
    """The tuning trials (run when `run` is given): every family at its family fractions, the
    ablated family also at the ablations' fractions; returns (choices, trials)."""
    view = _view(spec, axes)
    choices, trials = tuning_stage(view, _family_axes(axes), runs_dir, pool, run=run)
    done = _family_axes(axes)["tuned_fractions"] if axes["ablated"] in axes["families"] else []
    extra = [f for f in tuned_at(axes, axes["ablated"]) if f not in done]
    if extra:
        ablated = {**axes, "families": [axes["ablated"]], "fractions": extra, "tuned_fractions": extra,
                   "variants": ["default"]}
        _, more = tuning_stage(view, ablated, runs_dir, pool, run=run)
        trials = _unique(trials + more)
        choices, _ = choose_lrs(trials)
    return choices, trials


def lr_of(choices: dict, axes: dict, family: str, fraction: float) -> float | None:
    """The lr chosen for `family` at the tuned fraction nearest `fraction` (log scale), or None."""
    tuned = tuned_at(axes, family)
    return choices.get((family, "default", nearest_tuned(fraction, {"tuned_fractions": tuned}))) if tuned else None


def family_runs(spec: dict, axes: dict, runs_dir: Path, pool: int, choices: dict) -> list[Run]:
    """Every family with a chosen lr at each family fraction x seed (ResNets before DeiTs)."""
    fa = _family_axes(axes)
    ready = [f for f in axes["families"] if all(lr_of(choices, axes, f, x) is not None for x in fa["fractions"])]
    if REFERENCE not in ready:
        ready = [f for f in ready if not distils(f)]  # their teachers cannot be listed yet
    if not ready:
        return []
    return main_runs(_view(spec, axes), {**fa, "families": ready}, runs_dir, pool,
                     lambda family, variant, fraction: lr_of(choices, axes, family, fraction))


def ablation_runs(spec: dict, axes: dict, runs_dir: Path, pool: int, choices: dict) -> list[Run]:
    """Every variant x its fractions x seed, at the ablated family's chosen lr of that fraction."""
    view, family = _view(spec, axes), axes["ablated"]
    runs = [plan_run(view, axes, runs_dir, pool, family, f, s, _variant(v), lr_of(choices, axes, family, f), "main")
            for v, fractions in axes["ablations"].items() for f in fractions for s in axes["seeds"]
            if lr_of(choices, axes, family, f) is not None]
    return with_folders(runs)


def variant_of(run: Run) -> str:
    return BASELINE if run.variant == "default" else run.variant


# ---------------- probes ----------------
def _probed(run_dir: Path, parts: list[str], images: int, patch: int) -> bool:
    """Whether the run's probes.json holds these parts, measured on its current best checkpoint (and
    its robustness with today's black fill: a record of the older, mean-colour fill is probed again)."""
    old = read_json(run_dir / RESULT)
    ckpt = RunFolder(run_dir).best_checkpoint
    want = images if any(p != "pos_embed" for p in parts) else 0
    fill = "robustness" not in parts or (old.get("robustness") or {}).get("fill") == FILL
    return (set(parts) <= set(old.get("parts", [])) and old.get("images") == want and old.get("patch") == patch
            and fill and ckpt.is_file() and (run_dir / RESULT).stat().st_mtime >= ckpt.stat().st_mtime)


def cka_file(exp_dir: Path, run: Run, reference: Run) -> Path:
    return exp_dir / CKA_DIR / f"{run.run_dir.name}__{reference.run_dir.name}.json"


@torch.inference_mode()
def cka_against(run_dir: Path, reference_dir: Path, images: torch.Tensor, batch: int = 100) -> dict:
    """Minibatch CKA (Nguyen et al. / Raghu et al.) between every block of a run's model and every
    block of the reference's, on the same test images."""
    from modules.probes import layer_names, minibatch_cka

    from experiments.runs.run.trained import load_classifier
    a, b = load_classifier(run_dir).model, load_classifier(reference_dir).model
    batches = [x for x in images.split(batch) if len(x) >= 4]
    matrix = minibatch_cka(a, b, batches)               # (blocks of a, blocks of b)
    return {"run": run_dir.name, "reference_run": reference_dir.name, "layers": layer_names(a),
            "reference_layers": layer_names(b), "images": sum(len(x) for x in batches), "split": "test",
            "matrix": [[round(float(v), 6) for v in row] for row in matrix],
            "commit": git_commit(), "versions": versions(), "hardware": hardware()}


def probes_stage(axes: dict, exp_dir: Path, families: list[Run], ablations: list[Run]) -> dict[str, str]:
    """probes.json for every finished family and ablation run that lacks its parts; CKA of each
    family run of the first seed against the ResNet of its subset. Returns name -> probed / done."""
    images, patch = axes["probe_images"], axes["probe_patch"]
    jobs, results = {}, {}
    for r in families:
        jobs[r.run_dir] = (r, axes["probes"]["families"])
    for r in ablations:
        if r.run_dir not in jobs:
            jobs[r.run_dir] = (r, axes["probes"]["ablations"])
    todo = []
    for r, parts in jobs.values():
        if run_status(r) != "done":
            continue
        if _probed(r.run_dir, parts, images, patch):
            results[r.name] = "done"
        else:
            todo.append((r, parts))
    reference = {(r.fraction, r.seed): r for r in families if r.family == REFERENCE and run_status(r) == "done"}
    pairs = [(r, reference[r.fraction, r.seed]) for r in families
             if r.family != REFERENCE and r.seed == axes["seeds"][0] and (r.fraction, r.seed) in reference
             and run_status(r) == "done"]
    pairs_todo = [(r, ref) for r, ref in pairs if read_json(cka_file(exp_dir, r, ref)).get("images") != images]
    results.update({f"cka {r.name}": "done" for r, ref in pairs if (r, ref) not in pairs_todo})
    with Progress() as progress:
        task = progress.add_task("probes", total=len(todo) + len(pairs_todo))
        for r, parts in todo:
            progress.update(task, description=f"probes {r.name}")
            probe_run(r.run_dir, images, patch, seed=0, parts=tuple(parts))
            results[r.name] = "probed"
            progress.advance(task)
        cka_images = None
        for r, ref in pairs_todo:
            progress.update(task, description=f"cka {r.family} vs {REFERENCE}")
            if cka_images is None:  # the test split is the same for every run of the dataset
                from experiments.runs.run.run_config import load_config
                from experiments.runs.run.trained import test_images
                cka_images = test_images(load_config(ref.run_dir)["data"], images)[0]
            path = cka_file(exp_dir, r, ref)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, {**cka_against(r.run_dir, ref.run_dir, cka_images), "family": r.family,
                              "reference": REFERENCE, "fraction": r.fraction, "seed": r.seed})
            results[f"cka {r.name}"] = "probed"
            progress.advance(task)
    return results


# ---------------- the command ----------------
def write_record(exp_dir: Path, spec: dict, axes: dict, pool: int, plans: list[tuple],
                 invocation: dict | None, ran: bool = True) -> Path:
    """The profile's entry of inductive_bias.json; plans: (axes of one budget, choices, trials,
    family runs, ablation runs) per budget."""
    trials, uses, families, ablations, cka = [], [], [], [], []
    for ax, choices, tried, fam, abl in plans:
        b = ax["budget"]
        trials += [{**t, "budget": b} for t in choose_lrs(tried)[1]]
        uses += [{"budget": b, "family": f, "fraction": x, "lr": lr_of(choices, ax, f, x),
                  "tuned_at": nearest_tuned(x, {"tuned_fractions": tuned_at(ax, f)})}
                 for f in dict.fromkeys([*ax["families"], ax["ablated"]])
                 for x in (sorted({*ax["family_fractions"], *_ablation_fractions(ax)})
                           if f == ax["ablated"] else ax["family_fractions"])
                 if lr_of(choices, ax, f, x) is not None]
        families += [{"budget": b, "family": r.family, "fraction": r.fraction, "seed": r.seed, "run": r.entry,
                      "teacher_run": r.teacher} for r in fam]
        ablations += [{"budget": b, "variant": variant_of(r), "fraction": r.fraction, "seed": r.seed,
                       "run": r.entry} for r in abl]
        names = {r.run_dir.name for r in fam}
        cka += [q.relative_to(exp_dir).as_posix() for q in (exp_dir / CKA_DIR).glob("*.json")
                if q.name.split("__")[0] in names]
    entry = {"axes": {**{k: v for k, v in axes.items() if k not in ("profile", "jobs", "budget")}, "pool_size": pool,
                      "ablation_args": {v: spec["ablations"][v] for v in axes["ablations"]}},
             "tuning": {"trials": trials, "choices": uses}, "families": families, "ablations": ablations,
             "cka": sorted(cka)}
    return write_profile_record(exp_dir / RECORD, spec["name"], axes["profile"], entry, invocation, hint=HINT,
                                ran=ran)


def main(argv: list[str]) -> int:
    p = runner_parser(NAME, __doc__)
    p.add_argument("--families", nargs="+", help="override the probed families (deit needs resnet)")
    p.add_argument("--ablations", nargs="+", help="override the ablation variants (learn, none, sincos, ...)")
    p.add_argument("--budgets", nargs="+", help="override the budgets (tiny, small, base)")
    a = p.parse_args(argv)
    spec = load_ib_spec(a.spec)
    profile = a.profile or ("gpu" if torch.cuda.is_available() else "cpu")
    axes = resolve_axes(spec, profile, seeds=a.seeds, families=a.families, variants=a.ablations, budgets=a.budgets)
    if (note := outside_profile(spec, profile, a.families)) is not None:
        print(note)
    jobs = axes["jobs"] if a.jobs is None else a.jobs  # --jobs 0 is refused, not the profile's
    if jobs < 1:
        raise ValueError(f"--jobs {jobs}: allowed integers >= 1")
    runs_dir, exp_dir = Path(a.runs_dir), Path(a.runs_dir) / spec["name"]
    read_json(exp_dir / RECORD, hint=HINT)  # a corrupt record: stop before any work
    dm = ImageClassificationDataModule(axes["dataset"], val_size=axes["val_size"])
    check_ablations(spec, axes, dm.image_size, dm.num_channels, dm.num_classes)
    where = f"profile {axes['profile']!r}"
    check_probe_images(axes["probe_images"], dm.test_size, where)
    if dm.image_size % axes["probe_patch"]:
        raise ValueError(f"probe_patch={axes['probe_patch']} in {where}: allowed an integer >= 1 that divides the "
                         f"{dm.image_size}x{dm.image_size} image (the probes' cell size)")
    pool = len(dm._splits["pool"])
    cluster = options_from(a, spec["profiles"][axes["profile"]].get("cluster"), NAME, argv, jobs)
    return run_then_tables(lambda: _stages(a, spec, axes, runs_dir, exp_dir, pool, jobs, cluster), cluster,
                           spec["name"], runs_dir, planning_only=a.dry_run or a.status)


def every_run(spec: dict, axes: dict, runs_dir: Path, pool: int) -> list[Run]:
    """Every run of the profile, per budget, those waiting for their lr planned at any lr. Planning
    parses each run's fit options, so an ablation the suite refuses stops the command here, before
    anything trains."""
    anyway = AnyLr(axes["lrs"][0])
    return [r for budget in axes["budgets"] for ax in [{**axes, "budget": budget}]
            for r in [*plan_tuning(spec, ax, runs_dir, pool)[1], *family_runs(spec, ax, runs_dir, pool, anyway),
                      *ablation_runs(spec, ax, runs_dir, pool, anyway)]]


def _stages(a, spec: dict, axes: dict, runs_dir: Path, exp_dir: Path, pool: int, jobs: int, cluster) -> int:
    a.dry_run = a.dry_run or a.status
    planned = every_run(spec, axes, runs_dir, pool)  # before the lock: a refused ablation leaves nothing behind
    with launching(exp_dir, _launcher(jobs, runs_dir), jobs, a.dry_run, cluster) as run:
        start = time.perf_counter()
        results, launched = run.results, run.launched  # launched: only then is its wall time the experiment's

        plans = []  # per budget: its axes, lr choices, tuning trials, family runs, ablation runs
        for budget in axes["budgets"]:
            ax = {**axes, "budget": budget}
            choices, trials = plan_tuning(spec, ax, runs_dir, pool, run=None if a.dry_run else run)
            plans.append((ax, choices, trials, family_runs(spec, ax, runs_dir, pool, choices),
                          ablation_runs(spec, ax, runs_dir, pool, choices)))
        every = _unique([r for *_, fam, abl in plans for r in fam + abl])
        if a.status:
            stages, waiting = [], []
            for ax, _, trials, fam, abl in plans:
                at = f" ({ax['budget']})" if len(plans) > 1 else ""
                stages += [(f"tune{at}", trials), (f"main{at}", _unique(fam + abl))]
                missing = [f for f in ax["families"] if f not in {r.family for r in fam}]
                if missing or not abl:
                    waiting.append(f"main runs of {', '.join(missing or [ax['ablated'] + ' ablations'])}{at}: "
                                   "listed once their tuning is done")
            return print_status(stages, waiting, exp_dir)
        if a.dry_run:
            for ax, _, trials, fam, abl in plans:
                at = f" (budget {ax['budget']})" if len(plans) > 1 else ""
                waiting = [f for f in ax["families"] if f not in {r.family for r in fam}]
                for title, runs in ((f"tune{at}", trials), (f"families and ablations{at}", _unique(fam + abl))):
                    if runs or not (waiting or not abl):  # an empty stage waiting on tuning: named below, not "0 runs"
                        print_plan(title, runs, ax)
                if waiting or not abl:
                    print(f"## {', '.join(waiting or [ax['ablated'] + ' ablations'])}{at}: main runs listed once their "
                          "tuning trials are done")
            whole_profile(planned, axes, jobs)
            return 0
        run(every)
        probed = {}
        for ax, _, _, fam, abl in plans:
            probed.update(probes_stage(ax, exp_dir, fam, abl))
        results.update({f"probes {k}": v for k, v in probed.items()})
        wall = time.perf_counter() - start
        counts = {s: list(results.values()).count(s) for s in sorted(set(results.values()))}
        print(f"{NAME} ({axes['profile']}): {len(results)} runs and probes in {wall:.0f} s: "
              + ", ".join(f"{n} {s}" for s, n in counts.items()))
        # the wall time of a whole profile that trained something; an invocation that only probes keeps it
        whole = a.seeds is None and a.families is None and a.ablations is None and a.budgets is None and bool(launched)
        write_record(exp_dir, spec, axes, pool, plans,
                     {"wall_time_s": round(wall), "runs": len(launched), "statuses": counts, "jobs": jobs}
                     if whole else None, ran=bool(launched) or "probed" in probed.values())
        ok = all(s in ("done", "diverged", "probed", *TUNED) for s in results.values())
        planned = len(axes["budgets"]) * len(axes["seeds"]) * (len(axes["families"]) * len(axes["family_fractions"])
                                                              + sum(len(f) for f in axes["ablations"].values()))
        return 0 if ok and sum(len(fam) + len(abl) for *_, fam, abl in plans) == planned else 1


def _launcher(jobs: int, runs_dir: Path):
    from experiments.runs.sweep.execute import Workers, launch
    workers = Workers(jobs)
    return lambda r: launch(r, workers)
