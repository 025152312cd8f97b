"""A run is its whole configuration: which resolved settings make its identity, and their hash.

Everything under `trainer`, `model` and `data` (and `seed_everything`) can change what a run
produces and so belongs to its identity, except the settings below, which only change how it is
shown, where it reads from, or how it is evaluated on test; an image folder is named by the files
it holds, not by the path given (`dataset_identity`). The run folder is
`<readable name>_<hash of the identity>`, so two configurations never share a folder.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import PurePath

from datamodules.sources import dataset_identity, short_name

IDENTITY_SECTIONS = ("seed_everything", "trainer", "model", "data")
NOT_IDENTITY = frozenset({
    # shown, not computed
    "trainer.logger", "trainer.callbacks", "trainer.enable_progress_bar", "trainer.enable_model_summary",
    "trainer.log_every_n_steps", "trainer.profiler", "trainer.enable_autolog_hparams", "trainer.model_registry",
    "trainer.default_root_dir", "trainer.enable_checkpointing", "trainer.num_sanity_val_steps",
    # where it runs: replaced by the resolved trainer.world_size (the global batch is batch_size x world_size)
    "trainer.accelerator", "trainer.strategy", "trainer.devices", "trainer.num_nodes",
    # evaluation only: the test split never changes training (see evaluation_identity)
    "trainer.limit_test_batches", "trainer.limit_predict_batches", "trainer.inference_mode",
    "data.eval_batch_size",
    # where the same data is read from
    "data.data_dir", "data.cache_dir",
    # permits a Swin window that does not shift, changes nothing a permitted run computes
    "model.allow_unshifted",
})
HASH_CHARS = 8
RUN_FOLDER = re.compile(rf".+_[0-9a-f]{{{HASH_CHARS}}}")  # <readable name>_<hash>, as folder_name makes it


def flatten(cfg: Mapping, prefix: str = "") -> dict:
    """{'trainer': {'max_steps': 5}} -> {'trainer.max_steps': 5}; lists and tuples become lists."""
    out = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = list(v) if isinstance(v, tuple) else v
    return out


def identity(cfg: Mapping, *, precision: str, world_size: int) -> dict:
    """The settings that define a fit, flattened and sorted; `precision` and `world_size` are the
    resolved values (a config may leave them to the hardware)."""
    flat = flatten({k: cfg[k] for k in IDENTITY_SECTIONS if k in cfg})
    ident = {k: _plain(v) for k, v in flat.items() if k not in NOT_IDENTITY}
    if isinstance(ident.get("model.teacher_checkpoint"), str):
        ident["model.teacher_checkpoint"] = teacher_identity(ident["model.teacher_checkpoint"])
    _name_dataset(ident)
    ident["trainer.precision"] = str(precision)
    ident["trainer.world_size"] = int(world_size)
    if cfg.get("stop_at_val_acc") is not None:  # a run stopped early is another run (absent: every older hash stands)
        ident["stop_at_val_acc"] = float(cfg["stop_at_val_acc"])
    return dict(sorted(ident.items()))


def teacher_identity(path: str) -> str:
    """A teacher checkpoint inside a run folder of this suite is named by that folder and the file,
    not by where the pool keeps it: .../runs/datascale/<run>_<hash>/checkpoints/best.ckpt and
    .../runs/distill/<run>_<hash>/checkpoints/best.ckpt are one teacher (its folder's hash is its
    whole configuration), so a student distilled from it is one run whichever experiment trained
    the teacher. Any other path stays as given."""
    p = PurePath(path)
    if p.parent.name == "checkpoints" and RUN_FOLDER.fullmatch(p.parent.parent.name):
        return f"{p.parent.parent.name}/checkpoints/{p.name}"
    return path


def config_hash(ident: Mapping) -> str:
    return hashlib.sha1(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:HASH_CHARS]


def folder_name(readable: str, ident: Mapping) -> str:
    return f"{readable}_{config_hash(ident)}"


def run_name(family: str, budget: str, dataset: str, fraction: float, seed: int, variant: str, lr: float) -> str:
    """The readable name a spec gives a run: family-budget_dataset_fraction_seed_lr, then its variant
    unless it is the default one."""
    return f"{family}-{budget}_{short_name(dataset)}_f{fraction:g}_s{seed}_lr{lr:g}" + ("" if variant == "default" else f"_{variant}")


def plan_key(name: str) -> str:
    """A run's name without its lr: its cell of a plan (sweep.json's main_runs key), whichever lr the
    tuning chose for it."""
    return re.sub(r"_lr[^_]+", "", name)


def run_variant(folder: str, ident: Mapping) -> str | None:
    """The variant `run_name` put in a run folder's name, read against the run's own family, budget,
    data and lr: 'default' for a name without one, None for a name run_name did not make. A run
    reads it once, when it records itself (record.record_summary; the spec's variant reaches a fit
    only in its --run_name): its summary carries it, and every other reader takes it from there."""
    readable = folder[:-(HASH_CHARS + 1)] if RUN_FOLDER.fullmatch(folder) else folder
    try:
        default = run_name(ident["model.family"], ident["model.budget"], ident["data.dataset"], ident["data.fraction"],
                           ident["data.seed"], "default", ident["model.lr"])
    except (KeyError, TypeError, ValueError):
        return None
    if readable == default:
        return "default"
    return readable[len(default) + 1:] if readable.startswith(default + "_") else None


def evaluation_identity(cfg: Mapping, *, precision: str, checkpoint: str) -> dict:
    """What a test result depends on beyond the weights: the data, the test batches, the precision
    and which checkpoint of the run was evaluated."""
    flat = flatten({"data": cfg.get("data") or {}, "trainer": cfg.get("trainer") or {}})
    out = {k: _plain(v) for k, v in flat.items()
           if k.startswith("data.") and k not in ("data.data_dir", "data.cache_dir", "data.eval_batch_size")}
    _name_dataset(out)
    out["trainer.limit_test_batches"] = _plain(flat.get("trainer.limit_test_batches"))
    out["trainer.precision"] = str(precision)
    out["checkpoint"] = checkpoint
    return dict(sorted(out.items()))


def _name_dataset(ident: dict) -> None:
    """An image folder by what it holds, not by the path given (see dataset_identity)."""
    if isinstance(ident.get("data.dataset"), str):
        ident["data.dataset"] = dataset_identity(ident["data.dataset"])


def _plain(v):
    """Values as JSON holds them (the parser already typed them: a float option gives 1.0, not 1)."""
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in sorted(v.items())}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)
