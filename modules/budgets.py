"""Families x budgets: one row of architecture hyper-parameters per family and budget.

Rows are matched so that, within a budget, every family's parameter count is within 15% of the
budget's target at 28x28x1 and at 32x32x3 with 10 classes (tests/test_registry.py measures it;
`python -m experiments families` prints the counts and FLOPs).
"""
from __future__ import annotations

FAMILIES = ("vit", "deit", "swin", "convnext", "hybrid", "resnet")
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
