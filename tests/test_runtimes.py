"""results/runtimes.md and the README's default-profile sentence come from the records: the runners'
last invocations and the runs' hardware and commits, and the spec's profile."""
from __future__ import annotations

import json

import yaml

from modules.budgets import FAMILIES
from experiments.report.runtimes import SPECS, default_profile, render, runtime_rows

from .test_tables import _run


def _sweep(exp, families, wall_time_s=2338):
    (exp / "sweep.json").write_text(json.dumps({"spec": "datascale", "profiles": {"cpu": {
        "families": families, "pool_size": 59000,
        "last_invocation": {"wall_time_s": wall_time_s, "runs": 4, "trained": 4, "statuses": {"done": 4}, "jobs": 2}}}}))


def test_a_runners_last_invocation_is_a_row_with_its_runs_hardware_and_commit(tmp_path):
    exp = tmp_path / "datascale"
    _run(exp, "vit", 0.01, 0, 0.6)
    _sweep(exp, ["resnet", "vit"], wall_time_s=1530)
    (row,) = runtime_rows(exp)
    assert (row["experiment"], row["profile"], row["hardware"], row["minutes"], row["commit"], row["ran"]) == (
        "datascale", "cpu", "test machine", 25.5, "abc", "4 done; 2 at a time")
    assert "| `make exp-datascale` | cpu | test machine | 25.5 | abc | 4 done; 2 at a time | your runs |" in render([row])


def test_the_default_profile_sentence_names_the_spec_s_families_and_what_was_measured(tmp_path):
    spec = yaml.safe_load((SPECS / "datascale" / "spec.yaml").read_text())
    families = spec["profiles"]["cpu"].get("families") or spec["families"]
    exp = tmp_path / "datascale"
    _run(exp, "vit", 0.01, 0, 0.6)
    _sweep(exp, families)
    record = json.loads((exp / "sweep.json").read_text())
    text = default_profile(runtime_rows(exp), record)
    assert "runs the `cpu` profile" in text and "39 minutes** on test machine, at commit abc (your runs; " in text
    assert "(with " not in text  # measured with the spec's own families
    _sweep(exp, families[:1])
    text = default_profile(runtime_rows(exp), json.loads((exp / "sweep.json").read_text()))
    assert f"Its last measured run (with {FAMILIES[families[0]].title}) took" in text
    assert default_profile([], {}).endswith("Its time has not been measured yet.")


def test_an_invocation_that_found_runs_finished_says_how_many_it_trained(tmp_path):
    """exp-datascale's ViT retrained while its ResNet runs had finished before: the minutes are the
    ViT runs' only, and the row and the README's sentence say so."""
    exp = tmp_path / "datascale"
    _run(exp, "vit", 0.01, 0, 0.6)
    (exp / "sweep.json").write_text(json.dumps({"spec": "datascale", "profiles": {"cpu": {
        "families": ["resnet", "vit"], "pool_size": 59000, "last_invocation": {
            "wall_time_s": 3824, "runs": 20, "trained": 11, "statuses": {"done": 18, "fitted": 2}, "jobs": 2}}}}))
    (row,) = runtime_rows(exp)
    assert row["ran"] == "11 of its 20 runs (18 done, 2 fitted); 2 at a time"
    text = default_profile([row], json.loads((exp / "sweep.json").read_text()))
    assert ("Its last measured invocation trained or tested 11 of its 20 runs (the others had finished before) in "
            "**64 minutes**; its runs were trained on test machine, at commit abc (your runs; ") in text
