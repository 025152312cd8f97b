"""The one LightningModule that trains every family with the same recipe.

Families differ only in what `build_model` returns; DeiT differs in its loss (distillation token).
"""
from __future__ import annotations

import time
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn
from torchmetrics import MaxMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassCalibrationError

from .budgets import distils, names
from .checkpoint_io import read_checkpoint
from .complexity import complexity
from .distillation import DISTILLATION_TYPES, deit_heads, distillation_loss, freeze
from .optim import LR_LIMIT, adamw_warmup_cosine, lr_in_range
from .registry import build_model, use_fused_attention


TRAINING_OPTIONS = ("family", "lr", "weight_decay", "betas", "warmup_fraction", "min_lr_ratio", "label_smoothing",
                    "distillation", "distill_alpha", "distill_tau", "teacher_checkpoint")


def check_training(family: str, lr: float, weight_decay: float, betas, warmup_fraction: float, min_lr_ratio: float,
                   label_smoothing: float, distillation: str, distill_alpha: float, distill_tau: float,
                   teacher_checkpoint: str | None) -> None:
    """The optimisation and distillation options, checked without building anything (a sweep checks
    every variant's before its first run trains; ImageClassifier checks its own)."""
    if distillation not in DISTILLATION_TYPES:
        raise ValueError(f"distillation={distillation!r}: allowed {', '.join(DISTILLATION_TYPES)}")
    if not lr_in_range(lr):
        raise ValueError(f"lr={lr}: allowed a learning rate > 0 and {LR_LIMIT}")
    if not 0.0 <= label_smoothing < 1.0:  # at 1 the targets are uniform: nothing left to learn
        raise ValueError(f"label_smoothing={label_smoothing}: allowed [0, 1)")
    if not 0.0 <= warmup_fraction <= 1.0:
        raise ValueError(f"warmup_fraction={warmup_fraction}: allowed a share of the steps in [0, 1]")
    if not weight_decay >= 0:  # `not >=` also catches nan
        raise ValueError(f"weight_decay={weight_decay}: allowed a float >= 0")
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio={min_lr_ratio}: allowed the final lr as a share of the peak, in [0, 1]")
    if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
        raise ValueError(f"betas={list(betas)}: allowed two AdamW decay rates in [0, 1), such as [0.9, 0.999]")
    if not 0.0 <= distill_alpha <= 1.0:
        raise ValueError(f"distill_alpha={distill_alpha}: allowed the distillation loss's weight in [0, 1]")
    if not distill_tau > 0:
        raise ValueError(f"distill_tau={distill_tau}: allowed a softmax temperature > 0")
    if teacher_checkpoint is not None and not distils(family):
        raise ValueError(f"teacher_checkpoint applies to family {students()} only, not {family!r}")


class ImageClassifier(L.LightningModule):
    """The model: any family, trained by one recipe.

    AdamW (no decay on norms, biases, position embeddings, tokens), linear warmup then cosine decay
    per step, label smoothing; gradient clipping and bf16 come from the Trainer
    (experiments/configs/default.yaml).

    Args:
        family: vit, deit, swin, convnext, hybrid or resnet.
        budget: tiny (~0.5M parameters), small (~2M) or base (~5M).
        num_classes: classes of the data (linked from the DataModule by the CLI).
        image_size: square input size (linked from the DataModule).
        in_chans: input channels (linked from the DataModule).
        patch_size: patch size (vit/deit/swin/hybrid) or stem patch (convnext); None = family default.
        pos_embed: learn (1D learned), none, sincos (fixed 2D) or learn2d (learned rows + columns,
            ViT paper App. D.4); vit/deit/hybrid.
        pool: token ([CLS]) or avg (global average pooling); vit/hybrid.
        window_size: Swin window; None = the largest <= 8 that divides every stage grid.
        allow_unshifted: Swin: accept a window_size at which no stage shifts its windows (each stage
            then attends globally, unshifted); without it such a window is refused.
        drop_path_rate: stochastic depth rate.
        lr: peak learning rate of AdamW.
        weight_decay: AdamW weight decay on weight matrices.
        betas: AdamW betas.
        warmup_fraction: share of all optimisation steps spent in linear warmup.
        min_lr_ratio: final learning rate as a share of the peak (cosine floor).
        label_smoothing: label smoothing of the cross-entropy (also applied to MixUp/CutMix targets).
        distillation: DeiT: hard (teacher's argmax), soft (KL at distill_tau) or none (cls head only:
            the untrained distillation head is left out of the reported accuracy, and no teacher runs).
        distill_alpha: DeiT: weight of the distillation loss.
        distill_tau: DeiT: temperature of soft distillation.
        teacher_checkpoint: DeiT: checkpoint of a model trained by this suite (frozen CNN teacher).
            Without one, DeiT trains its distillation head on the labels. Ignored (not even opened,
            with a warning) when distillation is none.
    """

    def __init__(self, family: str = "vit", budget: str = "tiny", num_classes: int = 10, image_size: int = 28,
                 in_chans: int = 1, patch_size: int | None = None, pos_embed: str | None = None,
                 pool: str | None = None, window_size: int | None = None, drop_path_rate: float = 0.0,
                 allow_unshifted: bool = False,
                 lr: float = 3e-3, weight_decay: float = 0.05, betas: tuple[float, float] = (0.9, 0.999),
                 warmup_fraction: float = 0.05, min_lr_ratio: float = 0.01, label_smoothing: float = 0.1,
                 distillation: str = "hard", distill_alpha: float = 0.5, distill_tau: float = 1.0,
                 teacher_checkpoint: str | None = None):
        super().__init__()
        check_training(family=family, lr=lr, weight_decay=weight_decay, betas=betas, warmup_fraction=warmup_fraction,
                       min_lr_ratio=min_lr_ratio, label_smoothing=label_smoothing, distillation=distillation,
                       distill_alpha=distill_alpha, distill_tau=distill_tau, teacher_checkpoint=teacher_checkpoint)
        self.save_hyperparameters()
        self.model = build_model(family, budget, image_size=image_size, in_chans=in_chans,
                                 num_classes=num_classes, patch_size=patch_size, pos_embed=pos_embed,
                                 pool=pool, window_size=window_size, drop_path_rate=drop_path_rate,
                                 allow_unshifted=allow_unshifted)
        self.is_deit = distils(family)  # its network returns (cls, dist) logits
        # DeiT reports (cls + dist) / 2 when its dist head learns (from the teacher or the labels);
        # with distillation none that head gets no gradient, so cls alone is reported (and selected on).
        self.deit_reports_cls = self.is_deit and distillation == "none"
        # The teacher lives outside the module tree (set through __dict__): it is then in no
        # parameters(), state_dict() or checkpoint, and Lightning's train() never touches it.
        self.__dict__["teacher"] = None
        self._complexity: dict | None = None  # counted on first use (the `complexity` property)

        # "avg" holds the reported head (val/acc, test/acc): the model's output, or for DeiT
        # reported_logits(cls, dist); DeiT also logs each head (_cls, _dist).
        heads = ("", "_cls", "_dist") if self.is_deit else ("",)
        # validate_args=False: the argument checks call torch.unique, a host sync every step
        self.train_metrics = self._metrics("train/", "", validate_args=False)
        self.val_metrics = nn.ModuleDict({h or "avg": self._metrics("val/", h) for h in heads})
        self.test_metrics = nn.ModuleDict({h or "avg": self._metrics("test/", h, calibration=True) for h in heads})
        self.val_acc_best = MaxMetric()
        self._restored_val_acc_best: float | None = None
        self._images, self._seconds, self._last_end = 0, 0.0, None
        self._loss_sum, self._loss_n = None, 0     # this epoch's training loss: (,) sum over images, count
        self._nan_step = self._nan_loss = None     # (,) first step with a non-finite loss (-1: none), its loss
        # DeiT with a teacher: on how many training images its hard label differed from the true one
        self._teacher_differs, self._teacher_images = None, 0   # (,) count on the device, images

    @property
    def complexity(self) -> dict:
        """{"params", "flops"} of the network for one image, counted when first asked for (the
        logger's hparams, a checkpoint, the run's summary), not at construction; flops is None where
        the counter failed (modules/complexity.py), so counting can never stop a fit."""
        if self._complexity is None:
            self._complexity = complexity(self.model, self.hparams.image_size, self.hparams.in_chans)
        return self._complexity

    def _metrics(self, prefix: str, postfix: str, calibration: bool = False,
                 validate_args: bool = True) -> MetricCollection:
        c = self.hparams.num_classes
        m = {"acc": MulticlassAccuracy(c, top_k=1, average="micro", validate_args=validate_args)}
        if c >= 10:
            m["acc_top5"] = MulticlassAccuracy(c, top_k=5, average="micro", validate_args=validate_args)
        if calibration:
            m["ece"] = MulticlassCalibrationError(c, n_bins=15, norm="l1")
        return MetricCollection(m, prefix=prefix, postfix=postfix)

    # ---------------- teacher ----------------
    def setup(self, stage: str) -> None:
        # one attention kernel on every device, for single runs and packed members alike: the explicit
        # matmuls (registry.use_fused_attention: 2x faster than SDPA on the CPU, and the only kernel
        # with a vmap batching rule there), so a run trained alone or packed is the same run
        use_fused_attention(self.model, False)
        if stage == "fit" and self.is_deit and self.teacher is None:
            path = self.hparams.teacher_checkpoint
            if self.hparams.distillation == "none":
                # the sweep hands every DeiT run its teacher: with none it is neither loaded nor run
                if path is not None:
                    rank_zero_warn(f"deit: distillation='none': teacher_checkpoint {path!r} is ignored")
            elif path is None:
                rank_zero_warn("deit: no teacher_checkpoint given: the distillation head trains on the labels")
            else:
                self.__dict__["teacher"] = load_teacher(path, self.hparams)
                use_fused_attention(self.teacher, False)

    def _teacher_logits(self, x: torch.Tensor) -> torch.Tensor:
        if next(self.teacher.parameters()).device != x.device:
            self.teacher.to(x.device)
        self.teacher.eval()
        with torch.no_grad():
            return self.teacher(x)

    # ---------------- losses ----------------
    def _ce(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        eps = self.hparams.label_smoothing
        if y.ndim == 2:  # soft targets from MixUp/CutMix
            y = y * (1 - eps) + eps / logits.shape[1]
            return torch.sum(-y * F.log_softmax(logits, dim=1), dim=1).mean()
        return F.cross_entropy(logits, y, label_smoothing=eps)

    def training_loss(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, logits used for train accuracy). x: (B, C, H, W); y: (B,) or soft (B, classes)."""
        out = self.model(x)  # DeiT: (cls, dist) (training mode + set_distilled_training(True))
        teacher = self.is_deit and self.teacher is not None and self.hparams.distillation != "none"
        logits = self._teacher_logits(x) if teacher else None
        if logits is not None:
            self._count_teacher_labels(logits, y)
        return self.loss_from_outputs(out, y, logits)

    def _count_teacher_labels(self, teacher_logits: torch.Tensor, y: torch.Tensor) -> None:
        """Counts the augmented training images on which the teacher's hard label (its argmax)
        differs from the true label (a soft MixUp/CutMix target: its largest share), on the device
        with no host sync: how much a hard-distilled student can learn from its teacher beyond the
        labels. Reads the teacher's output only: the training computation is unchanged."""
        true = y.argmax(dim=1) if y.ndim == 2 else y
        differs = (teacher_logits.argmax(dim=1) != true).sum()
        self._teacher_differs = differs if self._teacher_differs is None else self._teacher_differs + differs
        self._teacher_images += true.shape[0]

    def teacher_labels(self) -> dict | None:
        """{differs, images, rate}: the teacher's hard labels against the true ones over the
        training images seen so far (None without a teacher that ran)."""
        if self._teacher_differs is None or not self._teacher_images:
            return None
        differs = int(self._teacher_differs)
        return {"differs": differs, "images": self._teacher_images, "rate": round(differs / self._teacher_images, 6)}

    def loss_from_outputs(self, out, y: torch.Tensor, teacher_logits: torch.Tensor | None = None):
        """training_loss from the model's training output `out` (logits (B, classes), DeiT: the pair
        (cls, dist)) and, for DeiT, the teacher's logits (B, classes) or None (no teacher)."""
        if not self.is_deit:
            return self._ce(out, y), out
        cls, dist = out
        base = self._ce(cls, y)
        kind, a = self.hparams.distillation, self.hparams.distill_alpha
        if kind == "none":  # DeiT's losses.py: the cls head's loss only; no teacher runs
            loss = base
        elif teacher_logits is not None:
            loss = distillation_loss(base, dist, teacher_logits, kind, a, self.hparams.distill_tau)
        else:  # no teacher: the dist head learns the labels too
            loss = (1 - a) * base + a * self._ce(dist, y)
        return loss, self.reported_logits(cls, dist)

    def reported_logits(self, cls: torch.Tensor, dist: torch.Tensor) -> torch.Tensor:
        """DeiT's reported prediction: (cls + dist) / 2, or cls alone with distillation none (its
        dist head never trains then)."""
        return cls if self.deit_reports_cls else (cls + dist) / 2

    # ---------------- steps ----------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def training_step(self, batch, batch_idx):
        # Nothing here waits for the device: the divergence flag and the logged values stay on it
        # and are read on the host only at log intervals (Lightning's), before validation, at the
        # end of an epoch and before every checkpoint (_check_finite).
        x, y = batch
        loss, logits = self.training_loss(x, y)
        self._watch_divergence(loss)
        hard_y = y.argmax(dim=1) if y.ndim == 2 else y
        self.train_metrics.update(logits.detach(), hard_y)
        n = x.shape[0]
        self._loss_sum = loss.detach() * n + (0 if self._loss_sum is None else self._loss_sum)
        self._loss_n += n
        # the step value is not reduced over processes (a collective every step); the epoch mean is
        self.log("train/loss_step", loss.detach(), on_step=True, on_epoch=False, prog_bar=True)
        if self._log_step():  # a Python float becomes a device tensor (a copy): at log steps only
            self.log("train/lr", self.optimizers().param_groups[0]["lr"], on_step=True, on_epoch=False)
        return loss

    def _log_step(self) -> bool:
        """Whether Lightning writes this step's logged values (log_every_n_steps)."""
        return self._trainer is not None and self.trainer._logger_connector.should_update_logs

    # ---------------- divergence: flagged on the device, checked on the host now and then ----------------
    def _watch_divergence(self, loss: torch.Tensor) -> None:
        if self._nan_step is None:
            self._nan_step = torch.full((), -1, dtype=torch.long, device=loss.device)
            self._nan_loss = torch.zeros((), device=loss.device)
        first = ~torch.isfinite(loss.detach()) & (self._nan_step < 0)  # (,) bool, no host sync
        self._nan_step = torch.where(first, self.global_step, self._nan_step)
        self._nan_loss = torch.where(first, loss.detach().float(), self._nan_loss)

    def _check_finite(self) -> None:
        """Raise FloatingPointError if a training loss was NaN or infinite since training started
        (recorded as diverged). One host sync; every process gets the same answer (all_gather), so
        all stop together. A NaN model is thus never validated, checkpointed or trained on for
        more than one log interval."""
        if self._nan_step is None:
            return
        steps, losses = self._nan_step, self._nan_loss
        if self._trainer is not None and self.trainer.world_size > 1:
            steps, losses = self.all_gather(steps), self.all_gather(losses)
        steps, losses = steps.reshape(-1).cpu(), losses.reshape(-1).cpu()
        if (steps >= 0).any():
            i = int(torch.where(steps >= 0, steps, steps.max() + 1).argmin())
            raise FloatingPointError(f"diverged: loss is {losses[i].item()} at step {int(steps[i])} "
                                     f"(checked at step {self.global_step})")

    def on_train_epoch_end(self) -> None:
        self._check_finite()
        # a fit resumed from a checkpoint taken at an epoch's end ends that epoch before any step:
        # nothing to log (an empty metric computes 0, a spike in every train chart)
        if self._loss_sum is not None:
            self.log("train/loss_epoch", self._loss_sum / self._loss_n, prog_bar=True, sync_dist=True)
            self.log_dict(_drain(self.train_metrics), sync_dist=True)
        self._loss_sum, self._loss_n = None, 0
        if self._seconds > 0:
            self.log("train/images_per_sec", self._images / self._seconds, sync_dist=True)
        self._images, self._seconds, self._last_end = 0, 0.0, None

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        # Wall time between consecutive batch ends (data + forward + backward + step); the first
        # batch of an epoch is skipped because validation ran before it. On a GPU this is the time
        # the host takes to queue a step; summed over an epoch it is the device's (the queue is bounded).
        now = time.perf_counter()
        if self._last_end is not None:
            n = batch[0].shape[0] * self.trainer.world_size
            self._images, self._seconds = self._images + n, self._seconds + now - self._last_end
            if self._log_step():
                self.log("train/images_per_sec_step", n / (now - self._last_end), on_step=True, on_epoch=False)
        self._last_end = now
        if self._log_step():  # every log_every_n_steps steps
            self._check_finite()

    def on_validation_start(self) -> None:
        self._check_finite()

    def _eval_logits(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        if not self.is_deit:
            return {"avg": self.model(x)}
        cls, dist = deit_heads(self.model, x)
        return {"avg": self.reported_logits(cls, dist), "_cls": cls, "_dist": dist}

    def _eval_step(self, batch, metrics: nn.ModuleDict, stage: str) -> None:
        x, y = batch
        outs = self._eval_logits(x)
        for head, logits in outs.items():
            metrics[head].update(logits.float(), y)
        self.log(f"{stage}/loss", F.cross_entropy(outs["avg"].float(), y), on_epoch=True, sync_dist=True,
                 batch_size=len(y))

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, self.val_metrics, "val")

    def on_validation_epoch_end(self) -> None:
        values = _drain(*self.val_metrics.values())
        self.val_acc_best(values["val/acc"])
        values["val/acc_best"] = self.val_acc_best.compute()
        self.log("val/acc", values.pop("val/acc"), prog_bar=True, sync_dist=True)
        self.log_dict(values, sync_dist=True)

    def test_step(self, batch, batch_idx):
        self._eval_step(batch, self.test_metrics, "test")

    def on_test_epoch_end(self) -> None:
        self.log_dict(_drain(*self.test_metrics.values()), sync_dist=True)

    # ---------------- recipe ----------------
    def configure_optimizers(self):
        h = self.hparams
        optimizer, schedule = adamw_warmup_cosine(
            self.model, lr=h.lr, weight_decay=h.weight_decay, betas=tuple(h.betas),
            total_steps=int(self.trainer.estimated_stepping_batches),
            warmup_fraction=h.warmup_fraction, min_lr_ratio=h.min_lr_ratio)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def optimizer_step(self, *args, **kwargs) -> None:
        """An update too large for the weights' float type (an lr near float32's largest over AdamW's
        bias correction, or fp16 weights) is a divergence, recorded as such, not a failure."""
        try:
            super().optimizer_step(*args, **kwargs)
        except RuntimeError as e:
            if "without overflow" not in str(e):
                raise
            raise FloatingPointError(f"diverged: the optimiser's update overflowed at step {self.global_step} "
                                     f"({e})") from None

    def on_train_start(self) -> None:
        self.val_acc_best.reset()  # forget the sanity-check validation (a resumed run keeps its best)
        if self._restored_val_acc_best is not None:
            self.val_acc_best.update(self._restored_val_acc_best)
        # parameter count and FLOPs are one value each: TensorBoard has them as hparams (the CLI's
        # logger, experiments/runs/run/tensorboard.py), summary.json as params and flops_per_image

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        self._check_finite()  # never a checkpoint of a diverged model
        checkpoint["complexity"] = self.complexity
        checkpoint["teacher_labels"] = self.teacher_labels()  # a resumed fit counts on from here
        # what an exact resume needs beyond weights, optimiser and loader: the best validation so
        # far and the global RNGs the model draws from (stochastic depth)
        checkpoint["val_acc_best"] = float(self.val_acc_best.compute()) if self.val_acc_best.update_called else None
        checkpoint["rng"] = {"torch": torch.get_rng_state(),
                             "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self._restored_val_acc_best = checkpoint.get("val_acc_best")
        counted = checkpoint.get("teacher_labels")
        if counted and self._trainer is not None and self.trainer.state.fn == "fit":
            self._teacher_differs, self._teacher_images = torch.tensor(counted["differs"]), counted["images"]
        rng = checkpoint.get("rng")
        resuming_fit = self._trainer is not None and self.trainer.state.fn == "fit"
        if rng is not None and resuming_fit:  # not when loaded as a teacher or for evaluation
            torch.set_rng_state(rng["torch"])
            if rng["cuda"] and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(rng["cuda"])


def students() -> str:
    """'deit': the families with a distillation token, for messages."""
    return " or ".join(map(repr, names(distillation_token=True)))


def _drain(*collections: MetricCollection) -> dict[str, torch.Tensor]:
    """The values of metric collections, which then start afresh for the next epoch."""
    values = {}
    for m in collections:
        values.update(m.compute())
        m.reset()
    return values


def check_teacher_checkpoint(path: str) -> None:
    """One clear error for a teacher checkpoint that is missing or not one this suite wrote (the CLI
    calls it before building anything, so the error is the only line printed)."""
    if not Path(path).exists():
        raise ValueError(f"teacher_checkpoint {path!r} does not exist")
    try:
        ckpt = read_checkpoint(path)  # weights only: a teacher file never runs code
    except ValueError as e:
        raise type(e)(f"teacher_{e}") from None  # "teacher_checkpoint '<path>' is ..."
    if not {"state_dict", "hyper_parameters"} <= set(ckpt):
        raise ValueError(f"teacher_checkpoint {path!r} is not a readable checkpoint of this suite "
                         "(ValueError: no state_dict and hyper_parameters)")


def load_teacher(path: str, student_hparams) -> nn.Module:
    """The frozen network of a checkpoint this suite wrote; one clear error if it is not one."""
    check_teacher_checkpoint(path)
    teacher = ImageClassifier.load_from_checkpoint(path, map_location="cpu", weights_only=True,
                                               teacher_checkpoint=None)
    t = teacher.hparams
    for k in ("num_classes", "image_size", "in_chans"):
        if t[k] != student_hparams[k]:
            raise ValueError(f"teacher_checkpoint {path!r} has {k}={t[k]}, the student {student_hparams[k]}")
    return freeze(teacher.model)
