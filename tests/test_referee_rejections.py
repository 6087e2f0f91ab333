"""Bad input of every kind, through the real referee on a real mosquitto: each
gets a readable reason on the right error topic and changes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from salvo import crypto
from salvo.engine import Game
from salvo.referee import Referee

from kit import COLUMNS, ROWS, all_cells
from mqttkit import Recorder, Team

pytestmark = pytest.mark.mqtt


@dataclass
class Arena:
    P: str
    ref: Referee
    watcher: Recorder
    teams: dict[str, Team]

    @property
    def game(self) -> Game:
        return self.ref.runners[0].arena.game

    def rejects(
        self, send: Callable[[], object], error_topic: str, *fragments: str, kind: str | None = None
    ) -> dict[str, Any]:
        """Run ``send``; expect one error report on ``error_topic``; the game
        state must be exactly as before."""
        before = self.game.snapshot()
        mark = self.watcher.mark()
        send()
        report = self.watcher.wait(lambda m: m.topic == f"{self.P}{error_topic}", after=mark).json()
        assert set(report) == {"topic", "error", "kind"}
        for fragment in fragments:
            assert fragment in report["error"], report
        if kind:
            assert report["kind"] == kind, report
        assert self.game.snapshot() == before, "a rejected message changed the game"
        return report

    def raw(self, topic: str, payload: bytes | str) -> Callable[[], object]:
        return lambda: self.watcher.publish(f"{self.P}{topic}", payload)


@pytest.fixture
def lobby(start_referee: Any, make_team: Any, watcher: Recorder, prefix: str) -> Iterator[Arena]:
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


def current_and_other(a: Arena) -> tuple[Team, Team]:
    cur = a.game.current
    assert cur is not None
    return a.teams[cur], a.teams["bob" if cur == "alice" else "alice"]


# -- join --------------------------------------------------------------------------


def test_oversized_join(lobby: Arena) -> None:
    big = json.dumps({"name": "carol", "secret": "x" * 4100})
    lobby.rejects(lobby.raw("/game/request_participation", big), "/game/errors", "too large", kind="malformed")


def test_non_utf8_join(lobby: Arena) -> None:
    lobby.rejects(lobby.raw("/game/request_participation", b'{"name": "\xff\xfe"}'), "/game/errors", "not UTF-8")


@pytest.mark.parametrize(
    "payload", ['{"name": "carol", "secret": ', "[1, 2", '{"name":"carol","name":"x","secret":"s"}', '{"name": NaN}']
)
def test_invalid_json_join(lobby: Arena, payload: str) -> None:
    lobby.rejects(lobby.raw("/game/request_participation", payload), "/game/errors", "JSON", kind="malformed")


def test_neither_json_nor_sealed_join(lobby: Arena) -> None:
    lobby.rejects(
        lobby.raw("/game/request_participation", "hello referee"),
        "/game/errors",
        "neither JSON nor a sealed box",
        kind="malformed",
    )


def test_wrong_types_in_join(lobby: Arena) -> None:
    lobby.rejects(lobby.raw("/game/request_participation", '{"name": 5, "secret": "s"}'), "/game/errors", "name")
    report = lobby.rejects(
        lobby.raw("/game/request_participation", '{"name": "carol", "secret": 5}'),
        "/players/carol/error",
        "secret",
        kind="malformed",
    )
    assert "5" not in report["error"].replace("secret", "")
    lobby.rejects(lobby.raw("/game/request_participation", '["carol", "s"]'), "/game/errors", "name")


@pytest.mark.parametrize(
    "name", ["a/b", "a+b", "a#b", "$SYS", "a b", "", "nul\u0000", "é", "x" * 33, "players", "../x"]
)
def test_names_that_cannot_be_topic_levels(lobby: Arena, name: str) -> None:
    payload = json.dumps({"name": name, "secret": "s"})
    report = lobby.rejects(
        lobby.raw("/game/request_participation", payload), "/game/errors", "team name", kind="malformed"
    )
    assert report["topic"] == f"{lobby.P}/game/request_participation"


def test_sealed_join_for_another_referee_key(lobby: Arena) -> None:
    from nacl.public import PrivateKey

    other = crypto.public_key_b64(PrivateKey.generate())
    sealed = crypto.seal_to(other, json.dumps({"name": "carol", "secret": "carol-secret"}))
    lobby.rejects(lobby.raw("/game/request_participation", sealed), "/game/errors", "/game/pubkey")


def test_name_taken(lobby: Arena, make_team: Any) -> None:
    impostor = make_team("alice", secret="another-secret", login="mallory")
    lobby.rejects(impostor.join, "/players/alice/error", "name taken", kind="illegal")


def test_repeat_join_is_a_noop(lobby: Arena) -> None:
    before = lobby.game.snapshot()
    mark = lobby.watcher.mark()
    lobby.teams["alice"].join()
    lobby.teams["bob"].join(sealed=True)
    # Both repeat joins were handled (a third, new join proves the order) and changed nothing.
    lobby.watcher.publish(f"{lobby.P}/game/request_participation", json.dumps({"name": "carol", "secret": "c"}))
    lobby.watcher.wait_for(f"{lobby.P}/players/count", "3", after=mark)
    assert not lobby.watcher.on(f"{lobby.P}/players/alice/error", after=mark)
    assert [m.text for m in lobby.watcher.on(f"{lobby.P}/players/list", after=mark)] == ['["alice","bob","carol"]']
    assert before["players"].keys() <= lobby.game.snapshot()["players"].keys()


def test_full_lobby(lobby: Arena, make_team: Any) -> None:
    make_team("carol").join()
    lobby.watcher.wait_for(f"{lobby.P}/players/count", "3")
    lobby.rejects(make_team("dave").join, "/players/dave/error", "lobby full", kind="illegal")


def test_join_outside_the_lobby(turn: Arena, make_team: Any) -> None:
    turn.rejects(make_team("carol").join, "/players/carol/error", "game in progress", kind="illegal")
    turn.rejects(turn.teams["alice"].join, "/players/alice/error", "game in progress")


# -- placement ------------------------------------------------------------------------


def test_oversized_placement(lobby: Arena) -> None:
    lobby.rejects(
        lobby.raw("/players/alice/ships/carrier/place", "A" * 5000), "/players/alice/ships/carrier/error", "too large"
    )


def test_placement_not_base64(lobby: Arena) -> None:
    lobby.rejects(
        lobby.raw("/players/alice/ships/carrier/place", '{"coordinates":"0;0","orientation":"VERTICAL"}'),
        "/players/alice/ships/carrier/error",
        "base64",
        kind="malformed",
    )


def test_placement_with_the_wrong_secret(lobby: Arena) -> None:
    wrong = crypto.seal(
        crypto.derive_team_key("alice", "not-alices-secret"), '{"coordinates":"0;0","orientation":"VERTICAL"}'
    )
    lobby.rejects(
        lobby.raw("/players/alice/ships/carrier/place", wrong),
        "/players/alice/ships/carrier/error",
        "does not open",
        kind="illegal",
    )
    assert lobby.watcher.latest(f"{lobby.P}/players/alice/ships/carrier/approved").text == "false"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("plaintext", "fragment"),
    [
        ('{"coordinates":"0;0"}', "orientation"),
        ('{"coordinates":"0,0","orientation":"VERTICAL"}', "coordinates"),
        ('{"coordinates":{"x":"0","y":0},"orientation":"VERTICAL"}', "coordinates"),
        ('{"coordinates":"0;0","orientation":"DIAGONAL"}', "HORIZONTAL or VERTICAL"),
        ('{"coordinates":"0;0","orientation":"VERTICAL","Orientation":"HORIZONTAL"}', "both"),
        ("not json", "JSON"),
    ],
)
def test_malformed_placement_plaintext(lobby: Arena, plaintext: str, fragment: str) -> None:
    sealed = crypto.seal(lobby.teams["alice"].key, plaintext)
    lobby.rejects(
        lobby.raw("/players/alice/ships/carrier/place", sealed),
        "/players/alice/ships/carrier/error",
        fragment,
        kind="malformed",
    )


def test_unknown_ship(lobby: Arena) -> None:
    sealed = crypto.seal(lobby.teams["alice"].key, '{"coordinates":"0;0","orientation":"VERTICAL"}')
    lobby.rejects(
        lobby.raw("/players/alice/ships/canoe/place", sealed),
        "/players/alice/ships/canoe/error",
        "unknown ship",
        kind="illegal",
    )
    # a ship level that is no plain name is not echoed into a topic
    lobby.rejects(lobby.raw("/players/alice/ships/ca noe/place", sealed), "/players/alice/error", "unknown ship")


def test_off_board_and_overlap_placements(lobby: Arena) -> None:
    alice = lobby.teams["alice"]
    lobby.rejects(
        lambda: alice.rec.publish(
            f"{lobby.P}/players/alice/ships/carrier/place",
            crypto.seal(alice.key, '{"coordinates":{"x":6,"y":0},"orientation":"horizontal"}'),
        ),
        "/players/alice/ships/carrier/error",
        "off the board",
        kind="illegal",
    )
    alice.place("carrier", ROWS["carrier"])
    lobby.watcher.wait_for(f"{lobby.P}/players/alice/ships/carrier/approved", "true")
    report = lobby.rejects(
        lambda: alice.rec.publish(
            f"{lobby.P}/players/alice/ships/destroyer/place",
            crypto.seal(alice.key, '{"coordinates":"2;0","Orientation":"VERTICAL"}'),
        ),
        "/players/alice/ships/destroyer/error",
        "overlap",
        "carrier",
    )
    assert "0;0" not in report["error"]


def test_placement_by_someone_who_did_not_join(lobby: Arena) -> None:
    sealed = crypto.seal(crypto.derive_team_key("carol", "c"), '{"coordinates":"0;0","orientation":"VERTICAL"}')
    lobby.rejects(
        lobby.raw("/players/carol/ships/carrier/place", sealed),
        "/players/carol/ships/carrier/error",
        "not a joined player",
    )
    lobby.rejects(lobby.raw("/players/car$ol/ships/carrier/place", sealed), "/game/errors", "team name")


def test_placement_outside_the_lobby(turn: Arena) -> None:
    turn.rejects(
        lambda: turn.teams["alice"].place("carrier", COLUMNS["carrier"]),
        "/players/alice/ships/carrier/error",
        "not in the lobby",
    )


# -- fire ---------------------------------------------------------------------------------


def test_fire_outside_a_turn(lobby: Arena) -> None:
    lobby.rejects(lambda: lobby.teams["alice"].fire("bob", 0, 0), "/game/errors", "not in a turn", kind="illegal")


def test_oversized_and_invalid_fire(turn: Arena) -> None:
    cur, _ = current_and_other(turn)
    err = f"/players/{cur.name}/error"
    turn.rejects(turn.raw("/players/bob/fire", "x" * 4097), err, "too large", kind="malformed")
    turn.rejects(turn.raw("/players/bob/fire", b"\xc3\x28"), err, "not UTF-8")
    turn.rejects(turn.raw("/players/bob/fire", '{"data": {"x": 1, "y": 1}}'), err, "signature", kind="malformed")
    turn.rejects(turn.raw("/players/bob/fire", '{"data": {"x": 1}, "signature": "!!"}'), err, "base64")
    turn.rejects(turn.raw("/players/bob/fire", "[" * 3000), err, "nested")


def test_fire_with_wrong_data_types(turn: Arena) -> None:
    cur, other = current_and_other(turn)
    for data in ({"x": "1", "y": 1}, {"x": True, "y": 1}, {"x": 1.5, "y": 1}, {"y": 1}, {"x": 1, "y": 1, "turn": "1"}):
        msg = crypto.sign(cur.key, data)
        turn.rejects(
            turn.raw(f"/players/{other.name}/fire", json.dumps(msg)),
            f"/players/{cur.name}/error",
            "fire data",
            kind="malformed",
        )


def test_forged_signature(turn: Arena) -> None:
    cur, _ = current_and_other(turn)
    forged = crypto.sign(crypto.derive_team_key(cur.name, "guessed"), {"x": 1, "y": 1})
    turn.rejects(
        turn.raw("/players/bob/fire", json.dumps(forged)), f"/players/{cur.name}/error", "does not open", kind="illegal"
    )
    swapped = crypto.sign(cur.key, {"x": 1, "y": 1})
    swapped["data"] = {"x": 2, "y": 1}
    turn.rejects(turn.raw("/players/bob/fire", json.dumps(swapped)), f"/players/{cur.name}/error", "does not match")


def test_fire_out_of_turn_by_the_other_player(turn: Arena) -> None:
    cur, other = current_and_other(turn)
    turn.rejects(lambda: other.fire(cur.name, 0, 0), f"/players/{cur.name}/error", "does not open")


def test_replayed_fire(turn: Arena) -> None:
    cur, other = current_and_other(turn)
    msg = cur.fire(other.name, 9, 9)
    turn.watcher.wait_for(f"{turn.P}/players/{other.name}/hit")
    turn.rejects(turn.raw(f"/players/{other.name}/fire", json.dumps(msg)), f"/players/{cur.name}/error", "replayed")
    # the same nonce spelt as an alias ("payload") is still a replay
    alias = {"payload": msg["data"], "signature": msg["signature"]}
    turn.rejects(turn.raw(f"/players/{other.name}/fire", json.dumps(alias)), f"/players/{cur.name}/error", "replayed")


def test_fire_off_the_board_wrong_turn_and_unknown_target(turn: Arena) -> None:
    cur, other = current_and_other(turn)
    err = f"/players/{cur.name}/error"
    turn.rejects(lambda: cur.fire(other.name, 10, 0), err, "off the board", kind="illegal")
    turn.rejects(lambda: cur.fire(other.name, 0, -1), err, "off the board")
    turn.rejects(lambda: cur.fire(other.name, 0, 0, turn=7), err, "wrong turn")
    turn.rejects(lambda: cur.fire("zed", 0, 0), err, "unknown target")
    turn.rejects(lambda: cur.fire("z z", 0, 0), err, "target name", kind="malformed")


def test_fire_at_a_defeated_player(start_referee: Any, make_team: Any, watcher: Recorder, prefix: str) -> None:
    ref = start_referee(turn_timeout=20)
    P = f"/{prefix}"
    fleets = {"alice": ROWS, "bob": COLUMNS, "carol": ROWS}
    teams = {n: make_team(n) for n in fleets}
    for t in teams.values():
        t.join()
    watcher.wait_for(f"{P}/players/count", "3")
    for n, t in teams.items():
        t.place_fleet(fleets[n])
    game = ref.runners[0].arena.game
    victim = "carol"
    todo = all_cells(ROWS)
    turn_no = 1
    while not watcher.on(f"{P}/players/{victim}/defeated"):
        info = watcher.wait(lambda m, n=turn_no: m.topic == f"{P}/game/turn" and m.json()["turn"] == n).json()
        shooter, shots = info["player"], info["shots"]
        target = victim if shooter != victim else "alice"
        cells = [todo.pop(0) for _ in range(min(shots, len(todo)))] if target == victim else []
        cells += [(9, 9)] * (shots - len(cells))  # (9,9) is empty in ROWS
        for x, y in cells:
            teams[shooter].fire(target, x, y)
        turn_no += 1
        # the next turn is announced after any defeat of this salvo
        watcher.wait(lambda m, n=turn_no: m.topic == f"{P}/game/turn" and m.json()["turn"] == n)
    watcher.wait(lambda m: m.topic == f"{P}/game/current", after=watcher.mark() - 1)
    cur = game.current
    assert cur is not None and cur != victim
    before = game.snapshot()
    mark = watcher.mark()
    teams[cur].fire(victim, 0, 0)
    report = watcher.wait_for(f"{P}/players/{cur}/error", after=mark).json()
    assert "already defeated" in report["error"] and report["kind"] == "illegal"
    assert game.snapshot() == before


# -- anything else -------------------------------------------------------------------------


def test_garbage_on_every_inbound_topic_then_the_game_still_plays(turn: Arena) -> None:
    garbage: list[bytes] = [
        b"",
        b"\x00" * 10,
        b"\xff" * 100,
        b"{}",
        b"null",
        b"[]",
        b'{"data":null,"signature":""}',
        b"9" * 5000,
        "💥".encode() * 10,
    ]
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
    errors = {"/game/errors", f"/players/{turn.game.current}/error"}
    expected = len(topics) * len(garbage)

    def reports() -> int:
        return sum(1 for m in turn.watcher.messages[mark:] if m.topic.endswith(("/error", "/errors")))

    from mqttkit import wait_until

    wait_until(lambda: reports() >= expected, what=f"{expected} error reports")
    assert reports() == expected
    assert errors
    assert turn.game.snapshot() == before
    cur, other = current_and_other(turn)
    for x in range(turn.game.allowed):
        cur.fire(other.name, x, 9)
    turn.watcher.wait(lambda m: m.topic == f"{turn.P}/game/salvo", after=mark)
