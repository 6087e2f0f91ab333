"""Error reports are capped per error topic (a flood is not mirrored back,
and one topic's flood does not silence another's); the game's own messages
are never held by the cap; a flood stops the turn's clock. No broker
needed: an arena's dispatcher and batch over the in-memory transport."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from salvo.arena.resume import make_arenas
from salvo.game.events import Config
from salvo.referee.batch import Batch, Dispatcher
from salvo.referee.flood import LAG_EXTENSION_MAX_S, LAG_GRACE_S, LAG_RESEND_S, REPORTS_PER_S, LagClock
from salvo.spec import crypto
from salvo.spec.payloads import Publish

from transport_fake import FakeTransport, Idle


def dispatcher_at(tmp_path: Path, now: list[float]) -> tuple[Dispatcher, FakeTransport]:
    """An arena's dispatcher and batch whose clock is ``now[0]``, publishing into memory."""
    arena = make_arenas([""], Config(), 1, crypto.load_or_create_referee_key(tmp_path / "k"))[0]
    out = FakeTransport()
    batch = Batch("", out, None, when_idle=Idle())
    return Dispatcher(arena, batch, clock=lambda: now[0], lag=LagClock(), derive=lambda _job: None), out


def test_error_reports_are_capped_per_second_and_game_messages_are_not(tmp_path: Path) -> None:
    now = [1000.0]
    dispatcher, out = dispatcher_at(tmp_path, now)
    report = Publish("/game/errors", "{}", False, expendable=True)

    def execute(effects: list[Publish]) -> None:  # one batch of the arena thread
        dispatcher.apply(effects)
        dispatcher.flush()

    execute([report] * (int(REPORTS_PER_S) + 50))
    assert len(out.sent) == REPORTS_PER_S and dispatcher.dropped_reports == 50
    execute([Publish("/game/state", "turn", True)] * 5)  # never capped
    assert out.topics[-5:] == ["/game/state"] * 5
    now[0] += 0.5  # half a second refills half the budget
    execute([report] * int(REPORTS_PER_S))
    assert len(out.sent) == REPORTS_PER_S + 5 + REPORTS_PER_S // 2


def test_one_topics_flood_does_not_silence_another_teams_reports(tmp_path: Path) -> None:
    dispatcher, out = dispatcher_at(tmp_path, [1000.0])
    flood = Publish("/game/errors", "{}", False, expendable=True)
    mine = Publish("/players/alice/error", "{}", False, expendable=True)
    dispatcher.apply([flood] * 1000 + [mine] * 10)
    dispatcher.flush()
    assert out.topics.count("/players/alice/error") == 10  # all of alice's
    assert out.topics.count("/game/errors") == REPORTS_PER_S and dispatcher.dropped_reports == 1000 - REPORTS_PER_S


class _Turn:
    """What LagClock reads of a game: a running turn with a deadline."""

    game_no, turn = 1, 3

    class phase:
        value = "turn"

    @staticmethod
    def next_deadline() -> float:
        return 2000.0


def test_only_a_measured_delay_is_given_back_once_a_turn_and_up_to_a_cap_a_game() -> None:
    clock, turn = LagClock(), _Turn()
    game: Any = turn  # (what LagClock reads of a Game)
    # Probes that come back at once: no delay, whatever else arrives (junk from anyone)
    for t in (1000.0, 1000.5, 1001.0):
        clock.returned(clock.probe(t) or b"", t + 0.002)
    assert clock.lag(1001.5) == pytest.approx(0.002) and not clock.holding(1001.5)
    assert clock.extension(game, 1001.5) == 0.0
    # The broker stops answering: the probe out counts by its age
    token = clock.probe(1002.0)
    assert token is not None and clock.probe(1002.5) is None  # one out at a time
    assert not clock.holding(1002.9) and clock.holding(1003.1)  # beyond the grace the timers wait
    assert clock.extension(game, 1005.0) == pytest.approx(3.0 + LAG_RESEND_S)  # the delay, and a resend's time
    assert clock.extension(game, 1005.1) == 0.0  # (steps under LAG_STEP_S wait)
    assert clock.extension(game, 1006.0) == pytest.approx(1.0)  # only what it has not had
    clock.returned(token, 1006.0)  # back, 4 s late: nothing more for this turn
    assert clock.extension(game, 1006.2) == 0.0
    # the cap is per game, over all its turns
    turn.turn = 4
    long_stall = clock.probe(1007.0)
    assert long_stall is not None
    given = clock.extension(game, 1007.0 + LAG_EXTENSION_MAX_S + 50)
    assert given == pytest.approx(LAG_EXTENSION_MAX_S - 4.0 - LAG_RESEND_S)
    # a referee that never catches up in its housekeeping windows (a flood the broker queues and
    # drops for it, the probe slipping through between the bursts): those windows are delay too
    busy = LagClock()
    busy.returned(busy.probe(3000.0) or b"", 3000.001)  # trusted; probes quick
    game.turn = 9
    busy.window(3000.0)
    assert busy.extension(game, 3000.0) == 0.0  # (the runner asks at every window: the turn's account opens)
    for t in (3000.5, 3001.0, 3001.5):
        busy.behind()  # work left for later, and never idle
        busy.window(t)
    assert busy.lag(3001.5) == pytest.approx(1.5)
    assert busy.extension(game, 3001.5) == pytest.approx(1.5 + LAG_RESEND_S)
    busy.behind()
    busy.idle()  # it caught up once in the next window: not saturated
    busy.window(3002.0)
    busy.window(3002.5)  # nothing at all to do: not saturated either
    assert busy.extension(game, 3002.5) == 0.0
    # a probe that never comes back after a (re)connect gives nothing: the clock is not trusted
    clock.reset()
    clock.probe(2000.0)
    assert clock.lag(2100.0) == 0.0 and clock.extension(game, 2100.0) == 0.0
    assert LAG_GRACE_S == 1.0


def test_a_rest_forgets_the_last_round_trip_and_keeps_the_trust() -> None:
    """No deadline, no probes (the runner): the next deadline's lag is
    measured anew, not inherited from a stall long past; but the clock
    stays trusted, so a probe out too long counts at once."""
    clock = LagClock()
    clock.returned(clock.probe(100.0) or b"", 104.0)  # a 4 s stall, measured
    assert clock.lag(104.0) == pytest.approx(4.0)
    clock.rest()
    assert clock.lag(200.0) == 0.0
    assert clock.probe(200.0) is not None  # the next deadline's first probe, not answered
    assert clock.holding(201.5)  # trusted still: its age counts
