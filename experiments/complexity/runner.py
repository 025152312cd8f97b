"""`python -m experiments complexity`: what each family costs as images grow (experiments/complexity/spec.yaml).

Runs the spec's parts in order and writes their measurements to
<runs_dir>/complexity/measurements_<profile>.json after each part, so an interrupted or failing part
loses nothing measured before it; a part run again replaces only its own entry. `make tables` turns
the file into results/complexity.{md,csv} and the plots (experiments/complexity/tables.py).

  paper          paper-scale timm models (no weights) at 224 vs timm's published params and GMACs
  scaling        paper-scale models at growing resolution: FLOPs, images/s, peak memory
  ours           the suite's families at one budget from 28x28 upwards, the same measurements
  interpolation  a suite-trained ViT evaluated and fine-tuned at a larger size (position table resized)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from experiments.runs.run.names import runs_dir_option
from experiments.runs.run.provenance import git_commit, hardware, versions
from modules.files import write_json

from experiments.runs.run.record import read_json
from experiments.runs.sweep.spec import Run, Schema, reject_unknown, load_spec

PARTS = ("paper", "scaling", "ours", "interpolation")
EXPERIMENT = "complexity"
PROFILE_KEYS = {"scaling", "ours", "timing", "interpolation"}
SCALING_KEYS = {"models", "resolutions", "flop_resolutions", "batch_size", "crossover"}
OURS_KEYS = {"families", "budget", "in_chans", "resolutions", "batch_size", "crossover"}
TIMING_KEYS = {"warmup", "reps", "max_point_seconds", "memory_limit_gib"}
INTERPOLATION_KEYS = {"source", "target_size", "methods", "finetune_steps", "lr", "batch_size", "eval_images"}
SOURCE_KEYS = {"family", "budget", "max_epochs", "args"}  # args: further `fit` options (optional)


def load_complexity_spec(path: Path | str = EXPERIMENT) -> dict:
    """The spec with every key checked: an unknown or missing key is one error line naming it."""
    return load_spec(str(path), SCHEMA)


def _check_parts(profile: dict, where: str) -> None:
    for key, allowed in (("scaling", SCALING_KEYS), ("ours", OURS_KEYS), ("timing", TIMING_KEYS),
                         ("interpolation", INTERPOLATION_KEYS)):
        reject_unknown(profile[key], allowed, f"{key} of {where}", required=tuple(sorted(allowed)))
    reject_unknown(profile["interpolation"]["source"], SOURCE_KEYS, f"interpolation.source of {where}",
                    required=("budget", "family", "max_epochs"))
    from experiments.complexity.pos_embed_interpolation import check_study
    i = profile["interpolation"]
    try:  # before the source run trains: a bad setting was refused only after it
        check_study(methods=i["methods"], finetune_steps=i["finetune_steps"], lr=i["lr"], batch_size=i["batch_size"],
                    eval_images=i["eval_images"], target_size=i["target_size"])
    except ValueError as e:
        raise ValueError(f"interpolation of {where}: {e}") from None
    for key in ("scaling", "ours"):
        sizes = profile[key]["resolutions"]
        if not sizes or sorted(sizes) != sizes or min(sizes) < 1:
            raise ValueError(f"{key}.resolutions={sizes!r} in {where}: allowed a non-empty ascending list "
                             "of positive sizes")


SCHEMA = Schema(EXPERIMENT, frozenset({"paper_image_size"}), ("name", "paper_image_size", "profiles", "runner"),
                frozenset(PROFILE_KEYS), tuple(sorted(PROFILE_KEYS)), check_profile=_check_parts)


def record_path(runs_dir: Path, profile: str) -> Path:
    return Path(runs_dir) / EXPERIMENT / f"measurements_{profile}.json"


# ---------------- the parts ----------------
def paper_part(spec: dict, profile: dict, device: torch.device) -> dict:
    from experiments.complexity.paper_models import PUBLISHED_SOURCE, paper_table, seed_claims
    return {"image_size": spec["paper_image_size"], "models": paper_table(spec["paper_image_size"]),
            "seed_claims": seed_claims(), "published_source": PUBLISHED_SOURCE}


def _flops_by_resolution(build_meta, resolutions: list[int], in_chans: int) -> list[dict]:
    from modules.complexity import flop_breakdown
    rows = []
    for r in resolutions:
        counts = flop_breakdown(build_meta(r), r, in_chans)
        rows.append({"resolution": r, "gflops": counts["total"] / 1e9, "attention_gflops": counts["attention"] / 1e9})
    return rows


def _timed(label: str, build, resolutions: list[int], in_chans: int, batch_size: int, device: torch.device,
           timing: dict, flops: list[dict]) -> list[dict]:
    from experiments.complexity.resolution_scaling import sweep_resolutions
    return sweep_resolutions(label, build, resolutions, in_chans=in_chans, batch_size=batch_size, device=device,
                             warmup=timing["warmup"], reps=timing["reps"],
                             cost_hint={f["resolution"]: f["gflops"] for f in flops},  # predicts a point's time
                             max_point_seconds=timing["max_point_seconds"],
                             memory_limit_mib=timing["memory_limit_gib"] * 1024)


def scaling_part(spec: dict, profile: dict, device: torch.device) -> dict:
    from experiments.complexity.paper_models import PAPER_MODELS, build_paper_model
    s, timing = profile["scaling"], profile["timing"]
    names = {m.label: m.timm_name for m in PAPER_MODELS}
    unknown = [m for m in s["models"] if m not in names]
    if unknown:
        raise ValueError(f"scaling model {unknown[0]!r} is not a paper model: allowed {', '.join(names)}")
    models = []
    for label in s["models"]:
        name = names[label]
        flops = _flops_by_resolution(lambda r: build_paper_model(name, r, device="meta"),
                                     sorted(set(s["flop_resolutions"]) | set(s["resolutions"])), 3)
        timed = _timed(label, lambda r: build_paper_model(name, r, device=device), s["resolutions"], 3,
                       s["batch_size"], device, timing, flops)
        models.append({"model": label, "timm_name": name, "flops": flops, "timing": timed})
    return {"batch_size": s["batch_size"], "crossover": s["crossover"], "models": models}


def ours_part(spec: dict, profile: dict, device: torch.device) -> dict:
    from modules import build_model
    o, timing = profile["ours"], profile["timing"]

    def build(family: str, r: int, where) -> torch.nn.Module:
        with torch.device(where):
            return build_model(family, o["budget"], image_size=r, in_chans=o["in_chans"])

    models = []
    for family in o["families"]:
        build(family, o["resolutions"][0], "meta")  # a family or size the registry rejects fails here, before timing
        flops = _flops_by_resolution(lambda r: build(family, r, "meta"), o["resolutions"], o["in_chans"])
        timed = _timed(family, lambda r: build(family, r, device), o["resolutions"], o["in_chans"],
                       o["batch_size"], device, timing, flops)
        models.append({"model": family, "budget": o["budget"], "flops": flops, "timing": timed})
    return {"batch_size": o["batch_size"], "budget": o["budget"], "in_chans": o["in_chans"],
            "crossover": o["crossover"], "models": models}


def source_run(runs_dir: Path, source: dict) -> Run:
    """The suite-trained ViT the interpolation part starts from: a `fit` run of its own in
    <runs_dir>/complexity, trained once and reused while its configuration is unchanged."""
    from experiments.runs.run.cli import resolve_run_dirs
    args = ["--experiment", EXPERIMENT, "--runs_dir", str(runs_dir), "--model.family", source["family"],
            "--model.budget", source["budget"], "--trainer.max_epochs", str(source["max_epochs"]),
            *map(str, source.get("args", []))]
    run_dir = resolve_run_dirs([args])[0]
    return Run(index=0, name=run_dir.name, family=source["family"], fraction=1.0, seed=0, variant="default",
               args=tuple(args), run_dir=run_dir)


def interpolation_part(spec: dict, profile: dict, device: torch.device, runs_dir: Path) -> dict:
    from experiments.complexity.pos_embed_interpolation import as_lr, interpolation_study
    from experiments.runs.sweep.execute import execute, launch
    p = profile["interpolation"]
    run = source_run(runs_dir, p["source"])
    print(f"source run {run.run_dir} (trained if not finished; output in its log.txt)", file=sys.stderr)
    status = execute(run, launch)
    if status != "done":
        raise ValueError(f"the source run {run.run_dir} ended {status!r}: see its log.txt")
    rows = interpolation_study(run.run_dir, p["target_size"], methods=tuple(p["methods"]),
                               finetune_steps=p["finetune_steps"], lr=as_lr(p["lr"]), batch_size=p["batch_size"],
                               eval_images=p["eval_images"], device=str(device),
                               # evaluation in batches of the fine-tune's size: 56x56 ViT-tiny runs 20-30%
                               # faster per image on CPU in batches of 64 than of 1,000
                               data_overrides={"eval_batch_size": p["batch_size"]})
    return {"source_run": run.run_dir.name, "target_size": p["target_size"], "finetune_steps": p["finetune_steps"],
            "lr": as_lr(p["lr"]), "batch_size": p["batch_size"], "eval_images": p["eval_images"], "rows": rows}


def measure(parts: list[str], profile_name: str, spec: dict, runs_dir: Path, device: torch.device) -> Path:
    """Runs `parts` of the profile, merging each into the record as soon as it is measured."""
    profile = spec["profiles"][profile_name]
    path = record_path(runs_dir, profile_name)
    record = read_json(path, hint=": move it away to measure afresh")
    record.setdefault("parts", {})
    record.update(experiment=EXPERIMENT, profile=profile_name)
    runners = {"paper": paper_part, "scaling": scaling_part, "ours": ours_part,
               "interpolation": lambda s, p, d: interpolation_part(s, p, d, runs_dir)}
    for part in parts:
        print(f"== {part}", file=sys.stderr)
        t0 = time.perf_counter()
        result = runners[part](spec, profile, device)
        result["provenance"] = {"commit": git_commit(), "versions": versions(), "hardware": hardware(),
                                "device": str(device), "threads": torch.get_num_threads(),
                                "seconds": round(time.perf_counter() - t0, 1), "date": time.strftime("%Y-%m-%d")}
        record["parts"][part] = result
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, record)
        print(f"   {part}: {result['provenance']['seconds']:.0f} s -> {path}", file=sys.stderr)
    return path


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments complexity", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", default=None,
                   help="a profile of the spec (default: gpu when CUDA is available, else cpu)")
    p.add_argument("--parts", nargs="+", default=list(PARTS), metavar="PART",
                   help=f"which parts to (re)measure, others kept from the record: {', '.join(PARTS)} (default all)")
    p.add_argument("--runs_dir", default="results/runs", type=runs_dir_option, help="default results/runs")
    p.add_argument("--spec", default=EXPERIMENT, help="an experiment with a spec.yaml under experiments/, or a .yaml path (default complexity)")
    a = p.parse_args(argv)
    spec = load_complexity_spec(a.spec)
    profile = a.profile or ("gpu" if torch.cuda.is_available() else "cpu")
    if profile not in spec["profiles"]:
        raise ValueError(f"unknown profile {profile!r}: allowed {', '.join(spec['profiles'])}")
    bad = [x for x in a.parts if x not in PARTS]
    if bad:
        raise ValueError(f"unknown part {bad[0]!r}: allowed {', '.join(PARTS)}")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if profile == "gpu" and device.type != "cuda":
        raise ValueError("profile 'gpu' needs a CUDA device and none is available: allowed profile cpu here")
    t0 = time.perf_counter()
    path = measure([x for x in PARTS if x in a.parts], profile, spec, Path(a.runs_dir), device)
    print(f"measured {', '.join(a.parts)} in {time.perf_counter() - t0:.0f} s -> {path}", file=sys.stderr)
    return 0
