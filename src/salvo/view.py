"""Public path of what one player knows: ``from salvo.view import ErrorReported`` (docs/sdk.md).

It lives in :mod:`salvo.sdk.view`; this module only names it for teams.
Code inside salvo imports the real home.
"""

from salvo.sdk.view import (
    ErrorReported,
    Evidence,
    GameEvent,
    GameOver,
    MySalvo,
    Observer,
    PlayerDefeated,
    PlayersChanged,
    RefereePresence,
    SalvoEnded,
    ShipApproved,
    ShipSunk,
    Shot,
    ShotAtMe,
    StateChanged,
    StatsPublished,
    TurnStarted,
    View,
    placements,
)

__all__ = [
    "ErrorReported",
    "Evidence",
    "GameEvent",
    "GameOver",
    "MySalvo",
    "Observer",
    "PlayerDefeated",
    "PlayersChanged",
    "RefereePresence",
    "SalvoEnded",
    "ShipApproved",
    "ShipSunk",
    "Shot",
    "ShotAtMe",
    "StateChanged",
    "StatsPublished",
    "TurnStarted",
    "View",
    "placements",
]
