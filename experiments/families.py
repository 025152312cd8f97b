"""`python -m experiments families`: the registry's table with measured parameters and FLOPs."""
from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from modules import ARCHS, BUDGET_TARGETS, FAMILIES, build_model, count_flops, count_params


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m experiments families",
                                description="Every family x budget with parameters and forward FLOPs per image "
                                            "(attention counted) measured at the given input.")
    p.add_argument("--image_size", type=int, default=28, help="square input size (default 28)")
    p.add_argument("--in_chans", type=int, default=1, help="input channels (default 1)")
    p.add_argument("--num_classes", type=int, default=10, help="classes (default 10)")
    p.add_argument("--budget", choices=list(BUDGET_TARGETS), action="append", help="only these budgets")
    a = p.parse_args(argv)
    table = Table(title=f"families at {a.image_size}x{a.image_size}x{a.in_chans}, {a.num_classes} classes")
    for col in ("family", "budget", "params", "vs target", "MFLOPs", "architecture"):
        table.add_column(col, justify="right" if col in ("params", "vs target", "MFLOPs") else "left")
    for budget in a.budget or BUDGET_TARGETS:
        for family in FAMILIES:
            m = build_model(family, budget, image_size=a.image_size, in_chans=a.in_chans, num_classes=a.num_classes)
            n = count_params(m)
            table.add_row(family, budget, f"{n:,}", f"{n / BUDGET_TARGETS[budget] - 1:+.1%}",
                          f"{count_flops(m, a.image_size, a.in_chans) / 1e6:,.1f}",
                          ", ".join(f"{k}={v}" for k, v in ARCHS[family, budget].items()))
        table.add_section()
    Console().print(table)
