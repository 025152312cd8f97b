"""What a run records in its folder (runs/run_folder.py names the files): its summary.json after a
fit or a test (record_summary), progress.json while it trains; and the experiments' own records
(read_json, write_profile_record). Reading and writing them needs no torch or Lightning (a
scheduler's task process reads them); runs.run.record_callback is the callback that writes them while
a run trains."""
from __future__ import annotations

import json
from pathlib import Path

from modules.files import parse_json, write_atomic, write_json

from experiments.runs.run.convergence import plateau
from experiments.runs.run.provenance import hardware, versions
from experiments.runs.run.identity import config_hash, run_variant
from experiments.runs.run.names import checked_name
from experiments.runs.run.run_folder import RunFolder, teacher_of
from experiments.runs.run.summary import Summary

PROGRESS_EVERY_S = 2.0  # how often a training run renews progress.json between validations


def read_json(path: Path, hint: str = "") -> dict:
    """A record the tables or a runner reads back: {} when absent; a corrupt file, one that is no JSON
    object, or a profile named as no folder could be (its name makes paths) is one error line."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        record = parse_json(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path} is not valid JSON: {e}{hint}") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path} holds {type(record).__name__}, not a JSON object{hint}")
    # a profile's name becomes a folder or file name (tensorboard/<profile>, complexity_<group>_<profile>.png)
    profiles = record.get("profiles")
    names = [*(profiles if isinstance(profiles, dict) else {}), *([record["profile"]] if "profile" in record else [])]
    try:
        for name in names:
            checked_name("profile", name)
    except ValueError as e:
        raise ValueError(f"{path}: {e}{hint}") from None
    return record


def write_profile_record(path: Path, spec_name: str, profile: str, entry: dict, invocation: dict | None,
                         hint: str = "", ran: bool = True) -> Path:
    """Replaces one profile's entry of an experiment record ({spec, profiles}), keeping the other
    profiles and, when this invocation timed nothing (None), the profile's last timed invocation.
    An invocation that ran nothing (ran=False) leaves a recorded profile as it is: its runs' statuses
    may have moved on since (a tuning winner tested by the main stage), which is no news."""
    record = read_json(path, hint=hint)
    profiles = record.get("profiles", {})
    if not ran and profile in profiles:
        return Path(path)
    last = invocation or profiles.get(profile, {}).get("last_invocation")
    profiles[profile] = {**entry, **({"last_invocation": last} if last else {})}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"spec": spec_name, "profiles": profiles})
    return Path(path)


def write_progress(run_dir: Path, step: int, steps: int, val_acc: float | None) -> None:
    """progress.json: the run's step, its steps in all and its last validation accuracy, for the
    sweep's display. A display aid only: a write that fails (a full disk, a folder in its place)
    never stops the training it describes."""
    try:
        write_atomic(RunFolder(run_dir).progress_file, json.dumps({"step": step, "steps": steps, "val_acc": val_acc}))
    except OSError:
        pass


def read_progress(run_dir: Path) -> dict | None:
    """{step, steps, val_acc} as write_progress wrote them, or None (absent, being replaced, or not
    of those types: it is shown, so only numbers pass)."""
    try:
        p = parse_json(RunFolder(run_dir).progress_file.read_text())
    except (OSError, ValueError):
        return None
    number = (int, float)
    if (not isinstance(p, dict) or type(p.get("step")) is not int or type(p.get("steps")) is not int
            or not (p.get("val_acc") is None or isinstance(p["val_acc"], number) and not isinstance(p["val_acc"], bool))):
        return None
    return {"step": p["step"], "steps": p["steps"], "val_acc": p["val_acc"]}


def session_rows(run_dirs: list[Path]) -> list[dict]:
    """HPARAMS' row of each run that has an identity.json (tensorboard.recorded_hparams)."""
    from experiments.runs.run.tensorboard import recorded_hparams  # TensorBoard: imported when used
    folders = [RunFolder(d) for d in run_dirs]
    return [recorded_hparams(i, f.summary()) for f in folders if (i := f.identity()) is not None]


def record_summary(run_dir: Path, status: str, *, experiment: str, identity: dict | None, evaluation: dict,
                   hparams, complexity: dict, datamodule, precision: str, devices: int, commit: str,
                   fit: dict | None = None, test: dict | None = None, error: str | None = None,
                   extra: dict | None = None) -> None:
    """summary.json of a run (RunRecord, and each member of a packed fit): what ran, on what, with
    which code, and its `fit` (steps, wall_time_s; when fitted also epochs, images_per_sec,
    val_acc_best, max_steps, val_history: the plateau is derived here) and `test` results; a fit's
    own variant (identity.run_variant) and its DeiT teacher (run_folder.teacher_of, which takes the
    teacher's variant from the teacher's record)."""
    folder = RunFolder(run_dir)
    previous = folder.summary() or Summary()
    dm, h = datamodule, hparams
    dh = dict(dm.hparams) if dm is not None else {}
    summary = previous.updated(
        experiment=experiment, run=folder.name,
        config_hash=config_hash(identity) if identity is not None else previous.config_hash,
        test_settings=previous.test_settings or config_hash(evaluation),
        family=h["family"], budget=h["budget"],
        dataset=dh.get("dataset"), fraction=dh.get("fraction"),
        train_size=dm.train_size if dm is not None else None, seed=dh.get("seed"),
        val_size=len(dm.val_indices) if dm is not None else None,
        status=status,
        params=complexity["params"], flops_per_image=complexity["flops"],
        precision=precision, devices=devices,
        commit=commit, versions=versions(), hardware=hardware(),
        **(extra or {}),
    ).without("error")
    if fit is not None:
        summary = summary.updated(**{**fit, "wall_time_s": round(fit["wall_time_s"], 1)})
    if error is not None:
        summary = summary.updated(error=error[:500])
    if status == "fitted":
        # a run stopped at a target accuracy (fit --stop_at_val_acc) is judged by that target, not by a plateau
        summary = summary.updated(plateau=None if fit.get("stopped") else plateau(fit["val_history"], fit["steps"]))
        summary = summary.without("test")  # a new fit makes any older test result stale
    if test is not None:
        summary = summary.updated(test=test, test_acc=test.get("acc"))
    if identity is not None:  # a fit's: its variant, and its teacher as a structure (an evaluation keeps the recorded ones)
        summary = summary.updated(variant=run_variant(folder.name, identity))
        teacher = teacher_of(identity, folder.path.parent.parent)
        summary = summary.without("teacher") if teacher is None else summary.updated(teacher=teacher)
    folder.path.mkdir(parents=True, exist_ok=True)
    folder.write_summary(summary)
