"""The one DataModule every family trains on: same examples, same splits, same augmentation."""
from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn, TrainerStatus
import numpy as np
import torch

from modules.files import write_atomic

from .batch_augment import AugmentConfig, BatchAugment, strong_inputs
from .sources import FASHION_MNIST, FASHION_MNIST_CLASSES, load_decoded
from .splits import default_val_size, resolve_train_size, split_train_val, training_subset
from .tensor_loader import TensorBatchLoader

# Datasets whose classes change meaning under a mirror (digits); everything else flips.
NO_HFLIP = {"mnist", "ylecun/mnist", "svhn", "ufldl-stanford/svhn", "emnist"}
MAX_SIDE = 4096  # the largest image side resize_to and crop_padding take, in pixels


def fixed_shape(dataset: str, resize_to: int | None) -> dict[str, int] | None:
    """num_classes, image_size and in_chans of a dataset whose shape is known without loading it
    (Fashion-MNIST, whose first use would decode or download it); None for any other."""
    if dataset != FASHION_MNIST:
        return None
    return {"num_classes": len(FASHION_MNIST_CLASSES), "image_size": resize_to or 28, "in_chans": 1}


class ImageClassificationDataModule(L.LightningDataModule):
    """Image classification data for every family, through Hugging Face `datasets`.

    Args:
        dataset: 'fashion_mnist' (offline default, Debian's IDX files), a hub name such as
            'uoft-cs/cifar10', or a folder of class sub-folders (HF imagefolder).
        data_dir: folder of the Fashion-MNIST IDX files (default $FASHION_MNIST_DIR or
            /usr/share/datasets/fashion-mnist).
        image_column: image column of a hub dataset (default: detect image/img).
        label_column: label column of a hub dataset (default: detect label/fine_label).
        resize_to: resize every image to this square size when decoding (default: native size).
        fraction: share of the training pool to train on, in (0, 1]; nested across fractions.
        train_size: absolute number of training images instead of fraction.
        val_size: validation images held out of the train split (default min(5000, 10%)).
        seed: draws the training subset and the batch order.
        split_seed: draws the validation split; fixed so every run validates on the same images.
        batch_size: training batch size (per device).
        eval_batch_size: validation and test batch size. 256, not more: on the CPU a tiny model
            evaluates 1.5x faster in batches of 250 than of 1,000 (ViT-tiny, 3,152 vs 2,141 img/s);
            not part of a run's identity.
        crop_padding: random crop with this zero padding (default max(2, image_size // 16); 0 = off).
        hflip: random horizontal flip (default: on, except for digit datasets).
        randaugment: torchvision's RandAugment (2 ops, magnitude 9) on uint8 batches, ops drawn per image.
        random_erasing: per-image probability of timm's Random Erasing (0 = off).
        mixup_alpha: MixUp alpha (0 = off); targets become soft.
        cutmix_alpha: CutMix alpha (0 = off); targets become soft.
        cache_dir: where decoded datasets are cached (default $VIT_FAMILIES_CACHE or ~/.cache/vit-families).
    """

    def __init__(self, dataset: str = FASHION_MNIST, data_dir: str | None = None,
                 image_column: str | None = None, label_column: str | None = None,
                 resize_to: int | None = None, fraction: float = 1.0, train_size: int | None = None,
                 val_size: int | None = None, seed: int = 0, split_seed: int = 0,
                 batch_size: int = 128, eval_batch_size: int = 256,
                 crop_padding: int | None = None, hflip: bool | None = None,
                 randaugment: bool = False, random_erasing: float = 0.0,
                 mixup_alpha: float = 0.0, cutmix_alpha: float = 0.0,
                 cache_dir: str | None = None):
        super().__init__()
        if not 0.0 < fraction <= 1.0:  # fail before any loading
            raise ValueError(f"fraction={fraction} is outside (0, 1]")
        if train_size is not None and train_size < 1:
            raise ValueError(f"train_size={train_size} must be a positive number of images")
        if not 0.0 <= random_erasing <= 1.0:
            raise ValueError(f"random_erasing={random_erasing} is a probability: allowed [0, 1]")
        for name, value in (("seed", seed), ("split_seed", split_seed)):
            if value < 0:
                raise ValueError(f"{name}={value} is negative: allowed integers >= 0")
        for name, value in (("batch_size", batch_size), ("eval_batch_size", eval_batch_size)):
            if value < 1:
                raise ValueError(f"{name}={value}: allowed integers >= 1")
        if val_size is not None and val_size < 1:
            raise ValueError(f"val_size={val_size}: allowed integers >= 1 (images held out for validation)")
        # 0 would be read as "no resize" under another identity; past MAX_SIDE one decoded image alone
        # takes gigabytes (a typo's 100000 exhausted memory)
        if resize_to is not None and not 1 <= resize_to <= MAX_SIDE:
            raise ValueError(f"resize_to={resize_to}: allowed a size in pixels from 1 to {MAX_SIDE}, or null for the "
                             "native size")
        if crop_padding is not None and not 0 <= crop_padding <= MAX_SIDE:
            raise ValueError(f"crop_padding={crop_padding}: allowed integers from 0 (no random crop) to {MAX_SIDE}")
        for name, value in (("mixup_alpha", mixup_alpha), ("cutmix_alpha", cutmix_alpha)):
            if not value >= 0:  # a Beta(alpha, alpha) parameter; `not >=` also catches nan
                raise ValueError(f"{name}={value}: allowed a float >= 0 (0 = off)")
        self.save_hyperparameters()
        self.dataset, self.fraction, self.train_size_arg = dataset, fraction, train_size
        self.seed, self.split_seed = seed, split_seed
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self._augment_args = dict(crop_padding=crop_padding, hflip=hflip, randaugment=randaugment,
                                  random_erasing=random_erasing, mixup_alpha=mixup_alpha,
                                  cutmix_alpha=cutmix_alpha)
        self._load_args = dict(data_dir=data_dir, image_column=image_column, label_column=label_column,
                               image_size=resize_to, cache_dir=cache_dir)
        self.val_size_arg = val_size
        self._device = torch.device("cpu")

    # ---- what the models need (loads the cached dataset on first use) ----
    @cached_property
    def _decoded(self):
        return load_decoded(self.dataset, **self._load_args).with_format("numpy")

    @cached_property
    def _train_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        split = self._decoded["train"]
        # Arrow hands Array3D back as int64: store uint8 (8x less memory, cheaper batch ops)
        return np.asarray(split["image"][:], dtype=np.uint8), np.asarray(split["label"][:], dtype=np.int64)

    @property
    def image_size(self) -> int:
        return int(self._decoded["train"].features["image"].shape[0])

    @property
    def num_channels(self) -> int:
        return int(self._decoded["train"].features["image"].shape[2])

    @property
    def test_size(self) -> int:
        """Images in the test split (the probes read its first ones)."""
        return len(self._decoded["test"])

    @property
    def class_names(self) -> list[str]:
        return list(self._decoded["train"].features["label"].names)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def shape(self) -> dict[str, int]:
        """num_classes, image_size and in_chans (loads the data unless they are fixed)."""
        return fixed_shape(self.dataset, self._load_args["image_size"]) \
            or {"num_classes": self.num_classes, "image_size": self.image_size, "in_chans": self.num_channels}

    # ---- splits ----
    @cached_property
    def _splits(self) -> dict[str, np.ndarray]:
        _, labels = self._train_arrays
        val_size = self.val_size_arg if self.val_size_arg is not None else default_val_size(len(labels))
        pool, val = split_train_val(labels, val_size, self.split_seed)
        n = resolve_train_size(self.fraction, self.train_size_arg, len(pool))
        classes = len(np.unique(labels[pool]))
        if self.train_size_arg is None and n < classes:  # some class would never be trained on
            raise ValueError(f"fraction={self.fraction:g} leaves {n} training image(s) of a pool of {len(pool)}, "
                             f"fewer than its {classes} classes: allowed fractions >= {classes}/{len(pool)} "
                             "(one image per class), or data.train_size")
        train = training_subset(pool, labels[pool], n, self.seed)
        return {"pool": pool, "val": val, "train": train}

    def check_sizes(self) -> None:
        """val_size and train_size against the dataset's train split (loads it): called before a run
        folder is made, so a size the data cannot give writes nothing."""
        self._splits

    @property
    def train_indices(self) -> np.ndarray:
        """Indices into the dataset's train split of the images this run trains on."""
        return self._splits["train"]

    @property
    def val_indices(self) -> np.ndarray:
        return self._splits["val"]

    @property
    def train_size(self) -> int:
        return len(self._splits["train"])

    def save_train_indices(self, path: str | Path) -> None:
        """The training subset as JSON in a run folder: atomic, never through a link (modules.files)."""
        write_atomic(path, json.dumps({
            "dataset": self.dataset, "seed": self.seed, "split_seed": self.split_seed,
            "fraction": self.fraction, "train_size": self.train_size,
            "indices": self.train_indices.tolist()}))

    @cached_property
    def normalization(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-channel mean and std (0-255 units) over the training pool, fixed for every fraction."""
        images, _ = self._train_arrays
        pool = images[self._splits["pool"]]  # (N, H, W, C)
        mean = pool.mean(axis=(0, 1, 2), dtype=np.float64)
        std = np.sqrt(((pool.astype(np.float32) - mean) ** 2).mean(axis=(0, 1, 2), dtype=np.float64))
        return torch.tensor(mean, dtype=torch.float32), torch.tensor(std, dtype=torch.float32)

    @cached_property
    def augment(self) -> BatchAugment:
        a = dict(self._augment_args)
        if a["crop_padding"] is None:
            a["crop_padding"] = max(2, self.image_size // 16)
        if a["hflip"] is None:
            a["hflip"] = self.dataset not in NO_HFLIP
        mean, std = self.normalization
        return BatchAugment(AugmentConfig(**a), mean, std, self.num_classes)

    # ---- Lightning hooks ----
    def prepare_data(self) -> None:
        load_decoded(self.dataset, **self._load_args)  # decode + cache once, on one process

    # splits each stage reads: a fit never loads the test split (it is for reporting only, and
    # nothing a fit decides, such as the tested checkpoint or a tuned learning rate, may see it)
    STAGE_SPLITS = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ("test",)}

    def setup(self, stage: str | None = None, device: torch.device | None = None) -> None:
        """The stage's splits as tensors on the Trainer's device, or on `device` (a loop of its own)."""
        if self.trainer is not None:
            self._device = self.trainer.strategy.root_device
        elif device is not None:
            self._device = torch.device(device)
        self.augment.to(self._device)
        self._tensors = {}  # split name -> (uint8 NCHW, int64), on the training device
        for name in self.STAGE_SPLITS.get(stage, ("train", "val", "test")):
            self._split_tensors(name)

    def _split_tensors(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        if name not in self.__dict__.setdefault("_tensors", {}):
            if name == "test":
                self._tensors[name] = self._to_device(*self._test_arrays())
            else:
                images, labels = self._train_arrays
                idx = self._splits[name]
                self._tensors[name] = self._to_device(images[idx], labels[idx])
        return self._tensors[name]

    def _test_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        test = self._decoded["test"]
        return np.asarray(test["image"][:], dtype=np.uint8), np.asarray(test["label"][:], dtype=np.int64)

    def _to_device(self, images: np.ndarray, labels: np.ndarray):
        x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).contiguous()  # NHWC -> NCHW
        return x.to(self._device), torch.from_numpy(labels).to(self._device)

    def _rank_world(self) -> tuple[int, int]:
        if self.trainer is None:
            return 0, 1
        return self.trainer.global_rank, self.trainer.world_size

    def train_dataloader(self) -> TensorBatchLoader:
        return self.train_loader(position=self._train_position if self.trainer is not None else None)

    def train_loader(self, position=None, draws_only: bool = False) -> TensorBatchLoader:
        """The training batches (train_dataloader's, also outside a Trainer). position: where a pass
        starts (TensorBatchLoader's). draws_only: batches are (uint8 x, y, crop and flip draws),
        augmentation left undone, for a step that augments on its own (modules.packed_step), which
        draws the strong stages' numbers from strong_inputs and the batch's place itself."""
        rank, world = self._rank_world()
        x, y = self._split_tensors("train")
        augment = self.augment
        if draws_only:
            transform = lambda xb, yb, g, place: (xb, yb, augment.draws(len(yb), g))  # noqa: E731
        else:
            strong = strong_inputs([augment.cfg], [self.seed], tuple(x.shape[2:]), x.device)
            transform = lambda xb, yb, g, place: augment.train(xb, yb, g, strong, place)  # noqa: E731
        return TensorBatchLoader(x, y, min(self.batch_size, len(y)), transform=transform,
                                 shuffle=True, drop_last=True, seed=self.seed, rank=rank, world_size=world,
                                 position=position)

    @property
    def source(self) -> tuple:
        """The dataset and how it is read: DataModules with the same source decode the same images."""
        return self.dataset, tuple(sorted(self._load_args.items()))

    def share_decoded(self, other: "ImageClassificationDataModule") -> None:
        """Read the decoded images of `other` (the same source) instead of decoding them again: the
        members of a packed group, and the groups of a stage, each have DataModules of their own."""
        if self.source == other.source:
            for key in ("_decoded", "_train_arrays"):
                if key in other.__dict__:
                    self.__dict__[key] = other.__dict__[key]

    def _train_position(self) -> tuple[int, int] | None:
        """(epoch, batches of it already trained) when a training pass starts during a fit. Read from
        the trainer's progress at that moment, after Lightning restored any checkpoint (a checkpoint
        taken after an epoch's last batch resumes with the next epoch). None outside a running fit
        (the loader then counts its own passes)."""
        state = self.trainer.state
        if state.fn != TrainerFn.FITTING or state.status != TrainerStatus.RUNNING:
            return None
        progress = self.trainer.fit_loop.epoch_loop.batch_progress
        epoch = self.trainer.current_epoch
        if progress.is_last_batch:
            return epoch + 1, 0
        return epoch, progress.current.ready

    def _eval_loader(self, split: str) -> TensorBatchLoader:
        rank, world = self._rank_world()
        x, y = self._split_tensors(split)
        normalize = lambda xb, yb, g, place: (self.augment.normalize(xb), yb)  # noqa: E731
        return TensorBatchLoader(x, y, self.eval_batch_size, transform=normalize, rank=rank, world_size=world)

    def val_dataloader(self) -> TensorBatchLoader:
        return self._eval_loader("val")

    def test_dataloader(self) -> TensorBatchLoader:
        return self._eval_loader("test")
