"""Public path of the SDK: ``from salvo.client import SalvoClient`` (docs/sdk.md).

The client lives in :mod:`salvo.sdk.client`, its exceptions and records in
:mod:`salvo.sdk.outcomes`; this module only names them for teams. Code
inside salvo imports the real homes.
"""

from salvo.sdk.client import SalvoClient
from salvo.sdk.outcomes import (
    GameAborted,
    GameRecord,
    JoinRefused,
    LobbyClosed,
    PlacementRefused,
    SalvoError,
    TurnToPlay,
)

__all__ = [
    "GameAborted",
    "GameRecord",
    "JoinRefused",
    "LobbyClosed",
    "PlacementRefused",
    "SalvoClient",
    "SalvoError",
    "TurnToPlay",
]
