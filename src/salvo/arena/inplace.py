"""Is the journal still where a restart will look for it?

A referee that journals into a file someone deleted, emptied or replaced
under it (a night "reset" by hand, a backup restored over it) would go on
publishing results no restart can find. So the journal asks before each
batch is published (``Store.record_many``), and stops if the answer is no.

``stat()`` of the state file and of its spool answers that: ~10 us a batch
in a referee under load (the span from the spool ``write()`` to the end of
the check, 10.6-11.0 us at the median; docs/performance.md, "The in-place
check", 2026-11-27), a twentieth of the referee's part of a shot's round
trip. On Linux, inotify answers with one ``poll()`` (2.3-2.4 us there):
the kernel queues its event within the very system call that deletes,
renames, empties or replaces a file, so a change made before the check is
seen by it, as by ``stat()``; only when something stirred does ``stat()``
run. Watched: the state file (written to, for emptying, and its links, for
deletion or replacement), the spool (its links), and their directory and
every directory above it (moved or deleted). A path through a symbolic link, or a system
without inotify (or out of inotify instances), is checked by ``stat()``
every time.

What inotify cannot see - a change made by another machine on a network
file system, a mount over the directory - the journal's once-a-second
``check_intact`` still sees.
"""

from __future__ import annotations

import ctypes
import os
import select
from collections.abc import Callable
from pathlib import Path
from typing import Final

# <sys/inotify.h>
_IN_MODIFY: Final = 0x002
_IN_ATTRIB: Final = 0x004
_IN_DELETE_SELF: Final = 0x400
_IN_MOVE_SELF: Final = 0x800
_GONE: Final = _IN_DELETE_SELF | _IN_MOVE_SELF
#: What each watch listens for. A file deleted, or replaced by a rename
#: over it, loses a link (IN_ATTRIB); its name cannot be given to another
#: file before that, so the directory's entries need no watch.
_STATE_FILE: Final = _IN_MODIFY | _IN_ATTRIB | _GONE
_SPOOL: Final = _IN_ATTRIB | _GONE  # (written by the referee itself at every batch)
_DIRECTORY: Final = _GONE


Identity = tuple[tuple[int, int], ...]


def identify(paths: list[Path]) -> Identity:
    """(device, inode) of each file; FileNotFoundError when one is gone."""
    return tuple((st.st_dev, st.st_ino) for st in (os.stat(p) for p in paths))


class InPlace:
    """The state file and its spool, as opened: :meth:`check` calls
    ``moved()`` (which raises) once either was deleted, emptied (the state
    file) or replaced. Not thread-safe: the journal calls it under
    its spool lock."""

    def __init__(self, state_file: Path, spool: Path, moved: Callable[[], None]) -> None:
        self._paths = [state_file, spool]
        self._moved = moved
        self.identity = identify(self._paths)
        self._notify = _Notify.watching(state_file, spool)

    @property
    def notified(self) -> bool:
        """Changes are seen by inotify (else by stat() at every check)."""
        return self._notify is not None

    def check(self) -> None:
        if self._notify is not None and not self._notify.stirred():
            return
        self._stat()

    def _stat(self) -> None:
        try:
            stats = [os.stat(p) for p in self._paths]
        except FileNotFoundError:
            self._moved()
            return
        if tuple((st.st_dev, st.st_ino) for st in stats) != self.identity or stats[0].st_size == 0:
            self._moved()

    def close(self) -> None:
        if self._notify is not None:
            self._notify.close()
            self._notify = None


class _Notify:
    """One inotify instance with the watches of :class:`InPlace`."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)

    @classmethod
    def watching(cls, state_file: Path, spool: Path) -> _Notify | None:
        """None where inotify cannot vouch for the paths (see the module)."""
        add = _libc_call("inotify_add_watch")
        init = _libc_call("inotify_init1")
        directory = state_file.absolute().parent
        if add is None or init is None or spool.absolute().parent != directory:
            return None
        if os.path.realpath(directory) != str(directory):  # a link on the way
            return None
        fd = init(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:  # no inotify here, or none left (fs.inotify.max_user_instances)
            return None
        notify = cls(fd)
        watches = [(state_file, _STATE_FILE), (spool, _SPOOL), (directory, _DIRECTORY)]
        watches += [(above, _DIRECTORY) for above in directory.parents]
        for path, mask in watches:
            if add(fd, os.fsencode(path), mask) < 0:  # (max_user_watches)
                notify.close()
                return None
        return notify

    def stirred(self) -> bool:
        """Something happened since the last call (the events are read)."""
        if not self._poll.poll(0):
            return False
        try:
            while os.read(self._fd, 65536):
                pass
        except BlockingIOError:
            pass
        return True

    def close(self) -> None:
        os.close(self._fd)


def _libc_call(name: str) -> Callable[..., int] | None:
    """A function of the C library this process runs with, or None."""
    try:
        function = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (AttributeError, OSError):
        return None
    result: Callable[..., int] = function
    return result
