"""What keeps a flood of bad requests out of the organiser's terminal.

The web server's warnings and errors come one per request: uvicorn's
"Invalid HTTP request received." for every malformed request, its 503s, an
exception in a handler, the console's wrong passwords, the projector's
dropped spectators. Anyone on the venue network can send thousands a second
without a login. As the referee does with rejected MQTT messages
(:class:`salvo.referee.flood.RejectionLog`), they are budgeted: the first line of
each kind in a window is logged as it is; the others of that kind are
counted and summed up in one line, with the count, when the window ends.
Lines below WARNING (a login, a control applied) are never held back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Final

log = logging.getLogger("salvo.web")

#: The loggers whose warnings and errors are budgeted: uvicorn's (Starlette
#: logs nothing itself: an exception in a route reaches uvicorn's), asyncio's
#: (the server's event loop: out of descriptors, a failed accept) and
#: salvo's own per-request ones.
LOGGERS: Final = ("uvicorn.error", "uvicorn.asgi", "asyncio", "salvo.organiser.console", "salvo.web.spectate")
WINDOW_S = 10.0
ROLL_CHECK_S = 1.0  # how often a web server looks whether the window is over (a summary is at most this late)
LINES_PER_KIND = 1  # logged as they are, per kind and window
MAX_KINDS = 64  # kinds told apart in a window; past that, one kind "other"

Kind = tuple[str, str]  # (logger, the message's text before its arguments, and its exception's type)


def _kind(record: logging.LogRecord) -> Kind:
    what = record.msg if isinstance(record.msg, str) else type(record.msg).__name__
    if record.exc_info and record.exc_info[0] is not None:
        what = f"{what.rstrip()} ({record.exc_info[0].__name__})"
    return record.name, what


class LogBudget(logging.Filter):
    """A filter on the loggers above (see :func:`install`)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._clock = clock
        self._lock = threading.Lock()  # records come from the server's loop and from broker threads
        self._window = (0.0, 0.0)  # when the current window started, when it ends
        self._lines: Counter[Kind] = Counter()
        self.suppressed: Counter[Kind] = Counter()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        kind = _kind(record)
        with self._lock:
            due = self._roll(self._clock())
            if kind not in self._lines and len(self._lines) >= MAX_KINDS:
                kind = (record.name, "other")
            self._lines[kind] += 1
            passes = self._lines[kind] <= LINES_PER_KIND
            if not passes:
                self.suppressed[kind] += 1
        _say(due)
        return passes

    def roll(self) -> None:
        """Sum up the window if it is over (the web server calls this every
        window: a flood that stopped is summed up without waiting for the
        next line)."""
        with self._lock:
            due = self._roll(self._clock())
        _say(due)

    def _roll(self, now: float) -> tuple[float, list[tuple[Kind, int]]]:
        """(the window's length, what it held back) when it is over; then a new one starts."""
        started, ends = self._window
        if now < ends:
            return 0.0, []
        due = self.suppressed.most_common()
        self.suppressed.clear()
        self._lines.clear()
        self._window = (now, now + WINDOW_S)
        return now - started, due


def _say(due: tuple[float, list[tuple[Kind, int]]]) -> None:
    """One line per kind held back: how many, from where, and what (its first line)."""
    span, kinds = due
    for (name, what), count in kinds:
        first = what.strip().splitlines()[0] if what.strip() else "?"
        log.warning("%d more like this from %s in %.0f s, not logged one by one: %s", count, name, span, first)


#: One for the process: the loggers are the process's.
BUDGET: Final = LogBudget()


def install() -> LogBudget:
    """Put the budget on :data:`LOGGERS` (once; every web server calls this)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if BUDGET not in logger.filters:
            logger.addFilter(BUDGET)
    return BUDGET
