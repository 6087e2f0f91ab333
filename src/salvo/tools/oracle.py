"""The game of Battleship: Salvo as the protocol states it (spec sections 5-7),
for judging a referee from outside.

The one oracle of the conformance suite (:mod:`salvo.tools.conformance.model`
scripts game 1 on it) and of the chaos harness (:mod:`salvo.tools.gamemodel`
predicts every publish from it). Written from the protocol, not from the
engine: it shares no code with :mod:`salvo.game` or :mod:`salvo.spec.rules`,
so a wrong ship length, sink or turn order there cannot hide here too.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: ship id -> length, in the order the protocol lists them
SHIPS = {"carrier": 5, "battleship": 4, "destroyer": 3, "submarine": 3, "patrolboat": 2}
BOARD = 10
Cell = tuple[int, int]
#: ship -> (x, y, orientation): the top-left cell, HORIZONTAL towards +x
Fleet = dict[str, tuple[int, int, str]]


def cells_of(x: int, y: int, orientation: str, length: int) -> list[Cell]:
    return [(x + i, y) if orientation == "HORIZONTAL" else (x, y + i) for i in range(length)]


def ship_cells(fleet: Fleet) -> dict[Cell, str]:
    """Every cell a ship covers, and whose it is."""
    return {c: s for s, (x, y, o) in fleet.items() for c in cells_of(x, y, o, SHIPS[s])}


def empty_cells(fleet: Fleet) -> list[Cell]:
    """The cells no ship covers, row by row."""
    taken = ship_cells(fleet)
    return [(x, y) for y in range(BOARD) for x in range(BOARD) if (x, y) not in taken]


def random_fleet(rng: random.Random) -> Fleet:
    """Five ships at random places, on the board, not overlapping."""
    taken: set[Cell] = set()
    fleet: Fleet = {}
    for ship, n in SHIPS.items():
        while True:
            orientation = rng.choice(("HORIZONTAL", "VERTICAL"))
            x = rng.randrange(BOARD + 1 - n if orientation == "HORIZONTAL" else BOARD)
            y = rng.randrange(BOARD if orientation == "HORIZONTAL" else BOARD + 1 - n)
            cells = set(cells_of(x, y, orientation, n))
            if not cells & taken:
                break
        taken |= cells
        fleet[ship] = (x, y, orientation)
    return fleet


@dataclass(frozen=True)
class Outcome:
    """What one salvo did: its hits (a cell hit again counts again, spec 6),
    the ships it sank (owner, ship) and the players it defeated, in play order."""

    hits: int
    sunk: list[tuple[str, str]]
    defeated: list[str]


class Oracle:
    """The state of one game whose players play in ``order``: hits, sinks,
    defeats, whose turn follows whose, and the end-of-game statistics."""

    def __init__(self, fleets: dict[str, Fleet], order: Sequence[str]):
        self.fleets = fleets
        self.order = list(order)
        self.ships = {n: ship_cells(f) for n, f in fleets.items()}
        self.hit: dict[str, set[Cell]] = {n: set() for n in self.order}
        self.sunk: dict[str, list[str]] = {n: [] for n in self.order}
        self.sunk_in: dict[tuple[str, str], int] = {}  # (owner, ship) -> the turn it sank in
        self.defeated: dict[str, int] = {}  # player -> the turn it lost its last ship in
        self.shots = dict.fromkeys(self.order, 0)
        self.hits = dict.fromkeys(self.order, 0)
        self.credits = dict.fromkeys(self.order, 0)  # ships of others a player sank
        self.turns = 0  # the last turn fired

    def afloat(self, name: str) -> int:
        """A player's ships still afloat: the shots its turn allows (spec 6)."""
        return len(SHIPS) - len(self.sunk[name])

    def alive(self) -> list[str]:
        return [p for p in self.order if p not in self.defeated]

    @property
    def over(self) -> bool:
        return len(self.alive()) <= 1

    @property
    def winner(self) -> str:
        alive = self.alive()
        return alive[0] if len(alive) == 1 else ""

    def next_after(self, name: str) -> str:
        """Whose turn follows ``name``'s: the next in play order still in."""
        i = self.order.index(name)
        return next(p for p in self.order[i + 1 :] + self.order[: i + 1] if p not in self.defeated)

    def unhit_ship_cells(self, name: str) -> list[Cell]:
        """The cells of a player's ships not hit yet, ship by ship."""
        fleet = self.fleets[name]
        return [c for s, n in SHIPS.items() if s in fleet for c in cells_of(*fleet[s], n) if c not in self.hit[name]]

    def fire(self, shooter: str, turn: int, shots: Sequence[tuple[str, Cell]]) -> Outcome:
        """``shooter``'s salvo of ``turn``, as (target, cell) per shot, was
        accepted: its hits, then the sinks and defeats it caused."""
        hits = 0
        for target, c in shots:
            if c in self.ships[target]:
                hits += 1
                self.hit[target].add(c)
        self.shots[shooter] += len(shots)
        self.hits[shooter] += hits
        self.turns = max(self.turns, turn)
        sunk = []
        for owner in self.order:
            fleet, gone = self.fleets[owner], self.sunk[owner]
            for ship, length in SHIPS.items():
                if ship in fleet and ship not in gone and set(cells_of(*fleet[ship], length)) <= self.hit[owner]:
                    self.sunk[owner].append(ship)
                    self.sunk_in[owner, ship] = turn
                    self.credits[shooter] += owner != shooter
                    sunk.append((owner, ship))
        defeated = [p for p in self.order if p not in self.defeated and not self.afloat(p)]
        for p in defeated:
            self.defeated[p] = turn
        return Outcome(hits, sunk, defeated)

    def summary(self) -> dict[str, Any]:
        """``/game/stats/summary`` but its duration."""
        return {
            "winner": self.winner or None,
            "turns": self.turns,
            "shots": sum(self.shots.values()),
            "hits": sum(self.hits.values()),
            "termination": "victory" if self.winner else "draw",
        }

    def stats(self, name: str) -> dict[str, Any]:
        """``/game/stats/players/<name>``: the later a player fell, the better its place."""
        lasted = {p: self.defeated.get(p, 10**9) for p in self.order}
        shots, hits = self.shots[name], self.hits[name]
        return {
            "place": 1 + sum(lasted[p] > lasted[name] for p in self.order),
            "shots": shots,
            "hits": hits,
            "accuracy": round(hits / shots, 4) if shots else 0.0,
            "ships_sunk": self.credits[name],
            "ships_lost": len(self.sunk[name]),
            "defeated_in_turn": self.defeated.get(name),
            "reason": "sunk" if name in self.defeated else None,
        }
