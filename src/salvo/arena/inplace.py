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
every directory above it (moved or deleted). A path with a symbolic link
on the way (the files themselves included), or a system without inotify
(or out of inotify instances: logged once), is checked by ``stat()`` every
time.

inotify sees what is done through this machine's kernel to a local file
system. What it cannot see - a change made from elsewhere on a network or
shared file system (NFS; the host's side of FUSE, virtiofs or 9p, as with
Docker Desktop's and WSL2's shared folders), a mount over the directory or
the file - the journal's once-a-second ``check_intact`` still sees, by
``stat()``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import weakref
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

log = logging.getLogger("salvo.arena.journal")


class InPlace:
    """The state file and its spool, as opened: :meth:`check` calls
    ``moved()`` (which raises) once either was deleted, emptied (the state
    file) or replaced. Not thread-safe: the journal calls it under
    its spool lock."""

    def __init__(self, state_file: Path, spool: Path, identity: Identity, moved: Callable[[], None]) -> None:
        """``identity``: the files' (device, inode) as the journal opened them."""
        self._paths = [state_file, spool]
        self._moved = moved
        self.identity = identity
        self._notify = _Notify.watching(state_file, spool)
        # What changed before the watches were made is no event: the first
        # check stats.
        self._first = True

    @property
    def notified(self) -> bool:
        """Changes are seen by inotify (else by stat() at every check)."""
        return self._notify is not None

    def check(self) -> None:
        stirred = self._notify is None or self._notify.stirred()
        if stirred or self._first:
            self._first = False
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
        # A store nobody closed must not keep one of the user's 128 instances.
        self.close = weakref.finalize(self, os.close, fd)

    @classmethod
    def watching(cls, state_file: Path, spool: Path) -> _Notify | None:
        """None where inotify cannot vouch for the paths (see the module)."""
        add = _libc_call("inotify_add_watch")
        init = _libc_call("inotify_init1")
        if add is None or init is None:
            return None
        files = [state_file.absolute(), spool.absolute()]
        if any(os.path.realpath(f) != str(f) for f in files) or files[0].parent != files[1].parent:
            return None  # a link on the way: inotify would watch where it points now
        fd = init(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            _unwatched("inotify_init1")  # none here, or none left (fs.inotify.max_user_instances)
            return None
        notify = cls(fd)
        directory = files[0].parent
        watches = [(files[0], _STATE_FILE), (files[1], _SPOOL), (directory, _DIRECTORY)]
        watches += [(above, _DIRECTORY) for above in directory.parents]
        for path, mask in watches:
            if add(fd, os.fsencode(path), mask) < 0:
                _unwatched(f"inotify_add_watch({path})")  # (fs.inotify.max_user_watches, a directory not readable)
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


_said = False


def _unwatched(call: str) -> None:
    """inotify refused: said once a process, each batch then stats."""
    global _said
    if not _said:
        _said = True
        error = ctypes.get_errno()
        log.info("%s: %s; the journal checks its file by stat() at every batch", call, os.strerror(error))


def _libc_call(name: str) -> Callable[..., int] | None:
    """A function of the C library this process runs with, or None."""
    try:
        function = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (AttributeError, OSError, TypeError):  # (no such call; no C library by that name)
        return None
    result: Callable[..., int] = function
    return result
