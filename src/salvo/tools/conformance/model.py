"""The suite's script of game 1, played on the shared oracle
(:mod:`salvo.tools.oracle`): what must happen, given the shots the referee
accepted. The fleets are sent as the wire's placements (salvo.spec.rules);
the rules they are judged by are the oracle's, no referee code."""

from __future__ import annotations

from salvo.spec.rules import SHIP_IDS, Orientation, Placement
from salvo.tools.oracle import Cell, Fleet, Oracle, empty_cells

H, V = Orientation.HORIZONTAL, Orientation.VERTICAL


def as_fleet(placements: dict[str, Placement]) -> Fleet:
    """The wire's placements as the oracle's fleet."""
    return {s: (p.x, p.y, p.orientation.value) for s, p in placements.items()}


def empty_cells_of(placements: dict[str, Placement]) -> list[Cell]:
    return empty_cells(as_fleet(placements))


class Model(Oracle):
    """Game 1 on the oracle, with the suite's plan of every salvo."""

    def __init__(self, placements: dict[str, dict[str, Placement]], order: list[str]):
        super().__init__({n: as_fleet(p) for n, p in placements.items()}, order)

    def apply(
        self, shooter: str, turn: int, shots: list[tuple[str, int, int]]
    ) -> tuple[int, set[tuple[str, str]], set[str]]:
        """A salvo's accepted shots: its hits, the ships it sank, the players
        it defeated."""
        outcome = self.fire(shooter, turn, [(target, (x, y)) for target, x, y in shots])
        return outcome.hits, set(outcome.sunk), set(outcome.defeated)

    def plan(self, names: tuple[str, str, str], shooter: str, n: int) -> list[tuple[str, int, int]]:
        """Game 1's script, for teams ``(a, b, c)``: c dies first, then b; a
        wins. c fires at itself (empty cells); b at a's empty cells once c is
        gone. The first salvo at c repeats a cell (both shots must hit)."""
        a, b, c = names
        if shooter == c:
            return [(c, x, y) for x, y in empty_cells(self.fleets[c])[:n]]
        victim = c if c not in self.defeated else b
        if shooter == b and victim == b:
            return [(a, x, y) for x, y in empty_cells(self.fleets[a])[:n]]
        todo = self.unhit_ship_cells(victim)
        if not self.hit[victim] and n >= 2 and todo:
            todo = [todo[0], *todo]
        cells = todo[:n] + empty_cells(self.fleets[victim])[: max(0, n - len(todo))]
        return [(victim, x, y) for x, y in cells]


def fleet_rows(y0: int) -> dict[str, Placement]:
    return {s: Placement(0, y0 + i, H) for i, s in enumerate(SHIP_IDS)}


def fleet_columns(x0: int) -> dict[str, Placement]:
    return {s: Placement(x0 + i, 0, V) for i, s in enumerate(SHIP_IDS)}
