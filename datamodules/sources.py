"""Where images come from: every source becomes a `datasets.DatasetDict` with a train and a
test split, an `image` column of decoded uint8 arrays (H, W, C) and a `label` ClassLabel.

The decoded dict is cached on disk as Arrow (`save_to_disk`), so only the first run of a
dataset pays for decoding; later runs memory-map the cache in seconds.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import logging
import os
import shutil
import struct
from pathlib import Path

import numpy as np
from PIL import Image

import datasets
from datasets import Array3D, ClassLabel, Dataset, DatasetDict, Features
from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder

FASHION_MNIST = "fashion_mnist"
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")  # Debian: dataset-fashion-mnist
FASHION_MNIST_DIR_ENV = "FASHION_MNIST_DIR"  # another folder of the same IDX files
FASHION_MNIST_HUB = "zalando-datasets/fashion_mnist"
FASHION_MNIST_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                         "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
IMAGE_COLUMNS = ("image", "img")
LABEL_COLUMNS = ("label", "fine_label", "labels")
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
    key = f"{name}|{data_dir}|{image_column}|{label_column}|{image_size}"
    slug = "".join(c if c.isalnum() else "_" for c in name.strip("/"))[-40:]
    path = Path(cache_dir or default_cache_dir()) / f"{slug}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
    if (path / "dataset_dict.json").exists():
        return datasets.load_from_disk(str(path))
    decoded = _decode(_load_raw(name, data_dir), image_column, label_column, image_size, name)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    decoded.save_to_disk(str(tmp))
    try:  # atomic: parallel processes (DDP ranks, sweep jobs) never see a half-written cache
        tmp.rename(path)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return datasets.load_from_disk(str(path))


def _load_raw(name: str, data_dir: str | None) -> DatasetDict:
    if name == FASHION_MNIST:
        return _fashion_mnist(Path(data_dir))
    if Path(name).is_dir():
        return _image_folder(Path(name))
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
    return [d for d in folder.iterdir() if d.is_dir() and not d.name.startswith((".", "__"))]


def _image_folder(folder: Path) -> DatasetDict:
    split_dirs = {d.name for d in _class_dirs(folder)} & {"train", "test"}
    roots = [folder / "train", folder / "test"] if split_dirs == {"train", "test"} else [folder]
    n_classes = len(_class_dirs(roots[0]))
    if n_classes < 2:
        raise DatasetError(f"image folder {str(folder)!r} has {n_classes} class sub-folder(s); "
                           "it needs at least 2 (one sub-folder per class, or train/ and test/ holding them)")
    for d in (d for root in roots for d in _class_dirs(root)):
        images = [f for f in d.iterdir() if f.is_file() and f.suffix.lower() in ImageFolder.EXTENSIONS]
        if not images:
            raise DatasetError(f"class folder {str(d)!r} holds no images: allowed image files "
                               f"{' '.join(ImageFolder.EXTENSIONS)}")
        for f in images:  # a cheap structural read before any progress output; _as_image catches the rest
            _read_image(f, f, Image.Image.verify).close()
    raw = datasets.load_dataset("imagefolder", data_dir=str(folder))
    if "test" not in raw:
        # No official test split: hold out a stratified, fixed 20% as the test set.
        split = raw["train"].train_test_split(test_size=0.2, seed=0, stratify_by_column="label")
        raw = DatasetDict({"train": split["train"], "test": split["test"]})
    return raw


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
    """Image.open(source) then check(image) (verify: the file's structure; load: its pixels), PIL's
    errors for an unreadable file turned into one line naming it."""
    try:
        img = Image.open(source)
        check(img)
        return img
    except (OSError, SyntaxError, ValueError) as e:
        raise DatasetError(f"image file {str(name)!r} is not a readable image ({type(e).__name__}: {e}): "
                           "allowed complete image files; fix or remove it") from None


def _as_image(value) -> Image.Image:
    """A PIL image from an image column's value: an image, an undecoded file ({'path', 'bytes'}), or
    a decoded (H, W, C) uint8 array (Fashion-MNIST's IDX files are stored decoded, and resize_to
    resizes them through PIL too)."""
    if isinstance(value, Image.Image):
        return value
    if isinstance(value, dict):  # decoded here, so a truncated or non-image file is named
        return _read_image(io.BytesIO(value["bytes"]) if value.get("bytes") else value["path"],
                           value.get("path") or "(embedded bytes)", Image.Image.load)
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
                    raise DatasetError(f"images of {name!r} differ in size ({img.size} vs {size}); "
                                       "set image_size= to resize them")
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
