"""The state file as files on disk, apart from what it records: how writing
it fails, what a damaged one looks like and setting it aside
(``salvo referee --fresh``), the machine it lives on, and a consistent
backup of it (``salvo journal backup``). :mod:`salvo.arena.journal` keeps the
records."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path
from typing import Final


class StateInUse(OSError):
    """Another referee holds this state file."""


class StoreFailure(OSError):
    """The state file cannot be written (disk full, I/O error): the referee
    must stop before it publishes anything that is not durable. Everything
    durable before stays (the spool is never emptied after a failure), and a
    referee started again once the fault is fixed continues from there."""


class StoreDamaged(StoreFailure):
    """The state file is not what a referee left: emptied, not SQLite, or
    unreadable. Nothing is written to it; ``set_aside`` moves it out of the
    way for a fresh start on purpose (``salvo referee --fresh``)."""


#: The first bytes of every SQLite database file.
SQLITE_MAGIC: Final = b"SQLite format 3\x00"
#: The files that make one state file, beside its own name.
SIDE_FILES: Final = ("-wal", "-shm", "-spool")


def _machine() -> str:
    """This machine's id, when it has one (containers often do not: their
    files' devices and inodes tell them apart well enough)."""
    try:
        return Path("/etc/machine-id").read_text().strip()
    except OSError:
        return ""


MACHINE: Final = _machine()


def _size(path: Path | str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return -1


def damage(path: Path) -> str | None:
    """What is wrong with the state file at ``path``, or None. A missing or
    empty file with nothing beside it is a new one, not a damaged one."""
    size = _size(path)
    if size > 0:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
        if head != SQLITE_MAGIC:
            return f"the state file {path} is not an SQLite database (it starts {head[:16]!r})"
        return None
    left = [f"{path}{side}" for side in ("-wal", "-spool") if _size(f"{path}{side}") > 0]
    if left:
        what = "missing" if size < 0 else "empty (0 bytes)"
        return (
            f"the state file {path} is {what} while {' and '.join(left)} still hold events: it was truncated or deleted"
        )
    return None


def set_aside(path: Path, stamp: str) -> list[Path]:
    """Rename a damaged state file and its side files to ``<name>.damaged-<stamp>...``
    (kept for inspection, never deleted); the moved paths."""
    moved = []
    for side in ("", *SIDE_FILES):
        src = Path(f"{path}{side}")
        if src.exists():
            dst = Path(f"{path}.damaged-{stamp}{side}")
            src.rename(dst)
            moved.append(dst)
    return moved


def failure(path: Path, exc: BaseException) -> StoreFailure:
    """A readable reason for a write that failed."""
    if isinstance(exc, OSError):
        full, io = exc.errno in (errno.ENOSPC, errno.EDQUOT), exc.errno == errno.EIO
    else:
        # SQLite's primary result code is the low byte of the extended one.
        code = getattr(exc, "sqlite_errorcode", -1) & 0xFF
        full, io = code == sqlite3.SQLITE_FULL, code == sqlite3.SQLITE_IOERR
    why = "the disk is full" if full else "an I/O error" if io else "an error"
    return StoreFailure(f"cannot write the state file {path}: {why} ({exc}); nothing more is published")


def backup(state: Path, out: Path) -> int:
    """A consistent copy of ``state`` at ``out`` (see ``salvo journal backup``):
    the spool as it is now (events spooled, maybe not yet settled), then
    SQLite's online backup of the database (commits still in the WAL
    included). In that order: an event settled and emptied out of the spool
    meanwhile is in the database copy. The copy's next owner takes the spool
    in (lines already in the database are skipped by id). The number of
    events in the copy's database."""
    if out.exists():
        raise FileExistsError(f"{out} exists already")
    spool = Path(f"{state}-spool")
    spooled = spool.read_bytes() if spool.exists() else b""
    source = sqlite3.connect(f"file:{state}?mode=ro", uri=True)
    os.close(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    target = sqlite3.connect(out)
    try:
        source.backup(target)
        events = int(target.execute("SELECT COUNT(*) FROM events").fetchone()[0])
    finally:
        target.close()
        source.close()
    if spooled:
        fd = os.open(f"{out}-spool", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(spooled)
    return events
