"""The strategy interface: place a fleet; choose a salvo from a :class:`View`.

A strategy never sees more than its player may read, and the same object
plays in memory (:mod:`salvo.tools.sim`) and over MQTT (:mod:`salvo.sdk.client`).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import ClassVar

from salvo.sdk.view import Shot, View
from salvo.spec.rules import BOARD_SIZE, Placement, random_fleet, xy

ALL_CELLS = tuple(range(BOARD_SIZE * BOARD_SIZE))


class Strategy(ABC):
    """Subclass and implement :meth:`choose`; override :meth:`place_fleet`
    for a placement of your own."""

    name: ClassVar[str]

    def __init__(self, seed: int | str | None = None) -> None:
        self.rng = random.Random(seed)

    def place_fleet(self) -> dict[str, Placement]:
        return random_fleet(self.rng)

    @abstractmethod
    def choose(self, view: View, shots: int) -> list[Shot]:
        """Exactly ``shots`` shots ``(target, x, y)`` for this turn."""


class Salvo:
    """A salvo being assembled: no cell twice, only live opponents."""

    def __init__(self, view: View, size: int) -> None:
        self.size = size
        self.shots: list[Shot] = []
        self.taken: dict[str, set[int]] = {}

    def full(self) -> bool:
        return len(self.shots) >= self.size

    def add(self, target: str, c: int) -> bool:
        taken = self.taken.setdefault(target, set())
        if self.full() or c in taken:
            return False
        taken.add(c)
        x, y = xy(c)
        self.shots.append((target, x, y))
        return True

    def fill_randomly(self, view: View, rng: random.Random, shot: dict[str, set[int]]) -> list[Shot]:
        """Top the salvo up with random cells nobody fired at yet."""
        targets = view.opponents() or [p for p in view.players if p != view.me] or [view.me]
        while not self.full():
            target = rng.choice(targets)
            used = shot.get(target, set()) | self.taken.get(target, set())
            free = [c for c in ALL_CELLS if c not in used] or list(ALL_CELLS)
            self.add(target, rng.choice(free))
        return self.shots
