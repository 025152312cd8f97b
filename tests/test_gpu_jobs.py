"""A machine with several GPUs: `--jobs N` gives each of the N run processes at a time a GPU that it
alone sees (CUDA_VISIBLE_DEVICES), and the dry run prices the runs on one GPU each, N at a time.
Tested without a GPU: torch is told it has two, and the run processes are stand-ins that record the
environment they were started with."""
from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from experiments.runs.sweep import execute
from experiments.runs.sweep.estimate import estimate
from experiments.runs.sweep.execute import flops_per_image
from experiments.runs.sweep.spec import Run
from experiments.runs.sweep.sweep import run_sweep


class RecordedProcesses:
    """Stands in for subprocess.Popen: each process records its environment and, while it runs (a
    fifth of a second), which GPUs the processes running with it were given."""

    def __init__(self):
        self.started, self.together, self._running, self._lock = [], [], [], threading.Lock()

    def __call__(self, command, env, **_):
        gpu = env.get("CUDA_VISIBLE_DEVICES")
        with self._lock:
            self.started.append(env)
            self._running.append(gpu)
            self.together.append(sorted(self._running, key=str))
        return RecordedProcess(self, gpu)

    def ended(self, gpu) -> None:
        with self._lock:
            self._running.remove(gpu)


class RecordedProcess:
    def __init__(self, processes: RecordedProcesses, gpu):
        self.processes, self.gpu = processes, gpu

    def wait(self) -> int:
        time.sleep(0.2)
        self.processes.ended(self.gpu)
        return 1

    def send_signal(self, signum) -> None:
        pass


@pytest.fixture
def hardware_asked(monkeypatch) -> list:
    """torch sees two H200s here; provenance.hardware names them as a process seeing `gpus` of them
    would, and records each `gpus` it was asked for."""
    asked = []

    def hardware(gpus=None):
        asked.append(gpus)
        return f"NVIDIA H200 x{gpus or 2}, 16 CPU cores (X)"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr("experiments.runs.run.provenance.hardware", hardware)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return asked


@pytest.fixture
def processes(monkeypatch, hardware_asked):
    recorded = RecordedProcesses()
    monkeypatch.setattr(execute, "subprocess", SimpleNamespace(Popen=recorded, STDOUT=-2))
    return recorded


def _runs(tmp_path, n: int) -> list[Run]:
    return [Run(i, f"vit_s{i}", "vit", 0.1, i, "default", ("--seed_everything", str(i)),
                run_dir=tmp_path / f"vit_s{i}", steps=100, batch_size=32) for i in range(n)]


def test_two_jobs_on_two_gpus_run_one_process_per_gpu_each_seeing_only_its_own(tmp_path, processes):
    plan = _runs(tmp_path, 6)
    assert run_sweep(plan, jobs=2) == {r.name: "failed" for r in plan}   # the stand-ins exit 1
    assert len(processes.started) == 6
    assert {e["CUDA_VISIBLE_DEVICES"] for e in processes.started} == {"0", "1"}
    assert all(len(set(gpus)) == len(gpus) for gpus in processes.together)   # never two on one GPU
    assert ["0", "1"] in processes.together                                  # both GPUs busy at once
    assert {e["OMP_NUM_THREADS"] for e in processes.started} == {str(max(1, (os.cpu_count() or 1) // 2))}


def test_more_jobs_than_gpus_share_them_round_robin_and_keep_the_gpus_this_process_was_given(
        tmp_path, processes, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")   # this process sees GPUs 4 and 6 as its 0 and 1
    plan = _runs(tmp_path, 6)
    run_sweep(plan, jobs=3)
    assert {e["CUDA_VISIBLE_DEVICES"] for e in processes.started} == {"4", "6"}
    assert max(len(g) for g in processes.together) == 3
    assert all(g.count("4") <= 2 and g.count("6") <= 2 for g in processes.together)


def test_one_job_at_a_time_keeps_the_environment_as_it_is(tmp_path, processes):
    run_sweep(_runs(tmp_path, 2), jobs=1)
    assert len(processes.started) == 2
    assert processes.started == [dict(os.environ)] * 2   # no GPU chosen, no thread count set


def test_the_dry_run_prices_parallel_runs_on_one_gpu_each(tmp_path, hardware_asked):
    """Each run process sees one GPU, so its step time is the one a 1-GPU process records; N GPUs
    train N runs at a time."""
    vit = flops_per_image(_runs(tmp_path, 1)[0])
    one_gpu = {("NVIDIA H200 x1, 16 CPU cores (X)", "vit", "tiny", vit, 32, 1): 60.0}   # 100 steps: 0.1 min
    runs = _runs(tmp_path, 40)
    # the whole line: more cores of a GPU machine's CPU would not train more runs at a time
    assert estimate(runs, 2, table=one_gpu) == "; about 2 min on this device (2 at a time, one GPU each)"
    assert hardware_asked == [1]
    assert estimate(runs, 4, table=one_gpu).startswith("; about 1 min on this device (4 at a time on 2 GPUs)")
    # one at a time: the process sees both GPUs, as it records itself; none measured so
    assert estimate(runs, 1, table=one_gpu).startswith("; no step times measured on NVIDIA H200 x2")
