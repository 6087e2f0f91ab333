"""A small event loop on one thread, knowing nothing of games or MQTT.

What the referee needs of a loop, and no more: file descriptors watched for
reading and writing through :mod:`selectors` (epoll on Linux: ``select()``
cannot watch a descriptor numbered 1024 or above, and a thousand arenas hold
two thousand sockets), timers, callbacks handed over from other threads
(through a socket pair that wakes the loop), callbacks for when the loop has
nothing to do, and stop.

Everything but :meth:`Loop.call_soon_threadsafe` and :meth:`Loop.stop` is
for the loop's own thread. A callback that raises goes to ``on_error``
(logged by default) and the loop goes on; whoever registers a callback that
must not take the loop down catches what it raises itself.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import itertools
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

log = logging.getLogger("salvo.net.loop")


#: This process's start, in wall time and in monotonic time (steady_time).
_WALL0, _MONO0 = time.time(), time.monotonic()


def steady_time() -> float:
    """Unix seconds that never step: the wall time when this process began
    plus the monotonic time since. A deadline on it is neither stretched nor
    cut when the machine's clock is stepped (a VM restored, a wrong NTP
    answer, an organiser setting the clock mid-game): a backward step of 30 s
    made a 6 s turn last 36. The referee publishes its deadlines in it: on a
    machine whose clock was stepped, the better guess of the teams' time."""
    return _WALL0 + (time.monotonic() - _MONO0)


def answer(asked: Future[bool], timeout: float) -> bool:
    """Wait for a yes/no handed back from another thread (the loop's answer to
    a control): its value, or False when none came within ``timeout`` (the
    asker treats silence as a refusal). What the future raises, it raises."""
    try:
        return asked.result(timeout)
    except TimeoutError:
        return False


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


FileLike = int | _HasFileno


class Handle:
    """A callback the loop will run; ``cancel()`` before then drops it."""

    __slots__ = ("_args", "_callback", "cancelled")

    def __init__(self, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        self._callback = callback
        self._args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Timer(Handle):
    """A callback due at ``when`` (the loop's clock)."""

    __slots__ = ("_in_heap", "_loop", "when")

    def __init__(self, when: float, callback: Callable[..., object], args: tuple[Any, ...], loop: Loop) -> None:
        super().__init__(callback, args)
        self.when = when
        self._loop = loop
        self._in_heap = True

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            if self._in_heap:
                self._loop._timer_cancelled()  # noqa: SLF001 (the loop's own handles, one module)


def _log_error(exc: Exception) -> None:
    log.error("a loop callback failed", exc_info=exc)


class Loop:
    """Readers and writers by file descriptor, timers, hand-overs from other
    threads, idle callbacks. ``clock`` is monotonic seconds (timers use it)."""

    def __init__(
        self,
        *,
        on_error: Callable[[Exception], None] = _log_error,
        clock: Callable[[], float] = time.monotonic,
        io_slice_s: float = 0.05,
    ) -> None:
        self.on_error = on_error
        self.time = clock
        self.io_slice_s = io_slice_s
        self._rotation = 0
        self._selector = selectors.DefaultSelector()
        #: fd -> [reader, writer]
        self._io: dict[int, list[Callable[[], object] | None]] = {}
        self._ready: collections.deque[Handle] = collections.deque()
        self._timers: list[tuple[float, int, Timer]] = []
        self._cancelled = 0  # cancelled timers still in the heap
        self._seq = itertools.count()
        # Appended to by other threads: deque.append and popleft are atomic.
        self._handover: collections.deque[Handle] = collections.deque()
        self._idle: dict[Callable[[], object], None] = {}
        self._stopping = False
        self.closed = False
        self._thread: int | None = None  # run()'s
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._wake_fd = self._wake_r.fileno()
        self._selector.register(self._wake_fd, selectors.EVENT_READ)

    # -- file descriptors ----------------------------------------------------------------

    def add_reader(self, fd: FileLike, callback: Callable[[], object]) -> None:
        """Call ``callback`` whenever ``fd`` is readable (level-triggered)."""
        self._watch(_fileno(fd), 0, callback)

    def remove_reader(self, fd: FileLike) -> None:
        self._watch(_fileno(fd), 0, None)

    def add_writer(self, fd: FileLike, callback: Callable[[], object]) -> None:
        """Call ``callback`` whenever ``fd`` is writable (level-triggered)."""
        self._watch(_fileno(fd), 1, callback)

    def remove_writer(self, fd: FileLike) -> None:
        self._watch(_fileno(fd), 1, None)

    def _watch(self, fd: int, which: int, callback: Callable[[], object] | None) -> None:
        if fd < 0:
            return
        entry = self._io.get(fd)
        if entry is None:
            if callback is None:
                return
            entry = self._io[fd] = [None, None]
            entry[which] = callback
            self._register(fd, _mask(entry))
            return
        before = _mask(entry)
        entry[which] = callback
        after = _mask(entry)
        if after == before:
            return
        if not after:
            del self._io[fd]
            self._selector.unregister(fd)
            return
        try:
            self._selector.modify(fd, after)
        except OSError:
            # Closed without being removed (epoll forgot it); a new file may
            # have the same number by now.
            self._register(fd, after)

    def _register(self, fd: int, mask: int) -> None:
        with contextlib.suppress(KeyError):
            self._selector.unregister(fd)
        self._selector.register(fd, mask)

    # -- callbacks -----------------------------------------------------------------------

    def call_soon(self, callback: Callable[..., object], *args: Any) -> Handle:
        """Run ``callback(*args)`` in this pass of the loop, after what is due now."""
        handle = Handle(callback, args)
        self._ready.append(handle)
        return handle

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> Timer:
        timer = Timer(when, callback, args, self)
        heapq.heappush(self._timers, (when, next(self._seq), timer))
        return timer

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Timer:
        return self.call_at(self.time() + delay, callback, *args)

    def call_soon_threadsafe(self, callback: Callable[..., object], *args: Any) -> Handle:
        """From any thread: run ``callback(*args)`` on the loop's thread soon."""
        handle = Handle(callback, args)
        self._handover.append(handle)  # before the byte: the loop drains the socket first
        self._wake()
        return handle

    def call_when_idle(self, callback: Callable[[], object]) -> None:
        """Run ``callback()`` once, when nothing is ready to read or run
        (registering it again before then changes nothing)."""
        self._idle[callback] = None

    def in_thread(self) -> bool:
        """Is this :meth:`run`'s thread (what must never wait for the loop)?"""
        return self._thread == threading.get_ident()

    def stop(self) -> None:
        """From any thread: end :meth:`run` after the current pass."""
        self._stopping = True
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full: awake already; closed: nobody to wake
            self._wake_w.send(b"\0")

    def _timer_cancelled(self) -> None:
        self._cancelled += 1
        timers = self._timers
        if self._cancelled > 64 and self._cancelled * 2 > len(timers):
            for entry in timers:
                entry[2]._in_heap = not entry[2].cancelled  # noqa: SLF001 (the loop's own handles, one module)
            self._timers = [t for t in timers if not t[2].cancelled]
            heapq.heapify(self._timers)
            self._cancelled = 0

    # -- running -------------------------------------------------------------------------

    def run(self) -> None:
        """Run until :meth:`stop` (also when it was called before)."""
        self._thread = threading.get_ident()
        while not self._stopping:
            self.run_once()

    def run_once(self, timeout: float | None = None) -> None:
        """One pass: wait for a descriptor, a timer or a hand-over (at most
        ``timeout`` seconds; None: as long as it takes), then run what is due."""
        if self._ready or self._handover or self._idle or self._stopping:
            wait: float | None = 0.0
        else:
            wait = timeout
            timers = self._timers
            while timers and timers[0][2].cancelled:
                heapq.heappop(timers)[2]._in_heap = False  # noqa: SLF001 (the loop's own handles, one module)
                self._cancelled -= 1
            if timers:
                until = max(0.0, timers[0][0] - self.time())
                wait = until if wait is None else min(wait, until)
        events = self._selector.select(wait)
        io = self._io
        # At most io_slice_s of I/O callbacks a pass: timers, hand-overs (a
        # stop) and what the reads made ready do not wait for all of a busy
        # selector's list. The rest is reported again (level-triggered); the
        # next pass starts where this one stopped, so no descriptor starves.
        count = len(events)
        first = self._rotation % count if count else 0
        until = self.time() + self.io_slice_s
        for i in range(count):
            key, mask = events[(first + i) % count]
            fd = key.fd
            if fd == self._wake_fd:
                self._drain_wake()
                continue
            # Looked up again each time: an earlier callback may have removed it.
            entry = io.get(fd)
            if entry is not None and mask & selectors.EVENT_READ and (reader := entry[0]) is not None:
                self._call(reader, ())
                entry = io.get(fd)
            if entry is not None and mask & selectors.EVENT_WRITE and (writer := entry[1]) is not None:
                self._call(writer, ())
            if self.time() > until and i + 1 < count:
                self._rotation = first + i + 1
                break
        if self._idle and not events and not self._ready and not self._handover:
            idle, self._idle = self._idle, {}
            for callback in idle:
                self._call(callback, ())
            return  # they took time: what arrived meanwhile is read before timers run
        ready = self._ready
        if self._timers:
            now = self.time()
            timers = self._timers
            while timers and timers[0][0] <= now:
                timer = heapq.heappop(timers)[2]
                timer._in_heap = False  # noqa: SLF001 (the loop's own handles, one module)
                if timer.cancelled:
                    self._cancelled -= 1
                else:
                    ready.append(timer)
        handover = self._handover
        while handover:
            ready.append(handover.popleft())
        for _ in range(len(ready)):  # what is added meanwhile waits for the next pass
            handle = ready.popleft()
            if not handle.cancelled:
                self._call(handle._callback, handle._args)  # noqa: SLF001 (the loop's own handles, one module)

    def _call(self, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        try:
            callback(*args)
        except Exception as exc:
            self.on_error(exc)

    def _drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while self._wake_r.recv(4096):
                pass

    def close(self) -> None:
        """Release the selector and the wake-up sockets (the loop is done)."""
        if self.closed:
            return
        self.closed = True
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
        self._io.clear()


def _fileno(fd: FileLike) -> int:
    return fd if isinstance(fd, int) else fd.fileno()


def _mask(entry: list[Callable[[], object] | None]) -> int:
    reader, writer = entry
    return (selectors.EVENT_READ if reader else 0) | (selectors.EVENT_WRITE if writer else 0)
