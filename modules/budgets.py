"""The family table: one record per family (what it is) and one row of architecture
hyper-parameters per family and budget (ARCHS). Every consumer reads them here, at the time it
runs (tables, probes, the CLI's checks, the Makefile through `python -m experiments families
--names`), so a family added here and given a builder (modules/registry.py) appears everywhere.
Plain data: naming families and budgets imports neither torch nor timm.

Rows are matched so that, within a budget, every family's parameter count is within 15% of the
budget's target at 28x28x1 and at 32x32x3 with 10 classes (tests/test_registry.py measures it;
`python -m experiments families` prints the counts and FLOPs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

KINDS = ("CNN", "transformer")
ATTENTIONS = ("global", "windowed", "none")
KNOBS = ("patch_size", "pos_embed", "pool", "window_size")


@dataclass(frozen=True)
class Family:
    """What the tables, probes and runners need to know of a family, besides its builder."""
    name: str
    title: str                        # as the prose writes it: ViT, ConvNeXt
    kind: str                         # CNN or transformer: the two sides of the transformer-vs-CNN readings
    attention: str                    # global (one token sequence), windowed (Swin) or none
    class_token: bool                 # a [CLS] token over one global patch grid (with pool='token')
    distillation_token: bool          # DeiT's: trained from a teacher, so it runs after the teachers
    knobs: frozenset[str] = frozenset()   # which of KNOBS it accepts (None elsewhere)

    def __post_init__(self):
        if self.kind not in KINDS or self.attention not in ATTENTIONS or not self.knobs <= set(KNOBS):
            raise ValueError(f"family {self.name!r}: kind {self.kind!r} (allowed {', '.join(KINDS)}), attention "
                             f"{self.attention!r} (allowed {', '.join(ATTENTIONS)}), knobs {sorted(self.knobs)} "
                             f"(allowed {', '.join(KNOBS)})")


def _table(*families: Family) -> dict[str, Family]:
    return {f.name: f for f in families}


# In this order in error messages, figure colours and tie-breaks.
FAMILIES: dict[str, Family] = _table(
    Family("vit", "ViT", "transformer", "global", class_token=True, distillation_token=False,
           knobs=frozenset({"patch_size", "pos_embed", "pool"})),
    Family("deit", "DeiT", "transformer", "global", class_token=True, distillation_token=True,
           knobs=frozenset({"patch_size", "pos_embed"})),
    Family("swin", "Swin", "transformer", "windowed", class_token=False, distillation_token=False,
           knobs=frozenset({"patch_size", "window_size"})),
    Family("convnext", "ConvNeXt", "CNN", "none", class_token=False, distillation_token=False,
           knobs=frozenset({"patch_size"})),
    Family("hybrid", "Hybrid", "transformer", "global", class_token=True, distillation_token=False,
           knobs=frozenset({"patch_size", "pos_embed", "pool"})),
    Family("resnet", "ResNet", "CNN", "none", class_token=False, distillation_token=False),
)
TEACHER = "resnet"  # the CNN every DeiT distils from by default, and the reference the readings compare to


def names(**facts) -> list[str]:
    """The families whose records hold these facts, in table order: names(kind="CNN")."""
    return [f.name for f in FAMILIES.values() if all(getattr(f, k) == v for k, v in facts.items())]


def distils(family: str) -> bool:
    """Whether `family` is a student: it has a distillation token, trained from a teacher's labels
    (False for a name with no record)."""
    return family in FAMILIES and FAMILIES[family].distillation_token


def kind_of(family: str) -> str | None:
    """CNN or transformer; None for a name with no record (a record's folder of a family since removed)."""
    return FAMILIES[family].kind if family in FAMILIES else None


def fit_order(families: Iterable[str] = FAMILIES) -> list[str]:
    """`families` (default all) in the order they are fitted: the teacher first, students (a
    distillation token) last, the others in table order."""
    return sorted(families, key=lambda f: (f != TEACHER, distils(f)))


def reading_order() -> list[str]:
    """The order tables list families in: the reference (the teacher), the other CNNs, then the transformers."""
    return sorted(FAMILIES, key=lambda f: (f != TEACHER, FAMILIES[f].kind != "CNN"))


BUDGET_TARGETS = {"tiny": 500_000, "small": 2_000_000, "base": 5_000_000}
BUDGET_TOLERANCE = 0.15

# vit / deit: width, depth, heads (patch size is a knob, default 4)
# swin: width of stage 1 (doubling at each patch merging); depths and heads per stage; patch 1,
#   three stages (grids 28/14/7 at 28x28, 32/16/8 at 32x32), window derived (7 or 8): shifted
#   windows in stages 1 and 2 (the third stage's window covers its grid); heads of width 24
# convnext: widths and depths of its stages (stem patch 1)
# hybrid: ResNet stem (BasicBlock widths, depths; stride 4) feeding a ViT on 1x1 patches
# resnet: CIFAR-style ResNet (3x3 stem, no max-pool), BasicBlock widths and depths
ARCHS: dict[tuple[str, str], dict] = {
    ("vit", "tiny"):       dict(embed_dim=100, depth=4, num_heads=4),
    ("vit", "small"):      dict(embed_dim=200, depth=4, num_heads=4),
    ("vit", "base"):       dict(embed_dim=256, depth=6, num_heads=4),
    ("deit", "tiny"):      dict(embed_dim=100, depth=4, num_heads=4),
    ("deit", "small"):     dict(embed_dim=200, depth=4, num_heads=4),
    ("deit", "base"):      dict(embed_dim=256, depth=6, num_heads=4),
    ("swin", "tiny"):      dict(embed_dim=24, depths=(2, 2, 4), num_heads=(1, 2, 4)),
    ("swin", "small"):     dict(embed_dim=48, depths=(2, 2, 4), num_heads=(2, 4, 8)),
    ("swin", "base"):      dict(embed_dim=72, depths=(2, 2, 4), num_heads=(3, 6, 12)),
    ("convnext", "tiny"):  dict(dims=(36, 72, 144), depths=(2, 2, 2)),
    ("convnext", "small"): dict(dims=(56, 112, 224), depths=(2, 2, 4)),
    ("convnext", "base"):  dict(dims=(72, 144, 288), depths=(2, 2, 6)),
    ("hybrid", "tiny"):    dict(stem_channels=(16, 32, 64), stem_depths=(1, 1, 1), embed_dim=96, depth=4, num_heads=3),
    ("hybrid", "small"):   dict(stem_channels=(32, 64, 128), stem_depths=(1, 1, 1), embed_dim=192, depth=4, num_heads=3),
    ("hybrid", "base"):    dict(stem_channels=(32, 64, 128), stem_depths=(1, 1, 1), embed_dim=256, depth=6, num_heads=4),
    ("resnet", "tiny"):    dict(channels=(30, 60, 120), depths=(1, 1, 2)),
    ("resnet", "small"):   dict(channels=(60, 120, 240), depths=(1, 1, 2)),
    ("resnet", "base"):    dict(channels=(92, 184, 368), depths=(1, 1, 2)),
}
