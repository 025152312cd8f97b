"""A stand-in for a run's launch, for the scheduler tests: submitit's task process unpickles it by
module, so this module imports nothing heavy (a test module importing torch and Lightning would
cost each task ~6 s of start-up)."""
import time

from experiments.runs.run.run_folder import RunFolder
from experiments.runs.run.summary import Summary


def fake_launch(run) -> int:
    """A run that takes a second and succeeds with a (blank) best checkpoint (vit fails: its log says
    why); the log holds when it ran."""
    run.run_dir.mkdir(parents=True, exist_ok=True)
    with open(run.run_dir / "log.txt", "a") as log:
        log.write(f"start {time.time()!r}\n")
        time.sleep(1.0)
        if run.family == "vit":
            log.write("boom: the fake vit run fails\n")
            return 1
        log.write(f"end {time.time()!r}\n")
    folder = RunFolder(run.run_dir)
    folder.checkpoints.mkdir(exist_ok=True)
    folder.best_checkpoint.write_bytes(b"")  # what a DeiT student distils from: a trained run has one
    folder.write_summary(Summary(run=run.name, family=run.family, status="done", test_acc=0.5))
    return 0
