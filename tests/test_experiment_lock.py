"""Two invocations of the distill or inductive_bias runner on one spec, started together: the second
waits for the first's lock on the experiment (experiments/experiment_lock.py), then plans and finds
every run finished; each run is trained once and both exit 0. The sweep's case is in test_sweep.py."""
from __future__ import annotations

import json

import pytest
import yaml

from .conftest import started_together
from .test_distill_experiment import TINY as DISTILL
from .test_inductive_bias_experiment import TINY as INDUCTIVE_BIAS


@pytest.mark.parametrize("runner, tiny, fewest", [
    # the fewest runs: a tuning trial per family at the one fraction, each the main run of its family
    ("distill", DISTILL, {"teachers": ["resnet"], "students": ["none"], "fractions": [1.0], "tuned_fractions": [1.0]}),
    ("inductive_bias", INDUCTIVE_BIAS, {"families": ["resnet"], "ablations": {"learn": [1.0]}, "seeds": [0]}),
])
def test_two_invocations_started_together_train_each_run_once(fmnist_dir, tmp_path, monkeypatch, runner, tiny, fewest):
    monkeypatch.setenv("FASHION_MNIST_DIR", str(fmnist_dir))  # the runners' processes find the data
    spec = json.loads(json.dumps(tiny))
    spec["profiles"]["cpu"].update(fewest)
    path = tmp_path / f"{runner}.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert len(started_together(runner, path, tmp_path / "runs", spec["name"])) == 2
