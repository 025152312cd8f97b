"""`make safety`: the whole bad-input battery (tests/bad_inputs.py) against the real CLI, each case
as its own `python -m experiments` process with a private, empty runs_dir. One row per case:
exit code, stderr lines, traceback, files left in runs_dir (or changed where a planted link points),
whether planted code ran, verdict.

A case behaves well when it exits 2 with exactly one `error:` line holding the expected words, no
traceback, no file written and no planted code run. Prints measured rows; asserts nothing.

    python tests/safety_battery.py [--only SUBSTRING] [--keep]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.bad_inputs import CASES, Scene  # noqa: E402
from tests.conftest import tree_hashes  # noqa: E402


def watched(scene: Scene) -> dict[str, str]:
    """Every file of runs_dir, and of the folder outside it that planted links point at -> its digest."""
    return {f"{folder.name}/{f}": digest for folder in (scene.paths["runs"], scene.paths["victim"].parent)
            for f, digest in tree_hashes(folder).items()}


def run_case(case, scene: Scene, env: dict) -> dict:
    runs = scene.paths["runs"]
    shutil.rmtree(runs, ignore_errors=True)
    scene.paths["pwned"].unlink(missing_ok=True)
    scene.write_run_config(case.run_config)
    scene.plant(case)  # the attack sits in the very folder this command writes in
    before = watched(scene)
    start = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "experiments", *case.argv(scene)], cwd=ROOT, env=env,
                       capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    left = sorted(f for f, digest in watched(scene).items() if before.get(f) != digest)
    ran_code = scene.paths["pwned"].exists()
    traceback = "Traceback (most recent call last)" in p.stderr
    words = case.words(scene)
    good = (p.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ")
            and all(w in lines[0] for w in words) and not traceback and not left and not ran_code)
    return {"case": case.label, "exit": p.returncode, "lines": len(lines), "traceback": traceback,
            "left": len(left), "code_ran": ran_code, "ok": good, "seconds": time.perf_counter() - start,
            "first": lines[0] if lines else ""}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python tests/safety_battery.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="", help="run only the cases whose command line holds this text")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder and print its path")
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="safety-battery-"))
    env = {**os.environ, "VIT_FAMILIES_CACHE": str(root / "cache"), "PYTHONPATH": str(ROOT)}
    try:
        scene = Scene(root)
        env["FASHION_MNIST_DIR"] = str(scene.paths["fmnist"])
        env["PYTHONPATH"] += os.pathsep + str(scene.paths["plants"])  # h3evil importable, as a planted module would be
        # decoded once beforehand: a first use's decoding progress is not part of any case's answer
        subprocess.run([sys.executable, "-c", "from datamodules import ImageClassificationDataModule as D; "
                        f"D(data_dir={str(scene.paths['fmnist'])!r}).num_classes"],
                       cwd=ROOT, env=env, check=True, capture_output=True)
        cases = [c for c in CASES if args.only in c.label]
        import platform
        import lightning
        import torch
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        print(f"# safety battery: {len(cases)} cases, each `python -m experiments ...` with a private runs_dir\n"
              f"# commit {commit.stdout.strip() or 'unknown'}; {platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} CPUs; Python {platform.python_version()}, torch {torch.__version__}, "
              f"lightning {lightning.__version__}\n")
        print(f"| {'ok':2} | exit | err lines | traceback | files left | code ran | s | case | first stderr line |")
        print("|---|---:|---:|---|---:|---|---:|---|---|")
        bad = 0
        for case in cases:
            r = run_case(case, scene, env)
            bad += not r["ok"]
            shown = r["case"][:90].replace(str(root), "$TMP").replace("|", "\\|")
            first = r["first"].replace(str(root), "$TMP").replace("|", "\\|")[:160]
            print(f"| {'ok' if r['ok'] else 'NO'} | {r['exit']} | {r['lines']} | {'yes' if r['traceback'] else 'no'} "
                  f"| {r['left']} | {'YES' if r['code_ran'] else 'no'} | {r['seconds']:.1f} | `{shown}` | {first} |",
                  flush=True)
        print(f"# {len(cases) - bad} of {len(cases)} cases behaved well")
        return 0
    finally:
        if args.keep:
            print(f"# scratch kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
