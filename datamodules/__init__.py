"""The shared data side of the suite: `from datamodules import ImageClassificationDataModule`.

Loaded on first use (PEP 562): `datamodules.splits` alone needs only numpy."""
from importlib import import_module

_WHERE = {"ImageClassificationDataModule": ".image_classification", "DatasetError": ".sources"}

__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'datamodules' has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name], __name__), name)
    globals()[name] = value
    return value
