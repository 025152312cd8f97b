"""`python -m experiments fit_packed MEMBERS.json [MORE.json ...]`: K runs that differ only in their
seed, learning rate and augmentation, trained at once in one process (modules/packed.py), each
leaving the folder and records its own `fit` would; several files: their groups one after another
in this process (a sweep's stage).

MEMBERS.json holds {"members": [[fit arguments], ...]} (what `sweep --pack` writes). Every member
resolves to the folder, identity.json and hash its `fit` would use; their configurations must be
equal except for their seed, lr, augmentation and DeiT's teacher (MEMBER_KEYS). Member k trains on
its own subset, batch order and augmentation (its own DataModule; batches stacked to (K, B, ...))
and all validate on the one shared validation split, in a loop of the group's own under Lightning
Fabric (packed_loop.GroupLoop: one pure step per batch, compiled whole on CUDA). Each member gets,
in its own folder: train_indices.json, TensorBoard curves (train/loss_step, train/lr, val/acc,
val/acc_best) and hparams, checkpoints/best.ckpt (its best validation) and last.ckpt as ordinary
single-run checkpoints (`test`, DeiT's teacher loading and the probes take them), summary.json
with its val_history and plateau flag, and then its test (`status: done`) unless --test_after_fit
false: every member's best checkpoint in one vmapped pass over the test split, scored by its own
test metrics. The group's own checkpoint (<runs_dir>/<experiment>/packed/<group>/) makes an
interrupted group resume exactly; it is written on a timer (GROUP_CHECKPOINT_EVERY) and at the
group's end, not at every validation: it holds K members' weights and AdamW moments (51 MB for 8
tiny members), and a write at every validation stalls a GPU group. An interrupted group loses at
most that interval.
"""
from __future__ import annotations

import argparse
import copy
import sys
import traceback
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import lightning as L
import torch
from torch import nn
from torch.func import functional_call, stack_module_state

from datamodules import ImageClassificationDataModule
from modules import ImageClassifier, PackedClassifier
from modules.checkpoint_io import read_checkpoint
from modules.budgets import distils
from modules.files import parse_json, refuse_links, write_json
from modules.registry import use_fused_attention

from experiments.runs.run.identity import config_hash, evaluation_identity
from experiments.runs.packed.loop import GROUP_CHECKPOINT_EVERY, GroupLoop, Schedule, limited
from experiments.runs.run.record import record_summary
from experiments.runs.run.run_folder import BEST, RunFolder
from experiments.runs.run.provenance import git_commit

# what may differ between members: the seed (and DeiT's teacher, which follows it), the lr, and the
# augmentation (each member has its own DataModule: the default and strong variants pack together)
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
    from experiments.runs.run.cli import _ParseOnly  # builds Lightning's parser: only when members are resolved
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


def fit_packed(arg_lists: list[list[str]], callbacks: tuple = (),
               checkpoint_every: timedelta = GROUP_CHECKPOINT_EVERY, compile: bool | None = None) -> dict[str, str]:
    """Trains the members (those not yet finished) packed; returns folder name -> status.
    callbacks: hooks for the group's loop (packed_loop.GroupLoop); checkpoint_every: the group
    checkpoint's timer; compile: the step compiled whole (None: on CUDA only, as CUDA graphs)."""
    from experiments.runs.run.cli import check_folder_identity
    members = resolve_members(arg_lists)
    Schedule(members[0].config["trainer"])  # settings the group's loop cannot honour: one line, nothing written
    _data_modules(members)  # the data's checks (its values, val_size against the pool) before any folder is made
    locks = [RunFolder(m.run_dir).lock() for m in members]
    try:
        for m in members:
            RunFolder(m.run_dir).check_files()
        for m in members:
            check_folder_identity(m.run_dir, m.identity)
        status = {m.run_dir.name: RunFolder(m.run_dir).status() for m in members}
        todo = [m for m in members if status[m.run_dir.name] not in ("fitted", "done", "diverged")]
        if todo:
            _train(todo, callbacks, checkpoint_every, compile)
        tested = [m for m in members if RunFolder(m.run_dir).status() == "fitted"
                  and m.config["test_after_fit"]]
        if tested:
            _test(tested)
        for m in members:
            status[m.run_dir.name] = RunFolder(m.run_dir).status()
        return status
    finally:
        for lock in locks:
            lock.close()


_DECODED: dict[tuple, ImageClassificationDataModule] = {}   # DataModule.source -> the first DataModule of it


def _data_modules(members: list[Member]) -> list[ImageClassificationDataModule]:
    """Each member's DataModule with its data's checks done (values, sizes against the pool); the
    images decoded once per process: every later DataModule of the same source reads the first one's."""
    dms = []
    for m in members:
        dm = ImageClassificationDataModule(**m.config["data"])
        source = _DECODED.setdefault(dm.source, dm)
        if source is not dm:
            dm.share_decoded(source)
        dm.check_sizes()   # decodes the source's images the first time, reads them after
        dms.append(dm)
    return dms


def _train(members: list[Member], callbacks: tuple = (), checkpoint_every: timedelta = GROUP_CHECKPOINT_EVERY,
           compile: bool | None = None) -> None:
    first = members[0].config
    dms = _data_modules(members)
    model_cfg = {k: v for k, v in first["model"].items() if k != "teacher_checkpoint"}
    model_cfg.update(image_size=dms[0].image_size, in_chans=dms[0].num_channels, num_classes=dms[0].num_classes)
    teachers = [m.config["model"].get("teacher_checkpoint") for m in members]
    use_teachers = distils(model_cfg["family"]) and model_cfg.get("distillation") != "none" and all(teachers)
    model_cfg.pop("lr")
    packed = PackedClassifier(seeds=[m.config["seed_everything"] for m in members],
                              lrs=[m.config["model"]["lr"] for m in members],
                              teacher_checkpoints=teachers if use_teachers else None, **model_cfg)
    gdir = group_dir([m.run_dir for m in members])
    gdir.mkdir(parents=True, exist_ok=True)
    refuse_links(gdir)  # the group checkpoint is written there; each member's folder was checked when locked
    listed = gdir / "members.json"  # the sweep writes it as this command's input; a direct call gets it here
    if not listed.exists():
        write_json(listed, {"members": [m.args for m in members]}, sort_keys=False)
    last = RunFolder(gdir).last_checkpoint  # the group checkpoint, kept as a run folder keeps its own
    if last.exists():
        read_checkpoint(last)  # one line naming the file, before anything is built from it
    # nothing in the loop draws from the global RNG (batches: each member's loader generator; stochastic
    # depth: each member's own generator, PackedClassifier._generators); seeded for anything incidental
    L.seed_everything(first["seed_everything"], verbose=False)
    GroupLoop(members, dms, packed, gdir, git_commit(), compile=compile, callbacks=callbacks,
              checkpoint_every=checkpoint_every).fit()


class _Heads(nn.Module):
    """One member's reported logits and, for DeiT, each head's (ImageClassifier._eval_logits), as a
    function of its weights (functional_call: "clf.model.<name>")."""

    def __init__(self, clf: ImageClassifier):
        super().__init__()
        self.clf = clf

    def forward(self, x):
        return self.clf._eval_logits(x)


@torch.no_grad()
def _test(members: list[Member]) -> None:
    """Every member's best checkpoint on the test split in ONE vmapped pass (their networks stacked),
    each scored by its own ImageClassifier's test metrics and recorded as its own fit's test would be
    (summary.json: status done, test)."""
    from experiments.runs.run.cli import default_precision
    c = members[0].config
    precision = c["trainer"].get("precision") or default_precision()
    clfs = []
    for m in members:
        best = RunFolder(m.run_dir).best_checkpoint
        read_checkpoint(best)  # one line naming the file
        clfs.append(ImageClassifier.load_from_checkpoint(best, map_location="cpu", weights_only=True).eval())
    accelerator = c["trainer"].get("accelerator") or "auto"
    device = torch.device("cuda" if torch.cuda.is_available() and accelerator in ("auto", "gpu", "cuda") else "cpu")
    for clf in clfs:
        use_fused_attention(clf.model, False)   # the training kernel; the only one vmap batches on the CPU
        clf.to(device)
    params, buffers = stack_module_state([clf.model for clf in clfs])
    skeleton = _Heads(copy.deepcopy(clfs[0]).to("meta"))
    weights = {f"clf.model.{n}": t for n, t in {**params, **buffers}.items()}
    heads = torch.vmap(lambda w, x: functional_call(skeleton, w, (x,)), in_dims=(0, None))
    data = _data_modules(members)
    dm = data[0]   # the test split all members share
    dm.setup("test", device=device)
    loader = dm.test_dataloader()
    limit = limited(len(loader), c["trainer"].get("limit_test_batches"))
    loss, count = torch.zeros(len(clfs), device=device), 0
    autocast = precision == "bf16-mixed"   # as the single run's test under its Trainer's precision
    for i, (x, y) in enumerate(loader):
        if i >= limit:
            break
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            outs = heads(weights, x)          # head -> (K, B, classes)
        for k, clf in enumerate(clfs):
            for head, logits in outs.items():
                clf.test_metrics[head].update(logits[k].float(), y)
        loss += torch.nn.functional.cross_entropy(outs["avg"].float().flatten(0, 1), y.repeat(len(clfs)),
                                                  reduction="none").view(len(clfs), -1).sum(1)
        count += len(y)
    commit = git_commit()
    for k, (m, clf, member_dm) in enumerate(zip(members, clfs, data)):
        test = {n.removeprefix("test/"): float(v) for coll in clf.test_metrics.values() for n, v in coll.compute().items()}
        test["loss"] = float(loss[k] / count)   # Lightning's epoch mean of the batch losses, weighted by batch size
        record_summary(m.run_dir, "done", experiment=m.config["experiment"], identity=m.identity,
                       evaluation=evaluation_identity(m.config, precision=precision, checkpoint=BEST),
                       hparams=clf.hparams, complexity=clf.complexity,
                       datamodule=member_dm, precision=str(precision),
                       devices=1, commit=commit, test=test)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments fit_packed", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("members", nargs="+",
                   help='a .json file holding {"members": [[fit arguments], ...]}; several: their groups one after '
                        "another in this one process (a sweep's stage: the data decoded once, the step compiled "
                        "once per shape), a failing group reported and the next one trained")
    p.add_argument("--compile", choices=("auto", "true", "false"), default="auto",
                   help="compile the group's whole step with torch.compile(fullgraph=True): auto = on CUDA "
                        "only, as CUDA graphs (mode reduce-overhead); on the CPU it pays only over long groups "
                        "(make bench)")

    def one_line(message: str):
        raise ValueError(f"{message} (python -m experiments fit_packed --help)")
    p.error = one_line
    a = p.parse_args(argv)
    groups = [_members_file(path) for path in a.members]   # every file read before anything trains
    compile_ = {"auto": None, "true": True, "false": False}[a.compile]
    status, failed = {}, 0
    for path, arg_lists in zip(a.members, groups):
        try:
            status.update(fit_packed(arg_lists, compile=compile_))
        except Exception as e:
            if len(groups) == 1:
                raise
            failed += 1   # the sweep records each member's failure from its summary; the next group trains
            traceback.print_exc()
            print(f"fit_packed: group {path} failed: {type(e).__name__}: {e}", file=sys.stderr)
    for name, s in status.items():
        print(f"{name}: {s}", file=sys.stderr)
    return 0 if not failed and all(s in ("fitted", "done") for s in status.values()) else 1


def _members_file(path: str) -> list[list[str]]:
    try:
        return parse_json(Path(path).read_text())["members"]
    except FileNotFoundError:
        raise ValueError(f"fit_packed: {path!r} does not exist") from None
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"fit_packed: {path!r} is not a members file ({type(e).__name__}: {e}): "
                         'allowed {"members": [[fit arguments], ...]}') from None
