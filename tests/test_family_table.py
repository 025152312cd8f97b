"""The family table (modules/budgets.py) is the one place a family is declared: a throwaway family
registered here, with two budget rows and a builder, trains, is priced by the dry run, and appears
in every report and probe that applies to it; counting its FLOPs can never stop it."""
from __future__ import annotations

import csv
import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from modules import ImageClassifier, complexity, registry
from modules.budgets import ARCHS, BUDGET_TARGETS, FAMILIES, Family, fit_order, names, reading_order

from tests.conftest import ROOT

GAP = Family("gapvit", "GAP-ViT", "transformer", "global", class_token=False, distillation_token=False,
             knobs=frozenset({"patch_size", "pos_embed"}))


def _gap_vit(arch, image_size, in_chans, num_classes, knobs):
    """A ViT without a class token: its patch tokens averaged (global average pooling)."""
    return registry.BUILDERS["vit"](arch, image_size, in_chans, num_classes, replace(knobs, pool="avg"))


@pytest.fixture
def gapvit(monkeypatch):
    """GAP as the suite's families are declared: a record, two budget rows and a builder; all gone afterwards."""
    monkeypatch.setitem(FAMILIES, GAP.name, GAP)
    monkeypatch.setitem(ARCHS, (GAP.name, "tiny"), dict(embed_dim=96, depth=2, num_heads=3))
    monkeypatch.setitem(ARCHS, (GAP.name, "small"), dict(embed_dim=192, depth=2, num_heads=3))
    monkeypatch.setattr(registry, "BUILDERS", dict(registry.BUILDERS))
    registry.register_family(GAP.name)(_gap_vit)
    return GAP.name


def test_every_family_has_a_builder_and_a_row_per_budget():
    assert set(registry.BUILDERS) == set(FAMILIES)
    assert {(f, b) for f in FAMILIES for b in BUDGET_TARGETS} == set(ARCHS)
    with pytest.raises(registry.ConfigError, match="^family 'cait' has no record in modules/budgets.py FAMILIES$"):
        registry.register_family("cait")


def test_the_tables_orders_are_the_ones_the_suite_always_used():
    """The Makefile, the sweep and the tables list families in these orders (derived, not written out)."""
    assert fit_order() == ["resnet", "vit", "swin", "convnext", "hybrid", "deit"]
    assert reading_order() == ["resnet", "convnext", "vit", "deit", "swin", "hybrid"]
    assert names(attention="global") == ["vit", "deit", "hybrid"] and names(attention="windowed") == ["swin"]
    make = subprocess.run(["make", "-n", "fit-families"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert f"for f in ${{FAMILIES:-{' '.join(fit_order())}}}; do" in make.stdout   # FAMILIES= picks, else every family


def test_a_model_knows_its_family():
    model = registry.build_model("hybrid")
    assert registry.family_of(model) is FAMILIES["hybrid"]
    with pytest.raises(ValueError, match="^a Linear not built by build_model: allowed models of the families vit"):
        registry.family_of(torch.nn.Linear(2, 2))


def test_a_registered_family_trains_and_the_dry_run_prices_it(gapvit, cli, monkeypatch, capsys, tmp_path):
    from experiments.__main__ import main
    from experiments.runs.sweep import estimate
    code, run_dir = cli("fit", "--model.family", gapvit, "--data.batch_size", "32")
    assert code == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "done" and summary["family"] == gapvit and summary["flops_per_image"] > 0
    # its step time, as `make tables` measures it, prices the dry run of a sweep of it
    table = tmp_path / "step_times.csv"
    with open(table, "w", newline="") as f:
        writer = csv.DictWriter(f, estimate.COLUMNS)
        writer.writeheader()
        writer.writerows(estimate.measured([run_dir.parent]))
    monkeypatch.setattr(estimate, "STEP_TIMES", table)
    monkeypatch.setattr(estimate, "YOUR_STEP_TIMES", tmp_path / "none.csv")
    capsys.readouterr()
    assert main(["sweep", "--spec", "datascale", "--families", gapvit, "--runs_dir", str(tmp_path / "plan"),
                 "--dry_run"]) == 0
    out = capsys.readouterr().out
    assert f"--model.family {gapvit} " in out
    assert "## tuning stage: 2 runs, 4,000 optimisation steps of 32 images; about " in out  # 2 lrs


def test_a_registered_family_is_in_every_report(gapvit, capsys):
    from experiments.datascale.words import scaling_reading
    from experiments.families import main as families
    from experiments.figures import family_colour
    from experiments.report.runtimes import _names
    from tests.test_tables import _rows
    families(["--names"])
    assert capsys.readouterr().out.split() == ["resnet", "vit", "swin", "convnext", "hybrid", gapvit, "deit"]
    families(["--budget", "tiny", "--budget", "small"])
    rows = [line for line in capsys.readouterr().out.splitlines() if f" {gapvit} " in line]
    assert len(rows) == 2 and "tiny" in rows[0] and "small" in rows[1]
    with pytest.raises(registry.ConfigError, match=f"^family '{gapvit}' has no 'base' row .*: allowed tiny, small$"):
        registry.build_model(gapvit, "base")
    assert reading_order()[-1] == gapvit and family_colour(gapvit, "k") == "C6" and _names([gapvit]) == "GAP-ViT"
    # datascale's transformers-against-CNNs reading counts it as the transformer it is
    (text,) = scaling_reading(_rows({(gapvit, 100): 0.84, ("resnet", 100): 0.80}))
    assert "can't be compared" not in text and gapvit in text


def test_a_registered_family_gets_every_probe_its_attention_allows(gapvit):
    from types import SimpleNamespace

    from experiments.runs.run.probe import _applicable
    from modules.probes import attention_entropy, cls_attention, layer_features, mean_attention_distance
    from modules.probes import pos_embed_similarity
    torch.manual_seed(0)
    model, images = registry.build_model(gapvit), torch.randn(2, 1, 28, 28)
    assert mean_attention_distance(model, images).shape == (2, 3)  # layers x heads
    assert attention_entropy(model, images).shape == (2, 3)
    assert pos_embed_similarity(model).shape == (7, 7, 7, 7)
    assert len(layer_features(model, images)) == 2
    with pytest.raises(ValueError, match=f"^family '{gapvit}' has no \\[CLS\\] token .*: allowed vit, deit, hybrid$"):
        cls_attention(model, images)
    skip = _applicable(SimpleNamespace(family=gapvit, pool=None, pos_embed=None))
    assert skip == {"robustness": None, "cka": None, "attention": None, "pos_embed": None,
                    "maps": f"{gapvit} (pool None) has no class token"}


def _uncountable(*args, **kwargs):
    raise RuntimeError("Expected gradient function to be set")  # what timm's CaiT raised under the counter


def test_flops_are_counted_when_first_needed(monkeypatch):
    calls = []
    count = complexity._flops_by_op
    monkeypatch.setattr(complexity, "_flops_by_op", lambda *a: calls.append(1) or count(*a))
    module = ImageClassifier("resnet")
    assert not calls
    assert module.complexity["flops"] > 0 and module.complexity["params"] > 400_000 and len(calls) == 1


def test_a_family_whose_flops_cannot_be_counted_still_builds_and_fits(cli, monkeypatch):
    monkeypatch.setattr(complexity, "_flops_by_op", _uncountable)
    with pytest.warns(UserWarning, match="FLOPs of ResNet not counted .*Expected gradient function"):
        assert ImageClassifier("resnet").complexity["flops"] is None
    code, run_dir = cli("fit", "--model.family", "resnet")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert code == 0 and summary["status"] == "done" and summary["flops_per_image"] is None
    assert summary["params"] > 400_000


def test_the_benchmarks_print_no_mfu_for_a_family_whose_flops_cannot_be_counted(monkeypatch):
    """make bench / bench-levers multiply FLOPs by images per second: an uncounted family gets
    "n/a" in its MFU column, never a crash on None."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from family_throughput import mfu, training_flops
    monkeypatch.setattr(complexity, "_flops_by_op", _uncountable)
    with pytest.warns(UserWarning, match="not counted"):
        flops = training_flops(ImageClassifier("resnet"))
    assert flops is None and mfu(100.0, flops, 1e9).strip() == "n/a"
    monkeypatch.undo()
    assert mfu(100.0, 3e6, 1e9) == " 30.0%" and training_flops(ImageClassifier("resnet")) > 0


@pytest.mark.parametrize("argv, said", [
    (["--image_size", "0"], "--image_size 0: allowed integers from 1 to 512"),
    (["--image_size", "100000"], "--image_size 100000: allowed integers from 1 to 512"),
    (["--in_chans", "-1"], "--in_chans -1: allowed integers from 1 to 4"),
    (["--num_classes", "1"], "--num_classes 1: allowed integers from 2"),
])
def test_the_family_table_refuses_an_input_it_cannot_build_in_one_line(argv, said, capsys):
    """`families` runs every model forward at the input it is given: a size of 0 or 100,000 was a
    RuntimeError traceback (or a machine out of memory), not a line naming the value."""
    from experiments.__main__ import main
    assert main(["families", *argv]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and said in err[0], err
