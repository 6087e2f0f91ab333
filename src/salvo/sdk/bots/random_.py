"""``random``: every shot at a random live opponent's random unshot cell."""

from __future__ import annotations

from salvo.sdk.strategy import Salvo, Strategy
from salvo.sdk.view import Shot, View


class RandomStrategy(Strategy):
    name = "random"

    def choose(self, view: View, shots: int) -> list[Shot]:
        shot = {t: view.evidence(t).shot for t in view.opponents()}
        return Salvo(view, shots).fill_randomly(view, self.rng, shot)
