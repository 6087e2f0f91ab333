"""Public path of the strategy interface: ``salvo.strategy.Strategy`` (docs/sdk.md).

It lives in :mod:`salvo.sdk.strategy`; this module only names it for teams.
Code inside salvo imports the real home.
"""

from salvo.sdk.strategy import ALL_CELLS, Salvo, Strategy

__all__ = ["ALL_CELLS", "Salvo", "Strategy"]
