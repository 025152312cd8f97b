"""The CLI's messages: jsonargparse's errors (an unknown key, a value of the wrong type, a config
file that is not YAML) as one line naming the key, the value and what is allowed, instead of its
usage text."""
from __future__ import annotations

import difflib
import re
from pathlib import Path

import yaml
from modules.files import parse_yaml

from experiments.runs.run.import_policy import allowed_said


def one_line(message: str, argv: list[str], parser) -> str:
    """jsonargparse's `message` for the command line `argv`, parsed by `parser` (the subcommand's),
    as one line."""
    keys = [a.dest for a in parser._actions
            if a.option_strings and not a.dest.endswith("help") and a.dest not in ("config", "print_config")]
    unknown = re.match(r"unrecognized arguments: -*([^\s=]+)", message) \
        or re.search(r"accept option '([^']+)'", message)
    typed = re.match(r'Parser key "([^"]+)":\s*(?:Expected a (.*?)\. Got value|.*?Subtypes: \[(.*?)\]\n.*'
                     r'Given value): (.*)', message, re.S)
    bad_yaml = message.startswith("Problems parsing config") and bad_config_file(argv)
    denied = re.search(r"Importing '([^']+)' is not allowed", message)
    if bad_yaml:
        message = bad_yaml
    elif denied:  # refused before the import (import_policy.py): the key, the name and what may be named
        key = re.match(r'Parser key "([^"]+)"', message)
        message = (f"{key[1] + ' names' if key else 'a value names'} {denied[1]!r}, which the suite does not "
                   f"import: {allowed_said()}")
    elif unknown:
        key = unknown[1]
        group = [k for k in keys if k.rpartition(".")[0] == key.rpartition(".")[0]] \
            or [k for k in keys if "." not in k]
        last = {k.rpartition(".")[2]: k for k in group}
        close = difflib.get_close_matches(key.rpartition(".")[2], last, 1)
        hint = f" (did you mean {last[close[0]]!r}?)" if close else ""
        message = f"unknown key {key!r}{hint}: allowed {', '.join(group)}"
    elif typed:
        names = {"float": "a float", "int": "an integer", "bool": "true or false", "NoneType": "null",
                 "str": "a string"}
        kinds = [names.get(c, c) if c else literal
                 for c, literal in re.findall(r"<class '(\w+)'>|Literal\[([^\]]*)\]", typed[2] or typed[3])]
        message = f"{typed[1]}={typed[4]!r} is not valid: allowed {' or '.join(kinds)}"
    return " ".join(message.split())


def bad_config_file(argv: list[str]) -> str | None:
    """jsonargparse reports a malformed -c/--config file without its name: find it (first that fails)."""
    paths = [b for a, b in zip(argv, argv[1:]) if a in ("-c", "--config")] \
        + [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]
    for path in paths:
        try:
            parse_yaml(Path(path).read_text())
        except (OSError, yaml.YAMLError) as e:
            mark = getattr(e, "problem_mark", None)
            return (f"--config {path!r} is not valid YAML" + (f" (line {mark.line + 1})" if mark else "")
                    + f": {getattr(e, 'problem', None) or e}; allowed a YAML file of options")
    return None


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"
