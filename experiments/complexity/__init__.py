"""exp-complexity: cost against resolution and position-embedding interpolation (spec.yaml, runner.py, tables.py)."""
