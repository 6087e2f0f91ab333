"""Public path of the bundled bots: ``from salvo.bots import make_strategy``.

They live in :mod:`salvo.sdk.bots`; this module only names them for teams.
Code inside salvo imports the real home.
"""

from salvo.sdk.bots import STRATEGIES, Density, HuntTarget, RandomStrategy, make_strategy
from salvo.sdk.strategy import Strategy

__all__ = ["STRATEGIES", "Density", "HuntTarget", "RandomStrategy", "Strategy", "make_strategy"]
