"""Models and the training recipe: `from modules import build_model, ImageClassifier`."""
from .budgets import ARCHS, BUDGET_TARGETS, FAMILIES
from .complexity import count_flops, count_params
from .registry import ConfigError, build_model

__all__ = ["ARCHS", "BUDGET_TARGETS", "FAMILIES", "ConfigError", "build_model", "count_flops", "count_params"]
from .classifier import ImageClassifier  # noqa: E402

__all__ += ["ImageClassifier"]
from .packed import PackedClassifier  # noqa: E402

__all__ += ["PackedClassifier"]
