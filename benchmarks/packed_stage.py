"""A miniature gpu stage on this machine: how many times the packed engine compiles, and what its
groups cost, compiling once per family and member count (the engine: a stage's groups share one
compiled step, their seeds, learning rates and lengths being inputs of the graph) against compiling
every group again (torch._dynamo.reset() before each group, as the engine did before issue 44; then
the graph also held the step count as a constant, so inductor's cache missed too, which this cannot
show: today's graph is the same for every group, and a recompile of it hits the cache).

The stage: --groups packed groups of the datascale gpu profile's family at its smallest fraction,
--members members each, as the sweep plans them, in miniature (--steps steps of --batch images,
one validation, no test), each group another run of seeds; the second group trains 2 more steps at
another learning rate, as a later fraction's or a tuning trial's group would. All of them are
trained by `fit_packed` in one process, the step compiled by inductor (compile forced: on the CPU
the sweep's packed steps run eager). Each mode runs in a process of its own with an empty inductor
cache, as a first stage on a fresh machine. Printed per mode: compilations (dynamo frames compiled),
each group's wall time (the first group's includes its compiling) and the stage's wall and CPU
time (CPU time: the process's and its children's, readable on a loaded machine). Asserts nothing.

    python benchmarks/packed_stage.py [--family vit] [--groups 3] [--members 2] [--steps 6] [--batch 16]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from experiments.runs.run.provenance import hardware, versions
from modules import FAMILIES
from modules.budgets import distils

warnings.filterwarnings("ignore")
MODES = ("per group", "shared")


def stage_groups(family: str, groups: int, members: int, steps: int, batch: int, work: Path) -> list[list[list[str]]]:
    """The fit_packed argument lists of each group: the gpu profile's first packed group, seeds
    widened to groups x members, in miniature; the second group 2 steps longer at another lr."""
    from packed_group import profile_groups
    planned, axes = profile_groups(family, members, list(range(groups * members)), work, lambda axes: 59_000,
                                   variants=["default"], miniature=dict(epochs=1, min_steps=steps, max_steps=steps,
                                                                        val_checks=1, val_size=100, batch_size=batch))
    planned = planned[:groups]
    longer = ["--trainer.max_steps", str(steps + 2), "--trainer.val_check_interval", str(steps + 2),
              "--model.lr", str(axes["lrs"][-1])]
    return [[[*r.args, "--test_after_fit", "false", *(longer if g == 1 else [])] for r in group]
            for g, group in enumerate(planned)]


def run_stage(mode: str, family: str, groups: int, members: int, steps: int, batch: int) -> dict:
    import experiments.runs.packed.loop as packed_loop
    from experiments.runs.packed.fit import fit_packed
    frames = [0]
    inductor, compile_ = torch._dynamo.lookup_backend("inductor"), torch.compile

    def counting(gm, example_inputs):
        frames[0] += 1
        return inductor(gm, example_inputs)

    torch.compile = lambda fn, fullgraph, mode: compile_(fn, fullgraph=fullgraph, backend=counting)
    packed_loop._COMPILED.clear()
    torch._dynamo.reset()
    seconds, cpu0 = [], _cpu_seconds()
    try:
        with tempfile.TemporaryDirectory(prefix="packed_stage-") as work:
            for args in stage_groups(family, groups, members, steps, batch, Path(work)):
                if mode == "per group":
                    packed_loop._COMPILED.clear()
                    torch._dynamo.reset()
                t = time.perf_counter()
                statuses = fit_packed(args, compile=True)
                seconds.append(time.perf_counter() - t)
                assert set(statuses.values()) == {"fitted"}, statuses
    finally:
        torch.compile = compile_
    return {"compilations": frames[0], "seconds": seconds, "cpu_seconds": _cpu_seconds() - cpu0}


def _cpu_seconds() -> float:
    return sum(r.ru_utime + r.ru_stime for r in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))


def in_own_process(mode: str, a) -> dict:
    """run_stage in a child process with an empty inductor cache of its own."""
    with tempfile.TemporaryDirectory(prefix="packed_stage-inductor-") as cache:
        argv = [sys.executable, __file__, "--one", mode, "--family", a.family, "--groups", str(a.groups),
                "--members", str(a.members), "--steps", str(a.steps), "--batch", str(a.batch)]
        done = subprocess.run(argv, env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}, capture_output=True,
                              text=True, check=False)
    if done.returncode:
        raise SystemExit(f"the {mode!r} stage failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", default="vit", choices=[f for f in FAMILIES if not distils(f)],
                   help="(not DeiT: its members distil from ResNet teachers this miniature does not train)")
    p.add_argument("--groups", type=int, default=3, help="packed groups in the stage (default 3)")
    p.add_argument("--members", type=int, default=2, help="members per group (default 2)")
    p.add_argument("--steps", type=int, default=6, help="steps of the first group (default 6)")
    p.add_argument("--batch", type=int, default=16, help="images per member per step (default 16)")
    p.add_argument("--one", choices=MODES, help=argparse.SUPPRESS)   # a child's one mode
    a = p.parse_args(argv)
    for name, value, least in (("groups", a.groups, 2), ("members", a.members, 2), ("steps", a.steps, 1),
                               ("batch", a.batch, 1)):
        if value < least:
            p.error(f"--{name} {value}: allowed {least} or more")
    if a.one:
        print(json.dumps(run_stage(a.one, a.family, a.groups, a.members, a.steps, a.batch)))
        return 0
    v = versions()
    print(f"hardware: {hardware()}; torch {v['torch']}, timm {v['timm']}; {torch.get_num_threads()} thread(s)")
    print(f"a miniature gpu stage: {a.groups} packed groups of {a.family}-tiny x{a.members} members, batch "
          f"{a.batch}, {a.steps} steps (the second {a.steps + 2}, at another lr), inductor, one process per mode, "
          "each from an empty inductor cache")
    print(f"{'mode':10} {'compilations':>12} {'stage s':>8} {'CPU s':>7}  group s")
    for mode in MODES:
        r = in_own_process(mode, a)
        print(f"{mode:10} {r['compilations']:12d} {sum(r['seconds']):8.1f} {r['cpu_seconds']:7.1f}  "
              + ", ".join(f"{s:.1f}" for s in r["seconds"]), flush=True)
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
