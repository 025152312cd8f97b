"""A run: its folder, identity, records and checkpoints; the fit/validate/test CLI; its probes."""
