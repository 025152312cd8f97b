"""Experiments: `python -m experiments` (fit, test, sweep, tables, families)."""
