"""exp-distill: DeiT students against CNN and transformer teachers (spec.yaml, runner.py, tables.py)."""

MATCHED = "-at-"  # resnet-at-vit: the ResNet teacher stopped where it reaches the ViT teacher's best validation accuracy


def matched_name(family: str, target: str) -> str:
    return f"{family}{MATCHED}{target}"


def family_of(teacher: str) -> str:
    """The family of a teacher name (resnet of resnet-at-vit)."""
    return teacher.split(MATCHED)[0]
