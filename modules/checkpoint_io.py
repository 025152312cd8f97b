"""How this suite reads and writes checkpoint files.

Reading: weights only. A checkpoint is a pickle, and an ordinary pickle can run any code while it
is read, so every load goes through torch's weights-only unpickler (an allow-list of tensors and
plain values: all a Lightning checkpoint of this suite holds); a file holding anything else is
refused in one line naming it (read_checkpoint, and SafeCheckpointIO for Lightning's own loads).

Writing: atomic. A checkpoint is serialised in memory, written to a temporary file beside its
final name and moved over it with os.replace, so a full disk or a kill mid-write never leaves a
truncated file under a name that a resume, a teacher path or a table reads, and a link planted
under either name is replaced, never written through (atomic_save, files.write_atomic).
"""
from __future__ import annotations

import io
import pickle
import re
import warnings
from pathlib import Path

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from .files import write_atomic


class UnsafeCheckpointError(ValueError):
    """A checkpoint that holds more than weights and plain values: refused, never run."""


def read_checkpoint(path, map_location="cpu") -> dict:
    """The checkpoint at `path`, read as weights only (onto the CPU unless `map_location` says
    otherwise, as torch.load takes it); one-line ValueError naming the
    file when it is missing, unreadable, not a dict, or holds code or objects (UnsafeCheckpointError)."""
    try:
        with warnings.catch_warnings():  # torch's note on an old pickle protocol is not this suite's line
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise ValueError(f"checkpoint {str(path)!r} does not exist") from None
    except pickle.UnpicklingError as e:
        # torch's message spans lines and suggests an unsafe full unpickling, which is exactly what must not happen
        text = str(e)
        code = re.search(r"(Unsupported global: GLOBAL \S+|Trying to call reduce for unrecognized function \S+)", text)
        found = re.search(r"WeightsUnpickler error:\s*([^\n]+)", text)  # torn or not a pickle: e.g. an unknown opcode
        if not code and (found or not text.startswith("Weights only load failed")):
            raise ValueError(f"checkpoint {str(path)!r} is not a readable checkpoint of this suite "
                             f"(UnpicklingError: {found[1].strip() if found else text.splitlines()[0]})") from None
        # refused by the weights-only loader (os.system: "unsupported GLOBAL posix.system whose module posix is
        # blocked"): its detail, never its advice to load unsafely
        detail = code[1] if code else next((line.strip() for line in text.splitlines()[1:]
                                            if line.strip() and not line.startswith("Check the documentation")), "")
        raise UnsafeCheckpointError(
            f"checkpoint {str(path)!r} is refused: it holds code or objects other than tensors and plain values "
            f"({detail.rstrip('.')}); checkpoints are read as weights only") from None
    except Exception as e:
        text = str(e).strip()
        raise ValueError(f"checkpoint {str(path)!r} is not a readable checkpoint of this suite "
                         f"({type(e).__name__}: {text.splitlines()[0] if text else ''})") from None
    if not isinstance(ckpt, dict):
        raise ValueError(f"checkpoint {str(path)!r} is not a readable checkpoint of this suite "
                         f"(holds a {type(ckpt).__name__}, not a dict)")
    return ckpt


def atomic_save(checkpoint: dict, path) -> None:
    """torch.save to `path` through `path`.tmp and os.replace, never through a link (files.write_atomic);
    on any failure the old file (if any) stays as it was. An OSError (a full disk) names `path`."""
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)  # in memory first: torch.save into a full disk fails as a RuntimeError
    write_atomic(path, buffer.getbuffer(), durable=True)  # on disk before the rename makes it the checkpoint


class SafeCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint plugin for every Trainer of the suite: atomic writes, weights-only reads
    (whatever a caller passes as weights_only)."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        if storage_options is not None:
            raise TypeError("SafeCheckpointIO.save_checkpoint takes no storage_options")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_save(checkpoint, path)

    def load_checkpoint(self, path, map_location=lambda storage, loc: storage, weights_only=None) -> dict:
        return read_checkpoint(path, map_location=map_location)
