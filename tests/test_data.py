"""The shared DataModule: sources, splits, subsets, augmentation, bad input."""
from __future__ import annotations

import json
import os

import datasets
import numpy as np
import pytest
import torch
from PIL import Image

from datamodules import DatasetError, ImageClassificationDataModule
from datamodules import sources
from datamodules.batch_augment import AugmentConfig, geometry, geometry_draws, strong_inputs

from .conftest import make_images


# ---------------- sources ----------------
def test_fashion_mnist_from_idx_files(make_dm):
    dm = make_dm()
    assert (dm.image_size, dm.num_channels, dm.num_classes) == (28, 1, 10)
    assert dm.class_names[0] == "T-shirt/top" and dm.class_names[9] == "Ankle boot"
    dm.setup("fit")
    assert all(dm._tensors[s][0].dtype == torch.uint8 for s in ("train", "val"))  # held as uint8
    assert "test" not in dm._tensors  # a fit never loads the test split
    dm.setup("test")
    assert set(dm._tensors) == {"test"} and dm._tensors["test"][0].dtype == torch.uint8
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (min(128, dm.train_size), 1, 28, 28) and x.dtype == torch.float32
    assert y.dtype == torch.int64 and int(y.max()) < 10


def test_fashion_mnist_resized(make_dm):
    """Fashion-MNIST is stored decoded (arrays, not images): resize_to still resizes it, and the
    splits are those of the native size (exp-complexity evaluates a 28x28 run's splits at 56x56)."""
    native, big = make_dm(val_size=60), make_dm(val_size=60, resize_to=56)
    assert (big.image_size, big.num_channels) == (56, 1)
    np.testing.assert_array_equal(big.val_indices, native.val_indices)
    np.testing.assert_array_equal(big.train_indices, native.train_indices)
    big.setup("fit")
    native.setup("fit")
    small = native._tensors["val"][0]
    large = big._tensors["val"][0]
    assert large.shape == (60, 1, 56, 56) and large.dtype == torch.uint8
    # the resized image is the native one upsampled: its 2x2 blocks average to about the native pixels
    down = torch.nn.functional.avg_pool2d(large.float(), 2)
    assert (down - small.float()).abs().mean() < 12


def test_decoded_dataset_is_cached(make_dm, monkeypatch):
    make_dm().prepare_data()

    def no_reload(*a, **k):
        raise AssertionError("decoded again despite the cache")
    monkeypatch.setattr(sources, "_load_raw", no_reload)
    dm = make_dm()
    assert dm.num_classes == 10  # served from the Arrow cache


@pytest.mark.parametrize("cut", ["inside its rows", "after its schema"])
def test_a_damaged_decoded_cache_is_decoded_again(make_dm, tmp_path, capsys, cut):
    """A cache .arrow file cut short is decoded again with a warning: cut inside a record, Arrow
    raises on reading it; cut at a record boundary, it would read as fewer rows (here none)."""
    import pyarrow as pa
    whole = make_dm(cache_dir=str(tmp_path))
    images, labels = whole._train_arrays
    (arrow,) = tmp_path.glob("*/train/*.arrow")
    with pa.memory_map(str(arrow)) as source:
        pa.ipc.MessageReader.open_stream(source).read_next_message()  # the schema
        schema_end = source.tell()
    os.truncate(arrow, arrow.stat().st_size // 2 if cut == "inside its rows" else schema_end)
    capsys.readouterr()
    again = make_dm(cache_dir=str(tmp_path))
    np.testing.assert_array_equal(again._train_arrays[0], images)
    np.testing.assert_array_equal(again._train_arrays[1], labels)
    assert "is damaged or from an older version" in capsys.readouterr().err
    assert len(make_dm(cache_dir=str(tmp_path))._train_arrays[1]) == len(labels)  # whole again: read as it is


def _write_image_folder(root, classes, n_per_class, size=(16, 16), mode="RGB"):
    rng = np.random.default_rng(0)
    for c in classes:
        (root / c).mkdir(parents=True)
        for i in range(n_per_class):
            shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
            Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8), mode).save(root / c / f"{i}.png")


def test_image_folder_source(tmp_path):
    _write_image_folder(tmp_path / "pets", ["cat", "dog", "eel"], 10)
    dm = ImageClassificationDataModule(str(tmp_path / "pets"), val_size=3)
    assert (dm.image_size, dm.num_channels, dm.num_classes) == (16, 3, 3)
    assert dm.class_names == ["cat", "dog", "eel"]
    dm.setup("test")
    assert len(dm._tensors["test"][1]) == 6  # no test/ folder: a stratified 20% is held out
    assert len(dm.val_indices) == 3 and dm.train_size == 24 - 3


def test_image_folder_with_train_and_test_and_resize(tmp_path):
    _write_image_folder(tmp_path / "f" / "train", ["a", "b"], 6, size=(20, 20), mode="L")
    _write_image_folder(tmp_path / "f" / "test", ["a", "b"], 2, size=(20, 20), mode="L")
    dm = ImageClassificationDataModule(str(tmp_path / "f"), val_size=2, resize_to=12)
    assert (dm.image_size, dm.num_channels, dm.num_classes) == (12, 1, 2)
    dm.setup("test")
    assert dm._tensors["test"][0].shape == (4, 1, 12, 12)


def test_an_image_folder_with_a_dangling_link_or_a_link_cycle_is_one_line_or_named(tmp_path):
    """A link to nothing inside an image folder is one error line naming it (it was a traceback from
    every command that names the dataset); a link back up the folder is walked once, not forever."""
    _write_image_folder(tmp_path / "pets", ["cat", "dog"], 2)
    named = sources.dataset_identity(str(tmp_path / "pets"))
    (tmp_path / "pets" / "dog" / "loop").symlink_to(tmp_path / "pets")
    assert sources.dataset_identity(str(tmp_path / "pets")) == named   # the cycle adds nothing, ends
    (tmp_path / "pets" / "cat" / "gone.png").symlink_to(tmp_path / "nowhere.png")
    with pytest.raises(ValueError, match=r"data\.dataset=.*pets.*: .*gone\.png cannot be read \(No such file or "
                                         r"directory\): allowed an image folder whose every file can be read"):
        sources.dataset_identity(str(tmp_path / "pets"))


def test_an_image_folder_is_named_by_what_it_holds(tmp_path, monkeypatch):
    """One folder reached by two paths is one dataset (one identity, one decoded cache); a file
    added, moved to another class or rewritten at another size makes another; hidden files, which
    imagefolder skips, do not."""
    _write_image_folder(tmp_path / "pets", ["cat", "dog"], 4)
    monkeypatch.chdir(tmp_path)
    named = sources.dataset_identity(str(tmp_path / "pets"))
    (tmp_path / "pets" / ".DS_Store").write_bytes(b"x")
    (tmp_path / "pets" / "cat" / "._0.png").write_bytes(b"x")  # macOS's resource fork: no image
    assert sources.dataset_identity(str(tmp_path / "pets")) == named
    assert named.startswith("image folder sha1:") and named.endswith("(8 files)")
    assert sources.dataset_identity("pets") == sources.dataset_identity("./pets/") == named
    assert [sources.short_name(n) for n in ("pets", "./pets/", str(tmp_path / "pets"))] == ["pets"] * 3
    monkeypatch.chdir(tmp_path / "pets")
    assert sources.dataset_identity(".") == named and sources.short_name(".") == "pets"
    assert sources.dataset_identity("fashion_mnist") == "fashion_mnist"
    assert sources.dataset_identity("uoft-cs/cifar10") == "uoft-cs/cifar10"

    cache = tmp_path / "cache"
    sources.load_decoded(str(tmp_path / "pets"), cache_dir=cache)
    sources.load_decoded(".", cache_dir=cache)
    assert len(list(cache.iterdir())) == 1  # decoded once for both paths
    assert len(sources.load_decoded(".", cache_dir=cache)["train"]) == 6  # hidden files skipped, as imagefolder does

    noise = lambda side: Image.fromarray(np.random.default_rng(side).integers(0, 255, (side, side, 3), np.uint8))  # noqa: E731
    seen = [named]
    for change in (lambda p: (p / "dog" / "0.png").rename(p / "cat" / "9.png"),  # relabelled
                   lambda p: noise(16).save(p / "dog" / "5.png"),  # added
                   lambda p: noise(24).save(p / "dog" / "5.png"),  # rewritten, another size
                   lambda p: (p / "dog" / "5.png").unlink()):  # removed: the relabelled folder again
        change(tmp_path / "pets")
        seen.append(sources.dataset_identity("."))
    assert len(set(seen[:4])) == 4 and seen[4] == seen[1]
    sources.load_decoded(".", cache_dir=cache)
    assert len(list(cache.iterdir())) == 2  # another dataset, decoded anew


def test_image_folder_test_split_needs_every_class(tmp_path):
    """Without test/, the held-out 20% needs an image of every class: refused in one line before any
    progress output below the least count that `train_test_split` accepts, and loaded at it."""
    for n in (3, 4):  # 3 classes: 8 images hold out ceil(1.6) = 2 < 3; 11 hold out ceil(2.2) = 3
        _write_image_folder(tmp_path / f"p{n}", ["a", "b", "c"], n)
    (tmp_path / "p3" / "c" / "2.png").unlink()
    (tmp_path / "p4" / "c" / "3.png").unlink()
    with pytest.raises(DatasetError, match=r"holds 8 images in 3 classes: .* allowed at least 11 images"):
        sources.load_decoded(str(tmp_path / "p3"), cache_dir=tmp_path / "cache")
    assert len(sources.load_decoded(str(tmp_path / "p4"), cache_dir=tmp_path / "cache")["test"]) == 3
    _write_image_folder(tmp_path / "split" / "train", ["a", "b"], 2)
    _write_image_folder(tmp_path / "split" / "test", ["a", "b", "z"], 1)
    with pytest.raises(DatasetError, match=r"test/ of .* has class folder\(s\) train/ lacks \(z\): allowed test "
                                           r"classes among train's \(a, b\)"):
        sources.load_decoded(str(tmp_path / "split"), cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("splits", [("train", "val"), ("train", "validation", "test")])
def test_image_folder_with_a_val_folder_is_one_line(tmp_path, splits):
    """train/ + val/ was read as two classes without images; train/ + val/ + test/ ignored val/."""
    for split in splits:
        _write_image_folder(tmp_path / "f" / split, ["a", "b"], 2)
    with pytest.raises(DatasetError, match=rf"has {splits[1]}/: the validation split is held out of train/ by the "
                                           r"suite \(data.val_size\); allowed layouts: one sub-folder per class"):
        sources.load_decoded(str(tmp_path / "f"), cache_dir=tmp_path / "cache")


def test_image_folder_needs_two_classes(tmp_path):
    _write_image_folder(tmp_path / "one", ["only"], 4)
    with pytest.raises(DatasetError, match="at least 2"):
        ImageClassificationDataModule(str(tmp_path / "one")).num_classes


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """A hub dataset repo (parquet shards, CIFAR-100-style columns img/fine_label) served from disk:
    only the name -> files step of `datasets.load_dataset` is redirected."""
    repo = tmp_path / "hub" / "cifar-like"
    features = datasets.Features({"img": datasets.Image(), "fine_label": datasets.ClassLabel(names=["x", "y", "z"]),
                                  "coarse_label": datasets.ClassLabel(names=["p", "q"])})
    for split, n in (("train", 30), ("test", 9)):
        images, labels = make_images(n, 3, seed=n, size=8, channels=3)
        datasets.Dataset.from_dict({"img": [Image.fromarray(a) for a in images], "fine_label": labels.tolist(),
                                    "coarse_label": (labels % 2).tolist()}, features=features
                                   ).to_parquet(str(repo / "data" / f"{split}-00000-of-00001.parquet"))
    real = datasets.load_dataset

    def load_dataset(name, *args, **kwargs):
        if name == "someone/cifar-like":
            return real(str(repo), *args, **kwargs)
        raise ConnectionError(f"Couldn't reach '{name}' on the Hub (offline)")
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return "someone/cifar-like"


def test_hub_source_detects_columns(fake_hub):
    dm = ImageClassificationDataModule(fake_hub, val_size=3)
    assert (dm.image_size, dm.num_channels, dm.class_names) == (8, 3, ["x", "y", "z"])
    dm.setup("fit")
    assert dm._tensors["train"][0].shape == (27, 3, 8, 8)


def test_hub_source_named_label_column(fake_hub):
    assert ImageClassificationDataModule(fake_hub, label_column="coarse_label", val_size=3).class_names == ["p", "q"]


def test_hub_source_missing_column(fake_hub):
    with pytest.raises(DatasetError, match="'picture'.*columns"):
        ImageClassificationDataModule(fake_hub, image_column="picture").num_classes


def test_unknown_dataset_names_it(fake_hub):
    with pytest.raises(DatasetError, match="'nobody/nothing'.*fashion_mnist"):
        ImageClassificationDataModule("nobody/nothing").num_classes
    with pytest.raises(DatasetError, match="does not exist"):
        ImageClassificationDataModule("./no/such/folder").num_classes


def test_fashion_mnist_missing_says_how_to_get_it(tmp_path, fake_hub):
    with pytest.raises(DatasetError, match="apt-get install dataset-fashion-mnist"):
        ImageClassificationDataModule(data_dir=str(tmp_path / "empty")).num_classes


# ---------------- splits and subsets ----------------
def _counts(labels, idx, k=10):
    return np.bincount(labels[idx], minlength=k)


def test_split_sizes_disjoint_and_stratified(make_dm):
    dm = make_dm(fraction=0.5)
    _, labels = dm._train_arrays
    pool, val, train = dm._splits["pool"], dm.val_indices, dm.train_indices
    assert len(val) == 60  # min(5000, 10% of 600)
    assert len(pool) + len(val) == 600 and not set(pool) & set(val)
    assert set(train) <= set(pool) and dm.train_size == 270
    for idx in (val, train):
        c = _counts(labels, idx)
        assert c.max() - c.min() <= 1


def test_default_val_size_caps_at_5000():
    from datamodules.splits import default_val_size
    assert default_val_size(60000) == 5000 and default_val_size(50000) == 5000 and default_val_size(600) == 60


def test_subsets_nested_and_deterministic(make_dm):
    subsets = [set(make_dm(fraction=f, seed=3).train_indices) for f in (0.1, 0.3, 0.7, 1.0)]
    assert all(a < b for a, b in zip(subsets, subsets[1:]))
    assert set(make_dm(fraction=0.3, seed=3).train_indices) == subsets[1]
    assert set(make_dm(fraction=0.3, seed=4).train_indices) != subsets[1]
    assert set(make_dm(train_size=54, seed=3).train_indices) == subsets[0]


def test_validation_split_same_for_every_run(make_dm):
    val = make_dm().val_indices
    for kw in (dict(fraction=0.1), dict(seed=7), dict(train_size=100, seed=2)):
        assert np.array_equal(make_dm(**kw).val_indices, val)


def test_train_indices_are_saved(make_dm, tmp_path):
    dm = make_dm(fraction=0.2, seed=1)
    dm.save_train_indices(tmp_path / "idx.json")
    saved = json.loads((tmp_path / "idx.json").read_text())
    assert saved["indices"] == dm.train_indices.tolist() and saved["train_size"] == 108


@pytest.mark.parametrize("kw, match", [
    (dict(fraction=0.0), r"fraction=0.0 is outside \(0, 1\]"),
    (dict(fraction=1.5), r"fraction=1.5 is outside \(0, 1\]"),
    (dict(fraction=-0.1), r"fraction=-0.1"),
    (dict(train_size=0), r"train_size=0"),
])
def test_bad_subset_arguments_fail_at_construction(make_dm, kw, match):
    with pytest.raises(ValueError, match=match):
        make_dm(**kw)


def test_train_size_larger_than_pool(make_dm):
    with pytest.raises(ValueError, match=r"train_size=1000 is outside the training pool: allowed 1..540"):
        make_dm(train_size=1000).train_indices


# ---------------- augmentation ----------------
def test_augmentation_changes_training_batches_only(make_dm):
    dm = make_dm(seed=0)
    dm.setup("fit")
    raw_x, raw_y = dm._tensors["train"]
    norm = dm.augment.normalize
    x, y = next(iter(dm.train_dataloader()))
    # find the raw images of this batch by label order is impossible; compare against all raw images
    exact = [(norm(raw_x) == xi).flatten(1).all(1).any().item() for xi in x]
    assert sum(exact) < len(x) // 2  # most training images were cropped or flipped
    for loader in (dm.val_dataloader, dm.test_dataloader):
        first = [b for b in loader()]
        second = [b for b in loader()]
        split = "val" if loader == dm.val_dataloader else "test"
        raw, labels = dm._split_tensors(split)
        got = torch.cat([b[0] for b in first])
        assert torch.equal(got, norm(raw)) and torch.equal(torch.cat([b[1] for b in first]), labels)
        assert all(torch.equal(a[0], b[0]) for a, b in zip(first, second))


def test_epochs_draw_different_batches(make_dm):
    dm = make_dm()
    dm.setup("fit")
    loader = dm.train_dataloader()
    a, b = next(iter(loader))[1], next(iter(loader))[1]
    assert not torch.equal(a, b)


def test_random_crop_is_a_shifted_window():
    x = torch.arange(2 * 1 * 6 * 6, dtype=torch.uint8).view(2, 1, 6, 6)
    g = torch.Generator().manual_seed(0)
    out = geometry(x, 2, geometry_draws(AugmentConfig(crop_padding=2), 2, g))
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for i in range(2):
        windows = [padded[i, :, dy:dy + 6, dx:dx + 6] for dy in range(5) for dx in range(5)]
        assert any(torch.equal(out[i], w) for w in windows)


def test_strong_augmentation_switches(make_dm):
    dm = make_dm(randaugment=True, random_erasing=0.5, mixup_alpha=0.8, cutmix_alpha=1.0, batch_size=32)
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (32, 1, 28, 28) and torch.isfinite(x).all()
    assert y.shape == (32, 10) and torch.allclose(y.sum(1), torch.ones(32))


def test_bad_erasing_probability(make_dm):
    with pytest.raises(ValueError, match="random_erasing=2"):
        make_dm(random_erasing=2)


def test_loader_resumes_at_any_batch(make_dm):
    """From its state_dict, a loader continues an epoch mid-way with exactly the batches the
    uninterrupted pass gave, strong augmentation included and whatever the global RNGs hold."""
    dm = make_dm(batch_size=32, randaugment=True, random_erasing=0.5, mixup_alpha=0.8)
    dm.setup("fit")
    whole = list(dm.train_dataloader())
    for k in (1, 4, len(whole) - 1):
        loader = dm.train_dataloader()
        it = iter(loader)
        for _ in range(k):
            next(it)
        state = loader.state_dict()
        resumed = dm.train_dataloader()
        resumed.load_state_dict(state)
        resumed.position = lambda: (0, k)
        torch.manual_seed(1234)
        rest = list(resumed)
        assert len(rest) == len(whole) - k
        assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(whole[k:], rest))


def test_loader_after_a_fit_counts_its_own_passes(make_dm, tmp_path):
    """Once a fit is over (here stopped mid-epoch by max_steps), the DataModule's train loader no
    longer follows that trainer's progress: it iterates whole epochs from the start."""
    import lightning as L
    from modules import ImageClassifier
    dm = make_dm(train_size=128, batch_size=32)
    trainer = L.Trainer(max_steps=2, limit_val_batches=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(ImageClassifier("resnet"), dm)
    assert len(list(dm.train_dataloader())) == 4


@pytest.mark.parametrize("variant", [{}, dict(randaugment=True, random_erasing=0.5, mixup_alpha=0.8, cutmix_alpha=1.0)])
def test_a_loader_of_draws_only_hands_over_what_augment_train_draws(make_dm, variant):
    """train_loader(draws_only=True) hands over uint8 images and their crop and flip draws, the ones
    augment.train draws from the loader's generator; applied with the run's strong_inputs and each
    batch's place (from which apply draws the strong stages' numbers), they make its batches (the
    default and the strong variant)."""
    dm = make_dm(batch_size=16, train_size=64, **variant)
    dm.setup("fit")
    strong = strong_inputs([dm.augment.cfg], [dm.seed], (28, 28), "cpu")
    assert bool(strong) == bool(variant)
    draws_only = dm.train_loader(draws_only=True)
    for i, ((x, y, draws), (xa, ya)) in enumerate(zip(draws_only, dm.train_loader())):
        assert x.dtype == torch.uint8 and set(draws) == {"dy", "dx", "flip"}
        if strong:
            draws |= strong | {"place": torch.tensor([0, i])}
        xb, yb = dm.augment.apply(x, y, draws)
        assert torch.equal(xb, xa) and torch.equal(yb, ya)
