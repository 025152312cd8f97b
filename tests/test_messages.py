"""Bad input: one line on stderr (`error: ...`) naming the bad value and what is allowed, exit status 2,
and no folder created in the runs dir. The battery of cases is tests/bad_inputs.py (`make safety` runs
it against the real CLI, one process per case)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from experiments.__main__ import main

from tests.bad_inputs import CASES, EXPERIMENT_RUNNERS, TINY_SPEC as SPEC, Scene
from tests.conftest import tree_hashes


def one_error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    return lines[0]


def assert_rejected(code: int, capsys, runs: Path, *expected: str) -> None:
    assert code == 2
    line = one_error_line(capsys)
    for text in expected:
        assert text in line, line
    assert not runs.exists() or not any(runs.iterdir()), sorted(runs.rglob("*"))


@pytest.fixture
def scene(fmnist_dir, make_dm, tmp_path, capsys):
    """The battery's files (tests/bad_inputs.py) on the small IDX data, decoded beforehand (its
    first-use progress is not an error)."""
    make_dm().num_classes
    capsys.readouterr()
    return Scene(tmp_path, fmnist=fmnist_dir)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.label[:80])
def test_bad_input_is_one_line_and_writes_nothing(scene, monkeypatch, capsys, case):
    """Every case of the battery, in-process: one line naming the value, exit 2, no file written
    (in runs_dir or beside it) and no planted code run."""
    monkeypatch.setenv("FASHION_MNIST_DIR", scene.fill("{fmnist}"))
    monkeypatch.syspath_prepend(scene.fill("{plants}"))
    monkeypatch.delitem(sys.modules, "h3evil", raising=False)
    scene.write_run_config(case.run_config)
    scene.plant(case)
    before = tree_hashes(scene.root)
    code = main(case.argv(scene))
    line = one_error_line(capsys)
    assert code == 2 and all(w in line for w in case.words(scene)), (code, line)
    assert not scene.paths["pwned"].exists(), "the planted checkpoint ran its code"
    written = {f for f, h in tree_hashes(scene.root).items() if before.get(f) != h}
    # at most the (git-ignored) lock of a folder that existed before: the one a planted checkpoint sits in
    assert all(f.endswith("/.lock") and any(b.startswith(f[:-len(".lock")]) for b in before) for f in written), \
        sorted(written)


@pytest.mark.parametrize("text, expected", [
    ("name: [unclosed\n", ["is not valid YAML (line 2)", "bad.yaml"]),
    ("- a\n- b\n", ["spec bad.yaml is a list, not a mapping", "allowed keys dataset, families, make_help, make_options, name"]),
    (yaml.safe_dump({**SPEC, "profiles": {}}), ["spec bad.yaml has no profiles", "batch_size, budget, cluster, epochs, families, fractions"]),
    (yaml.safe_dump({**SPEC, "profiles": {"cpu": {"budget": "tiny", "fractions": [1.0], "seeds": [0]}}}),
     ["profile 'cpu' of bad.yaml lacks the key 'epochs'", "required budget, fractions, seeds, epochs"]),
    (yaml.safe_dump({**SPEC, "profiles": {"cpu": {**SPEC["profiles"]["cpu"], "epochs": {"vit": 400}}}}),
     ["epochs={'vit': 400} in profile 'cpu' of bad.yaml has no 'default'", "with a 'default' for every other run"]),
    (yaml.safe_dump({**SPEC, "profiles": {"cpu": {**SPEC["profiles"]["cpu"], "min_steps": {"default": 4, "vit": 2.5}}}}),
     ["min_steps of 'vit' = 2.5 in profile 'cpu' of bad.yaml: allowed an integer >= 1"]),
    (yaml.safe_dump({**SPEC, "profiles": {"cpu": {**SPEC["profiles"]["cpu"], "max_steps": 0}}}),
     ["max_steps=0 in profile 'cpu' of bad.yaml: allowed an integer >= 1"]),
    (yaml.safe_dump({k: v for k, v in SPEC.items() if k != "name"}),
     ["spec bad.yaml lacks the key 'name'", "required name, dataset, families, profiles, variant_args"]),
])
def test_bad_spec_is_one_line(tmp_path, capsys, text, expected):
    path, runs = tmp_path / "bad.yaml", tmp_path / "runs"
    path.write_text(text)
    assert_rejected(main(["sweep", "--spec", str(path), "--runs_dir", str(runs)]), capsys, runs, *expected)


def test_help_still_prints_everything(capsys):
    with pytest.raises(SystemExit) as e:
        main(["fit", "--help"])
    assert e.value.code == 0 and "--data.fraction" in capsys.readouterr().out


def test_a_folder_that_cannot_be_written_is_one_line(monkeypatch, capsys):
    import experiments.families

    def fail(argv):
        raise PermissionError(13, "Permission denied", "/runs/t")
    monkeypatch.setattr(experiments.families, "main", fail)
    assert main(["families"]) == 2 and one_error_line(capsys) == "error: cannot write '/runs/t': permission denied"


def test_the_planted_checkpoint_is_a_real_attack(tmp_path, fmnist_dir):
    """What the battery's refusals guard against: read as an ordinary pickle, each planted file runs
    its code (here, creating a file)."""
    import pickle
    import torch
    scene = Scene(tmp_path, fmnist=fmnist_dir)
    for name, load in (("evil", lambda f: torch.load(f, weights_only=False)),
                       ("evil_raw", lambda f: pickle.loads(f.read_bytes()))):
        scene.paths["pwned"].unlink(missing_ok=True)
        load(scene.paths[name])
        assert scene.paths["pwned"].exists(), name


@pytest.mark.parametrize("case", [c for c in CASES if "which the suite does not import" in " ".join(c.expected)], ids=lambda c: c.label[:80])
def test_a_value_naming_planted_code_is_a_real_attack(scene, monkeypatch, case):
    """What the import policy guards against: the battery's cases that name h3evil import it, and so
    run its code, once VIT_FAMILIES_IMPORTS allows it (as it allows a researcher's own callback)."""
    monkeypatch.setenv("FASHION_MNIST_DIR", scene.fill("{fmnist}"))
    monkeypatch.setenv("VIT_FAMILIES_IMPORTS", "h3evil")
    monkeypatch.syspath_prepend(scene.fill("{plants}"))
    monkeypatch.delitem(sys.modules, "h3evil", raising=False)
    main([*case.argv(scene), *(("--dry_run",) if case.command in EXPERIMENT_RUNNERS else ("--trainer.max_steps", "0"))])
    assert scene.paths["pwned"].exists()


def test_an_image_cut_inside_its_pixels_is_named_when_decoded(tmp_path, capsys):
    """A PNG whose chunks are whole (its structure passes the cheap check) but whose compressed pixels
    stop halfway: decoding it names the file in one error line, exit 2, no traceback, no run folder
    (Image.Image.load, the base class's, decoded nothing; the error came out of Arrow's map, 96 lines)."""
    import struct
    import zlib

    from tests.bad_inputs import Scene
    folder = Scene._image_folder(tmp_path / "pets", dog=((8, 8),) * 4)
    png = (folder / "dog" / "0.png").read_bytes()
    chunks, pos = [png[:8]], 8
    while pos < len(png):  # each chunk rewritten, IDAT's data halved, its CRC made anew
        (n,), kind = struct.unpack(">I", png[pos:pos + 4]), png[pos + 4:pos + 8]
        data = png[pos + 8:pos + 8 + n]
        data = data[:len(data) // 2] if kind == b"IDAT" else data
        chunks.append(struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data)))
        pos += 12 + n
    (folder / "dog" / "0.png").write_bytes(b"".join(chunks))
    runs = tmp_path / "runs"
    code = main(["fit", "--data.dataset", str(folder), "--data.train_size", "4", "--data.val_size", "2",
                 "--runs_dir", str(runs), "--trainer.enable_progress_bar", "false"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 2 and "Traceback" not in err and len(errors) == 1, err[-3000:]
    assert errors[0].startswith(f"error: image file '{folder}/dog/0.png' is not a readable image (OSError: image file "
                                "is truncated")
    assert not runs.exists()


def test_an_import_allowed_once_is_denied_again_when_the_environment_drops_it(scene, monkeypatch, capsys):
    """jsonargparse keeps its allowlist for the whole process: an entry VIT_FAMILIES_IMPORTS allowed at
    one parse is denied again at the next parse without it, before the import."""
    monkeypatch.setenv("FASHION_MNIST_DIR", scene.fill("{fmnist}"))
    monkeypatch.syspath_prepend(scene.fill("{plants}"))
    case = next(c for c in CASES if c.args[:2] == ("--trainer.callbacks", "h3evil.Cb"))
    monkeypatch.setenv("VIT_FAMILIES_IMPORTS", "h3evil")
    monkeypatch.delitem(sys.modules, "h3evil", raising=False)
    main([*case.argv(scene), "--trainer.max_steps", "0"])
    assert scene.paths["pwned"].exists()
    scene.paths["pwned"].unlink()
    monkeypatch.delenv("VIT_FAMILIES_IMPORTS")
    monkeypatch.delitem(sys.modules, "h3evil", raising=False)
    capsys.readouterr()
    code, line = main(case.argv(scene)), one_error_line(capsys)
    assert code == 2 and all(w in line for w in case.words(scene)), line
    assert not scene.paths["pwned"].exists()


@pytest.mark.parametrize("value, said", [("a-b", "'a-b' is not a module path: allowed comma-separated dotted"),
                                         ("jsonargparse._common", "'jsonargparse._common' is not allowed")])
def test_a_malformed_import_allowance_is_one_line(monkeypatch, capsys, tmp_path, value, said):
    monkeypatch.setenv("VIT_FAMILIES_IMPORTS", value)
    assert main(["fit", "--runs_dir", str(tmp_path / "runs")]) == 2
    assert one_error_line(capsys).startswith(f"error: VIT_FAMILIES_IMPORTS={value!r}: {said}")
