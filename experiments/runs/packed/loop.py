"""A packed group's own training loop, under Lightning Fabric (issue #23).

Single runs stay LightningModules under the Trainer; a packed group trains here, in a loop written
for its one pure step (modules.packed_step.PackedStep): every member's augmentation, vmapped
forward and backward, clipping, AdamW and BatchNorm statistics in one function of static-shape
tensors that reads nothing back to the host (DeiT's teachers run inside it). Around it, per step,
the host only hands over the members' batches (uint8, with their crop and flip draws from each
member's loader generator), the batch's place (epoch, index: the strong variant's draws, made inside
the step for all members at once, are a function of it) and their drop-path masks (each member's
own generator). The host reads the device only at
log steps (the members' losses), at validations (one vmapped pass of all members over the shared
validation split) and when the group checkpoint is written: on a timer and at the group's end.

What a member's `fit` would be is read from its Trainer settings (they are equal across members):
max_steps / max_epochs, val_check_interval (steps, with check_val_every_n_epoch null, or a share
of an epoch), limit_train_batches, limit_val_batches, log_every_n_steps, gradient_clip_val (by
norm), precision (32-true or bf16-mixed), accelerator, deterministic. Any other setting that
differs from Lightning's default is refused in one line.

The step runs eager, or compiled with fullgraph=True (compile=True; on CUDA by default, as CUDA
graphs through mode="reduce-overhead": the step is captured once and replayed). The groups of one
process (a sweep's stage) share a compiled step wherever they compute the same function (step_key):
their lengths, learning rates, seeds and teachers' weights come in as tensors, so a stage compiles
once per family and member count (tests/test_packed_fit.py counts it). On the CPU the members equal
their single runs in fp32 (tests/test_packed_fit.py).

    loop = GroupLoop(members, dms, packed, group_dir, commit)
    loop.fit()          # resumes from group_dir/checkpoints/last.ckpt when it exists
"""
from __future__ import annotations

import inspect
import math
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import lightning as L
import torch
from lightning.fabric import Fabric

from datamodules.batch_augment import member_draws, strong_inputs
from modules.checkpoint_io import SafeCheckpointIO
from modules.optim import warmup_cosine
from modules.packed_step import PackedStep

from experiments.runs.packed.records import MemberRecords
from experiments.runs.run.record import PROGRESS_EVERY_S
from experiments.runs.run.run_folder import RunFolder

GROUP_CHECKPOINT_EVERY = timedelta(minutes=10)   # the group checkpoint's timer (and once at the end)
PRECISIONS = {"32-true": None, "32": None, "bf16-mixed": torch.bfloat16}
# Trainer settings the loop carries out (the rest must keep Lightning's defaults)
HANDLED = {"max_steps", "max_epochs", "val_check_interval", "check_val_every_n_epoch", "log_every_n_steps",
           "limit_train_batches", "limit_val_batches", "gradient_clip_val", "gradient_clip_algorithm",
           "precision", "accelerator", "devices", "deterministic", "enable_progress_bar"}
# ... and those that change nothing a group computes (how it is shown, where it writes, test only)
UNUSED = {"logger", "callbacks", "enable_checkpointing", "default_root_dir", "plugins", "enable_model_summary",
          "num_sanity_val_steps", "limit_test_batches", "limit_predict_batches", "inference_mode",
          "enable_autolog_hparams", "model_registry"}
TRAINER_DEFAULTS = {k: p.default for k, p in inspect.signature(L.Trainer.__init__).parameters.items()
                    if k != "self"}


class Schedule:
    """The members' Trainer settings as the loop reads them. Settings it cannot honour are refused
    in one line when it is made (before any folder is written); `start(batches)` then sets what
    depends on the training set: batches per epoch, total steps, when to validate."""

    def __init__(self, trainer: dict):
        from experiments.runs.run.cli import default_precision  # Lightning's CLI: imported when a group trains
        odd = sorted(k for k, v in trainer.items() if k not in HANDLED | UNUSED
                     and k in TRAINER_DEFAULTS and v != TRAINER_DEFAULTS[k])
        if odd:
            raise ValueError(f"fit_packed: trainer.{odd[0]}={trainer[odd[0]]!r} is not carried out by the packed "
                             f"loop: allowed to differ from Lightning's default only {', '.join(sorted(HANDLED))}")
        self.precision = str(trainer.get("precision") or default_precision())   # as a single fit resolves it
        if self.precision not in PRECISIONS:
            raise ValueError(f"fit_packed: trainer.precision={self.precision!r}: allowed {', '.join(PRECISIONS)}")
        self.autocast = PRECISIONS[self.precision]
        self.max_steps, self.max_epochs = trainer.get("max_steps", -1), trainer.get("max_epochs")
        if self.max_steps in (None, -1) and self.max_epochs == -1:
            raise ValueError("fit_packed: trainer.max_steps and trainer.max_epochs are both unlimited (-1): "
                             "allowed a limit in steps or in epochs")
        interval, every = trainer.get("val_check_interval"), trainer.get("check_val_every_n_epoch", 1)
        self.interval, self.every = 1.0 if interval is None else interval, every
        if every is None and isinstance(self.interval, float):
            raise ValueError(f"fit_packed: trainer.val_check_interval={interval} with check_val_every_n_epoch "
                             "null: allowed an integer number of steps")
        self.limit_train, self.limit_val = trainer.get("limit_train_batches"), trainer.get("limit_val_batches")
        self.log_every = int(trainer.get("log_every_n_steps") or 50)
        clip, algorithm = trainer.get("gradient_clip_val"), trainer.get("gradient_clip_algorithm")
        if clip and algorithm not in (None, "norm"):
            raise ValueError(f"fit_packed: trainer.gradient_clip_algorithm={algorithm!r}: allowed 'norm' "
                             "(each member clipped by its own global norm)")
        self.clip = float(clip) if clip else None
        devices = trainer.get("devices", "auto")
        if devices not in ("auto", 1, "1") and not (isinstance(devices, list) and len(devices) == 1):
            raise ValueError(f"fit_packed: trainer.devices={devices!r}: allowed one device (a group trains in "
                             "one process)")
        self.accelerator = trainer.get("accelerator") or "auto"
        self.deterministic = bool(trainer.get("deterministic"))
        self.progress = trainer.get("enable_progress_bar", True) is not False

    def start(self, batches_per_epoch: int) -> None:
        self.batches = limited(batches_per_epoch, self.limit_train)   # training batches per epoch
        if self.batches < 1:
            raise ValueError(f"fit_packed: trainer.limit_train_batches={self.limit_train!r} leaves no training "
                             f"batch of the {batches_per_epoch} an epoch has")
        by_steps = self.max_steps if self.max_steps not in (None, -1) else math.inf
        epochs = 1000 if self.max_epochs is None and by_steps == math.inf else self.max_epochs  # Lightning's default
        by_epochs = epochs * self.batches if epochs not in (None, -1) else math.inf
        self.total = int(min(by_steps, by_epochs))         # Lightning's estimated_stepping_batches
        if self.every is not None:   # every `interval`-th batch (or share of the epoch) of every `every`-th epoch
            i = self.interval
            self.val_batch = max(1, int(self.batches * i)) if isinstance(i, float) else int(i)

    def validates_after(self, step: int, epoch: int, batch: int) -> bool:
        """After `step` steps (the last: batch `batch` of epoch `epoch`, 0-based)."""
        if self.every is None:       # every `interval` steps, across epochs
            return step % self.interval == 0
        return (epoch + 1) % self.every == 0 and (batch + 1) % self.val_batch == 0

    def val_batches(self, n: int) -> int:
        return limited(n, self.limit_val)


def limited(n: int, limit) -> int:
    """Lightning's limit_*_batches: None = all, an int = that many, a float = that share."""
    if limit is None:
        return n
    return min(n, int(limit)) if isinstance(limit, int) else int(n * float(limit))


# A process's compiled steps, one per step_key: the groups of a sweep's stage that compute the same
# function (the same member configuration and count, augmentation, precision and teachers' architecture;
# seeds, learning rates, lengths and teachers' weights are inputs) share one PackedStep and its graph,
# so a stage compiles once per family and member count, not once per group.
_COMPILED: dict[tuple, tuple] = {}


def step_key(packed, augment, autocast, clip, mode, device, strong=()) -> tuple:
    """What a compiled PackedStep holds as constants: everything but the step's tensor inputs
    (`strong`: the names of the members' strong settings, whose values are inputs)."""
    h = dict(packed.template.hparams)
    config = sorted((k, repr(v)) for k, v in h.items() if k not in ("lr", "teacher_checkpoint"))
    data = None if augment is None else (repr(augment.cfg), tuple(augment.mean.flatten().tolist()),
                                         tuple(augment.std.flatten().tolist()),
                                         augment.num_classes, tuple(strong))
    weights = next(iter(packed.members.parameters())).dtype
    return (tuple(config), packed.num_members, data, str(autocast), clip, mode, str(device), str(weights),
            packed.teacher_architectures())


def compiled_step(key: tuple, build, mode: str | None) -> tuple:
    """(PackedStep, its torch.compile(fullgraph=True)) for `key`, built by `build()` the first time.
    Each key is one more cache entry of PackedStep.__call__ in dynamo: its recompile limit grows with
    them, and hitting it raises instead of running eager unannounced."""
    if key not in _COMPILED:
        pure = build()
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, len(_COMPILED) + 1)
        torch._dynamo.config.fail_on_recompile_limit_hit = True
        _COMPILED[key] = pure, torch.compile(pure, fullgraph=True, mode=mode)
    return _COMPILED[key]


class GroupLoop:
    """Trains `packed` (a PackedClassifier of the `members`, Member records of packed_fit) on their
    DataModules `dms`; its checkpoint lives in `group_dir`/checkpoints/last.ckpt. compile: None =
    on CUDA only (CUDA graphs), True / False. callbacks: objects with any of the hooks
    on_train_batch_start(loop, step) and on_save_checkpoint(loop, checkpoint) (Fabric calls them)."""

    def __init__(self, members: list, dms: list, packed, group_dir: Path, commit: str, *,
                 compile: bool | None = None, callbacks: tuple = (),
                 checkpoint_every: timedelta = GROUP_CHECKPOINT_EVERY):
        self.schedule = Schedule(members[0].config["trainer"])
        self.precision, self.autocast = self.schedule.precision, self.schedule.autocast
        self.fabric = Fabric(accelerator=self.schedule.accelerator, devices=1, precision="32-true",
                             plugins=[SafeCheckpointIO()], callbacks=list(callbacks))
        self.members, self.dms, self.packed = members, dms, packed
        self.ckpt = RunFolder(group_dir).last_checkpoint
        self.checkpoint_every = checkpoint_every.total_seconds()
        self.records = MemberRecords(members, dms, commit, Path(group_dir).name)
        self.compile = compile
        self.step = self.epoch = self.batch = 0   # steps taken; where the next batch comes from
        self.diverged: dict[int, str] = {}

    # ---------------- setup ----------------
    def _setup(self) -> None:
        device = self.fabric.device
        for dm in self.dms:
            dm.setup("fit", device=device)
        val = self.dms[0].val_indices
        for dm in self.dms[1:]:
            if len(dm.val_indices) != len(val) or (dm.val_indices != val).any():
                raise ValueError("fit_packed: members validate on different images: allowed members whose "
                                 "validation split (dataset, val_size, split_seed) is the same")
        self.packed.to(device).train(True)
        cfgs = [dm.augment.cfg for dm in self.dms]
        # the step augments when the members crop and flip alike (their other stages may differ:
        # the default and strong variants pack); otherwise batches come in augmented. DeiT's teachers
        # run inside the step either way.
        self.inside = all((c.crop_padding, c.hflip) == (cfgs[0].crop_padding, cfgs[0].hflip) for c in cfgs)
        position = lambda: (self.epoch, self.batch)  # noqa: E731
        self.loaders = [dm.train_loader(position=position, draws_only=self.inside) for dm in self.dms]
        self.schedule.start(min(len(loader) for loader in self.loaders))
        # the members' seeds and strong settings, (K,) tensors once: the step draws their numbers
        size = tuple(self.loaders[0].images.shape[2:])
        self.strong = strong_inputs(cfgs, [dm.seed for dm in self.dms], size, device) if self.inside else {}
        augment, teachers = self.dms[0].augment if self.inside else None, self.packed.teacher_stack(device)
        compile_ = self.compile if self.compile is not None else device.type == "cuda"
        self.mode = ("reduce-overhead" if device.type == "cuda" else "default") if compile_ else None
        build = lambda: PackedStep(self.packed, self.schedule.total, clip=self.schedule.clip,  # noqa: E731
                                   augment=augment, autocast=self.autocast, teachers=teachers)
        if compile_:
            self.pure, self.run = compiled_step(step_key(self.packed, augment, self.autocast, self.schedule.clip,
                                                         self.mode, device, self.strong), build, self.mode)
        else:
            self.pure = self.run = build()
        # what differs between groups that share a compiled step comes in as tensors
        self.schedule_t = self.pure.schedule(self.schedule.total, device)
        self.teacher_weights = teachers[1:] if teachers is not None else None
        self.lrs = torch.tensor([self.packed.member_lr(k) for k in range(len(self.members))], device=device)
        self.state = self.pure.init_state(self.packed)
        k = len(self.members)
        self.nan_step = torch.full((k,), -1, dtype=torch.long, device=device)  # first non-finite loss: no host sync
        self.nan_loss = torch.zeros(k, device=device)

    # ---------------- the loop ----------------
    def fit(self) -> None:
        """Train to the schedule's end (from the group checkpoint when one exists); then each
        member's summary. Raises FloatingPointError when every member diverged."""
        previous = torch.are_deterministic_algorithms_enabled()
        if self.schedule.deterministic:  # as Lightning's Trainer(deterministic=True): cuBLAS needs a fixed workspace
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(self.schedule.deterministic or previous)
        try:
            self._setup()
            if self.ckpt.exists():
                self._load()
            self.records.start(self.packed.complexity, resumed=self.ckpt.exists())
            self._train()
        finally:
            torch.use_deterministic_algorithms(previous)

    def _train(self) -> None:
        s, last_save, last_progress = self.schedule, time.perf_counter(), 0.0
        timed = None   # (start, images per member) of the steps timed since the last host sync
        while self.step < s.total:
            iters = [iter(loader) for loader in self.loaders]  # a pass: each loader reads (epoch, batch)
            for _ in range(self.batch, s.batches):
                batches = [next(it) for it in iters]
                self.fabric.call("on_train_batch_start", self, self.step)
                losses = self._step(batches)
                self._watch(losses)
                i, self.step, self.batch = self.step, self.step + 1, self.batch + 1
                # timed from the end of the first step after a sync: no compilation or validation in it
                timed = (time.perf_counter(), 0) if timed is None else (timed[0], timed[1] + len(batches[0][1]))
                if (i + 1) % s.log_every == 0:   # as Lightning: the batch whose count is a multiple
                    self._log(i, losses)
                if s.validates_after(self.step, self.epoch, self.batch - 1) or self.step >= s.total:
                    self._synchronize()
                    self.records.trained(timed[1], time.perf_counter() - timed[0])
                    timed = None
                    if s.validates_after(self.step, self.epoch, self.batch - 1):
                        self._validate()
                if self.step >= s.total:
                    break
                if time.perf_counter() - last_progress >= PROGRESS_EVERY_S:
                    self.records.progress(self.step, s.total)
                    last_progress = time.perf_counter()
                if time.perf_counter() - last_save >= self.checkpoint_every:
                    self._save()
                    last_save = time.perf_counter()
            if self.batch >= s.batches:
                self.epoch, self.batch = self.epoch + 1, 0
        self._check_finite()
        self._save()
        self._finish()

    def _synchronize(self) -> None:
        if self.fabric.device.type == "cuda":
            torch.cuda.synchronize(self.fabric.device)

    def _step(self, batches: list) -> torch.Tensor:
        x, y = torch.stack([b[0] for b in batches]), _targets([b[1] for b in batches])
        draws = member_draws([b[2] for b in batches]) if self.inside else None
        if self.strong:
            draws |= self.strong | {"place": torch.tensor([self.epoch, self.batch], device=x.device)}
        masks = self.packed._drop_path_masks(x)  # each member's own generator, outside the graph
        if self.mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()  # the previous step's outputs are this one's inputs
        self.state, losses = self.run(self.state, x, y, self.lrs, masks=masks, draws=draws, schedule=self.schedule_t,
                                      teacher_weights=self.teacher_weights)
        return losses

    def _watch(self, losses: torch.Tensor) -> None:
        first = ~torch.isfinite(losses) & (self.nan_step < 0)
        self.nan_step = torch.where(first, self.step, self.nan_step)
        self.nan_loss = torch.where(first, losses.detach().float(), self.nan_loss)

    def _check_finite(self) -> None:
        """Members whose loss went non-finite (one host read); FloatingPointError once all have."""
        for k, (step, loss) in enumerate(zip(self.nan_step.tolist(), self.nan_loss.tolist())):
            if step >= 0 and k not in self.diverged:
                self.diverged[k] = f"diverged: loss is {loss} at step {step}"
                print(f"packed member {k} (seed {self.packed.seeds[k]}) {self.diverged[k]}", file=sys.stderr)
        self.packed.diverged = self.diverged   # its exports refuse these members
        if len(self.diverged) == len(self.members):
            self._finish()
            raise FloatingPointError(f"all {len(self.members)} members {self.diverged[0]} (member 0)")

    def _log(self, i: int, losses: torch.Tensor) -> None:
        self._check_finite()
        h = self.packed.template.hparams
        factor = warmup_cosine(i, self.schedule.total, int(self.schedule_t[0]), h.min_lr_ratio)
        lrs = [factor * self.packed.member_lr(k) for k in range(len(self.members))]
        self.records.train_logged(i, losses.float().tolist(), lrs)

    # ---------------- validation: all members in one vmapped pass ----------------
    @torch.no_grad()
    def _validate(self) -> None:
        self._check_finite()
        self.pure.load_into(self.state, self.packed)
        self.packed.eval()
        loader = self.dms[0].val_dataloader()
        limit = self.schedule.val_batches(len(loader))
        correct = count = None
        with torch.autocast(self.fabric.device.type, dtype=self.autocast or torch.bfloat16,
                            enabled=self.autocast is not None):
            for i, (x, y) in enumerate(loader):
                if i >= limit:
                    break
                hits = (self.packed(x).argmax(-1) == y).sum(-1)         # (K,)
                correct = hits if correct is None else correct + hits
                count = len(y) if count is None else count + len(y)
        self.packed.train(True)
        self.packed.member_fn.train(True)  # the step's network (outside the module tree): back to training
        accs = (correct.float() / count).tolist()
        self.records.validated(self.step, accs, self.packed, self.diverged)
        self.records.progress(self.step, self.schedule.total)
        if self.schedule.progress:
            ips = self.records.images_per_sec
            print(f"{self.records.group}: step {self.step}/{self.schedule.total}, val acc "
                  + " ".join(f"{a:.3f}" for a in accs)
                  + (f", {ips * len(accs):,.0f} img/s" if ips else ""), file=sys.stderr)

    # ---------------- the group checkpoint ----------------
    def _checkpoint(self) -> dict:
        gens = self.packed._gens
        return {"state": self.state, "position": {"step": self.step, "epoch": self.epoch, "batch": self.batch},
                "loaders": [loader.state_dict() for loader in self.loaders], "records": self.records.state_dict(),
                "member_rng": {"device": gens[0].device.type, "states": [g.get_state() for g in gens]}
                if gens is not None else self.packed._rng_saved,
                "nan_step": self.nan_step, "nan_loss": self.nan_loss, "diverged": self.diverged}

    def _save(self) -> None:
        checkpoint = self._checkpoint()
        self.fabric.call("on_save_checkpoint", self, checkpoint)
        self.fabric.save(self.ckpt, checkpoint)

    def _load(self) -> None:
        c = self.fabric.load(self.ckpt)   # weights only (SafeCheckpointIO), onto the CPU
        device = self.fabric.device
        self.state = _to(c["state"], device)
        p = c["position"]
        self.step, self.epoch, self.batch = p["step"], p["epoch"], p["batch"]
        for loader, s in zip(self.loaders, c["loaders"]):
            loader.load_state_dict(s)
        self.records.load_state_dict(c["records"])
        self.packed._rng_saved, self.packed._gens = c["member_rng"], None
        self.nan_step, self.nan_loss = c["nan_step"].to(device), c["nan_loss"].to(device)
        self.diverged = {int(k): v for k, v in c["diverged"].items()}

    def _finish(self) -> None:
        self.pure.load_into(self.state, self.packed)
        self.records.finish(self.packed, self.diverged, steps=self.step, epochs=self.step // self.schedule.batches,
                            max_steps=self.schedule.total, precision=self.precision,
                            engine={"loop": "fabric", "compiled": self.mode})


def _targets(ys: list[torch.Tensor]) -> torch.Tensor:
    """The members' labels (K, B), or soft targets (K, B, classes) when some members mix images
    (MixUp/CutMix): the others' labels then become one-hot, the same cross-entropy with label
    smoothing. One-hot by scatter: F.one_hot checks the labels' range on the host (a GPU sync)."""
    soft = next((y.shape[1] for y in ys if y.ndim == 2), None)
    if soft is not None:
        ys = [y if y.ndim == 2 else torch.zeros(len(y), soft, device=y.device).scatter_(1, y[:, None], 1.0)
              for y in ys]
    return torch.stack(ys)


def _to(tree, device):
    if isinstance(tree, dict):
        return {k: _to(v, device) for k, v in tree.items()}
    return tree.to(device) if isinstance(tree, torch.Tensor) else tree
