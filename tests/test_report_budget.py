"""Error reports are capped per error topic (a flood is not mirrored back,
and one topic's flood does not silence another's); the game's own messages
are never held by the cap; a flood stops the turn's clock. No broker
needed: the runner is built but never connected."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from salvo import crypto
from salvo.engine import Config, Publish
from salvo.mqtt import Broker
from salvo.referee import FLOOD_EXTENSION_MAX_S, FLOOD_PER_S, REPORTS_PER_S, ArenaRunner, FloodClock, make_arenas


class FakeClient:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def publish(self, topic: str, payload: str, qos: int = 0, retain: bool = False) -> None:
        self.sent.append(topic)


def runner_at(tmp_path: Path, now: list[float]) -> tuple[ArenaRunner, FakeClient]:
    """An arena runner whose clock is ``now[0]`` and whose publishes are recorded."""
    arena = make_arenas([""], Config(), 1, crypto.load_or_create_referee_key(tmp_path / "k"))[0]
    runner = ArenaRunner(
        arena, Broker.from_url("mqtt://127.0.0.1:1"), client_id="t", pool=ThreadPoolExecutor(1), clock=lambda: now[0]
    )
    out = FakeClient()
    runner.out = out  # type: ignore[assignment]
    return runner, out


def test_error_reports_are_capped_per_second_and_game_messages_are_not(tmp_path: Path) -> None:
    now = [1000.0]
    runner, out = runner_at(tmp_path, now)
    report = Publish("/game/errors", "{}", False, expendable=True)

    def execute(effects: list[Publish]) -> None:  # one batch of the arena thread
        runner._execute(effects)
        runner._flush()

    execute([report] * (int(REPORTS_PER_S) + 50))
    assert len(out.sent) == REPORTS_PER_S and runner.dropped_reports == 50
    execute([Publish("/game/state", "turn", True)] * 5)  # never capped
    assert out.sent[-5:] == ["/game/state"] * 5
    now[0] += 0.5  # half a second refills half the budget
    execute([report] * int(REPORTS_PER_S))
    assert len(out.sent) == REPORTS_PER_S + 5 + REPORTS_PER_S // 2


def test_one_topics_flood_does_not_silence_another_teams_reports(tmp_path: Path) -> None:
    runner, out = runner_at(tmp_path, [1000.0])
    flood = Publish("/game/errors", "{}", False, expendable=True)
    mine = Publish("/players/alice/error", "{}", False, expendable=True)
    runner._execute([flood] * 1000 + [mine] * 10)
    runner._flush()
    assert out.sent.count("/players/alice/error") == 10  # all of alice's
    assert out.sent.count("/game/errors") == REPORTS_PER_S and runner.dropped_reports == 1000 - REPORTS_PER_S


class _Turn:
    """What FloodClock reads of a game: a running turn with a deadline."""

    game_no, turn = 1, 3

    class phase:
        value = "turn"

    @staticmethod
    def next_deadline() -> float:
        return 2000.0


def test_a_flooded_window_is_given_back_whole_and_only_up_to_the_cap() -> None:
    clock = FloodClock(1000.0)
    clock.rejected = 2 * FLOOD_PER_S  # a flood ...
    assert clock.due(1000.5) == 0.0  # (not over yet)
    assert clock.due(1001.5) == 1.5  # ... seen after 1.5 s: 1.5 s given back, not 1
    assert clock.extension(_Turn(), 1.5) == 1.5  # type: ignore[arg-type]
    assert clock.due(1003.0) == 0.0  # a quiet window gives nothing
    assert clock.extension(_Turn(), FLOOD_EXTENSION_MAX_S) == FLOOD_EXTENSION_MAX_S - 1.5  # type: ignore[arg-type]
    assert clock.extension(_Turn(), 1.0) == 0.0  # type: ignore[arg-type]
