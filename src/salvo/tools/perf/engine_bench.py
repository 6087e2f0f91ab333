"""The engine alone: whole in-memory games through the referee's own
engine, where a game's time goes, and a knockout of 1024 teams."""

from __future__ import annotations

import multiprocessing
import os
import random
import time
from collections.abc import Callable
from typing import Final

from salvo.game.engine import Game
from salvo.game.events import Config, Event, Fire, Join, Place, Result
from salvo.spec.rules import BOARD_SIZE, random_fleet
from salvo.spec.topics import Topics
from salvo.tools.perf.results import Results

_ENGINE_CONFIG = Config()
_ENGINE_TOPICS = Topics()
_KEY = bytes(32)
#: tuple.__new__(Fire, ...): the driver's shots at half the cost of Fire(...) (1,900 instructions
#: against 3,500), so that the figures are the engine's, not the driver's.
_new: Final = tuple.__new__
_XY = [(c % BOARD_SIZE, c // BOARD_SIZE) for c in range(BOARD_SIZE * BOARD_SIZE)]


class EventClock:
    """Wall time inside :meth:`Game.handle`, by kind of event: where a game's
    time goes (each reading includes ~0.1 us of the clock itself)."""

    KINDS = ("lobby", "shot", "salvo_end")

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(self.KINDS, 0.0)
        self.counts = dict.fromkeys(self.KINDS, 0)
        self.last: Game | None = None  # the game timed last

    def wrap(self, game: Game) -> Callable[[Event], Result]:
        self.last = game
        handle, clock = game.handle, time.perf_counter

        def timed(event: Event) -> Result:
            t0 = clock()
            result = handle(event)
            dt = clock() - t0
            if not isinstance(event, Fire):
                kind = "lobby"
            else:  # a shot that ends its salvo leaves a new turn (no shots yet) or the game over
                kind = "salvo_end" if game.fired == 0 or game.current is None else "shot"
            self.seconds[kind] += dt
            self.counts[kind] += 1
            return result

        return timed


def engine_game(rng: random.Random, names: list[str], clock: EventClock | None = None) -> str | None:
    """One whole game of random shooters through the engine; the winner.

    Each shooter fires at each opponent in its own random order of the cells
    (then at random cells, should a salvo outlast the board)."""
    game = Game(_ENGINE_CONFIG, _ENGINE_TOPICS, rng.randrange(2**32))
    handle = clock.wrap(game) if clock else game.handle
    for name in names:
        handle(Join(name, _KEY, 0.0))
    for name in names:
        for ship, placement in random_fleet(rng).items():
            handle(Place(name, ship, placement, 0.0))
    # A shuffle by random sort keys: half the cost of rng.sample for this.
    rand = rng.random
    aims = {(a, b): sorted(_XY, key=lambda _xy: rand()) for a in names for b in names if a != b}
    players, duel = game.players, len(names) == 2
    # Two players: the opponent is always in (a defeat ends the game).
    opponents = {a: [b for b in names if b != a] for a in names}
    while (me := game.current) is not None:  # a current player exactly while a turn is on
        alive = opponents[me] if duel else [n for n in game.order if n != me and not players[n].defeated]
        many = len(alive) > 1  # else every shot of the salvo at the one opponent
        target = alive[0]
        todo = aims[me, target]
        turn, game_id = game.turn, game.game_id
        for _ in range(game.allowed):
            if many:
                target = alive[rng.randrange(len(alive))]
                todo = aims[me, target]
            x, y = todo.pop() if todo else _XY[rng.randrange(len(_XY))]
            handle(_new(Fire, (me, target, x, y, turn, game_id, None, 0.0)))
    return game.winner


def bench_engine(res: Results, games: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    for players, key in ((2, "engine.ms_per_game"), (4, "engine.ms_per_game_4p")):
        names = [f"p{i}" for i in range(players)]
        n = games if players == 2 else max(1, games // 4)
        t0 = time.perf_counter()
        for _ in range(n):
            engine_game(rng, names)
        dt = time.perf_counter() - t0
        res.put(key, dt / n * 1000)
        res.put(key.replace("ms_per_game", "games_per_s"), n / dt, 1)
    # Where a two-player game's time goes, from a separate timed run (the
    # clock costs time itself, so the games above run without it).
    clock, n = EventClock(), max(1, games // 2)
    for _ in range(n):
        engine_game(rng, ["p0", "p1"], clock)
    s, c = clock.seconds, clock.counts
    res.put("engine.shot_us", s["shot"] / max(1, c["shot"]) * 1e6, 2)
    res.put("engine.salvo_end_us", s["salvo_end"] / max(1, c["salvo_end"]) * 1e6, 2)
    res.put("engine.lobby_ms_per_game", s["lobby"] / n * 1000)
    inside = sum(s.values()) / n * 1000
    res.put("engine.outside_ms_per_game", max(0.0, res.figures["engine.ms_per_game"] - inside))
    res.meta["engine_events_per_game"] = {k: round(v / n, 1) for k, v in c.items()}


def _knockout_game(job: tuple[str, str, str]) -> str:
    """One knockout game; its own seed, so the result does not depend on
    which process plays it."""
    seed, a, b = job
    return engine_game(random.Random(seed), [a, b]) or a


def knockout(teams: int, seed: int = 1, workers: int = 1) -> tuple[str, int]:
    """A single-elimination knockout of ``teams`` (a power of two); the
    champion and the number of games played. A round's games are
    independent: with ``workers`` > 1 they are shared out to processes."""
    field_ = [f"team{i}" for i in range(teams)]
    played, round_no = 0, 0
    pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else None
    try:
        while len(field_) > 1:
            round_no += 1
            jobs = [(f"{seed}/{round_no}/{a}", a, b) for a, b in zip(field_[::2], field_[1::2], strict=True)]
            if pool is not None and len(jobs) >= 2 * workers:
                field_ = pool.map(_knockout_game, jobs, chunksize=max(1, len(jobs) // (4 * workers)))
            else:
                field_ = [_knockout_game(j) for j in jobs]
            played += len(jobs)
    finally:
        if pool is not None:
            pool.terminate()
    return field_[0], played


def bench_knockout(res: Results, teams: int) -> None:
    """On one core, and on all of them (an organiser simulating a night
    would use them all; the games of a round are independent)."""
    t0 = time.perf_counter()
    champion, played = knockout(teams)
    res.put(f"engine.knockout_{teams}_1core_s", time.perf_counter() - t0)
    cores = os.cpu_count() or 1
    t0 = time.perf_counter()
    same, _ = knockout(teams, workers=cores)
    res.put(f"engine.knockout_{teams}_s", time.perf_counter() - t0)
    assert same == champion, "the knockout must not depend on how it is shared out"
    res.meta[f"knockout_{teams}_games"] = played


# -- a broker ---------------------------------------------------------------------
