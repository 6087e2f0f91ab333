"""Wire models: inbound parsing (aliases, strictness, no echo of input) and
agreement between every payload the engine publishes and its model."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import BaseModel

from salvo import wire
from salvo.errors import Malformed
from salvo.rules import Orientation, Placement

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


def test_a_joins_request_id_is_echoed_only_when_valid() -> None:
    assert wire.parse_join({"name": "a", "secret": "s", "request_id": "r-1_A"}).request_id == "r-1_A"
    assert wire.request_id_of({"name": 5, "request_id": "ok"}) == "ok"  # echoed whatever else is wrong
    for bad in ("", "x" * 65, "a b", "é", 5, None):
        assert wire.request_id_of({"request_id": bad}) is None
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


MODELS: list[tuple[str, type[BaseModel] | None]] = [
    (r"/game/deadline", wire.Deadline),
    (r"/game/turn", wire.TurnInfo),
    (r"/game/salvo", wire.SalvoResult),
    (r"/game/stats/summary", wire.StatsSummary),
    (r"/game/stats/players/\w+", wire.PlayerStats),
    (r"/players/\w+/hit", wire.Hit),
    (r"/players/\w+/error", wire.ErrorReport),
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
                parsed = model.model_validate_json(p.payload)  # type: ignore[union-attr]
                # every key is the model's, and every field the model has a value for was sent
                assert set(json.loads(p.payload)) == parsed.model_fields_set, p
    assert seen == {pattern for pattern, _ in MODELS}
