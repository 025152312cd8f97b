"""A record is data, and the names in it make paths: a profile's name becomes tensorboard/<profile>
and complexity_<group>_<profile>.png, a CKA entry names the file it is read from. A name that would
reach outside its folder is one error line, and nothing is read or written through it."""
from __future__ import annotations

import json

import pytest

from experiments.inductive_bias.numbers import cka_path
from experiments.runs.run.record import read_json


@pytest.mark.parametrize("record", [
    {"spec": "distill", "profiles": {"../../../tbvictim": {}}},
    {"spec": "distill", "profiles": {"cpu": {}, "/tmp/abs": {}}},
    {"profile": "../x", "parts": {}},
    {"profile": 5, "parts": {}},
])
def test_a_record_whose_profile_names_no_folder_is_one_error_line(tmp_path, record):
    path = tmp_path / "distill.json"
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"distill\.json: profile=.* is not valid: allowed a single folder name"):
        read_json(path, hint="")


def test_a_record_that_is_no_json_object_is_one_error_line(tmp_path):
    path = tmp_path / "sweep.json"
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"sweep\.json holds list, not a JSON object"):
        read_json(path)
    path.write_text(json.dumps({"spec": "datascale", "profiles": {"cpu": {}, "gpu": {}}}))
    assert read_json(path)["profiles"] == {"cpu": {}, "gpu": {}}


@pytest.mark.parametrize("entry", ["../../outside/bad.json", "/etc/passwd", "cka/../../x.json", "cka/a/b.json",
                                   "other/a.json", 5, "cka/..", "cka/.hidden.json"])
def test_a_cka_entry_outside_the_cka_folder_is_one_error_line(tmp_path, entry):
    with pytest.raises(ValueError, match="cka entry"):
        cka_path(tmp_path, entry)


def test_a_cka_entry_inside_the_cka_folder_is_read_there(tmp_path):
    assert cka_path(tmp_path, "cka/vit_f0.01_s0_abc__resnet_f0.01_s0_def.json") == \
        tmp_path / "cka" / "vit_f0.01_s0_abc__resnet_f0.01_s0_def.json"


@pytest.mark.parametrize("budget", ["x/../../../tmp/outside", "../x", 5, ""])
def test_a_budget_that_names_no_folder_is_one_error_line(tmp_path, budget):
    """exp-inductive-bias's budgets name tensorboard/<profile>_<budget> and its figures where a profile has several."""
    from experiments.inductive_bias.numbers import load_profiles
    rec = {"axes": {"budget": "tiny"}, "families": [{"run": "a", "fraction": 0.1, "seed": 0, "budget": budget},
                                                     {"run": "b", "fraction": 0.1, "seed": 0, "budget": "tiny"}]}
    with pytest.raises(ValueError, match="has a budget .*: allowed a name of letters, digits"):
        load_profiles("cpu", rec, tmp_path)
