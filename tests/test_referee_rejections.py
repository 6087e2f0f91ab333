"""Rejections through the real referee on a real mosquitto: each report
reaches the right topic, unretained, with its code, and nothing else moves.
What each kind of bad input is refused for is tested without a broker in
test_rejections.py; here it is the routing, the retain flags, the broker's
packet limit and the ACL around them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from salvo.game.engine import Game
from salvo.referee.service import Referee
from salvo.spec import crypto

from conftest import RefereeFactory, TeamFactory
from kit import COLUMNS, ROWS
from mosquitto import Mosquitto
from mqttkit import Msg, Recorder, Team, wait_until


@dataclass
class Arena:
    P: str
    ref: Referee
    watcher: Recorder
    teams: dict[str, Team]

    @property
    def game(self) -> Game:
        return self.ref.runners[0].arena.game

    def report(self, topic: str, after: int, *, request_id: str | None = None) -> Msg:
        """The next report on ``topic`` (for a join refusal: echoing ``request_id``)."""
        return self.watcher.wait(
            lambda m: (
                m.topic == f"{self.P}{topic}" and (request_id is None or m.json().get("request_id") == request_id)
            ),
            after=after,
        )

    def sync(self) -> None:
        """Every message the broker took so far has reached the watcher."""
        self.watcher.sync(f"{self.P}/sync")


@pytest.fixture
def lobby(start_referee: RefereeFactory, make_team: TeamFactory, watcher: Recorder, prefix: str) -> Iterator[Arena]:
    ref = start_referee(max_players=3, turn_timeout=20)
    P = f"/{prefix}"
    teams = {n: make_team(n) for n in ("alice", "bob")}
    for t in teams.values():
        t.join()
    watcher.wait_for(f"{P}/players/count", "2")
    yield Arena(P, ref, watcher, teams)
    # No message of the test may ever carry a secret outside the join topic.
    for m in watcher.messages:
        if not m.topic.endswith("/request_participation"):
            assert b"-secret" not in m.payload, m


@pytest.fixture
def turn(lobby: Arena) -> Arena:
    lobby.teams["alice"].place_fleet(ROWS)
    lobby.teams["bob"].place_fleet(COLUMNS)
    lobby.watcher.wait_for(f"{lobby.P}/game/state", "turn")
    lobby.watcher.wait_for(f"{lobby.P}/game/current")
    return lobby


def test_a_refused_join_is_reported_on_game_errors_only(lobby: Arena, make_team: TeamFactory) -> None:
    before = lobby.game.snapshot()
    mark = lobby.watcher.mark()
    impostor = make_team("alice", secret="another-secret", login="mallory")  # mallory's login, alice's name
    impostor.join(request_id="forged-1")
    report = lobby.report("/game/errors", mark, request_id="forged-1")
    assert not report.retain
    assert report.json() == {
        "topic": f"{lobby.P}/game/request_participation",
        "error": "name taken: 'alice' already joined with another secret",
        "code": "name_taken",
        "request_id": "forged-1",
    }
    lobby.sync()
    assert not lobby.watcher.on(f"{lobby.P}/players/alice/error", after=mark)
    assert lobby.game.snapshot() == before


def test_the_broker_delivers_an_oversized_join_so_the_referee_can_say_why(lobby: Arena) -> None:
    mark = lobby.watcher.mark()
    big = json.dumps({"name": "carol", "secret": "x" * 4100, "request_id": "big"})
    assert lobby.watcher.publish(f"{lobby.P}/game/request_participation", big) < 0x80
    report = lobby.report("/game/errors", mark).json()
    # unread: no request_id can be echoed from a payload the referee did not parse
    assert report["code"] == "too_large" and "request_id" not in report


def test_a_placement_error_reaches_the_ships_error_topic(lobby: Arena) -> None:
    P, alice = lobby.P, lobby.teams["alice"]
    mark, own = lobby.watcher.mark(), alice.conn.mark()
    alice.place_raw("carrier", '{"coordinates":{"x":6,"y":0},"orientation":"horizontal"}')
    report = alice.conn.wait_for(f"{P}/players/alice/ships/carrier/error", after=own)  # alice reads it
    assert not report.retain
    assert report.json() | {"error": ""} == {
        "topic": f"{P}/players/alice/ships/carrier/place",
        "error": "",
        "code": "off_board",
    }
    lobby.watcher.wait_for(f"{P}/players/alice/ships/carrier/error", after=mark)
    lobby.sync()
    assert lobby.watcher.text(f"{P}/players/alice/ships/carrier/approved") == "false"
    assert not lobby.watcher.on(f"{P}/game/errors", after=mark)


def test_a_fire_error_reaches_its_sender_and_nobody_else(turn: Arena) -> None:
    cur = turn.game.current
    assert cur is not None
    other = "bob" if cur == "alice" else "alice"
    mark = turn.watcher.mark()
    sender = turn.teams[other]
    sender.fire(cur, 0, 0, turn=turn.game.turn)  # not other's turn
    report = sender.conn.wait(lambda m: m.topic == f"{turn.P}/players/{other}/error")  # other reads it
    assert not report.retain and report.json()["code"] == "not_current_player"
    turn.report(f"/players/{other}/error", mark)
    turn.sync()
    assert not turn.watcher.on(f"{turn.P}/players/{cur}/error", after=mark)
    # a signature nobody's key opens: public, on /game/errors
    forged = crypto.sign(crypto.derive_team_key(cur, "guessed"), {"x": 1, "y": 1})
    turn.watcher.publish(f"{turn.P}/players/{other}/fire", json.dumps(forged))
    assert turn.report("/game/errors", mark).json()["code"] == "bad_signature"


def test_garbage_on_every_inbound_topic_then_the_game_still_plays(turn: Arena) -> None:
    garbage: list[bytes] = [b"", b"\x00" * 10, b"{}", b"null", b'{"data":null,"signature":""}', b"9" * 5000]
    topics = [
        "/game/request_participation",
        "/players/alice/ships/carrier/place",
        "/players/bob/fire",
        "/players/alice/fire",
        "/players/x/ships/y/place",
        "/players/ /fire",
    ]
    before = turn.game.snapshot()
    mark = turn.watcher.mark()
    for topic in topics:
        for payload in garbage:
            turn.watcher.publish(f"{turn.P}{topic}", payload)
    expected = len(topics) * len(garbage)

    def reports() -> list[Msg]:
        return [m for m in turn.watcher.since(mark) if m.topic.endswith(("/error", "/errors"))]

    wait_until(lambda: len(reports()) >= expected, what=f"{expected} error reports")
    assert len(reports()) == expected and not any(m.retain for m in reports())
    assert all(m.json()["code"] for m in reports())
    assert turn.game.snapshot() == before
    cur = turn.game.current
    assert cur is not None
    other = "bob" if cur == "alice" else "alice"
    for x in range(turn.game.allowed):
        turn.teams[cur].fire(other, x, 9, turn=turn.game.turn)
    turn.watcher.wait(lambda m: m.topic == f"{turn.P}/game/salvo", after=mark)


# -- protocol v2.1 through the shipped broker configuration ----------------------------------


def test_v21_a_refusal_names_its_shot_to_its_sender_and_hits_carry_the_game(turn: Arena, broker: Mosquitto) -> None:
    """Through mosquitto's ACL: bob's shot out of turn is refused on bob's
    own error topic, naming the shot (its signature's start, its cell), and
    nowhere else; alice's hit on bob carries the game; /game/version is
    readable by anybody."""
    cur = turn.game.current
    assert cur is not None
    other = next(n for n in turn.teams if n != cur)
    shooter, target = turn.teams[other], turn.teams[cur]
    game_id, number = turn.game.game_id, turn.game.turn
    before = turn.game.snapshot()
    mark, mine, theirs = turn.watcher.mark(), shooter.conn.mark(), target.conn.mark()
    sent = json.loads(shooter.fire(cur, 3, 4, number, game_id))
    report = shooter.conn.wait(lambda m: m.topic == f"{turn.P}/players/{other}/error", after=mine).json()
    assert report == {
        "topic": f"{turn.P}/players/{cur}/fire",
        "error": f"not your turn: it is {cur}'s",
        "code": "not_current_player",
        "signature": sent["signature"][:16],
        "shot": {"target": cur, "x": 3, "y": 4},
    }
    # a refusal changes nothing but the spent nonce
    after = turn.game.snapshot()
    assert {k: v for k, v in after.items() if k != "players"} == {k: v for k, v in before.items() if k != "players"}
    target.fire(other, 0, 9, number, game_id)
    hit = shooter.conn.wait(lambda m: m.topic == f"{turn.P}/players/{other}/hit", after=mine).json()
    assert hit == {"x": 0, "y": 9, "turn": number, "shot": 1, "game": game_id}
    turn.sync()
    assert not [m for m in target.conn.since(theirs) if m.topic.endswith("/error")]
    assert not [m for m in turn.watcher.since(mark) if m.topic == f"{turn.P}/game/errors"]
    anyone = Recorder(broker, None, [f"{turn.P}/game/version"])
    try:
        assert anyone.wait_for(f"{turn.P}/game/version", "2.1").retain
    finally:
        anyone.close()


def test_v21_a_join_for_another_game_joins_nobody(lobby: Arena, make_team: TeamFactory) -> None:
    carol = make_team("carol")
    mark = lobby.watcher.mark()
    carol.conn.publish(
        f"{lobby.P}/game/request_participation",
        json.dumps({"name": "carol", "secret": carol.secret, "request_id": "carol-1", "game": "0" * 16}),
    )
    report = lobby.report("/game/errors", mark, request_id="carol-1").json()
    assert report["code"] == "wrong_game" and "'0000000000000000'" in report["error"]
    lobby.sync()
    assert not [m for m in lobby.watcher.since(mark) if m.topic.endswith(("/players/list", "/players/count"))]
    assert "carol" not in lobby.game.players
