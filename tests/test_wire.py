"""Wire models: inbound parsing (aliases, strictness, no echo of input) and
agreement between every payload the engine publishes and its model."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import BaseModel

from salvo.spec import payloads, wire
from salvo.spec.codec import error_report
from salvo.spec.errors import Code, Malformed
from salvo.spec.payloads import Publish
from salvo.spec.rules import Orientation, Placement
from salvo.spec.topics import Outbound, Published, Topics

from kit import COLUMNS, ROWS, Driver, all_cells


@pytest.mark.parametrize(
    "value",
    [
        {"coordinates": "3;4", "orientation": "VERTICAL"},
        {"coordinates": " 3 ; 4 ", "Orientation": "vertical"},
        {"coordinates": {"x": 3, "y": 4}, "orientation": "Vertical"},
        {"coordinates": "3;4", "orientation": "VERTICAL", "Orientation": "VERTICAL", "extra": 1},
    ],
)
def test_placement_spellings(value: object) -> None:
    assert wire.parse_placement(value) == Placement(3, 4, Orientation.VERTICAL)


def test_negative_and_huge_coordinates_parse_then_fail_on_the_board() -> None:
    assert wire.parse_placement({"coordinates": "-1;99", "orientation": "HORIZONTAL"}) == Placement(
        -1, 99, Orientation.HORIZONTAL
    )
    big = wire.parse_placement({"coordinates": {"x": 10**30, "y": 0}, "orientation": "HORIZONTAL"})
    assert big.x == 10**30


@pytest.mark.parametrize(
    "value",
    [
        {"coordinates": "3;4"},
        {"coordinates": "3;4;5", "orientation": "VERTICAL"},
        {"coordinates": "a;b", "orientation": "VERTICAL"},
        {"coordinates": {"x": 3}, "orientation": "VERTICAL"},
        {"coordinates": {"x": True, "y": 1}, "orientation": "VERTICAL"},
        {"coordinates": [3, 4], "orientation": "VERTICAL"},
        {"coordinates": "3;4", "orientation": 1},
        {"coordinates": "3;4", "orientation": "UP"},
        "3;4",
        None,
    ],
)
def test_malformed_placements(value: object) -> None:
    with pytest.raises(Malformed):
        wire.parse_placement(value)


def test_signed_message_alias_and_conflicts() -> None:
    assert wire.parse_signed({"payload": {"x": 1}, "signature": "s"}).data == {"x": 1}
    with pytest.raises(Malformed, match="both"):
        wire.parse_signed({"payload": {"x": 1}, "data": {"x": 2}, "signature": "s"})
    with pytest.raises(Malformed):
        wire.parse_signed({"data": None, "signature": "s"})
    with pytest.raises(Malformed):
        wire.parse_signed({"data": {"x": 1}, "signature": 5})


def test_fire_data_is_strict_and_bound() -> None:
    bound = {"x": 1, "y": 2, "target": "bob", "turn": 3, "game": "0123456789abcdef"}
    assert wire.parse_fire(bound) == wire.FireData(x=1, y=2, target="bob", turn=3, game="0123456789abcdef")
    for missing in ("target", "turn", "game"):  # v2: all five required
        with pytest.raises(Malformed, match=f"{missing}: Field required"):
            wire.parse_fire({k: v for k, v in bound.items() if k != missing})
    for bad in ({"x": 1.0}, {"x": "1"}, {"y": False}, {"turn": None}, {"target": 5}, {"game": "g" * 65}):
        with pytest.raises(Malformed, match="fire data"):
            wire.parse_fire({**bound, **bad})
    # the v1 form, for --allow-unbound-fire only
    assert wire.parse_unbound_fire({"x": 1, "y": 2}).turn is None
    assert wire.parse_unbound_fire({"x": 1, "y": 2, "turn": None}).turn is None  # null means "not given"


def test_a_joins_request_id_is_echoed_whole_when_valid_cut_when_a_string() -> None:
    assert wire.parse_join({"name": "a", "secret": "s", "request_id": "r-1_A"}).request_id == "r-1_A"
    assert wire.request_id_of({"name": 5, "request_id": "ok"}) == "ok"  # echoed whatever else is wrong
    assert wire.request_id_of({"request_id": "r" * 64}) == "r" * 64
    # (v2.1) an invalid one that is a string: its first 64 characters
    for bad in ("", "x" * 65, "a b", "é", "a/b" * 40):
        assert wire.request_id_of({"request_id": bad}) == bad[:64]
    for other in (5, None, ["a"], {"a": 1}, True):
        assert wire.request_id_of({"request_id": other}) is None
    assert wire.request_id_of(["not", "a", "dict"]) is None
    with pytest.raises(Malformed, match="request_id"):
        wire.parse_join({"name": "a", "secret": "s", "request_id": "a/b"})


def test_join_reasons_never_echo_the_input() -> None:
    secret = "hunter2-very-secret"
    for value in (
        {"name": "a", "secret": {"s": secret}},
        {"name": "a", "secret": [secret]},
        {"name": "a", "secret": secret * 100},
        {"name": "a", "secret": ""},
    ):
        with pytest.raises(Malformed) as info:
            wire.parse_join(value)
        assert "hunter2" not in info.value.reason
        assert "secret" in info.value.reason


MODELS: list[tuple[str, type[BaseModel]]] = [
    (r"/game/deadline", wire.Deadline),
    (r"/game/turn", wire.TurnInfo),
    (r"/game/salvo", wire.SalvoResult),
    (r"/game/stats/summary", wire.StatsSummary),
    (r"/game/stats/players/\w+", wire.PlayerStats),
    (r"/players/\w+/hit", wire.Hit),
    (r"/players/\w+/error", wire.ErrorReport),
    (r"/game/record", wire.GameRecord),
]


def test_every_engine_payload_matches_its_wire_model_exactly() -> None:
    d = Driver(seed=5, turn_timeout=10, max_missed_turns=1, placement_timeout=5)
    d.join("a", "b", "c", "late")
    d.place("a", ROWS)
    d.place("b", COLUMNS)
    d.place("c", ROWS)
    d.tick(5)  # "late" is left out: an error report
    d.wear_down("c", all_cells(ROWS))
    d.tick(10)  # whoever is current times out and is dropped
    while d.game.phase.value == "turn":
        d.idle_turn()
    d.tick(10_000)  # reset
    seen = set()
    for p in d.published:
        for pattern, model in MODELS:
            if re.fullmatch(pattern, p.topic) and p.payload:
                seen.add(pattern)
                parsed = model.model_validate_json(p.payload)
                # every key is the model's, and every field the model has a value for was sent
                assert set(json.loads(p.payload)) == parsed.model_fields_set, p
    assert seen == {pattern for pattern, _ in MODELS}


# -- salvo.spec.payloads: each template built and read back with its model -------------------

T = Topics("arena")


def exactly(model: type[BaseModel], payload: str) -> BaseModel:
    """``payload`` read with ``model``: valid, and every key sent is a field the model set."""
    parsed = model.model_validate_json(payload)
    assert set(json.loads(payload)) == parsed.model_fields_set, payload
    return parsed


def test_each_referee_payload_is_exact_and_valid_for_its_model() -> None:
    cases: list[tuple[str, type[BaseModel], dict[str, object]]] = [
        (payloads.deadline("turn", 1_763_812_345.1236), wire.Deadline, {"phase": "turn", "at": 1_763_812_345.124}),
        (payloads.turn(7, payloads.quote("bob"), 5), wire.TurnInfo, {"turn": 7, "player": "bob", "shots": 5}),
        (
            payloads.salvo(7, payloads.quote('o"dd é'), 3, 1),
            wire.SalvoResult,
            {"turn": 7, "player": 'o"dd é', "shots": 3, "hits": 1},
        ),
        (
            payloads.hit("t", 37, 12, 2, payloads.hit_end("f4f2e80d6f85efdc")).payload,
            wire.Hit,
            {"x": 7, "y": 3, "turn": 12, "shot": 2, "game": "f4f2e80d6f85efdc"},
        ),
        (
            payloads.stats_summary("bob", 40, 120, 17, 12.34567, "victory"),
            wire.StatsSummary,
            {"winner": "bob", "turns": 40, "shots": 120, "hits": 17, "duration_s": 12.346, "termination": "victory"},
        ),
        (
            payloads.stats_summary(None, 3, 0, 0, 0.0, "draw"),
            wire.StatsSummary,
            {"winner": None, "turns": 3, "shots": 0, "hits": 0, "duration_s": 0.0, "termination": "draw"},
        ),
        (
            payloads.player_stats(2, 3, 1, 0, 5, 9, "timeout"),
            wire.PlayerStats,
            {
                "place": 2,
                "shots": 3,
                "hits": 1,
                "accuracy": 0.3333,
                "ships_sunk": 0,
                "ships_lost": 5,
                "defeated_in_turn": 9,
                "reason": "timeout",
            },
        ),
        (
            error_report("/players/bob/fire", "not your turn", Code.NOT_CURRENT_PLAYER),
            wire.ErrorReport,
            {"topic": "/players/bob/fire", "error": "not your turn", "code": "not_current_player"},
        ),
        (  # (v2.1) a fire refusal names its shot
            error_report("/players/bob/fire", "wrong turn", Code.WRONG_TURN, None, "GBkaGxwdHh8gISIjJ", ("bob", 3, 4)),
            wire.ErrorReport,
            {
                "topic": "/players/bob/fire",
                "error": "wrong turn",
                "code": "wrong_turn",
                "signature": "GBkaGxwdHh8gISIj",
                "shot": {"target": "bob", "x": 3, "y": 4},
            },
        ),
    ]
    for payload, model, expected in cases:
        exactly(model, payload)
        assert json.loads(payload) == expected, payload
    # byte for byte, as the engine sends them
    assert payloads.deadline("placement", 60.0) == '{"phase":"placement","at":60.000}'
    assert payloads.turn(7, '"bob"', 5) == '{"turn":7,"player":"bob","shots":5}'
    assert payloads.salvo(7, '"bob"', 0, 0) == '{"turn":7,"player":"bob","shots":0,"hits":0}'
    assert payloads.hit("/arena/players/b/hit", 99, 1, 5, payloads.hit_end("g1")) == Publish(
        "/arena/players/b/hit", '{"x":9,"y":9,"turn":1,"shot":5,"game":"g1"}', False, False
    )


def test_numbers_past_the_tables_are_spelled_the_same() -> None:
    assert payloads.turn(12345, '"a"', 1) == '{"turn":12345,"player":"a","shots":1}'
    assert payloads.salvo(1000, '"a"', 2, 1) == '{"turn":1000,"player":"a","shots":2,"hits":1}'
    end = payloads.hit_end("g")
    assert payloads.hit("t", 0, 999, 1, end).payload == '{"x":0,"y":0,"turn":999,"shot":1,"game":"g"}'
    assert payloads.hit("t", 0, 1000, 1, end).payload == '{"x":0,"y":0,"turn":1000,"shot":1,"game":"g"}'
    assert [payloads.count(n) for n in (0, 5, 999, 1000, 123456)] == ["0", "5", "999", "1000", "123456"]
    assert payloads.names(["a", "b"]) == '["a","b"]' and payloads.names([]) == "[]"


def test_the_publishes_and_retained_state_change_together() -> None:
    held = payloads.Retained()
    out: list[Publish] = []
    held.put(out, "/game/turn", "x")
    held.put(out, "/game/state", "lobby")
    held.put(out, "/game/turn", "")  # cleared
    assert held == {"/game/state": "lobby"}
    assert out == [
        Publish("/game/turn", "x", True, False),
        Publish("/game/state", "lobby", True, False),
        Publish("/game/turn", "", True, False),
    ]
    assert payloads.message("/game/hits", "2") == Publish("/game/hits", "2", False, False)
    assert payloads.message("e", "r", expendable=True).expendable


@pytest.mark.parametrize("placement", [Placement(3, 4, Orientation.VERTICAL), Placement(0, 9, Orientation.HORIZONTAL)])
def test_what_a_team_sends_is_read_back_by_the_inbound_models(placement: Placement) -> None:
    text = payloads.placement(placement)
    assert text == f'{{"coordinates":"{placement.x};{placement.y}","orientation":"{placement.orientation.value}"}}'
    assert wire.parse_placement(json.loads(text)) == placement
    join = wire.parse_join(json.loads(payloads.join_request("ada", "s3cret", "r-1")))
    assert (join.name, join.secret, join.request_id) == ("ada", "s3cret", "r-1")
    assert json.loads(payloads.join_request("ada", "s")) == {"name": "ada", "secret": "s"}
    fire = wire.parse_fire(payloads.fire_data(1, 2, "bob", 3, "0123456789abcdef"))
    assert fire == wire.FireData(x=1, y=2, target="bob", turn=3, game="0123456789abcdef")


def test_every_outbound_topic_is_taken_apart_and_nothing_else() -> None:
    """Each builder's topic comes back as its family with its levels; inbound
    topics, other arenas and malformed levels come back as None."""
    expected = {
        T.state: Published(Outbound.STATE),
        T.game_id: Published(Outbound.GAME_ID),
        T.players_list: Published(Outbound.PLAYERS_LIST),
        T.errors: Published(Outbound.ERRORS),
        T.stats_summary: Published(Outbound.STATS_SUMMARY),
        T.record: Published(Outbound.RECORD),
        T.stats_player("bob"): Published(Outbound.STATS_PLAYER, "bob"),
        T.hit("bob"): Published(Outbound.HIT, "bob"),
        T.player_error("bob"): Published(Outbound.PLAYER_ERROR, "bob"),
        T.defeated("bob"): Published(Outbound.DEFEATED, "bob"),
        T.approved("bob", "carrier"): Published(Outbound.APPROVED, "bob", "carrier"),
        T.sunk("bob", "carrier"): Published(Outbound.SUNK, "bob", "carrier"),
        T.ship_error("bob", "carrier"): Published(Outbound.SHIP_ERROR, "bob", "carrier"),
        T.hit("list"): Published(Outbound.HIT, "list"),  # a team called like a game-wide level
    }
    for topic, route in expected.items():
        assert T.parse_outbound(topic) == route, topic
    for kind in Outbound:  # every game-wide family is one Topics attribute
        if not callable(getattr(T, kind.value)):
            assert T.parse_outbound(getattr(T, kind.value)) == Published(kind)
    for topic in (
        T.fire("bob"),
        T.place("bob", "carrier"),
        T.request_participation,
        Topics("other").state,
        "/arena/players//hit",
        "/arena/players/bob/ships//sunk",
        "/arena/game/stats/players/",
        "/arena/game/stats/players/a/b",
        "/arena/players/bob/hit/x",
    ):
        assert T.parse_outbound(topic) is None, topic
