"""The distill and inductive_bias runners plan under the experiment's lock (experiments/runs/run/lock.py):
while another invocation holds it, a runner prints that it waits, has planned nothing and made no run
folder. With the sweep's test of two real sweeps started together (test_sweep.py), which shows the
second then finds every run finished, this is what keeps two invocations from training a run twice."""
from __future__ import annotations

import fcntl
import subprocess
import sys
import time

import pytest
import yaml

from .conftest import ROOT
from .test_distill_experiment import TINY as DISTILL
from .test_inductive_bias_experiment import TINY as INDUCTIVE_BIAS


@pytest.mark.parametrize("runner, spec", [("distill", DISTILL), ("inductive_bias", INDUCTIVE_BIAS)])
def test_runner_waits_for_the_lock_before_planning(fmnist_dir, tmp_path, monkeypatch, runner, spec):
    monkeypatch.setenv("FASHION_MNIST_DIR", str(fmnist_dir))  # the runner's process finds the data
    path, exp = tmp_path / f"{runner}.yaml", tmp_path / "runs" / spec["name"]
    path.write_text(yaml.safe_dump(spec))
    exp.mkdir(parents=True)
    with open(exp / ".lock", "a+") as held:  # another invocation of the same experiment, still running
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("12345")
        held.flush()
        proc = subprocess.Popen([sys.executable, "-m", "experiments", runner, "--spec", str(path),
                                 "--runs_dir", str(tmp_path / "runs")], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            out = ""
            deadline = time.monotonic() + 300
            while "waiting" not in out and proc.poll() is None and time.monotonic() < deadline:
                out += proc.stdout.readline()
            time.sleep(2)  # a runner that went on past the lock would now be planning and making folders
            assert proc.poll() is None, out + proc.stdout.read()
            assert f"another sweep of {spec['name']} (pid 12345) is running; waiting" in out, out
            assert " runs:" not in out, out  # no plan printed
            assert [p.name for p in exp.iterdir()] == [".lock"]
        finally:
            proc.kill()
            proc.wait()
