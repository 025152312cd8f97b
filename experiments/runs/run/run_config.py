"""A run folder's config.yaml read as data: what `test`, `validate` and `probe` take from a folder
that may come from elsewhere.

config.yaml holds what `fit` resolved. Handed to jsonargparse, it would import any dotted name that
an option's type allows a class or a callable for (a logger, a callback's class_path or Callable
argument, even as a bare or a JSON string) and read any section given as a file name; a trusted
logger, profiler or cache folder would write wherever the file says. So the file is read with
yaml.safe_load and checked key by key against `fit`'s own options:
  kept       the data, the model, the seed, the experiment, and the trainer settings an evaluation
             uses (EVALUATION), each a plain value of its option's type;
  refused    an unknown key, a section that is not a mapping (an included file), or a kept key of
             another type: one line, before anything is imported;
  left out   everything else; a note names what was set beyond the training's own settings
             (FIT_ONLY): loggers, callbacks, profilers and plugins write or run where the folder
             says, and where an evaluation runs (devices, strategy) is the evaluator's choice.
Only the kept plain values reach the parser.
"""
from __future__ import annotations

import functools
import inspect
import sys
import types
import typing
from pathlib import Path

import yaml

from experiments.runs.run.run_folder import RunFolder
from experiments.runs.run.trained import FIT
from modules.files import parse_yaml

SECTIONS = ("trainer", "model", "data")
# trainer settings an evaluation takes from its run: its arithmetic, which batches, how it is shown
EVALUATION = ("precision", "limit_test_batches", "limit_val_batches", "deterministic", "benchmark", "inference_mode",
              "enable_progress_bar", "enable_model_summary")
# settings of the training alone, left out without a word: test and validate do nothing with them
FIT_ONLY = frozenset({
    "runs_dir", "run_name", "test_after_fit", "stop_at_val_acc",
    *(f"trainer.{k}" for k in (
        "max_epochs", "min_epochs", "max_steps", "min_steps", "max_time", "limit_train_batches",
        "limit_predict_batches", "val_check_interval", "check_val_every_n_epoch", "num_sanity_val_steps",
        "log_every_n_steps", "enable_checkpointing", "accumulate_grad_batches", "gradient_clip_val",
        "gradient_clip_algorithm", "detect_anomaly", "sync_batchnorm", "reload_dataloaders_every_n_epochs",
        "model_registry"))})
MODEL_FROM_DATA = ("num_classes", "image_size", "in_chans")  # linked from the data by SuiteCLI, not options
NOT_KEPT = frozenset({"data.cache_dir"})  # the decoded cache is written there: the evaluator's own is used


@functools.cache
def options() -> dict[str, tuple]:
    """`fit`'s options by dotted key: (type, default)."""
    from lightning.pytorch import Trainer

    from datamodules import ImageClassificationDataModule
    from modules import ImageClassifier
    out = {"seed_everything": (bool | int, True), "experiment": (str, "single"),
           "ckpt_path": (str | None, None), "weights_only": (bool | None, None),
           **{k: (object, None) for k in ("runs_dir", "run_name", "test_after_fit", "stop_at_val_acc")}}
    for section, cls in zip(SECTIONS, (Trainer, ImageClassifier, ImageClassificationDataModule)):
        hints = typing.get_type_hints(cls.__init__)
        out.update({f"{section}.{name}": (hints[name], p.default)
                    for name, p in inspect.signature(cls.__init__).parameters.items()
                    if name != "self" and not (section == "model" and name in MODEL_FROM_DATA)})
    return out


def _kept(key: str) -> bool:
    """Whether an evaluation takes `key` from a run's config."""
    section, _, name = key.rpartition(".")
    return key in ("seed_everything", "experiment") or section in ("model", "data") and key not in NOT_KEPT \
        or section == "trainer" and name in EVALUATION


def load_config(run_dir: str | Path, given: typing.Collection[str] = ()) -> dict:
    """The kept settings of `run_dir`/config.yaml as nested plain values (its data section
    rebuilds the run's splits); one line refuses a file that is not a suite config, and a note on
    stderr names what was set and left out (not options in `given`, the command line's)."""
    path = RunFolder(run_dir).config_file
    settings, left_out = {}, []
    for key, value in _entries(path):
        kind, default = options().get(key, (None, None))
        if kind is None:
            raise ValueError(f"run config {str(path)!r} has unknown key {key!r}: allowed the options of {FIT} "
                             "(its --help lists them)")
        if _kept(key):
            if not _fits(value, kind):
                raise ValueError(f"run config {str(path)!r} has {key}={_shown(value)}: allowed {_described(kind)} "
                                 "(a run's config is read as plain values)")
            section, _, name = key.rpartition(".")
            (settings.setdefault(section, {}) if section else settings)[name] = value
        elif key not in FIT_ONLY and key not in given and value != default:
            left_out.append(key)
    if left_out:
        _note(f"run config {str(path)!r} sets {', '.join(left_out)}: left out (a run folder gives its data, model "
              "and evaluation settings only; pass other options on the command line)")
    return settings


@functools.cache
def _note(text: str) -> None:
    """Once per process: `probe` checks every folder before it reads each again, and the
    experiments' runners read a run's config more than once."""
    print(f"note: {text}", file=sys.stderr)


def _entries(path: Path):
    """(dotted key, value) of every option in the file; sections must be mappings."""
    try:
        cfg = parse_yaml(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        cfg = None
    if not isinstance(cfg, dict) or "data" not in cfg:
        raise ValueError(f"run config {str(path)!r} is missing or has no data section: allowed a run folder "
                         f"written by {FIT}")
    for key, value in cfg.items():
        if key not in SECTIONS:
            yield str(key), value
        elif not isinstance(value, dict):  # a file name here would be read as that section
            raise ValueError(f"run config {str(path)!r} has {key}={_shown(value)}: allowed a mapping of {key} "
                             "options (a run's config is read alone: no included file)")
        else:
            yield from ((f"{key}.{k}", v) for k, v in value.items())


def _fits(value, kind) -> bool:
    """Whether a YAML value is a plain value of the type `kind`; a class or a callable never is."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin in (tuple, list):
        if not isinstance(value, list):
            return False
        items = args if origin is tuple and ... not in args else args[:1] * len(value)
        return len(items) == len(value) and all(map(_fits, value, items))
    plain = {type(None): type(None), bool: bool, int: int, float: (int, float), str: str}.get(kind)
    return plain is not None and isinstance(value, plain) and (kind is bool or not isinstance(value, bool))


def _described(kind) -> str:
    """A type in words: 'an int or null', "one of 'warn'"."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_described(a) for a in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (tuple, list):
        return f"a list of {_described(args[0])}"
    return {type(None): "null", bool: "true or false", int: "an integer", float: "a float",
            str: "a string"}.get(kind, "no value from a file")


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
