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
    teacher: str | None = None           # run name whose best checkpoint DeiT distils from
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
    spec = yaml.safe_load(path.read_text())
    _reject_unknown(spec, TOP_KEYS, f"spec {path.name}")
    for name, profile in spec["profiles"].items():
        _reject_unknown(profile, PROFILE_KEYS, f"profile {name!r} of {path.name}")
    if spec.get("protocol", "equal_steps") not in PROTOCOLS:
        raise ValueError(f"protocol {spec['protocol']!r} in {path.name}: allowed {', '.join(PROTOCOLS)}")
    return spec


def _reject_unknown(d: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} in {where}: allowed {', '.join(sorted(allowed))}")


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
    """Every run of the sweep; teachers (ResNet) first so DeiT finds its teacher's checkpoint."""
    families = sorted(axes["families"], key=lambda f: (f != TEACHER_FAMILY, f == "deit"))
    sched = schedule_args(axes, pool_size)
    exp_dir = Path(runs_dir) / spec["name"]
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
                        args += ["--model.teacher_checkpoint", str(exp_dir / teacher / "checkpoints" / "best.ckpt")]
                    runs.append(Run(len(runs), name, family, fraction, seed, recipe, tuple(args), teacher,
                                    exp_dir / name))
    runs.sort(key=lambda r: r.family == "deit")  # stable: students after every teacher
    return [replace(r, index=i) for i, r in enumerate(runs)]
