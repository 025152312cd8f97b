"""The dry run's compile term (experiments/runs/sweep/estimate.py, #44 item 4): where the engine compiles a
packed group's step (on a GPU), the estimate adds the compile times `make gpu-check` measured, counted
as the engine compiles (once per family, member count and batch in a stage's one process; once per
group where each group is a process of its own), says how much of it is compiling and where each
number comes from, and names what was never measured instead of guessing."""
from __future__ import annotations

import json

from experiments.runs.sweep.estimate import compilations, estimate, read_compile_times, read_group_step_times
from experiments.runs.sweep.execute import flops_per_image, units_of
from experiments.runs.sweep.spec import Run

GPU = "NVIDIA H200 x1, 16 CPU cores (X)"
CPU = "2 CPU cores (dev, AVX2), no GPU"


def _runs(tmp_path, family: str, n: int, stage: str) -> list[Run]:
    return [Run(i, f"{family}_{stage}_{i}", family, 0.1, i, "default", ("--model.family", family, "--seed_everything", str(i)),
                run_dir=tmp_path / f"{family}_{stage}_{i}", stage=stage, steps=60_000, batch_size=128) for i in range(n)]


def _plan(tmp_path) -> list[Run]:
    """A tuning stage of two ViT groups of 8 and a ResNet group of 8, a main stage of one ViT group of 6."""
    return (_runs(tmp_path, "vit", 16, "tune") + _runs(tmp_path, "resnet", 8, "tune")
            + _runs(tmp_path, "vit", 6, "main"))


def _step_times(runs: list[Run], device: str) -> dict[tuple, float]:
    vit, resnet = (flops_per_image(next(r for r in runs if r.family == f)) for f in ("vit", "resnet"))
    # a group of 8 ViTs: 60,000 x 6 ms = 6 min; ResNets 3 min; 6 ViTs 5 min: 20 min of steps in all
    return {(device, "vit", "tiny", vit, 128, 8): 6.0, (device, "resnet", "tiny", resnet, 128, 8): 3.0,
            (device, "vit", "tiny", vit, 128, 6): 5.0}


COMPILE = {(GPU, "vit", 8, 128): 120.0, (GPU, "resnet", 8, 128): 60.0, (GPU, "vit", 6, 128): 120.0}


def test_one_process_per_stage_compiles_once_per_family_and_member_count(tmp_path):
    runs = _plan(tmp_path)
    assert compilations(units_of(runs, 8), 1) == [("vit", 8, 128), ("resnet", 8, 128), ("vit", 6, 128)]
    # each group a process of its own: the two ViT groups of the tuning stage compile twice
    assert compilations(units_of(runs, 8), 2) == [("vit", 8, 128), ("vit", 8, 128), ("resnet", 8, 128),
                                                  ("vit", 6, 128)]
    assert compilations(units_of(runs, 1), 1) == []   # runs alone train under Lightning, uncompiled
    # 20 min of steps + 2 + 1 + 2 min compiling
    assert estimate(runs, 1, GPU, _step_times(runs, GPU), pack=8, compile_times=COMPILE) == (
        "; about 25 min on this device (1 at a time), of which about 5 min compiling 3 packed steps "
        "(compile times: results/gpu_check.json; step times: results/step_times.csv)")
    # each group a process compiling its own step, the stages one after the other: the tuning stage's
    # ResNet group (3 + 1 min), then its ViT groups (6 + 2 each) on 2 jobs end at 12 min, the main
    # stage's ViT group (5 + 2) at 19; their steps alone at 9 + 5 = 14
    assert estimate(runs, 2, GPU, _step_times(runs, GPU), pack=8, compile_times=COMPILE).startswith(
        "; about 19 min on this device (2 at a time), of which about 5 min compiling 4 packed steps")


def test_what_was_never_measured_is_named_not_guessed(tmp_path):
    runs = _plan(tmp_path)
    no_resnet = {k: v for k, v in COMPILE.items() if k[1] != "resnet"}
    assert estimate(runs, 1, GPU, _step_times(runs, GPU), pack=8, compile_times=no_resnet) == (
        "; about 24 min on this device (1 at a time), of which about 4 min compiling 2 packed steps "
        "(compile times: results/gpu_check.json; step times: results/step_times.csv), not counting compiling "
        "resnet x8 at batch 128 (no compile time measured in results/gpu_check.json: make gpu-check)")
    assert estimate(runs, 1, GPU, {}, pack=8, compile_times={}) == (
        f"; no step times measured on {GPU} (results/step_times.csv) and no compile time for resnet x8 at batch "
        "128, vit x6 at batch 128, vit x8 at batch 128 (results/gpu_check.json: make gpu-check), so no estimate")
    assert estimate(runs, 1, GPU, {}, pack=8, compile_times=COMPILE) == (
        f"; no step times measured on {GPU} (results/step_times.csv), so no estimate")
    # runs alone compile nothing: the estimate is as it was
    assert estimate(runs[:1], 1, GPU, {}, compile_times={}) == (
        f"; no step times measured on {GPU} (results/step_times.csv), so no estimate")


def test_on_the_cpu_packed_steps_run_eager_so_nothing_is_compiled(tmp_path):
    runs = _plan(tmp_path)
    on_cpu = {(CPU, *k[1:]): v for k, v in COMPILE.items()}
    assert estimate(runs, 1, CPU, _step_times(runs, CPU), pack=8, compile_times=on_cpu) == (
        "; about 20 min on this device (1 at a time), about 11 min with 8 such cores, about 11 min with 16 such "
        "cores")   # the stages one after the other: the tuning stage's longest group (6), then the main stage's (5)


def test_the_compile_times_are_gpu_checks_rows_compiled_as_the_engine_compiles(tmp_path):
    """Read from the compile part of a gpu-check summary: inductor in CUDA-graph mode on a GPU; a smoke
    run's aot_eager rows, another mode and a row without its fields are left out; no file: nothing."""
    rows = [{"family": "vit", "members": 8, "batch": 128, "backend": "inductor", "mode": "reduce-overhead",
             "compile_s": 41.5, "step_ms": 5.4},
            {"family": "resnet", "members": 8, "batch": 128, "backend": "aot_eager", "mode": "reduce-overhead",
             "compile_s": 3.0, "step_ms": 9.0},
            {"family": "swin", "members": 8, "batch": 128, "backend": "inductor", "mode": "default",
             "compile_s": 30.0, "step_ms": 9.0},
            {"family": "deit", "members": 8, "backend": "inductor", "mode": "reduce-overhead", "compile_s": 1.0}]
    path = tmp_path / "gpu_check.json"
    path.write_text(json.dumps({"hardware": GPU, "parts": {"compile": {"status": "timeout", "result": {"rows": rows}}}}))
    assert read_compile_times(path) == {(GPU, "vit", 8, 128): 41.5}
    path.write_text(json.dumps({"hardware": CPU, "parts": {"compile": {"result": {"rows": rows}}}}))
    assert read_compile_times(path) == {}
    path.write_text("{not json")
    assert read_compile_times(path) == {} and read_compile_times(tmp_path / "none.json") == {}


def _summary(path, device: str, rows: list[dict]) -> None:
    path.write_text(json.dumps({"hardware": device, "parts": {"compile": {"status": "ok", "result": {"rows": rows}}}}))


def test_gpu_checks_step_times_price_the_groups_no_sweep_has_measured(tmp_path):
    """One gpu-check makes a gpu stage's estimate real: its compiled step times price the packed groups
    that no sweep's own group has measured (a sweep's count validation too, so they come first), and
    the estimate says which groups were priced from the step alone."""
    runs = _plan(tmp_path)
    measured = _step_times(runs, GPU)
    assert estimate(runs, 1, GPU, {}, pack=8, compile_times=COMPILE, group_times=measured) == (
        "; about 25 min on this device (1 at a time), of which about 5 min compiling 3 packed steps "
        "(compile times: results/gpu_check.json; step times: results/gpu_check.json for 4 packed groups, "
        "the step alone (validation and tests not counted))")
    # the ViT groups of 8 measured by a sweep at 9 ms: 2 x 6 min more; the rest from gpu-check
    vit8 = {k: v for k, v in measured.items() if k[1] == "vit" and k[5] == 8}
    assert estimate(runs, 1, GPU, {k: 9.0 for k in vit8}, pack=8, compile_times=COMPILE, group_times=measured) == (
        "; about 31 min on this device (1 at a time), of which about 5 min compiling 3 packed steps "
        "(compile times: results/gpu_check.json; step times: results/step_times.csv and results/gpu_check.json "
        "for 2 packed groups, the step alone (validation and tests not counted))")
    # without compile times the line still names where its step times come from
    assert estimate(runs, 1, GPU, {}, pack=8, compile_times={}, group_times=measured).startswith(
        "; about 20 min on this device (1 at a time) (step times: results/gpu_check.json for 4 packed groups, "
        "the step alone (validation and tests not counted)), not counting compiling ")
    # a run left alone trains under Lightning: never priced from a compiled step
    nine = _runs(tmp_path, "vit", 9, "tune")   # a group of 8 and one run alone
    vit = flops_per_image(nine[0])
    both = {(GPU, "vit", "tiny", vit, 128, 8): 6.0, (GPU, "vit", "tiny", vit, 128, 1): 1.0}
    assert estimate(nine, 1, GPU, {}, pack=8, compile_times=COMPILE, group_times=both).endswith(
        ", not counting vit-tiny at batch 128 (no step time measured)")
    # on the CPU the engine runs the step eager: its eager times there (read from eager rows only)
    # price the groups, named as such, and nothing is compiled
    assert estimate(runs, 1, CPU, {}, pack=8, compile_times=COMPILE, group_times=_step_times(runs, CPU)) == (
        "; about 20 min on this device (1 at a time) (step times: results/packed_steps_cpu.json for 4 packed "
        "groups, the step alone (validation and tests not counted)), about 11 min with 8 such cores, about 11 "
        "min with 16 such cores")
    assert estimate(runs, 1, CPU, {}, pack=8, compile_times={}, group_times={}) == (   # packed: the packed bench
        f"; no step times measured on {CPU} (results/step_times.csv; make bench-packed-cpu times the gpu profile's "
        "packed groups here), so no estimate")


def test_the_group_step_times_are_the_same_rows_keyed_as_step_times_are(tmp_path):
    """(device, family, budget, FLOPs per image, batch, members) -> step_ms from the rows compiled as
    the engine compiles; a row without its budget or FLOPs (an older gpu-check) is left out."""
    row = {"family": "vit", "members": 8, "batch": 128, "budget": "tiny", "flops_per_image": 52158800,
           "backend": "inductor", "mode": "reduce-overhead", "compile_s": 41.5, "step_ms": 5.4}
    rows = [row, {**row, "family": "swin", "mode": "default"}, {**row, "family": "resnet", "backend": "aot_eager"},
            {k: v for k, v in row.items() if k != "flops_per_image"} | {"family": "hybrid"},
            {**row, "family": "deit"}]   # gpu-check's DeiT step has no teacher inside: it prices nothing
    path = tmp_path / "gpu_check.json"
    _summary(path, GPU, rows)
    assert read_group_step_times(path) == {(GPU, "vit", "tiny", 52158800, 128, 8): 5.4}
    assert read_compile_times(path) == {(GPU, "vit", 8, 128): 41.5, (GPU, "hybrid", 8, 128): 41.5}
    _summary(path, CPU, rows)   # on a CPU the engine compiles nothing: a compiled row prices nothing there
    assert read_group_step_times(path) == {} and read_group_step_times(tmp_path / "none.json") == {}
    # gpu-check --mode eager on a CPU: its rows are the engine's step there (compiling nothing);
    # on a GPU an eager row is not how the engine runs
    eager = [{**row, "backend": "none", "mode": "eager", "compile_s": 0.0, "step_ms": 2700.0}, {**row, "family": "deit",
             "backend": "none", "mode": "eager", "compile_s": 0.0}]
    _summary(path, CPU, eager)
    assert read_group_step_times(path) == {(CPU, "vit", "tiny", 52158800, 128, 8): 2700.0}
    assert read_compile_times(path) == {}
    _summary(path, GPU, eager)
    assert read_group_step_times(path) == {} and read_compile_times(path) == {}
    # a CPU row prices a group only for processes with the threads it was timed with
    _summary(path, CPU, [{**eager[0], "threads": 1}, {**eager[0], "members": 4, "threads": 2, "step_ms": 900.0}])
    assert read_group_step_times(path, threads=1) == {(CPU, "vit", "tiny", 52158800, 128, 8): 2700.0}
    assert read_group_step_times(path, threads=2) == {(CPU, "vit", "tiny", 52158800, 128, 4): 900.0}
    assert len(read_group_step_times(path)) == 2


def test_the_dry_run_reads_both_the_gpu_and_the_cpu_measurements(tmp_path, monkeypatch):
    """By default the group step times come from results/gpu_check.json and
    results/packed_steps_cpu.json together, each row keyed by the machine that measured it."""
    import experiments.runs.sweep.estimate as est
    row = {"family": "vit", "members": 8, "batch": 128, "budget": "tiny", "flops_per_image": 52158800}
    monkeypatch.setattr(est, "COMPILE_TIMES", tmp_path / "gpu_check.json")
    monkeypatch.setattr(est, "CPU_GROUP_TIMES", tmp_path / "packed_steps_cpu.json")
    _summary(est.COMPILE_TIMES, GPU, [{**row, "backend": "inductor", "mode": "reduce-overhead", "compile_s": 41.5,
                                       "step_ms": 5.4}])
    assert read_group_step_times() == {(GPU, "vit", "tiny", 52158800, 128, 8): 5.4}  # the CPU file missing
    _summary(est.CPU_GROUP_TIMES, CPU, [{**row, "backend": "none", "mode": "eager", "compile_s": 0.0, "step_ms": 2700.0}])
    assert read_group_step_times() == {(GPU, "vit", "tiny", 52158800, 128, 8): 5.4,
                                       (CPU, "vit", "tiny", 52158800, 128, 8): 2700.0}
    assert read_compile_times() == {(GPU, "vit", 8, 128): 41.5}


def test_a_cpu_row_prices_only_processes_with_its_threads(tmp_path, monkeypatch):
    """make bench-packed-cpu times a packed step on one thread, as 2 jobs on 2 cores run it; a sweep
    of 1 job there runs each group on both threads, which those rows do not price."""
    import os

    import torch

    import experiments.runs.sweep.estimate as est
    runs = _plan(tmp_path)
    monkeypatch.setattr(est, "CPU_GROUP_TIMES", tmp_path / "packed_steps_cpu.json")
    monkeypatch.setattr(est, "COMPILE_TIMES", tmp_path / "gpu_check.json")
    rows = [{"family": f, "members": m, "batch": 128, "budget": "tiny", "flops_per_image": k[3], "backend": "none",
             "mode": "eager", "compile_s": 0.0, "step_ms": ms, "threads": 1}
            for k, ms in _step_times(runs, CPU).items() for f, m in [(k[1], k[5])]]
    _summary(est.CPU_GROUP_TIMES, CPU, rows)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert est.job_threads(2) == 1 and est.job_threads(1) == 2
    assert estimate(runs, 2, CPU, {}, pack=8).startswith("; about 14 min on this device (2 at a time) (step times: results/packed_steps_cpu.json")
    assert estimate(runs, 1, CPU, {}, pack=8) == (f"; no step times measured on {CPU} (results/step_times.csv; make "
                                                  "bench-packed-cpu times the gpu profile's packed groups here), so no estimate")
