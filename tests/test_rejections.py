"""Bad input of every kind, through the protocol layer without a broker: each
gets one report with its code on the right error topic, and changes nothing
(an authentic but rejected fire leaves only its spent nonce). The routing of
these reports through a real mosquitto is in test_referee_rejections.py."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from nacl.public import PrivateKey

from salvo.game.events import Burn
from salvo.spec import crypto
from salvo.spec.payloads import Publish

from kit import COLUMNS, ROWS, ArenaDriver, all_cells, without_spent

NAME = r"[A-Za-z0-9_-]{1,32}"
FLEETS = {"alice": ROWS, "bob": COLUMNS}


def rejects(
    d: ArenaDriver, send: Callable[[], list[Publish]], where: str, code: str, *fragments: str
) -> dict[str, Any]:
    """``send`` must publish exactly one report, on ``where``, with ``code``;
    the game must be as before."""
    before = without_spent(d.game.snapshot())
    out = send()
    assert [p.topic for p in out] == [where], out
    assert not out[0].retain
    report: dict[str, Any] = json.loads(out[0].payload)
    assert set(report) - {"request_id", "signature", "shot"} == {"topic", "error", "code"}, report
    if d.inbound[-1].endswith("/fire"):
        public = out[0].topic == d.game.topics.errors
        assert names_its_shot(d.inbound[-1], d.payloads[-1], report, public), report
    assert report["topic"] == d.inbound[-1] and report["code"] == code, report  # names what it answers
    for fragment in fragments:
        assert fragment in report["error"], report
    assert without_spent(d.game.snapshot()) == before, "a rejected message changed the game"
    return report


def names_its_shot(topic: str, payload: bytes, report: dict[str, Any], public: bool) -> bool:
    """(v2.1) A fire refusal sent to its sender echoes the first 16
    characters of the signature and, when its data has integer x and y, the
    shot (the topic's target and those x, y); a public one (no key vouches
    for the message: anyone could name any cell) and anything else neither."""
    if public:
        return "signature" not in report and "shot" not in report
    try:
        sent = json.loads(payload)
    except (ValueError, RecursionError):  # not UTF-8 JSON, or nested too deep
        sent = None
    data = sent.get("data", sent.get("payload")) if isinstance(sent, dict) else None
    signature = sent.get("signature") if isinstance(sent, dict) else None
    if data is None or not isinstance(signature, str):
        return "signature" not in report and "shot" not in report
    shot, target = None, topic.split("/")[-2]
    if isinstance(data, dict) and all(type(data.get(k)) is int for k in "xy") and re.fullmatch(NAME, target):
        shot = {"target": target, "x": data["x"], "y": data["y"]}
    return report["signature"] == signature[:16] and report.get("shot") == shot


@pytest.fixture
def lobby() -> ArenaDriver:
    d = ArenaDriver(max_players=3, turn_timeout=20)
    d.join("alice")
    d.join("bob")
    return d


@pytest.fixture
def turn(lobby: ArenaDriver) -> ArenaDriver:
    lobby.place("alice", ROWS)
    lobby.place("bob", COLUMNS)
    lobby.records.clear()
    return lobby


def current_and_other(d: ArenaDriver) -> tuple[str, str]:
    cur = d.game.current
    assert cur is not None
    return cur, "bob" if cur == "alice" else "alice"


def join_raw(d: ArenaDriver, payload: str | bytes) -> Callable[[], list[Publish]]:
    return lambda: d.send(d.t.request_participation, payload)


# -- join -------------------------------------------------------------------------------


def test_oversized_join(lobby: ArenaDriver) -> None:
    big = json.dumps({"name": "carol", "secret": "x" * 4100})
    rejects(lobby, join_raw(lobby, big), lobby.t.errors, "too_large", "too large")


def test_non_utf8_join(lobby: ArenaDriver) -> None:
    rejects(lobby, join_raw(lobby, b'{"name": "\xff\xfe"}'), lobby.t.errors, "malformed", "not UTF-8")


@pytest.mark.parametrize(
    "payload", ['{"name": "carol", "secret": ', "[1, 2", '{"name":"carol","name":"x","secret":"s"}', '{"name": NaN}']
)
def test_invalid_json_join(lobby: ArenaDriver, payload: str) -> None:
    rejects(lobby, join_raw(lobby, payload), lobby.t.errors, "malformed", "JSON")


@pytest.mark.parametrize("escape", ["\\ud800", "\\uDFFF", "\\ud800\\u0041"])
def test_half_a_surrogate_pair_is_malformed_not_a_crash(lobby: ArenaDriver, escape: str) -> None:
    """Valid JSON, but no text: it once crashed the referee at every redelivery."""
    payload = '{"name": "carol", "secret": "s' + escape + '"}'
    rejects(lobby, join_raw(lobby, payload), lobby.t.errors, "malformed", "surrogate")


def test_neither_json_nor_sealed_join(lobby: ArenaDriver) -> None:
    rejects(lobby, join_raw(lobby, "hello referee"), lobby.t.errors, "malformed", "neither JSON nor a sealed box")


def test_wrong_types_in_join_never_echo_the_secret(lobby: ArenaDriver) -> None:
    rejects(lobby, join_raw(lobby, '{"name": 5, "secret": "s"}'), lobby.t.errors, "malformed", "name")
    report = rejects(lobby, join_raw(lobby, '{"name": "carol", "secret": 5}'), lobby.t.errors, "malformed", "secret")
    assert "5" not in report["error"].replace("secret", "")
    rejects(lobby, join_raw(lobby, '["carol", "s"]'), lobby.t.errors, "malformed", "name")


@pytest.mark.parametrize(
    "name", ["a/b", "a+b", "a#b", "$SYS", "a b", "", "nul\u0000", "é", "x" * 33, "players", "../x"]
)
def test_names_that_cannot_be_topic_levels(lobby: ArenaDriver, name: str) -> None:
    payload = json.dumps({"name": name, "secret": "s", "request_id": "r"})
    report = rejects(lobby, join_raw(lobby, payload), lobby.t.errors, "bad_name", "team name")
    assert report["topic"] == lobby.t.request_participation and report["request_id"] == "r"


def test_sealed_join_for_another_referee_key(lobby: ArenaDriver) -> None:
    other = crypto.public_key_b64(PrivateKey.generate())
    sealed = crypto.seal_to(other, json.dumps({"name": "carol", "secret": "carol-secret"}))
    rejects(lobby, join_raw(lobby, sealed), lobby.t.errors, "cannot_decrypt", "/game/pubkey")


def test_name_taken_goes_to_game_errors_not_to_the_team(lobby: ArenaDriver) -> None:
    report = rejects(
        lobby, lambda: lobby.join("alice", "another-secret", "imp"), lobby.t.errors, "name_taken", "name taken"
    )
    assert report["request_id"] == "imp" and "another-secret" not in json.dumps(report)


def test_repeat_join_is_a_noop(lobby: ArenaDriver) -> None:
    before = lobby.game.snapshot()
    assert lobby.join("alice") == []
    sealed = crypto.seal_to(lobby.arena.pubkey, json.dumps({"name": "bob", "secret": "bob-secret"}))
    assert lobby.send(lobby.t.request_participation, sealed) == []
    assert lobby.game.snapshot() == before


def test_full_lobby(lobby: ArenaDriver) -> None:
    lobby.join("carol")
    rejects(lobby, lambda: lobby.join("dave"), lobby.t.errors, "lobby_full", "lobby full")


def test_join_outside_the_lobby(turn: ArenaDriver) -> None:
    rejects(turn, lambda: turn.join("carol"), turn.t.errors, "game_in_progress", "game in progress")
    rejects(turn, lambda: turn.join("alice"), turn.t.errors, "game_in_progress")


# -- placement ------------------------------------------------------------------------


def place_raw(d: ArenaDriver, name: str, ship: str, payload: str) -> Callable[[], list[Publish]]:
    return lambda: d.send(d.t.place(name, ship), payload)


PLACEMENT = '{"coordinates":"0;0","orientation":"VERTICAL"}'


def test_oversized_placement(lobby: ArenaDriver) -> None:
    where = lobby.t.ship_error("alice", "carrier")
    rejects(lobby, place_raw(lobby, "alice", "carrier", "A" * 5000), where, "too_large", "too large")


def test_placement_not_base64(lobby: ArenaDriver) -> None:
    where = lobby.t.ship_error("alice", "carrier")
    rejects(lobby, place_raw(lobby, "alice", "carrier", PLACEMENT), where, "malformed", "base64")


def test_placement_with_the_wrong_secret(lobby: ArenaDriver) -> None:
    wrong = crypto.seal(crypto.derive_team_key("alice", "not-alices-secret"), PLACEMENT)
    where = lobby.t.ship_error("alice", "carrier")
    rejects(lobby, place_raw(lobby, "alice", "carrier", wrong), where, "cannot_decrypt", "does not open")
    assert lobby.game.retained[lobby.t.approved("alice", "carrier")] == "false"


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
def test_malformed_placement_plaintext(lobby: ArenaDriver, plaintext: str, fragment: str) -> None:
    sealed = crypto.seal(lobby.key("alice"), plaintext)
    where = lobby.t.ship_error("alice", "carrier")
    rejects(lobby, place_raw(lobby, "alice", "carrier", sealed), where, "malformed", fragment)


def test_unknown_ship(lobby: ArenaDriver) -> None:
    sealed = crypto.seal(lobby.key("alice"), PLACEMENT)
    where = lobby.t.ship_error("alice", "canoe")
    rejects(lobby, place_raw(lobby, "alice", "canoe", sealed), where, "unknown_ship", "unknown ship")
    # a ship level that is no plain name is not echoed into a topic
    where = lobby.t.player_error("alice")
    rejects(lobby, place_raw(lobby, "alice", "ca noe", sealed), where, "unknown_ship", "unknown ship")


def test_off_board_and_overlap_placements(lobby: ArenaDriver) -> None:
    key = lobby.key("alice")
    off = crypto.seal(key, '{"coordinates":{"x":6,"y":0},"orientation":"horizontal"}')
    where = lobby.t.ship_error("alice", "carrier")
    rejects(lobby, place_raw(lobby, "alice", "carrier", off), where, "off_board", "off the board")
    lobby.place("alice", {"carrier": ROWS["carrier"]})
    overlap = crypto.seal(key, '{"coordinates":"2;0","Orientation":"VERTICAL"}')
    where = lobby.t.ship_error("alice", "destroyer")
    report = rejects(lobby, place_raw(lobby, "alice", "destroyer", overlap), where, "overlap", "overlap", "carrier")
    assert "0;0" not in report["error"]


def test_placement_by_someone_who_did_not_join(lobby: ArenaDriver) -> None:
    sealed = crypto.seal(crypto.derive_team_key("carol", "c"), PLACEMENT)
    where = lobby.t.ship_error("carol", "carrier")
    rejects(lobby, place_raw(lobby, "carol", "carrier", sealed), where, "not_joined", "not a joined player")
    rejects(lobby, place_raw(lobby, "car$ol", "carrier", sealed), lobby.t.errors, "bad_name", "team name")


def test_placement_outside_the_lobby(turn: ArenaDriver) -> None:
    sealed = crypto.seal(turn.key("alice"), PLACEMENT)
    where = turn.t.ship_error("alice", "carrier")
    rejects(turn, place_raw(turn, "alice", "carrier", sealed), where, "not_in_lobby", "not in the lobby")


# -- fire ---------------------------------------------------------------------------------


def fire_raw(d: ArenaDriver, target: str, payload: str | bytes) -> Callable[[], list[Publish]]:
    return lambda: d.send(d.t.fire(target), payload)


def test_fire_outside_a_turn_goes_to_the_sender(lobby: ArenaDriver) -> None:
    rejects(lobby, lambda: lobby.fire("alice", "bob", 0, 0), lobby.t.player_error("alice"), "not_in_turn")


def test_oversized_and_invalid_fire_cannot_be_attributed(turn: ArenaDriver) -> None:
    err = turn.t.errors
    rejects(turn, fire_raw(turn, "bob", "x" * 4097), err, "too_large", "too large")
    rejects(turn, fire_raw(turn, "bob", b"\xc3\x28"), err, "malformed", "not UTF-8")
    rejects(turn, fire_raw(turn, "bob", '{"data": {"x": 1, "y": 1}}'), err, "malformed", "signature")
    rejects(turn, fire_raw(turn, "bob", '{"data": {"x": 1}, "signature": "!!"}'), err, "malformed", "base64")
    rejects(turn, fire_raw(turn, "bob", "[" * 3000), err, "malformed", "nested")


def test_fire_with_wrong_data_types_goes_to_the_sender(turn: ArenaDriver) -> None:
    cur, other = current_and_other(turn)
    bound = {"x": 1, "y": 1, "target": other, "turn": 1, "game": turn.game.game_id}
    for change in ({"x": "1"}, {"x": True}, {"x": 1.5}, {"turn": "1"}, {"target": 5}, {"game": None}):
        msg = crypto.sign(turn.key(cur), {**bound, **change})
        rejects(turn, fire_raw(turn, other, json.dumps(msg)), turn.t.player_error(cur), "malformed", "fire data")


def test_forged_and_swapped_signatures(turn: ArenaDriver) -> None:
    cur, other = current_and_other(turn)
    data = {"x": 1, "y": 1, "target": other, "turn": 1, "game": turn.game.game_id}
    forged = crypto.sign(crypto.derive_team_key(cur, "guessed"), data)
    rejects(turn, fire_raw(turn, other, json.dumps(forged)), turn.t.errors, "bad_signature", "does not open")
    swapped = crypto.sign(turn.key(cur), data)
    swapped["data"] = {**data, "x": 2}
    where = turn.t.player_error(cur)
    rejects(turn, fire_raw(turn, other, json.dumps(swapped)), where, "bad_signature", "does not match")


def test_fire_out_of_turn_by_the_other_player(turn: ArenaDriver) -> None:
    cur, other = current_and_other(turn)
    where = turn.t.player_error(other)
    rejects(turn, lambda: turn.fire(other, cur, 0, 0), where, "not_current_player", "not your turn")


def test_a_shot_delivered_again_in_any_spelling_is_not_a_second_shot(turn: ArenaDriver) -> None:
    cur, other = current_and_other(turn)
    msg = json.loads(turn.signed_fire(cur, other, 9, 9))
    assert [p.topic for p in turn.send(turn.t.fire(other), json.dumps(msg))] == [turn.t.hit(other)]
    fired = turn.game.fired
    assert turn.send(turn.t.fire(other), json.dumps(msg)) == []
    # the same nonce spelt as an alias ("payload") is the same signature
    alias = {"payload": msg["data"], "signature": msg["signature"]}
    assert turn.send(turn.t.fire(other), json.dumps(alias)) == []
    assert turn.game.fired == fired


def test_fire_off_the_board_wrong_turn_and_unknown_target(turn: ArenaDriver) -> None:
    cur, other = current_and_other(turn)
    err = turn.t.player_error(cur)
    rejects(turn, lambda: turn.fire(cur, other, 10, 0), err, "off_board", "off the board")
    rejects(turn, lambda: turn.fire(cur, other, 0, -1), err, "off_board")
    rejects(turn, lambda: turn.fire(cur, other, 0, 0, turn=7), err, "wrong_turn", "wrong turn")
    rejects(turn, lambda: turn.fire(cur, "zed", 0, 0), err, "unknown_target", "unknown target")
    rejects(turn, lambda: turn.fire(cur, "z z", 0, 0), err, "bad_name", "target name")


def test_every_rejected_authentic_signature_is_journaled_as_spent(turn: ArenaDriver) -> None:
    cur, other = current_and_other(turn)
    turn.fire(cur, other, 10, 0)
    turn.fire(other, cur, 0, 0)
    burns = [r for r in turn.records if isinstance(r, Burn)]
    assert burns == turn.records and [b.player for b in burns] == [cur, other]


def test_fire_at_a_defeated_player() -> None:
    d = ArenaDriver(turn_timeout=20)
    d.start({"alice": ROWS, "bob": COLUMNS, "carol": ROWS})
    todo = all_cells(ROWS)
    while not d.game.players["carol"].defeated:
        cur = d.game.current
        assert cur is not None
        target = "carol" if cur != "carol" else "alice"
        for _ in range(d.game.allowed):
            x, y = todo.pop() if target == "carol" and todo else (9, 9)  # (9,9) is empty in ROWS
            d.fire(cur, target, x, y)
    cur = d.game.current
    assert cur is not None and cur != "carol"
    rejects(d, lambda: d.fire(cur, "carol", 0, 0), d.t.player_error(cur), "defeated_target", "already defeated")


# -- anything else -------------------------------------------------------------------------


def test_garbage_on_every_inbound_topic_then_the_game_still_plays(turn: ArenaDriver) -> None:
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
        turn.t.request_participation,
        turn.t.place("alice", "carrier"),
        turn.t.fire("bob"),
        turn.t.fire("alice"),
        turn.t.place("x", "y"),
        "/players/ /fire",
    ]
    before = turn.game.snapshot()
    for topic in topics:
        for payload in garbage:
            out = turn.send(topic, payload)
            assert len(out) == 1 and json.loads(out[0].payload)["code"]
    assert turn.game.snapshot() == before and turn.records == []
    cur, other = current_and_other(turn)
    out = []
    for x in range(turn.game.allowed):
        out += turn.fire(cur, other, x, 9)
    assert turn.t.salvo in [p.topic for p in out]
