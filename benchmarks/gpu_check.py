"""The GPU acceptance run (issue #44): what one H200 says about the packed engine, in at most 8 minutes.

Parts, in this order (the most telling first), each in a process of its own killed at its limit
(what it had written by then is kept), none started past the whole run's 480 s by its own clock:
  group    one real packed group of the datascale gpu profile (8 members of one family at its smallest
           fraction: 4 seeds x both variants), trained and tested as the sweep trains it
           (`fit_packed`, its step compiled whole and captured as a CUDA graph on CUDA, eager on the
           CPU): every member's status and test accuracy, the group's ms per step
  compile  the packed step (modules/packed_step.PackedStep, bf16 autocast on CUDA) as a group calls it
           (the strong variant's augmentation inside) per member count of the gpu profile's groups
           (8, 6, 4) and family: compile time (compile, capture, replay once) and ms per captured
           step; the dry run reads these rows (experiments/runs/sweep/estimate.py). On a CPU the
           engine runs packed steps eager: `--device cpu --mode eager` times them so (nothing
           compiled, the engine's precision), into results/packed_steps_cpu.json
           (make bench-packed-cpu), and the dry run prices a gpu profile's groups there from them
  syncs    host synchronisations per captured step (the strong variant's augmentation and its
           counter-based draws inside), and per step of its host part (each member's crop and flip
           draws, the batch's place) (torch.cuda.set_sync_debug_mode("warn"), counted; CUDA only)
  fit      one single run through `python -m experiments fit` (vit, tiny, 10% of Fashion-MNIST):
           its wall time and images/s from its summary
It prints a one-screen summary and writes results/gpu_check.json after every part. Its processes get
this environment as it is, the project's root first on PYTHONPATH. `--smoke` runs the same parts in
miniature on the CPU (tests/test_gpu_check.py, in `make test`). Not yet run on a GPU.

    make gpu-check                                   # -> results/gpu_check.json
    python benchmarks/gpu_check.py                   # in an environment already prepared, as it is
    python benchmarks/gpu_check.py --smoke --out /tmp/smoke.json
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from experiments.runs.packed.loop import PRECISIONS  # noqa: E402
from experiments.runs.run.cli import default_precision  # noqa: E402
from experiments.runs.run.provenance import hardware, versions  # noqa: E402
from experiments.runs.run.run_folder import SUMMARY_FILE, RunFolder  # noqa: E402
from experiments.runs.run.summary import Summary  # noqa: E402
from experiments.runs.sweep.execute import model_flops  # noqa: E402
from experiments.runs.sweep.spec import load_spec  # noqa: E402
from family_throughput import sync, timed  # noqa: E402
from modules import FAMILIES  # noqa: E402
from modules.budgets import distils  # noqa: E402
from packed_group import group, profile_groups, strong_augment  # noqa: E402

# Seconds, on a GPU and in the CPU smoke run (2 shared cores: each part mostly starting its process
# and tracing the step): the whole run by its own clock (no part starts or runs past it), each part
# (its process start included)
TOTAL_S = (480, 900)
LIMITS = {"group": (200, 300), "compile": (170, 240), "syncs": (40, 120), "fit": (60, 240)}
PARTS = tuple(LIMITS)
MIN_PART_S = 15  # a part with less time left than this is skipped, not started
EAGER = "eager"  # --mode: the step not compiled, as the engine runs a CPU's packed steps
PROFILE_MEMBERS = (8, 6, 4)  # the gpu profile's group sizes (pack 8; tests/test_gpu_check.py reads them off its plan)
warnings.filterwarnings("ignore", "There is a performance drop")


# ---------------- the parts (each runs in a process of its own) ----------------
def part_group(a, device, work: Path, sink) -> None:
    """One packed group of the gpu profile, planned as the sweep plans it, trained and tested by
    fit_packed in this process: compiled on CUDA as the sweep's groups are (compile auto)."""
    from experiments.runs.packed.fit import fit_packed
    members = group_plan(a, work)
    planned = {"family": members[0].family, "fraction": members[0].fraction, "members": len(members),
               "steps": members[0].steps, "batch": members[0].batch_size,
               "runs": [r.name for r in members]}
    sink(planned)
    t = time.perf_counter()
    statuses = fit_packed([list(r.args) for r in members], compile=None)
    seconds = time.perf_counter() - t
    summaries = [RunFolder(r.run_dir).summary() or Summary() for r in members]
    engine = summaries[0].engine or {}
    sink({**planned, "seconds": round(seconds, 1), "statuses": statuses,
          "tested": sum(s.test_acc is not None for s in summaries),
          "test_acc": [s.test_acc for s in summaries], "compiled": engine.get("compiled"),
          "ms_per_step": round(1000 * summaries[0].wall_time_s / members[0].steps, 2)
          if summaries[0].wall_time_s else None})


def group_plan(a, work: Path) -> list:
    """The first packed group of the gpu profile's main stage for a.group_family at its smallest
    fraction, its seeds widened to fill a.members[0] members (both variants); in miniature with --smoke."""
    from datamodules import ImageClassificationDataModule
    # --smoke: a few steps of small batches on the tests' small data set
    small = dict(epochs=1, min_steps=4, max_steps=4, val_checks=2, val_size=100, batch_size=a.batch)
    groups, _ = profile_groups(a.group_family, a.members[0], list(range(a.members[0])), work / "group",
                               lambda axes: len(ImageClassificationDataModule(axes["dataset"], val_size=axes["val_size"])
                                                ._splits["pool"]),
                               fraction=a.group_fraction if a.smoke else None, miniature=small if a.smoke else None)
    return groups[0]


def part_compile(a, device, work: Path, sink) -> None:
    """Per member count (the profile's most frequent first), every family: the compile time and ms
    per step of the step as a sweep's group runs it (the strong variant's augmentation inside, drop-path
    masks, the schedule as a tensor); each row written as it is measured."""
    rows = []
    spec = load_spec("datascale")
    budget, dataset = spec["profiles"]["gpu"]["budget"], spec["dataset"]   # the models the gpu profile packs
    eager = a.mode == EAGER
    # eager: in the precision a run takes on this machine (the gpu profile pins none), as the engine would
    autocast = PRECISIONS.get(default_precision()) if eager else "device"
    for k in a.members:
        for family in a.families:
            captured, _ = group(family, k, a.batch, device, None if eager else a.mode, a.backend, budget=budget,
                                engine=True, autocast=autocast)
            t = time.perf_counter()
            for _ in range(1 if eager else 3):  # compile, capture, replay once (eager: one warm-up step)
                captured()
            sync(device)
            compile_s = 0.0 if eager else time.perf_counter() - t
            c_s, util = timed(captured, a.steps, 0, device)
            # budget and FLOPs per image key the row as results/step_times.csv keys a packed group's step time
            rows.append({"family": family, "members": k, "batch": a.batch, "budget": budget,
                         "flops_per_image": model_flops(family, budget, dataset),
                         "backend": "none" if eager else a.backend, "mode": a.mode,
                         "precision": default_precision() if eager else None, "threads": torch.get_num_threads(),
                         "compile_s": round(compile_s, 1), "step_ms": round(1000 * c_s / a.steps, 3),
                         "images_per_s": round(k * a.batch * a.steps / c_s), "gpu_utilisation": util})
            sink({"rows": rows})
            torch._dynamo.reset()


def part_syncs(a, device, work: Path, sink) -> None:
    if device.type != "cuda":
        return sink({"syncs_per_step": "n/a (counted on CUDA only)"})
    call, _ = group(a.families[0], a.members[0], a.batch, device, a.mode, a.backend, engine=True)
    draw = strong_draws(a.members[0], a.batch, device)
    for _ in range(3):
        call()
        draw()
    sync(device)
    step, draws = _synchronisations(call, a.steps), _synchronisations(draw, a.steps)
    sink({"family": a.families[0], "members": a.members[0], "steps": a.steps,
          "syncs_per_step": len(step) / a.steps, "first": step[:3],
          "strong_variant_draw_syncs_per_step": len(draws) / a.steps, "draws_first": draws[:3]})


def strong_draws(k: int, batch: int, device: torch.device):
    """The host's part of a step of the strong variant's draws: each member's crop and flip from its
    loader's generator on the device, stacked, and the batch's place (the strong stages' numbers are
    drawn inside the step, packed_group.group)."""
    from datamodules.batch_augment import member_draws
    aug = strong_augment()
    gens = [torch.Generator(device).manual_seed(i) for i in range(k)]
    return lambda: member_draws([aug.draws(batch, g) for g in gens]) | {"place": torch.tensor([0, 1], device=device)}


def _synchronisations(call, steps: int) -> list[str]:
    """The host synchronisations `steps` calls make, as torch.cuda.set_sync_debug_mode reports them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                call()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return [str(w.message).splitlines()[0] for w in caught if "synchroniz" in str(w.message).lower()]


def part_fit(a, device, work: Path, sink) -> None:
    size = (["--data.fraction", "0.05", "--data.batch_size", str(a.batch), "--data.val_size", "100",
             "--trainer.max_steps", "4", "--trainer.accelerator", "cpu"] if a.smoke else
            ["--data.fraction", "0.1", "--data.batch_size", "128", "--trainer.max_steps", "500"])
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "experiments", "fit", "--run_name", "gpu-check-vit", "--runs_dir",
                        str(work / "fit"), "--model.family", "vit", "--model.budget", "tiny", *size,
                        "--trainer.enable_progress_bar", "false"], cwd=ROOT, env=child_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = {"rc": p.returncode, "seconds": round(time.perf_counter() - t, 1), "tail": p.stdout[-1200:]}
    summaries = list((work / "fit").rglob(SUMMARY_FILE))
    if summaries:
        s = RunFolder(summaries[0].parent).summary() or Summary()
        out.update({k: getattr(s, k) for k in ("status", "steps", "images_per_sec", "wall_time_s", "test_acc")})
    sink(out)


PART_FNS = {"group": part_group, "compile": part_compile, "syncs": part_syncs, "fit": part_fit}


def child_env() -> dict[str, str]:
    """This environment for the processes it starts, the project's root first on PYTHONPATH: an
    environment provided through PYTHONPATH (packages installed with pip --target) stays whole."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}


# ---------------- the run: each part in its own process, under its limit ----------------
def run_part(name: str, argv: list[str], limit: float, work: Path) -> dict:
    """The part `name` in a process of its own (and its own process group: a fit it starts goes with
    it), killed at `limit` seconds; its result as far as it had written it."""
    out = work / f"{name}.json"
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *argv, "--part", name, "--part_out", str(out)],
                         cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        log, _ = p.communicate(timeout=limit)
        status = "ok" if p.returncode == 0 else "error"
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        log, _ = p.communicate()
        status = "timeout"
    result = json.loads(out.read_text()) if out.is_file() else {}
    part = {"status": status, "seconds": round(time.perf_counter() - t, 1), "limit_s": round(limit, 1),
            "result": result}
    if status == "error":
        part["error"] = (log or "").strip().splitlines()[-1:] or [f"exit status {p.returncode}"]
    return part


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    a = parse(argv)
    if a.part:  # a child: one part, its result written to --part_out as it grows
        return one_part(a)
    bad = [f"--{name} {value}" for name, values in (("members", a.members), ("batch", [a.batch]), ("steps", [a.steps]),
                                                   ("total_limit", [a.total_limit]),
                                                   ("part_limit", [] if a.part_limit is None else [a.part_limit]))
           for value in values if value < 1]
    if bad:
        print(f"error: {bad[0]}: allowed integers >= 1", file=sys.stderr)
        return 2
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu-check: this machine has no CUDA device; run it where one is (or --smoke: its parts in "
              "miniature on the CPU)", file=sys.stderr)
        return 2
    summary = {"hardware": hardware(), "versions": versions(), "total_limit_s": a.total_limit,
               "args": {k: str(v) for k, v in vars(a).items()}, "parts": {}}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        for name in a.parts:
            left = a.total_limit - (time.perf_counter() - start)
            limit = min(a.part_limit or LIMITS[name][a.smoke], left)
            if limit < MIN_PART_S:
                summary["parts"][name] = {"status": "skipped", "seconds": 0.0, "limit_s": round(max(left, 0), 1),
                                          "result": {}, "error": [f"{left:.0f} s left of {a.total_limit} s"]}
            else:
                summary["parts"][name] = run_part(name, argv, limit, Path(tmp))
            summary["seconds"] = round(time.perf_counter() - start, 1)
            a.out.write_text(json.dumps(summary, indent=1) + "\n")
            print(f"gpu-check: {name} {summary['parts'][name]['status']} in {summary['parts'][name]['seconds']} s",
                  flush=True)
    print(screen(summary, a.out))
    return 0


def one_part(a) -> int:
    device = torch.device(a.device)
    PART_FNS[a.part](a, device, a.part_out.parent / f"{a.part}-work",
                     lambda result: a.part_out.write_text(json.dumps(result, indent=1) + "\n"))
    return 0


def screen(summary: dict, out: Path) -> str:
    """The run on one screen: a line per part, one per compile row."""
    lines = [f"gpu-check on {summary['hardware']}, torch {summary['versions'].get('torch')}: "
             f"{summary['seconds']} s of {summary['total_limit_s']} s -> {out}"]
    for name, part in summary["parts"].items():
        r = part["result"]
        head = f"  {name:8} {part['status']:8} {part['seconds']:6.1f} s of {part['limit_s']:.0f} s"
        if name == "group" and "tested" in r:
            accs = [x for x in r["test_acc"] if x is not None]
            head += (f"  {r['members']} x {r['family']} at {r['fraction']:g}, {r['steps']} steps: {r['tested']} tested"
                     + (f" (test acc {min(accs):.3f}-{max(accs):.3f})" if accs else "")
                     + f", {r['ms_per_step']} ms/step, compiled {r['compiled']}")
        elif name == "syncs":
            head += f"  {r.get('syncs_per_step', '')} per step"
        elif name == "fit" and "rc" in r:
            head += f"  rc {r['rc']}, {r.get('images_per_sec')} images/s, test acc {r.get('test_acc')}"
        lines.append(head + "".join(f"  {e}" for e in part.get("error", [])))
        lines += [f"           {row['family']:9} x{row['members']:<3} "
                  + ("eager          " if row.get("mode") == EAGER else f"compile {row['compile_s']:6.1f} s")
                  + f", {row['step_ms']:8.2f} ms/step" for row in r.get("rows", [])]
    return "\n".join(lines)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="the same parts in miniature on the CPU (make test): "
                   "vit, 2 members of batch 4, a few steps, the compile part with the aot_eager backend")
    p.add_argument("--device", default=None, help="default cuda (cpu with --smoke)")
    p.add_argument("--families", nargs="+", default=None, choices=FAMILIES, help="the compile part's families")
    p.add_argument("--members", nargs="+", type=int, default=None,
                   help=f"group sizes: the group part's is the first (default {' '.join(map(str, PROFILE_MEMBERS))})")
    p.add_argument("--batch", type=int, default=None, help="images per member per step (default 128)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per compile row (default 20)")
    p.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    p.add_argument("--group_family", default="vit", choices=[f for f in FAMILIES if not distils(f)],
                   help="the group part's family (default vit; not DeiT, whose teachers it does not train)")
    p.add_argument("--group_fraction", type=float, default=0.05, help="(--smoke) the group's fraction")
    p.add_argument("--total_limit", type=int, default=None,
                   help=f"seconds for all parts (default {TOTAL_S[0]}; {TOTAL_S[1]} with --smoke)")
    p.add_argument("--mode", default=None, help="torch.compile mode (default reduce-overhead on CUDA, else default); "
                   f"{EAGER}: not compiled, as the engine runs packed steps on a CPU (its rows price a gpu profile's "
                   "groups there)")
    p.add_argument("--part_limit", type=int, default=None,
                   help="seconds for each part (default: each part's own, " + ", ".join(f"{k} {v[0]}" for k, v in
                                                                                         LIMITS.items()) + ")")
    p.add_argument("--backend", default=None, help="torch.compile backend (default inductor; aot_eager with --smoke)")
    p.add_argument("--out", type=Path, default=None,
                   help="the summary (default results/gpu_check.json; a temporary folder's with --smoke)")
    p.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)   # a child's one part
    p.add_argument("--part_out", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.mode == EAGER and (a.device != "cpu" or a.parts not in (["compile"], list(PARTS))):
        p.error(f"--mode {EAGER}: allowed with --device cpu and the compile part only (the engine runs packed "
                "steps eager on a CPU; on a GPU it compiles them)")
    if a.mode == EAGER:
        a.parts = ["compile"]
    small = a.smoke
    a.device = a.device or ("cpu" if small else "cuda")
    a.families = a.families or (["vit"] if small else list(FAMILIES))
    a.members = a.members or ([2] if small else list(PROFILE_MEMBERS))
    a.total_limit = TOTAL_S[small] if a.total_limit is None else a.total_limit
    a.batch = (4 if small else 128) if a.batch is None else a.batch
    a.steps = (2 if small else 20) if a.steps is None else a.steps
    a.backend = a.backend or ("aot_eager" if small else "inductor")
    a.mode = a.mode or ("reduce-overhead" if a.device.startswith("cuda") else "default")
    a.out = a.out or (Path(tempfile.gettempdir()) / "gpu_check_smoke.json" if small
                      else ROOT / "results" / ("packed_steps_cpu.json" if a.mode == EAGER else "gpu_check.json"))
    return a


if __name__ == "__main__":
    sys.exit(main())
