"""Names that become folders (run_name, experiment, a spec's name; runs_dir, which must not be empty)
and the check that every folder the suite writes stays inside its root: a name is one path
component, so `..`, `/` or an absolute path cannot lead a write out of runs_dir, and its length
leaves room for the `_<hash>` suffix under the 255-byte file-name limit."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

MAX_LENGTH = 100
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
ALLOWED = f"allowed a single folder name of letters, digits, '.', '_' and '-', at most {MAX_LENGTH} characters"


def checked_name(key: str, value) -> str:
    """`value` when it is a safe single folder name, else a ValueError naming key=value."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or ".." in value or len(value) > MAX_LENGTH:
        raise ValueError(f"{key}={value!r} is not valid: {ALLOWED}")
    return value


def checked_runs_dir(value, key: str = "runs_dir") -> str:
    """`value` unless it is empty: '' would put the run folders in whatever folder the command runs in."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{key}={value!r}: allowed a folder path, such as results/runs (the default); "
                         "'' would write into the current folder")
    return value


def runs_dir_option(value: str) -> str:
    """argparse's type of the runners' --runs_dir: checked_runs_dir's line, in argparse's error."""
    try:
        return checked_runs_dir(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def inside(root, path) -> Path:
    """`path` when it resolves inside `root` (symlinks followed), else a ValueError."""
    root, path = Path(root), Path(path)
    if not path.resolve().is_relative_to(root.resolve()):
        raise ValueError(f"{str(path)!r} is outside {str(root)!r}: nothing is written outside it")
    return path
