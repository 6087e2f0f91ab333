"""The game oracle (salvo.tools.oracle) and the chaos verdict built on it,
without a broker: a log written from the oracle's own predictions passes
``gamemodel.check``; the same log with one rule broken does not."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest

from salvo.net.watch import Msg
from salvo.spec.topics import Topics
from salvo.tools.gamemodel import GameModel, Violation, check, random_fleet
from salvo.tools.oracle import SHIPS, Oracle, cells_of

NAMES = ["alice", "bob", "carol"]
T = Topics("x")


def played(seed: int) -> tuple[GameModel, list[Msg]]:
    """A whole game on the model, and what a faithful referee publishes for it."""
    rng = random.Random(seed)
    m = GameModel({n: random_fleet(rng) for n in NAMES}, NAMES, NAMES)
    log: list[Msg] = []

    def pub(topic: str, value: str, retain: bool = True) -> None:
        log.append(Msg(topic, value.encode(), retain, 0.0))

    pub(T.state, "lobby")
    pub(T.players_list, json.dumps(NAMES))
    pub(T.state, "turn")
    m.start("bob")
    while not m.over:
        n = m.turn
        pub(T.turn, json.dumps(m.turns_announced[n]))
        pub(T.current, m.current)
        target, cells = m.plan(rng)
        m.apply(target, cells)
        for k, (x, y) in enumerate(cells, 1):
            pub(T.hit(target), json.dumps({"x": x, "y": y, "turn": n, "shot": k}), False)
        pub(T.hits, str(m.salvos[n]["hits"]), False)
        pub(T.salvo, json.dumps(m.salvos[n]))
        for (owner, ship), when in m.sunk_in.items():
            if when == n:
                pub(T.sunk(owner, ship), "true")
        for name, when in m.defeated.items():
            if when == n:
                pub(T.defeated(name), "true")
    pub(T.winner, m.winner)
    pub(T.stats_summary, json.dumps({**m.summary(), "duration_s": 1.0}))
    for name in NAMES:
        pub(T.stats_player(name), json.dumps(m.stats(name)))
    pub(T.state, "over")
    return m, log


def verdict(m: GameModel, log: list[Msg]) -> list[Violation]:
    return check(m, log, 0, len(log), "x")


def test_a_faithful_log_passes() -> None:
    m, log = played(3)
    assert m.over and m.winner and len(log) > 100
    assert verdict(m, log) == []


def _edit(topic: str, change: Callable[[dict[str, object]], dict[str, object]]) -> Callable[[Msg], Msg]:
    def edit(msg: Msg) -> Msg:
        if msg.topic != topic:
            return msg
        return Msg(msg.topic, json.dumps(change(json.loads(msg.payload))).encode(), msg.retain, msg.at)

    return edit


def _plus(key: str) -> Callable[[dict[str, object]], dict[str, object]]:
    return lambda j: {**j, key: int(str(j[key])) + 1}


MUTANTS: dict[str, Callable[[GameModel], Callable[[Msg], Msg]]] = {
    "one shot too many in a turn": lambda m: _edit(T.turn, _plus("shots")),
    "a salvo's hits miscounted": lambda m: _edit(T.salvo, _plus("hits")),
    "the winner's sinks miscounted": lambda m: _edit(T.stats_player(m.winner), _plus("ships_sunk")),
    "the turn count wrong": lambda m: _edit(T.stats_summary, _plus("turns")),
}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_a_broken_rule_is_caught(mutant: str) -> None:
    m, log = played(3)
    bad = [MUTANTS[mutant](m)(msg) for msg in log]
    assert any(v.kind == "wrong" for v in verdict(m, bad)), mutant


def test_a_turn_to_the_wrong_player_is_caught() -> None:
    m, log = played(3)
    i = next(k for k, msg in enumerate(log) if msg.topic == T.turn and json.loads(msg.payload)["turn"] == 2)
    j = json.loads(log[i].payload)
    log[i] = Msg(T.turn, json.dumps({**j, "player": next(p for p in NAMES if p != j["player"])}).encode(), True, 0.0)
    assert verdict(m, log)


def test_a_sink_never_published_is_lost() -> None:
    m, log = played(3)
    kept = [msg for msg in log if not msg.topic.endswith("/sunk")]
    assert {v.kind for v in verdict(m, kept)} == {"lost"}


def test_the_oracle_scores_a_repeated_hit_and_sinks_at_the_salvos_end() -> None:
    fleet = {s: (0, i, "HORIZONTAL") for i, s in enumerate(SHIPS)}
    game = Oracle({"a": fleet, "b": fleet}, ["a", "b"])
    boat = cells_of(*fleet["patrolboat"], SHIPS["patrolboat"])
    out = game.fire("a", 1, [("b", boat[0]), ("b", boat[0]), ("b", (9, 9))])
    assert (out.hits, out.sunk, out.defeated) == (2, [], [])  # hit twice, still afloat
    out = game.fire("b", 2, [("b", boat[1])])  # its own ship: sunk, no credit
    assert out.sunk == [("b", "patrolboat")] and game.credits["b"] == 0 and game.afloat("b") == 4
    assert game.next_after("b") == "a" and not game.over
