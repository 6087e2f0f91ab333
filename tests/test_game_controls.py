"""The organiser's controls of one game: pause and resume (the clock stops,
messages do not), extra time, abort. Engine and journal without a broker,
then one game paused through a real mosquitto."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from nacl.public import PrivateKey

from salvo.arena.arena import Record
from salvo.arena.journal import Store
from salvo.arena.resume import make_arenas
from salvo.game.events import Abandon, Config, Extend, Pause, Phase, Resume
from salvo.net.loop import answer
from salvo.net.mqtt import Broker
from salvo.referee.service import Referee
from salvo.spec import crypto, payloads, wire

from kit import COLUMNS, ROWS, ArenaDriver, Driver
from mosquitto import Mosquitto
from mqttkit import Recorder, connect_team

CONFIG = Config(placement_timeout=60, turn_timeout=30, reset_after=100)


def deadline_of(d: Driver) -> dict[str, object]:
    value: dict[str, object] = json.loads(d.game.retained[d.t.deadline])
    wire.Deadline.model_validate(value)  # the team-facing model reads it
    return value


def test_a_pause_holds_the_turn_clock_and_a_resume_gives_back_exactly_the_time_left() -> None:
    d = Driver(turn_timeout=30)
    d.start({"a": ROWS, "b": COLUMNS})
    assert d.game.next_deadline() == d.now + 30
    d.now += 12.25
    out = d.ok(Pause("a team's laptop died", d.now))
    assert d.game.next_deadline() is None
    assert [json.loads(p.payload) for p in out] == [
        {"phase": "turn", "at": round(d.now + 17.75, 3), "paused": True, "left": 17.75}
    ]
    assert d.ok(Pause("again", d.now)) == []  # already paused: nothing to journal
    d.tick(600)  # far past the old deadline: no timeout fires
    assert d.game.turn == 1 and d.game.phase is Phase.TURN
    out = d.ok(Resume(d.now))
    assert d.game.next_deadline() == pytest.approx(d.now + 17.75)
    assert [json.loads(p.payload) for p in out] == [{"phase": "turn", "at": round(d.now + 17.75, 3)}]
    assert d.ok(Resume(d.now)) == []  # not paused
    d.tick(17.7)
    assert d.game.turn == 1
    d.tick(0.1)
    assert d.game.turn == 2


def test_while_paused_messages_count_and_every_new_deadline_waits_with_its_whole_length() -> None:
    d = Driver(turn_timeout=30, placement_timeout=60)
    d.join("a", "b")
    d.ok(Pause("break", d.now + 10))
    assert deadline_of(d)["left"] == 50.0
    d.now += 100
    d.join("c")  # a join re-arms the placement deadline: paused, full length
    assert deadline_of(d) == {"phase": "placement", "at": d.now + 60, "paused": True, "left": 60.0}
    for name, fleet in {"a": ROWS, "b": COLUMNS, "c": ROWS}.items():
        d.place(name, fleet)
    assert d.game.phase is Phase.TURN and d.game.next_deadline() is None  # started, clock still held
    d.idle_turn()  # a whole salvo ends the turn; the next one waits too
    assert d.game.turn == 2 and deadline_of(d)["left"] == 30.0
    d.ok(Extend(5, d.now))  # extra time while paused: more left
    assert deadline_of(d)["left"] == 35.0
    d.now += 1000
    d.ok(Resume(d.now))
    assert d.game.next_deadline() == d.now + 35


def test_an_abort_ends_the_game_without_a_result_and_tells_its_players() -> None:
    d = ArenaDriver(turn_timeout=30)
    d.start({"alice": ROWS, "bob": COLUMNS})
    old = d.game.game_id
    out = d.run(d.arena.abort("scoreboard fault", d.now))
    assert d.game.phase is Phase.LOBBY and not d.game.players and d.game.game_id != old
    for name in ("alice", "bob"):
        (report,) = [json.loads(p.payload) for p in out if p.topic == d.t.player_error(name)]
        assert report["code"] == "game_aborted" and "scoreboard fault" in report["error"]
    assert d.game.retained.get(d.t.winner) is None and d.t.stats_summary not in d.game.retained
    assert isinstance(d.records[-1], Abandon) and d.records[-1].tell
    assert d.run(d.arena.abort("again", d.now)) == []  # an empty lobby: nothing to abort
    assert d.records[-1] is not None and len([r for r in d.records if isinstance(r, Abandon)]) == 1


def test_a_game_over_keeps_its_result_and_pausing_without_a_deadline_is_nothing() -> None:
    d = ArenaDriver()
    effects = d.arena.pause("nothing runs", d.now)
    assert not any(isinstance(e, Record) for e in effects)  # an empty lobby has no clock
    d.start({"alice": ROWS, "bob": COLUMNS})
    d.game.phase = Phase.OVER  # (the result is published: an abort may not clear it)
    effects = d.arena.abort("too late", d.now)
    assert not any(isinstance(e, Record) for e in effects)


def test_a_journal_with_pause_and_resume_replays_to_the_same_game(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    key = PrivateKey.generate()
    (arena,) = make_arenas(["p"], CONFIG, 3, key, store)
    d = ArenaDriver(prefix="p")
    d.game, d.arena = arena.game, arena
    for name, fleet in {"alice": ROWS, "bob": COLUMNS}.items():
        d.join(name)
        d.place(name, fleet)
    for effects in (
        arena.pause("dinner", d.now + 4.5),
        arena.add_time(7.0, d.now + 5),
        arena.resume(d.now + 65),
        arena.pause("again", d.now + 70),
    ):
        d.run(effects)
    assert [type(e) for e in d.records[-4:]] == [Pause, Extend, Resume, Pause]
    for event in d.records:
        store.record("p", 1, event)
    store.close()
    again = Store(tmp_path / "state.db")
    (back,) = make_arenas(["p"], CONFIG, 3, key, again)
    assert back.game.snapshot() == arena.game.snapshot()
    assert back.game.paused is not None and back.game.paused.left == pytest.approx(30 - 4.5 + 7 - 5)
    assert back.game.retained == arena.game.retained  # teams see the same /game/deadline
    again.close()


def test_the_paused_deadline_payload_is_the_wire_models() -> None:
    value = wire.Deadline.model_validate_json(payloads.paused_deadline("turn", 1_763_812_345.1236, 12.5))
    assert (value.paused, value.left, value.at) == (True, 12.5, 1_763_812_345.124)
    assert not wire.Deadline.model_validate_json(payloads.deadline("turn", 1.0)).paused


# -- through the real broker -----------------------------------------------------------------


def test_a_paused_game_shows_it_lets_no_turn_time_out_and_finishes_once_resumed(
    broker: Mosquitto, prefix: str, tmp_path: Path
) -> None:
    key = crypto.load_or_create_referee_key(tmp_path / "referee.key")
    store = Store(tmp_path / "state.db")
    arenas = make_arenas([prefix], Config(turn_timeout=1.5, placement_timeout=30), 1, key, store)
    ref = Referee(
        arenas, Broker.from_url(broker.url("referee")), client_id=f"ref-{uuid.uuid4().hex[:8]}", journal=store
    )
    ref.start()
    watch = Recorder(broker, "referee", [f"/{prefix}/#"])
    alice, bob = connect_team(broker, prefix, "alice"), connect_team(broker, prefix, "bob")
    t = alice.t

    def on(topic: str, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        msg = watch.wait(lambda m: m.topic == topic and bool(m.payload) and pred(m.json()), what=topic)
        value: dict[str, Any] = msg.json()
        return value

    try:
        assert ref.wait_connected(10)
        for team in (alice, bob):
            team.join()
            watch.wait_for(t.approved(team.name, "carrier"), "false")
        alice.place_fleet(ROWS)
        bob.place_fleet(COLUMNS)
        current = on(t.turn, lambda v: v["turn"] == 1)["player"]
        shooter, target = (alice, "bob") if current == "alice" else (bob, "alice")

        assert answer(ref.soon.pause_game(prefix, "a team's laptop died"), 10)
        shown = on(t.deadline, lambda v: v.get("paused") is True)
        assert shown["phase"] == "turn" and 0 < shown["left"] <= 1.5
        # What a team sees: the public topic, anonymous and read-only.
        spectator = Recorder(broker, None, [t.deadline])
        try:
            assert spectator.wait_for(t.deadline).json()["paused"] is True
        finally:
            spectator.close()
        # Well past the turn timeout, a shot is still taken in turn 1: the
        # turn did not time out while the clock was stopped.
        time.sleep(3 * 1.5)
        shooter.fire(target, 9, 9, 1)
        on(t.hit(target), lambda v: v == {"x": 9, "y": 9, "turn": 1, "shot": 1, "game": shooter.game_id()})
        assert json.loads(watch.text(t.turn) or "{}")["turn"] == 1

        assert answer(ref.soon.resume_game(prefix), 10)
        on(t.deadline, lambda v: "paused" not in v)
        assert not answer(ref.soon.resume_game(prefix), 10)  # not paused any more
        assert answer(ref.soon.extend(prefix, 0.5), 10)
        # The clock runs: idle turns time out until missed turns end the game.
        watch.wait_for(t.state, "over", timeout=60)
        assert watch.text(t.winner) in ("alice", "bob")
    finally:
        for team in (alice, bob):
            team.conn.close()
        watch.close()
        ref.stop()
        store.close()
