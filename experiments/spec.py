"""Experiment specs (experiments/specs/*.yaml) and their expansion into independent runs.

A run is one `python -m experiments fit ...` command with a fixed folder; nothing else links runs
except DeiT's teacher (the ResNet run of the same subset, seed and recipe), so any scheduler can
execute them.
"""
from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from modules import BUDGET_TARGETS, FAMILIES

SPECS = Path(__file__).parent / "specs"
TOP_KEYS = {"name", "dataset", "families", "protocol", "recipes", "recipe_args", "profiles",
            "sample_efficiency_accuracy"}
PROFILE_KEYS = {"budget", "fractions", "seeds", "epochs", "val_checks", "batch_size"}
PROTOCOLS = ("equal_steps", "fixed_epochs")
TEACHER_FAMILY = "resnet"


@dataclass(frozen=True)
class Run:
    index: int
    name: str
    family: str
    fraction: float
    seed: int
    recipe: str
    args: tuple[str, ...]
    teacher: str | None = None           # folder name of the run whose best checkpoint DeiT distils from
    run_dir: Path = field(default=Path("."))

    def command(self) -> list[str]:
        return [sys.executable, "-m", "experiments", "fit", *self.args]

    def shell(self) -> str:
        return shlex.join(["python", "-m", "experiments", "fit", *self.args])


def load_spec(name_or_path: str) -> dict:
    path = Path(name_or_path)
    if not path.suffix:
        path = SPECS / f"{name_or_path}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SPECS.glob("*.yaml")))
        raise ValueError(f"unknown experiment spec {name_or_path!r}: allowed {known} or a path to a .yaml spec")
    try:
        spec = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ValueError(f"spec {str(path)!r} is not valid YAML" + (f" (line {mark.line + 1})" if mark else "")
                         + f": {getattr(e, 'problem', None) or e}") from None
    _reject_unknown(spec, TOP_KEYS, f"spec {path.name}", required=("name", "dataset", "families", "profiles",
                                                                   "recipe_args"))
    if not isinstance(spec["profiles"], dict) or not spec["profiles"]:
        raise ValueError(f"spec {path.name} has no profiles: allowed a mapping of profile names (e.g. cpu, gpu) "
                         f"to their {', '.join(sorted(PROFILE_KEYS))}")
    for name, profile in spec["profiles"].items():
        where = f"profile {name!r} of {path.name}"
        _reject_unknown(profile, PROFILE_KEYS, where, required=("budget", "fractions", "seeds", "epochs"))
        for key in ("fractions", "seeds"):
            if not isinstance(profile[key], list) or not profile[key]:
                raise ValueError(f"{key}={profile[key]!r} in {where}: allowed a non-empty list, e.g. [0, 1]")
        epochs = profile["epochs"]
        if isinstance(epochs, bool) or not isinstance(epochs, (int, float)) or epochs <= 0:
            raise ValueError(f"epochs={epochs!r} in {where}: allowed a number > 0")
    recipes = spec["recipe_args"]
    if not isinstance(recipes, dict) or not recipes or not all(isinstance(v, dict) for v in recipes.values()):
        raise ValueError(f"recipe_args in {path.name}: allowed a mapping of recipe names to their fit options, "
                         "e.g. {default: {}, strong: {data.randaugment: true}}")
    if spec.get("protocol", "equal_steps") not in PROTOCOLS:
        raise ValueError(f"protocol {spec['protocol']!r} in {path.name}: allowed {', '.join(PROTOCOLS)}")
    return spec


def _reject_unknown(d: dict, allowed: set[str], where: str, required: tuple[str, ...] = ()) -> None:
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
                 dataset=None, recipes=None) -> dict:
    """The spec's profile with command-line overrides, every value checked."""
    if profile not in spec["profiles"]:
        raise ValueError(f"unknown profile {profile!r}: allowed {', '.join(spec['profiles'])}")
    p = spec["profiles"][profile]
    axes = {
        "profile": profile, "protocol": spec.get("protocol", "equal_steps"),
        "dataset": dataset or spec["dataset"], "budget": budget or p["budget"],
        "families": list(families or spec["families"]), "fractions": [float(f) for f in (fractions or p["fractions"])],
        "seeds": [int(s) for s in (seeds if seeds is not None else p["seeds"])],
        "recipes": list(recipes or spec.get("recipes", ["default"])),
        "epochs": p["epochs"], "val_checks": int(p.get("val_checks", 1)), "batch_size": int(p.get("batch_size", 128)),
    }
    for f in axes["families"]:
        if f not in FAMILIES:
            raise ValueError(f"unknown family {f!r}: allowed {', '.join(FAMILIES)}")
    if axes["budget"] not in BUDGET_TARGETS:
        raise ValueError(f"unknown budget {axes['budget']!r}: allowed {', '.join(BUDGET_TARGETS)}")
    for f in axes["fractions"]:
        if not 0.0 < f <= 1.0:
            raise ValueError(f"fraction {f:g} is outside (0, 1]")
    for s in axes["seeds"]:
        if s < 0:
            raise ValueError(f"seed {s} is negative: allowed integers >= 0")
    for r in axes["recipes"]:
        if r not in spec["recipe_args"]:
            raise ValueError(f"unknown recipe {r!r}: allowed {', '.join(spec['recipe_args'])}")
    return axes


def run_name(family: str, budget: str, dataset: str, fraction: float, seed: int, recipe: str) -> str:
    data = Path(dataset.rstrip("/")).name
    return f"{family}-{budget}_{data}_f{fraction:g}_s{seed}" + ("" if recipe == "default" else f"_{recipe}")


def schedule_args(axes: dict, pool_size: int) -> list[str]:
    """Trainer arguments of the protocol. equal_steps: the steps of `epochs` passes over the full
    pool for every fraction (rounded to a multiple of val_checks, validated val_checks times)."""
    checks = axes["val_checks"]
    if axes["protocol"] == "equal_steps":
        steps = max(checks, round(axes["epochs"] * pool_size / axes["batch_size"] / checks) * checks)
        return ["--trainer.max_steps", str(steps), "--trainer.max_epochs", "-1",
                "--trainer.val_check_interval", str(steps // checks), "--trainer.check_val_every_n_epoch", "null"]
    epochs = int(axes["epochs"])
    if epochs < 1 or epochs != axes["epochs"]:
        raise ValueError(f"fixed_epochs needs a whole number of epochs >= 1, got {axes['epochs']}")
    return ["--trainer.max_epochs", str(epochs), "--trainer.check_val_every_n_epoch", str(max(1, epochs // checks))]


def expand(spec: dict, axes: dict, runs_dir: Path, pool_size: int) -> list[Run]:
    """Every run of the sweep, teachers (ResNet) first so DeiT finds its teacher's checkpoint. Each
    run's folder is the one `fit` would choose for its arguments (readable name + config hash)."""
    from .cli import resolve_run_dirs  # builds Lightning's parser: only when a sweep is expanded

    families = sorted(axes["families"], key=lambda f: (f != TEACHER_FAMILY, f == "deit"))
    sched = schedule_args(axes, pool_size)
    runs = []
    for recipe in axes["recipes"]:
        for seed in axes["seeds"]:
            for fraction in axes["fractions"]:
                for family in families:
                    name = run_name(family, axes["budget"], axes["dataset"], fraction, seed, recipe)
                    args = ["--experiment", spec["name"], "--runs_dir", str(runs_dir), "--run_name", name,
                            "--seed_everything", str(seed), "--model.family", family, "--model.budget", axes["budget"],
                            "--data.dataset", axes["dataset"], "--data.fraction", f"{fraction:g}",
                            "--data.seed", str(seed), "--data.batch_size", str(axes["batch_size"]), *sched,
                            "--trainer.enable_progress_bar", "false"]
                    for key, value in spec["recipe_args"][recipe].items():
                        args += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
                    teacher = None
                    if family == "deit" and TEACHER_FAMILY in axes["families"]:
                        teacher = run_name(TEACHER_FAMILY, axes["budget"], axes["dataset"], fraction, seed, recipe)
                    runs.append(Run(len(runs), name, family, fraction, seed, recipe, tuple(args), teacher))
    runs.sort(key=lambda r: r.family == "deit")  # stable: students after every teacher
    students = [r for r in runs if r.teacher is not None]
    teachers = [r for r in runs if r.teacher is None]
    teachers = [replace(r, run_dir=d) for r, d in zip(teachers, resolve_run_dirs([list(r.args) for r in teachers]))]
    folder_of = {r.name: r.run_dir for r in teachers}
    students = [replace(r, args=r.args + ("--model.teacher_checkpoint",
                                          str(folder_of[r.teacher] / "checkpoints" / "best.ckpt")),
                        teacher=folder_of[r.teacher].name) for r in students]
    students = [replace(r, run_dir=d) for r, d in zip(students, resolve_run_dirs([list(r.args) for r in students]))]
    return [replace(r, index=i) for i, r in enumerate(teachers + students)]
