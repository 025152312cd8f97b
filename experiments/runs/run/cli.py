"""`python -m experiments fit|validate|test`: one training run through LightningCLI.

Every run gets a folder results/runs/<experiment>/<readable name>_<config hash>/ holding its
TensorBoard events, the resolved config.yaml, identity.json (the settings the hash covers), the
training subset's indices and checkpoints/{best,last}.ckpt. Started again with the same
configuration, a fit skips a finished run and resumes an interrupted one exactly (the loader's
position is in the checkpoint); one process at a time holds a run folder. Checkpoints are written
atomically and read as weights only (modules/checkpoint_io.py); a moved folder keeps its names
(runs/checkpoint.py).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import torch
import yaml
from lightning.pytorch.callbacks import EarlyStopping, RichProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_only

from datamodules import ImageClassificationDataModule
from datamodules.image_classification import fixed_shape
from datamodules.sources import short_name
from modules import ImageClassifier
from modules.checkpoint_io import SafeCheckpointIO, UnsafeCheckpointError, read_checkpoint
from modules.classifier import TRAINING_OPTIONS, check_teacher_checkpoint, check_training
from modules.files import parse_json, refuse_links
from modules.registry import check_options

from experiments.runs.run.checkpoint import FinalCheckpoint, RunCheckpoint, TargetGap
from experiments.runs.run.cli_help import HELP_ALL, asks_help, suite_help
from experiments.runs.run.cli_messages import first_line, one_line
from experiments.runs.run.import_policy import enforce
from experiments.runs.run.identity import config_hash, evaluation_identity, folder_name, identity
from experiments.runs.run.names import checked_name, checked_runs_dir, inside
from experiments.runs.run.record_callback import RunRecord
from experiments.runs.run.run_config import load_config
from experiments.runs.run.run_folder import BEST, RunFolder, run_of_checkpoint
from experiments.runs.run.tensorboard import SuiteTensorBoardLogger, session_hparams

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
MAX_STEPS = 2**53  # the schedule's step over its length is a float64: past this, steps share one value
_PARSERS: dict = {}  # (CLI class, with subcommands) -> its parsers: see SuiteCLI.setup_parser


def default_precision() -> str:
    """bf16 autocast where the hardware runs bf16 matmuls natively, else fp32."""
    if torch.cuda.is_available():
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    return cpu_precision()


def cpu_precision() -> str:
    """What a run on this machine's CPU trains in: bf16 autocast where its cores run bf16 matmuls
    natively (an emulated bf16 is 10-100x slower), else fp32."""
    return "bf16-mixed" if torch.backends.cpu.get_cpu_capability() in ("AVX512", "AVX512_BF16") \
        and torch.cpu._is_avx512_bf16_supported() else "32-true"


def run_name(model: dict, data: dict) -> str:
    """family-budget_dataset_f0.1_s0 (or _n5000 for an absolute train_size): the readable part."""
    dataset = short_name(str(data["dataset"]))
    size = f"n{data['train_size']}" if data.get("train_size") is not None else f"f{data['fraction']:g}"
    return f"{model['family']}-{model['budget']}_{dataset}_{size}_s{data['seed']}"


def with_run_config(args: list[str] | None) -> list[str]:
    """validate/test of <run>/checkpoints/*.ckpt start from that run's config.yaml, read as data (its
    data, model and evaluation settings: see run_config.py); options given on the command line still
    override it."""
    args = list(sys.argv[1:] if args is None else args)
    if not args or args[0] not in ("validate", "test"):
        return args
    ckpt = next((a.split("=", 1)[1] for a in args if a.startswith("--ckpt_path=")), None)
    if ckpt is None and "--ckpt_path" in args[:-1]:
        ckpt = args[args.index("--ckpt_path") + 1]
    run = run_of_checkpoint(ckpt)
    if run is None:
        return args
    given = {a.split("=", 1)[0].removeprefix("--") for a in args if a.startswith("--")}
    # the checked plain values as the text of a config (jsonargparse reads a --config string as YAML)
    return [args[0], "--config", yaml.safe_dump(load_config(run.path, given)), *args[1:]]


def given_model_keys(args: list[str]) -> list[str]:
    """The model options written on the command line (--model.k v or --model.k=v)."""
    return [a.split("=", 1)[0].removeprefix("--model.") for a in args if a.startswith("--model.")]


class SuiteCLI(LightningCLI):
    def __init__(self, args=None):
        self._given_model = given_model_keys(list(sys.argv[1:] if args is None else args))
        super().__init__(
            ImageClassifier, ImageClassificationDataModule, args=with_run_config(args),
            save_config_kwargs={"overwrite": True},
            parser_kwargs={"prog": "python -m experiments", "exit_on_error": False,  # see parse_arguments
                           **{c: {"default_config_files": [str(CONFIGS / "default.yaml")]}
                              for c in ("fit", "validate", "test")}},
            auto_configure_optimizers=False)

    def setup_parser(self, add_subcommands: bool, main_kwargs: dict, subparser_kwargs: dict) -> None:
        """Built once per process and class: reading every Trainer, model and data signature takes
        ~0.2 s, and a process may make many CLIs (a sweep's plan, in-process fits, probes). The
        arguments are always the same, and parsing reads the parser without changing it."""
        key = (type(self), add_subcommands)
        if key not in _PARSERS:
            super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
            _PARSERS[key] = (self.parser, getattr(self, "_subcommand_parsers", None),
                             getattr(self, "_subcommand_method_arguments", None))
        self.parser, self._subcommand_parsers, self._subcommand_method_arguments = _PARSERS[key]

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--experiment", default="single", help="group folder under runs_dir")
        parser.add_argument("--runs_dir", default="results/runs", help="where run folders go")
        parser.add_argument("--run_name", default=None,
                            help="readable part of the run folder's name (default family-budget_data_fraction_seed); "
                                 "a hash of the run's configuration is always appended")
        parser.add_argument("--test_after_fit", type=bool, default=True,
                            help="fit: evaluate the best checkpoint on the test split afterwards")
        parser.add_argument("--stop_at_val_acc", type=Optional[float], default=None,
                            help="fit: stop at the first validation whose accuracy reaches this value; its best.ckpt "
                                 "holds the weights of the validation closest to it, below or at/above (exp-distill's "
                                 "teacher of matched accuracy); part of the run's identity")
        # the model is shaped by the data
        parser.link_arguments("data.image_size", "model.image_size", apply_on="instantiate")
        parser.link_arguments("data.num_channels", "model.in_chans", apply_on="instantiate")
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")

    def parse_arguments(self, parser: LightningArgumentParser, args) -> None:
        """Bad input as one line naming the key, the value and what is allowed, instead of
        jsonargparse's usage text; plus the ranges the parser does not check."""
        import warnings
        from argparse import ArgumentError
        argv = list(sys.argv[1:] if args is None else args)
        if argv and argv[0] in self._subcommand_parsers and asks_help(argv):
            print(suite_help(self._subcommand_parsers[argv[0]], argv[0], full=HELP_ALL in argv), end="")
            raise SystemExit(0)
        enforce()  # a value may name code only from trusted packages (import_policy.py)
        try:
            with warnings.catch_warnings():  # the args are sys.argv's (plus a run's config.yaml): no mistake
                warnings.filterwarnings("ignore", "LightningCLI's args parameter is intended")
                super().parse_arguments(parser, args)
        except ArgumentError as e:
            argv = list(sys.argv[1:] if args is None else args)
            raise ValueError(one_line(str(e), argv, self._subcommand_parsers.get(argv[0] if argv else "", parser))) from None
        self._check_parsed(self.config[self.config.subcommand] if self.config.get("subcommand") else self.config)

    @staticmethod
    def _check_parsed(c) -> None:
        """The ranges the parser does not check: the seed, and names that become folders."""
        seed = c.get("seed_everything")
        if not isinstance(seed, bool) and not 0 <= seed <= 2**32 - 1:
            raise ValueError(f"seed_everything={seed}: allowed true, false or integers 0..{2**32 - 1}")
        # names become folders under runs_dir: checked here, before anything (a sweep's plan too) uses them
        checked_runs_dir(c.get("runs_dir"))
        checked_name("experiment", c.get("experiment"))
        if c.get("run_name") is not None:
            checked_name("run_name", c.get("run_name"))
        stop = c.get("stop_at_val_acc")
        if stop is not None and not 0 < stop <= 1:
            raise ValueError(f"stop_at_val_acc={stop}: allowed an accuracy in (0, 1]")

    def before_instantiate_classes(self) -> None:
        """fit: trainer limits that would train nothing, and a run folder that cannot be written,
        rejected before any data is loaded; validate/test: a checkpoint that cannot fit data of a
        fixed shape, before that data is decoded or downloaded (the model is built from its shape)."""
        if self.subcommand != "fit":
            limit = "limit_test_batches" if self.subcommand == "test" else "limit_val_batches"
            if self._cfg()["trainer"].get(limit) in (0, 0.0):  # Lightning would evaluate nothing and say nothing
                raise ValueError(f"trainer.{limit}=0: {self.subcommand} would evaluate no batch; allowed a share in "
                                 "(0, 1], an integer >= 1 (batches), or null for all")
            refuse_links(self.run_dir())  # its records go there (fit checks its folder when it locks it)
            data = self._cfg()["data"]
            return self._check_checkpoint_matches_data(fixed_shape(data["dataset"], data.get("resize_to")))
        trainer = self._cfg()["trainer"]
        for key, value in (("max_steps", trainer.get("max_steps")), ("max_epochs", trainer.get("max_epochs"))):
            if value is not None and (value == 0 or value < -1 or value > MAX_STEPS):
                raise ValueError(f"trainer.{key}={value}: allowed -1 (no limit) or integers >= 1 and <= 2**53 "
                                 "(the learning-rate schedule counts steps in float64, exact only up to there)")
        if trainer.get("max_steps") == -1 and trainer.get("max_epochs") == -1:
            raise ValueError("trainer.max_steps=-1 with trainer.max_epochs=-1: the learning-rate schedule (warm-up, "
                             "then cosine to the last step) needs an end: allowed a limit on either")
        interval = trainer.get("val_check_interval")
        if interval is not None and (interval <= 0 or isinstance(interval, float) and interval > 1):
            raise ValueError(f"trainer.val_check_interval={interval}: allowed a float in (0, 1] (share of an "
                             "epoch) or an integer >= 1 (training batches)")
        accumulate = trainer.get("accumulate_grad_batches")
        if isinstance(accumulate, int) and accumulate < 1:
            raise ValueError(f"trainer.accumulate_grad_batches={accumulate}: allowed integers >= 1 (batches per "
                             "optimiser step)")
        # an integer interval counts training batches, max_steps optimiser steps of `accumulate` batches each
        steps, per_step = trainer.get("max_steps"), accumulate if isinstance(accumulate, int) else 1
        if isinstance(interval, int) and not isinstance(interval, bool) and steps is not None \
                and 1 <= steps * per_step < interval:
            raise ValueError(f"trainer.val_check_interval={interval} with trainer.max_steps={steps}"
                             + (f" of {per_step} batches each" if per_step > 1 else "") + ": allowed at most "
                             + ("max_steps" if per_step == 1 else f"{steps * per_step} batches")
                             + " (the run would end before its first validation, with no best checkpoint)")
        model = self._cfg()["model"]
        if model.get("teacher_checkpoint") and model.get("distillation") != "none":
            check_teacher_checkpoint(model["teacher_checkpoint"])
        run_dir = self.run_dir().absolute()
        existing = next(p for p in (run_dir, *run_dir.parents) if p.exists())
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise ValueError(f"cannot write to runs_dir {self._cfg()['runs_dir']!r}: {str(existing)!r} is "
                             + ("not a folder" if not existing.is_dir() else "not writable"))
        refuse_links(run_dir)  # before the Trainer's first lines; checked again once the folder is locked

    # ---------------- which folder: the run's identity ----------------
    def _cfg(self) -> dict:
        c = self.config[self.subcommand] if self.subcommand else self.config
        return c.as_dict()

    def identity(self) -> dict:
        cfg = self._cfg()
        key = json.dumps(cfg, sort_keys=True, default=str)  # fit_packed parses each member into one CLI
        if getattr(self, "_identity", (None,))[0] != key:  # once per config: an image folder's files are listed
            t = cfg["trainer"]
            self._identity = key, identity(cfg, precision=t.get("precision") or default_precision(),
                                           world_size=world_size(t))
        return dict(self._identity[1])

    def run_dir(self) -> Path:
        c = self._cfg()
        ckpt = run_of_checkpoint(c.get("ckpt_path")) if self.subcommand in ("validate", "test") else None
        if ckpt is not None:
            return ckpt.path  # evaluating a run's checkpoint: records go to that run
        readable = c.get("run_name") or run_name(c["model"], c["data"])
        return inside(c["runs_dir"], Path(c["runs_dir"]) / c["experiment"] / folder_name(readable, self.identity()))

    def _parse_ckpt_path(self) -> None:
        """Model hyper-parameters come from the checkpoint; one clear error when it is unreadable."""
        c = self.config[self.config.subcommand] if self.config.get("subcommand") else {}
        path = c.get("ckpt_path") if c else None
        if path and self.config.subcommand == "fit":
            raise ValueError(f"fit --ckpt_path {path!r}: a fit resumes its own run folder by itself; "
                             "allowed only with validate and test")
        if not path and self.config.get("subcommand") in ("validate", "test"):  # else an untrained model is scored
            raise ValueError(f"ckpt_path={path!r}: {self.config.subcommand} needs --ckpt_path, a checkpoint "
                             "of this suite such as <runs_dir>/<experiment>/<run>/checkpoints/best.ckpt")
        if path and path != "last" and Path(path).is_dir():
            raise ValueError(f"ckpt_path {path!r} is a folder: allowed a checkpoint file of this suite, such as "
                             f"{str(Path(path) / 'best.ckpt')!r}")
        if path and path != "last" and not Path(path).is_file():
            raise ValueError(f"ckpt_path {path!r} does not exist")
        if path and path != "last":
            try:  # weights only, before Lightning reads its hyper-parameters; kept for the data check
                self._saved_hparams = read_checkpoint(path).get("hyper_parameters", {})
            except ValueError as e:
                raise type(e)(f"ckpt_path {str(e).removeprefix('checkpoint ')}") from None
            self._check_model_options_match(c.get("model"), path)
        try:
            super()._parse_ckpt_path()
        except Exception as e:
            raise ValueError(f"ckpt_path {path!r} is not a readable checkpoint of this suite "
                             f"({first_line(e)})") from None

    def _check_model_options_match(self, model, path: str) -> None:
        """validate/test build the model from the checkpoint's hyper-parameters: a model option given
        on the command line that says otherwise would be silently replaced, so it is refused."""
        saved = getattr(self, "_saved_hparams", {})
        plain = lambda v: list(v) if isinstance(v, (list, tuple)) else v  # noqa: E731 (betas: tuple or list)
        for key in self._given_model:
            if model is not None and key in saved and plain(model.get(key)) != plain(saved[key]):
                raise ValueError(f"--model.{key}={model.get(key)!r}: {self.config.subcommand} builds the model from "
                                 f"ckpt_path {path!r}, trained with {key}={saved[key]!r}; allowed data and trainer "
                                 "options (the model's are the checkpoint's)")

    def instantiate_trainer(self, **kwargs):
        # the data is built, nothing else yet: no trainer output, no folder
        data = self._cfg()["data"]
        if self.subcommand != "fit" and fixed_shape(data["dataset"], data.get("resize_to")) is None:
            self._check_checkpoint_matches_data()  # a fixed shape was checked before the data was built
        self.datamodule.check_sizes()
        trainer_cfg = self.config_init[self.subcommand]["trainer"]
        run_dir = self.run_dir()
        if self.subcommand == "fit":  # their lines come before the Trainer's
            RunFolder(run_dir).check_files()
            refuse_planted(RunFolder(run_dir))
        if trainer_cfg.get("precision") is None:
            kwargs["precision"] = default_precision()
        if trainer_cfg.get("logger") in (None, True):
            # a fit's hparams session: its identity, status running (its summary's status once it ends)
            fit = self.subcommand == "fit"
            kwargs["logger"] = SuiteTensorBoardLogger(
                save_dir=str(run_dir.parent), name=run_dir.name, version="", train_size=self.datamodule.train_size,
                hparams=session_hparams(self.identity(), "running", self.model.complexity) if fit else None)
        callbacks = list(trainer_cfg.get("callbacks") or [])
        c = self._cfg()
        stop = c.get("stop_at_val_acc") if self.subcommand == "fit" else None
        if stop is not None:  # best.ckpt: the validation closest to the target, not the highest one
            callbacks.append(TargetGap(stop))
        if trainer_cfg.get("enable_checkpointing", True) is not False:
            callbacks += [RunCheckpoint(dirpath=RunFolder(run_dir).checkpoints, filename=Path(BEST).stem,
                                        monitor="val/acc" if stop is None else TargetGap.KEY,
                                        mode="max", save_last=True, auto_insert_metric_name=False),
                          FinalCheckpoint(RunFolder(run_dir).last_checkpoint)]
        if trainer_cfg.get("enable_progress_bar", True) is not False and sys.stdout.isatty():
            callbacks.append(RichProgressBar())
        precision = trainer_cfg.get("precision") or kwargs["precision"]
        if self.subcommand == "fit":
            if stop is not None:  # the whole schedule stays that of the full run: same weights up to the stop
                # EarlyStopping stops when val/acc > threshold; reaching `stop` counts: accuracies on fewer
                # than 100,000 images lie >= 1e-5 apart, so 1e-6 below lets no lower accuracy through
                callbacks.append(EarlyStopping(monitor="val/acc", mode="max", stopping_threshold=stop - 1e-6,
                                               patience=2**31, check_on_train_epoch_end=False, verbose=False))
            callbacks.append(RunRecord(run_dir, c["experiment"], identity=self.identity(), stop_at_val_acc=stop,
                                       evaluation=evaluation_identity(c, precision=precision, checkpoint=BEST)))
        else:  # a checkpoint's run keeps its config.yaml; the result goes beside its summary unless settings match
            self.save_config_callback = None
            ckpt = Path(c["ckpt_path"]).name if c.get("ckpt_path") else "none"
            callbacks.append(RunRecord(run_dir, c["experiment"],
                                       evaluation=evaluation_identity(c, precision=precision, checkpoint=ckpt)))
        kwargs["callbacks"] = callbacks
        # atomic writes and weights-only reads for every checkpoint this Trainer saves or restores
        kwargs["plugins"] = [*given_plugins(trainer_cfg.get("plugins")), SafeCheckpointIO()]
        kwargs.setdefault("default_root_dir", str(run_dir))
        return super().instantiate_trainer(**kwargs)

    # ---------------- what runs ----------------
    def _run_subcommand(self, subcommand: str) -> None:
        if subcommand != "fit":
            return super()._run_subcommand(subcommand)
        run_dir = self.run_dir()
        if rank_zero_only.rank != 0:  # a DDP process started by rank 0, which holds the folder
            return self._fit_unless_finished(run_dir)
        lock = RunFolder(run_dir).lock()
        try:
            self._fit_unless_finished(run_dir)
        finally:
            lock.close()  # releases the lock (the OS also does, should this process die)

    def _fit_unless_finished(self, run_dir: Path) -> None:
        check_folder_identity(run_dir, self.identity(), write=False)
        folder = RunFolder(run_dir)
        summary = folder.summary()
        status = summary.status if summary is not None else None
        if status == "done":
            acc = summary.test_acc
            print(f"{run_dir} is done" + (f" (test acc {acc:.4f})" if acc is not None else "")
                  + ": nothing to run; delete the folder to run it again", file=sys.stderr)
            return
        if status == "diverged":
            raise FloatingPointError(f"{run_dir} diverged before ({summary.error or ''}): nothing to run")
        if status == "fitted":  # trained, test not yet recorded: only the test is left
            best = folder.best_checkpoint
            read_checkpoint(best)  # a refused file is the only line printed
            print(f"{run_dir} is trained; testing its best checkpoint", file=sys.stderr)
            self.trainer.checkpoint_callback.best_model_path = str(best)
            return self.after_fit()
        resume = resumable_checkpoint(folder)
        if resume is not None:
            print(f"resuming from {resume}", file=sys.stderr)
            self.config_init["fit"]["ckpt_path"] = str(resume)
        # recorded once the folder's checkpoints are known to be readable: a refused one leaves no trace
        check_folder_identity(run_dir, self.identity())
        super()._run_subcommand("fit")

    def after_fit(self) -> None:
        if self.config_init["fit"]["test_after_fit"] and not self.trainer.interrupted:
            best = self.trainer.checkpoint_callback.best_model_path if self.trainer.checkpoint_callback else ""
            if best:
                read_checkpoint(best)  # a refused file is one line here, not a "failed" record of a trained run
            self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path=best or None, weights_only=True)

    def _check_checkpoint_matches_data(self, shape: dict | None = None) -> None:
        """validate/test: the checkpoint's model must fit the data it is evaluated on (`shape`, or the
        built DataModule's)."""
        path = self._cfg().get("ckpt_path")
        if not path or (shape is None and getattr(self, "datamodule", None) is None):
            return
        saved = getattr(self, "_saved_hparams", {})  # read by _parse_ckpt_path (none for "last")
        for key, value in (shape or self.datamodule.shape()).items():
            if key in saved and saved[key] != value:
                raise ValueError(f"ckpt_path {path!r} was trained with {key}={saved[key]}, but data.dataset "
                                 f"{self._cfg()['data']['dataset']!r} has {key}={value}: evaluate it on the data "
                                 "it was trained on")


def given_plugins(plugins) -> list:
    """trainer.plugins as a list (the option takes one plugin or several)."""
    return list(plugins) if isinstance(plugins, (list, tuple)) else [plugins] if plugins else []


def world_size(trainer_cfg: dict) -> int:
    """Processes the trainer will run (the global batch is batch_size times this): Lightning's
    devices 'auto' and -1 take every GPU, or one CPU process."""
    devices, nodes = trainer_cfg.get("devices", "auto"), int(trainer_cfg.get("num_nodes") or 1)
    gpu = torch.cuda.is_available() and str(trainer_cfg.get("accelerator") or "auto") in ("auto", "gpu", "cuda")
    if isinstance(devices, (list, tuple)):
        n = len(devices)
    elif isinstance(devices, str) and "," in devices:
        n = len([d for d in devices.split(",") if d.strip()])
    elif str(devices) in ("auto", "-1"):
        n = torch.cuda.device_count() if gpu else 1
    else:
        n = int(devices)
    return n * nodes


def check_folder_identity(run_dir: Path, ident: dict, write: bool = True) -> None:
    """A folder is resumed only by the configuration it was started with; a new folder records it
    (unless `write` is False: the caller records it once it knows the run will go ahead)."""
    folder = RunFolder(run_dir)
    path = folder.identity_file
    if path.exists():
        try:
            stored = parse_json(path.read_text())["identity"]
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{path} is unreadable: this folder's configuration is unknown; "
                             "use another --run_name or delete the folder") from None
        if stored != ident:
            diff = sorted(k for k in set(stored) | set(ident) if stored.get(k) != ident.get(k))
            k = diff[0]
            raise ValueError(f"run folder {str(run_dir)!r} holds another configuration ({k}: {stored.get(k)!r} there, "
                             f"{ident.get(k)!r} here, {len(diff)} key(s) differ): use another --run_name")
    elif write and rank_zero_only.rank == 0:
        folder.write_identity(ident, config_hash(ident))  # atomic: a full disk leaves no torn file


def refuse_planted(folder: RunFolder) -> None:
    """One line for a checkpoint in a run folder that holds code (UnsafeCheckpointError); a torn or
    foreign file passes here: the resume (or the test of a trained run) says what it does about it."""
    for path in (folder.last_checkpoint, folder.best_checkpoint):
        if path.is_file():
            try:
                read_checkpoint(path)
            except UnsafeCheckpointError:
                raise
            except ValueError:
                pass


def resumable_checkpoint(folder: RunFolder) -> Path | None:
    """last.ckpt, or best.ckpt when last.ckpt is unreadable (training is deterministic, so resuming
    from an earlier step reaches the same end); None when neither exists; one clear line when no
    checkpoint there can be read."""
    problems = []
    for path in (folder.last_checkpoint, folder.best_checkpoint):
        name = path.name
        if not path.exists():
            continue
        try:
            ckpt = read_checkpoint(path)
            if not {"state_dict", "loops", "global_step"} <= set(ckpt):
                raise ValueError("not a training checkpoint")
        except UnsafeCheckpointError:
            raise  # a planted file, not a torn one: no fallback that would hide it
        except Exception as e:
            problems.append(f"{name}: {first_line(e)}")
            continue
        if problems:
            print(f"warning: {problems[0]}; resuming from {name} (step {ckpt['global_step']}) instead",
                  file=sys.stderr)
        return path
    if problems:
        raise ValueError(f"no readable checkpoint in {str(folder.checkpoints)!r} ({'; '.join(problems)}): delete that folder "
                         "to train this run again from the start")
    return None


class _ParseOnly(SuiteCLI):
    """The fit parser alone: resolves a run's configuration without building anything."""

    def _set_seed(self) -> None:
        pass

    def before_instantiate_classes(self) -> None:
        pass  # a sweep resolves DeiT's folder before its teacher has trained; `fit` checks later

    def instantiate_classes(self) -> None:
        pass

    def _run_subcommand(self, subcommand: str) -> None:
        pass


def resolve_run_dir_checked(args: list[str]) -> Path:
    """`run_dir`: the folder `fit` would use, after the model's and the data's values are checked as
    `fit` checks them (nothing is built or loaded), so that a typo is an error, not a path."""
    from jsonargparse import Namespace
    cfg = _ParseOnly(args=["fit", *args]).config["fit"]
    model, data = (cfg[k].as_dict() if isinstance(cfg[k], Namespace) else dict(cfg[k]) for k in ("model", "data"))
    check_options(**{k: model[k] for k in ("family", "budget", "patch_size", "pos_embed", "pool", "window_size",
                                           "drop_path_rate", "allow_unshifted")})
    check_training(**{k: model[k] for k in TRAINING_OPTIONS})  # as the model checks them when fit builds it
    ImageClassificationDataModule(**data)  # its __init__ checks the values and loads nothing
    return resolve_run_dirs([args])[0]


def resolve_run_dirs(arg_lists: list[list[str]]) -> list[Path]:
    """The folder each `fit` argument list would train in (what a sweep skips, resumes or runs).
    The fit parser's defaults are computed once and each list parsed over a copy of them, about 7x
    faster than a whole CLI parse per run (a gpu profile plans hundreds); a list that fails there
    goes through the CLI's own parse, which turns the error into its one line."""
    from jsonargparse import Namespace
    if not arg_lists:
        return []
    cli = _ParseOnly(args=["fit", *arg_lists[0]])
    fit = cli._subcommand_parsers["fit"]
    defaults = fit.get_defaults()
    out = []
    for args in arg_lists:
        try:
            cfg = fit.parse_args(list(args), namespace=defaults.clone(), defaults=False)
        except Exception:  # the CLI's parse says what is wrong, in one line
            cli.parse_arguments(cli.parser, ["fit", *args])
            cfg = cli.config["fit"]
        cli._check_parsed(cfg)
        cli.config = Namespace(subcommand="fit", fit=cfg)
        out.append(cli.run_dir())
    return out
