"""``hunt-target``: parity search, then work along hits.

Hunt: fire only at cells of one colour of a checkerboard stretched to the
shortest ship still afloat (no ship can hide between them). Target: around
open hits (hits no sunk ship explains), first extending lines of two or more
aligned hits, then the four neighbours; "maybe" cells of partly-hit salvos
come after certain hits.
"""

from __future__ import annotations

from salvo.sdk.strategy import ALL_CELLS, Salvo, Strategy
from salvo.sdk.view import Evidence, Shot, View
from salvo.spec.rules import FLEET, cell, on_board, xy

_DIRS = ((1, 0), (-1, 0), (0, 1), (0, -1))


def target_cells(ev: Evidence, hits: set[int]) -> list[int]:
    """Unshot cells worth firing at around ``hits``, best first."""
    line: list[int] = []
    near: list[int] = []
    for h in sorted(hits):
        hx, hy = xy(h)
        for dx, dy in _DIRS:
            nx, ny = hx + dx, hy + dy
            if not on_board(nx, ny):
                continue
            n = cell(nx, ny)
            if n in hits:
                # aligned pair: walk past the end of the run of hits
                ex, ey = nx, ny
                while on_board(ex, ey) and cell(ex, ey) in hits:
                    ex, ey = ex + dx, ey + dy
                if on_board(ex, ey) and cell(ex, ey) not in ev.shot:
                    line.append(cell(ex, ey))
            elif n not in ev.shot:
                near.append(n)
    seen: set[int] = set()
    return [c for c in line + near if not (c in seen or seen.add(c))]  # type: ignore[func-returns-value]


class HuntTarget(Strategy):
    name = "hunt-target"

    def choose(self, view: View, shots: int) -> list[Shot]:
        salvo = Salvo(view, shots)
        evidence = {t: view.evidence(t) for t in view.opponents()}
        # Target mode: opponents with open hits first, most hits first.
        for strength in ("hits", "maybe"):
            for t, ev in sorted(evidence.items(), key=lambda kv: -len(kv[1].open_hits)):
                hits = ev.open_hits if strength == "hits" else ev.open_hits | set(ev.maybe)
                for c in target_cells(ev, hits):
                    salvo.add(t, c)
        # Hunt mode: parity cells of a random opponent.
        tries = 0
        while not salvo.full() and evidence and tries < 4 * shots:
            tries += 1
            t = self.rng.choice(list(evidence))
            ev = evidence[t]
            step = min((FLEET[s] for s in view.remaining_ships(t)), default=2)
            used = ev.shot | salvo.taken.get(t, set())
            free = [c for c in ALL_CELLS if c not in used and sum(xy(c)) % step == 0]
            if free:
                salvo.add(t, self.rng.choice(free))
        return salvo.fill_randomly(view, self.rng, {t: ev.shot for t, ev in evidence.items()})
