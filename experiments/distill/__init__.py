"""exp-distill: DeiT students against CNN and transformer teachers (spec.yaml, runner.py, tables.py)."""
