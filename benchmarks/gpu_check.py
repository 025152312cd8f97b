"""The GPU acceptance run (issue #23): what one H200 says about the packed engine, in one go.

Parts, each under its own time limit, written to one summary file as they finish (a part that fails
or runs out of time is recorded as such and the next one runs):
  step     PackedStep (modules/packed_step.py; bf16 autocast on CUDA, the suite's precision there)
           per family at K = 8, 16, 32 members: ms per group
           step eager and captured (torch.compile(fullgraph=True, mode="reduce-overhead"): CUDA
           graphs), images/s over all members, GPU utilisation; captured equals eager (losses)
  syncs    host synchronisations per captured step, and per step of the strong recipe's draws
           (torch.cuda.set_sync_debug_mode("warn"), counted)
  fit      one single run through `python -m experiments fit` (vit, tiny, 10% of Fashion-MNIST):
           its wall time and images/s from its summary
  sweep    `sweep --profile gpu` of exp-datascale reduced to vit and resnet at one fraction and
           seed, under a hard timeout: runs finished, and the dry run's estimate of the whole profile
Budget: meant for at most 9 minutes on one H200 with the defaults (the step part starts nothing new
after 300 s, the fit and the sweep stop at 100 s each); not yet run on one. Without CUDA it says so and stops, unless
`--device cpu` (a smoke test of the step and syncs parts: tests/test_gpu_check.py).

    make gpu-check                                   # -> results/gpu_check.json
    make gpu-check WHEELS=<folder>                   # the same, .venv installed offline (make wheelhouse)
    python benchmarks/gpu_check.py                   # in an environment already prepared, as it is
    python benchmarks/gpu_check.py --device cpu --families vit --members 2 --parts step syncs --out /tmp/x.json
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
from experiments.runs.provenance import hardware, versions  # noqa: E402
from experiments.runs.run_folder import SUMMARY_FILE, RunFolder  # noqa: E402
from family_throughput import sync, timed  # noqa: E402
from modules import FAMILIES  # noqa: E402
from packed_group import group  # noqa: E402

PARTS = ("step", "syncs", "fit", "sweep")
warnings.filterwarnings("ignore", "There is a performance drop")


def part_step(a, device) -> list[dict]:
    """Families in the order given (vit and resnet first: the two the cpu profiles train), each at
    every K; no new measurement starts after --step_limit seconds (the rest is listed as skipped)."""
    rows, start = [], time.perf_counter()
    for family in a.families:
        for k in a.members:
            if time.perf_counter() - start > a.step_limit:
                rows.append({"family": family, "members": k, "skipped": f"past --step_limit {a.step_limit} s"})
                continue
            eager, e_box = group(family, k, a.batch, device, None, a.backend)
            captured, c_box = group(family, k, a.batch, device, a.mode, a.backend)
            t = time.perf_counter()
            for _ in range(3):  # compile, capture, replay once
                captured()
            sync(device)
            compile_s = time.perf_counter() - t
            for _ in range(3):
                eager()
            tol = 2e-2 if device.type == "cuda" else 1e-3   # bf16 autocast on CUDA: kernels round differently
            same = bool(torch.allclose(e_box["losses"].float(), c_box["losses"].float(), rtol=tol, atol=tol))
            e_s, _ = timed(eager, a.steps, 0, device)
            c_s, util = timed(captured, a.steps, 0, device)
            e_ms, c_ms = 1000 * e_s / a.steps, 1000 * c_s / a.steps
            rows.append({"family": family, "members": k, "batch": a.batch, "eager_ms": round(e_ms, 3),
                         "captured_ms": round(c_ms, 3), "compile_s": round(compile_s, 1),
                         "captured_images_per_s": round(k * a.batch * 1000 / c_ms),
                         "gpu_utilisation": util, "captured_equals_eager": same})
            print(json.dumps(rows[-1]), flush=True)
            torch._dynamo.reset()
    return rows


def part_syncs(a, device) -> dict:
    if device.type != "cuda":
        return {"syncs_per_step": "n/a (counted on CUDA only)"}
    call, _ = group(a.families[0], a.members[0], a.batch, device, a.mode, a.backend)
    draw = strong_draws(a.members[0], a.batch, device)
    for _ in range(3):
        call()
        draw()
    sync(device)
    step, draws = _synchronisations(call, a.steps), _synchronisations(draw, a.steps)
    return {"family": a.families[0], "members": a.members[0], "steps": a.steps,
            "syncs_per_step": len(step) / a.steps, "first": step[:3],
            "strong_recipe_draw_syncs_per_step": len(draws) / a.steps, "draws_first": draws[:3]}


def strong_draws(k: int, batch: int, device: torch.device):
    """The host's part of a step of the strong recipe: each member's augmentation draws (RandAugment,
    Random Erasing, MixUp/CutMix) from its loader's generator on the device, stacked."""
    from datamodules.batch_augment import AugmentConfig, BatchAugment, member_draws
    aug = BatchAugment(AugmentConfig(crop_padding=2, hflip=True, randaugment=True, random_erasing=0.25,
                                     mixup_alpha=0.8, cutmix_alpha=1.0), torch.tensor([72.9]), torch.tensor([90.0]), 10)
    gens = [torch.Generator(device).manual_seed(i) for i in range(k)]
    return lambda: member_draws([aug.draws(batch, (1, 28, 28), g) for g in gens])


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


def child_env() -> dict[str, str]:
    """This environment for the processes it starts, the project's root first on PYTHONPATH: an
    environment provided through PYTHONPATH (packages installed with pip --target) stays whole."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}


def _python(args: list[str], limit: int, cwd: Path) -> dict:
    """`python -m experiments <args>` in its own process group, killed whole (the runs a sweep started
    included) after `limit` seconds."""
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "experiments", *args], cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True, env=child_env())
    try:
        out, _ = p.communicate(timeout=limit)
        return {"rc": p.returncode, "seconds": round(time.perf_counter() - t, 1), "tail": out[-1200:]}
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return {"rc": "timeout", "seconds": limit}


def part_fit(a, device, work: Path) -> dict:
    out = _python(["fit", "--run_name", "gpu-check-vit", "--runs_dir", str(work), "--model.family", "vit",
                   "--model.budget", "tiny", "--data.fraction", "0.1", "--data.batch_size", "128",
                   "--trainer.max_steps", "500", "--trainer.enable_progress_bar", "false"], a.part_limit, ROOT)
    summaries = [RunFolder(p.parent).summary() for p in work.rglob(SUMMARY_FILE)]
    if summaries:
        s = summaries[0] or {}
        out.update({k: s.get(k) for k in ("steps", "images_per_sec", "wall_time_s", "test_acc")})
    return out


def part_sweep(a, device, work: Path) -> dict:
    axes = ["--spec", "datascale", "--profile", "gpu", "--runs_dir", str(work / "sweep")]
    dry = _python(["sweep", *axes, "--dry_run"], 120, ROOT)
    estimate = [line for line in dry.get("tail", "").splitlines() if line.startswith("## the whole profile")]
    out = _python(["sweep", *axes, "--families", "vit", "resnet", "--fractions", "0.01", "--seeds", "0"],
                  a.part_limit, ROOT)
    done = [RunFolder(p.parent).status() for p in (work / "sweep").rglob(SUMMARY_FILE)]
    return {**out, "runs_finished": done.count("done") + done.count("fitted"), "dry_run_estimate": estimate}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    p.add_argument("--members", nargs="+", type=int, default=[8, 16, 32], help="group sizes K (default 8 16 32)")
    p.add_argument("--batch", type=int, default=128, help="images per member per step (default 128)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per measurement (default 20)")
    p.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    p.add_argument("--step_limit", type=int, default=300, help="seconds after which the step part starts no "
                   "new measurement (default 300)")
    p.add_argument("--part_limit", type=int, default=100, help="seconds for the fit and the sweep part each")
    p.add_argument("--mode", default="reduce-overhead", help="torch.compile mode of the captured step")
    p.add_argument("--backend", default="inductor", help="torch.compile backend (aot_eager: a fast smoke test)")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "gpu_check.json")
    a = p.parse_args(argv)
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu-check: this machine has no CUDA device; run it where one is (or --device cpu for a smoke "
              "test of the step and syncs parts)", file=sys.stderr)
        return 2
    if device.type == "cpu" and a.mode == "reduce-overhead":
        a.mode = "default"  # CUDA graphs need CUDA
    summary = {"hardware": hardware(), "versions": versions(), "args": {k: str(v) for k, v in vars(a).items()},
               "parts": {}}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        for name in a.parts:
            t = time.perf_counter()
            try:
                fn = {"step": part_step, "syncs": part_syncs}.get(name)
                result = fn(a, device) if fn else {"fit": part_fit, "sweep": part_sweep}[name](a, device, Path(tmp))
            except Exception as e:  # recorded; the next part runs
                result = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
            summary["parts"][name] = {"seconds": round(time.perf_counter() - t, 1), "result": result}
            a.out.write_text(json.dumps(summary, indent=1) + "\n")
            print(f"gpu-check: {name} done in {summary['parts'][name]['seconds']} s -> {a.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
