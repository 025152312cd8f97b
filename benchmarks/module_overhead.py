"""Training throughput of the LightningModule (Trainer, metrics, logging, clipping, schedule)
against a plain PyTorch loop over the same model, batches, optimiser, schedule, clipping and
precision, interleaved in one run. Goal: Lightning's overhead under 5%.

    make bench          # or: python benchmarks/module_overhead.py --family vit --steps 60 --batch 32
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger

from datamodules import ImageClassificationDataModule
from experiments.runs.run.cli import default_precision
from experiments.runs.run.provenance import hardware, versions
from modules import ImageClassifier, build_model
from modules.optim import adamw_warmup_cosine
from modules.registry import use_fused_attention

WARMUP = 5  # steps excluded from the timing (allocator, autocast caches)


class StepTimer(Callback):
    def __init__(self):
        self.start = self.end = None
        self.images = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == WARMUP:
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.start is not None:
            self.images += len(batch[1])
            self.end = time.perf_counter()


def lightning_run(family: str, dm, steps: int, precision: str) -> float:
    torch.manual_seed(0)
    model = ImageClassifier(family, num_classes=dm.num_classes, image_size=dm.image_size, in_chans=dm.num_channels)
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = L.Trainer(max_steps=steps, precision=precision, gradient_clip_val=1.0, limit_val_batches=0,
                            logger=TensorBoardLogger(tmp, name="bench"), log_every_n_steps=20,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            callbacks=[timer])
        trainer.fit(model, datamodule=dm)
    return timer.images / (timer.end - timer.start)


def plain_run(family: str, dm, steps: int, precision: str) -> float:
    if family == "deit":
        raise SystemExit("use a family with one head for this comparison")
    torch.manual_seed(0)
    h = ImageClassifier(family, num_classes=dm.num_classes, image_size=dm.image_size, in_chans=dm.num_channels).hparams
    model = build_model(family, image_size=dm.image_size, in_chans=dm.num_channels, num_classes=dm.num_classes)
    use_fused_attention(model, False)  # the kernel ImageClassifier.setup picks, on every device
    optimizer, schedule = adamw_warmup_cosine(model, lr=h.lr, weight_decay=h.weight_decay, betas=h.betas,
                                              total_steps=steps, warmup_fraction=h.warmup_fraction,
                                              min_lr_ratio=h.min_lr_ratio)
    autocast = torch.autocast("cpu" if not torch.cuda.is_available() else "cuda", dtype=torch.bfloat16,
                              enabled=precision.startswith("bf16"))
    model.train()
    step, images, start = 0, 0, None
    while step < steps:
        for x, y in dm.train_dataloader():
            if step == WARMUP:
                start = time.perf_counter()
            with autocast:
                loss = F.cross_entropy(model(x), y, label_smoothing=h.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            if start is not None:
                images += len(y)
            step += 1
            if step == steps:
                break
    return images / (time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", default="vit", help="family to time (default vit)")
    p.add_argument("--steps", type=int, default=60, help="optimisation steps per timed run (default 60)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats of each (default 3)")
    p.add_argument("--batch", type=int, default=128,
                   help="images a step (default 128; the cpu profiles train at 32, where a step's fixed cost weighs more)")
    a = p.parse_args()
    precision = default_precision()
    dm = ImageClassificationDataModule("fashion_mnist", batch_size=a.batch)
    dm.setup("fit")
    plain, lit = [], []
    for _ in range(a.repeats):
        plain.append(plain_run(a.family, dm, a.steps, precision))
        lit.append(lightning_run(a.family, dm, a.steps, precision))
    p_med, l_med = statistics.median(plain), statistics.median(lit)
    print(f"hardware: {hardware()}; torch {versions()['torch']}, lightning {versions()['lightning']}")
    print(f"{a.family}-tiny, batch {a.batch}, {precision}, {a.steps - WARMUP} timed steps x {a.repeats} interleaved repeats")
    print(f"plain PyTorch loop : {p_med:8.1f} images/s  (runs: {', '.join(f'{v:.0f}' for v in plain)})")
    print(f"LightningModule    : {l_med:8.1f} images/s  (runs: {', '.join(f'{v:.0f}' for v in lit)})")
    print(f"overhead           : {(p_med - l_med) / p_med:8.1%}  (goal: under 5%)")


if __name__ == "__main__":
    main()
