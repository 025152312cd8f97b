"""benchmarks/gpu_check.py (make gpu-check): without CUDA it says so in one line; `--smoke` runs its
parts in miniature on the CPU, each in its own process under its own limit (the CUDA numbers need a GPU)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_check  # noqa: E402


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_without_cuda_one_line_and_nothing_written(tmp_path, capsys):
    assert gpu_check.main(["--out", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no CUDA device" in err and "--smoke" in err
    assert not (tmp_path / "s.json").exists()


@pytest.mark.parametrize("bad", [["--members", "8", "0"], ["--batch", "-1"], ["--steps", "0"], ["--total_limit", "0"],
                                 ["--part_limit", "0"]])
def test_a_bad_size_one_line_and_nothing_written(tmp_path, capsys, bad):
    assert gpu_check.main(["--smoke", *bad, "--out", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {bad[0]} {bad[-1]}: allowed integers >= 1"
    assert not (tmp_path / "s.json").exists()


def test_smoke_runs_every_part_in_miniature_under_its_limit(fmnist_dir, tmp_path):
    """The parts in their order, each ended by itself within its limit, all within the run's own
    limit: a real packed group trained and tested, a compiled step's times, the syncs (CUDA only),
    one fit; the summary on one screen."""
    out = tmp_path / "s.json"
    env = {**os.environ, "FASHION_MNIST_DIR": str(fmnist_dir)}
    p = subprocess.run([sys.executable, str(gpu_check.ROOT / "benchmarks" / "gpu_check.py"), "--smoke",
                        "--out", str(out)], env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    summary = json.loads(out.read_text())
    parts = summary["parts"]
    assert list(parts) == list(gpu_check.PARTS) == ["group", "compile", "syncs", "fit"]
    for name, part in parts.items():
        assert part["status"] == "ok", (name, part)
        assert part["limit_s"] == gpu_check.LIMITS[name][1] and 0 < part["seconds"] <= part["limit_s"]
    assert summary["seconds"] <= summary["total_limit_s"] == gpu_check.TOTAL_S[1]
    group = parts["group"]["result"]
    assert group["family"] == "vit" and group["members"] == 2 and group["tested"] == 2
    assert set(group["statuses"].values()) == {"done"} and group["ms_per_step"] > 0
    [row] = parts["compile"]["result"]["rows"]
    assert (row["family"], row["members"], row["backend"]) == ("vit", 2, "aot_eager")
    assert row["compile_s"] > 0 and row["step_ms"] > 0
    assert {"family", "members", "batch", "backend", "mode", "compile_s", "step_ms"} <= set(row)  # what the dry run reads
    # keyed as the dry run keys a gpu-profile group of that family: its budget and FLOPs per image
    from experiments.runs.sweep.execute import flops_per_image
    from experiments.runs.sweep.spec import load_spec, main_runs, resolve_axes
    spec = load_spec("datascale")
    axes = resolve_axes(spec, "gpu", families=["vit"])
    planned = main_runs(spec, axes, tmp_path / "plan", 59_000, lambda *key: axes["lrs"][0])[0]
    assert (row["budget"], row["flops_per_image"]) == (planned.budget, flops_per_image(planned))
    assert parts["syncs"]["result"]["syncs_per_step"].startswith("n/a")
    assert parts["fit"]["result"]["rc"] == 0 and parts["fit"]["result"]["status"] == "done"
    assert summary["hardware"] and summary["versions"]["torch"]
    screen = p.stdout[p.stdout.index("gpu-check on"):].splitlines()
    assert len(screen) <= 24 and any("2 tested" in line for line in screen)


def test_a_part_past_its_limit_is_killed_and_recorded(tmp_path):
    """A part's process is killed at its limit (its start-up alone takes longer than 1 s here)."""
    part = gpu_check.run_part("syncs", ["--smoke"], 1.0, tmp_path)
    assert part["status"] == "timeout" and part["limit_s"] == 1.0 and part["seconds"] < 10
    assert part["result"] == {}


def test_no_part_starts_past_the_runs_own_limit(tmp_path):
    """At most 8 minutes on a GPU: the parts' limits fit the whole run's, which the run holds to."""
    assert sum(gpu for gpu, _ in gpu_check.LIMITS.values()) <= gpu_check.TOTAL_S[0] <= 8 * 60
    out = tmp_path / "s.json"
    assert gpu_check.main(["--smoke", "--total_limit", str(gpu_check.MIN_PART_S - 1), "--out", str(out)]) == 0
    parts = json.loads(out.read_text())["parts"]
    assert list(parts) == list(gpu_check.PARTS)
    assert all(p["status"] == "skipped" and p["seconds"] == 0 for p in parts.values())


def test_its_member_counts_are_the_gpu_profiles_group_sizes(tmp_path):
    """The compile part measures the group sizes the gpu profile's sweep trains: its tuning groups
    (4 lrs x 2 variants), its main groups (3 seeds x 2 variants) and those at the tuned fractions,
    whose first seed's runs are the tuning trials (trained already, only tested)."""
    from experiments.runs.sweep.execute import pack_groups
    from experiments.runs.sweep.spec import load_spec, main_runs, resolve_axes, tuned_fractions, tuning_runs
    spec = load_spec("datascale")
    axes = resolve_axes(spec, "gpu", families=["vit"])
    trials = tuning_runs(spec, axes, tmp_path, 59_000, axes["families"])
    main = [r for r in main_runs(spec, axes, tmp_path, 59_000, lambda *key: axes["lrs"][0])
            if not (r.seed == axes["seeds"][0] and r.fraction in tuned_fractions(axes))]
    sizes = {len(g) for runs in (trials, main) for g in pack_groups(runs, axes["pack"])}
    assert sorted(sizes, reverse=True) == list(gpu_check.PROFILE_MEMBERS)


def test_the_strong_variant_draws_it_counts_are_every_members():
    """The host part of the strong variant's draws: every member's crop and flip, and the batch's
    place, from which the step draws the strong stages' numbers of every member."""
    draws = gpu_check.strong_draws(3, 8, torch.device("cpu"))()
    assert set(draws) == {"dy", "dx", "flip", "place"}
    assert draws["dy"].shape == draws["flip"].shape == (3, 8) and draws["place"].shape == (2,)


def test_its_processes_keep_an_environment_given_through_pythonpath(tmp_path, monkeypatch):
    """A prepared environment (packages installed with pip --target) reaches `python -m experiments`
    through PYTHONPATH; the project's root comes first."""
    (tmp_path / "prepared_package.py").write_text("NAME = 'prepared'\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    code = "import prepared_package, experiments; print(prepared_package.NAME, experiments.__file__)"
    out = subprocess.run([sys.executable, "-c", code], env=gpu_check.child_env(), cwd="/", capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["prepared", str(gpu_check.ROOT / "experiments" / "__init__.py")]


def test_a_family_s_profile_groups_hold_its_runs_only_a_student_s_naming_its_teachers(tmp_path):
    """The benchmarks' packed groups of the gpu profile are the named family's: DeiT's plan brings
    its ResNet teachers, which are not DeiT's groups, and every DeiT member distils from one."""
    from packed_group import profile_groups
    for family in ("vit", "deit"):
        groups, axes = profile_groups(family, 8, list(range(8)), tmp_path, lambda axes: 59_000)
        assert groups and {r.family for g in groups for r in g} == {family}
        assert all((r.teacher is not None) == (family == "deit") for g in groups for r in g)


def test_eager_on_the_cpu_times_the_step_as_the_engine_runs_it_there(tmp_path, monkeypatch):
    """--mode eager (make bench-packed-cpu): the compile part's step not compiled, in the precision a
    run takes on this machine, one row per family and member count that the dry run reads as this
    CPU's packed step times; its summary goes to results/packed_steps_cpu.json, not gpu_check.json."""
    from experiments.runs.run.cli import default_precision
    from experiments.runs.sweep.estimate import CPU_GROUP_TIMES, COMPILE_TIMES, read_group_step_times
    from experiments.runs.run.provenance import hardware
    assert gpu_check.parse(["--device", "cpu", "--mode", "eager"]).out == CPU_GROUP_TIMES
    assert gpu_check.parse([]).out == COMPILE_TIMES
    out = tmp_path / "packed_steps_cpu.json"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert gpu_check.main(["--device", "cpu", "--mode", "eager", "--parts", "compile", "--members", "2",
                           "--batch", "4", "--steps", "1", "--families", "vit", "--out", str(out)]) == 0
    [row] = json.loads(out.read_text())["parts"]["compile"]["result"]["rows"]
    assert (row["mode"], row["backend"], row["compile_s"], row["threads"]) == ("eager", "none", 0.0, 1)
    assert row["precision"] == default_precision() and row["step_ms"] > 0
    assert read_group_step_times(out) == {(hardware(), "vit", "tiny", row["flops_per_image"], 4, 2): row["step_ms"]}


def test_eager_is_the_cpu_s_compile_part_only(capsys):
    """--mode eager times what the engine runs on a CPU: on a GPU (the default device) or with another
    part it is refused in one line, and alone it runs the compile part only."""
    for argv in (["--mode", "eager"], ["--mode", "eager", "--device", "cpu", "--parts", "group"]):
        with pytest.raises(SystemExit) as stop:
            gpu_check.parse(argv)
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert stop.value.code == 2 and "--mode eager: allowed with --device cpu and the compile part only" in err
    assert gpu_check.parse(["--mode", "eager", "--device", "cpu"]).parts == ["compile"]
