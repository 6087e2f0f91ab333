"""The client SDK against the real referee on a real mosquitto."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from salvo.sdk.bots import make_strategy
from salvo.sdk.client import SalvoClient
from salvo.sdk.outcomes import GameRecord, JoinRefused, PlacementRefused
from salvo.sdk.view import PlayersChanged, ShipApproved, StateChanged
from salvo.spec.rules import Orientation, Placement

from kit import COLUMNS, ROWS
from mosquitto import Mosquitto
from mqttkit import Recorder, wait_until


def client(broker: Mosquitto, prefix: str, name: str, **kw: Any) -> SalvoClient:
    return SalvoClient(name, f"{name}-secret", broker.url(name), prefix=prefix, **kw)


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except Exception as exc:
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_three_sdk_bots_play_a_game_to_the_end(broker: Mosquitto, start_referee: Any, prefix: str) -> None:
    start_referee(min_players=3, turn_timeout=10)
    runs = {}
    for name, strategy in [("alice", "density"), ("bob", "hunt-target"), ("carol", "random")]:
        c = client(broker, prefix, name).connect()
        runs[name] = (c, *in_thread(functools.partial(c.play, make_strategy(strategy, 7), games=1)))
    for name, (c, thread, out) in runs.items():
        thread.join(60)
        c.close()
        assert out and isinstance(out[0], list), f"{name}: {out}"
    records: dict[str, GameRecord] = {name: out[0][0] for name, (_c, _t, out) in runs.items()}
    winners = {r.winner for r in records.values()}
    assert len(winners) == 1 and winners <= set(records)
    places = sorted(r.mine.place for r in records.values() if r.mine)
    assert places == [1, 2, 3]
    assert all(r.summary and r.summary.termination == "victory" for r in records.values())
    assert "winner" in records["alice"].line() and "place" in records["alice"].line()


def test_a_bot_that_reconnects_mid_game_resyncs_and_keeps_playing(
    broker: Mosquitto, start_referee: Any, prefix: str, watcher: Recorder
) -> None:
    start_referee(turn_timeout=10)
    P = f"/{prefix}"
    alice = client(broker, prefix, "alice").connect()
    bob = client(broker, prefix, "bob").connect()
    ta, out_a = in_thread(lambda: alice.play(make_strategy("density", 1), games=1))
    tb, out_b = in_thread(lambda: bob.play(make_strategy("density", 2), games=1))
    watcher.wait(lambda m: m.topic == f"{P}/game/turn" and m.json()["turn"] == 3, timeout=30)
    bob.close()  # bob's process "dies" mid-game
    tb.join(5)
    assert out_b and isinstance(out_b[0], ConnectionError)
    mark = watcher.mark()
    # A brand-new client for bob knows nothing but what the broker retained.
    bob2 = client(broker, prefix, "bob").connect()
    assert bob2.wait_until(lambda v: v.state == "turn" and "bob" in v.players and v.turn >= 3, 10)
    tb2, out_b2 = in_thread(lambda: bob2.play(make_strategy("density", 3), games=1))
    for t in (ta, tb2):
        t.join(90)
    alice.close()
    bob2.close()
    assert out_a and isinstance(out_a[0], list), out_a
    assert out_b2 and isinstance(out_b2[0], list), out_b2
    record = out_b2[0][0]
    assert record.winner in ("alice", "bob") and record.mine is not None
    assert record.mine.reason != "timeout"
    fired = [m.json() for m in watcher.on(f"{P}/game/salvo", after=mark) if m.json()["player"] == "bob"]
    assert fired and all(s["shots"] > 0 for s in fired)


def test_join_refusals_and_placement_errors(broker: Mosquitto, start_referee: Any, prefix: str) -> None:
    start_referee(max_players=3)
    with client(broker, prefix, "alice", sealed=False) as alice:
        alice.join()
        assert "alice" in alice.view.players
        alice.join()  # a repeat is a silent no-op
        # alice's own login with a wrong game secret: she may read her error topic
        with (
            SalvoClient("alice", "wrong", broker.url("alice"), prefix=prefix) as wrong,
            pytest.raises(JoinRefused, match="name taken"),
        ):
            wrong.join(repeat_grace=10)
        overlapping = {s: Placement(0, 0, Orientation.HORIZONTAL) for s in ROWS}
        with pytest.raises(PlacementRefused, match="overlap"):
            alice.place_fleet(overlapping)
        alice.place_fleet(COLUMNS)  # moves every ship to a legal place
        assert alice.view.approved == set(COLUMNS)


def test_events_are_typed(broker: Mosquitto, start_referee: Any, prefix: str) -> None:
    start_referee()
    with client(broker, prefix, "alice") as alice:
        got: list[object] = []
        alice.on_event(got.append)
        alice.join()
        alice.place_fleet(ROWS)
        wait_until(lambda: any(isinstance(e, ShipApproved) and e.approved for e in got))
        assert any(isinstance(e, PlayersChanged) and "alice" in e.players for e in got)
        events = alice.events(timeout=5)  # from now on
        with client(broker, prefix, "bob") as bob:
            bob.join()
            bob.place_fleet(COLUMNS)
            assert next(e.state for e in events if isinstance(e, StateChanged)) == "turn"


def test_refused_login_is_a_clear_error(broker: Mosquitto, prefix: str) -> None:
    bad = SalvoClient("alice", "s", f"mqtt://alice:wrong@127.0.0.1:{broker.port}", prefix=prefix)
    began = time.monotonic()
    with pytest.raises(ConnectionRefusedError, match="refused 'alice'"):
        bad.connect(timeout=30)
    assert time.monotonic() - began < 10  # at the refusal, not at the end of the timeout


def test_v21_joins_name_the_game_and_a_refused_shot_is_known_by_its_cell(
    broker: Mosquitto, start_referee: Any, prefix: str
) -> None:
    """The SDK's join carries the /game/id it saw; a salvo fired out of turn
    comes back from refused_shots() as the shots it refused, with the code."""
    start_referee(turn_timeout=20)
    watcher = Recorder(broker, "referee", [f"/{prefix}/game/request_participation", f"/{prefix}/game/id"])
    with client(broker, prefix, "alice", sealed=False) as alice, client(broker, prefix, "bob", sealed=False) as bob:
        game_id = watcher.wait(lambda m: m.topic.endswith("/game/id") and bool(m.payload)).text
        alice.join()
        bob.join()
        joins = [m.json() for m in watcher.messages if m.topic.endswith("/request_participation")]
        assert {j["name"]: j["game"] for j in joins} == {"alice": game_id, "bob": game_id}
        alice.place_fleet(ROWS)
        bob.place_fleet(COLUMNS)
        assert alice.wait_until(lambda v: v.current is not None, 10)
        # Both views must know the turn: a shot signed for no turn yet is wrong_turn.
        assert bob.wait_until(lambda v: v.current is not None, 10)
        waiting = alice if alice.view.current == "bob" else bob
        victim = "bob" if waiting is alice else "alice"
        waiting.fire_salvo([(victim, 3, 4), (victim, 5, 6)])
        assert waiting.wait_until(lambda v: len(v.errors) == 2, 10), waiting.view.errors
        assert sorted(waiting.refused_shots()) == [
            ((victim, 3, 4), "not_current_player"),
            ((victim, 5, 6), "not_current_player"),
        ]
    watcher.close()
