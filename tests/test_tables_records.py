"""Records are data when they are rendered: a run folder from elsewhere may hold any summary.json,
and `tables` neither passes its text to markdown as markup nor fails on it. Each case plants one
bad record in a copy of the committed reference and builds the tables and the README from it."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from experiments.__main__ import main
from experiments.runs.run.summary_check import BadRecord, checked_summary
from experiments.report.table_format import plain
from experiments.runs.sweep.reference import REFERENCE

ROOT = Path(__file__).resolve().parents[1]
RUN = "resnet-tiny_fashion_mnist_f0.002_s0_lr0.003_8b8eda8f"   # a finished reference run in exp-datascale's plan that distill and inductive_bias share
INJECTED = "evil\n\n## INJECTED\n<script>alert(1)</script> | <img src=x onerror=alert(1)> [x](http://evil) `"


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """A checkout with datascale's reference runs in runs/ and the README."""
    shutil.copytree(ROOT / REFERENCE / "datascale", tmp_path / "runs" / "datascale")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "runs"


def _summary(runs: Path) -> Path:
    return runs / "datascale" / RUN / "summary.json"


def _plant(runs: Path, **fields) -> None:
    _summary(runs).write_text(json.dumps({**json.loads(_summary(runs).read_text()), **fields}))


def _tables(*experiments: str) -> int:
    return main(["tables", "--runs_dir", "runs", "--out", "out", "--readme", "README.md",
                 *(["--experiment", *experiments] if experiments else [])])


def _reports(*names: str) -> dict[str, str]:
    return {n: Path(f"out/{n}.md").read_text() for n in names} | {"README": Path("README.md").read_text()}


def _whole_tables(md: str) -> bool:
    """Every markdown table keeps its columns: each row has as many cell bars as its header."""
    blocks = re.findall(r"(?m)(?:^\|.*\n)+", md)
    return all(len({line.count("|") for line in b.splitlines()}) == 1 for b in blocks)


@pytest.mark.parametrize("key", ["hardware", "commit", "family"])
def test_a_records_text_reaches_the_tables_and_readme_as_text_never_as_markup(runs, key):
    _plant(runs, **{key: INJECTED})
    assert _tables("datascale") == 0
    for name, text in _reports("datascale").items():
        assert "<script" not in text and "<img" not in text and "[x](http://evil)" not in text, name
        assert not re.search(r"(?m)^#+ INJECTED", text), name
        assert _whole_tables(text), name
    shown = _reports("datascale")["datascale"] if key == "family" else _reports()["README"]
    assert plain(INJECTED) in shown  # shown whole, as text
    assert "&lt;script>alert(1)&lt;/script> &#124; &lt;img" in plain(INJECTED)


@pytest.mark.parametrize("planted, why", [
    (lambda p: _plant(p, test_acc=float("nan")), "summary.json: test_acc is NaN: allowed a number from 0 to 1"),
    (lambda p: _plant(p, test_acc="0.9"), 'summary.json: test_acc is "0.9": allowed a number from 0 to 1'),
    (lambda p: _plant(p, hardware=7), "summary.json: hardware is 7: allowed text"),
    (lambda p: _summary(p).write_text(_summary(p).read_text()[:-40]), "summary.json: not valid JSON (Unterminated string"),
    (lambda p: (_summary(p).unlink(), _summary(p).mkdir()), "summary.json: a folder, not a file"),
], ids=["nan", "string", "number-for-text", "malformed", "folder"])
def test_a_bad_record_is_named_and_left_out_and_the_rest_is_built(runs, capsys, planted, why):
    planted(runs)
    assert _tables("datascale") == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: runs/datascale/{RUN}: {why}") \
        and err[0].endswith("; left out of the tables")
    reports = _reports("datascale")
    assert f"- runs left out: {RUN} ({plain(why)}" in reports["datascale"]
    statuses = [json.loads(f.read_text())["status"] for f in (ROOT / REFERENCE / "datascale").glob("*/summary.json")]
    done, fitted = statuses.count("done"), statuses.count("fitted")
    # the families tuned so far (tuning.json holds every piece's; sweep.json's axes are the last piece's)
    trials = json.loads((ROOT / REFERENCE / "datascale" / "tuning.json").read_text())["profiles"]["cpu"]["trials"]
    families = {t["family"] for t in trials}
    assert len(statuses) == done + fitted and fitted == len(families)   # finished runs, each family's unchosen trial
    assert f"- runs: {len(statuses) - 1} ({done - 1} done, {fitted} fitted)" in reports["datascale"]   # one left out
    assert f"- runs left out: datascale/{RUN} ({plain(why)}" in reports["README"]
    assert Path("out/datascale.csv").is_file() and Path("out/datascale.png").is_file()


def test_every_report_that_reads_a_shared_run_names_it_once_when_it_is_left_out(tmp_path, monkeypatch, capsys):
    """datascale's run, which distill and inductive_bias read too: each report says it left it out,
    the README once."""
    for name in ("datascale", "distill", "inductive_bias"):
        shutil.copytree(ROOT / REFERENCE / name, tmp_path / "runs" / name)
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    monkeypatch.chdir(tmp_path)
    _plant(tmp_path / "runs", test_acc=float("nan"))
    assert _tables() == 0
    reports = _reports("datascale", "distill", "inductive_bias")
    for name in ("distill", "inductive_bias"):
        assert f"- runs left out: datascale/{RUN} (summary.json: test_acc is NaN" in reports[name], name
    assert reports["README"].count(RUN) == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 3  # one line per report that left it out


def test_plain_text_is_one_line_without_markup():
    assert plain("a|b\\|c\n## h\r\n<b>&amp;`x`[l](u)\u2028\u202e") == \
        "a&#124;b&#92;&#124;c ## h  &lt;b>&amp;amp;&#96;x&#96;&#91;l&#93;(u)  "
    assert plain("2 CPU cores (AMD EPYC, AVX512), no GPU") == "2 CPU cores (AMD EPYC, AVX512), no GPU"
    assert plain(repr([plain("a|b\\")])) == "&#91;'a&amp;#124;b&amp;#92;'&#93;"


@pytest.mark.parametrize("summary, why", [
    ([1], "holds list [1], not a mapping of a run's fields"),
    ({"status": "done"}, "no 'family'"),
    ({"family": "vit", "status": "done", "fraction": 0.1}, "no 'train_size' in a finished run's record"),
    ({"family": "vit", "status": "done", "fraction": 0.1, "train_size": 10, "test_acc": 1.5},
     "test_acc is 1.5: allowed a number from 0 to 1"),
    ({"family": "vit", "status": "failed", "params": True}, "params is true: allowed an integer from 0 to 1e+18"),
    ({"family": "vit", "status": "failed", "test": {"acc": 0.5, "loss": float("inf")}},
     "test is {\"acc\": 0.5, \"loss\": Infinity}: allowed a mapping of finite numbers (accuracies from 0 to 1)"),
    ({"family": "vit", "status": "failed", "flops_per_image": 10 ** 400},
     "flops_per_image is 1" + "0" * 56 + "...: allowed a number from 0 to 1e+18"),
    ({"family": "vit", "status": "failed", "val_history": [[1, "x"]]},
     "val_history is [[1, \"x\"]]: allowed a list of (step, accuracy from 0 to 1) pairs"),
    ({"family": "vit", "status": "failed", "extra": {"a": [float("nan")]}}, "extra.a.0 is not a finite number"),
    ({"family": "deit", "status": "failed", "teacher_labels": {"differs": 0, "images": 1000}},
     "teacher_labels is {\"differs\": 0, \"images\": 1000}: allowed a mapping of counts 'differs' and 'images' "
     "and a 'rate' from 0 to 1"),
    ({"family": "deit", "status": "failed", "teacher_labels": {"differs": 0, "images": 1000, "rate": "0"}},
     "teacher_labels is {\"differs\": 0, \"images\": 1000, \"rate\": \"0\"}: allowed a mapping of counts 'differs' "
     "and 'images' and a 'rate' from 0 to 1"),
])
def test_a_summary_is_read_as_the_suite_writes_it(summary, why):
    with pytest.raises(BadRecord) as e:
        checked_summary(summary)
    assert str(e.value) == why
    ok = {"family": "vit", "status": "failed", "error": "x", "test_acc": None, "plateau": None}
    assert checked_summary(ok) is ok
