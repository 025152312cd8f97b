"""Which code a value may name: the import allowlist every parse of the run CLI goes through.

An option whose type allows a class or a callable (trainer.callbacks, trainer.logger, a plugin, a
callable argument of a callback) takes a dotted name, and jsonargparse imports it while parsing,
before it can tell whether the class fits: an import runs the module's code. A config file, a
sweep spec's variant_args or a command line could so run a module planted anywhere on the import
path (the current folder is on it under `python -m`, and with it, as packages, the folders below it
whose names are Python names). So only TRUSTED packages, those the suite itself imports, may be named;
anything else is refused before it is imported, in one line (cli_messages.one_line).

A researcher's own callback goes through VIT_FAMILIES_IMPORTS: comma-separated dotted paths
(`VIT_FAMILIES_IMPORTS=mylab.callbacks`), each allowing what lies under it. The environment is the
user's, not the data's: no file the suite reads can extend the list. jsonargparse keeps the list as
a process-wide setting, so each parse re-reads the environment and denies again what it no longer names.
"""
from __future__ import annotations

import os

from jsonargparse import set_parsing_settings

TRUSTED = ("lightning", "modules", "datamodules", "experiments")  # the suite's own packages and its trainer's
ENV = "VIT_FAMILIES_IMPORTS"
_ADDED: set[str] = set()  # what VIT_FAMILIES_IMPORTS allowed at an earlier parse of this process


def extra_imports() -> list[str]:
    """The dotted paths VIT_FAMILIES_IMPORTS adds; one line naming a malformed entry."""
    raw = os.environ.get(ENV, "")
    entries = [e.strip() for e in raw.split(",") if e.strip()]
    for entry in entries:
        if not all(part.isidentifier() for part in entry.split(".")):
            raise ValueError(f"{ENV}={raw!r}: {entry!r} is not a module path: allowed comma-separated dotted "
                             "module paths, such as mylab.callbacks")
        if entry.split(".")[0] == "jsonargparse":
            raise ValueError(f"{ENV}={raw!r}: {entry!r} is not allowed: jsonargparse holds this very setting")
    return entries


def enforce() -> None:
    """Deny every import a value names outside TRUSTED and VIT_FAMILIES_IMPORTS (called before each parse)."""
    extra = extra_imports()
    stale = sorted(_ADDED - set(extra) - set(TRUSTED))
    set_parsing_settings(import_path_denylist=["*", *stale], import_path_allowlist=[*TRUSTED, *extra])
    _ADDED.clear()
    _ADDED.update(extra)


def allowed_said() -> str:
    return (f"allowed classes from {', '.join(TRUSTED)}, or under a module path named in {ENV} "
            f"(comma-separated, such as {ENV}=mylab.callbacks)")
