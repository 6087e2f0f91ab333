"""The rules of Battleship: Salvo that do not depend on game state.

Board 10 x 10; ``x`` is the column (0..9, left to right), ``y`` the row (0..9,
top to bottom). A cell is stored as the int ``y * 10 + x`` because the engine
looks cells up on every shot and ints hash fastest.

A ship is placed by its top-left cell and an orientation: ``HORIZONTAL``
extends towards +x, ``VERTICAL`` towards +y. Ships may touch, may not overlap
and must lie wholly on the board.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import Final

from salvo.spec.errors import Code, Illegal

BOARD_SIZE: Final = 10

#: Ship ids (exactly these lower-case ids appear in topics) and lengths, in the
#: order the referee announces them.
FLEET: Final[dict[str, int]] = {
    "carrier": 5,
    "battleship": 4,
    "destroyer": 3,
    "submarine": 3,
    "patrolboat": 2,
}
SHIP_IDS: Final[tuple[str, ...]] = tuple(FLEET)


class Orientation(enum.Enum):
    HORIZONTAL = "HORIZONTAL"
    VERTICAL = "VERTICAL"


def cell(x: int, y: int) -> int:
    return y * BOARD_SIZE + x


def xy(c: int) -> tuple[int, int]:
    return c % BOARD_SIZE, c // BOARD_SIZE


def on_board(x: int, y: int) -> bool:
    return 0 <= x < BOARD_SIZE and 0 <= y < BOARD_SIZE


#: The bits of a vertical ship of each length with its top at cell 0.
_VERTICAL_MASKS: Final = {n: sum(1 << (i * BOARD_SIZE) for i in range(n)) for n in set(FLEET.values())}


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one ship lies: its top-left cell and its orientation."""

    x: int
    y: int
    orientation: Orientation

    def cells(self, length: int) -> tuple[int, ...]:
        # cell() is linear in x and y: the cells are an arithmetic progression
        # (a range, not a generator of cell() calls: random fleets call this a lot).
        step = 1 if self.orientation is Orientation.HORIZONTAL else BOARD_SIZE
        start = self.y * BOARD_SIZE + self.x
        return tuple(range(start, start + length * step, step))

    def mask(self, length: int) -> int:
        """The cells as bits (bit ``c`` for cell ``c``): overlap is one ``&``."""
        start = self.y * BOARD_SIZE + self.x
        if self.orientation is Orientation.HORIZONTAL:
            return ((1 << length) - 1) << start
        return _VERTICAL_MASKS[length] << start

    def fits(self, length: int) -> bool:
        x, y = self.x, self.y
        if self.orientation is Orientation.HORIZONTAL:
            return 0 <= y < BOARD_SIZE and 0 <= x <= BOARD_SIZE - length
        return 0 <= x < BOARD_SIZE and 0 <= y <= BOARD_SIZE - length

    def describe(self) -> str:
        return f"{self.x};{self.y} {self.orientation.value}"


def placement_error(fleet: dict[str, Placement], ship: str, placement: Placement) -> Illegal | None:
    """Why ``placement`` of ``ship`` is illegal beside the rest of ``fleet``, or None.

    ``fleet`` may already hold ``ship`` (a move): its old cells do not count.
    Reasons name only the player's own ships, never coordinates of others.
    """
    length = FLEET.get(ship)
    if length is None:
        return Illegal(Code.UNKNOWN_SHIP, f"unknown ship {ship!r}; ships are {', '.join(SHIP_IDS)}")
    if not placement.fits(length):
        return Illegal(
            Code.OFF_BOARD,
            f"off the board: {ship} (length {length}) at {placement.describe()} "
            f"does not fit on the {BOARD_SIZE}x{BOARD_SIZE} board",
        )
    wanted = placement.mask(length)
    for other, where in fleet.items():
        if other != ship and wanted & where.mask(FLEET[other]):
            return Illegal(Code.OVERLAP, f"overlap: {ship} at {placement.describe()} overlaps your {other}")
    return None


def fleet_is_legal(fleet: dict[str, Placement]) -> bool:
    """True when ``fleet`` holds every ship exactly once, legally placed."""
    if set(fleet) != set(FLEET):
        return False
    return all(placement_error(fleet, ship, p) is None for ship, p in fleet.items())


def _spots(length: int) -> tuple[tuple[Placement, int], ...]:
    """Every placement of a ship of ``length`` that fits the board, with its bits."""
    every = (Placement(x, y, o) for o in Orientation for y in range(BOARD_SIZE) for x in range(BOARD_SIZE))
    return tuple((p, p.mask(length)) for p in every if p.fits(length))


#: Built once: random fleets (every bot, every benchmark game) draw from these.
_SPOTS: Final = {n: _spots(n) for n in set(FLEET.values())}


def random_fleet(rng: random.Random) -> dict[str, Placement]:
    """A uniformly drawn legal fleet: each ship in turn at a random spot on the
    board that does not overlap the ships before it."""
    while True:
        fleet: dict[str, Placement] = {}
        taken = 0
        for ship, length in FLEET.items():
            spots = _SPOTS[length]
            for _ in range(100):
                p, bits = spots[rng.randrange(len(spots))]
                if not taken & bits:
                    fleet[ship] = p
                    taken |= bits
                    break
            else:
                break  # boxed in: start again
        if len(fleet) == len(FLEET):
            return fleet
