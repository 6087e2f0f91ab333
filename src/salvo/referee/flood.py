"""What keeps a flood of garbage, or a slow or stalled broker, from costing
an arena its game: the error reports it sends (ReportBudget), the lines it
logs (RejectionLog), and the time given back to the teams when their
messages were delayed on their way to the referee (LagClock)."""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import Callable
from typing import Final

from salvo.arena.arena import Log
from salvo.game.engine import Game

log = logging.getLogger("salvo.referee")

#: Error reports per second an arena sends to one error topic at most (a
#: token bucket per topic with a burst of the same size). A flood of garbage
#: would otherwise be mirrored onto /game/errors, and the broker's backlog to
#: the referee would hold up the game's own messages. Reports over the
#: budget are counted and logged.
REPORTS_PER_S: Final = 200.0
#: Error topics with a bucket of their own at most (the longest unused go).
REPORT_BUCKETS: Final = 1024
#: The delay on the way to the referee that costs nobody anything; beyond
#: it, the running deadline is given the delay back (LagClock).
LAG_GRACE_S: Final = 1.0
#: The most time one game's deadlines are given back in all.
LAG_EXTENSION_MAX_S: Final = 300.0
#: A turn that was delayed also gets this: a message the broker dropped
#: meanwhile (its queue for the referee full) comes back only when its sender
#: sends it again (the SDK: a salvo not resolved in 3 s, client.SALVO_RESEND_S).
LAG_RESEND_S: Final = 3.0
#: QoS 1 messages mosquitto sends a client before its acknowledgements
#: (max_inflight_messages, 20 by default): a batch that acknowledges as many
#: means the broker had more waiting for the referee.
BROKER_INFLIGHT: Final = 20
#: Smaller steps are not worth a /game/deadline of their own.
LAG_STEP_S: Final = 0.25
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


class LagClock:
    """Time given back to a game's running deadline for what really delayed
    its teams, and never for anything else.

    The referee sends itself a probe through the broker every half second
    (its housekeeping round; QoS 1, read on the connection the teams' messages come in on, in turn
    with them): its round trip is the delay a team's message has on its way
    to the referee now, the broker's queue for the referee (a flood that
    fills it, messages dropped) and the referee's own inbox included; a
    probe not back yet (a broker that stopped answering, a SIGSTOP) counts
    by its age. Beyond LAG_GRACE_S the running turn (or placement period)
    is given that delay back and LAG_RESEND_S more (what it takes a dropped
    message to be sent again), as much as it has not had yet, at most
    LAG_EXTENSION_MAX_S in a game; and its timer waits meanwhile.

    A probe may slip through while the broker drops other messages (its
    queue for the referee full, in bursts): so a window of the referee's
    housekeeping in which it was always behind (work left for later, or a
    batch acknowledging a whole in-flight window of the broker's) and never
    once caught up counts as delay too, all of it. The broker only queues and
    drops for a referee that is behind.

    Rejected traffic as such gives nothing back: another team's junk that
    the referee keeps up with delays nobody. Until a first probe came back
    after a connect (a broker that does not let it through), it gives
    nothing.
    """

    def __init__(self) -> None:
        self._out: tuple[bytes, float] | None = None  # the probe sent and when
        self._rtt = 0.0  # the last round trip
        self._trusted = False  # a probe came back since the connect
        self._turn: tuple[tuple[int, str, int], float] = ((0, "", 0), 0.0)  # given to the running turn
        self._game: tuple[int, float] = (0, 0.0)  # given to the game
        self._window: float | None = None  # when the housekeeping window began
        self._caught_up = False  # the referee caught up in this window
        self._behind = False  # it left work for later in this window
        self._saturated = 0.0  # this turn's time in windows it never caught up in

    def reset(self) -> None:
        """A (re)connect: what was out is lost; trust comes with a new round trip."""
        self._out, self._rtt, self._trusted = None, 0.0, False
        self._window, self._caught_up, self._behind = None, False, False

    def probe(self, now: float) -> bytes | None:
        """A token to publish now, or None while the last one is out."""
        if self._out is not None:
            return None
        token = os.urandom(8).hex().encode()
        self._out = (token, now)
        return token

    def rest(self) -> None:
        """No deadline runs, so no probe goes out: the last round trip is
        forgotten (the next deadline's lag is measured anew, not inherited
        from a stall long past). Trust, and a probe still out, stay."""
        self._rtt = 0.0

    def returned(self, token: bytes, now: float) -> None:
        if self._out is not None and token == self._out[0]:
            self._rtt, self._out, self._trusted = now - self._out[1], None, True

    def idle(self) -> None:
        """The referee caught up: nothing waits for it (its inbox, its socket)."""
        self._caught_up = True

    def behind(self) -> None:
        """The referee left work for later (the other arenas' turn first)."""
        self._behind = True

    def window(self, now: float) -> None:
        """A housekeeping window ends: one in which the referee was behind
        and never caught up counts as saturated (a flood it cannot keep up
        with, which the broker queues and drops)."""
        if self._window is not None and self._behind and not self._caught_up:
            self._saturated += now - self._window
        self._window, self._caught_up, self._behind = now, False, False

    def lag(self, now: float) -> float:
        """The delay a team's message has on its way now (0 until trusted)."""
        if not self._trusted:
            return 0.0
        probed = max(self._rtt, now - self._out[1] if self._out is not None else 0.0)
        return max(probed, self._saturated)

    def holding(self, now: float) -> bool:
        """Messages are late: the game's timers wait."""
        return self.lag(now) > LAG_GRACE_S

    def extension(self, game: Game, now: float) -> float:
        """The delay to give back to the running deadline now (0: none)."""
        turn = (game.game_no, game.phase.value, game.turn)
        if turn != self._turn[0]:  # a new turn (or placement period): its own account
            self._turn, self._saturated = (turn, 0.0), 0.0
        lag = self.lag(now)
        if lag <= LAG_GRACE_S or game.next_deadline() is None:
            return 0.0
        given = self._turn[1]
        in_game = self._game[1] if self._game[0] == game.game_no else 0.0
        owed = lag + LAG_RESEND_S  # the delay, and the time a dropped message takes to come again
        extra = min(owed - given, LAG_EXTENSION_MAX_S - in_game)
        if extra < LAG_STEP_S:
            return 0.0
        self._turn, self._game = (turn, given + extra), (game.game_no, in_game + extra)
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
