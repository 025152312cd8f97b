"""The offline install: `make wheelhouse WHEELS=<folder>` and `make install WHEELS=<folder> PYTHON=...`.

    python tools/wheelhouse.py build FOLDER [--python-version 3.12]   # where the package index is reachable
    python tools/wheelhouse.py venv VENV                               # a venv that sees this Python's packages

`build` resolves the project's install (`.[test]`, as `make install` asks for it) with pip, without
installing anything, and downloads a wheel of every package it needs beyond torch and torchvision and
what only they need (the CUDA libraries, triton, sympy, ...): a machine with a GPU has those in its
own Python, and they weigh gigabytes. The build backend (pyproject's build-system) is added, so that
the project itself installs offline, and so are the Fashion-MNIST IDX files (FOLDER/fashion-mnist/).
`--python-version` fetches the wheels for another Python than this one (the GPU machine's).

`venv` makes VENV with a .pth file naming this Python's site folders: the venv then imports this
Python's torch, and pip in it counts what is installed there (a .pth of folder names runs no code).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEFT_OUT = ("torch", "torchvision")  # the GPU machine's own: several GB with their CUDA libraries
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")  # as datamodules/sources.py reads it
FASHION_MNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                       "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
EXTRAS = ["test"]  # what `make install` installs: .[test]


class WheelhouseError(Exception):
    """Bad input or a missing file: one line, exit 2."""


def requirement(text: str):
    """A PEP 508 requirement, parsed by packaging (pip's own copy where packaging is not installed);
    only `build` needs it: `venv` runs in a Python that may have neither."""
    try:
        from packaging.requirements import Requirement
    except ImportError:
        from pip._vendor.packaging.requirements import Requirement
    return Requirement(text)


def norm(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return name.lower().replace("_", "-").replace(".", "-")


def resolve(python_version: str | None) -> dict:
    """pip's installation report of `.[test]` resolved from scratch (nothing installed), for this
    Python or for `python_version` on this platform."""
    with tempfile.TemporaryDirectory(prefix="wheelhouse-") as tmp:
        report = Path(tmp) / "report.json"
        other = ["--python-version", python_version, "--only-binary=:all:", "--target", f"{tmp}/t"] if python_version else []
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
                        "--report", str(report), *other, f"{ROOT}[{','.join(EXTRAS)}]"], check=True)
        return json.loads(report.read_text())


def needed(report: dict, project: str, extras: list[str], left_out=LEFT_OUT) -> dict[str, str]:
    """name -> version of every package the project (with `extras`) needs in pip's report, walked
    from its requirements past `left_out`: what only they need is left out too."""
    items = {norm(i["metadata"]["name"]): i["metadata"] for i in report["install"]}
    found = dependencies({norm(project): frozenset(extras)}, lambda n: items[n].get("requires_dist") or [] if n in items else None,
                         report["environment"], left_out)
    return {items[n]["name"]: items[n]["version"] for n in found if n != norm(project)}


def dependencies(roots: dict[str, frozenset], requires, env: dict, left_out=()) -> dict[str, frozenset]:
    """name -> extras of `roots` and everything they need, through `requires(name)` (the requirement
    lines of a known package, None for an unknown one, which is passed by) under the markers'
    environment `env`; `left_out` and what only they need are not walked."""
    found, todo = dict(roots), list(roots.items())
    while todo:
        name, extras = todo.pop()
        for text in requires(name) or []:
            req = requirement(text)
            if req.marker and not any(req.marker.evaluate({**env, "extra": e}) for e in extras or {""}):
                continue
            dep, known = norm(req.name), found.get(norm(req.name))
            if dep in left_out or requires(dep) is None or known is not None and req.extras <= known:
                continue
            found[dep] = (known or frozenset()) | req.extras
            todo.append((dep, found[dep]))
    return found


def pyproject() -> dict:
    import tomllib  # Python 3.11+: only `build` reads pyproject.toml
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def build(folder: Path, python_version: str | None, data_dir: Path) -> None:
    missing = [f for f in FASHION_MNIST_FILES if not (data_dir / f).is_file()]
    if missing:
        raise WheelhouseError(f"no {data_dir / missing[0]}: apt-get install dataset-fashion-mnist, or set "
                              "FASHION_MNIST_DIR to a folder of the four IDX .gz files")
    project = pyproject()
    pins = needed(resolve(python_version), project["project"]["name"], EXTRAS)
    wanted = [f"{n}=={v}" for n, v in sorted(pins.items())]
    # the build backend, so that the project itself installs offline (pip's isolated build)
    wanted += [r for r in project["build-system"]["requires"] if norm(requirement(r).name) not in map(norm, pins)]
    folder.mkdir(parents=True, exist_ok=True)
    other = ["--python-version", python_version] if python_version else []
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    *other, "-d", str(folder), *wanted], check=True)
    (folder / "fashion-mnist").mkdir(exist_ok=True)
    for f in FASHION_MNIST_FILES:
        shutil.copyfile(data_dir / f, folder / "fashion-mnist" / f)
    print(f"wheelhouse {folder}: {len(wanted)} packages (all but {' and '.join(LEFT_OUT)}), Fashion-MNIST")


def site_folders() -> list[str]:
    """The folders this Python imports installed packages from."""
    return [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]


def venv_seeing_this_python(venv: Path) -> None:
    """A virtual environment at `venv` (made or kept) that imports this Python's packages too."""
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        raise WheelhouseError(f"{sys.executable} has no torch: the offline install keeps a Python's own torch "
                              "(PYTHON=<a python with torch 2.11 to 2.14>)")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "zz-base-python.pth").write_text("".join(f"{p}\n" for p in site_folders()))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="a folder of wheels and the data, for an offline install")
    b.add_argument("folder", type=Path)
    b.add_argument("--python-version", help="the Python the wheels are for, e.g. 3.12 (default: this one)")
    v = sub.add_parser("venv", help="a virtual environment that sees this Python's packages (its torch)")
    v.add_argument("venv", type=Path)
    a = p.parse_args(argv)
    try:
        if a.command == "build":
            build(a.folder, a.python_version, Path(os.environ.get("FASHION_MNIST_DIR") or FASHION_MNIST_DIR))
        else:
            venv_seeing_this_python(a.venv)
    except WheelhouseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as e:
        print(f"error: {' '.join(map(str, e.cmd[:5]))} ... failed (exit {e.returncode}; its output is above)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
