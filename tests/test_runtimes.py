"""results/runtimes.md and the README's default-profile sentence come from the records: the runners'
last invocations and the runs' hardware and commits, and the spec's profile."""
from __future__ import annotations

import json

import yaml

from modules.budgets import FAMILIES
from experiments.report.runtimes import SPECS, default_profile, render, runtime_rows, trained_precisions, training_hours

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
    spec = yaml.safe_load((SPECS / "datascale" / "spec.yaml").read_text())
    exp = tmp_path / "datascale"
    _run(exp, "vit", 0.01, 0, 0.6)
    (exp / "sweep.json").write_text(json.dumps({"spec": "datascale", "profiles": {"cpu": {
        "families": spec["profiles"]["cpu"].get("families") or spec["families"], "pool_size": 59000, "last_invocation": {
            "wall_time_s": 3824, "runs": 20, "trained": 11, "statuses": {"done": 18, "fitted": 2}, "jobs": 2}}}}))
    (row,) = runtime_rows(exp)
    assert row["ran"] == "11 of its 20 runs (18 done, 2 fitted); 2 at a time"
    text = default_profile([row], json.loads((exp / "sweep.json").read_text()))
    assert ("Its last measured invocation planned 20 runs and trained or tested 11 of them (the others had finished "
            "before) in **64 minutes**; its runs were trained on test machine, at commit abc (your runs; ") in text
    # with the whole profile's hours on record, those come first and in bold: the part is not the whole
    text = default_profile([row], json.loads((exp / "sweep.json").read_text()), hours={"vit": 3.0})
    assert text.index("All of its runs on record") < text.index("Its last measured invocation")
    assert "in 64 minutes;" in text and text.count("**") == 2


def test_the_default_profile_says_how_long_all_of_its_runs_trained_family_by_family(tmp_path):
    """Trained in pieces, no invocation's minutes say what the whole profile took: the runs of its
    plan (main runs and their cells' lr trials) do, each run's wall time summed over the jobs."""
    exp = tmp_path / "datascale"
    for family, seed in (("resnet", 0), ("resnet", 1), ("vit", 0)):
        _run(exp, family, 0.01, seed, 0.6)                      # 60 s each
    _run(exp, "vit", 0.01, 0, None, lr=0.01, status="fitted")   # the trial not chosen: trained, counted
    _run(exp, "vit", 0.02, 0, 0.7)                              # outside the plan: not counted
    families = ["resnet", "vit", "swin"]
    (exp / "sweep.json").write_text(json.dumps({"spec": "datascale", "profiles": {"cpu": {
        "families": families, "pool_size": 59000, "jobs": 2, "main_runs": {
            "resnet_f0.01_s0": "resnet_f0.01_s0_lr0.003", "resnet_f0.01_s1": "resnet_f0.01_s1_lr0.003",
            "vit_f0.01_s0": "vit_f0.01_s0_lr0.003"},
        "last_invocation": {"wall_time_s": 120, "runs": 3, "trained": 3, "statuses": {"done": 3}, "jobs": 2}}}}))
    record = json.loads((exp / "sweep.json").read_text())
    hours = training_hours(exp, record)
    assert hours == {"resnet": 120 / 3600, "vit": 120 / 3600}
    assert training_hours(exp, {}) == {}
    spec = yaml.safe_load((SPECS / "datascale" / "spec.yaml").read_text())
    *trained, last = spec["profiles"]["cpu"].get("families") or spec["families"]   # the sentence names the spec's
    text = default_profile(runtime_rows(exp), record, hours={f: 120.0 for f in trained})
    # the hours summed over runs, and what they come to at the profile's runs at a time (its pieces may
    # have trained at another: JOBS=1)
    assert f" All of its runs on record took {120.0 * len(trained):.1f} hours of training (each run's wall time, " \
           f"summed), about **{60.0 * len(trained):.1f} hours** at the profile's 2 runs at a time: " in text
    assert all(f"{FAMILIES[f].title} 60.0" in text for f in trained)
    assert text.endswith(f" hours; {FAMILIES[last].title} not trained yet.")
    assert "on record" not in default_profile(runtime_rows(exp), record)
    # the precision of the plan's runs (a configuration of its own: a CPU without native bf16 trains
    # in fp32), said beside their hours; a run outside the plan says nothing
    assert trained_precisions(exp, record) == []
    for name, precision in (("resnet_f0.01_s0_lr0.003", "bf16-mixed"), ("vit_f0.02_s0_lr0.003", "32-true")):
        summary = json.loads((exp / name / "summary.json").read_text())
        (exp / name / "summary.json").write_text(json.dumps({**summary, "precision": precision}))
    assert trained_precisions(exp, record) == ["bf16-mixed"]
    text = default_profile(runtime_rows(exp), record, hours={f: 120.0 for f in trained}, precisions=["bf16-mixed"])
    assert " All of its runs on record, in bf16-mixed, took " in text
    one = {**record, "profiles": {"cpu": {**record["profiles"]["cpu"], "jobs": 1}}}
    assert f" All of its runs on record took **{120.0 * len(trained):.1f} hours** of training (each run's wall " \
           "time, summed): " in default_profile(runtime_rows(exp), one, hours={f: 120.0 for f in trained})
    assert "A CPU without native bf16 matmuls trains in fp32, another configuration" in text
    assert "native bf16" not in default_profile(runtime_rows(exp), record, hours={f: 120.0 for f in trained},
                                                precisions=["32-true"])
