"""Strategies in memory: a solo benchmark and whole games through the engine.

* :func:`play_solo` - one shooter against one fleet with exact feedback
  (the classic single-player benchmark; ``shots_per_turn=1`` gives the
  published anchors: random ~96 shots, hunt/target with parity ~62,
  probability density ~42-45).
* :func:`play_game` - several strategies in a real game of the referee's
  engine. Each player's :class:`View` is fed only the messages that player
  may read (public topics and its own), exactly as over MQTT.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass, field

from salvo.game.engine import Game
from salvo.game.events import Accepted, Config, Fire, Join, Phase, Place
from salvo.sdk.strategy import Strategy
from salvo.sdk.view import MySalvo, Observer, View
from salvo.spec.payloads import Publish
from salvo.spec.rules import FLEET, SHIP_IDS, Placement, cell, on_board, random_fleet
from salvo.spec.topics import Topics, matches


@dataclass
class SoloResult:
    shots: int
    decisions: int
    decision_s: float


def play_solo(strategy: Strategy, fleet: dict[str, Placement], shots_per_turn: int = 1) -> SoloResult:
    """Shots ``strategy`` needs to sink ``fleet`` alone, with exact feedback."""
    me, target = "shooter", "target"
    view = View(me, state="turn", players=[me, target], current=me, allowed=shots_per_turn)
    owner = {c: s for s, p in fleet.items() for c in p.cells(FLEET[s])}
    damage: dict[str, set[int]] = {s: set() for s in SHIP_IDS}
    sunk = view.sunk.setdefault(target, [])
    shots = decisions = 0
    spent = 0.0
    while len(sunk) < len(FLEET):
        view.turn += 1
        t0 = time.perf_counter()
        chosen = strategy.choose(view, shots_per_turn)
        spent += time.perf_counter() - t0
        decisions += 1
        assert len(chosen) == shots_per_turn and all(t == target and on_board(x, y) for t, x, y in chosen), chosen
        salvo = MySalvo(view.turn, chosen, hits=0, accepted=len(chosen))
        for _t, x, y in chosen:
            ship = owner.get(cell(x, y))
            if ship is not None:
                damage[ship].add(cell(x, y))
                salvo.hits = (salvo.hits or 0) + 1
        shots += len(chosen)
        for ship in SHIP_IDS:
            if ship not in sunk and len(damage[ship]) == FLEET[ship]:
                sunk.append(ship)
                salvo.sunk.append((target, ship))
        view.salvos[view.turn] = salvo
    return SoloResult(shots, decisions, spent)


@dataclass
class SoloStats:
    strategy: str
    shots: list[int]
    ms_per_decision: float

    @property
    def mean(self) -> float:
        return statistics.mean(self.shots)

    @property
    def median(self) -> float:
        return statistics.median(self.shots)


def solo_benchmark(games: int = 500, shots_per_turn: int = 1, seed: int = 0) -> list[SoloStats]:
    """:func:`play_solo` for every strategy on the same ``games`` random fleets."""
    from salvo.sdk.bots import STRATEGIES, make_strategy

    fleets = [random_fleet(random.Random(f"{seed}/fleet/{i}")) for i in range(games)]
    out = []
    for name in STRATEGIES:
        results = [play_solo(make_strategy(name, f"{seed}/{i}"), f, shots_per_turn) for i, f in enumerate(fleets)]
        ms = 1000 * sum(r.decision_s for r in results) / sum(r.decisions for r in results)
        out.append(SoloStats(name, [r.shots for r in results], ms))
    return out


@dataclass
class SimGame:
    winner: str | None
    turns: int
    views: dict[str, View]
    published: int = 0
    rejected: list[str] = field(default_factory=list)


def play_game(
    strategies: dict[str, Strategy], seed: int | str = 0, config: Config | None = None, max_turns: int = 2000
) -> SimGame:
    """A whole game of the engine between ``strategies`` (name -> strategy)."""
    topics = Topics()
    game = Game(config or Config(), topics, seed)
    views = {name: View(name) for name in strategies}
    observers = {name: Observer(view, topics) for name, view in views.items()}
    readable = {name: [*topics.public_filters, topics.private_filter(name)] for name in strategies}
    result = SimGame(None, 0, views)
    now = 0.0

    def deliver(effects: list[Publish]) -> None:
        result.published += len(effects)
        for p in effects:
            for name, filters in readable.items():
                if any(matches(f, p.topic) for f in filters):
                    observers[name].feed(p.topic, p.payload)

    def send(event: Join | Place | Fire) -> None:
        outcome = game.handle(event)
        if isinstance(outcome, Accepted):
            deliver(outcome.effects)
        else:
            result.rejected.append(f"{event}: {outcome.error.reason}")

    rng = random.Random(f"{seed}/keys")
    for name in strategies:
        send(Join(name, rng.randbytes(32), now))
    for name, strategy in strategies.items():
        for ship, placement in strategy.place_fleet().items():
            send(Place(name, ship, placement, now))
    while game.phase is Phase.TURN and game.turn < max_turns:
        now += 1.0
        shooter = game.current
        assert shooter is not None
        view = views[shooter]
        shots = strategies[shooter].choose(view, game.allowed)
        view.record_salvo(shots)
        turn = game.turn
        for target, x, y in shots:
            send(Fire(shooter, target, x, y, turn, game.game_id, rng.randbytes(24), now))
        if game.turn == turn and game.phase is Phase.TURN:
            raise AssertionError(f"{shooter} fired {len(shots)} of {game.allowed} shots: {result.rejected[-3:]}")
    result.winner = game.winner
    result.turns = game.turn
    return result
