"""The shared data side of the suite: `from datamodules import ImageClassificationDataModule`."""
from .image_classification import ImageClassificationDataModule
from .sources import DatasetError

__all__ = ["ImageClassificationDataModule", "DatasetError"]
