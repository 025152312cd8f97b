"""Shared fixtures: a small Fashion-MNIST-format dataset written as IDX files, and an isolated cache."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "experiments" / "configs" / "smoke.yaml")

if os.environ.get("PYTEST_XDIST_WORKER"):  # one worker per core (pytest -n auto): one thread each, its runs too
    import torch
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


def pytest_collection_finish(session):
    """Every test module is imported: the ~500k objects of torch, Lightning, timm and the tests go
    to the permanent generation, so that a full gc.collect (the timing code's, or Python's own)
    walks only what tests create: 0.25 s -> ~0 s a collection in a worker."""
    import gc
    gc.collect()
    gc.freeze()


def val_curve(steps: int, plateaued: bool = True, acc: float = 0.8) -> list[list]:
    """A run's validations, [step, accuracy] at every eighth of `steps`, ending at `acc`: flat over
    the last half (plateaued by experiments/runs/run/convergence.py), or climbing 2 points a quarter."""
    rise = 0.0 if plateaued else 0.02 / (steps / 4)
    return [[steps * i // 8, round(acc - rise * (steps - steps * i // 8), 6)] for i in range(1, 9)]


def tree_hashes(folder: Path) -> dict[str, str]:
    """Every file under `folder` -> the sha256 of its bytes (what a no-op rerun must leave alone)."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def started_together(runner: str, spec: Path, runs: Path, experiment: str) -> list[Path]:
    """Two `python -m experiments <runner>` of one spec started at once: both exit 0, one waits for
    the other's lock, and each run folder was launched twice, by one of them (trained as a tuning
    trial, then tested only as a main run: the small specs make every run a winning trial). Returns
    the experiment's run folders. The env must name the data (FASHION_MNIST_DIR)."""
    cmd = [sys.executable, "-m", "experiments", runner, "--spec", str(spec), "--runs_dir", str(runs)]
    procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    assert sum(f"another sweep of {experiment} (pid " in o and "is running; waiting" in o for o in outs) == 1
    folders = sorted(p for p in (runs / experiment).iterdir() if p.is_dir())
    for f in folders:
        log = (f / "log.txt").read_text()
        assert log.count("\n$ python -m experiments fit ") == 2, log
        assert log.count("is trained; testing its best checkpoint") == 1
        assert json.loads((f / "summary.json").read_text())["status"] == "done"
    return folders


def write_idx(path: Path, array: np.ndarray) -> None:
    """The IDX format: magic (0, 0, type 0x08 = uint8, ndim), big-endian dims, raw bytes."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(">" + "I" * array.ndim, *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def make_images(n: int, num_classes: int, seed: int, size: int = 28, channels: int = 1):
    """Learnable images: class c lights a band of rows at a class-specific height, plus noise."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % num_classes
    rng.shuffle(labels)
    images = rng.integers(0, 60, size=(n, size, size, channels), dtype=np.uint8)
    band = size // num_classes
    for i, c in enumerate(labels):
        images[i, c * band:(c + 1) * band, :, :] = 220
    return images, labels


@pytest.fixture(scope="session")
def fmnist_dir(tmp_path_factory) -> Path:
    """600 training and 200 test images in the files of Debian's dataset-fashion-mnist."""
    d = tmp_path_factory.mktemp("fashion-mnist")
    for prefix, n, seed in (("train", 600, 0), ("t10k", 200, 1)):
        images, labels = make_images(n, 10, seed)
        write_idx(d / f"{prefix}-images-idx3-ubyte.gz", images[..., 0])
        write_idx(d / f"{prefix}-labels-idx1-ubyte.gz", labels)
    return d


@pytest.fixture(autouse=True, scope="session")
def isolated_cache(tmp_path_factory):
    """Decoded datasets go to a fresh cache, never the user's."""
    mp = pytest.MonkeyPatch()
    mp.setenv("VIT_FAMILIES_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


@pytest.fixture(autouse=True, scope="session")
def kill_switch_importable():
    """The interruption tests name tests/kill_switch.py's callbacks in --trainer.callbacks: allowed the
    way a researcher allows their own (experiments/runs/run/import_policy.py), in this process and the
    runs it starts."""
    mp = pytest.MonkeyPatch()
    mp.setenv("VIT_FAMILIES_IMPORTS", "tests.kill_switch")
    yield
    mp.undo()


@pytest.fixture
def make_dm(fmnist_dir):
    """ImageClassificationDataModule on the small IDX data; keyword arguments override."""
    from datamodules import ImageClassificationDataModule

    def make(**kw):
        kw.setdefault("data_dir", str(fmnist_dir))
        return ImageClassificationDataModule(**kw)
    return make


@pytest.fixture
def cli(fmnist_dir, tmp_path):
    """Runs `python -m experiments <command> ...` in-process on the small IDX data (smoke config);
    returns (exit code, the run folder written last, or None)."""
    from experiments.__main__ import main
    runs = tmp_path / "runs"

    def run(command: str, *args: str, experiment: str = "t") -> tuple[int, Path]:
        base = ["--config", SMOKE, "--data.data_dir", str(fmnist_dir), "--runs_dir", str(runs),
                "--experiment", experiment, "--trainer.enable_progress_bar", "false",
                "--trainer.enable_model_summary", "false"]
        code = main([command, *base, *args])
        folders = [d for d in (runs / experiment).glob("*") if d.is_dir()] if (runs / experiment).exists() else []
        return code, max(folders, key=lambda d: d.stat().st_mtime_ns, default=None)
    return run


@pytest.fixture
def in_process_launches(monkeypatch):
    """The sweep's launchers (execute.launch, launch_packed) run their `python -m experiments ...`
    command in this process instead of a new one (~5 s of imports saved per run), its output
    appended to the folder's log.txt as the process's would be. For tests of what a sweep plans,
    trains and records; the kill, lock and scheduler tests keep real processes. One at a time:
    a sweep's worker threads would otherwise swap each other's redirected stdout."""
    import contextlib
    import threading

    import experiments.runs.sweep.execute as execute
    from experiments.__main__ import main
    one_at_a_time = threading.Lock()

    def in_process(command: list[str], shown: str, folder: Path, threads) -> int:
        assert command[1:3] == ["-m", "experiments"], command
        folder.mkdir(parents=True, exist_ok=True)
        with one_at_a_time, open(folder / "log.txt", "a") as log:
            log.write(f"\n$ {shown}\n")
            log.flush()
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                return main(command[3:])
    monkeypatch.setattr(execute, "_run_logged", in_process)
