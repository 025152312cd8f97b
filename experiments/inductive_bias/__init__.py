"""exp-inductive-bias: position-embedding ablations and every family's probes (spec.yaml, runner.py, tables.py)."""
