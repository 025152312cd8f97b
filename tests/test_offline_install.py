"""The offline install (tools/wheelhouse.py; make wheelhouse, make install WHEELS=).

The end-to-end check downloads a wheelhouse, so `make test` skips it; `make offline-install-check`
runs it (OFFLINE_INSTALL_CHECK=1; 6-9 minutes on 2 cores, downloads included): it builds the wheelhouse, makes a Python that has
torch and torchvision and nothing else of the suite's, then `make install WHEELS= PYTHON=` in a copy of
the project with no network at all (a network namespace of its own; pip told no index and no
configuration), and imports and runs the project from the result."""
from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
from packaging.markers import default_environment

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import wheelhouse  # noqa: E402


def _item(name: str, version: str, *requires: str) -> dict:
    return {"metadata": {"name": name, "version": version, "requires_dist": list(requires)}}


def test_the_wheelhouse_leaves_out_torch_and_what_only_torch_needs():
    report = {"environment": {"python_version": "3.11", "sys_platform": "linux", "platform_machine": "x86_64"},
              "install": [
                  _item("vit-families", "0.1.0", "torch>=2.11", "timm==1.0.31", "datasets>=3.0",
                        'pytest>=8; extra == "test"', 'submitit; extra == "cluster"'),
                  _item("torch", "2.14.1", "sympy", "fsspec", 'nvidia-cublas; platform_machine == "x86_64"'),
                  _item("timm", "1.0.31", "torch", "torchvision", "huggingface-hub"),
                  _item("torchvision", "0.29.1", "torch", "pillow"),
                  _item("datasets", "5.2.0", "fsspec[http]", 'tomli; python_version < "3.11"'),
                  _item("fsspec", "2026.9.0", 'aiohttp; extra == "http"'),
                  _item("aiohttp", "3.14.5"), _item("huggingface_hub", "2.4.0"), _item("pytest", "9.2.0"),
                  _item("sympy", "1.14.0", "mpmath"), _item("mpmath", "1.3.0"), _item("nvidia-cublas", "13.1"),
                  _item("pillow", "13.0.0"), _item("tomli", "2.0"), _item("submitit", "1.5.4")]}
    # pillow: only torchvision needs it here; fsspec: torch and datasets both (kept), with its http extra
    assert wheelhouse.needed(report, "vit-families", ["test"]) == {
        "timm": "1.0.31", "huggingface_hub": "2.4.0", "datasets": "5.2.0", "fsspec": "2026.9.0",
        "aiohttp": "3.14.5", "pytest": "9.2.0"}


def _make(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **env})


def test_make_install_with_wheels_asks_no_index(tmp_path):
    (tmp_path / "wh" / "fashion-mnist").mkdir(parents=True)
    p = _make("-n", "install", f"WHEELS={tmp_path / 'wh'}", f"VENV={tmp_path / 'v'}", "PYTHON=python3")
    pips = [line for line in p.stdout.splitlines() if "pip install" in line]
    assert p.returncode == 0 and pips, p.stdout + p.stderr
    assert all("--no-index" in line and "--find-links" in line for line in pips), pips
    assert "apt-get" not in p.stdout and "--upgrade pip" not in p.stdout
    # without WHEELS, the usual online install
    assert "--upgrade pip" in _make("-n", "install", f"VENV={tmp_path / 'v'}").stdout


def test_a_folder_that_is_no_wheelhouse_is_refused_in_one_line(tmp_path):
    p = _make("install", f"WHEELS={tmp_path / 'nothing'}", f"VENV={tmp_path / 'v'}")
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert p.returncode == 2 and len(errors) == 1 and str(tmp_path / "nothing") in errors[0], p.stderr
    assert not (tmp_path / "v").exists()
    assert _make("wheelhouse").returncode == 2


def _installed_requires(name: str) -> list[str] | None:
    try:
        return distribution(name).requires or []
    except PackageNotFoundError:
        return None


def _torch_closure() -> list[str]:
    """torch, torchvision and every installed package they need (with the extras they ask for)."""
    roots = {"torch": frozenset(), "torchvision": frozenset()}
    return sorted(wheelhouse.dependencies(roots, _installed_requires, default_environment()))


def _python_with_torch_only(tmp: Path) -> Path:
    """A virtual environment that imports torch and torchvision (and what they need) from this
    Python's site folder, through links, and sees nothing else of the suite's packages."""
    site = tmp / "torch-only" / "site-packages"
    site.mkdir(parents=True)
    for name in _torch_closure():
        dist = distribution(name)
        for top in {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            if not (site / top).exists():
                (site / top).symlink_to(Path(dist.locate_file(top)))
    base = tmp / "base"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base)], check=True)
    purelib = next((base / "lib").glob("python3*/site-packages"))
    (purelib / "torch-only.pth").write_text(f"{site}\n")
    return base / "bin" / "python"


def _offline(command: list[str], **env: str) -> list[str]:
    """`command` with no network: in a network namespace of its own where that works (root), else
    behind a proxy that answers nothing."""
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0:
        return ["unshare", "-n", *command]
    env.update(http_proxy="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9")
    return ["env", *(f"{k}={v}" for k, v in env.items()), *command]


@pytest.mark.skipif(not os.environ.get("OFFLINE_INSTALL_CHECK"),
                    reason="downloads a wheelhouse: make offline-install-check")
def test_offline_install_from_a_wheelhouse_into_a_python_with_torch(tmp_path):
    wheels, data = tmp_path / "wheels", tmp_path / "data"
    subprocess.run([sys.executable, str(ROOT / "tools" / "wheelhouse.py"), "build", str(wheels)], check=True)
    assert {p.name for p in (wheels / "fashion-mnist").iterdir()} == set(wheelhouse.FASHION_MNIST_FILES)
    names = {wheelhouse.norm(p.name.split("-")[0]) for p in wheels.glob("*.whl")}
    assert {"timm", "lightning", "datasets", "jsonargparse", "pytest"} <= names
    assert not names & {"torch", "torchvision", "triton"} and not any(n.startswith("nvidia") for n in names)

    python = _python_with_torch_only(tmp_path)
    probe = "import importlib.util as u, torch; print(torch.__version__, u.find_spec('timm') is None)"
    assert subprocess.run([str(python), "-c", probe], capture_output=True, text=True).stdout.split()[1] == "True"
    project = tmp_path / "project"  # a copy: the install writes the project's egg-info beside its code
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    for f in files:
        if (ROOT / f).is_file():
            (project / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, project / f)
    env = {"PIP_CONFIG_FILE": "/dev/null", "PIP_NO_INDEX": "1", "FASHION_MNIST_DIR": str(data)}
    p = subprocess.run(_offline(["make", "install", f"WHEELS={wheels}", f"PYTHON={python}"], **env), cwd=project,
                       capture_output=True, text=True, env={**os.environ, **env})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]

    venv = project / ".venv" / "bin" / "python"
    check = ("import torch, timm, lightning, datasets, jsonargparse, experiments, modules, datamodules, sys; "
             "print(torch.__file__, experiments.__file__, sep='\\n')")
    out = subprocess.run([str(venv), "-c", check], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    torch_file, experiments_file = out.stdout.split()
    assert torch_file.startswith(str(tmp_path / "torch-only")) and experiments_file.startswith(str(project))
    assert subprocess.run(_offline([str(venv), "-m", "experiments", "families", "--image_size", "28", "--in_chans", "1"]),
                          capture_output=True, cwd=project).returncode == 0
    with gzip.open(data / "train-images-idx3-ubyte.gz") as f:
        assert int.from_bytes(f.read(8)[4:], "big") == 60000


def test_a_python_without_torch_is_refused_in_one_line(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    p = subprocess.run([str(bare / "bin" / "python"), str(ROOT / "tools" / "wheelhouse.py"), "venv", str(tmp_path / "v")],
                       capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: ") and "no torch" in p.stderr
    assert not (tmp_path / "v").exists()
