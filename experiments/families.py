"""`python -m experiments families`: the family table with measured parameters and FLOPs; with
--names, the families' names in the order they are fitted (the Makefile's fit-families loop)."""
from __future__ import annotations

import argparse

from modules.budgets import ARCHS, BUDGET_TARGETS, FAMILIES, fit_order


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m experiments families",
                                description="Every family x budget with parameters and forward FLOPs per image "
                                            "(attention counted) measured at the given input.")
    p.add_argument("--image_size", type=int, default=28, help="square input size (default 28)")
    p.add_argument("--in_chans", type=int, default=1, help="input channels (default 1)")
    p.add_argument("--num_classes", type=int, default=10, help="classes (default 10)")
    p.add_argument("--budget", choices=list(BUDGET_TARGETS), action="append", help="only these budgets")
    p.add_argument("--names", action="store_true", help="only the families' names, teachers first and students "
                                                        "last (the order fit-families fits them in); builds nothing")
    a = p.parse_args(argv)
    # the table runs each model forward once at this input: at 512 px ViT's attention (patch 4) is
    # over 16,384 tokens, and past that one forward needs more memory than a laptop has
    for name, value, low, high in (("--image_size", a.image_size, 1, 512), ("--in_chans", a.in_chans, 1, 4),
                                   ("--num_classes", a.num_classes, 2, 100_000)):
        if not low <= value <= high:
            raise ValueError(f"{name} {value}: allowed integers from {low} to {high}")
    if a.names:
        print(" ".join(fit_order()))
        return
    _measured(a)


def _measured(a: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    from modules import build_model, count_flops, count_params
    table = Table(title=f"families at {a.image_size}x{a.image_size}x{a.in_chans}, {a.num_classes} classes")
    for col in ("family", "budget", "params", "vs target", "MFLOPs", "architecture"):
        table.add_column(col, justify="right" if col in ("params", "vs target", "MFLOPs") else "left")
    for budget in a.budget or BUDGET_TARGETS:
        for family in (f for f in FAMILIES if (f, budget) in ARCHS):
            m = build_model(family, budget, image_size=a.image_size, in_chans=a.in_chans, num_classes=a.num_classes)
            n = count_params(m)
            table.add_row(family, budget, f"{n:,}", f"{n / BUDGET_TARGETS[budget] - 1:+.1%}",
                          f"{count_flops(m, a.image_size, a.in_chans) / 1e6:,.1f}",
                          ", ".join(f"{k}={v}" for k, v in ARCHS[family, budget].items()))
        table.add_section()
    Console().print(table)
