"""Strategies for bots, usable in memory and over MQTT.

``make_strategy("density", seed=1)``; see :class:`~salvo.sdk.strategy.Strategy`
to write your own.
"""

from __future__ import annotations

from salvo.sdk.bots.density import Density
from salvo.sdk.bots.hunt_target import HuntTarget
from salvo.sdk.bots.random_ import RandomStrategy
from salvo.sdk.strategy import Strategy

STRATEGIES: dict[str, type[Strategy]] = {
    RandomStrategy.name: RandomStrategy,
    HuntTarget.name: HuntTarget,
    Density.name: Density,
}


def make_strategy(name: str, seed: int | str | None = None) -> Strategy:
    try:
        return STRATEGIES[name](seed)
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}") from None


__all__ = ["STRATEGIES", "Density", "HuntTarget", "RandomStrategy", "Strategy", "make_strategy"]
