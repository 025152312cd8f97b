"""Shared by every experiment's tables: seed statistics, the verdict vocabulary, markdown/CSV, figures, README blocks."""
