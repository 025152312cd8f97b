"""`make bench-steps` (benchmarks/step_times.py): on a machine no record was trained on, one training
step of each family there prices the dry run's runs alone, keyed as the records' step times are, and
the estimate says which runs it priced from the step alone; the records' own step times come first,
and a group is never priced from a run's step."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import torch

from experiments.runs.sweep.estimate import estimate, read_bench_step_times
from experiments.runs.sweep.execute import flops_per_image
from experiments.runs.sweep.spec import Run

ROOT = Path(__file__).resolve().parents[1]
CPU = "2 CPU cores (dev, AVX2), no GPU"
sys.path.insert(0, str(ROOT / "benchmarks"))
from step_times import merged  # noqa: E402  (a benchmark script, not a package)


def _runs(tmp_path, family: str, n: int) -> list[Run]:
    return [Run(i, f"{family}_{i}", family, 0.1, i, "default", ("--seed_everything", str(i)),
                run_dir=tmp_path / f"{family}_{i}", steps=6000, batch_size=32) for i in range(n)]


def _entry(threads: int, rows: list[dict]) -> dict:
    return {"threads": threads, "jobs": 2, "commit": "abc", "versions": {}, "rows": rows}


def _row(family: str, flops: int, ms: float, **kw) -> dict:
    return {"family": family, "budget": "tiny", "flops_per_image": flops, "batch": 32, "members": 1,
            "precision": "32-true", "threads": 1, "jobs": 2, "steps": 20, "step_ms": ms, **kw}


def test_a_machines_rows_replace_only_its_own_of_the_same_threads_and_jobs():
    old = {"devices": {"A": [_entry(1, [_row("vit", 1, 10.0)]), _entry(2, [_row("vit", 1, 8.0)]),
                             {**_entry(1, [_row("vit", 1, 14.0)]), "jobs": 4}],
                       "B": [_entry(1, [_row("vit", 1, 50.0)])]}}
    new = merged(old, "A", _entry(1, [_row("vit", 1, 12.0)]))
    assert new["devices"]["B"] == old["devices"]["B"]
    assert [(e["threads"], e["jobs"], e["rows"][0]["step_ms"]) for e in new["devices"]["A"]] == [
        (1, 2, 12.0), (1, 4, 14.0), (2, 2, 8.0)]
    assert merged({}, "C", _entry(1, []))["devices"] == {"C": [_entry(1, [])]}


def test_the_rows_are_keyed_as_step_times_are_and_read_at_the_jobs_thread_count(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"devices": {CPU: [
        _entry(1, [_row("vit", 52, 100.0), _row("swin", 9, 300.0), _row("resnet", 90, 0.0),
                   _row("hybrid", 7, 20.0, members=4), {"family": "convnext"}]),
        _entry(2, [_row("vit", 52, 60.0, threads=2)]), {**_entry(1, [_row("vit", 52, 130.0)]), "jobs": 4}]}}))
    assert read_bench_step_times(path, threads=1, jobs=2) == {(CPU, "vit", "tiny", 52, 32, 1): 100.0,
                                                              (CPU, "swin", "tiny", 9, 32, 1): 300.0}
    assert read_bench_step_times(path, threads=2, jobs=2) == {(CPU, "vit", "tiny", 52, 32, 1): 60.0}
    assert read_bench_step_times(path, threads=1, jobs=4) == {(CPU, "vit", "tiny", 52, 32, 1): 130.0}
    for text in ("{not json", "[1, 2]", '{"devices": 3}'):
        path.write_text(text)
        assert read_bench_step_times(path) == {}
    assert read_bench_step_times(tmp_path / "none.json") == {}


def test_bench_steps_price_the_runs_alone_no_record_measured_and_say_so(tmp_path):
    vits, swin = _runs(tmp_path, "vit", 2), _runs(tmp_path, "swin", 1)
    vit_key = (CPU, "vit", "tiny", flops_per_image(vits[0]), 32, 1)
    swin_key = (CPU, "swin", "tiny", flops_per_image(swin[0]), 32, 1)
    bench = {vit_key: 100.0, swin_key: 300.0}   # 6,000 steps: a ViT 10 min, the Swin 30 min
    said = ("(step times: results/step_times_bench.json for {} runs, the step alone (validation, tests, loader and "
            "Lightning's loop not counted: a lower bound))")
    assert estimate(vits + swin, 2, CPU, {}, group_times={}, bench_times=bench) == (
        "; about 40 min on this device (2 at a time) " + said.format(3)
        + ", about 30 min with 8 such cores, about 30 min with 16 such cores")
    # a record's step time (validations and all) comes first: the ViTs at 200 ms, only the Swin benched
    assert estimate(vits + swin, 2, CPU, {vit_key: 200.0}, group_times={}, bench_times=bench) == (
        "; about 50 min on this device (2 at a time) (step times: results/step_times.csv and "
        "results/step_times_bench.json for 1 run, the step alone (validation, tests, loader and Lightning's loop "
        "not counted: a lower bound)), about 30 min with 8 such cores, about 30 min with 16 such cores")
    # a packed group is not a run alone: its step is never priced from one
    assert estimate(vits, 1, CPU, {}, pack=2, group_times={}, bench_times=bench) == (
        "; no step time measured on this device for vit-tiny at batch 32 packed 2 (make bench-packed-cpu times the "
        "gpu profile's packed groups here), so no estimate")
    # without any, the line names the target that measures them here (on a CPU; a GPU has make gpu-check)
    assert estimate(vits, 1, CPU, {}, group_times={}, bench_times={}) == (
        f"; no step times measured on {CPU} (results/step_times.csv; make bench-steps JOBS=1 times each family's tiny "
        "step at batch 32 here), so no estimate")
    assert estimate(vits, 1, "an H200", {}, group_times={}, bench_times={}) == (
        "; no step times measured on an H200 (results/step_times.csv), so no estimate")


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the runs are gpu-check's to time: the script refuses")
def test_make_bench_steps_measures_what_the_dry_run_on_this_machine_then_prices(tmp_path):
    """The real script, each family's step in processes of its own, writes rows whose keys are the
    planned runs' on this machine (DeiT timed with its teacher inside); a second machine's rows stay."""
    from experiments.runs.run.provenance import hardware
    out = tmp_path / "step_times_bench.json"
    out.write_text(json.dumps({"devices": {"another machine": [_entry(1, [_row("vit", 52, 1.0)])]}}))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "step_times.py"), "--family", "resnet", "deit",
                           "--steps", "1", "--jobs", "1", "--out", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    devices = json.loads(out.read_text())["devices"]
    assert set(devices) == {"another machine", hardware()}
    (entry,) = devices[hardware()]
    assert entry["jobs"] == 1 and entry["versions"]["torch"]
    assert [r["family"] for r in entry["rows"]] == ["resnet", "deit"] and all(r["step_ms"] > 0 and 0 < r["mfu"] < 1 for r in entry["rows"])
    bench = read_bench_step_times(out, threads=entry["threads"], jobs=1)
    runs = _runs(tmp_path, "resnet", 1) + _runs(tmp_path, "deit", 1)   # as the sweep plans them: the same keys
    said = estimate(runs, 1, hardware(), {}, group_times={}, bench_times=bench)
    assert said.startswith("; about ") and "results/step_times_bench.json for 2 runs," in said


@pytest.mark.parametrize("args, said", [
    (["--jobs", "0"], "--jobs 0: allowed integers >= 1"),
    (["--steps", "-1"], "--steps -1: allowed integers >= 1"),
    (["--batch", "0"], "--batch 0: allowed integers >= 1"),
    (["--family", "bogus"], "argument --family: invalid choice: 'bogus' (choose from 'vit', 'deit', 'swin', "
                            "'convnext', 'hybrid', 'resnet') (python benchmarks/step_times.py --help lists the options)"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, said):
    out = tmp_path / "step_times_bench.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "step_times.py"), *args, "--out", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode != 0 and done.stderr.strip() == said and not out.exists()


@pytest.mark.parametrize("text", ["{half a file", "[1, 2]", '{"devices": {"a machine": [3]}}',
                                  '{"devices": {"a machine": [{}]}}', '{"devices": {"M": [{"threads": "1", "jobs": 2}]}}',
                                  "[" * 200_000 + "]" * 200_000])
def test_a_file_it_cannot_add_to_is_left_as_it_was(tmp_path, text):
    out = tmp_path / "step_times_bench.json"
    out.write_text(text)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "step_times.py"), "--family", "resnet",
                           "--out", str(out)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1
    assert str(out) in done.stderr and "not a step-time file" in done.stderr and out.read_text() == text
