"""Where images come from: every source becomes a `datasets.DatasetDict` with a train and a
test split, an `image` column of decoded uint8 arrays (H, W, C) and a `label` ClassLabel.

The decoded dict is cached on disk as Arrow (`save_to_disk`), so only the first run of a
dataset pays for decoding; later runs memory-map the cache in seconds.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import math
import os
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
from PIL import Image

import datasets
from datasets import Array3D, ClassLabel, Dataset, DatasetDict, Features
from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder
from modules.files import parse_json

FASHION_MNIST = "fashion_mnist"
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")  # Debian: dataset-fashion-mnist
FASHION_MNIST_DIR_ENV = "FASHION_MNIST_DIR"  # another folder of the same IDX files
FASHION_MNIST_HUB = "zalando-datasets/fashion_mnist"
FASHION_MNIST_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                         "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
IMAGE_COLUMNS = ("image", "img")
LABEL_COLUMNS = ("label", "fine_label", "labels")
TEST_FRACTION = 0.2  # held out, stratified, as the test split of an image folder without test/
DATASET_HELP = ("use 'fashion_mnist', a Hugging Face hub name such as 'uoft-cs/cifar10', "
                "or a folder of class sub-folders")


class DatasetError(ValueError):
    """Bad dataset input; the message names the bad value and what is allowed."""


def default_cache_dir() -> Path:
    return Path(os.environ.get("VIT_FAMILIES_CACHE", Path.home() / ".cache" / "vit-families"))


def load_decoded(name: str, *, data_dir: str | None = None, image_column: str | None = None,
                 label_column: str | None = None, image_size: int | None = None,
                 cache_dir: str | Path | None = None) -> DatasetDict:
    """The decoded train/test DatasetDict for `name`, from the Arrow cache when present."""
    if name == FASHION_MNIST:  # the folder is part of the cache key: another folder, another dataset
        data_dir = str(data_dir or os.environ.get(FASHION_MNIST_DIR_ENV) or FASHION_MNIST_DIR)
    key = f"{dataset_identity(name)}|{data_dir}|{image_column}|{label_column}|{image_size}"
    slug = "".join(c if c.isalnum() else "_" for c in short_name(name))[-40:]
    path = Path(cache_dir or default_cache_dir()) / f"{slug}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
    if (path / "dataset_dict.json").exists():
        try:
            return _read_cache(path)
        except (OSError, ValueError, KeyError) as e:  # damaged (a truncated .arrow file): made again
            print(f"warning: the decoded cache {str(path)!r} of {name!r} is damaged or from an older version "
                  f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); decoding the dataset again",
                  file=sys.stderr)
            _discard(path)
    decoded = _decode(_load_raw(name, data_dir, image_size), image_column, label_column, image_size, name)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    decoded.save_to_disk(str(tmp))
    (tmp / CACHE_ROWS).write_text(json.dumps({split: len(decoded[split]) for split in decoded}))
    try:  # atomic: parallel processes (DDP ranks, sweep jobs) never see a half-written cache
        tmp.rename(path)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return _read_cache(path)


CACHE_ROWS = "rows.json"  # each split's row count, written with the cache


def _read_cache(path: Path) -> DatasetDict:
    """The cached DatasetDict, checked whole: Arrow reads a file cut at a record boundary as fewer
    rows without a word (cut elsewhere, it raises), so each split must hold the rows it was saved
    with."""
    saved = parse_json((path / CACHE_ROWS).read_text())
    decoded = datasets.load_from_disk(str(path))
    found = {split: len(decoded[split]) for split in decoded}
    if found != saved:
        raise ValueError(f"its splits hold {found} rows, saved with {saved}")
    return decoded


def _discard(path: Path) -> None:
    """Removes a cache folder: renamed first (atomic), so that a process starting meanwhile finds it
    whole or absent, never half deleted; a process that renamed it first removes it instead."""
    trash = path.with_name(path.name + f".broken{os.getpid()}")
    try:
        path.rename(trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def dataset_identity(name: str) -> str:
    """The dataset as a run's identity and the decoded cache name it. A hub name or 'fashion_mnist'
    is its name; an image folder is what it holds, not the path that reached it: './imgs' and
    '/data/imgs' are one dataset, and a folder whose files were added, removed, moved between class
    folders or rewritten at another size is another. (A rewrite that keeps every file's name and
    size is not seen: hashing every byte of a large folder at each start would cost minutes.)"""
    if not _is_image_folder(name):
        return name
    listing = []  # "path inside the folder<TAB>size" of every file imagefolder can read
    for root, dirs, files in os.walk(name, followlinks=True):
        # not walked into: hidden folders, and a link to a folder this one is in (a cycle never ends)
        dirs[:] = [d for d in dirs if not _hidden(d) and not _encloses(os.path.join(root, d), root)]
        inside = Path(os.path.relpath(root, name)).as_posix()
        listing += [f"{inside}/{f}\t{_size(name, os.path.join(root, f))}" for f in files if not _hidden(f)]
    listing.sort()
    digest = hashlib.sha1("\n".join(listing).encode()).hexdigest()
    return f"image folder sha1:{digest[:16]} ({len(listing)} files)"


def _encloses(folder: str, root: str) -> bool:
    """Whether `folder` resolves to `root` or to a folder `root` lies in."""
    target, here = os.path.realpath(folder), os.path.realpath(root)
    return here == target or here.startswith(target.rstrip(os.sep) + os.sep)


def _size(name: str, path: str) -> int:
    """A file's size, or one error line naming it (a link to nothing, a file that cannot be read)."""
    try:
        return os.stat(path).st_size
    except OSError as e:
        raise ValueError(f"data.dataset={name!r}: {path} cannot be read ({e.strerror}): allowed an image folder "
                         "whose every file can be read") from None


def short_name(name: str) -> str:
    """The dataset in a run's readable name: 'uoft-cs/cifar10' -> 'cifar10', './imgs/' -> 'imgs',
    '.' -> the folder's own name."""
    return (Path(name).resolve() if _is_image_folder(name) else Path(name)).name


def _is_image_folder(name: str) -> bool:
    return name != FASHION_MNIST and Path(name).is_dir()


def _hidden(name: str) -> bool:
    return name.startswith((".", "__"))  # as imagefolder and _class_dirs skip them


def _load_raw(name: str, data_dir: str | None, image_size: int | None) -> DatasetDict:
    if name == FASHION_MNIST:
        return _fashion_mnist(Path(data_dir))
    if Path(name).is_dir():
        return _image_folder(Path(name), image_size)
    if name.startswith((".", "/", "~")):
        raise DatasetError(f"dataset folder {name!r} does not exist: {DATASET_HELP}")
    return _hub(name)


def _read_idx(path: Path) -> np.ndarray:
    """An IDX file (the MNIST format): big-endian magic (dtype, ndim), dims, then raw bytes."""
    with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
        _, dtype_code, ndim = struct.unpack(">HBB", f.read(4))
        if dtype_code != 0x08:
            raise DatasetError(f"{path}: IDX type {dtype_code:#x} is not uint8 (0x08)")
        shape = struct.unpack(">" + "I" * ndim, f.read(4 * ndim))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(shape)


def _fashion_mnist(folder: Path) -> DatasetDict:
    files = {split: (folder / f"{prefix}-images-idx3-ubyte.gz", folder / f"{prefix}-labels-idx1-ubyte.gz")
             for split, prefix in (("train", "train"), ("test", "t10k"))}
    if all(p.exists() for pair in files.values() for p in pair):
        features = Features({"image": Array3D(shape=(28, 28, 1), dtype="uint8"),
                             "label": ClassLabel(names=FASHION_MNIST_CLASSES)})
        return DatasetDict({split: Dataset.from_dict(
            {"image": _read_idx(images)[..., None], "label": _read_idx(labels).astype(np.int64)},
            features=features) for split, (images, labels) in files.items()})
    try:
        return _hub(FASHION_MNIST_HUB)
    except DatasetError as hub_error:
        raise DatasetError(
            f"fashion_mnist: no IDX files in {folder} and the hub copy {FASHION_MNIST_HUB!r} failed "
            f"({hub_error}); install the data with 'apt-get install dataset-fashion-mnist' "
            f"(or 'make data'), or pass data_dir= a folder holding train-images-idx3-ubyte.gz etc."
        ) from None


def _class_dirs(folder: Path) -> list[Path]:
    """Sub-folders as imagefolder sees them (hidden ones are skipped)."""
    return sorted(d for d in folder.iterdir() if d.is_dir() and not _hidden(d.name))


VAL_DIRS = ("val", "valid", "validation")
LAYOUTS = "one sub-folder per class, or train/ and test/ holding them"


def _image_folder(folder: Path, image_size: int | None) -> DatasetDict:
    names = {d.name for d in _class_dirs(folder)}
    if "train" in names and names & set(VAL_DIRS):  # imagefolder would read it as a class, or ignore it
        raise DatasetError(f"image folder {str(folder)!r} has {sorted(names & set(VAL_DIRS))[0]}/: the validation "
                           f"split is held out of train/ by the suite (data.val_size); allowed layouts: {LAYOUTS} "
                           "(move the validation images into train/)")
    split_dirs = names & {"train", "test"}
    roots = [folder / "train", folder / "test"] if split_dirs == {"train", "test"} else [folder]
    classes = [[d.name for d in _class_dirs(root)] for root in roots]
    if len(classes[0]) < 2:
        raise DatasetError(f"image folder {str(folder)!r} has {len(classes[0])} class sub-folder(s); "
                           f"it needs at least 2 ({LAYOUTS})")
    if unseen := sorted(set(classes[-1]) - set(classes[0])):
        raise DatasetError(f"test/ of {str(folder)!r} has class folder(s) train/ lacks ({', '.join(unseen)}): "
                           f"allowed test classes among train's ({', '.join(classes[0])})")
    counts, first = {}, None
    for d in (d for root in roots for d in _class_dirs(root)):
        images = sorted(f for f in d.iterdir()  # imagefolder skips hidden files (macOS's ._x.png: no image)
                        if f.is_file() and not _hidden(f.name) and f.suffix.lower() in ImageFolder.EXTENSIONS)
        if not images:
            raise DatasetError(f"class folder {str(d)!r} holds no images: allowed image files "
                               f"{' '.join(ImageFolder.EXTENSIONS)}")
        for f in images:  # a cheap structural read before any progress output; _as_image catches the rest
            img = _read_image(f, f, Image.Image.verify)
            first = first or (f, img.size)
            if img.size != first[1] and image_size is None:  # _decode would say so after its progress output
                raise _sizes_differ(f"image file {str(f)!r}", img.size, repr(str(first[0])), first[1])
            img.close()
        counts[d] = len(images)
    if len(roots) == 1:
        _check_held_out_test(folder, counts)
    raw = datasets.load_dataset("imagefolder", data_dir=str(folder))
    if "test" not in raw:
        # No official test split: hold out a stratified, fixed 20% as the test set.
        split = raw["train"].train_test_split(test_size=TEST_FRACTION, seed=0, stratify_by_column="label")
        raw = DatasetDict({"train": split["train"], "test": split["test"]})
    return raw


def _sizes_differ(what: str, size: tuple[int, int], other: str, other_size: tuple[int, int]) -> DatasetError:
    return DatasetError(f"{what} is {size[0]}x{size[1]} (width x height), {other} is {other_size[0]}x{other_size[1]}: "
                        "allowed images of one size, or --data.resize_to N (resize_to=N) to resize them all")


def _check_held_out_test(folder: Path, counts: dict[Path, int]) -> None:
    """A folder without train/ and test/ gives a stratified TEST_FRACTION of its images to the test
    split: every class needs an image on each side, and the test split one image per class
    (what `train_test_split` would otherwise refuse after the progress output, in its own words)."""
    fewest = min(counts, key=counts.get)
    if counts[fewest] < 2:
        raise DatasetError(f"class folder {str(fewest)!r} holds 1 image: allowed at least 2 per class where "
                           f"{str(folder)!r} has no train/ and test/ (a stratified {TEST_FRACTION:.0%} is held "
                           "out for test)")
    n, n_classes = sum(counts.values()), len(counts)
    if math.ceil(TEST_FRACTION * n) < n_classes:
        need = math.floor((n_classes - 1) / TEST_FRACTION) + 1  # the least n with ceil(0.2 n) >= classes
        raise DatasetError(f"image folder {str(folder)!r} holds {n} images in {n_classes} classes: its held-out "
                           f"{TEST_FRACTION:.0%} test split needs one per class: allowed at least {need} images, "
                           "or train/ and test/ folders")


def _hub(name: str) -> DatasetDict:
    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)  # its retry warnings would bury the one line that says what failed
    try:
        raw = datasets.load_dataset(name)
    except Exception as e:  # the hub raises many types (not found, offline, gated)
        raise DatasetError(f"unknown or unreachable dataset {name!r}: {type(e).__name__}: "
                           f"{str(e).splitlines()[0] if str(e) else ''} ({DATASET_HELP})") from None
    finally:
        hub_log.setLevel(level)
    if "train" not in raw or "test" not in raw:
        raise DatasetError(f"dataset {name!r} has splits {sorted(raw)}; a 'train' and a 'test' split are needed")
    return raw


def _pick_column(ds: Dataset, given: str | None, candidates: tuple[str, ...], what: str, name: str) -> str:
    if given is not None:
        if given not in ds.column_names:
            raise DatasetError(f"{what} column {given!r} is not in dataset {name!r}; columns: {ds.column_names}")
        return given
    for c in candidates:
        if c in ds.column_names:
            return c
    raise DatasetError(f"no {what} column ({'/'.join(candidates)}) in dataset {name!r}; "
                       f"columns: {ds.column_names}; name it with {what}_column=")


def _read_image(source, name: str, check) -> Image.Image:
    """Image.open(source) then check(image) (verify: the file's structure; _decode_pixels: its
    pixels), PIL's errors for an unreadable file turned into one line naming it."""
    try:
        img = Image.open(source)
        check(img)
        return img
    except (OSError, SyntaxError, ValueError) as e:
        raise DatasetError(f"image file {str(name)!r} is not a readable image ({type(e).__name__}: {e}): "
                           "allowed complete image files; fix or remove it") from None


def _decode_pixels(img: Image.Image) -> None:
    """Every pixel decoded now (the file's own load: Image.Image.load, the base class's, decodes
    nothing of a file opened lazily), so that a file cut inside its pixel data is named here."""
    img.load()


def _as_image(value) -> Image.Image:
    """A PIL image from an image column's value: an image, an undecoded file ({'path', 'bytes'}), or
    a decoded (H, W, C) uint8 array (Fashion-MNIST's IDX files are stored decoded, and resize_to
    resizes them through PIL too)."""
    if isinstance(value, Image.Image):
        return value
    if isinstance(value, dict):  # decoded here, so a truncated or non-image file is named
        return _read_image(io.BytesIO(value["bytes"]) if value.get("bytes") else value["path"],
                           value.get("path") or "(embedded bytes)", _decode_pixels)
    array = np.asarray(value, dtype=np.uint8)
    return Image.fromarray(array[..., 0] if array.shape[-1] == 1 else array)


def _decode(raw: DatasetDict, image_column, label_column, image_size, name) -> DatasetDict:
    """Decode every image once to uint8 (H, W, C): one channel if the first image is grayscale,
    else RGB; resized to image_size when given (needed when the images differ in size)."""
    train = raw["train"]
    icol = _pick_column(train, image_column, IMAGE_COLUMNS, "image", name)
    lcol = _pick_column(train, label_column, LABEL_COLUMNS, "label", name)
    if isinstance(train.features[icol], datasets.Image):  # files: _as_image opens them and names a bad one
        raw = DatasetDict({s: raw[s].cast_column(icol, datasets.Image(decode=False)) for s in ("train", "test")})
        train = raw["train"]
    label_feature = train.features[lcol]
    if not isinstance(label_feature, ClassLabel):
        raise DatasetError(f"label column {lcol!r} of {name!r} is {label_feature}, not a ClassLabel")
    if isinstance(train.features[icol], Array3D) and image_size is None:  # already decoded
        return DatasetDict({s: raw[s].select_columns([icol, lcol]).rename_columns(
            {icol: "image", lcol: "label"}) for s in ("train", "test")})
    first = _as_image(train[0][icol])
    mode = "L" if first.mode in ("L", "1", "I;16", "I") else "RGB"
    size = (image_size, image_size) if image_size else first.size
    channels = 1 if mode == "L" else 3

    def decode(batch):
        out = []
        for img in batch[icol]:
            img = _as_image(img).convert(mode)
            if img.size != size:
                if image_size is None:
                    raise _sizes_differ(f"an image of {name!r}", img.size, "another", size)
                img = img.resize(size)
            out.append(np.asarray(img, dtype=np.uint8).reshape(size[1], size[0], channels))
        return {"image": out, "label": batch[lcol]}

    features = Features({"image": Array3D(shape=(size[1], size[0], channels), dtype="uint8"),
                         "label": label_feature})
    # arrays stored decoded (Fashion-MNIST's IDX files) come as one (B, H, W, C) ndarray per batch
    # instead of nested Python lists: 10x faster to resize
    numpy = isinstance(train.features[icol], Array3D)
    return DatasetDict({s: (raw[s].with_format("numpy") if numpy else raw[s]).map(
        decode, batched=True, batch_size=256, features=features, remove_columns=raw[s].column_names,
        desc=f"decoding {name}/{s}") for s in ("train", "test")})
