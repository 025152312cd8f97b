"""`python -m experiments fit|validate|test`: one training run through LightningCLI.

Every run gets a readable folder results/runs/<experiment>/<run name>/ holding its TensorBoard
events, the resolved config.yaml, the training subset's indices and checkpoints/{best,last}.ckpt.
Started again with the same folder, a fit resumes from checkpoints/last.ckpt.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from lightning.pytorch.callbacks import ModelCheckpoint, RichProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import TensorBoardLogger

from datamodules import ImageClassificationDataModule
from modules import ImageClassifier

from .run_record import RunRecord

CONFIGS = Path(__file__).parent / "configs"


def default_precision() -> str:
    """bf16 autocast where the hardware runs bf16 matmuls natively, else fp32."""
    if torch.cuda.is_available():
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    return "bf16-mixed" if torch.backends.cpu.get_cpu_capability() in ("AVX512", "AVX512_BF16") \
        and torch.cpu._is_avx512_bf16_supported() else "32-true"


def run_name(model, data) -> str:
    """family-budget_dataset_f0.1_s0 (or _n5000 for an absolute train_size)."""
    dataset = Path(str(data.dataset).rstrip("/")).name.replace("/", "-")
    size = f"n{data.train_size}" if data.train_size is not None else f"f{data.fraction:g}"
    return f"{model.family}-{model.budget}_{dataset}_{size}_s{data.seed}"


class SuiteCLI(LightningCLI):
    def __init__(self, args=None):
        super().__init__(
            ImageClassifier, ImageClassificationDataModule, args=args,
            save_config_kwargs={"overwrite": True},
            parser_kwargs={"prog": "python -m experiments",
                           **{c: {"default_config_files": [str(CONFIGS / "default.yaml")]}
                              for c in ("fit", "validate", "test")}},
            auto_configure_optimizers=False)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--experiment", default="single", help="group folder under runs_dir")
        parser.add_argument("--runs_dir", default="results/runs", help="where run folders go")
        parser.add_argument("--run_name", default=None, help="run folder name (default family-budget_data_fraction_seed)")
        parser.add_argument("--test_after_fit", type=bool, default=True,
                            help="fit: evaluate the best checkpoint on the test split afterwards")
        # the model is shaped by the data
        parser.link_arguments("data.image_size", "model.image_size", apply_on="instantiate")
        parser.link_arguments("data.num_channels", "model.in_chans", apply_on="instantiate")
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")

    @property
    def run_dir(self) -> Path:
        c = self.config[self.subcommand]
        ckpt = Path(c.ckpt_path) if c.get("ckpt_path") else None
        if self.subcommand != "fit" and ckpt is not None and ckpt.parent.name == "checkpoints" and not c.run_name:
            return ckpt.parent.parent  # evaluating a run's checkpoint: records go to that run
        return Path(c.runs_dir) / c.experiment / (c.run_name or run_name(c.model, c.data))

    def _parse_ckpt_path(self) -> None:
        """Model hyper-parameters come from the checkpoint; one clear error when it is unreadable."""
        c = self.config[self.config.subcommand] if self.config.get("subcommand") else {}
        path = c.get("ckpt_path") if c else None
        if path and path != "last" and not Path(path).is_file():
            raise ValueError(f"ckpt_path {path!r} does not exist")
        try:
            super()._parse_ckpt_path()
        except Exception as e:
            raise ValueError(f"ckpt_path {path!r} is not a readable checkpoint of this suite "
                             f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None

    def instantiate_trainer(self, **kwargs):
        trainer_cfg = self.config_init[self.subcommand]["trainer"]
        run_dir = self.run_dir
        if trainer_cfg.get("precision") is None:
            kwargs["precision"] = default_precision()
        if trainer_cfg.get("logger") in (None, True):
            kwargs["logger"] = TensorBoardLogger(save_dir=str(run_dir.parent), name=run_dir.name, version="",
                                                 default_hp_metric=False)
        callbacks = list(trainer_cfg.get("callbacks") or [])
        if trainer_cfg.get("enable_checkpointing", True) is not False:
            callbacks += [ModelCheckpoint(dirpath=run_dir / "checkpoints", filename="best", monitor="val/acc",
                                          mode="max", save_last=True, auto_insert_metric_name=False)]
        if trainer_cfg.get("enable_progress_bar", True) is not False and sys.stdout.isatty():
            callbacks.append(RichProgressBar())
        callbacks.append(RunRecord(run_dir, self.config[self.subcommand].experiment))
        kwargs["callbacks"] = callbacks
        kwargs.setdefault("default_root_dir", str(run_dir))
        return super().instantiate_trainer(**kwargs)

    def before_fit(self) -> None:
        last = self.run_dir / "checkpoints" / "last.ckpt"
        cfg = self.config_init["fit"]
        if cfg.get("ckpt_path") is None and last.exists():
            print(f"resuming from {last}", file=sys.stderr)
            cfg["ckpt_path"] = str(last)

    def after_fit(self) -> None:
        if self.config_init["fit"]["test_after_fit"] and not self.trainer.interrupted:
            best = self.trainer.checkpoint_callback.best_model_path if self.trainer.checkpoint_callback else ""
            self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path=best or None)
