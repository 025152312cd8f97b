"""python -m experiments COMMAND ...

  families   the family x budget table with measured parameters and FLOPs
  fit        train one run (LightningCLI; --help lists every option)
  run_dir    print the folder `fit` would use for the same options (readable name + config hash)
  validate   evaluate a checkpoint on the validation split
  test       evaluate a checkpoint on the test split (--ckpt_path)
  fit_packed train K runs that differ only in their seed at once, each into its own run folder
  sweep      run an experiment spec (experiments/<name>/spec.yaml), resumably
  probe      the inductive-bias probes (modules.probes) on trained run folders: figures and probes.json
  tables     regenerate results/<experiment>.{csv,md,png} from the run folders (yours in results/runs,
             else the committed results/reference)
  reference  copy the records of your runs in results/runs over the committed results/reference

An experiment whose spec names a runner of its own (runner: NAME in experiments/NAME/spec.yaml) is
run by `python -m experiments NAME` (experiments/NAME/runner.py):
"""
import errno
import importlib
import logging
import os
import sys

DIVERGED = 3  # exit status of a run whose loss became NaN or inf
RUN_DIR_HELP = """usage: python -m experiments run_dir [fit's options]

Prints the run folder `python -m experiments fit` would train in for the same options (its readable
name and the hash of its whole configuration), after checking the model's and the data's values as
fit does; trains, builds and loads nothing. Its options are fit's: python -m experiments fit --help."""
COMMANDS = ("families", "fit", "fit_packed", "run_dir", "validate", "test", "sweep", "probe", "tables", "reference")


def runners() -> list[str]:
    """The commands of the experiments that have a runner of their own, from their specs."""
    from experiments.runs.sweep.spec import declared_runners
    return [r for r in declared_runners() if r not in COMMANDS]


def runners_help() -> str:
    """One line per runner: its command and its spec."""
    from experiments.runs.sweep.spec import declared_runners
    return "".join(f"  {r:<10} runs experiments/{d.name}/spec.yaml (make {d.make_target}), resumably\n"
                   for r, d in declared_runners().items() if r in runners())


def main(argv: list[str]) -> int:
    """Runs one command; returns its exit status (128 + the signal's number when interrupted)."""
    from experiments.runs.run.interruption import catching, received
    with catching():
        try:
            return _command(argv)
        except (KeyboardInterrupt, SystemExit):  # Lightning exits 1 after its graceful stop
            stop = received()
            if stop is None:
                raise
            print(stop.line(argv), file=sys.stderr)
            return stop.exit_status


def _command(argv: list[str]) -> int:
    command, rest = (argv or ["--help"])[0], argv[1:]
    try:
        if command in ("-h", "--help"):
            print(__doc__ + runners_help())  # the runners from the specs: a bad spec is an error line
            return 0 if argv else 2
        if command == "families":
            from .families import main as families
            families(rest)
        elif command == "run_dir":
            if {"-h", "--help"} & set(rest):
                print(RUN_DIR_HELP)
                return 0
            from experiments.runs.run.cli import resolve_run_dir_checked
            print(resolve_run_dir_checked(rest))
        elif command == "fit_packed":
            from experiments.runs.packed.fit import main as fit_packed
            return fit_packed(rest)
        elif command == "sweep":
            from experiments.runs.sweep.sweep import main as sweep
            return sweep(rest)
        elif command == "probe":
            from experiments.runs.run.probe import main as probe
            return probe(rest)
        elif command == "reference":
            from experiments.runs.sweep.reference import main as reference
            return reference(rest)
        elif command == "tables":
            from .tables import main as tables
            return tables(rest)
        elif command in ("fit", "validate", "test"):
            from experiments.runs.run.cli import SuiteCLI
            # "Seed set to N" would precede a bad-input error line; the seed is in the run's config.yaml
            logging.getLogger("lightning.fabric.utilities.seed").setLevel(logging.WARNING)
            SuiteCLI(args=None if argv == sys.argv[1:] else argv)
        elif command in runners():
            return importlib.import_module(f"experiments.{command}.runner").main(rest)
        else:
            allowed = ", ".join([*COMMANDS[:7], *runners(), *COMMANDS[7:]])
            print(f"error: unknown command {command!r}: allowed {allowed}", file=sys.stderr)
            return 2
    except ValueError as e:  # bad input, modules' ConfigError and datamodules' DatasetError included
        print(f"error: {e}", file=sys.stderr)
        return 2
    # a folder that cannot be written, or a folder where a file is to be written
    except (PermissionError, NotADirectoryError, IsADirectoryError, FileExistsError) as e:
        print(f"error: cannot write {e.filename!r}: {e.strerror.lower()}" if e.filename and e.strerror
              else f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        # checkpoints and records are written through a temporary file: nothing truncated is left behind
        what = f"cannot write {e.filename!r}" if e.filename else "cannot write"
        print(f"error: {what}: no space left on device; free some space and run the same command again "
              "(it resumes from the last checkpoint)", file=sys.stderr)
        return 2
    except FloatingPointError as e:  # recorded as diverged in the run's summary.json
        print(f"error: {e}", file=sys.stderr)
        return DIVERGED
    return 0


if __name__ == "__main__":
    # defence in depth: any torch.load in this process, even one that asks otherwise, reads weights only
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    from experiments.runs.run.interruption import end_process
    end_process(main(sys.argv[1:]))
