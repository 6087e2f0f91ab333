"""Shared helpers for the tests: fixed fleets, an in-memory game driver."""

from __future__ import annotations

import itertools
from typing import Any

from salvo.engine import Accepted, Config, Event, Fire, Game, Join, Place, Publish, Rejected, Result, Tick
from salvo.rules import FLEET, SHIP_IDS, Orientation, Placement
from salvo.topics import Topics

H, V = Orientation.HORIZONTAL, Orientation.VERTICAL

#: Ships on rows 0..4, left aligned: carrier (0..4,0), battleship (0..3,1), ...
ROWS: dict[str, Placement] = {s: Placement(0, i, H) for i, s in enumerate(SHIP_IDS)}
#: Ships in columns 5..9, top aligned.
COLUMNS: dict[str, Placement] = {s: Placement(5 + i, 0, V) for i, s in enumerate(SHIP_IDS)}


def ship_cells(fleet: dict[str, Placement], ship: str) -> list[tuple[int, int]]:
    return [(c % 10, c // 10) for c in fleet[ship].cells(FLEET[ship])]


def all_cells(fleet: dict[str, Placement]) -> list[tuple[int, int]]:
    return [xy for ship in SHIP_IDS for xy in ship_cells(fleet, ship)]


_nonces = itertools.count(1)


def nonce() -> bytes:
    return next(_nonces).to_bytes(24, "big")


class Driver:
    """Drives a :class:`Game` with a fake clock and records every publish."""

    def __init__(self, seed: int | str = 7, prefix: str = "", **config: Any) -> None:
        self.game = Game(Config(**config), Topics(prefix), seed=seed)
        self.now = 1_000.0
        self.published: list[Publish] = []
        self.fleets: dict[str, dict[str, Placement]] = {}

    @property
    def t(self) -> Topics:
        return self.game.topics

    def send(self, event: Event) -> Result:
        result = self.game.handle(event)
        if isinstance(result, Accepted):
            self.published += result.effects
        return result

    def ok(self, event: Event) -> list[Publish]:
        result = self.send(event)
        assert isinstance(result, Accepted), result
        return result.effects

    def rejected(self, event: Event, *fragments: str) -> str:
        """Send an event that must be rejected; the state must not change."""
        before = self.game.snapshot()
        result = self.game.handle(event)
        assert isinstance(result, Rejected), f"expected a rejection, got {result}"
        for fragment in fragments:
            assert fragment in result.error.reason, (fragment, result.error.reason)
        assert self.game.snapshot() == before, "a rejected event changed the state"
        return result.error.reason

    def join(self, *names: str) -> None:
        for name in names:
            self.ok(Join(name, name.encode().ljust(32, b"k"), self.now))

    def place(self, name: str, fleet: dict[str, Placement]) -> list[Publish]:
        out: list[Publish] = []
        for ship, placement in fleet.items():
            out += self.ok(Place(name, ship, placement, self.now))
        self.fleets[name] = dict(fleet)
        return out

    def fire(self, target: str, x: int, y: int, turn: int | None = None) -> list[Publish]:
        return self.ok(Fire(target, x, y, turn, nonce(), self.now))

    def tick(self, seconds: float) -> list[Publish]:
        self.now += seconds
        return self.ok(Tick(self.now))

    def start(self, fleets: dict[str, dict[str, Placement]]) -> None:
        self.join(*fleets)
        for name, fleet in fleets.items():
            self.place(name, fleet)

    def play_turn(self, shots: list[tuple[str, int, int]]) -> list[Publish]:
        out: list[Publish] = []
        for target, x, y in shots:
            out += self.fire(target, x, y)
        return out

    @property
    def cur(self) -> str:
        assert self.game.current is not None, "not in a turn"
        return self.game.current

    def misses(self, target: str, n: int) -> list[tuple[str, int, int]]:
        """``n`` shots at empty cells of ``target``."""
        taken = set(all_cells(self.fleets[target]))
        free = [(x, y) for y in range(10) for x in range(10) if (x, y) not in taken]
        return [(target, x, y) for x, y in free[:n]]

    def idle_turn(self) -> list[Publish]:
        """The current player fires its whole salvo at empty cells of its own board."""
        return self.play_turn(self.misses(self.cur, self.game.allowed))

    def attack(self, target: str, cells: list[tuple[int, int]]) -> list[Publish]:
        """One salvo of the current player at ``cells`` of ``target`` (consumed
        from the list), filled up with misses."""
        n = self.game.allowed
        batch = [(target, x, y) for x, y in cells[:n]]
        del cells[:n]
        return self.play_turn(batch + self.misses(target, n - len(batch)))

    def wear_down(self, target: str, cells: list[tuple[int, int]], shooter: str | None = None) -> None:
        """Play turns until ``cells`` of ``target`` are all hit; only ``shooter``
        (default: anyone but the target) attacks, everyone else idles."""
        while cells:
            if self.cur != target and shooter in (None, self.cur):
                self.attack(target, cells)
            else:
                self.idle_turn()


def topics_of(effects: list[Publish]) -> list[str]:
    return [p.topic for p in effects]
