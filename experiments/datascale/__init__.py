"""exp-datascale: accuracy against training-set size per family (spec.yaml; the sweep runs it; tables.py)."""
