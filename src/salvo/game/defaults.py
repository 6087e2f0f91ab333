"""The game's default settings: the one place they are spelled.

:class:`salvo.game.events.Config` takes its field defaults from here, and
the CLI's options show them (``--help``) without importing the game (this
module imports nothing, so ``salvo --help`` stays fast).
"""

from __future__ import annotations

from typing import Final

PLACEMENT_TIMEOUT_S: Final = 60.0
TURN_TIMEOUT_S: Final = 30.0
RESET_AFTER_S: Final = 300.0
MIN_PLAYERS: Final = 2
MAX_PLAYERS: Final = 10
MAX_MISSED_TURNS: Final = 3
PACE_S: Final = 0.0
#: A tournament's arenas reset sooner: the next game of the schedule waits on it.
TOURNAMENT_RESET_AFTER_S: Final = 10.0
