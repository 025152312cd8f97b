"""benchmarks/gpu_check.py (make gpu-check): without CUDA it says so in one line; on the CPU its
step and syncs parts run as a smoke test and write their summary (the CUDA numbers need a GPU)."""
from __future__ import annotations

import json
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
    assert len(err.splitlines()) == 1 and "no CUDA device" in err and "--device cpu" in err
    assert not (tmp_path / "s.json").exists()


def test_cpu_smoke_writes_the_step_and_syncs_parts(tmp_path):
    out = tmp_path / "s.json"
    assert gpu_check.main(["--device", "cpu", "--families", "vit", "--members", "2", "--batch", "4", "--steps", "2",
                           "--parts", "step", "syncs", "--backend", "aot_eager", "--out", str(out)]) == 0
    summary = json.loads(out.read_text())
    [row] = summary["parts"]["step"]["result"]
    assert row["family"] == "vit" and row["members"] == 2 and row["captured_equals_eager"] is True
    assert row["eager_ms"] > 0 and row["captured_ms"] > 0 and row["captured_images_per_s"] > 0
    assert summary["parts"]["syncs"]["result"]["syncs_per_step"].startswith("n/a")
    assert summary["hardware"] and summary["versions"]["torch"]


def test_the_strong_recipe_draws_it_counts_are_every_members():
    draws = gpu_check.strong_draws(3, 8, torch.device("cpu"))()
    assert draws["ra_variant"].shape == (3, 8, 2) and draws["erase_noise"].shape == (3, 8, 1, 28, 28)
    assert draws["mix_lam"].shape == (3,) and draws["mix_box"].shape == (3, 4)


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
