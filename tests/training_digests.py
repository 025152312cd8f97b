"""What each family's training computes, as a digest, so that a change to it cannot pass unseen.

`test_every_family_fits_and_tests` trains every family 4 steps of the smoke config on the tests'
IDX data, and `test_deit_through_the_cli_with_a_teacher` a DeiT distilled from a ResNet; the sha1 of
the weights each ends with is that training's digest on this machine (CPU model and ISA, precision,
threads, torch and timm versions: the same code gives other bits on another).
tests/training_digests/<family>.json (and deit-distilled.json) keeps one digest per machine. A digest
that differs from the recorded one fails the test: the code now trains to other weights (a kernel,
an init, the optimiser, augmentation, distillation, the data path), so every committed record
trained that way is from older code. Rerun its experiments, then record the new digests:

    make training-digests   # TRAINING_DIGESTS=write pytest on those two tests

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
DISTILLED = "deit-distilled"  # a DeiT student with a teacher: the families' digests never run one


def machine() -> str:
    """The key a digest is recorded under: what decides the bits besides the code."""
    from importlib.metadata import version

    from experiments.runs.run.cli import default_precision
    cpu, isa = platform.processor() or platform.machine(), ""
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
        # a VM may name every EPYC alike; the vector extensions decide which kernels run
        flags = next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])
        vector = sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "f16c")))
        isa = f", vector ISA {hashlib.sha1(' '.join(vector).encode()).hexdigest()[:8]}" if vector else ""
    except OSError:
        pass
    return (f"{cpu} ({torch.backends.cpu.get_cpu_capability()}{isa}), {default_precision()}, "
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


def check(name: str, checkpoint: Path) -> None:
    """The weights a test's run ended with against the digest recorded for `name` on this machine
    (none recorded here: nothing to compare); with TRAINING_DIGESTS=write, records them first."""
    digest = weights_digest(checkpoint)
    if WRITE:
        record(name, digest)
    want = recorded(name).get(machine())
    assert want in (None, digest), (
        f"{name} now trains to other weights (digest {digest}, recorded {want} on this machine): every "
        f"committed record trained as {name} is from older code; rerun its experiments, then "
        "make training-digests (tests/training_digests.py)")


def trainings_of(summary: dict, identity: dict) -> set[str]:
    """The trainings a run record came from: its family's and, for a DeiT student, its teacher
    family's (a teacher's folder keeps its name when its code changes, so the student's does too)
    and the distilled DeiT's."""
    from modules import FAMILIES
    teacher = identity.get("model.teacher_checkpoint")
    if not teacher or identity.get("model.distillation") == "none":
        return {summary["family"]}
    teacher_family = teacher.split("-", 1)[0]  # <family>-<budget>_..._<hash>/checkpoints/<file>
    return {summary["family"], DISTILLED} | ({teacher_family} if teacher_family in FAMILIES else set())


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
