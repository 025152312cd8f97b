"""`fit|validate|test --help`: the suite's own options first (the run's place, the model, the data,
the checkpoint), and Lightning's Trainer options (about 45, most of the text) only with --help_all,
after them. The parser is LightningCLI's; only the order and choice of its sections change here."""
from __future__ import annotations

HELP = ("-h", "--help")
HELP_ALL = "--help_all"
# the sections that are Lightning's or the parser's, not the suite's: shown by --help_all, after the rest
TAIL_TITLES = ("Linked arguments", "default config file locations")


def asks_help(argv: list[str]) -> bool:
    return any(a in (*HELP, HELP_ALL) for a in argv[1:])


def suite_help(parser, command: str, full: bool) -> str:
    """The help of a subcommand's parser: the suite's sections, then (full) the Trainer's and the rest."""
    trainer = getattr(parser, "groups", {}).get("trainer")
    tail = [g for g in parser._action_groups if g is trainer or g.title in TAIL_TITLES]
    head = [g for g in parser._action_groups if g not in tail]
    n_trainer = sum(1 for a in trainer._group_actions if not a.dest.endswith(".help")) if trainer else 0
    saved = parser._action_groups, parser.usage, parser.epilog
    parser._action_groups = head + (tail if full else [])
    parser.usage = f"python -m experiments {command} [options]"
    parser.epilog = None if full else (
        f"Lightning's Trainer options ({n_trainer} --trainer.* options: max_steps, precision, "
        f"val_check_interval, ...) and the linked arguments: python -m experiments {command} {HELP_ALL}")
    try:
        return parser.format_help()
    finally:
        parser._action_groups, parser.usage, parser.epilog = saved
