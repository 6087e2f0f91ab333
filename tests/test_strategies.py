"""Strategies and what a player knows: no broker needed."""

from __future__ import annotations

import statistics

import pytest

from salvo.sdk.bots import STRATEGIES, make_strategy
from salvo.sdk.view import ErrorReported, MySalvo, Observer, ShipSunk, ShotAtMe, View, refused
from salvo.spec.errors import Code
from salvo.spec.rules import cell, fleet_is_legal
from salvo.spec.topics import Topics
from salvo.tools.sim import play_game, solo_benchmark

NAMES = list(STRATEGIES)


@pytest.mark.parametrize("name", NAMES)
def test_fleets_are_always_legal(name: str) -> None:
    for seed in range(300):
        assert fleet_is_legal(make_strategy(name, seed).place_fleet())


def test_unknown_strategy_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="choose from random, hunt-target, density"):
        make_strategy("psychic")


@pytest.mark.parametrize("name", NAMES)
def test_games_are_played_with_legal_shots_only(name: str) -> None:
    # The engine rejects any off-board, duplicate-turn or defeated-target shot;
    # play_game records every rejection and fails on an incomplete salvo.
    others = [n for n in NAMES if n != name]
    for seed in range(6):
        strategies = {
            "me": make_strategy(name, seed),
            "x": make_strategy(others[0], seed),
            "y": make_strategy(others[1], seed),
        }
        result = play_game(strategies, seed=seed)
        assert result.rejected == []
        assert result.winner in strategies
        for view in result.views.values():
            for salvo in view.salvos.values():
                assert all(0 <= x < 10 and 0 <= y < 10 and t != view.me for t, x, y in salvo.shots)


@pytest.mark.long
def test_solo_benchmark_orders_like_the_published_anchors() -> None:
    # Exactly what `salvo bench strategies` reports by default (500 fleets, seed 0).
    results = {r.strategy: r for r in solo_benchmark()}
    means = {name: r.mean for name, r in results.items()}
    assert means["random"] > 90  # ~96 published
    assert means["random"] > means["hunt-target"] > means["density"]
    # ~42-45 published for probability density. A mean of 500 games is only
    # known to about +-0.4 shots (sd ~9): within two standard errors of 45.
    density = results["density"].shots
    assert means["density"] - 2 * statistics.stdev(density) / len(density) ** 0.5 <= 45


def test_density_beats_random_head_to_head() -> None:
    wins = sum(
        play_game({"d": make_strategy("density", s), "r": make_strategy("random", s)}, seed=s).winner == "d"
        for s in range(30)
    )
    assert wins >= 27


def test_same_seed_same_game() -> None:
    def run() -> tuple[str | None, int]:
        r = play_game({"a": make_strategy("density", 1), "b": make_strategy("hunt-target", 2)}, seed=9)
        return r.winner, r.turns

    assert run() == run()


# -- evidence from aggregated salvo hit counts ---------------------------------------------


def view_with(*salvos: MySalvo) -> View:
    v = View("me", players=["me", "a", "b"])
    for s in salvos:
        v.salvos[s.turn] = s
    return v


def test_zero_hit_salvo_means_misses_and_full_hits_mean_hits() -> None:
    v = view_with(
        MySalvo(1, [("a", 0, 0), ("a", 1, 0)], hits=0),
        MySalvo(2, [("a", 5, 5), ("b", 6, 6)], hits=2),
    )
    ev = v.evidence("a")
    assert ev.misses == {cell(0, 0), cell(1, 0)}
    assert ev.hits == {cell(5, 5)}
    assert v.evidence("b").hits == {cell(6, 6)}
    assert ev.shot == {cell(0, 0), cell(1, 0), cell(5, 5)}


def test_partial_salvo_gives_maybes_refined_by_other_salvos() -> None:
    v = view_with(MySalvo(1, [("a", 0, 0), ("a", 1, 0), ("a", 2, 0), ("a", 3, 0)], hits=1))
    assert v.evidence("a").maybe == {cell(x, 0): 0.25 for x in range(4)}
    # a later single shot at (0,0) missed, another at (1,0) missed: 1 hit left among 2
    v.salvos[2] = MySalvo(2, [("a", 0, 0), ("a", 1, 0)], hits=0)
    ev = v.evidence("a")
    assert ev.misses == {cell(0, 0), cell(1, 0)}
    assert ev.maybe == {cell(2, 0): 0.5, cell(3, 0): 0.5}
    # and a miss at (2,0) pins the hit on (3,0)
    v.salvos[3] = MySalvo(3, [("a", 2, 0)], hits=0)
    assert v.evidence("a").hits == {cell(3, 0)}


def test_a_sink_pins_down_the_ship_when_only_one_placement_fits() -> None:
    v = view_with(
        MySalvo(1, [("a", 4, 4), ("a", 5, 4)], hits=2),
        MySalvo(2, [("a", 4, 3), ("a", 4, 5), ("a", 3, 4), ("a", 6, 4)], hits=0),
    )
    v.salvos[1].sunk.append(("a", "patrolboat"))
    ev = v.evidence("a")
    assert ev.resolved == {cell(4, 4), cell(5, 4)}
    assert ev.open_hits == set()


def test_an_ambiguous_sink_explains_the_cells_all_its_placements_share() -> None:
    # hits (2..5, 0); the destroyer (3) sank on the shot at (4,0): it is
    # (2..4), (3..5) or (4..6)... only the first two fit the hits, both hold 3 and 4
    v = view_with(
        MySalvo(1, [("a", 2, 0), ("a", 3, 0), ("a", 5, 0)], hits=3),
        MySalvo(2, [("a", 4, 0)], hits=1),
        MySalvo(3, [("a", 6, 0), ("a", 1, 0), ("a", 4, 1)], hits=0),
    )
    v.salvos[2].sunk.append(("a", "destroyer"))
    ev = v.evidence("a")
    assert ev.resolved == {cell(3, 0), cell(4, 0)}
    assert ev.open_hits == {cell(2, 0), cell(5, 0)}


# -- the observer ----------------------------------------------------------------------


def test_observer_builds_the_view_and_ignores_replayed_sinks() -> None:
    t = Topics("p")
    v = View("me")
    obs = Observer(v, t)
    obs.feed(t.state, "turn")
    obs.feed(t.players_list, '["me","a"]')
    obs.feed(t.turn, '{"turn":3,"player":"me","shots":5}')
    obs.feed(t.current, "me")
    assert v.my_turn() and v.allowed == 5
    v.record_salvo([("a", 1, 1)])
    obs.feed(t.salvo, '{"turn":3,"player":"me","shots":1,"hits":1}')
    assert isinstance(obs.feed(t.sunk("a", "patrolboat"), "true"), ShipSunk)
    assert v.salvos[3].sunk == [("a", "patrolboat")] and v.salvos[3].hits == 1
    # a replayed (retained) sink is known but not credited to my last salvo
    obs.feed(t.sunk("a", "carrier"), "true", retained=True)
    assert v.sunk["a"] == ["patrolboat", "carrier"] and v.salvos[3].sunk == [("a", "patrolboat")]
    obs.feed(t.hit("me"), '{"x":2,"y":3,"turn":3,"shot":1}')
    obs.feed(t.hit("me"), '{"x":2,"y":3,"turn":3,"shot":1}')  # delivered twice: taken once
    obs.feed(t.defeated("a"), "true")
    assert v.incoming == [(2, 3)] and v.defeated == {"a"} and v.opponents() == []
    obs.feed(t.players_list, "not json")  # unreadable: ignored, nothing changes
    assert v.players == ["me", "a"]
    obs.feed(t.state, "over")
    obs.feed(t.state, "lobby")
    assert v.game == 1 and v.players == [] and v.salvos == {} and v.state == "lobby"


def test_hits_are_deduplicated_per_game_not_across_games() -> None:
    """(v2.1) (turn, shot) is per game: the same pair in the next game is a
    new shot; the same (game, turn, shot) twice is one; a late hit of
    another game is not this one's."""
    t = Topics()
    v = View("me")
    obs = Observer(v, t)
    obs.feed(t.game_id, "g1")
    obs.feed(t.state, "turn")
    hit = '{"x":2,"y":3,"turn":1,"shot":1,"game":"%s"}'
    assert isinstance(obs.feed(t.hit("me"), hit % "g1"), ShotAtMe)
    assert obs.feed(t.hit("me"), hit % "g1") is None  # delivered twice
    assert obs.feed(t.hit("me"), hit % "g0") is None  # a game before's, late
    # the next game, seen without its lobby (a client that missed the reset):
    # its (turn 1, shot 1) is a new shot all the same
    obs.feed(t.game_id, "g2")
    assert isinstance(obs.feed(t.hit("me"), hit % "g2"), ShotAtMe)
    assert v.incoming == [(2, 3), (2, 3)]
    # a v2 referee's hit (no game) is still taken, once
    assert isinstance(obs.feed(t.hit("me"), '{"x":5,"y":5,"turn":2,"shot":1}'), ShotAtMe)
    assert obs.feed(t.hit("me"), '{"x":5,"y":5,"turn":2,"shot":1}') is None


def test_a_fire_refusal_exposes_its_shot() -> None:
    t = Topics()
    obs = Observer(View("me"), t)
    report = (
        '{"topic":"/players/bob/fire","error":"e","code":"wrong_turn",'
        '"signature":"GBkaGxwdHh8gISIj","shot":{"target":"bob","x":3,"y":4}}'
    )
    event = obs.feed(t.player_error("me"), report)
    assert isinstance(event, ErrorReported) and event.shot == ("bob", 3, 4)
    assert event.report.signature == "GBkaGxwdHh8gISIj"
    bare = obs.feed(t.player_error("me"), '{"topic":"/players/bob/fire","error":"e","code":"malformed"}')
    assert isinstance(bare, ErrorReported) and bare.shot is None


def test_refused_shots_are_told_once_each_and_found_by_their_signature() -> None:
    """A restart tells a refusal again (its backlog): one entry; a report
    without a shot is matched to what this client signed by its signature."""
    t = Topics()
    v = View("me")
    obs = Observer(v, t)
    report = '{"topic":"/players/bob/fire","error":"e","code":"wrong_turn","signature":"%s"%s}'
    obs.feed(t.player_error("me"), report % ("GBkaGxwdHh8gISIj", ',"shot":{"target":"bob","x":3,"y":4}'))
    obs.feed(t.player_error("me"), report % ("GBkaGxwdHh8gISIj", ',"shot":{"target":"bob","x":3,"y":4}'))
    obs.feed(t.player_error("me"), report % ("AAAAAAAAAAAAAAAA", ""))
    obs.feed(t.player_error("me"), report % ("BBBBBBBBBBBBBBBB", ""))  # not one of ours: no shot to name
    signed = {"AAAAAAAAAAAAAAAA": ("carol", 1, 2)}
    assert refused(v.errors, signed) == [(("bob", 3, 4), Code.WRONG_TURN), (("carol", 1, 2), Code.WRONG_TURN)]
