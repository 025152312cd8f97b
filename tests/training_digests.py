"""What each family's training computes, as a digest, so that a change to it cannot pass unseen.

`test_every_family_fits_and_tests` trains every family 4 steps of the smoke config on the tests'
IDX data; the sha1 of the weights it ends with is that family's training digest on this machine
(CPU model and ISA, precision, threads, torch and timm versions: the same code gives other bits on
another). tests/training_digests/<family>.json keeps one digest per machine. A digest that differs
from the recorded one fails the test: the code now trains that family to other weights (a kernel,
an init, the optimiser, augmentation, the data path), so every committed record of that family
is from older code. Rerun its experiments, then record the new digests:

    make training-digests   # TRAINING_DIGESTS=write pytest tests/test_training.py -k every_family_fits

The git history of those files says when each family's training last changed;
tests/test_reference_records.py holds every committed record to be trained at or after it.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path

import torch

DIGESTS = Path(__file__).resolve().parent / "training_digests"
ROOT = DIGESTS.parents[1]
WRITE = os.environ.get("TRAINING_DIGESTS") == "write"


def machine() -> str:
    """The key a digest is recorded under: what decides the bits besides the code."""
    from importlib.metadata import version

    from experiments.runs.cli import default_precision
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{cpu} ({torch.backends.cpu.get_cpu_capability()}), {default_precision()}, "
            f"{torch.get_num_threads()} thread(s), torch {torch.__version__}, timm {version('timm')}")


def weights_digest(checkpoint: Path) -> str:
    """sha1 over the model's tensors (parameters and buffers), in name order."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    h = hashlib.sha1()
    for name in sorted(k for k in state if k.startswith("model.")):
        h.update(name.encode())
        h.update(state[name].detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def recorded(family: str) -> dict[str, str]:
    path = DIGESTS / f"{family}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def record(family: str, digest: str) -> None:
    DIGESTS.mkdir(exist_ok=True)
    (DIGESTS / f"{family}.json").write_text(json.dumps({**recorded(family), machine(): digest},
                                                       indent=1, sort_keys=True) + "\n")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


def has_history(root: Path = ROOT) -> bool:
    """A git checkout with its whole history (a shallow clone cannot say when a digest changed)."""
    try:
        return _git(root, "rev-parse", "--is-shallow-repository").strip() == "false"
    except (OSError, subprocess.CalledProcessError):
        return False


def _at(root: Path, commit: str, family: str) -> dict[str, str]:
    try:
        return json.loads(_git(root, "show", f"{commit}:tests/training_digests/{family}.json"))
    except subprocess.CalledProcessError:  # the file (or the parent commit) did not exist there
        return {}


def last_change(family: str, root: Path = ROOT) -> str | None:
    """The newest commit at which a digest of `family` recorded before changed (a digest recorded
    for a new machine is not a change), or None when none did."""
    for commit in _git(root, "log", "--format=%H", "--", f"tests/training_digests/{family}.json").split():
        now, before = _at(root, commit, family), _at(root, f"{commit}^", family)
        if any(m in before and before[m] != d for m, d in now.items()):
            return commit
    return None


def is_at_or_after(record_commit: str, change: str, root: Path = ROOT) -> bool:
    """Whether `record_commit` is `change` or a descendant of it (an unknown commit is neither)."""
    return subprocess.run(["git", "merge-base", "--is-ancestor", change, record_commit], cwd=root,
                          capture_output=True).returncode == 0
