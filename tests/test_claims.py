"""Claims as data: each experiment's claims.yaml holds the fixed words and published results of its
claims (read with yaml.safe_load: nothing in it runs), and one Claim renders every place a claim is
read, silent while a run behind it still improved."""
from __future__ import annotations

import pytest

from experiments.report.claim import (CLAIMS_FILE, Claim, Wording, claims_path, load_claims, load_figures,
                                     read_together)
from experiments.statistics import Estimate
from experiments.report.verdicts import MARGINS, misread

WORDS = Wording("Is A above B?", "yes (a paper)", "A above", "A below", expected="higher", margin="accuracy", size=0.02)


@pytest.mark.parametrize("experiment", ["datascale", "distill", "inductive_bias"])
def test_every_experiment_s_claims_load_with_a_declared_margin(experiment):
    assert claims_path(experiment).is_file()
    claims = load_claims(experiment)
    assert claims and all(w.margin in MARGINS and w.question and w.higher and w.lower for w in claims.values())


@pytest.mark.parametrize("text, says", [
    ("a: {question: q, published: p, higher: h, lower: l, colour: red}", "claim 'a': unknown key colour"),
    ("a: {question: q, published: p, higher: h}", "claim 'a': missing text lower"),
    ("a: {question: q, published: p, higher: h, lower: l, margin: inches}", "margin 'inches' is no declared margin"),
    ("a: {question: q, published: p, higher: h, lower: l, expected: up}", "expected 'up' is no direction"),
    ("a: {question: q, published: p, higher: h, lower: l, together: {agree: x}}", "together: expected the texts"),
    ("- just a list", "expected a mapping of claim names"),
    ("a: !!python/object/apply:os.system [echo ran]", "not valid YAML"),
])
def test_claims_that_are_not_claims_are_one_clear_error(tmp_path, text, says):
    path = tmp_path / CLAIMS_FILE
    path.write_text(text)
    with pytest.raises(ValueError, match="claims .*" + says.replace("(", r"\(")) as e:
        load_claims("x", path)
    assert "\n" not in str(e.value)


def test_a_claim_reads_its_estimate_in_its_words_and_against_the_published_size():
    claim = Claim(WORDS, Estimate(0.05, 0.01, 3), runs=6)
    assert claim.converged and claim.category == "higher" and claim.said().startswith("A above: the 95% interval")
    assert claim.agrees and claim.cell() == (
        "in direction: A above, as published: the 95% interval [+0.0400, +0.0600] excludes 0 and reaches beyond "
        "±0.0100; in size: disagrees, our interval [+0.0400, +0.0600] lies wholly above the published +0.0200")
    row = claim.row("A − B", "here")
    assert (row.question, row.published, row.ours) == (WORDS.question, WORDS.published, "A − B: +0.0500 ± 0.0100 (3 pairs)")
    assert claim.not_read() is None


def test_a_claim_is_silent_while_a_run_behind_it_still_improves():
    claim = Claim(WORDS, Estimate(0.05, 0.01, 3), runs=6, improving=2, unknown=1)
    assert not claim.converged and claim.category is None and claim.agrees is None
    assert claim.cell() == "not read: 2 of 6 runs still improving (†)"
    assert claim.not_read().startswith("Not read: 2 of the 6 runs behind these numbers were still improving")


def test_deit_s_findings_quote_the_published_table_they_sit_beside():
    """distill's claims.yaml holds DeiT's table and the Findings' published cells and sizes: they agree."""
    from experiments.report.claim import load_published
    claims, published = load_claims("distill"), load_published("distill")
    deit_b = {method: points[2] for method, points in published["rows"].items()}
    transformer, (low, high) = published["teacher_choice"].values()
    hard = deit_b["hard, with token: cls+dist"]
    for name, other in (("distillation", deit_b["no distillation"]), ("hard_soft", deit_b["usual soft distillation"])):
        assert claims[name].size == pytest.approx((hard - other) / 100)
        assert f"{hard} against " in claims[name].published and f"{other} (DeiT-B" in claims[name].published
    assert claims["teacher"].size == pytest.approx(((low - transformer) / 100, (high - transformer) / 100))
    assert f"{low}-{high} against {transformer}" in claims["teacher"].published


def test_vit_s_findings_quote_the_table_8_they_sit_beside():
    from experiments.report.claim import load_published
    words, table8 = load_claims("inductive_bias")["position_embedding"], load_published("inductive_bias")["rows"]
    assert words.size == pytest.approx(table8["none"] - table8["learn"], abs=5e-5)
    assert f"none {table8['none']:.4f} against learned 1D {table8['learn']:.4f}" in words.published


def test_a_claim_s_verdict_passes_its_one_converged_check_in_every_form():
    """read, reasoned and silence say the verdict only while every run behind it plateaued; a
    wording's directions take the names of the runs it compares."""
    words = Wording("q", "p", "{a} above", "{b} above", same="alike", unsure="unsettled", apart="so apart")
    filled = words.filled(a="vit", b="resnet")
    assert (filled.higher, filled.lower) == ("vit above", "resnet above")
    up, flat, open_ = Estimate(0.05, 0.01, 3), Estimate(0.001, 0.002, 3), Estimate(0.02, 0.05, 3)
    assert Claim(filled, up, runs=6).read() == Claim(filled, up, runs=6).said() and "vit above" in Claim(filled, up, 6).read()
    assert Claim(filled, up, runs=6).reasoned() == Claim(filled, up, runs=6).said() + ", so apart"
    assert Claim(filled, flat, runs=6).reasoned().endswith("±0.0100: alike")
    assert Claim(filled, open_, runs=6).reasoned().endswith("±0.0100: unsettled")
    assert Claim(filled, up, runs=6).silence() is None and Claim(filled, up, runs=6).not_read_at("here") is None
    improving = Claim(filled, up, runs=6, improving=2)
    for said in (improving.read(), improving.reasoned(), improving.silence()):
        assert "vit above" not in said and "2 of the 6 runs behind it" in said
    assert improving.read() == improving.reasoned() == improving.not_read_clause()
    assert improving.silence() == "not read, 2 of the 6 runs behind it still improving (†)"
    assert improving.not_read_at("100 images") == (
        "Not read at 100 images: 2 of the runs there were still improving at their last validation (†).")
    # the Findings row shows the number, marked while a run behind it still improved
    assert improving.row("vit − resnet", "here").ours == "vit − resnet: +0.0500 ± 0.0100 (3 pairs) †"
    assert Claim(filled, up, runs=6).row("vit − resnet", "here").ours == "vit − resnet: +0.0500 ± 0.0100 (3 pairs)"


def test_several_claims_read_together_agree_only_when_every_one_reads_the_published_direction():
    """A figure's verdict over every pair (inductive_bias's robustness): agrees when every claim reads the
    expected direction, disagrees when every one reads the other or no difference, else cannot tell;
    silent while a run behind any of them still improves; its words are the wording's `together`."""
    together = {"agree": "all above", "disagree": "none above", "unsure": "mixed"}
    words = Wording("q", "p", "above", "below", expected="higher", together=together)
    up, down, same = (Claim(words, Estimate(v, ci, 3), runs=6) for v, ci in ((0.1, 0.02), (-0.1, 0.02), (0.0, 0.005)))
    unsure = Claim(words, Estimate(0.0, 0.5, 3), runs=6)
    assert read_together([up, up]) == "agrees in direction: all above"
    assert read_together([down, same]) == "disagrees in direction: none above"
    assert read_together([up, unsure]) == "in direction, cannot tell: the 95% interval of 1 of the 2 differences includes 0; mixed"
    one = Claim(words, Estimate(0.1, None, 1), runs=2)
    assert read_together([unsure, one]) == ("in direction, cannot tell: the 95% interval of 1 of the 2 differences "
                                            "includes 0, and 1 more rests on one seed (no interval); mixed")
    assert read_together([up, one]) == "in direction, cannot tell: one seed, no interval, for 1 of the 2 differences; mixed"
    assert read_together([up, down]) == ("in direction, cannot tell: the 95% intervals of the 2 differences read different "
                                         "ways (higher, lower); mixed")
    assert read_together([unsure, unsure]).startswith("in direction, cannot tell: the 95% interval of each of the 2 ")
    assert misread(read_together([up, unsure])) == misread(read_together([up, down])) == []
    assert read_together([up, Claim(words, Estimate(0.1, 0.02, 3), runs=6, improving=1)]) == ""
    assert read_together([]) == ""
    lower = Wording("q", "p", "above", "below", expected="lower", together=together)
    assert read_together([Claim(lower, Estimate(-0.1, 0.02, 3), runs=6)]) == "agrees in direction: all above"
    robustness = load_claims("inductive_bias")
    assert robustness["robustness_patchdrop"].together == robustness["robustness_shuffle4"].together


def test_figures_words_are_data_beside_the_claims(tmp_path):
    """inductive_bias's figures take their caption, what they measure and what the literature found
    from claims.yaml; an entry that is not those three texts is one clear error."""
    from experiments.inductive_bias.numbers import FIGURES
    figures = load_figures("inductive_bias")
    assert set(figures) == set(FIGURES) and all(f.caption and f.measures and f.published for f in figures.values())
    assert "0.6138 vs 0.6421" in figures["ablation"].published   # Table 8, as claims.yaml's published rows say
    path = tmp_path / CLAIMS_FILE
    path.write_text("figures: {shift: {caption: c, measures: m}}")
    with pytest.raises(ValueError, match="figure 'shift': expected the texts caption, measures, published"):
        load_figures("x", path)
