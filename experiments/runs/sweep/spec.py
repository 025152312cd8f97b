"""Experiment specs (experiments/<experiment>/spec.yaml) and their expansion into independent runs.

Every spec declares its runner and its place (declared: what `python -m experiments`, the README's
Findings and the Makefile know of an experiment), and one loader reads it with its runner's schema
(load_spec; the sweep's SWEEP_SCHEMA, each runner its own SCHEMA).

A run is one `python -m experiments fit ...` command with a fixed folder. A spec runs in two stages:
the tuning stage trains each family at a grid of learning rates on the profile's tuned_fractions,
else its smallest and largest fractions (the profile's first seed, never tested), and the main
stage trains every family x fraction x seed x variant at the learning rate that won on validation
at the nearest tuned fraction. Nothing else links runs except DeiT's teacher (the ResNet run of
the same subset, seed and variant).
"""
from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import yaml

from datamodules.splits import resolve_train_size
from modules.budgets import BUDGET_TARGETS, FAMILIES, TEACHER, distils, fit_order
from modules.optim import LR_LIMIT, lr_in_range

from experiments.runs.run.identity import run_name
from experiments.runs.run.names import checked_name, runs_dir_option
from experiments.runs.run.run_folder import RunFolder
from experiments.runs.sweep.cluster import add_options, check_cluster
from experiments.runs.sweep.shared import entry, share
from modules.files import parse_yaml

EXPERIMENTS = Path(__file__).resolve().parents[2]  # one folder per experiment, each holding its spec.yaml
SWEEP = "sweep"  # the runner of a spec that names none


@dataclass(frozen=True)
class Declared:
    """What an experiment's spec declares about its place in the suite: the runner that runs it
    (`python -m experiments <runner>`, make exp-<name>) and where its rows go in the README's
    Findings and `make exp-all` runs it (order; None: after every ordered one, by name)."""
    name: str
    runner: str
    order: int | None
    path: Path

    @property
    def make_target(self) -> str:
        return f"exp-{self.name.replace('_', '-')}"


def experiment_roots() -> list[Path]:
    """The folders the experiments package is loaded from (its __path__): each subfolder holding a
    spec.yaml is an experiment, importable as experiments.<name>."""
    import experiments
    return [Path(p) for p in experiments.__path__]


def spec_path(name: str) -> Path:
    found = [root / name / "spec.yaml" for root in experiment_roots() if (root / name / "spec.yaml").is_file()]
    return found[0] if found else EXPERIMENTS / name / "spec.yaml"


def known_specs() -> list[str]:
    return sorted({p.parent.name for root in experiment_roots() for p in root.glob("*/spec.yaml")})


def declared() -> list[Declared]:
    """Every experiment's declaration, in its order (experiments without one last, by name)."""
    out = [_declaration(name) for name in known_specs()]
    return sorted(out, key=lambda d: (d.order is None, d.order or 0, d.name))


def declared_runners() -> dict[str, Declared]:
    """The runners of their own (not the sweep) the specs name: runner -> the spec it runs by default,
    the one of its own name (each lives in experiments/<runner>/runner.py)."""
    return {d.runner: d for d in declared() if d.runner != SWEEP and d.runner == d.name}


def _declaration(name: str) -> Declared:
    path = spec_path(name)
    spec, label = read_spec(path), spec_label(path)
    if not isinstance(spec, dict):
        raise ValueError(f"spec {label} is {'empty' if spec is None else 'a ' + type(spec).__name__}, not a mapping")
    runner = checked_name(f"runner in {label}", spec.get("runner", SWEEP))
    _check_make_keys(spec, path)
    if runner != SWEEP and not (spec_path(runner).parent / "runner.py").is_file():
        raise ValueError(f"runner={runner!r} in {label}: allowed {SWEEP} (or no runner key), or an experiment "
                         f"with a runner.py ({runner}/runner.py does not exist)")
    order = spec.get("order")
    if order is not None and (isinstance(order, bool) or not isinstance(order, int) or order < 0):
        raise ValueError(f"order={order!r} in {label}: allowed an integer >= 0 (its place in the README's Findings "
                         "and in make exp-all)")
    return Declared(name, runner, order, path)


# how the Makefile reads a spec's keys, line by line (sed, not a YAML parser): each key's line as it reads it
MAKE_LINES = {"runner": re.compile(r"^runner: *([a-z0-9_]*)", re.M), "order": re.compile(r"^order: *([0-9]*)", re.M),
              "make_options": re.compile(r"^make_options: *\[([A-Z_, ]*)\]", re.M),
              "make_help": re.compile(r'^make_help: *"(.*)"', re.M)}
MAKE_FORMS = {"runner": "letters a-z, digits and _", "order": "an integer >= 0",
              "make_options": "a list of the Makefile's variable names on one line, e.g. [PROFILE, SEEDS]",
              "make_help": 'one line of text in double quotes, e.g. "what it runs"'}


def _check_make_keys(spec: dict, path: Path) -> None:
    """Each key the Makefile reads says on its line what the YAML says: a spec the Makefile would
    read otherwise (a runner it would not run, options it would not pass) is refused."""
    text = path.read_text()
    for key, line in MAKE_LINES.items():
        if key not in spec:
            continue
        found = line.search(text)
        read = found and (found.group(1).replace(",", " ").split() if key == "make_options" else found.group(1))
        if read != (str(spec[key]) if key == "order" else spec[key]):
            raise ValueError(f"{key}={spec[key]!r} in {spec_label(path)}: allowed {MAKE_FORMS[key]} "
                             "(the Makefile reads it from its line)")


JOBS_HELP = "the profile's jobs, else one run per core without a GPU (each on one thread), one with a GPU"


def default_jobs() -> int:
    """Runs at a time when a profile does not say: one per core on a machine without a GPU (each run
    then trains on one thread: benchmarks/process_parallelism.py), one with a GPU (packing shares it)."""
    import torch
    return 1 if torch.cuda.is_available() else os.cpu_count() or 1


def spec_label(path: Path) -> str:
    """How messages name a spec: datascale/spec.yaml, or the file name of a user's own spec."""
    return f"{path.parent.name}/{path.name}" if path.name == "spec.yaml" else path.name


TOP_KEYS = {"dataset", "families", "variants", "variant_args", "sample_efficiency_accuracy"}
PROFILE_KEYS = {"budget", "fractions", "seeds", "epochs", "min_steps", "max_steps", "val_checks", "val_size", "batch_size", "lrs",
                "precision",
                "families", "variants", "pack", "tuned_fractions", "jobs", "cluster"}
PROFILE_REQUIRED = ("budget", "fractions", "seeds", "epochs", "min_steps", "val_checks", "lrs")


@dataclass(frozen=True)
class Run:
    index: int
    name: str
    family: str
    fraction: float
    seed: int
    variant: str
    args: tuple[str, ...]
    teacher: str | None = None           # folder name of the run whose best checkpoint DeiT distils from
    run_dir: Path = field(default=Path("."))
    stage: str = "main"                  # tune: trained and validated only; main: also tested
    lr: float | None = None
    budget: str = "tiny"
    steps: int = 0                       # S(n), the --trainer.max_steps of its command
    batch_size: int = 128                # images a step, the --data.batch_size of its command
    planned_by: str = ""                 # the experiment whose plan it is (its run_dir may be another's: shared.py)

    @property
    def entry(self) -> str:
        """How the planning experiment's record names it: its folder name, or <experiment>/<folder>
        when it lives in another experiment's folder."""
        return entry(self.run_dir, self.planned_by or self.run_dir.parent.name)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "experiments", "fit", *self.args]

    def shell(self) -> str:
        return shlex.join(["python", "-m", "experiments", "fit", *self.args])


def check_training_profile(profile: dict, where: str) -> None:
    """The values every training runner's profile shares: cluster, schedule, batch size, precision."""
    check_cluster(profile.get("cluster"), where)  # the slurm and submitit-local launchers' settings
    check_schedule(profile, where)
    batch_sizes(profile.get("batch_size", 128), where)
    precision_of(profile, where)


COMMON_KEYS = frozenset({"name", "runner", "order", "make_help", "make_options", "profiles"})  # every spec's (Declared)


@dataclass(frozen=True)
class Schema:
    """What a runner's specs hold: the keys of their own at the top (besides COMMON_KEYS) and in
    each profile, the required ones, a check of each profile's values (a training runner's
    schedule, batch size, precision and cluster by default) and of the whole spec."""
    runner: str
    keys: frozenset[str]
    required: tuple[str, ...]
    profile_keys: frozenset[str]
    profile_required: tuple[str, ...]
    check_profile: Callable[[dict, str], None] = check_training_profile  # (profile, where)
    check: Callable[[dict, str], None] = lambda spec, label: None  # (spec, its label)


def read_spec(path: Path):
    """A spec file's YAML, or one line saying where it is not valid."""
    try:
        return parse_yaml(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ValueError(f"spec {str(path)!r} is not valid YAML" + (f" (line {mark.line + 1})" if mark else "")
                         + f": {getattr(e, 'problem', None) or e}") from None


def load_spec(name_or_path: str, schema: Schema | None = None) -> dict:
    """A spec found by name (experiments/<name>/spec.yaml) or by path, valid YAML, run by the
    schema's runner (the sweep's by default), with no unknown or missing key at the top or in any
    profile and every value its schema checks."""
    schema = schema or SWEEP_SCHEMA
    path = Path(name_or_path)
    if not path.suffix:
        path = spec_path(name_or_path)
    if not path.is_file():
        raise ValueError(f"unknown experiment spec {name_or_path!r}: allowed {', '.join(known_specs())} "
                         "or a path to a .yaml spec")
    spec, label = read_spec(path), f"spec {spec_label(path)}"
    runner = spec.get("runner", SWEEP) if isinstance(spec, dict) else schema.runner
    if runner != schema.runner:
        target = f" (make exp-{path.parent.name.replace('_', '-')})" if path.name == "spec.yaml" else ""
        raise ValueError(f"{label} is run by `python -m experiments {runner}`{target}, not by {schema.runner}")
    reject_unknown(spec, schema.keys | COMMON_KEYS, label, required=schema.required)
    if not isinstance(spec["profiles"], dict) or not spec["profiles"]:
        raise ValueError(f"{label} has no profiles: allowed a mapping of profile names (e.g. cpu, gpu) "
                         f"to their {', '.join(sorted(schema.profile_keys))}")
    for name, profile in spec["profiles"].items():
        where = f"profile {name!r} of {spec_label(path)}"
        reject_unknown(profile, schema.profile_keys, where, required=schema.profile_required)
        schema.check_profile(profile, where)
    checked_name(f"name in {spec_label(path)}", spec["name"])  # the experiment's folder under runs_dir
    schema.check(spec, spec_label(path))
    return spec


def _check_sweep_profile(profile: dict, where: str) -> None:
    for key in ("fractions", "seeds", "lrs"):
        if not isinstance(profile[key], list) or not profile[key]:
            raise ValueError(f"{key}={profile[key]!r} in {where}: allowed a non-empty list, e.g. [0, 1]")
    check_training_profile(profile, where)


def _check_variants(spec: dict, label: str) -> None:
    variants = spec["variant_args"]
    if not isinstance(variants, dict) or not variants or not all(isinstance(v, dict) for v in variants.values()):
        raise ValueError(f"variant_args in {label}: allowed a mapping of variant names to their fit options, "
                         "e.g. {default: {}, strong: {data.randaugment: true}}")


SWEEP_SCHEMA = Schema(SWEEP, frozenset(TOP_KEYS), ("name", "dataset", "families", "profiles", "variant_args"),
                      frozenset(PROFILE_KEYS), PROFILE_REQUIRED, _check_sweep_profile, _check_variants)


def runner_parser(runner: str, doc: str | None) -> argparse.ArgumentParser:
    """The options every spec runner shares (--spec, --profile, --seeds, --runs_dir, --jobs,
    --dry_run); argparse errors become one ValueError line. Each runner adds its own axes."""
    p = argparse.ArgumentParser(prog=f"python -m experiments {runner}", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default=runner, help=f"an experiment with a spec.yaml under experiments/, or a .yaml path (default {runner})")
    p.add_argument("--profile", default=None, help="cpu or gpu (default: gpu where a GPU is present, else cpu)")
    p.add_argument("--seeds", nargs="+", type=int, help="override the seeds (the first one is used for tuning)")
    p.add_argument("--runs_dir", default="results/runs", type=runs_dir_option,
                   help="where run folders go (default results/runs)")
    p.add_argument("--jobs", type=int, default=None, help=f"runs at a time (default: {JOBS_HELP})")
    p.add_argument("--dry_run", action="store_true", help="print each run's exact command and status (a stage that waits on another's results: its count "
                        "and estimate until then); run nothing")
    add_options(p)

    def one_line(message: str):
        raise ValueError(f"{message} (python -m experiments {runner} --help lists the options)")
    p.error = one_line
    return p


def check_schedule(profile: dict, where: str) -> None:
    """epochs (a number > 0), min_steps and the optional max_steps (integers >= 1), each either one
    value or a mapping from a family or variant name to its value with a `default` (a run takes its
    variant's value, else its family's, else the default: each run gets the steps its curve needs);
    a value may itself map training-set sizes to values, with an entry for 0 (a run on n images
    takes the entry of the largest size <= n: at_size); val_checks an integer >= 1."""
    for key, integer in (("epochs", False), ("min_steps", True), ("max_steps", True)):
        if key not in profile:
            continue
        value = profile[key]
        if isinstance(value, dict) and not _by_size(value):
            if all(isinstance(k, int) and not isinstance(k, bool) for k in value):
                raise ValueError(f"{key}={value!r} in {where}: a mapping of training-set sizes needs an entry for 0 "
                                 f"and sizes >= 0 (e.g. {{0: 7380, 2950: 14760}})")
            odd = next((k for k in value if not isinstance(k, str)), None)
            if odd is not None:
                raise ValueError(f"{key}={value!r} in {where}: {odd!r} is no family or variant name; allowed a "
                                 f"mapping of names to values (a value may map sizes: {{'default': {{0: 7380, "
                                 f"2950: 14760}}}}), or a mapping of sizes alone")
        named = value if isinstance(value, dict) and not _by_size(value) else {None: value}
        for name, v in named.items():
            for one in (v.values() if _by_size(v) else [v]):
                if isinstance(one, bool) or not isinstance(one, int if integer else (int, float)) or one <= 0:
                    at = f"{key}={value!r}" if name is None else f"{key} of {name!r} = {v!r}"
                    allowed = "an integer >= 1" if integer else "a number > 0"
                    raise ValueError(f"{at} in {where}: allowed {allowed} or a mapping of training-set sizes "
                                     f"to such values with an entry for 0 (e.g. {{0: 7380, 2950: 14760}}), or a "
                                     f"mapping of family or variant names to either with a 'default'")
        if isinstance(value, dict) and not _by_size(value) and "default" not in value:
            raise ValueError(f"{key}={value!r} in {where} has no 'default': allowed a mapping of family or "
                             f"variant names to values, with a 'default' for every other run, or a mapping of "
                             f"training-set sizes to values with an entry for 0")
    v = profile["val_checks"]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"val_checks={v!r} in {where}: allowed an integer >= 1")


def _by_size(value) -> bool:
    """Whether a schedule value maps training-set sizes (integers, 0 among them) to values."""
    return isinstance(value, dict) and bool(value) and 0 in value and \
        all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in value)


def at_size(value, n: int):
    """A schedule value for a run on n training images: the value, or from its mapping of sizes the
    entry of the largest size <= n."""
    return value[max(k for k in value if k <= n)] if _by_size(value) else value


def batch_sizes(value, where: str) -> int | dict[int, int]:
    """A profile's batch_size: one integer >= 1, or a mapping from a training-set size to the batch
    size of runs on at least that many images, with an entry for 0 (batch_for)."""
    def ok(v, least: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= least
    if ok(value, 1):
        return value
    if isinstance(value, dict) and value and all(ok(k, 0) and ok(v, 1) for k, v in value.items()) and 0 in value:
        return dict(sorted(value.items()))
    raise ValueError(f"batch_size={value!r} in {where}: allowed an integer >= 1, or a mapping from training-set "
                     f"sizes to batch sizes with an entry for 0, e.g. {{0: 32, 1000: 128}}")


PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true")


def precision_of(profile: dict, where: str) -> str | None:
    """A profile's trainer precision, or None for the machine's default (cli.default_precision: bf16
    where the hardware runs it natively). A profile that pins 32-true makes a record made on any CPU
    the same configuration (the identity records the precision a run trained in); the cpu profiles
    leave it unset, so a CPU without native bf16 trains another configuration."""
    value = profile.get("precision")
    if value is not None and value not in PRECISIONS:
        raise ValueError(f"precision={value!r} in {where}: allowed {', '.join(PRECISIONS)}")
    return value


def batch_for(n: int, axes: dict) -> int:
    """The batch size of a run on n training images: the profile's one batch size, or from its mapping
    the entry of the largest training-set size <= n. Small sets keep several steps an epoch; larger
    ones take larger batches, whose matmuls use the cores better (benchmarks/cpu_levers.py)."""
    b = axes["batch_size"]
    return b if isinstance(b, int) else b[max(k for k in b if k <= n)]


def per_run(value, family: str, variant: str):
    """A schedule value for one run: the value itself, or from its mapping the variant's (an
    ablation, a student), else the family's, else the default. The variant `default`
    is not looked up: in a mapping that key is the fallback. A mapping of training-set sizes comes
    back as it is (at_size picks its entry). Values are a spec's as loaded: the axes sweep.json
    records (JSON keys are strings) are for reading, not for planning."""
    if not isinstance(value, dict) or _by_size(value):
        return value
    if variant != "default" and variant in value:
        return value[variant]
    return value.get(family, value["default"])


def reject_unknown(d: dict, allowed: set[str], where: str, required: tuple[str, ...] = ()) -> None:
    """One ValueError line naming `where` when `d` is not a mapping, holds a key outside `allowed` or
    lacks one of `required` (a spec's or a profile's keys; the runners check their own sections with it)."""
    if not isinstance(d, dict):
        raise ValueError(f"{where} is {'empty' if d is None else 'a ' + type(d).__name__}, not a mapping: "
                         f"allowed keys {', '.join(sorted(allowed))}")
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} in {where}: allowed {', '.join(sorted(allowed))}")
    missing = [k for k in required if k not in d]
    if missing:
        raise ValueError(f"{where} lacks the key {missing[0]!r}: required {', '.join(required)}")


def resolve_axes(spec: dict, profile: str, *, families=None, fractions=None, seeds=None, budget=None,
                 dataset=None, variants=None, lrs=None) -> dict:
    """The spec's profile with command-line overrides, every value checked."""
    if profile not in spec["profiles"]:
        raise ValueError(f"unknown profile {profile!r}: allowed {', '.join(spec['profiles'])}")
    p, where = spec["profiles"][profile], f"profile {profile!r}"
    axes = {
        "profile": profile, "dataset": dataset or spec["dataset"], "budget": budget or p["budget"],
        "families": list(families or p.get("families") or spec["families"]),
        "fractions": sorted(number_list(fractions or p["fractions"], "fractions", where)),
        "seeds": number_list(seeds if seeds is not None else p["seeds"], "seeds", where, integers=True),
        "tuning_seed": number_list(p["seeds"], "seeds", where, integers=True)[0],  # whatever --seeds pick: pieces of the seeds compose
        "variants": list(variants or p.get("variants") or spec.get("variants", ["default"])),
        "lrs": sorted(number_list(lrs or p["lrs"], "lrs", where)),
        "epochs": p["epochs"], "min_steps": p["min_steps"], "max_steps": p.get("max_steps"),
        "val_checks": int(p["val_checks"]), "val_size": p.get("val_size"),
        "batch_size": batch_sizes(p.get("batch_size", 128), f"profile {profile!r}"),
        "precision": precision_of(p, f"profile {profile!r}"),
        "pack": p.get("pack", 1),  # runs trained together in one process (sweep --pack)
        "jobs": p.get("jobs", default_jobs()),  # runs at a time, each with cpu_count / jobs threads (sweep --jobs)
    }
    # a profile that names where it tunes tunes there whatever --fractions pick: a piece of its fractions
    # trains the runs the whole profile would (each at the lr of the same tuned fraction)
    if p.get("tuned_fractions"):
        axes["tuned_fractions"] = sorted(number_list(p["tuned_fractions"], "tuned_fractions", where))
        outside = [f for f in axes["tuned_fractions"] if f not in axes["fractions"]]
        if outside and not fractions:
            raise ValueError(f"tuned fraction {outside[0]:g} of profile {profile!r} is not one of its fractions "
                             f"{', '.join(f'{f:g}' for f in axes['fractions'])}: allowed a subset of them")
    for key, one in (("pack", "every run alone"), ("jobs", "one run at a time")):
        if isinstance(axes[key], bool) or not isinstance(axes[key], int) or axes[key] < 1:
            raise ValueError(f"{key}={axes[key]!r} in profile {profile!r}: allowed an integer >= 1 (1 = {one})")
    for f in axes["families"]:
        if f not in FAMILIES:
            raise ValueError(f"unknown family {f!r}: allowed {', '.join(FAMILIES)}")
    if any(distils(f) for f in axes["families"]) and TEACHER not in axes["families"]:
        # DeiT distils from the ResNet of its subset and seed: a piece naming the student alone
        # (FAMILIES=deit) plans its teachers too (finished ones train nothing), never a DeiT without one
        axes["families"] = [TEACHER, *axes["families"]]
    check_axes(axes)
    for r in axes["variants"]:
        if r not in spec["variant_args"]:
            raise ValueError(f"unknown variant {r!r}: allowed {', '.join(spec['variant_args'])}")
    return axes


def outside_profile(spec: dict, profile: str, families: list[str] | None) -> str | None:
    """A note when --families names a family the profile does not list: it trains at the profile's
    default protocol lines (its `default` epochs and steps), which were not chosen for it."""
    listed = spec["profiles"][profile].get("families") or spec.get("families") or []
    extra = [f for f in families or [] if listed and f not in listed]
    if not extra:
        return None
    return (f"note: {', '.join(extra)} not among the {profile} profile's families ({', '.join(listed)}): "
            f"{'they train' if len(extra) > 1 else 'it trains'} at the profile's default epochs and steps")


def count_setting(value, key: str, where: str, low: int = 1) -> int:
    """An integer setting of a profile (jobs, probe_images, probe_patch, ...), or one line naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{key}={value!r} in {where}: allowed an integer >= {low}")
    return value


def check_probe_images(n: int, test_size: int, where: str) -> None:
    """A profile's probe_images against its dataset's test split: more would be probed as fewer, and
    recorded as fewer, so that every rerun probed again."""
    if n > test_size:
        raise ValueError(f"probe_images={n} in {where}: allowed at most {test_size}, the images of the dataset's "
                         "test split")


def number_list(values, key: str, where: str, integers: bool = False) -> list:
    """A profile's list of numbers (fractions, lrs; seeds as integers), or one line naming it. A float
    may be written as YAML reads 1e-3 (text that Python reads as a number); an integer may not be 2.5."""
    def one(v):
        if isinstance(v, bool):
            return None
        if integers:
            return v if isinstance(v, int) else None
        try:
            return float(v) if isinstance(v, (int, float, str)) else None
        except ValueError:
            return None
    out = [one(v) for v in values] if isinstance(values, (list, tuple)) and values else [None]
    if any(v is None for v in out):
        kind = "integers" if integers else "numbers"
        raise ValueError(f"{key}={values!r} in {where}: allowed a non-empty list of {kind}")
    return out


def check_axes(axes: dict) -> None:
    """The budget, fractions (tuned ones included), seeds and learning rates of resolved axes."""
    if axes["budget"] not in BUDGET_TARGETS:
        raise ValueError(f"unknown budget {axes['budget']!r}: allowed {', '.join(BUDGET_TARGETS)}")
    for f in axes["fractions"] + axes.get("tuned_fractions", []):
        if not 0.0 < f <= 1.0:
            raise ValueError(f"fraction {f:g} is outside (0, 1]")
    for s in axes["seeds"]:
        if s < 0:
            raise ValueError(f"seed {s} is negative: allowed integers >= 0")
    for lr in axes["lrs"]:
        if not lr_in_range(lr):
            raise ValueError(f"learning rate {lr:g} in lrs: allowed numbers > 0 and {LR_LIMIT}")


def steps_for(n: int, axes: dict, family: str = "", variant: str = "") -> int:
    """S(n) = max(min_steps, epochs * n / batch_for(n)), at most max_steps where the profile caps it,
    rounded up to a multiple of val_checks so the run validates exactly val_checks times, the last at
    its final step; epochs, min_steps and max_steps are those of the run's variant or family
    where the profile maps them (per_run), at its training-set size where they map sizes (at_size)."""
    checks = axes["val_checks"]
    epochs = at_size(per_run(axes["epochs"], family, variant), n)
    min_steps = at_size(per_run(axes["min_steps"], family, variant), n)
    steps = max(min_steps, math.ceil(epochs * n / batch_for(n, axes)))
    if axes.get("max_steps") is not None:
        steps = min(steps, at_size(per_run(axes["max_steps"], family, variant), n))
    return math.ceil(steps / checks) * checks


def schedule_args(axes: dict, steps: int, val_interval: int | None = None) -> list[str]:
    """Fit options of S(n) steps, validated every steps / val_checks steps, or every val_interval."""
    interval = val_interval or steps // axes["val_checks"]
    return ["--trainer.max_steps", str(steps), "--trainer.max_epochs", "-1",
            "--trainer.val_check_interval", str(interval), "--trainer.check_val_every_n_epoch", "null"]


def tuned_fractions(axes: dict) -> list[float]:
    """Where the learning rate is tuned: the axes' own tuned_fractions (exp-distill's cpu profile
    tunes at one), else the smallest and the largest fraction of the profile."""
    if axes.get("tuned_fractions"):
        return sorted(float(f) for f in axes["tuned_fractions"])
    return sorted({axes["fractions"][0], axes["fractions"][-1]})


def tuning_seed(axes: dict) -> int:
    """The seed the tuning stage trains at: the profile's first (so a piece of its seeds, SEEDS=, is
    tuned as the whole profile is), else the first of the seeds."""
    return axes.get("tuning_seed", axes["seeds"][0])


def nearest_tuned(fraction: float, axes: dict) -> float:
    """The tuned fraction closest to `fraction` on a log scale (the smaller one on a tie)."""
    return min(tuned_fractions(axes), key=lambda t: (round(abs(math.log(fraction / t)), 9), t))


def plan_run(spec: dict, axes: dict, runs_dir: Path, pool_size: int, family: str, fraction: float, seed: int,
             variant: str, lr: float, stage: str, val_interval: int | None = None) -> Run:
    """The Run of one cell of a spec's plan (family, fraction, seed, variant, lr, stage): its name,
    its steps and batch at its training-set size, and its fit command; every runner plans with it."""
    name = run_name(family, axes["budget"], axes["dataset"], fraction, seed, variant, lr)
    n = resolve_train_size(fraction, None, pool_size)
    steps, batch = steps_for(n, axes, family, variant), batch_for(n, axes)
    args = ["--experiment", spec["name"], "--runs_dir", str(runs_dir), "--run_name", name,
            "--seed_everything", str(seed), "--model.family", family, "--model.budget", axes["budget"],
            "--model.lr", f"{lr:g}", "--data.dataset", axes["dataset"], "--data.fraction", f"{fraction:g}",
            "--data.seed", str(seed), "--data.batch_size", str(batch), *schedule_args(axes, steps, val_interval),
            "--trainer.enable_progress_bar", "false"]
    if axes.get("val_size") is not None:
        args += ["--data.val_size", str(axes["val_size"])]
    if axes.get("precision") is not None:
        args += ["--trainer.precision", axes["precision"]]
    for key, value in spec["variant_args"][variant].items():
        args += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    if stage == "tune":
        args += ["--test_after_fit", "false"]  # a tuning trial never reads the test split
    return Run(0, name, family, fraction, seed, variant, tuple(args), stage=stage, lr=lr, budget=axes["budget"],
               steps=steps, batch_size=batch, planned_by=spec["name"])


def _with_folders(runs: list[Run], teacher_dir: dict) -> list[Run]:
    """Adds each DeiT's teacher checkpoint (teacher_dir: (fraction, seed, variant) -> the ResNet run's
    folder) and every run's folder (with_folders)."""
    out = []
    for r in runs:
        t = teacher_dir.get((r.fraction, r.seed, r.variant)) if distils(r.family) else None
        if t is not None:
            r = replace(r, args=r.args + ("--model.teacher_checkpoint", str(RunFolder(t).best_checkpoint)),
                        teacher=entry(t, r.planned_by))
        out.append(r)
    return with_folders(out)


def with_folders(runs: list[Run], start: int = 0) -> list[Run]:
    """Every run with the folder `fit` would choose for its arguments, or the same configuration's
    folder in another experiment that already holds it (shared.py), numbered from `start`; each
    family's variant checked as fit would check it (check_values)."""
    from experiments.runs.run.cli import resolve_run_dirs  # builds Lightning's parser: only when a sweep is expanded
    dirs = resolve_run_dirs([list(r.args) for r in runs])
    check_values(runs)
    return [share(replace(r, run_dir=d, index=start + i)) for i, (r, d) in enumerate(zip(runs, dirs))]


def check_values(runs: list[Run]) -> None:
    """The model's and the data's values of each family's variant, checked as `fit` checks them when
    it builds them (a spec's `model.distill_alpha: 2` or `data.random_erasing: 2`): planned, so a bad
    one stops a runner before its first run trains, not when that variant's stage comes (about 0.1 s
    a variant)."""
    from experiments.runs.run.cli import resolve_run_dir_checked
    seen = set()
    for r in runs:
        if (r.family, r.variant) in seen or r.args in _CHECKED:
            continue
        seen.add((r.family, r.variant))
        try:
            resolve_run_dir_checked(list(r.args))
        except ValueError as e:
            raise ValueError(f"variant {r.variant!r} of {r.family}: {e}") from None
        _CHECKED.add(r.args)


_CHECKED: set[tuple[str, ...]] = set()  # argument lists checked in this process: a runner plans each stage more than once


def tuning_runs(spec: dict, axes: dict, runs_dir: Path, pool_size: int, families: list[str],
                teacher_dir: dict | None = None) -> list[Run]:
    """The tuning stage for `families`: every lr of the grid at each tuned fraction, at the tuning seed."""
    seed = tuning_seed(axes)
    runs = [plan_run(spec, axes, runs_dir, pool_size, family, fraction, seed, variant, lr, "tune")
            for variant in axes["variants"] for family in fit_order(families)
            for fraction in tuned_fractions(axes) for lr in axes["lrs"]]
    return _with_folders(runs, teacher_dir or {})


def main_runs(spec: dict, axes: dict, runs_dir: Path, pool_size: int, lr_of) -> list[Run]:
    """Every family x fraction x seed x variant at lr_of(family, variant, fraction), ResNet teachers
    before their DeiT students."""
    families = fit_order(axes["families"])
    runs = [plan_run(spec, axes, runs_dir, pool_size, family, fraction, seed, variant, lr_of(family, variant, fraction),
                 "main")
            for variant in axes["variants"] for seed in axes["seeds"] for fraction in axes["fractions"]
            for family in families]
    runs.sort(key=lambda r: distils(r.family))  # stable: students after every teacher
    teachers = _with_folders([r for r in runs if not distils(r.family)], {})
    teacher_dir = {(r.fraction, r.seed, r.variant): r.run_dir for r in teachers if r.family == TEACHER}
    students = _with_folders([r for r in runs if distils(r.family)], teacher_dir)
    return [replace(r, index=i) for i, r in enumerate(teachers + students)]
