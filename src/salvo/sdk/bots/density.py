"""``density``: probability density over the legal positions of every ship
still afloat, per live opponent.

For each remaining ship, every placement that avoids known misses and cells of
ships known sunk is weighted: a factor per open hit it covers, a smaller one
per "maybe" cell (from salvos with some hits). A cell's score is the sum over
ships of the share of that ship's weight covering it, an estimate of the
chance it holds a ship, comparable across opponents. The salvo takes the best
unshot (opponent, cell) pairs overall, so shots spread over live opponents
where that pays and concentrate where a hit is likely.
"""

from __future__ import annotations

from salvo.sdk.strategy import Salvo, Strategy
from salvo.sdk.view import Evidence, Shot, View, placements
from salvo.spec.rules import FLEET

#: How much likelier a placement through an open hit is than one that is not
#: (tuned on 1000 fleets: 10 and 300 beat 30; see docs/strategies.md).
HIT_WEIGHT = 10.0


def cell_scores(ev: Evidence, ships: list[str]) -> dict[int, float]:
    """Estimated chance that each cell holds one of ``ships``."""
    blocked = ev.misses | ev.resolved
    open_hits = ev.open_hits
    scores: dict[int, float] = {}
    for ship in ships:
        weights: list[tuple[frozenset[int], float]] = []
        total = 0.0
        for cells in placements(FLEET[ship]):
            if not blocked.isdisjoint(cells):
                continue
            w = HIT_WEIGHT ** len(cells & open_hits)
            for c in cells.intersection(ev.maybe):
                w *= 1.0 + (HIT_WEIGHT - 1.0) * ev.maybe[c]
            weights.append((cells, w))
            total += w
        if total == 0:
            continue
        for cells, w in weights:
            share = w / total
            for c in cells:
                scores[c] = scores.get(c, 0.0) + share
    return scores


class Density(Strategy):
    name = "density"

    def choose(self, view: View, shots: int) -> list[Shot]:
        salvo = Salvo(view, shots)
        ranked: list[tuple[float, float, str, int]] = []
        evidence: dict[str, Evidence] = {}
        for target in view.opponents():
            ev = evidence[target] = view.evidence(target)
            for c, score in cell_scores(ev, view.remaining_ships(target)).items():
                if c not in ev.shot and c not in ev.hits:
                    ranked.append((score, self.rng.random(), target, c))
        ranked.sort(reverse=True)
        for _score, _tie, target, c in ranked:
            if salvo.full():
                break
            salvo.add(target, c)
        return salvo.fill_randomly(view, self.rng, {t: ev.shot for t, ev in evidence.items()})
