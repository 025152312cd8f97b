"""What made a number: the code's commit, the library versions and the hardware."""
from __future__ import annotations

import os
import platform
import subprocess
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGES = ("torch", "timm", "lightning", "torchmetrics", "datasets", "numpy")


CODE = ("datamodules", "modules", "experiments", "pyproject.toml")  # what a run executes


@lru_cache(maxsize=1)
def git_commit() -> str:
    """HEAD's commit, with '-dirty' when the code a run executes differs from it (results, docs
    and tests being edited meanwhile do not change what a run computes)."""
    root = Path(__file__).resolve().parents[3]
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", *CODE], cwd=root,
                               capture_output=True, text=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            out[p] = "absent"
    return out


@lru_cache(maxsize=2)
def hardware(gpus: int | None = None) -> str:
    """e.g. '2 x Intel Xeon ... (AVX512), no GPU' or 'NVIDIA H200 x1, 16 CPU cores'; `gpus`: as a
    process that sees only that many of this machine's GPUs says it (a sweep's parallel runs: execute.Workers)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    import torch  # here, not at the top: a scheduler's task process writes records without torch
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} x{gpus or torch.cuda.device_count()}, {cores} CPU cores ({cpu})"
    return f"{cores} CPU cores ({cpu}, {torch.backends.cpu.get_cpu_capability()}), no GPU"
