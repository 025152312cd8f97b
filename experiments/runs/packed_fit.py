"""`python -m experiments fit_packed MEMBERS.json`: K runs that differ only in their seed, learning
rate and augmentation, trained at once in one process (modules/packed.py), each leaving the folder
and records its own `fit` would.

MEMBERS.json holds {"members": [[fit arguments], ...]} (what `sweep --pack` writes). Every member
resolves to the folder, identity.json and hash its `fit` would use; their configurations must be
equal except for their seed, lr, augmentation and DeiT's teacher (MEMBER_KEYS). Member k trains on
its own subset, batch order and augmentation (its own DataModule; batches stacked to (K, B, ...))
and all validate on the one shared validation split. Each member gets, in its own folder:
train_indices.json, TensorBoard curves (train/loss_step, train/lr, val/acc, val/acc_best) and hparams,
checkpoints/best.ckpt (its best validation) and last.ckpt as ordinary single-run checkpoints
(`test`, DeiT's teacher loading and the probes take them), summary.json with its val_history and
plateau flag, and then its test (`status: done`) unless --test_after_fit false. The group's own
checkpoint (<runs_dir>/<experiment>/packed/<group>/) makes an interrupted group resume exactly; it
is written on a timer (GROUP_CHECKPOINT_EVERY) and at the group's end, not at every validation: it
holds K members' weights and AdamW moments (51 MB for 8 tiny members), and a write at every
validation stalls a GPU group. An interrupted group loses at most that interval.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch.utils.tensorboard import SummaryWriter

from datamodules import ImageClassificationDataModule
from modules import ImageClassifier, PackedClassifier
from modules.checkpoint_io import SafeCheckpointIO, read_checkpoint

from experiments.runs.identity import config_hash, evaluation_identity
from experiments.runs.record import read_summary, record_summary
from experiments.runs.recorder import RunRecord
from experiments.runs.provenance import git_commit
from experiments.runs.tensorboard import SIZE_TAG, readable_hparams, session_start

# what may differ between members: the seed (and DeiT's teacher, which follows it), the lr, and the
# augmentation (each member has its own DataModule: the default and strong recipes pack together)
MEMBER_KEYS = ("seed_everything", "data.seed", "model.teacher_checkpoint", "model.lr", "data.crop_padding",
               "data.hflip", "data.randaugment", "data.random_erasing", "data.mixup_alpha", "data.cutmix_alpha")
PACKED_DIR = "packed"


@dataclass
class Member:
    args: list[str]
    config: dict       # the resolved fit configuration (LightningCLI's, as a dict)
    identity: dict
    run_dir: Path
    config_yaml: str   # what `fit` writes to the run's config.yaml (validate/test/probes start from it)


def resolve_members(arg_lists: list[list[str]]) -> list[Member]:
    """Each member's configuration, identity and folder, as `fit` resolves them; one error line when
    two members differ in anything outside MEMBER_KEYS."""
    from experiments.runs.cli import _ParseOnly  # builds Lightning's parser: only when members are resolved
    if not arg_lists:
        raise ValueError("fit_packed: no members given: allowed a list of one or more fit argument lists")
    cli = _ParseOnly(args=["fit", *arg_lists[0]])
    members = []
    for args in arg_lists:
        cli.parse_arguments(cli.parser, ["fit", *args])
        members.append(Member(list(args), cli._cfg(), cli.identity(), cli.run_dir(),
                              cli._parser("fit").dump(cli.config["fit"], skip_none=False)))
    first = members[0].identity
    for m in members[1:]:
        diff = sorted(k for k in set(first) | set(m.identity)
                      if k not in MEMBER_KEYS and first.get(k) != m.identity.get(k))
        if diff:
            k = diff[0]
            raise ValueError(f"fit_packed: members differ in {k} ({first.get(k)!r} and {m.identity.get(k)!r}): "
                             f"allowed to differ only in {', '.join(MEMBER_KEYS)}")
    dirs = [m.run_dir for m in members]
    if len(set(dirs)) != len(dirs):
        raise ValueError(f"fit_packed: two members share the folder {next(d for d in dirs if dirs.count(d) > 1)}")
    return members


def group_dir(run_dirs: list[Path]) -> Path:
    """<runs_dir>/<experiment>/packed/<first member>+<K-1>_<hash of the members' folders>."""
    names = [Path(d).name for d in run_dirs]
    return Path(run_dirs[0]).parent / PACKED_DIR / f"{names[0]}+{len(names) - 1}_{config_hash({'members': names})}"


class StackedLoader:
    """K members' TensorBatchLoaders read in step: batch i is (x (K, B, C, H, W), y (K, B[, classes])).
    When some members mix images (MixUp/CutMix: soft targets) and others do not, the others' labels
    become one-hot targets: the recipe's loss on them is the same cross-entropy with label smoothing.
    Resumable as each member's loader is (its state_dict holds theirs)."""

    def __init__(self, loaders: list):
        self.loaders = loaders

    def __len__(self) -> int:
        return min(len(l) for l in self.loaders)

    def __iter__(self):
        for batches in zip(*self.loaders):
            ys = [y for _, y in batches]
            soft = next((y.shape[1] for y in ys if y.ndim == 2), None)  # classes, if any member is soft
            if soft is not None:
                # one-hot by scatter: F.one_hot checks the labels' range on the host (a GPU sync)
                ys = [y if y.ndim == 2 else torch.zeros(len(y), soft, device=y.device).scatter_(1, y[:, None], 1.0)
                      for y in ys]
            yield torch.stack([x for x, _ in batches]), torch.stack(ys)

    def state_dict(self) -> dict:
        return {"members": [l.state_dict() for l in self.loaders]}

    def load_state_dict(self, state: dict) -> None:
        for loader, s in zip(self.loaders, state["members"]):
            loader.load_state_dict(s)


class PackedDataModule(L.LightningDataModule):
    """Each member's ImageClassificationDataModule (its subset, order, augmentation); validation on
    the split they share."""

    def __init__(self, members: list[ImageClassificationDataModule]):
        super().__init__()
        self.members = members

    def setup(self, stage: str) -> None:
        for dm in self.members:
            dm.trainer = self.trainer  # their loaders read the fit's position and device from it
            dm.setup(stage)
        val = self.members[0].val_indices
        for dm in self.members[1:]:
            if len(dm.val_indices) != len(val) or (dm.val_indices != val).any():
                raise ValueError("fit_packed: members validate on different images: allowed members whose "
                                 "validation split (dataset, val_size, split_seed) is the same")

    def train_dataloader(self) -> StackedLoader:
        return StackedLoader([dm.train_dataloader() for dm in self.members])

    def val_dataloader(self):
        return self.members[0].val_dataloader()


class MemberRecords(Callback):
    """Per member: curves in its folder's TensorBoard, best.ckpt whenever its validation accuracy
    improves, last.ckpt and summary.json at the end. Its state (best accuracies, validation
    histories, wall time) goes into the group checkpoint, so a resumed group goes on where it was."""

    def __init__(self, members: list[Member], dms: list[ImageClassificationDataModule], commit: str):
        self.members, self.dms, self.commit = members, dms, commit
        self.best = [None] * len(members)
        self.history: list[list[list]] = [[] for _ in members]
        self.wall_time_s, self._start, self._writers = 0.0, None, None
        self._images, self._seconds, self._last = 0, 0.0, None

    def state_dict(self) -> dict:
        return {"best": self.best, "history": self.history, "wall_time_s": self._elapsed()}

    def load_state_dict(self, state: dict) -> None:
        self.best, self.history = list(state["best"]), [[list(v) for v in h] for h in state["history"]]
        self.wall_time_s = state["wall_time_s"]

    def _elapsed(self) -> float:
        return self.wall_time_s + (time.perf_counter() - self._start if self._start else 0.0)

    def writers(self) -> list[SummaryWriter]:
        if self._writers is None:
            self._writers = [SummaryWriter(log_dir=str(m.run_dir)) for m in self.members]
        return self._writers

    def on_fit_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()
        for m, dm in zip(self.members, self.dms):
            (m.run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
            (m.run_dir / "config.yaml").write_text(m.config_yaml)
            dm.save_train_indices(m.run_dir / "train_indices.json")
        for m, w in zip(self.members, self.writers()):  # as a single run's logger: its identity, no metrics
            w._get_file_writer().add_summary(session_start(readable_hparams(m.identity, pl_module.complexity), trial_id=m.run_dir.name))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = time.perf_counter()
        if self._last is not None:  # as ImageClassifier counts: batch ends after the first of a pass
            self._images, self._seconds = self._images + batch[0].shape[1], self._seconds + now - self._last
        self._last = now
        if not trainer._logger_connector.should_update_logs:
            return  # the losses stay on the device between log steps
        losses = outputs["losses"].float().cpu().tolist()
        factor = trainer.optimizers[0].param_groups[0]["lr"]  # the schedule's multiplier (lr 1 packed)
        step = trainer.global_step - 1  # Lightning's step of this batch's logs (the count before it)
        for k, w in enumerate(self.writers()):
            w.add_scalar("train/loss_step", losses[k], step)
            w.add_scalar("train/lr", factor * pl_module.member_lr(k), step)

    def on_validation_start(self, trainer, pl_module) -> None:
        self._last = None  # validation time is not training time

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        step = trainer.global_step
        for k, m in enumerate(self.members):
            if k in pl_module.diverged:
                continue
            acc = float(trainer.callback_metrics[f"val/acc_m{k}"])
            self.history[k] = [v for v in self.history[k] if v[0] != step] + [[step, round(acc, 6)]]
            if self.best[k] is None or acc > self.best[k]:
                self.best[k] = acc
                pl_module.save_member_checkpoint(k, m.run_dir / "checkpoints" / "best.ckpt",
                                                 extra={"val_acc_best": acc})
            w = self.writers()[k]
            w.add_scalar("val/acc", acc, step)
            w.add_scalar(SIZE_TAG.format(self.dms[k].train_size), acc, step)
            w.add_scalar("val/acc_best", self.best[k], step)
            w.flush()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        """Every member diverged (PackedClassifier raises then): each is recorded as diverged, as a
        single run would be, and is not run again."""
        if isinstance(exception, FloatingPointError):
            self._write_summaries(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.interrupted:
            return
        try:
            pl_module.check_finite()  # members whose loss went non-finite since the last check
        except FloatingPointError:
            pass  # every member diverged: each is recorded so below
        self._write_summaries(trainer, pl_module)

    def _write_summaries(self, trainer, pl_module) -> None:
        self.wall_time_s, self._start = self._elapsed(), None
        ips = self._images / self._seconds if self._seconds else None  # each member's own images
        group = group_dir([m.run_dir for m in self.members]).name
        for k, (m, dm) in enumerate(zip(self.members, self.dms)):
            engine = {"engine": {"packed": len(self.members), "member": k, "group": group,
                                 "group_images_per_sec": ips * len(self.members) if ips else None}}
            common = dict(experiment=m.config["experiment"], identity=m.identity, evaluation=_evaluation(m, trainer),
                          hparams={**pl_module.template.hparams, "lr": pl_module.member_lr(k)},
                          complexity=pl_module.complexity, datamodule=dm, precision=str(trainer.precision),
                          devices=trainer.world_size, commit=self.commit, extra=engine)
            fit = {"steps": trainer.global_step, "wall_time_s": self.wall_time_s}
            if k in pl_module.diverged:
                record_summary(m.run_dir, "diverged", fit=fit, error=f"FloatingPointError: {pl_module.diverged[k]}",
                               **common)
                continue
            pl_module.save_member_checkpoint(k, m.run_dir / "checkpoints" / "last.ckpt",
                                             extra={"val_acc_best": self.best[k]})
            fit.update(epochs=trainer.current_epoch, images_per_sec=ips, val_acc_best=self.best[k],
                       max_steps=trainer.max_steps, val_history=self.history[k])
            record_summary(m.run_dir, "fitted", fit=fit, **common)
        for w in self.writers():
            w.close()


def _evaluation(m: Member, trainer) -> dict:
    return evaluation_identity(m.config, precision=str(trainer.precision), checkpoint="best.ckpt")


def _trainer_kwargs(config: dict) -> dict:
    """The members' Trainer settings (theirs are equal), less what this runner supplies itself."""
    from experiments.runs.cli import default_precision, given_plugins
    t = {k: v for k, v in config["trainer"].items()
         if k not in ("logger", "callbacks", "enable_checkpointing", "default_root_dir", "plugins")}
    t["plugins"] = [*given_plugins(config["trainer"].get("plugins")), SafeCheckpointIO()]  # atomic, weights-only
    t["precision"] = t.get("precision") or default_precision()
    return t


GROUP_CHECKPOINT_EVERY = timedelta(minutes=10)   # the group checkpoint's timer (and once at the end)


def fit_packed(arg_lists: list[list[str]], callbacks: tuple = (),
               checkpoint_every: timedelta = GROUP_CHECKPOINT_EVERY) -> dict[str, str]:
    """Trains the members (those not yet finished) packed; returns folder name -> status.
    callbacks: more Lightning callbacks for the group's Trainer; checkpoint_every: the group
    checkpoint's timer (training time between writes)."""
    from experiments.runs.cli import check_folder_identity, lock_run_folder
    members = resolve_members(arg_lists)
    for m in members:  # the data's checks (its values, val_size against the pool) before any folder is made
        ImageClassificationDataModule(**m.config["data"]).check_sizes()
    locks = [lock_run_folder(m.run_dir) for m in members]
    try:
        for m in members:
            check_folder_identity(m.run_dir, m.identity)
        status = {m.run_dir.name: (read_summary(m.run_dir) or {}).get("status") for m in members}
        todo = [m for m in members if status[m.run_dir.name] not in ("fitted", "done", "diverged")]
        if todo:
            _train(todo, callbacks, checkpoint_every)
        for m in members:
            s = read_summary(m.run_dir) or {}
            if s.get("status") == "fitted" and m.config["test_after_fit"]:
                _test(m)
            status[m.run_dir.name] = (read_summary(m.run_dir) or {}).get("status")
        return status
    finally:
        for lock in locks:
            lock.close()


def _train(members: list[Member], callbacks: tuple = (), checkpoint_every: timedelta = GROUP_CHECKPOINT_EVERY) -> None:
    first = members[0].config
    dms = [ImageClassificationDataModule(**m.config["data"]) for m in members]
    model_cfg = {k: v for k, v in first["model"].items() if k != "teacher_checkpoint"}
    model_cfg.update(image_size=dms[0].image_size, in_chans=dms[0].num_channels, num_classes=dms[0].num_classes)
    teachers = [m.config["model"].get("teacher_checkpoint") for m in members]
    use_teachers = model_cfg["family"] == "deit" and model_cfg.get("distillation") != "none" and all(teachers)
    model_cfg.pop("lr")
    packed = PackedClassifier(seeds=[m.config["seed_everything"] for m in members],
                              lrs=[m.config["model"]["lr"] for m in members],
                              teacher_checkpoints=teachers if use_teachers else None, **model_cfg)
    gdir = group_dir([m.run_dir for m in members])
    gdir.mkdir(parents=True, exist_ok=True)
    listed = gdir / "members.json"  # the sweep writes it as this command's input; a direct call gets it here
    if not listed.exists():
        listed.write_text(json.dumps({"members": [m.args for m in members]}, indent=1) + "\n")
    records = MemberRecords(members, dms, git_commit())
    group_ckpt = ModelCheckpoint(dirpath=gdir / "checkpoints", filename="last", monitor=None, save_top_k=1,
                                 enable_version_counter=False, train_time_interval=checkpoint_every)
    trainer = L.Trainer(**_trainer_kwargs(first), logger=False, callbacks=[records, group_ckpt, *callbacks],
                        default_root_dir=str(gdir))
    last = gdir / "checkpoints" / "last.ckpt"
    if last.exists():
        read_checkpoint(last)  # one line naming the file, before anything is built from it
    # the global RNG (member 0's seed) is left to Lightning; the members' stochastic depth draws from
    # their own generators (PackedClassifier._generators), which the group checkpoint carries
    L.seed_everything(first["seed_everything"], verbose=False)
    trainer.fit(packed, datamodule=PackedDataModule(dms), ckpt_path=str(last) if last.exists() else None,
                weights_only=True)
    if not trainer.interrupted:
        trainer.save_checkpoint(last)  # the group's end: its final state, as the timer would leave it


def _test(m: Member) -> None:
    """The member's best checkpoint on the test split, recorded as its own fit's test would be."""
    from experiments.runs.cli import default_precision
    c = m.config
    precision = c["trainer"].get("precision") or default_precision()
    best = m.run_dir / "checkpoints" / "best.ckpt"
    read_checkpoint(best)  # one line naming the file
    model = ImageClassifier.load_from_checkpoint(best, map_location="cpu", weights_only=True)
    record = RunRecord(m.run_dir, c["experiment"], identity=m.identity,
                       evaluation=evaluation_identity(c, precision=precision, checkpoint="best.ckpt"))
    trainer = L.Trainer(precision=precision, logger=False, callbacks=[record], enable_progress_bar=False,
                        enable_model_summary=False, limit_test_batches=c["trainer"].get("limit_test_batches"),
                        accelerator=c["trainer"].get("accelerator", "auto"), devices=1)
    trainer.test(model, datamodule=ImageClassificationDataModule(**c["data"]))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments fit_packed", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("members", help='a .json file holding {"members": [[fit arguments], ...]}')

    def one_line(message: str):
        raise ValueError(f"{message} (python -m experiments fit_packed --help)")
    p.error = one_line
    a = p.parse_args(argv)
    try:
        arg_lists = json.loads(Path(a.members).read_text())["members"]
    except FileNotFoundError:
        raise ValueError(f"fit_packed: {a.members!r} does not exist") from None
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"fit_packed: {a.members!r} is not a members file ({type(e).__name__}: {e}): "
                         'allowed {"members": [[fit arguments], ...]}') from None
    status = fit_packed(arg_lists)
    for name, s in status.items():
        print(f"{name}: {s}", file=sys.stderr)
    return 0 if all(s in ("fitted", "done") for s in status.values()) else 1
