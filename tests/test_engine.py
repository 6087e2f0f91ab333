"""Unit tests of the sans-IO engine: every rule, no broker."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest

from salvo.game.engine import BURN_CAP, Game
from salvo.game.events import Accepted, Burn, CloseLobby, Config, Join, Pause, Phase, Place, Resume, Tick
from salvo.spec.payloads import Publish
from salvo.spec.rules import FLEET, SHIP_IDS, Placement, fleet_is_legal, random_fleet
from salvo.spec.topics import Topics

from kit import COLUMNS, ROWS, Driver, H, V, all_cells, phase_of, ship_cells, spent, topics_of


def payloads(effects: list[Publish], topic: str) -> list[str]:
    return [p.payload for p in effects if p.topic == topic]


# -- config -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [{"turn_timeout": 0}, {"min_players": 1}, {"min_players": 5, "max_players": 4}, {"max_missed_turns": 0}],
)
def test_config_rejects_nonsense(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message is ours, any wording
        Config(**bad)


# -- lobby: joins -------------------------------------------------------------------------


def test_join_publishes_list_count_approved_false_and_deadline() -> None:
    d = Driver(placement_timeout=60)
    out = d.ok(Join("alice", b"k" * 32, d.now))
    assert [(p.topic, p.payload, p.retain) for p in out] == [
        ("/players/list", '["alice"]', True),
        ("/players/count", "1", True),
        *[(f"/players/alice/ships/{s}/approved", "false", True) for s in SHIP_IDS],
        # unix seconds with three decimals, always
        ("/game/deadline", f'{{"phase":"placement","at":{d.now + 60:.3f}}}', True),
    ]
    d.join("bob")
    assert d.game.retained["/players/list"] == '["alice","bob"]'
    assert d.game.retained["/players/count"] == "2"


def test_each_join_rearms_the_placement_deadline() -> None:
    d = Driver(placement_timeout=60)
    d.join("alice")
    first = d.game.next_deadline()
    assert first is not None
    d.now += 30
    d.join("bob")
    assert d.game.next_deadline() == first + 30


def test_repeat_join_with_same_key_is_a_noop() -> None:
    d = Driver()
    d.join("alice")
    before = d.game.snapshot()
    assert d.ok(Join("alice", b"alice".ljust(32, b"k"), d.now)) == []
    assert d.game.snapshot() == before


def test_name_taken_with_another_key() -> None:
    d = Driver()
    d.join("alice")
    d.rejected(Join("alice", b"x" * 32, d.now), "name taken")


def test_lobby_full() -> None:
    d = Driver(max_players=2)
    d.join("a", "b")
    d.rejected(Join("c", b"c" * 32, d.now), "lobby full")
    # a repeat join of a joined player is still a no-op, not "full"
    assert d.ok(Join("a", b"a".ljust(32, b"k"), d.now)) == []


def test_join_outside_the_lobby() -> None:
    d = Driver()
    d.start({"a": ROWS, "b": ROWS})
    d.rejected(Join("c", b"c" * 32, d.now), "game in progress")
    d.rejected(Join("a", b"a".ljust(32, b"k"), d.now), "game in progress")


# -- lobby: placements -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("ship", "placement"),
    [
        ("carrier", Placement(6, 0, H)),  # needs x 6..10
        ("carrier", Placement(0, 6, V)),
        ("patrolboat", Placement(9, 0, H)),
        ("patrolboat", Placement(-1, 0, H)),
        ("patrolboat", Placement(0, 10, H)),
        ("destroyer", Placement(10, 10, V)),
    ],
)
def test_off_board_placements_are_rejected(ship: str, placement: Placement) -> None:
    d = Driver()
    d.join("a")
    d.rejected(Place("a", ship, placement, d.now), "off the board")


@pytest.mark.parametrize(
    ("ship", "placement"),
    [("carrier", Placement(5, 0, H)), ("carrier", Placement(0, 5, V)), ("patrolboat", Placement(8, 9, H))],
)
def test_placements_touching_the_edge_are_legal(ship: str, placement: Placement) -> None:
    d = Driver()
    d.join("a")
    out = d.ok(Place("a", ship, placement, d.now))
    assert [(p.topic, p.payload, p.retain) for p in out] == [(f"/players/a/ships/{ship}/approved", "true", True)]


def test_overlap_is_rejected_and_names_no_coordinates_of_the_other_ship() -> None:
    d = Driver()
    d.join("a")
    d.ok(Place("a", "carrier", Placement(2, 2, H), d.now))
    reason = d.rejected(Place("a", "destroyer", Placement(4, 0, V), d.now), "overlap", "carrier")
    assert "2;2" not in reason


def test_ships_may_touch() -> None:
    d = Driver()
    d.join("a")
    d.ok(Place("a", "carrier", Placement(0, 0, H), d.now))
    d.ok(Place("a", "battleship", Placement(0, 1, H), d.now))
    d.ok(Place("a", "destroyer", Placement(5, 0, H), d.now))


def test_a_placements_bits_are_its_cells() -> None:
    """Overlap checks and random fleets use the bits; the rules are stated in cells."""
    for x, y, o, length in itertools.product(range(10), range(10), (H, V), sorted(set(FLEET.values()))):
        p = Placement(x, y, o)
        if p.fits(length):
            assert p.mask(length) == sum(1 << c for c in p.cells(length)), p


def test_random_fleets_are_legal_and_cover_the_board() -> None:
    rng = random.Random(7)
    fleets = [random_fleet(rng) for _ in range(400)]
    assert all(fleet_is_legal(f) for f in fleets)
    covered = {c for f in fleets for s, p in f.items() for c in p.cells(FLEET[s])}
    assert covered == set(range(100))
    for ship in SHIP_IDS:  # both ways round, for every ship
        assert {f[ship].orientation for f in fleets} == {H, V}


def test_replacing_an_approved_ship_moves_it() -> None:
    d = Driver()
    d.join("a")
    d.ok(Place("a", "carrier", Placement(0, 0, H), d.now))
    d.ok(Place("a", "carrier", Placement(0, 5, H), d.now))
    # the old cells are free again, the new ones taken
    d.ok(Place("a", "battleship", Placement(0, 0, H), d.now))
    d.rejected(Place("a", "destroyer", Placement(0, 5, H), d.now), "overlap")
    assert d.game.players["a"].fleet["carrier"] == Placement(0, 5, H)


def test_invalid_move_keeps_the_old_placement() -> None:
    d = Driver()
    d.join("a")
    d.ok(Place("a", "carrier", Placement(0, 0, H), d.now))
    d.rejected(Place("a", "carrier", Placement(7, 0, H), d.now), "off the board")
    assert d.game.players["a"].fleet["carrier"] == Placement(0, 0, H)
    assert d.game.retained["/players/a/ships/carrier/approved"] == "true"


def test_placement_by_unjoined_player_or_unknown_ship() -> None:
    d = Driver()
    d.join("a")
    d.rejected(Place("ghost", "carrier", Placement(0, 0, H), d.now), "not a joined player")
    d.rejected(Place("a", "canoe", Placement(0, 0, H), d.now), "unknown ship")


def test_placement_outside_the_lobby() -> None:
    d = Driver()
    d.start({"a": ROWS, "b": ROWS})
    d.rejected(Place("a", "carrier", Placement(0, 9, H), d.now), "not in the lobby")


# -- start ------------------------------------------------------------------------------


def test_game_starts_when_all_fleets_are_complete_and_play_order_is_completion_order() -> None:
    d = Driver(seed=3)
    d.join("a", "b", "c")
    d.place("c", ROWS)
    d.place("a", COLUMNS)
    assert phase_of(d.game) is Phase.LOBBY
    out = d.place("b", ROWS)
    assert phase_of(d.game) is Phase.TURN
    assert d.game.order == ["c", "a", "b"]
    assert d.game.retained["/players/list"] == '["c","a","b"]'
    first = d.game.current
    assert first in {"a", "b", "c"}
    i = d.game.order.index(first)
    expected = [d.game.order[(i + k) % 3] for k in range(6)]
    seen = []
    for _ in range(6):
        seen.append(d.game.current)
        d.idle_turn()
    assert seen == expected
    # the start publishes list, count, state, then the first turn
    tail = [p.topic for p in out[-6:]]
    assert tail == ["/players/list", "/players/count", "/game/state", "/game/deadline", "/game/turn", "/game/current"]


def test_min_players_waits_for_enough_joins() -> None:
    d = Driver(min_players=3)
    d.join("a", "b")
    d.place("a", ROWS)
    d.place("b", ROWS)
    assert phase_of(d.game) is Phase.LOBBY
    d.join("c")
    d.place("c", ROWS)
    assert phase_of(d.game) is Phase.TURN


def test_completing_a_fleet_twice_does_not_duplicate_play_order() -> None:
    d = Driver(min_players=3)
    d.join("a", "b", "c")
    d.place("a", ROWS)
    d.place("a", COLUMNS)  # moves every ship; the fleet was already complete
    d.place("b", ROWS)
    d.place("c", ROWS)
    assert d.game.order == ["a", "b", "c"]


def test_first_player_is_seeded() -> None:
    def first(seed: int) -> str | None:
        d = Driver(seed=seed)
        d.start({"a": ROWS, "b": ROWS, "c": ROWS, "d": ROWS})
        return d.game.current

    assert all(first(11) == first(11) for _ in range(3))
    assert len({first(s) for s in range(20)}) > 1


def test_deadline_starts_with_two_complete_fleets_and_leaves_the_rest_out() -> None:
    d = Driver(placement_timeout=60)
    d.join("a", "b", "c")
    d.place("b", ROWS)
    d.ok(Place("c", "carrier", Placement(0, 0, H), d.now))
    d.place("a", COLUMNS)
    out = d.tick(59.9)
    assert out == [] and phase_of(d.game) is Phase.LOBBY
    out = d.tick(0.2)
    assert phase_of(d.game) is Phase.TURN
    assert d.game.order == ["b", "a"]
    (err,) = [p for p in out if p.topic == "/players/c/error"]
    assert not err.retain and "left out" in json.loads(err.payload)["error"]
    assert payloads(out, "/players/list") == ['["b","a"]']
    assert payloads(out, "/players/count") == ["2"]
    assert topics_of(out).index("/players/c/error") < topics_of(out).index("/game/state")


def test_too_few_fleets_at_deadline_keeps_lobby_open_removes_the_incomplete_and_rearms() -> None:
    d = Driver(placement_timeout=60)
    d.join("a", "b")
    d.place("a", ROWS)
    d.ok(Place("b", "carrier", ROWS["carrier"], d.now))
    out = d.tick(61)
    assert phase_of(d.game) is Phase.LOBBY
    assert payloads(out, "/game/deadline") == [f'{{"phase":"placement","at":{d.now + 60:.3f}}}']
    # b never completed its fleet: removed (v2 section 5), told why, its ships cleared
    assert list(d.game.players) == ["a"]
    (err,) = [p for p in out if p.topic == "/players/b/error"]
    assert json.loads(err.payload)["code"] == "left_out" and not err.retain
    assert {p.topic: p.payload for p in out if "/players/b/ships/" in p.topic} == {
        f"/players/b/ships/{s}/approved": "" for s in SHIP_IDS
    }
    assert payloads(out, "/players/list") == ['["a"]'] and payloads(out, "/players/count") == ["1"]
    d.rejected(Place("b", "battleship", ROWS["battleship"], d.now), "not a joined player")
    d.join("b")
    d.place("b", ROWS)  # now all complete: starts at once
    assert phase_of(d.game) is Phase.TURN


def test_squatters_who_never_place_cannot_hold_the_lobby_full() -> None:
    d = Driver(placement_timeout=60, max_players=4)
    d.join("s1", "s2", "s3", "s4")
    d.rejected(Join("ada", b"k" * 32, d.now), "lobby full")
    out = d.tick(61)
    assert d.game.players == {}
    assert d.game.next_deadline() is None and payloads(out, "/game/deadline") == [""]
    assert payloads(out, "/players/list") == ["[]"]
    assert "/game/deadline" not in d.game.retained
    d.join("ada", "bob")  # room again
    d.place("ada", ROWS)
    d.place("bob", COLUMNS)
    assert d.game.phase is Phase.TURN


def test_no_deadline_before_the_first_join() -> None:
    d = Driver()
    assert d.game.next_deadline() is None
    assert d.tick(10_000) == []


# -- turns ---------------------------------------------------------------------------------


def started(seed: int = 7, **config: float) -> Driver:
    d = Driver(seed=seed, prefix="", **config)
    d.start({"a": ROWS, "b": COLUMNS})
    return d


def other(d: Driver) -> str:
    return "b" if d.game.current == "a" else "a"


def fleet_of(name: str) -> dict[str, Placement]:
    return ROWS if name == "a" else COLUMNS


def test_turn_announcement_order_and_payloads() -> None:
    d = started(turn_timeout=30)
    cur = d.game.current
    tail = d.published[-3:]
    assert [(p.topic, p.retain) for p in tail] == [
        ("/game/deadline", True),
        ("/game/turn", True),
        ("/game/current", True),
    ]
    assert json.loads(tail[1].payload) == {"turn": 1, "player": cur, "shots": 5}
    assert tail[2].payload == cur
    assert json.loads(tail[0].payload) == {"phase": "turn", "at": d.now + 30}


def test_every_accepted_shot_publishes_hit_to_target_unretained() -> None:
    d = started()
    tgt = other(d)
    out = d.fire(tgt, 9, 9)
    assert [(p.topic, p.payload, p.retain) for p in out] == [
        (f"/players/{tgt}/hit", f'{{"x":9,"y":9,"turn":1,"shot":1,"game":"{d.game.game_id}"}}', False)
    ]
    out = d.fire(tgt, 0, 9)  # the salvo's second accepted shot
    assert json.loads(out[0].payload) == {"x": 0, "y": 9, "turn": 1, "shot": 2, "game": d.game.game_id}


def test_a_shot_says_what_happened_for_the_log() -> None:
    d = started()
    me, tgt = d.cur, other(d)
    x, y = ship_cells(fleet_of(tgt), "carrier")[0]
    first = d.send(d.shot(tgt, x, y))
    assert isinstance(first, Accepted)
    assert first.summary == f"{me} fired at {tgt} ({x},{y}) 1/5"
    d.play_turn(d.misses(tgt, 3))
    last = d.send(d.shot(tgt, x, y))  # the same cell again: still a hit
    assert isinstance(last, Accepted)
    assert last.summary == f"{me} fired at {tgt} ({x},{y}) 5/5; salvo of {me} ends: 5 shots, 2 hits"


def test_hit_rule_counts_repeated_hits_and_ignores_misses() -> None:
    d = started()
    tgt = other(d)
    x, y = ship_cells(fleet_of(tgt), "carrier")[0]
    mx, my = next((cx, cy) for cy in range(10) for cx in range(10) if (cx, cy) not in all_cells(fleet_of(tgt)))
    out = d.play_turn([(tgt, x, y), (tgt, x, y), (tgt, mx, my), (tgt, x, y), (tgt, mx, my)])
    assert payloads(out, "/game/hits") == ["3"]


def test_shots_allowed_equal_ships_afloat_at_turn_start() -> None:
    d = started()
    shooter, tgt = d.game.current, other(d)
    assert shooter is not None
    # shooter sinks two of target's ships (5 shots: patrolboat 2 + destroyer 3)
    cells = ship_cells(fleet_of(tgt), "patrolboat") + ship_cells(fleet_of(tgt), "destroyer")
    d.play_turn([(tgt, x, y) for x, y in cells])
    assert d.game.current == tgt and d.game.allowed == 3
    assert json.loads(d.game.retained["/game/turn"])["shots"] == 3
    d.idle_turn()
    assert d.game.current == shooter and d.game.allowed == 5


def test_sinks_and_defeats_are_announced_only_at_salvo_end_in_spec_order() -> None:
    d = started()
    shooter, tgt = d.game.current, other(d)
    assert shooter is not None
    pb = ship_cells(fleet_of(tgt), "patrolboat")
    dest = ship_cells(fleet_of(tgt), "destroyer")
    out = d.fire(tgt, *pb[0]) + d.fire(tgt, *pb[1])
    assert "sunk" not in " ".join(topics_of(out)), "a sink leaked before the salvo ended"
    out = [p for x, y in dest for p in d.fire(tgt, x, y)]
    topics = topics_of(out)
    assert topics[:3] == [f"/players/{tgt}/hit"] * 3
    assert topics[3:7] == [
        "/game/hits",
        "/game/salvo",
        f"/players/{tgt}/ships/destroyer/sunk",
        f"/players/{tgt}/ships/patrolboat/sunk",
    ]
    assert topics[7:] == ["/game/deadline", "/game/turn", "/game/current"]
    salvo = next(p for p in out if p.topic == "/game/salvo")
    assert salvo.retain and json.loads(salvo.payload) == {"turn": 1, "player": shooter, "shots": 5, "hits": 5}
    hits = next(p for p in out if p.topic == "/game/hits")
    assert not hits.retain and hits.payload == "5"


def test_self_fire_is_allowed_and_can_sink_own_ship() -> None:
    d = started()
    me = d.game.current
    assert me is not None
    cells = ship_cells(fleet_of(me), "patrolboat")
    out = d.play_turn([(me, x, y) for x, y in cells] + d.misses(other(d), 3))
    assert f"/players/{me}/ships/patrolboat/sunk" in topics_of(out)
    assert d.game.players[me].ships_sunk == 0  # own ships are not a credit


def test_sunk_player_is_targetable_until_the_salvo_ends_then_defeated() -> None:
    d = Driver(seed=1)
    d.start({"a": ROWS, "b": COLUMNS, "c": ROWS})
    shooter = d.cur
    victim = next(n for n in d.game.order if n != shooter)
    cells = all_cells(d.fleets[victim])
    last_two = cells[-2:]
    d.wear_down(victim, cells[:-2], shooter=shooter)
    while d.cur != shooter:
        d.idle_turn()
    n = d.game.allowed
    assert n > 2
    # the last two cells, then more shots at the already-sunk victim: still accepted
    out = d.play_turn([(victim, x, y) for x, y in last_two] + d.misses(victim, n - 2))
    topics = topics_of(out)
    assert topics.count(f"/players/{victim}/hit") == n
    assert topics.index(f"/players/{victim}/defeated") > topics.index("/game/salvo")
    assert d.game.players[victim].defeated_in_turn == d.game.turn - 1
    # now defeated: skipped in the rotation and no longer a target
    d.rejected(d.shot(victim, 0, 9), "already defeated", code="defeated_target")


def test_skip_defeated_players_in_rotation() -> None:
    d = Driver(seed=2)
    d.start({"a": ROWS, "b": COLUMNS, "c": ROWS})
    d.wear_down("b", all_cells(COLUMNS))
    assert d.game.players["b"].defeated
    ring = [n for n in d.game.order if n != "b"]
    seen = []
    for _ in range(5):
        seen.append(d.cur)
        d.idle_turn()
    assert "b" not in seen
    assert all(ring[(ring.index(x) + 1) % 2] == y for x, y in itertools.pairwise(seen))


def test_no_salvo_can_sink_its_shooter_and_the_last_opponent() -> None:
    """A draw needs the shooter's last ships and the last opponent's to sink in
    one salvo: one shot per afloat ship of the shooter is always one short."""
    d = started()
    me, them = d.cur, other(d)
    keep: dict[str, list[tuple[int, int]]] = {me: [], them: []}  # one unhit cell per ship, the rest hit
    for name in (me, them):
        cells = []
        for ship in SHIP_IDS:
            ship_c = ship_cells(fleet_of(name), ship)
            cells += ship_c[1:]
            keep[name].append(ship_c[0])
        d.wear_down(name, cells, shooter=me if name == them else them)
    while d.cur != me:
        d.idle_turn()
    assert d.game.allowed == 5 == len(keep[me])
    # all 5 shots at my own last cells: I am defeated, they are not
    d.play_turn([(me, x, y) for x, y in keep[me]])
    assert d.game.phase is Phase.OVER and d.game.winner == them


def test_draw_when_nobody_is_left() -> None:
    """The spec defines a draw (empty winner) although legal play cannot reach
    it (see above): craft the state where both last ships are already fully
    hit but not yet sunk, and let a salvo end."""
    d = started()
    me, them = d.cur, other(d)
    for name in (me, them):
        for ship in SHIP_IDS:
            d.game.players[name].damage[ship] = set(fleet_of(name)[ship].cells(FLEET[ship]))
    d.game.sank = True  # as _fire sets it when a shot completes a ship's damage
    out = d.tick(30)  # the turn times out; the salvo ends; both fleets sink
    assert d.game.phase is Phase.OVER
    assert d.game.winner is None
    assert Publish("/game/winner", "", True) in out  # cleared: nobody is left
    summary = json.loads(d.game.retained["/game/stats/summary"])
    assert summary["winner"] is None and summary["termination"] == "draw"
    for name in (me, them):
        stats = json.loads(d.game.retained[f"/game/stats/players/{name}"])
        assert stats["place"] == 1 and stats["reason"] == "sunk"


def test_turn_timeout_ends_salvo_with_partial_shots() -> None:
    d = started(turn_timeout=30)
    cur, tgt = d.cur, other(d)
    d.fire(tgt, *ship_cells(fleet_of(tgt), "carrier")[0])
    assert d.tick(29) == []
    out = d.tick(1)
    assert json.loads(payloads(out, "/game/salvo")[0]) == {"turn": 1, "player": cur, "shots": 1, "hits": 1}
    assert d.game.current == tgt and d.game.turn == 2
    assert d.game.players[cur].missed == 0


def test_a_ship_sunk_by_a_salvo_cut_short_by_the_timeout_is_announced_then() -> None:
    d = started(turn_timeout=30)
    tgt = other(d)
    for x, y in ship_cells(fleet_of(tgt), "patrolboat"):
        assert "sunk" not in " ".join(topics_of(d.fire(tgt, x, y)))
    out = d.tick(30)
    assert topics_of(out)[:3] == ["/game/hits", "/game/salvo", f"/players/{tgt}/ships/patrolboat/sunk"]
    assert d.game.current == tgt and d.game.allowed == 4  # one ship fewer afloat, one shot fewer


def test_player_dropped_after_missed_turns_and_forfeit() -> None:
    d = started(turn_timeout=10, max_missed_turns=3)
    idle, active = d.game.current, other(d)
    assert idle is not None
    for n in range(3):
        out = d.tick(10)  # idle times out
        if n < 2:
            assert d.game.players[idle].missed == n + 1
            d.idle_turn()  # the active player plays
    assert d.game.players[idle].defeated and d.game.players[idle].reason == "timeout"
    assert f"/players/{idle}/defeated" in topics_of(out)
    assert d.game.phase is Phase.OVER and d.game.winner == active
    summary = json.loads(d.game.retained["/game/stats/summary"])
    assert summary["termination"] == "forfeit"
    assert json.loads(d.game.retained[f"/game/stats/players/{idle}"])["reason"] == "timeout"


def test_a_shot_resets_the_missed_turn_counter() -> None:
    d = started(turn_timeout=10, max_missed_turns=2)
    idle = d.game.current
    assert idle is not None
    d.tick(10)
    d.idle_turn()
    d.play_turn(d.misses(other(d), 1))
    d.tick(10)  # idle fired once then timed out: not a missed turn
    assert d.game.players[idle].missed == 0


# -- fire rejections --------------------------------------------------------------------------


def test_fire_rejections_leave_state_unchanged() -> None:
    d = started()
    tgt, me = other(d), d.cur
    used = b"u" * 24
    game_id = d.game.game_id
    d.ok(d.shot(tgt, 9, 9, nonce_=used))
    d.rejected(d.shot(tgt, 8, 8, nonce_=used), "replayed", code="replayed")
    d.rejected(d.shot(tgt, 8, 8, 2), "wrong turn", code="wrong_turn")
    d.rejected(d.shot(tgt, 8, 8, 1, game="0123456789abcdef"), "wrong game", code="wrong_game")
    d.rejected(d.shot(tgt, 8, 8, 1, shooter=tgt), "not your turn", code="not_current_player")
    d.rejected(d.shot(tgt, 10, 0), "off the board", code="off_board")
    d.rejected(d.shot(tgt, 0, -1), "off the board", code="off_board")
    d.rejected(d.shot("zed", 0, 0), "unknown target", code="unknown_target")
    d.ok(d.shot(tgt, 8, 8, 1, game=game_id, shooter=me))  # bound to this turn and game: fine


def test_fire_outside_a_turn() -> None:
    d = Driver()
    d.join("a", "b")
    d.rejected(d.shot("a", 0, 0, shooter="a"), "not in a turn", code="not_in_turn")


def test_left_out_player_is_not_a_target() -> None:
    d = Driver(placement_timeout=5)
    d.join("a", "b", "c")
    d.place("a", ROWS)
    d.place("b", ROWS)
    d.tick(6)
    d.rejected(d.shot("c", 0, 0), "unknown target")


def test_a_burned_nonce_is_spent_for_the_game_and_capped_per_player() -> None:
    d = started()
    me, tgt = d.cur, other(d)
    assert d.ok(Burn(me, b"b" * 24, d.now, "wrong_turn")) == []  # no effects: only the memory
    assert d.game.nonce_seen(me, b"b" * 24) is False
    d.rejected(d.shot(tgt, 0, 0, nonce_=b"b" * 24), "replayed", code="replayed")
    d.rejected(Burn(me, b"b" * 24, d.now), code="replayed")
    d.ok(Burn(tgt, b"b" * 24, d.now))  # the same bytes under another key: another nonce
    d.fire(tgt, 9, 9)
    (shot_nonce,) = [n for (_p, n), seen in spent(d.game).items() if seen]
    assert d.game.nonce_seen(me, shot_nonce) == tgt  # taken, on its target's topic
    for i in range(BURN_CAP - 1):  # (one is spent above)
        d.ok(Burn(me, b"z" + i.to_bytes(23, "big"), d.now))
    d.rejected(Burn(me, b"x" * 24, d.now), code="busy")  # over the cap: not kept
    d.rejected(Burn("nobody", b"y" * 24, d.now), code="unknown_target")


def test_every_game_has_its_own_id_from_the_arena_key() -> None:
    d = Driver(seed=7)
    first = d.game.game_id
    assert len(first) == 16 and int(first, 16) >= 0
    assert d.game.retained["/game/id"] == first
    same = Game(Config(), Topics(), 7, id_key=d.game.id_key)
    assert same.game_id == first  # a replay finds the same id
    other_key = Game(Config(), Topics(), 7, id_key=bytes(32))
    assert other_key.game_id != first  # another arena, journal or referee: another id
    d.ok(CloseLobby("next", d.now))
    assert d.game.game_no == 2 and d.game.game_id not in (first, "")


# -- over and reset ---------------------------------------------------------------------------


def finish(d: Driver) -> None:
    """The current player sinks the other one; the other only idles."""
    d.wear_down(other(d), all_cells(fleet_of(other(d))), shooter=d.cur)


def test_reset_after_over_clears_every_retained_topic_forgets_nonces_and_draws_a_new_id() -> None:
    d = started(reset_after=300)
    finish(d)
    owned = set(d.game.retained) - {"/game/state", "/game/id"}
    assert {"/game/winner", "/game/stats/summary", "/players/list", "/game/salvo"} <= owned
    old_id = d.game.game_id
    assert spent(d.game)
    assert d.tick(299) == []
    out = d.tick(1)
    cleared = {p.topic for p in out if p.payload == "" and p.retain}
    assert cleared == owned
    # the new game's id, then the lobby
    assert out[-2:] == [Publish("/game/id", d.game.game_id, True), Publish("/game/state", "lobby", True)]
    assert d.game.game_id != old_id
    assert d.game.retained == {"/game/state": "lobby", "/game/id": d.game.game_id}
    assert d.game.phase is Phase.LOBBY and d.game.game_no == 2
    # memory stays flat across games: the id binds every signature to its game
    assert spent(d.game) == {}
    d.start({"a": ROWS, "b": COLUMNS})
    d.rejected(d.shot(other(d), 0, 0, 1, game=old_id), "wrong game", code="wrong_game")


def test_over_rejects_everything() -> None:
    d = started()
    finish(d)
    d.rejected(Join("z", b"z" * 32, d.now), "game in progress")
    d.rejected(Place("a", "carrier", Placement(0, 0, H), d.now), "not in the lobby")
    d.rejected(d.shot("a", 0, 0, shooter="a"), "not in a turn")


def test_prefix_applies_to_every_published_topic() -> None:
    d = Driver(prefix="arena1")
    d.start({"a": ROWS, "b": COLUMNS})
    finish(d)
    d.tick(10_000)
    assert d.published and all(p.topic.startswith("/arena1/") for p in d.published)


def test_tick_is_idempotent_before_deadline() -> None:
    d = started()
    before = d.game.snapshot()
    assert d.ok(Tick(d.now)) == []
    assert d.game.snapshot() == before


def test_the_organiser_closes_a_lobby_and_only_a_lobby() -> None:
    d = Driver()
    d.join("alice", "bob")
    d.place("alice", ROWS)
    effects = d.ok(CloseLobby("no-show: bob", d.now))
    published = {p.topic: p.payload for p in effects}
    for name in ("alice", "bob"):
        report = json.loads(published[d.t.player_error(name)])
        assert report["error"] == "lobby closed: no-show: bob" and report["code"] == "lobby_closed"
    assert published[d.t.players_list] == "" and published[d.t.approved("alice", "carrier")] == ""
    assert d.game.phase is Phase.LOBBY and d.game.players == {} and d.game.next_deadline() is None
    assert d.game.retained == {d.t.state: "lobby", d.t.game_id: d.game.game_id} and d.game.game_no == 2
    # A game that has started is played out: the request changes nothing.
    d.start({"alice": ROWS, "bob": COLUMNS})
    d.rejected(CloseLobby("too late", d.now), "game in progress")


def test_what_the_engine_holds_retained_is_what_its_retained_publishes_left_on_the_broker() -> None:
    """One write path: after every event, ``game.retained`` is the broker's
    retained state as built from the publishes alone (a retained "" clears),
    through lobby, timeouts, drops, game over and reset."""
    d = Driver(seed=3, turn_timeout=5, max_missed_turns=1, placement_timeout=5, reset_after=5)
    broker = dict(d.game.retained)  # what the protocol layer publishes when it connects

    def check(effects: list[Publish]) -> None:
        for p in effects:
            if p.retain and p.payload:
                broker[p.topic] = p.payload
            elif p.retain:
                broker.pop(p.topic, None)
        assert broker == d.game.retained

    for game in range(2):
        d.join("a", "b", "c", "late")
        check(d.published)
        d.published.clear()
        for name, fleet in (("a", ROWS), ("b", COLUMNS), ("c", ROWS)):
            check(d.place(name, fleet))
        check(d.tick(5))  # "late" is left out, the game starts
        rng = random.Random(game)
        while d.game.current is not None:
            if rng.random() < 0.1:
                check(d.tick(5))  # a timeout: its player is dropped
                continue
            target = rng.choice([n for n in ("a", "b", "c") if not d.game.players[n].defeated])
            check(d.fire(target, rng.randrange(10), rng.randrange(10)))
        check(d.tick(5))  # the reset
        d.published.clear()
    assert d.game.game_no == 3


def test_players_defeated_in_one_turn_share_a_place_and_duration_is_start_to_last_salvo() -> None:
    """Protocol section 7, pinned down: ``place`` is 1 + the players who lasted
    longer (the winner longest), so two defeated in the same turn share a
    place and the next place is skipped (1, 2, 3, 3); ``duration_s`` is the
    referee's clock from the game's start (the event that left the lobby) to
    the event that ended its last salvo, a paused clock included."""
    d = Driver(seed=3)
    d.start(dict.fromkeys(("a", "b", "c", "d"), ROWS))
    started_at = d.now
    last = {n: ship_cells(ROWS, "patrolboat")[-1] for n in ("c", "d")}
    for n in ("c", "d"):  # all of c's and d's ships hit but one cell
        d.wear_down(n, [xy for xy in all_cells(ROWS) if xy != last[n]], shooter="a")
    d.now += 20.0
    d.ok(Pause("a team's laptop", d.now))
    d.now += 100.0  # a paused stretch counts
    d.ok(Resume(d.now))
    while d.cur != "a":
        d.idle_turn()
    out = d.play_turn([("c", *last["c"]), ("d", *last["d"]), *d.misses("b", 3)])
    assert [p.topic for p in out if p.topic.endswith("/defeated")] == ["/players/c/defeated", "/players/d/defeated"]
    turn_cd = d.game.turn - 1
    d.now += 2.5
    ended_at = d.now
    d.wear_down("b", all_cells(ROWS), shooter="a")  # the game ends with the salvo that sinks b
    assert d.game.phase is Phase.OVER and d.game.winner == "a"
    stats = {n: json.loads(d.game.retained[f"/game/stats/players/{n}"]) for n in "abcd"}
    assert {n: s["place"] for n, s in stats.items()} == {"a": 1, "b": 2, "c": 3, "d": 3}
    assert stats["c"]["defeated_in_turn"] == stats["d"]["defeated_in_turn"] == turn_cd
    summary = json.loads(d.game.retained["/game/stats/summary"])
    assert summary["duration_s"] == round(ended_at - started_at, 3) == 122.5
