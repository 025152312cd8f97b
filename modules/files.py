"""How the suite writes in a folder it owns (a run's, an experiment's): in place, never through a link;
and how it parses what it reads back, which may come from anywhere.

A run folder may come from elsewhere (a colleague's, a cluster's, an archive), and a symbolic link
in it named like a file the suite writes (config.yaml, summary.json.tmp, checkpoints/last.ckpt.tmp,
.lock) would carry that write to whatever it points at. So:
- write_atomic writes a fresh temporary file beside the name, created exclusively and never through
  a link (a stale one, or a link planted under its name, is removed first: removing a link leaves
  what it points at alone), then renames it over the name, which replaces a link there instead of
  writing through it. A full disk or a kill mid-write leaves the old file whole.
- open_in_place opens a file kept and written in place (a lock, an appended log) only when it is a
  plain file; a link or anything else there is refused in one line naming it.
- refuse_links is for the writers that are not the suite's own (Lightning's config.yaml and
  hparams.yaml, TensorBoard's event files): the folder they write in holds no link at all.
- parse_json and parse_yaml read data only, and raise for any text they cannot read the error their
  parser raises for malformed text: nesting deeper than Python's stack (a file of 200,000 '[')
  makes json and yaml raise RecursionError, which no reader's "malformed" branch caught, so one
  such file in a runs folder stopped a dry run with a traceback.
"""
from __future__ import annotations

import errno
import json
import os
import stat
from contextlib import suppress
from pathlib import Path

import yaml


def write_atomic(path, data: bytes | str, durable: bool = False) -> None:
    """`data` (str as UTF-8) into `path` through `path`.tmp and os.replace; `durable`: on disk
    before the rename (a checkpoint). An OSError (a full disk) names `path`; the old file stays."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.unlink(missing_ok=True)  # a killed write's leftover, or a planted link: the link goes, not its target
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        with open(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)  # a link at `path` is replaced, never followed
    except OSError as e:
        with suppress(OSError):
            tmp.unlink()
        raise OSError(e.errno, e.strerror, str(path)) from None
    except BaseException:
        with suppress(OSError):
            tmp.unlink()
        raise


def write_json(path, record, sort_keys: bool = True) -> None:
    """A JSON record (a run's summary, an experiment's record, a packed group's members): atomic and
    never through a link, so a killed run or a full disk leaves the old record whole. `sort_keys`
    False keeps the record's own order (sweep.json's profile reads in the order it was planned)."""
    write_atomic(path, json.dumps(record, indent=1, sort_keys=sort_keys) + "\n")


def open_in_place(path, append: bool = False):
    """`path` opened for reading and writing (or appending), created when absent; a ValueError
    naming it when it is a symbolic link or not a plain file (a FIFO would block, a device be written)."""
    flags = (os.O_WRONLY | os.O_APPEND if append else os.O_RDWR) | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ValueError(linked(path)) from None
        if e.errno != errno.ENXIO:  # ENXIO: a FIFO nobody reads
            raise
        fd = None
    if fd is None or not stat.S_ISREG(os.fstat(fd).st_mode):
        if fd is not None:
            os.close(fd)
        raise ValueError(f"{str(path)!r} is not a plain file: the suite keeps a lock or a log there; allowed a plain "
                         "file (remove it, and the suite makes a new one)")
    os.set_blocking(fd, True)
    return open(fd, "a" if append else "r+")


def refuse_links(folder, skip: tuple[str, ...] = ()) -> None:
    """One line (ValueError) naming the first symbolic link at `folder` itself or anywhere under it;
    the folders above it may be links (a runs_dir on another disk). `skip`: sub-folders of `folder`
    that another program fills, links of its own included: checked only for being no link themselves."""
    folder = Path(folder)
    if folder.is_symlink():
        raise ValueError(linked(folder))
    for root, dirs, files in os.walk(folder):  # a linked folder is listed, not entered
        for name in sorted((*dirs, *files)):
            if os.path.islink(os.path.join(root, name)):
                raise ValueError(linked(Path(root) / name))
        if root == str(folder):
            dirs[:] = [d for d in dirs if d not in skip]


def linked(path) -> str:
    try:
        target = f" to {os.readlink(path)!r}"
    except OSError:
        target = ""
    return (f"{str(path)!r} is a symbolic link{target}: the suite's folders hold plain files and folders only (a "
            "write through a link would land in what it points at, a copy would copy that); allowed plain files and "
            "folders: remove the link, or put a copy of the file in its place")


def parse_json(text: str | bytes):
    """json.loads; a ValueError for any text it cannot read, nesting too deep included."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def parse_yaml(text: str):
    """yaml.safe_load (data only: nothing in it runs); a yaml.YAMLError for any text it cannot read,
    nesting too deep included."""
    try:
        return yaml.safe_load(text)
    except RecursionError:
        raise yaml.YAMLError("nested too deeply to read") from None
