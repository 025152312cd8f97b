"""python -m experiments COMMAND ...

  families   the family x budget table with measured parameters and FLOPs
  fit        train one run (LightningCLI; --help lists every option)
  validate   evaluate a checkpoint on the validation split
  test       evaluate a checkpoint on the test split (--ckpt_path)
"""
import sys

from modules.registry import ConfigError
from datamodules import DatasetError


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    try:
        if command == "families":
            from .families import main as families
            families(rest)
        elif command in ("fit", "validate", "test"):
            from .cli import SuiteCLI
            SuiteCLI(args=None if argv == sys.argv[1:] else argv)
        else:
            print(f"unknown command {command!r}: allowed families, fit, validate, test", file=sys.stderr)
            return 2
    except (ConfigError, DatasetError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
