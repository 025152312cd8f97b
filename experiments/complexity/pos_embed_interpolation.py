"""Fine-tuning at a higher resolution (ViT paper Sec. 3.2): a ViT trained by the suite at one
image size is evaluated, then briefly fine-tuned, at a larger one with the same patch size. The
patch grid grows (28 -> 56 at patch 4: 7x7 -> 14x14), so the learned position table no longer fits
the sequence; the paper resizes it by 2D interpolation. Methods compared:

  bicubic  timm's resample_abs_pos_embed (bicubic), the paper's method;
  nearest  the same with nearest-neighbour interpolation (each old entry covers a block of patches);
  none     no interpolation: the old table kept as it is, covering the top-left patches of the
           new grid (cropped if the grid shrinks); every other patch gets a zero position
           embedding. A table of one grid size cannot be added to a sequence of another, so
           "no interpolation" has to place it somewhere: the top-left keeps each learned entry at
           its own (row, column) index.

The prefix tokens' slot (the class token's position embedding) is carried over unchanged by every
method. Methods differ only in this table: same source weights, same fine-tuning batches and seed.

A control, "native", fine-tunes the same steps at the source size with the table untouched: the
source run is not trained to convergence, so part of any gain after fine-tuning is just more
training; the control measures that part.
"""
from __future__ import annotations

import copy
import inspect
import itertools
import sys
import time
from pathlib import Path

import torch
from torch import nn

from experiments.runs.run.run_config import load_config
from modules.optim import LR_LIMIT, lr_in_range
from experiments.runs.run.trained import load_classifier

METHODS = ("bicubic", "nearest", "none")
NATIVE = "native"  # the control: same fine-tune at the source size, no resize
PHASES = ("source", "before fine-tune", "after fine-tune")


def resize_pos_embed(model: nn.Module, new_image_size: int, method: str = "bicubic") -> nn.Module:
    """Resize, in place, the learned position table of a timm VisionTransformer for square inputs
    of `new_image_size` (same patch size), and set its patch embedding to that size. At the
    model's own size every method leaves pos_embed bit-identical. Returns the model."""
    from timm.layers import PatchEmbed, resample_abs_pos_embed
    if method not in METHODS:
        raise ValueError(f"method={method!r}: allowed {', '.join(METHODS)}")
    pos = getattr(model, "pos_embed", None)
    if not isinstance(pos, nn.Parameter) or not pos.requires_grad \
            or not isinstance(getattr(model, "patch_embed", None), PatchEmbed):
        raise ValueError(f"{type(model).__name__} has no learned position table to resize: allowed a timm "
                         "VisionTransformer with a PatchEmbed and a trainable pos_embed (pos_embed 'learn')")
    patch = model.patch_embed.patch_size  # (ph, pw)
    if isinstance(new_image_size, bool) or not isinstance(new_image_size, int) or new_image_size < 1 \
            or new_image_size % patch[0] or new_image_size % patch[1]:
        raise ValueError(f"new_image_size={new_image_size!r}: allowed a positive multiple of the patch size "
                         f"{patch[0]} (a remainder would drop border pixels)")
    old_grid = model.patch_embed.grid_size
    prefix = 0 if model.no_embed_class else model.num_prefix_tokens  # table rows before the patches
    old = pos.detach().clone()  # (1, prefix + gh * gw, D)
    # timm's own resize: the patch grid, the input size it records, and a bicubic table
    model.set_input_size(img_size=(new_image_size, new_image_size))
    new_grid = model.patch_embed.grid_size
    if method == "bicubic" or new_grid == old_grid:
        return model
    if method == "nearest":
        # nearest-exact samples at pixel centres like bicubic (align_corners=False); torch's "nearest"
        # would shift the table by up to one entry at non-integer ratios (the same at exactly 2x)
        table = resample_abs_pos_embed(old, new_grid, old_grid, num_prefix_tokens=prefix,
                                       interpolation="nearest-exact", antialias=False)
    else:
        grid = old[:, prefix:].reshape(1, *old_grid, -1)        # (1, gh, gw, D)
        placed = grid.new_zeros(1, *new_grid, grid.shape[-1])   # (1, nh, nw, D)
        h, w = min(old_grid[0], new_grid[0]), min(old_grid[1], new_grid[1])
        placed[:, :h, :w] = grid[:, :h, :w]
        table = torch.cat([old[:, :prefix], placed.flatten(1, 2)], dim=1)
    with torch.no_grad():
        model.pos_embed.copy_(table)
    return model


def _load_run(run_dir: str | Path):
    """(ImageClassifier on CPU, the run's config.yaml as a dict) of a suite ViT run with a learned table."""
    classifier = load_classifier(run_dir)
    h = classifier.hparams
    if h.family != "vit" or h.pos_embed not in (None, "learn"):
        raise ValueError(f"run {str(run_dir)!r} trained family {h.family!r} with pos_embed {h.pos_embed!r}: "
                         "allowed family 'vit' with pos_embed 'learn' (a learned position table)")
    return classifier, load_config(run_dir)


def load_source(run_dir: str | Path) -> tuple[nn.Module, dict]:
    """The trained timm ViT of `run_dir`/checkpoints/best.ckpt (on CPU) and the run's data settings
    (config.yaml's data section: dataset, data_dir, fraction/train_size, val_size, seed, split_seed,
    resize_to, augmentation, ...) from which ImageClassificationDataModule rebuilds the same splits."""
    classifier, cfg = _load_run(run_dir)
    return classifier.model, dict(cfg["data"])


def _accuracy(model: nn.Module, loader, device: torch.device, limit: int | None = None) -> tuple[float, int]:
    """(top-1 accuracy, images) of `model` in eval mode over an evaluation loader's first `limit`
    images (all when None): the split's fixed order, so every method sees the same images."""
    model.eval()
    correct = total = 0
    with torch.inference_mode():
        for x, y in loader:
            if limit is not None:
                x, y = x[:limit - total], y[:limit - total]
            logits = model(x.to(device))  # (B, classes)
            correct += int((logits.argmax(1) == y.to(device)).sum())
            total += len(y)
            if total == limit:
                break
    return correct / total, total


def as_lr(value) -> float | None:
    """A learning rate as a spec gives it (YAML reads 1e-4 as text), or None where it is none."""
    try:
        lr = float(value) if not isinstance(value, bool) and isinstance(value, (int, float, str)) else None
    except ValueError:
        return None
    return lr if lr is not None and lr_in_range(lr) else None


def check_study(*, methods, finetune_steps, lr, batch_size, seed: int = 0, data_overrides: dict | None = None,
                eval_images=None, target_size=None) -> None:
    """interpolation_study's settings, checked before anything is trained or loaded (exp-complexity
    checks its spec's with it, before it trains the source run)."""
    from datamodules import ImageClassificationDataModule
    if not isinstance(methods, (list, tuple)) or not methods or any(m not in METHODS for m in methods):
        shown = list(methods) if isinstance(methods, (list, tuple)) else methods
        raise ValueError(f"methods={shown!r}: allowed a non-empty list of {', '.join(METHODS)}")
    for name, value in (("finetune_steps", finetune_steps), ("batch_size", batch_size), ("seed", seed),
                        *((("target_size", target_size),) if target_size is not None else ())):
        low = 0 if name in ("finetune_steps", "seed") else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}={value!r}: allowed integers >= {low}")
    if eval_images is not None and (isinstance(eval_images, bool) or not isinstance(eval_images, int)
                                    or eval_images < 1):
        raise ValueError(f"eval_images={eval_images!r}: allowed null (every image) or integers >= 1")
    if as_lr(lr) is None:
        raise ValueError(f"lr={lr!r}: allowed a learning rate > 0 and {LR_LIMIT}")
    allowed = set(inspect.signature(ImageClassificationDataModule).parameters) - {"resize_to", "batch_size"}
    bad = sorted(set(data_overrides or {}) - allowed)
    if bad:
        raise ValueError(f"data_overrides key {bad[0]!r}: allowed {', '.join(sorted(allowed))} "
                         "(resize_to is target_size, batch_size the argument)")


def interpolation_study(run_dir: str | Path, target_size: int, *, methods=METHODS, finetune_steps: int,
                        lr: float, batch_size: int, seed: int = 0, device: str = "cpu",
                        data_overrides: dict | None = None, eval_images: int | None = None,
                        native_control: bool = True, progress: bool = True) -> list[dict]:
    """Evaluate the run's ViT at its own size ("source"), then for each method at `target_size`
    before and after `finetune_steps` AdamW steps at the fixed `lr` (the run's weight decay,
    betas, label-smoothed cross-entropy and gradient clipping) on batches of the run's training
    split resized to `target_size`. Nothing is selected: no step count or lr is chosen on
    validation or test, both are only reported.

    `seed` sets the fine-tune's batch order and augmentation (the subset stays the run's) and
    torch's RNG; both restart for every method. `data_overrides`: other DataModule arguments (e.g.
    data_dir where the data now lives, eval_batch_size); changing split settings changes the splits.
    With `native_control`, the "native" rows repeat the fine-tune at the source size (module
    docstring). Evaluation and fine-tuning run in fp32. `eval_images` caps each split's evaluation at its first
    N images (a budget: at 56x56 ViT-tiny evaluates a few hundred images/s on 2 CPU cores).

    Rows: method, resolution, phase (source, before fine-tune, after fine-tune), val_acc,
    test_acc, val_images, test_images, finetune_steps (0 before fine-tuning). The source row is
    the same for every method (evaluated once)."""
    from datamodules import ImageClassificationDataModule
    from modules.optim import param_groups
    methods = tuple(methods)
    check_study(methods=methods, finetune_steps=finetune_steps, lr=lr, batch_size=batch_size, seed=seed,
                data_overrides=data_overrides, eval_images=eval_images)
    lr = as_lr(lr)
    device = torch.device(device)

    classifier, cfg = _load_run(run_dir)
    h, source = classifier.hparams, classifier.model
    data = {**cfg["data"], **(data_overrides or {}), "batch_size": batch_size}
    trainer = cfg.get("trainer") or {}
    clip, clip_by_value = trainer.get("gradient_clip_val"), trainer.get("gradient_clip_algorithm") == "value"
    resize_pos_embed(copy.deepcopy(source), target_size)  # a bad target_size fails before any data loads

    def say(text: str) -> None:
        if progress:
            print(f"[pos-embed {target_size}x{target_size}] {text}", file=sys.stderr, flush=True)

    def evaluate(model, dm, method, phase, resolution, steps) -> dict:
        start = time.perf_counter()
        val_acc, val_n = _accuracy(model, dm.val_dataloader(), device, eval_images)
        test_acc, test_n = _accuracy(model, dm.test_dataloader(), device, eval_images)
        say(f"{method + ' ' if method else ''}{phase} at {resolution}: val {val_acc:.4f} test {test_acc:.4f} "
            f"({val_n + test_n} images, {time.perf_counter() - start:.1f} s)")
        return dict(method=method, resolution=resolution, phase=phase, val_acc=val_acc, test_acc=test_acc,
                    val_images=val_n, test_images=test_n, finetune_steps=steps)

    at_source, before, after = PHASES
    native = ImageClassificationDataModule(**data)
    source_row = evaluate(source.to(device), native, None, at_source, h.image_size, 0)
    target = ImageClassificationDataModule(**{**data, "resize_to": target_size})
    rows = []
    for method in (*methods, NATIVE) if native_control else methods:
        if method == NATIVE:
            model, dm, size = copy.deepcopy(source).to(device), native, h.image_size
            rows += [{**source_row, "method": method}, {**source_row, "method": method, "phase": before}]
        else:
            model, dm, size = resize_pos_embed(copy.deepcopy(source), target_size, method).to(device), target, target_size
            rows += [{**source_row, "method": method}, evaluate(model, dm, method, before, size, 0)]
        # A plain loop, not a Trainer: a brief fixed-step fine-tune at a fixed lr has no
        # checkpoints, validation schedule, warmup or run folder for Lightning to manage.
        torch.manual_seed(seed)
        loader = dm.train_dataloader()
        loader.seed = seed  # batch order and augmentation; restarts at epoch 0 for every method
        optimizer = torch.optim.AdamW(param_groups(model, h.weight_decay), lr=lr, betas=tuple(h.betas))
        params = [p for g in optimizer.param_groups for p in g["params"]]
        model.train()
        start = time.perf_counter()
        batches = itertools.chain.from_iterable(loader for _ in itertools.count())  # epochs 0, 1, ...
        for x, y in itertools.islice(batches, finetune_steps):
            loss, _ = classifier.loss_from_outputs(model(x.to(device)), y.to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip:
                (nn.utils.clip_grad_value_ if clip_by_value else nn.utils.clip_grad_norm_)(params, clip)
            optimizer.step()
        say(f"{method} fine-tuned {finetune_steps} steps of {loader.batch_size} at lr {lr:g} "
            f"({time.perf_counter() - start:.1f} s)")
        rows.append(evaluate(model, dm, method, after, size, finetune_steps))
    return rows
