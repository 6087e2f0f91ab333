"""The suite's own model of a game: what must happen, given the shots the
referee accepted. The rules come from the protocol (salvo.spec.rules is its
board and fleet, no referee code)."""

from __future__ import annotations

from dataclasses import dataclass, field

from salvo.spec.rules import BOARD_SIZE, FLEET, SHIP_IDS, Orientation, Placement, cell

H, V = Orientation.HORIZONTAL, Orientation.VERTICAL


@dataclass
class Board:
    fleet: dict[str, Placement]
    hit: set[int] = field(default_factory=set)
    sunk: list[str] = field(default_factory=list)

    def ships(self) -> dict[int, str]:
        return {c: s for s, p in self.fleet.items() for c in p.cells(FLEET[s])}

    def empty_cells(self) -> list[tuple[int, int]]:
        taken = self.ships()
        return [(c % BOARD_SIZE, c // BOARD_SIZE) for c in range(BOARD_SIZE**2) if c not in taken]

    def unhit_ship_cells(self) -> list[tuple[int, int]]:
        return [
            (c % BOARD_SIZE, c // BOARD_SIZE)
            for s in SHIP_IDS
            for c in self.fleet[s].cells(FLEET[s])
            if c not in self.hit
        ]


@dataclass
class Model:
    boards: dict[str, Board]
    order: list[str] = field(default_factory=list)
    defeated: dict[str, int] = field(default_factory=dict)
    shots: dict[str, int] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)

    def afloat(self, name: str) -> int:
        return len(FLEET) - len(self.boards[name].sunk)

    def next_after(self, name: str) -> str:
        i = self.order.index(name)
        return next(n for n in self.order[i + 1 :] + self.order[: i + 1] if n not in self.defeated)

    def apply(
        self, shooter: str, turn: int, shots: list[tuple[str, int, int]]
    ) -> tuple[int, set[tuple[str, str]], set[str]]:
        """A salvo's accepted shots: its hits, the ships it sank, the players
        it defeated."""
        hits = 0
        for target, x, y in shots:
            b = self.boards[target]
            if cell(x, y) in b.ships():
                hits += 1
                b.hit.add(cell(x, y))
        self.shots[shooter] = self.shots.get(shooter, 0) + len(shots)
        self.hits[shooter] = self.hits.get(shooter, 0) + hits
        sunk = set()
        for owner in self.order:
            b = self.boards[owner]
            for ship in SHIP_IDS:
                if ship not in b.sunk and set(b.fleet[ship].cells(FLEET[ship])) <= b.hit:
                    b.sunk.append(ship)
                    sunk.add((owner, ship))
        newly = {n for n in self.order if n not in self.defeated and not self.afloat(n)}
        for n in newly:
            self.defeated[n] = turn
        return hits, sunk, newly

    def plan(self, names: tuple[str, str, str], shooter: str, n: int) -> list[tuple[str, int, int]]:
        """Game 1's script, for teams ``(a, b, c)``: c dies first, then b; a
        wins. c fires at itself (empty cells); b at a's empty cells once c is
        gone. The first salvo at c repeats a cell (both shots must hit)."""
        a, b, c = names
        if shooter == c:
            return [(c, x, y) for x, y in self.boards[c].empty_cells()[:n]]
        victim = c if c not in self.defeated else b
        if shooter == b and victim == b:
            return [(a, x, y) for x, y in self.boards[a].empty_cells()[:n]]
        todo = self.boards[victim].unhit_ship_cells()
        if not self.boards[victim].hit and n >= 2 and todo:
            todo = [todo[0], *todo]
        cells = todo[:n] + self.boards[victim].empty_cells()[: max(0, n - len(todo))]
        return [(victim, x, y) for x, y in cells]


def fleet_rows(y0: int) -> dict[str, Placement]:
    return {s: Placement(0, y0 + i, H) for i, s in enumerate(SHIP_IDS)}


def fleet_columns(x0: int) -> dict[str, Placement]:
    return {s: Placement(x0 + i, 0, V) for i, s in enumerate(SHIP_IDS)}
