"""Models and the training recipe: `from modules import build_model, ImageClassifier`.

The budget tables are plain data and load at once; the rest loads on first use (PEP 562), so that
code that only names families and budgets (a sweep's plan, a scheduler's task process) does not
import torch, timm and Lightning."""
from importlib import import_module

from .budgets import ARCHS, BUDGET_TARGETS, FAMILIES

_WHERE = {"count_flops": ".complexity", "count_params": ".complexity", "ConfigError": ".registry",
          "build_model": ".registry", "ImageClassifier": ".classifier", "PackedClassifier": ".packed"}

__all__ = ["ARCHS", "BUDGET_TARGETS", "FAMILIES", *_WHERE]


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'modules' has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name], __name__), name)
    globals()[name] = value
    return value
