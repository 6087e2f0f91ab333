"""Public path of the board and fleet rules: ``from salvo.rules import random_fleet``.

They live in :mod:`salvo.spec.rules`; this module only names them for teams.
Code inside salvo imports the real home.
"""

from salvo.spec.rules import (
    BOARD_SIZE,
    FLEET,
    SHIP_IDS,
    Orientation,
    Placement,
    cell,
    fleet_is_legal,
    on_board,
    placement_error,
    random_fleet,
    xy,
)

__all__ = [
    "BOARD_SIZE",
    "FLEET",
    "SHIP_IDS",
    "Orientation",
    "Placement",
    "cell",
    "fleet_is_legal",
    "on_board",
    "placement_error",
    "random_fleet",
    "xy",
]
