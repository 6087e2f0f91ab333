"""What keeps a flood of garbage from costing an arena its game: the error
reports it sends (ReportBudget), the lines it logs (RejectionLog), and the
turn clock a flood would otherwise run down (FloodClock)."""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import Final

from salvo.engine import Game
from salvo.protocol import Log

log = logging.getLogger("salvo.referee")

#: Error reports per second an arena sends to one error topic at most (a
#: token bucket per topic with a burst of the same size). A flood of garbage
#: would otherwise be mirrored onto /game/errors, and the broker's backlog to
#: the referee would hold up the game's own messages. Reports over the
#: budget are counted and logged.
REPORTS_PER_S: Final = 200.0
#: Error topics with a bucket of their own at most (the longest unused go).
REPORT_BUCKETS: Final = 1024
#: Rejected messages per second from which an arena counts as flooded, and
#: the most a flood may stop one turn's clock (see FloodClock).
FLOOD_PER_S: Final = 500
FLOOD_EXTENSION_MAX_S: Final = 300.0
#: Rejections logged line by line per window (see RejectionLog).
REJECT_LINES: Final = 100
REJECT_WINDOW_S: Final = 10.0


def emit(arena: str, line: Log) -> None:
    """Log one Log effect under the arena's name. Its args are formatted only
    when the level is on; a text without args is never used as a format
    (reasons and topics may hold ``%``)."""
    level = logging.INFO if line.accepted else logging.WARNING
    if line.args:
        log.log(level, "[%s] " + line.text, arena, *line.args)
    else:
        log.log(level, "[%s] %s", arena, line.text)


class ReportBudget:
    """A token bucket per error topic: garbage from nobody fills only
    /game/errors's, a team's own flood only its own, and a team's reports
    about its own messages still go out while others flood."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        #: error topic -> (tokens, when refilled), least recently used first
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, topic: str) -> bool:
        """Take a token for one report to ``topic``, if its bucket has one."""
        now = self._clock()
        buckets = self._buckets
        tokens, refilled = buckets.pop(topic, (REPORTS_PER_S, now))  # (re-inserted: most recent last)
        tokens = min(REPORTS_PER_S, tokens + (now - refilled) * REPORTS_PER_S)
        allowed = tokens >= 1
        buckets[topic] = (tokens - 1 if allowed else tokens, now)
        if len(buckets) > REPORT_BUCKETS:
            del buckets[next(iter(buckets))]  # the longest unused (full again by now)
        return allowed


class FloodClock:
    """While garbage floods an arena, its running turn (or placement period)
    is stopped: every flooded second is given back to it (a journaled
    Extend), up to FLOOD_EXTENSION_MAX_S for one turn. The broker keeps only
    so many messages for the referee (max_queued_messages) and drops the rest,
    a team's shots among them, so a flood could otherwise make a team lose
    its turns; with the clock stopped, the shots its client sends again once
    the flood is over still count (the SDK does; see docs/protocol.md)."""

    def __init__(self, now: float) -> None:
        self.rejected = 0  # in the current window
        self._since = now
        self._given: tuple[tuple[int, str, int], float] = ((0, "", 0), 0.0)

    def due(self, now: float) -> float:
        """When a window of a second or more is over: its length if it was
        flooded, else 0 (and a new window starts)."""
        span = now - self._since
        if span < 1.0:
            return 0.0
        flooded = self.rejected >= FLOOD_PER_S * span
        self._since, self.rejected = now, 0
        return span if flooded else 0.0

    def extension(self, game: Game, flooded_s: float) -> float:
        """The flooded time to give back to the running turn, within the cap."""
        if game.next_deadline() is None:
            return 0.0
        key = (game.game_no, game.phase.value, game.turn)
        given = self._given[1] if self._given[0] == key else 0.0
        extra = min(flooded_s, FLOOD_EXTENSION_MAX_S - given)
        if extra <= 0:
            return 0.0
        self._given = (key, given + extra)
        return extra


class RejectionLog:
    """Rejections (and routine lines about messages that changed nothing)
    are logged one line each up to REJECT_LINES per REJECT_WINDOW_S; beyond
    that (a flood) they are counted by code and summed up in one line per
    window, so a flood cannot fill the disk with log lines or spend the
    referee's time writing them."""

    def __init__(self, arena: str, clock: Callable[[], float]) -> None:
        self.arena = arena
        self._clock = clock
        self._window_end = 0.0
        self._lines = 0
        self.suppressed: collections.Counter[str] = collections.Counter()

    def emit(self, line: Log) -> None:
        if line.code is None:  # what changed the game: always
            emit(self.arena, line)
            return
        self.roll(self._clock())
        if self._lines < REJECT_LINES:
            self._lines += 1
            emit(self.arena, line)
        else:
            self.suppressed[line.code or "other"] += 1

    def roll(self, now: float) -> None:
        """Start a new window when the current one is over, summing up what
        the old one did not log line by line."""
        if now < self._window_end:
            return
        if self.suppressed:
            total = sum(self.suppressed.values())
            by_code = ", ".join(f"{code} {n}" for code, n in self.suppressed.most_common())
            log.warning(
                "[%s] %d more rejected or repeated messages in %g s not logged one by one (%s)",
                self.arena,
                total,
                REJECT_WINDOW_S,
                by_code,
            )
            self.suppressed.clear()
        self._window_end = now + REJECT_WINDOW_S
        self._lines = 0
