"""Position-table resizing for fine-tuning at a higher resolution (experiments/complexity/pos_embed_interpolation.py)."""
from __future__ import annotations

import json

import lightning
import pytest
import torch
from PIL import Image
from timm.layers import resample_abs_pos_embed

from experiments.complexity.pos_embed_interpolation import METHODS, NATIVE, interpolation_study, load_source, resize_pos_embed
from modules import ImageClassifier, build_model

from .conftest import make_images


def vit(**kw):
    torch.manual_seed(0)
    return build_model("vit", "tiny", image_size=28, **kw)  # patch 4: a 7x7 grid + the class token


@pytest.mark.parametrize("method", METHODS)
def test_same_size_leaves_the_table_bit_identical(method):
    model = vit()
    before = model.pos_embed.detach().clone()
    resize_pos_embed(model, 28, method)
    assert torch.equal(model.pos_embed, before)


@pytest.mark.parametrize("method", METHODS)
def test_larger_size(method):
    model = vit()
    old = model.pos_embed.detach().clone()               # (1, 1 + 7 * 7, D)
    resize_pos_embed(model, 56, method)
    new = model.pos_embed.detach()
    d = old.shape[-1]
    assert new.shape == (1, 1 + 14 * 14, d)
    assert torch.equal(new[:, :1], old[:, :1])           # the class token's slot is carried over
    grid, old_grid = new[0, 1:].reshape(14, 14, d), old[0, 1:].reshape(7, 7, d)
    if method == "none":                                  # old table top-left, zeros elsewhere
        assert torch.equal(grid[:7, :7], old_grid)
        assert not grid[7:].any() and not grid[:, 7:].any()
    elif method == "nearest":                             # exactly 2x: each entry fills a 2x2 block
        for r in range(14):
            for c in range(14):
                assert torch.equal(grid[r, c], old_grid[r // 2, c // 2])
    else:
        assert torch.equal(new, resample_abs_pos_embed(old, (14, 14), (7, 7), num_prefix_tokens=1))
    assert model.patch_embed.grid_size == (14, 14)
    assert model.pos_embed.requires_grad
    model.eval()
    with torch.no_grad():
        assert model(torch.randn(3, 1, 56, 56)).shape == (3, 10)


def test_resize_errors():
    with pytest.raises(ValueError, match="method='linear': allowed bicubic, nearest, none"):
        resize_pos_embed(vit(), 56, "linear")
    with pytest.raises(ValueError, match="new_image_size=30: allowed a positive multiple of the patch size 4"):
        resize_pos_embed(vit(), 30, "bicubic")
    for pos_embed in ("none", "sincos"):                  # no table; a fixed (not learned) one
        with pytest.raises(ValueError, match="no learned position table"):
            resize_pos_embed(vit(pos_embed=pos_embed), 56, "bicubic")


def test_load_source_errors(tmp_path):
    with pytest.raises(ValueError, match="best.ckpt' does not exist"):
        load_source(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "best.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="best.ckpt' is not a readable checkpoint of this suite") as e:
        load_source(tmp_path)
    assert "\n" not in str(e.value)
    # a suite checkpoint of a ViT without a learned table (as Lightning writes one, without training)
    classifier = ImageClassifier(family="vit", pos_embed="sincos")
    torch.save({"state_dict": classifier.state_dict(), "hyper_parameters": dict(classifier.hparams),
                "pytorch-lightning_version": lightning.__version__}, tmp_path / "checkpoints" / "best.ckpt")
    with pytest.raises(ValueError, match="pos_embed 'sincos': allowed family 'vit' with pos_embed 'learn'"):
        load_source(tmp_path)


@pytest.fixture(scope="module")
def png_dir(tmp_path_factory):
    """Fake Fashion-MNIST-like images (600 train, 100 test, 28x28 gray) as an image folder of PNGs."""
    root = tmp_path_factory.mktemp("png")
    for split, n, seed in (("train", 600, 0), ("test", 100, 1)):
        images, labels = make_images(n, 10, seed)
        for i, (image, label) in enumerate(zip(images, labels)):
            (root / split / f"c{label}").mkdir(parents=True, exist_ok=True)
            Image.fromarray(image[..., 0], "L").save(root / split / f"c{label}" / f"{i}.png")
    return root


def test_study_end_to_end(cli, png_dir):
    # no random crop: a 2-pixel shift moves one class's band of rows onto its neighbour's
    code, run_dir = cli("fit", "--model.family", "vit", "--data.dataset", str(png_dir), "--data.crop_padding", "0",
                        "--trainer.precision", "32-true")
    assert code == 0
    model, data = load_source(run_dir)
    assert model.pos_embed.shape[1] == 1 + 7 * 7
    assert {"dataset", "data_dir", "fraction", "train_size", "val_size", "seed", "split_seed"} <= set(data)

    rows = interpolation_study(run_dir, 56, finetune_steps=2, lr=1e-3, batch_size=16, progress=False)
    assert [(r["method"], r["phase"]) for r in rows] == [
        (m, p) for m in (*METHODS, NATIVE) for p in ("source", "before fine-tune", "after fine-tune")]
    for r in rows:
        assert 0 <= r["val_acc"] <= 1 and 0 <= r["test_acc"] <= 1
        assert (r["val_images"], r["test_images"]) == (60, 100)  # all of the val and test splits
        assert r["resolution"] == (28 if r["phase"] == "source" or r["method"] == NATIVE else 56)
        assert r["finetune_steps"] == (2 if r["phase"] == "after fine-tune" else 0)
    # the control starts from the source itself; the resized models start from their own evaluation
    native = [r for r in rows if r["method"] == NATIVE]
    assert native[1]["val_acc"] == native[0]["val_acc"] and native[1]["test_acc"] == native[0]["test_acc"]
    capped = interpolation_study(run_dir, 56, methods=["none"], finetune_steps=0, lr=1e-3, batch_size=16,
                                 eval_images=25, native_control=False, progress=False)
    assert [r["method"] for r in capped] == ["none"] * 3
    assert all((r["val_images"], r["test_images"]) == (25, 25) for r in capped)
    # the source row is the run's own validation and test of best.ckpt (same splits, same weights)
    summary = json.loads((run_dir / "summary.json").read_text())
    source = rows[0]
    assert source["val_acc"] == pytest.approx(summary["val_acc_best"], abs=1e-6)
    assert source["test_acc"] == pytest.approx(summary["test_acc"], abs=1e-6)

    with pytest.raises(ValueError, match="methods=\\['cubic'\\]: allowed"):
        interpolation_study(run_dir, 56, methods=["cubic"], finetune_steps=1, lr=1e-3, batch_size=8)
    with pytest.raises(ValueError, match="data_overrides key 'resize_to'"):
        interpolation_study(run_dir, 56, finetune_steps=1, lr=1e-3, batch_size=8, data_overrides={"resize_to": 56})


def test_the_study_takes_a_learning_rate_as_yaml_reads_it():
    """PyYAML reads 1e-4 (no decimal point) as text: a spec's lr given so is the number it says,
    and text that is no number, or a rate past float32, is refused naming it."""
    from experiments.complexity.pos_embed_interpolation import as_lr, check_study
    assert as_lr("1e-4") == 1e-4 and as_lr(3e-3) == 3e-3 and as_lr(1) == 1.0
    assert as_lr("abc") is None and as_lr(True) is None and as_lr(0) is None and as_lr(1e39) is None
    check_study(methods=["none"], finetune_steps=1, lr="1e-4", batch_size=8)
    with pytest.raises(ValueError, match=r"lr='abc': allowed a learning rate > 0 and <="):
        check_study(methods=["none"], finetune_steps=1, lr="abc", batch_size=8)

